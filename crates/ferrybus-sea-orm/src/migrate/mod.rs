//! ferrybus's migrations: MassTransit's three tables for any [`Tables`], as
//! [sea-orm-migration](https://docs.rs/sea-orm-migration) `MigrationTrait`s a service adds to
//! its own `Migrator`, and ferrybus's own runner for services without sea-orm-migration.
//!
//! * [`migrations`] returns ferrybus's migrations for one set of tables, in order. Add them to
//!   your `MigratorTrait::migrations()` beside your own; a later schema change of MassTransit's
//!   tables ships as one more migration at the end of this list, so sea-orm-migration's history
//!   (`seaql_migrations`) applies it once.
//! * [`Migrator`] (what [`PostgresStorage::migrate`](crate::PostgresStorage::migrate) runs)
//!   applies the same migrations in one transaction under `pg_advisory_xact_lock`, keeping no
//!   history: every ferrybus migration is idempotent (tables, indexes and foreign keys are
//!   created only when missing), so it is safe on every start, from several instances at once,
//!   and on tables a .NET service created.
//! * [`sql`] is the plain SQL of a fresh install for DBAs (`ferrybus migrate --print`); the
//!   committed `migrations/*.sql` files are its output for the two default shapes, checked by a
//!   test.
//! * [`check`] compares an existing schema with what ferrybus needs; [`check_search`] first
//!   finds the tables of a [`TableSearch`] (a schema, the naming read from the columns when not
//!   given): what `ferrybus migrate --check` reports.
//!
//! ```no_run
//! use ferrybus_sea_orm::{migrate, Tables};
//! use sea_orm_migration::{MigrationTrait, MigratorTrait};
//!
//! struct AppMigrator;
//!
//! impl MigratorTrait for AppMigrator {
//!     fn migrations() -> Vec<Box<dyn MigrationTrait>> {
//!         let mut migrations = migrate::migrations(&Tables::new());
//!         // migrations.push(Box::new(m20250101_000001_create_invoices::Migration));
//!         migrations
//!     }
//! }
//! # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), sea_orm::DbErr> {
//! AppMigrator::up(&db, None).await?;
//! # Ok(()) }
//! ```

mod catalog;
mod check;
mod m0001_outbox_tables;

use sea_orm::sea_query::{Alias, IntoIden, PostgresQueryBuilder, QuotedBuilder};
use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait};
use sea_orm_migration::{MigrationTrait, SchemaManager};

pub use catalog::ForeignKey;
pub use check::{check, check_search, SchemaProblem, SchemaReport, TableSearch, TableStatus};
pub use m0001_outbox_tables::CreateOutboxTables;

use crate::config::Tables;
use crate::error::StoreError;

/// The advisory lock key that serializes concurrent migrators (`pg_advisory_xact_lock`).
pub const ADVISORY_LOCK_KEY: i64 = 0x6665_7272_7962_7573; // "ferrybus"

/// The name of a ferrybus migration for `tables`: `m0001_ferrybus_outbox_tables` for the
/// default schema `messaging`, with `_<schema>` appended otherwise, so two sets of tables in
/// one database have separate history entries.
fn migration_name(base: &str, tables: &Tables) -> String {
    if tables.schema_name() == Tables::new().schema_name() {
        base.to_owned()
    } else {
        [base, tables.schema_name()].join("_")
    }
}

/// ferrybus's migrations for `tables`, oldest first, with the foreign keys of MassTransit 8.3+.
///
/// ```
/// use ferrybus_sea_orm::{migrate, Tables};
/// let names: Vec<String> = migrate::migrations(&Tables::new())
///     .iter()
///     .map(|m| m.name().to_owned())
///     .collect();
/// assert_eq!(names, ["m0001_ferrybus_outbox_tables"]);
/// let dotnet = migrate::migrations(&Tables::dotnet_default());
/// assert_eq!(dotnet[0].name(), "m0001_ferrybus_outbox_tables_public");
/// ```
pub fn migrations(tables: &Tables) -> Vec<Box<dyn MigrationTrait>> {
    Migrator::new(tables.clone()).migrations()
}

/// One statement of a migration.
pub(crate) enum Step {
    /// `CREATE SCHEMA IF NOT EXISTS`.
    Schema(String),
    /// `CREATE TABLE IF NOT EXISTS`.
    Table(Box<sea_orm::sea_query::TableCreateStatement>),
    /// `CREATE [UNIQUE] INDEX IF NOT EXISTS`.
    Index(Box<sea_orm::sea_query::IndexCreateStatement>),
}

impl Step {
    fn to_sql(&self) -> String {
        match self {
            // sea-query has no CREATE SCHEMA statement: the fixed text, with the name quoted
            // by sea-query.
            Step::Schema(schema) => {
                let mut sql = String::from("CREATE SCHEMA IF NOT EXISTS ");
                PostgresQueryBuilder.prepare_iden(&Alias::new(schema).into_iden(), &mut sql);
                sql
            }
            Step::Table(table) => table.to_string(PostgresQueryBuilder),
            Step::Index(index) => index.to_string(PostgresQueryBuilder),
        }
    }
}

/// The plain SQL of a fresh install of `tables` (what a DBA applies by hand, and what
/// `ferrybus migrate --print` shows): idempotent statements, one per line. The foreign keys
/// (unless `foreign_keys` is false) are part of `CREATE TABLE`; on an `OutboxMessage` table
/// that exists without them (.NET before 8.3), [`Migrator`] adds them, this SQL does not.
///
/// ```
/// use ferrybus_sea_orm::{migrate, Tables};
/// let sql = migrate::sql(&Tables::new(), true);
/// assert!(sql.contains(r#"CREATE TABLE IF NOT EXISTS "messaging"."inbox_state""#));
/// assert!(sql.contains(r#""message_id" uuid NOT NULL"#));
/// let dotnet = migrate::sql(&Tables::dotnet_default(), false);
/// assert!(dotnet.contains(r#"CONSTRAINT "PK_InboxState" PRIMARY KEY ("Id")"#));
/// assert!(!dotnet.contains("FOREIGN KEY"));
/// ```
pub fn sql(tables: &Tables, foreign_keys: bool) -> String {
    Migrator::new(tables.clone())
        .foreign_keys(foreign_keys)
        .sql()
}

/// ferrybus's own migration runner, for services without sea-orm-migration: applies every
/// migration of [`migrations`] in one transaction under `pg_advisory_xact_lock`, so several
/// instances may start at once. Tables that already exist (created by .NET or an earlier run)
/// are left as they are; a foreign key is added only when `OutboxMessage` has none to that
/// table.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use ferrybus_sea_orm::{Migrator, Tables};
/// let db = sea_orm::Database::connect("postgres://postgres@localhost/app").await?;
/// Migrator::new(Tables::new()).run(&db).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Migrator {
    tables: Tables,
    foreign_keys: bool,
}

impl Migrator {
    /// A migrator for `tables`, with the two foreign keys of MassTransit 8.3+.
    pub fn new(tables: Tables) -> Self {
        Self {
            tables,
            foreign_keys: true,
        }
    }

    /// Whether to add the foreign keys (on by default).
    pub fn foreign_keys(mut self, enabled: bool) -> Self {
        self.foreign_keys = enabled;
        self
    }

    fn create_tables(&self) -> CreateOutboxTables {
        CreateOutboxTables::new(self.tables.clone(), self.foreign_keys)
    }

    /// The migrations, oldest first, as sea-orm-migration runs them.
    pub fn migrations(&self) -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(self.create_tables())]
    }

    /// The SQL of a fresh install (see [`sql`]).
    pub fn sql(&self) -> String {
        let mut out = String::from(
            "-- ferrybus: MassTransit 8.5 EF Core outbox tables (InboxState, OutboxState, OutboxMessage) for PostgreSQL.\n\
             -- Generated by ferrybus_sea_orm::migrate::sql (ferrybus migrate --print). Idempotent: every statement\n\
             -- creates only what is missing. Foreign keys on tables that exist without them are added by the runner.\n",
        );
        for step in self.create_tables().steps() {
            out.push('\n');
            out.push_str(&step.to_sql());
            out.push_str(";\n");
        }
        out
    }

    /// Applies the migrations.
    pub async fn run(&self, db: &DatabaseConnection) -> Result<(), StoreError> {
        let txn = db.begin().await?;
        // `IF NOT EXISTS` makes PostgreSQL send "already exists, skipping" notices on every
        // start; they are not news.
        txn.execute_unprepared("SET LOCAL client_min_messages = warning")
            .await?;
        let manager = SchemaManager::new(&txn);
        for migration in self.migrations() {
            migration.up(&manager).await?;
        }
        txn.commit().await?;
        tracing::info!(
            target: "ferrybus::migrate",
            schema = self.tables.schema_name(),
            "outbox tables are in place"
        );
        Ok(())
    }
}
