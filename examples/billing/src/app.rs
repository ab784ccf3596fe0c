//! [`Billing`]: the whole service — tables, endpoints, bus, outbox delivery — and the endpoint
//! builders the tests reuse.

use std::sync::Arc;
use std::time::Duration;

use example_contracts::OrderPlaced;
use ferrybus::rabbitmq::{RabbitMqBus, ReceiveEndpoint};
use ferrybus::sea_orm::{
    BackgroundHandle, DeliveryConfig, InboxConfig, InboxLayer, Migrator, OutboxDeliveryService,
};
use ferrybus::{BoxError, Consumer, EndpointConfig, RetryPolicy};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr};

use crate::config::Config;
use crate::gateway::PaymentGateway;
use crate::invoice::InvoiceConsumer;
use crate::payments::PaymentsConsumer;
use crate::schema::{self, InvoiceKey};

/// The retry policy of both endpoints: two more tries, 100 ms and 500 ms later; then the message
/// goes to `<queue>_error` and a `Fault<T>` is published.
pub fn retry_policy() -> RetryPolicy {
    RetryPolicy::intervals([Duration::from_millis(100), Duration::from_millis(500)])
}

/// Opens billing's connection pool (sized for the endpoints' concurrency).
pub async fn connect(config: &Config) -> Result<DatabaseConnection, DbErr> {
    let mut options = ConnectOptions::new(config.database_url.as_str());
    let size = u32::try_from(2 * config.concurrency + 6).unwrap_or(32);
    options
        .max_connections(size)
        .min_connections(0)
        .sqlx_logging(false);
    Database::connect(options).await
}

/// Creates what billing needs: its own schema and tables, and the inbox/outbox tables when they
/// do not exist yet (MassTransit's shape; a .NET service may have created them already).
pub async fn prepare(
    db: &DatabaseConnection,
    config: &Config,
    key: InvoiceKey,
) -> Result<(), BoxError> {
    schema::create(db, &config.billing_schema, key).await?;
    Migrator::new(config.storage.tables().clone())
        .run(db)
        .await?;
    Ok(())
}

/// The `billing-invoice` endpoint with `consumer` behind the inbox and consumer outbox:
/// `retry ─▶ inbox (one transaction) ─▶ consumer`.
pub fn invoice_endpoint<C: Consumer<OrderPlaced>>(
    config: &Config,
    db: DatabaseConnection,
    consumer: C,
) -> ReceiveEndpoint {
    let endpoint = EndpointConfig::new(config.invoice_queue.clone())
        .concurrency(config.concurrency)
        .retry(retry_policy())
        .layer(InboxLayer::new(
            db,
            InboxConfig::new(config.storage.clone()),
        ))
        .consumer(consumer);
    ReceiveEndpoint::new(endpoint).bind_message_types(config.bind_message_types)
}

/// The `billing-payments` endpoint: the payment state machine, behind the inbox.
pub fn payments_endpoint(config: &Config, db: DatabaseConnection) -> ReceiveEndpoint {
    let consumer = PaymentsConsumer::new(&config.billing_schema);
    let endpoint = EndpointConfig::new(config.payments_queue.clone())
        .concurrency(config.concurrency)
        .retry(retry_policy())
        .layer(InboxLayer::new(
            db,
            InboxConfig::new(config.storage.clone()),
        ))
        .consumer::<example_contracts::PaymentCaptured, _>(consumer.clone())
        .consumer::<example_contracts::PaymentRefunded, _>(consumer);
    ReceiveEndpoint::new(endpoint).bind_message_types(config.bind_message_types)
}

/// The running billing service.
#[derive(Debug)]
pub struct Billing {
    bus: RabbitMqBus,
    delivery: BackgroundHandle,
    db: DatabaseConnection,
}

impl Billing {
    /// Creates the tables, connects the payment gateway, starts both endpoints on RabbitMQ and
    /// the outbox delivery service (which also sweeps consumer-outbox messages an interrupted
    /// delivery left behind).
    pub async fn start(config: &Config) -> Result<Self, BoxError> {
        let db = connect(config).await?;
        prepare(&db, config, InvoiceKey::UniqueOrderId).await?;
        let gateway = PaymentGateway::connect(
            &config.database_url,
            &config.billing_schema,
            config.payment_delay,
        )
        .await?;
        let invoices = InvoiceConsumer::new(gateway, &config.billing_schema);
        let bus = RabbitMqBus::builder(&config.amqp_url)
            .connection_name(config.connection_name.clone())
            .receive_endpoint(invoice_endpoint(config, db.clone(), invoices))
            .receive_endpoint(payments_endpoint(config, db.clone()))
            .start()
            .await?;
        let delivery = OutboxDeliveryService::new(
            db.clone(),
            Arc::new(bus.sink()),
            DeliveryConfig::new(config.storage.clone()),
        )
        .spawn();
        tracing::info!(
            invoice_queue = %config.invoice_queue,
            payments_queue = %config.payments_queue,
            concurrency = config.concurrency,
            "billing is running"
        );
        Ok(Self { bus, delivery, db })
    }

    /// The bus (to publish, or to watch its events).
    pub fn bus(&self) -> &RabbitMqBus {
        &self.bus
    }

    /// Billing's connection pool.
    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Stops consuming (in-flight messages finish), then stops the outbox delivery.
    pub async fn stop(self) {
        self.bus.stop().await;
        self.delivery.stop().await;
        tracing::info!("billing stopped");
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
