//! The tables from the command line (a [`TableSearch`] of the storage crate), the settings a
//! service needs for them, the migration SQL and running it, the connection.

use ferrybus_core::address::redact;
use std::time::Duration;

use ferrybus_sea_orm::migrate::{self, TableSearch};
use ferrybus_sea_orm::{Migrator, NamingStyle, Tables};
use sea_orm::{ConnectOptions, Database, DatabaseConnection};

use crate::error::CliError;

/// Column naming of the messaging tables, as billing's `FERRYBUS_NAMING` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Naming {
    /// `inbox_state`, `message_id` (EFCore.NamingConventions' snake case).
    #[value(alias = "snake_case")]
    Snake,
    /// `"InboxState"`, `"MessageId"` (EF Core's default).
    #[value(alias = "PascalCase")]
    Pascal,
}

impl Naming {
    /// The storage crate's naming style.
    pub(crate) fn style(self) -> NamingStyle {
        match self {
            Naming::Snake => NamingStyle::SnakeCase,
            Naming::Pascal => NamingStyle::PascalCase,
        }
    }

    /// `snake` / `pascal`, as `FERRYBUS_NAMING` takes it, for the storage crate's style.
    pub(crate) fn name_of(style: NamingStyle) -> &'static str {
        match style {
            NamingStyle::SnakeCase => "snake",
            NamingStyle::PascalCase => "pascal",
        }
    }
}

/// Where the tables of `schema` are, from the command line: the naming and names given (the
/// storage crate finds the rest, [`TableSearch`]).
pub(crate) fn search(
    schema: &str,
    naming: Option<Naming>,
    names: [Option<&str>; 3],
) -> TableSearch {
    let mut search = TableSearch::new(schema);
    if let Some(naming) = naming {
        search = search.naming(naming.style());
    }
    let [inbox, state, message] = names;
    if let Some(name) = inbox {
        search = search.inbox_state(name);
    }
    if let Some(name) = state {
        search = search.outbox_state(name);
    }
    if let Some(name) = message {
        search = search.outbox_message(name);
    }
    search
}

/// The environment billing (and any ferrybus service configured the same way) needs for
/// `tables`.
pub(crate) fn env(tables: &Tables) -> String {
    format!(
        "FERRYBUS_SCHEMA={} FERRYBUS_NAMING={} FERRYBUS_INBOX_TABLE={} FERRYBUS_OUTBOX_STATE_TABLE={} FERRYBUS_OUTBOX_MESSAGE_TABLE={}",
        tables.schema_name(),
        Naming::name_of(tables.naming_style()),
        tables.inbox_state(),
        tables.outbox_state(),
        tables.outbox_message()
    )
}

/// The DDL that creates these tables (what `migrate` runs), for a DBA.
pub(crate) fn migration_sql(tables: &Tables, foreign_keys: bool) -> String {
    migrate::sql(tables, foreign_keys)
}

/// Creates whatever of the tables is missing (idempotent, under the migrator's advisory lock).
pub(crate) async fn run_migration(
    db: &DatabaseConnection,
    tables: &Tables,
    foreign_keys: bool,
) -> Result<(), CliError> {
    Migrator::new(tables.clone())
        .foreign_keys(foreign_keys)
        .run(db)
        .await
        .map_err(|e| CliError::database(format!("migrating schema {}", tables.schema_name()), e))
}

/// Connects to PostgreSQL at `url` (a small pool: the tool runs one query at a time).
pub(crate) async fn connect(url: &str) -> Result<DatabaseConnection, CliError> {
    let shown = redact(url);
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(CliError::usage(format!(
            "--database-url {shown} is not a postgres:// URL"
        )));
    }
    let mut options = ConnectOptions::new(url);
    options
        .max_connections(2)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(15))
        .acquire_timeout(Duration::from_secs(15))
        .sqlx_logging(false);
    Database::connect(options)
        .await
        .map_err(|e| CliError::database(format!("connecting to {shown}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searches_and_env() {
        let none = [None, None, None];
        assert_eq!(search("messaging", None, none).tables(), Tables::new());
        assert_eq!(
            search("public", Some(Naming::Pascal), none).tables(),
            Tables::dotnet_default()
        );
        let custom = search(
            "c",
            Some(Naming::Pascal),
            [Some("InboxStates"), None, Some("OutboxMessages")],
        )
        .tables();
        assert_eq!(custom.outbox_state(), "OutboxState");
        assert_eq!(custom.outbox_message(), "OutboxMessages");
        assert!(env(&custom).contains("FERRYBUS_NAMING=pascal FERRYBUS_INBOX_TABLE=InboxStates"));
    }

    #[test]
    fn the_ddl_names_the_tables() {
        let sql = migration_sql(&Tables::new().schema("ops"), false);
        assert!(sql.contains(r#"CREATE TABLE IF NOT EXISTS "ops"."inbox_state""#));
        assert!(!sql.contains("FOREIGN KEY"));
    }
}
