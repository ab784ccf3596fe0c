//! sea-orm entities for MassTransit's three outbox tables, and [`Retarget`]: running an entity's
//! statements on the tables a [`Tables`] names.
//!
//! | table | snake_case (`messaging`, ferrybus's default) | PascalCase (`public`, EF Core's default) |
//! |---|---|---|
//! | inbox state | [`inbox_state`] | [`dotnet::inbox_state`] |
//! | outbox state | [`outbox_state`] | [`dotnet::outbox_state`] |
//! | outbox message | [`outbox_message`] | [`dotnet::outbox_message`] |
//!
//! The two sets have the same Rust field names (`message_id`, `sequence_number`, …); only the
//! column names differ. They model MassTransit 8.5's shape as Npgsql ≥ 6 creates it (`bigint`
//! identities, `timestamp with time zone`); tables from Npgsql's legacy timestamp mode
//! (`timestamp without time zone`, `integer` ids) are read and written by ferrybus itself, but
//! do not decode into these models.
//!
//! # Other schemas and table names
//!
//! A sea-orm entity's schema and table names are static (`EntityName::table_name` is fixed at
//! compile time, and `Entity::find()` builds the entity from `Default`), while ferrybus reads
//! them from configuration. Rather than generating entities per configuration or keeping a
//! global, [`Retarget::on`] swaps the *main table* of a built statement for the configured one,
//! under the entity's name as alias:
//!
//! ```text
//! SELECT "inbox_state"."id", … FROM "billing"."inbox_states" AS "inbox_state" WHERE "inbox_state"."delivered" IS NULL
//! ```
//!
//! so every column reference sea-orm already wrote (`"inbox_state"."delivered"`) stays valid,
//! and the statement keeps its filters, ordering, `ON CONFLICT` clause and `RETURNING`. It is a
//! sea-query dynamic table reference, not text rewriting. Pick the entity set of the tables'
//! [`NamingStyle`]: [`Retarget::on`] refuses a mismatch with a
//! [`StoreErrorKind::Config`](crate::StoreErrorKind::Config) error rather than sending SQL that
//! names missing columns. Joins through relations keep the default names (retarget the joined
//! entity with its own query instead).
//!
//! ```no_run
//! # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), Box<dyn std::error::Error>> {
//! use ferrybus_sea_orm::entity::{dotnet, inbox_state, Retarget};
//! use ferrybus_sea_orm::Tables;
//! use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
//!
//! // The defaults: no retargeting needed.
//! let pending = inbox_state::Entity::find()
//!     .filter(inbox_state::Column::Delivered.is_null())
//!     .all(&db)
//!     .await?;
//!
//! // Tables a .NET service created in schema `billing`, EF's default naming.
//! let tables = Tables::dotnet_default().schema("billing");
//! let newest = dotnet::outbox_message::Entity::find()
//!     .order_by_desc(dotnet::outbox_message::Column::SequenceNumber)
//!     .on(&tables)?
//!     .one(&db)
//!     .await?;
//! # let _ = (pending, newest); Ok(()) }
//! ```

use sea_orm::sea_query::{DynIden, IntoIden, SchemaName, TableName, TableRef};
use sea_orm::{
    ActiveModelTrait, DeleteMany, EntityName, EntityTrait, Insert, QueryTrait, Select, UpdateMany,
    ValidatedDeleteOne, ValidatedUpdateOne,
};

use crate::config::{NamingStyle, Tables};
use crate::error::StoreError;

pub mod dotnet;
pub mod inbox_state;
pub mod outbox_message;
pub mod outbox_state;

/// Which of MassTransit's three tables an entity maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutboxTable {
    /// `InboxState`.
    InboxState,
    /// `OutboxState`.
    OutboxState,
    /// `OutboxMessage`.
    OutboxMessage,
}

impl OutboxTable {
    /// The table's name in `tables`.
    pub fn name(self, tables: &Tables) -> &str {
        match self {
            OutboxTable::InboxState => tables.inbox_state(),
            OutboxTable::OutboxState => tables.outbox_state(),
            OutboxTable::OutboxMessage => tables.outbox_message(),
        }
    }
}

/// An entity of one of MassTransit's tables in one naming style: what [`Retarget::on`] needs to
/// find its configured table.
pub trait OutboxEntity: EntityTrait {
    /// The table it maps.
    const TABLE: OutboxTable;
    /// The naming of its columns.
    const NAMING: NamingStyle;
}

macro_rules! outbox_entity {
    ($entity:ty, $table:ident, $naming:ident) => {
        impl $crate::entity::OutboxEntity for $entity {
            const TABLE: $crate::entity::OutboxTable = $crate::entity::OutboxTable::$table;
            const NAMING: $crate::config::NamingStyle = $crate::config::NamingStyle::$naming;
        }
    };
}
pub(crate) use outbox_entity;

/// `"schema"."table"`, with `AS alias` when given.
pub(crate) fn schema_table(schema: DynIden, table: DynIden, alias: Option<DynIden>) -> TableRef {
    TableRef::Table(TableName(Some(SchemaName(None, schema)), table), alias)
}

/// `schema.table AS <the entity's table name>`.
fn aliased<E: EntityTrait>(schema: &str, table: &str) -> TableRef {
    schema_table(
        DynIden::from(schema.to_owned()),
        DynIden::from(table.to_owned()),
        Some(E::default().table_name().into_iden()),
    )
}

/// Points a sea-orm statement of one entity at another table of the same shape (see the
/// [module docs](self) for why and how).
///
/// [`retarget`](Retarget::retarget) works for any entity, e.g. an application's own tables in a
/// configured schema; [`on`](Retarget::on) takes ferrybus's [`Tables`].
///
/// ```
/// use ferrybus_sea_orm::entity::{outbox_state, Retarget};
/// use ferrybus_sea_orm::Tables;
/// use sea_orm::{DbBackend, EntityTrait, QueryTrait};
/// let tables = Tables::new().schema("billing").names("inbox", "outboxes", "messages");
/// let sql = outbox_state::Entity::find().on(&tables).unwrap().build(DbBackend::Postgres).to_string();
/// assert!(sql.contains(r#"FROM "billing"."outboxes" AS "outbox_state""#), "{sql}");
/// ```
pub trait Retarget: Sized {
    /// The entity whose statement this is.
    type Entity: EntityTrait;

    /// Runs this statement on `schema.table` instead of the entity's table.
    fn retarget(self, schema: &str, table: &str) -> Self;

    /// Runs this statement on the table `tables` names for this entity; fails with
    /// [`StoreErrorKind::Config`](crate::StoreErrorKind::Config) when the entity's column naming
    /// is not the tables' (use the [`dotnet`] entities for PascalCase tables).
    fn on(self, tables: &Tables) -> Result<Self, StoreError>
    where
        Self::Entity: OutboxEntity,
    {
        let naming = <Self::Entity as OutboxEntity>::NAMING;
        if naming != tables.naming_style() {
            return Err(StoreError::config(format!(
                "entity {} has {naming:?} columns but the tables use {:?}; use the entities of that naming",
                Self::Entity::default().table_name(),
                tables.naming_style()
            )));
        }
        let table = <Self::Entity as OutboxEntity>::TABLE
            .name(tables)
            .to_owned();
        Ok(self.retarget(tables.schema_name(), &table))
    }
}

impl<E: EntityTrait> Retarget for Select<E> {
    type Entity = E;

    fn retarget(mut self, schema: &str, table: &str) -> Self {
        self.query().from_clear().from(aliased::<E>(schema, table));
        self
    }
}

impl<A: ActiveModelTrait> Retarget for Insert<A> {
    type Entity = A::Entity;

    fn retarget(mut self, schema: &str, table: &str) -> Self {
        self.query().into_table(aliased::<A::Entity>(schema, table));
        self
    }
}

impl<E: EntityTrait> Retarget for UpdateMany<E> {
    type Entity = E;

    fn retarget(mut self, schema: &str, table: &str) -> Self {
        self.query().table(aliased::<E>(schema, table));
        self
    }
}

impl<A: ActiveModelTrait> Retarget for ValidatedUpdateOne<A> {
    type Entity = A::Entity;

    fn retarget(mut self, schema: &str, table: &str) -> Self {
        self.query().table(aliased::<A::Entity>(schema, table));
        self
    }
}

impl<E: EntityTrait> Retarget for DeleteMany<E> {
    type Entity = E;

    fn retarget(mut self, schema: &str, table: &str) -> Self {
        self.query().from_table(aliased::<E>(schema, table));
        self
    }
}

impl<E: EntityTrait> Retarget for ValidatedDeleteOne<E> {
    type Entity = E;

    fn retarget(mut self, schema: &str, table: &str) -> Self {
        self.query().from_table(aliased::<E>(schema, table));
        self
    }
}
