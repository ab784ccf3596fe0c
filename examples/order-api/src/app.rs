//! [`OrderApi`]: the HTTP server and the bus (which runs the outbox delivery).

use std::net::SocketAddr;
use std::time::Duration;

use ferrybus::error::BoxError;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::sea_orm::{BusOutbox, PostgresStorage};
use ferrybus::Publish as _;
use sea_orm::{ConnectOptions, Database};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::orders::{create_schema, router, AppState};
use crate::tracing_layer::trace_requests;
use ferrybus_telemetry::{BacklogThreshold, Health, Telemetry};

/// The running order API.
#[derive(Debug)]
pub struct OrderApi {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    bus: RabbitMqBus,
}

impl OrderApi {
    /// Creates the tables, starts the bus in the background (RabbitMQ may be down: it connects
    /// when it can) with its outbox delivery, and the HTTP server on `config.addr`, with
    /// `/health/live` and `/health/ready` (no `/metrics`: see [`start_with`](Self::start_with)).
    pub async fn start(config: &Config) -> Result<Self, BoxError> {
        Self::start_with(config, None).await
    }

    /// As [`start`](Self::start), also serving `telemetry`'s `/metrics`.
    pub async fn start_with(
        config: &Config,
        telemetry: Option<&Telemetry>,
    ) -> Result<Self, BoxError> {
        let mut options = ConnectOptions::new(config.database_url.as_str());
        options
            .max_connections(10)
            .min_connections(0)
            .sqlx_logging(false);
        let db = Database::connect(options).await?;
        create_schema(&db, &config.orders_schema).await?;
        let storage = PostgresStorage::new(db.clone())
            .tables(config.tables.clone())
            .migrate(true)
            .delivery_backoff(Duration::from_millis(500), Duration::from_secs(5));

        let listener = tokio::net::TcpListener::bind(&config.addr).await?;
        let addr = listener.local_addr()?;

        // Returns without waiting for the broker; the bus connects (and reconnects) in the
        // background. While RabbitMQ is unreachable a delivery waits up to the publish timeout,
        // then fails; the outbox delivery backs off and tries again, and the rows wait in the
        // outbox meanwhile.
        let bus = RabbitMqBus::builder(&config.amqp_url)
            .connection_name(config.connection_name.clone())
            .connect_timeout(config.connect_timeout)
            .publish_timeout(Duration::from_secs(10))
            .storage(storage.clone())
            .start_background()
            .await?;

        // The outbox needs no broker: only the host address to write into the rows.
        let outbox = BusOutbox::new(&storage, bus.message_factory());
        let state = AppState {
            db,
            outbox,
            schema: config.orders_schema.clone(),
        };
        let (shutdown, signal) = oneshot::channel::<()>();
        let health = Health::new()
            .rabbitmq(&bus)
            .postgres(&storage, BacklogThreshold::default());
        let mut app = router(state)
            .layer(axum::middleware::from_fn(trace_requests))
            .merge(ferrybus_telemetry::health_router(health));
        if let Some(telemetry) = telemetry {
            app = app.merge(ferrybus_telemetry::metrics_router(telemetry));
        }
        let serve = axum::serve(listener, app).with_graceful_shutdown(async {
            let _ = signal.await;
        });
        let server = tokio::spawn(async move { serve.await });
        tracing::info!(%addr, "order API listening");
        Ok(Self {
            addr,
            shutdown,
            server,
            bus,
        })
    }

    /// Where HTTP is served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the bus is connected to RabbitMQ right now.
    pub fn is_connected(&self) -> bool {
        self.bus.is_connected()
    }

    /// Stops HTTP (requests in flight finish), then the bus and its outbox delivery.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        let _ = self.server.await;
        self.bus.stop().await;
        tracing::info!("order API stopped");
    }
}
