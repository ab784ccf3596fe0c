//! `"InboxState"`: MassTransit's `InboxState` with EF Core's default (PascalCase) naming, in schema
//! `public`; the same fields as [`crate::entity::inbox_state`]. See [`Retarget`](crate::entity::Retarget) for
//! other schemas and names.

use sea_orm::entity::prelude::*;

/// One inbox row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(schema_name = "public", table_name = "InboxState")]
pub struct Model {
    /// `Id`: the primary key (identity).
    #[sea_orm(primary_key)]
    #[sea_orm(column_name = "Id")]
    pub id: i64,
    /// `MessageId`: the received message's id (with `consumer_id`, the unique inbox key).
    #[sea_orm(column_name = "MessageId")]
    pub message_id: Uuid,
    /// `ConsumerId`: the consumer's id.
    #[sea_orm(column_name = "ConsumerId")]
    pub consumer_id: Uuid,
    /// `LockId`: changed by each delivery that takes the row.
    #[sea_orm(column_name = "LockId")]
    pub lock_id: Uuid,
    /// `RowVersion`: EF's concurrency token (not used by PostgreSQL's provider).
    #[sea_orm(column_name = "RowVersion")]
    pub row_version: Option<Vec<u8>>,
    /// `Received`: when the first copy arrived.
    #[sea_orm(column_name = "Received")]
    pub received: DateTimeUtc,
    /// `ReceiveCount`: how many more copies arrived after the first.
    #[sea_orm(column_name = "ReceiveCount")]
    pub receive_count: i32,
    /// `ExpirationTime`: the message's expiration, if any.
    #[sea_orm(column_name = "ExpirationTime")]
    pub expiration_time: Option<DateTimeUtc>,
    /// `Consumed`: when the consumer committed.
    #[sea_orm(column_name = "Consumed")]
    pub consumed: Option<DateTimeUtc>,
    /// `Delivered`: when every outbox message of this row was sent.
    #[sea_orm(column_name = "Delivered")]
    pub delivered: Option<DateTimeUtc>,
    /// `LastSequenceNumber`: the last outbox message sent so far.
    #[sea_orm(column_name = "LastSequenceNumber")]
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

crate::entity::outbox_entity!(Entity, InboxState, PascalCase);
