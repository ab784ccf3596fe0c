//! [`BusOutbox`]: publishes into `OutboxState` + `OutboxMessage` rows (and a `NOTIFY`) inside a
//! caller's transaction, through [`Publish`].

use std::sync::Arc;

use chrono::Utc;
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::outgoing::MessageOrigin;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::{Publish, PublishError};
use sea_orm::{ConnectionTrait, FromQueryResult};
use uuid::Uuid;

use crate::error::{StoreError, StoreErrorKind};
use crate::settings::Settings;
use crate::sql::WrittenOutbox;
use crate::storage::PostgresStorage;
use crate::telemetry::count_outbox_write;

/// Publishes and sends through the outbox tables, in the caller's transaction: nothing reaches
/// the broker unless the transaction commits, and then the outbox delivery service of any
/// instance (a bus with this storage runs one) sends it, woken by `NOTIFY`, which PostgreSQL
/// delivers only on commit.
///
/// Every message written in one transaction belongs to one outbox (one `OutboxState` row, its id
/// a UUIDv7 of the transaction's start), so they are delivered in the order they were written.
/// The rows have MassTransit's shape: a .NET delivery service delivers them too.
///
/// ```no_run
/// # async fn run(bus: ferrybus_rabbitmq::RabbitMqBus, storage: ferrybus_sea_orm::PostgresStorage) -> Result<(), Box<dyn std::error::Error>> {
/// use ferrybus_core::Publish;
/// use ferrybus_sea_orm::BusOutbox;
/// use sea_orm::TransactionTrait;
/// # #[derive(serde::Serialize, serde::Deserialize)] struct OrderPlaced { id: u32 }
/// # impl ferrybus_core::Message for OrderPlaced {
/// #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Ns:OrderPlaced").unwrap() }
/// # }
/// let outbox = BusOutbox::new(&storage, bus.message_factory());
/// let txn = storage.db().begin().await?;
/// // ... the application's own writes ...
/// outbox.on(&txn).publish(&OrderPlaced { id: 7 }).await?;
/// txn.commit().await?; // now, and only now, it can be sent
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct BusOutbox {
    factory: Arc<MessageFactory>,
    settings: Arc<Settings>,
    origin: MessageOrigin,
}

/// A [`BusOutbox`] bound to one transaction (or connection): what [`BusOutbox::on`] returns.
/// Its [`Publish`] methods write rows in that transaction.
#[derive(Debug)]
pub struct OutboxPublisher<'a, C> {
    outbox: &'a BusOutbox,
    db: &'a C,
}

impl BusOutbox {
    /// A bus outbox writing into the tables of `storage`, building messages as `factory` does:
    /// the bus's ([`Publish::message_factory`]), so that rows carry the bus's host and its
    /// transport's properties (RabbitMQ's `RMQ-Exchange` …), where the delivery service will send
    /// them and what a .NET delivery service reads.
    pub fn new(storage: &PostgresStorage, factory: &MessageFactory) -> Self {
        let factory = factory.clone();
        let origin = MessageOrigin {
            source_address: Some(factory.host().entity_address("bus")),
            ..MessageOrigin::default()
        };
        Self {
            factory: Arc::new(factory),
            settings: storage.settings(),
            origin,
        }
    }

    /// Publishes and sends inside `db`, usually the caller's open transaction.
    pub fn on<'a, C: ConnectionTrait>(&'a self, db: &'a C) -> OutboxPublisher<'a, C> {
        OutboxPublisher { outbox: self, db }
    }

    /// Writes an already built message inside `db`; returns the id of the outbox it joined.
    pub async fn write(
        &self,
        db: &impl ConnectionTrait,
        message: &OutgoingMessage,
    ) -> Result<Uuid, StoreError> {
        let settings = &self.settings;
        let statement = settings
            .sql()
            .bus_insert(Utc::now(), settings.write_notify(), message)?;
        let row = db.query_one_raw(statement).await?.ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Database,
                "the outbox insert returned no row",
            )
        })?;
        count_outbox_write(message);
        Ok(WrittenOutbox::from_query_result(&row, "")?.outbox_id)
    }
}

impl<C: ConnectionTrait + Sync> Publish for OutboxPublisher<'_, C> {
    fn message_factory(&self) -> &MessageFactory {
        &self.outbox.factory
    }

    fn message_origin(&self) -> &MessageOrigin {
        &self.outbox.origin
    }

    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        self.outbox.write(self.db, &message).await?;
        Ok(())
    }
}
