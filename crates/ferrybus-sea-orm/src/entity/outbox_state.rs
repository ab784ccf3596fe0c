//! `outbox_state`: one row per bus outbox (MassTransit's `OutboxState`), snake_case, in schema
//! `messaging`. See [`super::dotnet::outbox_state`] for the PascalCase columns and
//! [`Retarget`](super::Retarget) for other schemas and names.

use sea_orm::entity::prelude::*;

/// One bus outbox.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(schema_name = "messaging", table_name = "outbox_state")]
pub struct Model {
    /// `OutboxId`: the primary key.
    #[sea_orm(primary_key, auto_increment = false)]
    pub outbox_id: Uuid,
    /// `LockId`: the all-zero GUID when written.
    pub lock_id: Uuid,
    /// `RowVersion`: EF's concurrency token (not used by PostgreSQL's provider).
    pub row_version: Option<Vec<u8>>,
    /// `Created`: when the outbox was written (the delivery order).
    pub created: DateTimeUtc,
    /// `Delivered`: when a .NET delivery service finished it.
    pub delivered: Option<DateTimeUtc>,
    /// `LastSequenceNumber`: the last message sent so far.
    pub last_sequence_number: Option<i64>,
}

/// The outbox's relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// Its messages (`OutboxId`).
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

super::outbox_entity!(Entity, OutboxState, SnakeCase);
