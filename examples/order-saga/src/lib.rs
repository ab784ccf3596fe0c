//! The order saga: MassTransit's `OrderStateMachine` in Rust, on RabbitMQ and PostgreSQL.
//!
//! ```text
//!             OrderSubmitted            InvoiceCreated            OrderShipped
//!  (Initial) ───────────────▶ Submitted ───────────────▶ Invoiced ─────────────▶ Completed
//!                               │  ▲                                  publishes OrderCompleted
//!                               └──┘ OrderItemAdded: item_count + 1
//! ```
//!
//! Every event is correlated by its `orderId`. Instances live in `orders.order_state`
//! (`correlation_id`, `current_state`, `item_count`, `invoice_id`, `version`), written in the
//! inbox transaction of the `order-state` endpoint: a redelivered or duplicated event applies
//! once, and `OrderCompleted` leaves only if the step committed. See `docs/sagas.md`.

use std::time::Duration;

use example_contracts::{InvoiceCreated, OrderItemAdded, OrderShipped, OrderSubmitted};
use ferrybus::error::BoxError;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::saga::postgres::{ColumnType, Concurrency, PostgresSagaRepository, SagaTable};
use ferrybus::saga::{Event, SagaEndpointExt, StateMachine};
use ferrybus::sea_orm::{PostgresStorage, Tables};
use ferrybus::{EndpointConfig, RetryPolicy};
use sea_orm::{ConnectOptions, Database, DatabaseConnection};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use example_contracts::OrderCompleted;

ferrybus::saga::saga_states! {
    /// The states of an order (MassTransit's `State` properties; `Initial` and `Final` are
    /// built in).
    pub enum OrderStatus { Submitted, Invoiced, Completed }
}

/// The instance data of one order (MassTransit's `OrderState : SagaStateMachineInstance`
/// without `CorrelationId` and `CurrentState`, which the saga keeps itself).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OrderState {
    /// How many `OrderItemAdded` the order received.
    #[serde(default)]
    pub item_count: i32,
    /// The invoice billing created for it.
    #[serde(default)]
    pub invoice_id: Option<Uuid>,
}

/// The state machine, as `OrderStateMachine : MassTransitStateMachine<OrderState>` would
/// declare it.
///
/// ```
/// let machine = example_order_saga::machine();
/// assert_eq!(machine.endpoint_name(), "order-state");
/// assert_eq!(machine.event_count(), 4);
/// ```
pub fn machine() -> StateMachine<OrderState, OrderStatus> {
    // Event(() => OrderSubmitted, x => x.CorrelateById(m => m.Message.OrderId)); …
    let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    let item_added = Event::<OrderItemAdded>::correlated_by(|m| m.order_id);
    let invoiced = Event::<InvoiceCreated>::correlated_by(|m| m.order_id);
    let shipped = Event::<OrderShipped>::correlated_by(|m| m.order_id);
    StateMachine::<OrderState, OrderStatus>::new("OrderState")
        // Initially(When(OrderSubmitted).TransitionTo(Submitted))
        .initially(|s| s.when(&submitted, |b| b.transition_to(OrderStatus::Submitted)))
        // During(Submitted, When(OrderItemAdded).Then(x => x.Saga.ItemCount++), …)
        .during(OrderStatus::Submitted, |s| {
            s.when(&item_added, |b| b.then(|c| c.instance.item_count += 1))
                .when(&invoiced, |b| {
                    b.then(|c| c.instance.invoice_id = Some(c.message().invoice_id))
                        .transition_to(OrderStatus::Invoiced)
                })
        })
        // During(Invoiced, When(OrderShipped).TransitionTo(Completed).Publish(…))
        .during(OrderStatus::Invoiced, |s| {
            s.when(&shipped, |b| {
                b.transition_to(OrderStatus::Completed)
                    .publish(|c| OrderCompleted {
                        order_id: c.correlation_id(),
                        invoice_id: c.instance.invoice_id.unwrap_or_default(),
                        item_count: c.instance.item_count,
                    })
            })
        })
        // DuringAny(Ignore(OrderSubmitted)): a second submit changes nothing.
        .during_any(|s| s.ignore(&submitted))
}

/// Why the environment could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{name}={value:?}: {reason}")]
pub struct ConfigError {
    name: &'static str,
    value: String,
    reason: &'static str,
}

/// The service's settings.
///
/// | variable | default | meaning |
/// |---|---|---|
/// | `DATABASE_URL` | `postgres://postgres@127.0.0.1:5432/test` | PostgreSQL |
/// | `AMQP_URL` | `amqp://guest:guest@127.0.0.1:5672/%2f` | RabbitMQ |
/// | `SAGA_CONCURRENCY` | `8` | events consumed at once |
/// | `SAGA_LOCKING` | `optimistic` | `optimistic` (version column) or `pessimistic` (`SELECT … FOR UPDATE`) |
/// | `ORDER_SAGA_QUEUE` | `order-state` | the endpoint's queue |
/// | `ORDER_SAGA_BIND` | `1` | `0`: the event exchanges are not bound (only messages sent to the queue arrive) |
/// | `ORDER_SAGA_SCHEMA` | `orders` | schema of `order_state` |
/// | `FERRYBUS_SCHEMA` | `messaging` | schema of the inbox/outbox tables (snake_case) |
///
/// ```
/// let config = example_order_saga::Config::from_lookup(|_| None).unwrap();
/// assert_eq!(config.queue, "order-state");
/// assert_eq!(config.concurrency, 8);
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    /// PostgreSQL URL.
    pub database_url: String,
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Events consumed at once.
    pub concurrency: usize,
    /// Optimistic or pessimistic.
    pub locking: Concurrency,
    /// The endpoint's queue.
    pub queue: String,
    /// Whether the event exchanges are bound to the queue.
    pub bind_message_types: bool,
    /// The schema of `order_state`.
    pub saga_schema: String,
    /// The messaging tables.
    pub tables: Tables,
}

impl Config {
    /// Reads the environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings from `lookup` (the environment, or a test's map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str, default: &str| lookup(name).unwrap_or_else(|| default.to_owned());
        let concurrency = get("SAGA_CONCURRENCY", "8");
        let concurrency =
            concurrency
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or(ConfigError {
                    name: "SAGA_CONCURRENCY",
                    value: concurrency,
                    reason: "must be a positive integer",
                })?;
        let locking = match get("SAGA_LOCKING", "optimistic").as_str() {
            "optimistic" => Concurrency::Optimistic,
            "pessimistic" => Concurrency::Pessimistic,
            other => {
                return Err(ConfigError {
                    name: "SAGA_LOCKING",
                    value: other.to_owned(),
                    reason: "must be optimistic or pessimistic",
                })
            }
        };
        let bind = match get("ORDER_SAGA_BIND", "1").as_str() {
            "1" => true,
            "0" => false,
            other => {
                return Err(ConfigError {
                    name: "ORDER_SAGA_BIND",
                    value: other.to_owned(),
                    reason: "must be 0 or 1",
                })
            }
        };
        Ok(Self {
            database_url: get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"),
            amqp_url: get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
            concurrency,
            locking,
            queue: get("ORDER_SAGA_QUEUE", "order-state"),
            bind_message_types: bind,
            saga_schema: get("ORDER_SAGA_SCHEMA", "orders"),
            tables: Tables::new().schema(get("FERRYBUS_SCHEMA", "messaging")),
        })
    }

    /// The instance table: `<ORDER_SAGA_SCHEMA>.order_state`.
    ///
    /// ```
    /// let config = example_order_saga::Config::from_lookup(|_| None).unwrap();
    /// assert_eq!(
    ///     config.saga_table().create_sql(),
    ///     "CREATE TABLE IF NOT EXISTS \"orders\".\"order_state\" ( \"correlation_id\" uuid NOT NULL PRIMARY KEY, \
    ///      \"current_state\" text NOT NULL, \"item_count\" integer, \"invoice_id\" uuid, \
    ///      \"version\" bigint NOT NULL DEFAULT 0 )"
    /// );
    /// ```
    pub fn saga_table(&self) -> SagaTable {
        SagaTable::new("order_state")
            .schema(&self.saga_schema)
            .column("item_count", ColumnType::Integer)
            .column("invoice_id", ColumnType::Uuid)
            .version_column("version")
    }
}

/// The running service.
#[derive(Debug)]
pub struct OrderSaga {
    bus: RabbitMqBus,
    db: DatabaseConnection,
}

impl OrderSaga {
    /// Creates the tables when absent and starts consuming.
    pub async fn start(config: &Config) -> Result<Self, BoxError> {
        let mut options = ConnectOptions::new(config.database_url.as_str());
        let size = u32::try_from(2 * config.concurrency + 4).unwrap_or(32);
        options
            .max_connections(size)
            .min_connections(0)
            .sqlx_logging(false);
        let db = Database::connect(options).await?;
        let repository = PostgresSagaRepository::<OrderState>::new(config.saga_table())
            .concurrency(config.locking);
        repository.create_table(&db).await?;
        let storage = PostgresStorage::new(db.clone())
            .tables(config.tables.clone())
            .migrate(true);
        let bus = RabbitMqBus::builder(&config.amqp_url)
            .connection_name("order-saga")
            .storage(storage)
            .receive_endpoint(&config.queue, |e| endpoint(e, config, repository))
            .start()
            .await?;
        tracing::info!(
            queue = %config.queue,
            concurrency = config.concurrency,
            locking = ?config.locking,
            "order-saga is running"
        );
        Ok(Self { bus, db })
    }

    /// The bus.
    pub fn bus(&self) -> &RabbitMqBus {
        &self.bus
    }

    /// The database pool.
    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Stops consuming, lets in-flight events finish, stops.
    pub async fn stop(self) {
        self.bus.stop().await;
        tracing::info!("order-saga stopped");
    }
}

/// The `order-state` endpoint: the inbox, a short retry, the saga.
pub fn endpoint(
    endpoint: EndpointConfig,
    config: &Config,
    repository: PostgresSagaRepository<OrderState>,
) -> EndpointConfig {
    endpoint
        .concurrency(config.concurrency)
        .bind_message_types(config.bind_message_types)
        .retry(RetryPolicy::intervals([
            Duration::from_millis(100),
            Duration::from_millis(500),
        ]))
        .inbox()
        .saga(machine(), repository)
}
