//! `inbox_state`: one row per (message, consumer) the inbox has seen (MassTransit's
//! `InboxState`), snake_case, in schema `messaging`. See [`super::dotnet::inbox_state`] for the
//! PascalCase columns and [`Retarget`](super::Retarget) for other schemas and names.

use sea_orm::entity::prelude::*;

/// One inbox row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(schema_name = "messaging", table_name = "inbox_state")]
pub struct Model {
    /// `Id`: the primary key (identity).
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `MessageId`: the received message's id (with `consumer_id`, the unique inbox key).
    pub message_id: Uuid,
    /// `ConsumerId`: the consumer's id.
    pub consumer_id: Uuid,
    /// `LockId`: changed by each delivery that takes the row.
    pub lock_id: Uuid,
    /// `RowVersion`: EF's concurrency token (not used by PostgreSQL's provider).
    pub row_version: Option<Vec<u8>>,
    /// `Received`: when the first copy arrived.
    pub received: DateTimeUtc,
    /// `ReceiveCount`: how many more copies arrived after the first.
    pub receive_count: i32,
    /// `ExpirationTime`: the message's expiration, if any.
    pub expiration_time: Option<DateTimeUtc>,
    /// `Consumed`: when the consumer committed.
    pub consumed: Option<DateTimeUtc>,
    /// `Delivered`: when every outbox message of this row was sent.
    pub delivered: Option<DateTimeUtc>,
    /// `LastSequenceNumber`: the last outbox message sent so far.
    pub last_sequence_number: Option<i64>,
}

/// The row's relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// The consumer-outbox messages of this row (`InboxMessageId`, `InboxConsumerId`).
    #[sea_orm(has_many = "super::outbox_message::Entity")]
    OutboxMessage,
}

// module-cycles: allow (the foreign key, seen from the referenced table)
impl Related<super::outbox_message::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::OutboxMessage.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}

super::outbox_entity!(Entity, InboxState, SnakeCase);
