//! `"OutboxState"`: MassTransit's `OutboxState` with EF Core's default (PascalCase) naming, in schema
//! `public`; the same fields as [`crate::entity::outbox_state`]. See [`Retarget`](crate::entity::Retarget) for
//! other schemas and names.

use sea_orm::entity::prelude::*;

/// One bus outbox.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(schema_name = "public", table_name = "OutboxState")]
pub struct Model {
    /// `OutboxId`: the primary key.
    #[sea_orm(primary_key, auto_increment = false)]
    #[sea_orm(column_name = "OutboxId")]
    pub outbox_id: Uuid,
    /// `LockId`: the all-zero GUID when written.
    #[sea_orm(column_name = "LockId")]
    pub lock_id: Uuid,
    /// `RowVersion`: EF's concurrency token (not used by PostgreSQL's provider).
    #[sea_orm(column_name = "RowVersion")]
    pub row_version: Option<Vec<u8>>,
    /// `Created`: when the outbox was written (the delivery order).
    #[sea_orm(column_name = "Created")]
    pub created: DateTimeUtc,
    /// `Delivered`: when a .NET delivery service finished it.
    #[sea_orm(column_name = "Delivered")]
    pub delivered: Option<DateTimeUtc>,
    /// `LastSequenceNumber`: the last message sent so far.
    #[sea_orm(column_name = "LastSequenceNumber")]
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

crate::entity::outbox_entity!(Entity, OutboxState, PascalCase);
