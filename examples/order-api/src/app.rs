//! [`OrderApi`]: the HTTP server, the outbox delivery service and the background bus.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrybus::rabbitmq::HostSettings;
use ferrybus::sea_orm::{
    BackgroundHandle, BusOutbox, DeliveryConfig, Migrator, OutboxDeliveryService,
};
use ferrybus::{BoxError, MessageFactory};
use sea_orm::{ConnectOptions, Database};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::bus::BackgroundBus;
use crate::config::Config;
use crate::orders::{create_schema, router, AppState};

/// The running order API.
#[derive(Debug)]
pub struct OrderApi {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    delivery: BackgroundHandle,
    bus: BackgroundBus,
}

impl OrderApi {
    /// Creates the tables, starts the bus in the background (RabbitMQ may be down), the outbox
    /// delivery service, and the HTTP server on `config.addr`.
    pub async fn start(config: &Config) -> Result<Self, BoxError> {
        let mut options = ConnectOptions::new(config.database_url.as_str());
        options
            .max_connections(10)
            .min_connections(0)
            .sqlx_logging(false);
        let db = Database::connect(options).await?;
        create_schema(&db, &config.orders_schema).await?;
        Migrator::new(config.storage.tables().clone())
            .run(&db)
            .await?;

        // The outbox needs no broker: only the host address to write into the rows.
        let host = HostSettings::parse(&config.amqp_url)?.host_address();
        let outbox = BusOutbox::new(MessageFactory::new(host), config.storage.clone());

        let bus = BackgroundBus::start(config);
        let delivery = OutboxDeliveryService::new(
            db.clone(),
            Arc::new(bus.sink(Duration::from_secs(5))),
            DeliveryConfig::new(config.storage.clone())
                .retry_backoff(Duration::from_millis(500), Duration::from_secs(5)),
        )
        .spawn();

        let state = AppState {
            db,
            outbox,
            schema: config.orders_schema.clone(),
        };
        let listener = tokio::net::TcpListener::bind(&config.addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown, signal) = oneshot::channel::<()>();
        let serve = axum::serve(listener, router(state)).with_graceful_shutdown(async {
            let _ = signal.await;
        });
        let server = tokio::spawn(async move { serve.await });
        tracing::info!(%addr, "order API listening");
        Ok(Self {
            addr,
            shutdown,
            server,
            delivery,
            bus,
        })
    }

    /// Where HTTP is served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the bus has connected to RabbitMQ.
    pub fn is_connected(&self) -> bool {
        self.bus.get().is_some()
    }

    /// Stops HTTP (requests in flight finish), the outbox delivery and the bus.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        let _ = self.server.await;
        self.delivery.stop().await;
        self.bus.stop().await;
        tracing::info!("order API stopped");
    }
}
