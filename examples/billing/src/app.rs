//! [`Billing`]: the whole service in one configuration tree — storage, both endpoints, the bus —
//! and the endpoint configurations the tests reuse.

use ferrybus::rabbitmq::QueueEndpointExt;
use std::time::Duration;

use example_contracts::{OrderPlaced, PaymentCaptured, PaymentRefunded};
use ferrybus::error::BoxError;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::sea_orm::PostgresStorage;
use ferrybus::{Consumer, EndpointConfig, RetryPolicy};
use ferrybus_telemetry::{BacklogThreshold, Health};
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

/// Opens billing's connection pool (sized for the endpoints' concurrency, the outbox delivery
/// workers, its listener and the inbox cleanup).
///
/// The pool does not ping a connection before lending it (`test_before_acquire(false)`): the
/// ping is one more round trip per transaction, and a connection the server closed fails its
/// first statement anyway, which the endpoint retries on a fresh connection (sqlx drops a
/// connection whose socket failed).
pub async fn connect(config: &Config) -> Result<DatabaseConnection, DbErr> {
    let mut options = ConnectOptions::new(config.database_url.as_str());
    let size = u32::try_from(2 * config.concurrency + 6).unwrap_or(32);
    options
        .max_connections(size)
        .min_connections(0)
        .test_before_acquire(false)
        .sqlx_logging(false);
    Database::connect(options).await
}

/// Billing's storage: MassTransit's inbox and outbox tables where `config` says, created when
/// missing (a .NET service may have created them already).
pub fn storage(config: &Config, db: DatabaseConnection) -> PostgresStorage {
    PostgresStorage::new(db)
        .tables(config.tables.clone())
        .migrate(true)
}

/// The `billing-invoice` endpoint: `consumer` behind the inbox and consumer outbox,
/// `retry ─▶ inbox (one transaction) ─▶ consumer`.
pub fn invoice_endpoint<C: Consumer<OrderPlaced>>(
    endpoint: EndpointConfig,
    config: &Config,
    consumer: C,
) -> EndpointConfig {
    queue_type(endpoint, config)
        .concurrency(config.concurrency)
        .bind_message_types(config.bind_message_types)
        .retry(retry_policy())
        .inbox()
        .consumer(consumer)
}

/// Quorum queues with an explicit delivery limit when `BILLING_QUORUM=1`.
fn queue_type(endpoint: EndpointConfig, config: &Config) -> EndpointConfig {
    if config.quorum {
        endpoint
            .quorum()
            .delivery_limit(crate::config::QUORUM_DELIVERY_LIMIT)
    } else {
        endpoint
    }
}

/// The `billing-payments` endpoint: the payment state machine, behind the inbox.
pub fn payments_endpoint(endpoint: EndpointConfig, config: &Config) -> EndpointConfig {
    let consumer = PaymentsConsumer::new(&config.billing_schema);
    queue_type(endpoint, config)
        .concurrency(config.concurrency)
        .bind_message_types(config.bind_message_types)
        .retry(retry_policy())
        .inbox()
        .consumer::<PaymentCaptured, _>(consumer.clone())
        .consumer::<PaymentRefunded, _>(consumer)
}

/// The running billing service.
#[derive(Debug)]
pub struct Billing {
    bus: RabbitMqBus,
    db: DatabaseConnection,
    storage: PostgresStorage,
}

impl Billing {
    /// Creates billing's own tables, connects the payment gateway, and starts the bus: it
    /// creates the inbox/outbox tables when missing, runs both endpoints on RabbitMQ and the
    /// outbox delivery (which also sweeps consumer-outbox messages an interrupted delivery left
    /// behind) and the inbox cleanup.
    pub async fn start(config: &Config) -> Result<Self, BoxError> {
        let db = connect(config).await?;
        schema::create(&db, &config.billing_schema, InvoiceKey::UniqueOrderId).await?;
        let gateway = PaymentGateway::connect(
            &config.database_url,
            &config.billing_schema,
            config.payment_delay,
        )
        .await?;
        let invoices = InvoiceConsumer::new(gateway, &config.billing_schema);
        let mut builder = RabbitMqBus::builder(&config.amqp_url);
        if let Some(path) = &config.amqp_tls_ca_file {
            let pem = std::fs::read_to_string(path)
                .map_err(|e| format!("AMQP_TLS_CA_FILE {}: {e}", path.display()))?;
            builder = builder.tls_root_certificates(pem);
        }
        let storage = storage(config, db.clone());
        let bus = builder
            .connection_name(config.connection_name.clone())
            .shutdown_timeout(config.shutdown_timeout)
            .connect_timeout(config.connect_timeout)
            .storage(storage.clone())
            .receive_endpoint(&config.invoice_queue, |e| {
                invoice_endpoint(e, config, invoices)
            })
            .receive_endpoint(&config.payments_queue, |e| payments_endpoint(e, config))
            .start()
            .await?;
        tracing::info!(
            invoice_queue = %config.invoice_queue,
            payments_queue = %config.payments_queue,
            concurrency = config.concurrency,
            "billing is running"
        );
        Ok(Self { bus, db, storage })
    }

    /// The bus (to publish, or to watch its events).
    pub fn bus(&self) -> &RabbitMqBus {
        &self.bus
    }

    /// Billing's connection pool.
    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Billing's health: the broker, both endpoints, the database and the outbox backlog.
    pub fn health(&self) -> Health {
        Health::new()
            .rabbitmq(&self.bus)
            .postgres(&self.storage, BacklogThreshold::default())
    }

    /// Stops consuming (in-flight messages finish), then the outbox delivery and the cleanup.
    pub async fn stop(self) {
        self.bus.stop().await;
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
