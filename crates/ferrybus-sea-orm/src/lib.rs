//! Inbox, consumer outbox and bus outbox for ferrybus on PostgreSQL (sea-orm), on the very
//! tables MassTransit's EF Core outbox uses, so .NET and Rust services can share them.
//!
//! [`PostgresStorage`] is the one value a bus needs (`.storage(PostgresStorage::new(db))`):
//!
//! * endpoints that call `.inbox()` run each delivery in one READ COMMITTED transaction: the
//!   inbox row, the consumer's own writes ([`TransactionExt::db`]) and the messages it publishes
//!   commit together; a duplicate is acknowledged without running the consumer; published
//!   messages are sent after commit;
//! * [`BusOutbox`] publishes from outside a consumer inside the caller's transaction, through
//!   [`Publish`](ferrybus_core::Publish);
//! * while the bus runs, it delivers bus-outbox rows (`LISTEN`/`NOTIFY` + polling), sweeps
//!   consumer-outbox rows a faulted delivery left behind, and removes delivered inbox rows older
//!   than the duplicate-detection window; the bus stops them after its endpoints;
//! * [`migrate`] creates `inbox_state`, `outbox_state` and `outbox_message` in MassTransit
//!   8.5's shape (any schema, table names and naming style: [`Tables`]): as sea-orm-migration
//!   migrations for your own `Migrator` ([`migrate::migrations`]), through ferrybus's
//!   idempotent runner ([`Migrator`], what [`PostgresStorage::migrate`] runs), or as plain SQL
//!   ([`migrate::sql`]); [`migrate::check`] compares an existing schema with what ferrybus
//!   needs, and [`migrate::check_search`] first finds it (naming read from the columns);
//! * [`entity`] has sea-orm entities for the three tables (both namings) and
//!   [`Retarget`](entity::Retarget) for configured schemas and names; [`status`] reads what is
//!   waiting, what is stranded or past the cleanup window, and who is delivering it;
//! * [`defaults`] has every default setting and threshold, [`telemetry`] the names of what the
//!   storage records besides MassTransit's instruments.
//!
//! See `docs/inbox-outbox.md` for guarantees, costs and sharing tables with .NET.
//!
//! ```no_run
//! use ferrybus_core::{ConsumeContext, ConsumeError, Publish};
//! use ferrybus_rabbitmq::RabbitMqBus;
//! use ferrybus_sea_orm::{BusOutbox, PostgresStorage, TransactionExt};
//! use sea_orm::{ActiveModelTrait, Set, TransactionTrait};
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)] struct OrderPlaced { order_id: uuid::Uuid }
//! # impl ferrybus_core::Message for OrderPlaced {
//! #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Billing:OrderPlaced").unwrap() }
//! # }
//! # #[derive(Serialize, Deserialize)] struct InvoiceCreated { order_id: uuid::Uuid }
//! # mod invoices {
//! #     use sea_orm::entity::prelude::*;
//! #     #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
//! #     #[sea_orm(table_name = "invoices")]
//! #     pub struct Model { #[sea_orm(primary_key, auto_increment = false)] pub order_id: Uuid }
//! #     #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)] pub enum Relation {}
//! #     impl ActiveModelBehavior for ActiveModel {}
//! # }
//! # impl ferrybus_core::Message for InvoiceCreated {
//! #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Billing:InvoiceCreated").unwrap() }
//! # }
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let db = sea_orm::Database::connect("postgres://postgres@localhost/app").await?;
//! let storage = PostgresStorage::new(db.clone()).migrate(true); // messaging.inbox_state, …
//!
//! let bus = RabbitMqBus::builder("amqp://guest:guest@localhost:5672/%2f")
//!     .storage(storage.clone())
//!     .receive_endpoint("billing-invoice", |e| {
//!         e.inbox().consumer(ferrybus_core::consumer_fn(
//!             "InvoiceConsumer",
//!             |ctx: ConsumeContext<OrderPlaced>| async move {
//!                 let order_id = ctx.message().order_id;
//!                 invoices::ActiveModel { order_id: Set(order_id) }
//!                     .insert(ctx.db())
//!                     .await?;
//!                 ctx.publish(&InvoiceCreated { order_id }).await?; // sent after commit
//!                 Ok::<_, ConsumeError>(())
//!             },
//!         ))
//!     })
//!     .start()
//!     .await?;
//!
//! // Publishing from an HTTP handler: the bus outbox, in the handler's transaction.
//! let outbox = BusOutbox::new(&storage, bus.message_factory());
//! let txn = db.begin().await?;
//! outbox.on(&txn).publish(&OrderPlaced { order_id: uuid::Uuid::now_v7() }).await?;
//! txn.commit().await?;
//!
//! bus.stop().await; // stops consuming, then the outbox delivery and the cleanup
//! # Ok(()) }
//! ```

mod background;
mod backoff;
mod cleanup;
mod config;
mod consumer_outbox;
pub mod defaults;
mod delivery;
pub mod entity;
mod error;
mod fast;
mod inbox;
pub mod migrate;
mod outbox;
mod send;
mod settings;
mod sql;
pub mod status;
mod storage;
mod sweeper;
pub mod telemetry;
pub mod testing;
mod transient;

pub use config::{NamingStyle, Tables, TimestampType};
pub use error::{StoreError, StoreErrorKind};
pub use fast::InboxTransaction;
pub use inbox::TransactionExt;
pub use migrate::Migrator;
pub use outbox::{BusOutbox, OutboxPublisher};
pub use storage::PostgresStorage;
pub use transient::is_transient;
