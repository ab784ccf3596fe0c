//! Inbox, consumer outbox and bus outbox for ferrybus on PostgreSQL (sea-orm), on the very
//! tables MassTransit's EF Core outbox uses, so .NET and Rust services can share them.
//!
//! * [`Migrator`] creates `inbox_state`, `outbox_state` and `outbox_message` in MassTransit
//!   8.5's shape (idempotent; any schema, table names and naming style: [`Tables`]).
//! * [`InboxLayer`] runs each delivery in one READ COMMITTED transaction: the inbox row, the
//!   consumer's own writes ([`TransactionExt::db`]) and the messages it publishes commit together;
//!   a duplicate is acknowledged without running the consumer; published messages are sent
//!   after commit.
//! * [`BusOutbox`] publishes from outside a consumer inside the caller's transaction;
//!   [`OutboxDeliveryService`] sends those rows after commit (`LISTEN`/`NOTIFY` + polling).
//! * [`InboxCleanup`] removes delivered inbox rows older than the duplicate-detection window.
//!
//! See `docs/inbox-outbox.md` for guarantees, costs and sharing tables with .NET.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig, RetryPolicy};
//! use ferrybus_core::{HostAddress, MessageFactory, SharedSink};
//! use ferrybus_sea_orm::{
//!     BusOutbox, CleanupConfig, DeliveryConfig, InboxCleanup, InboxConfig, InboxLayer, Migrator,
//!     OutboxDeliveryService, StorageConfig, Tables, TransactionExt,
//! };
//! use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)] struct OrderPlaced { order_id: uuid::Uuid }
//! # impl ferrybus_core::Message for OrderPlaced {
//! #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Billing:OrderPlaced").unwrap() }
//! # }
//! # #[derive(Serialize, Deserialize)] struct InvoiceCreated { order_id: uuid::Uuid }
//! # impl ferrybus_core::Message for InvoiceCreated {
//! #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Billing:InvoiceCreated").unwrap() }
//! # }
//! # async fn run(transport: SharedSink) -> Result<(), Box<dyn std::error::Error>> {
//! let db = sea_orm::Database::connect("postgres://postgres@localhost/app").await?;
//! let storage = StorageConfig::new(Tables::new()); // schema "messaging", snake_case
//! Migrator::new(storage.tables().clone()).run(&db).await?;
//!
//! // Consumer side: inbox + consumer outbox.
//! let endpoint = EndpointConfig::new("billing-invoice")
//!     .retry(RetryPolicy::immediate(3))
//!     .layer(InboxLayer::new(db.clone(), InboxConfig::new(storage.clone())))
//!     .consumer(consumer_fn("InvoiceConsumer", |ctx: ConsumeContext<OrderPlaced>| async move {
//!         let order_id = ctx.message().order_id;
//!         ctx.db()
//!             .execute(Statement::from_sql_and_values(
//!                 DbBackend::Postgres,
//!                 "INSERT INTO invoices (order_id) VALUES ($1)",
//!                 [order_id.into()],
//!             ))
//!             .await?;
//!         ctx.publish(&InvoiceCreated { order_id }).await // sent after commit
//!     }));
//! # let _ = endpoint;
//!
//! // Publishing from an HTTP handler: the bus outbox, in the handler's transaction.
//! let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
//! let outbox = BusOutbox::new(factory, storage.clone());
//! let txn = db.begin().await?;
//! outbox.publish(&txn, &OrderPlaced { order_id: uuid::Uuid::now_v7() }).await?;
//! txn.commit().await?;
//!
//! // Background services, in every instance.
//! let delivery = OutboxDeliveryService::new(db.clone(), transport, DeliveryConfig::new(storage.clone())).spawn();
//! let cleanup = InboxCleanup::new(db.clone(), CleanupConfig::new(storage)).spawn();
//! // ... on shutdown:
//! delivery.stop().await;
//! cleanup.stop().await;
//! # Ok(()) }
//! ```

mod background;
mod cleanup;
mod config;
mod consumer_outbox;
mod delivery;
mod error;
mod inbox;
pub mod migrate;
mod outbox;
mod send;
mod sql;
mod sweeper;
pub mod telemetry;
pub mod testing;

pub use background::BackgroundHandle;
pub use cleanup::{CleanupConfig, InboxCleanup};
pub use config::{NamingStyle, StorageConfig, Tables, TimestampType};
pub use delivery::{DeliveryConfig, OutboxDeliveryService};
pub use error::{StoreError, StoreErrorKind};
pub use inbox::{Inbox, InboxConfig, InboxLayer, InboxTransaction, TransactionExt};
pub use migrate::Migrator;
pub use outbox::BusOutbox;
