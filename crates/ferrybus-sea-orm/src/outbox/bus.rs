//! [`BusOutbox`]: writes `OutboxState` + `OutboxMessage` rows and a `NOTIFY`.

use std::sync::Arc;

use chrono::Utc;
use ferrybus_core::{Message, MessageFactory, MessageOrigin, OutgoingMessage, SendOptions};
use sea_orm::{ConnectionTrait, Value};
use uuid::Uuid;

use crate::config::StorageConfig;
use crate::error::{StoreError, StoreErrorKind};
use crate::sql::{message_values, stmt};

/// Publishes and sends through the outbox tables, in the caller's transaction: nothing reaches
/// the broker unless the transaction commits, and then the
/// [`OutboxDeliveryService`](crate::OutboxDeliveryService) of any instance sends it (woken by
/// `NOTIFY`, which PostgreSQL delivers only on commit).
///
/// Every message written in one transaction belongs to one outbox (one `OutboxState` row, id
/// derived from the transaction id), so they are delivered in the order they were written. The
/// rows have MassTransit's shape: a .NET delivery service delivers them too.
///
/// ```no_run
/// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), Box<dyn std::error::Error>> {
/// use ferrybus_core::{HostAddress, MessageFactory};
/// use ferrybus_sea_orm::{BusOutbox, StorageConfig, Tables};
/// use sea_orm::TransactionTrait;
/// # #[derive(serde::Serialize, serde::Deserialize)] struct OrderPlaced { id: u32 }
/// # impl ferrybus_core::Message for OrderPlaced {
/// #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Ns:OrderPlaced").unwrap() }
/// # }
/// let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
/// let outbox = BusOutbox::new(factory, StorageConfig::new(Tables::new()));
/// let txn = db.begin().await?;
/// // ... the application's own writes ...
/// outbox.publish(&txn, &OrderPlaced { id: 7 }).await?;
/// txn.commit().await?; // now, and only now, it can be sent
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct BusOutbox {
    factory: Arc<MessageFactory>,
    config: StorageConfig,
    origin: MessageOrigin,
}

impl BusOutbox {
    /// A bus outbox writing messages built by `factory` into the tables of `config`.
    pub fn new(factory: MessageFactory, config: StorageConfig) -> Self {
        let origin = MessageOrigin {
            source_address: Some(factory.host().entity_address("bus")),
            ..MessageOrigin::default()
        };
        Self {
            factory: Arc::new(factory),
            config,
            origin,
        }
    }

    /// Publishes `message` (to its type's exchange); returns the message id.
    pub async fn publish<M: Message>(
        &self,
        db: &impl ConnectionTrait,
        message: &M,
    ) -> Result<Uuid, StoreError> {
        self.publish_with(db, message, SendOptions::new()).await
    }

    /// Publishes with options.
    pub async fn publish_with<M: Message>(
        &self,
        db: &impl ConnectionTrait,
        message: &M,
        options: SendOptions,
    ) -> Result<Uuid, StoreError> {
        let outgoing = self
            .factory
            .publish(message, &self.origin, options)
            .map_err(|e| StoreError::new(StoreErrorKind::Encode, e))?;
        self.write(db, &outgoing).await?;
        Ok(outgoing.message_id)
    }

    /// Sends `message` to `address` (`queue:name`, `exchange:name` or a full address); returns
    /// the message id.
    pub async fn send<M: Message>(
        &self,
        db: &impl ConnectionTrait,
        address: &str,
        message: &M,
    ) -> Result<Uuid, StoreError> {
        self.send_with(db, address, message, SendOptions::new())
            .await
    }

    /// Sends with options.
    pub async fn send_with<M: Message>(
        &self,
        db: &impl ConnectionTrait,
        address: &str,
        message: &M,
        options: SendOptions,
    ) -> Result<Uuid, StoreError> {
        let outgoing = self
            .factory
            .send(address, message, &self.origin, options)
            .map_err(|e| StoreError::new(StoreErrorKind::Encode, e))?;
        self.write(db, &outgoing).await?;
        Ok(outgoing.message_id)
    }

    /// Writes an already built message; returns the id of the outbox it joined.
    pub async fn write(
        &self,
        db: &impl ConnectionTrait,
        message: &OutgoingMessage,
    ) -> Result<Uuid, StoreError> {
        let mut values = vec![
            Value::ChronoDateTimeUtc(Some(Box::new(Utc::now()))),
            self.config.channel().to_owned().into(),
        ];
        values.extend(message_values(message)?);
        let row = db
            .query_one(stmt(&self.config.sql().bus_insert, values))
            .await?
            .ok_or_else(|| {
                StoreError::new(
                    StoreErrorKind::Database,
                    "the outbox insert returned no row",
                )
            })?;
        Ok(row.try_get("", "outbox_id")?)
    }
}
