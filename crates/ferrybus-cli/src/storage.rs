//! The tool's only contact with `ferrybus-sea-orm`: the table set from the command line, the
//! migration SQL and running it. Kept in this one module so that a change of the storage
//! crate's migration API touches nothing else.

use std::time::Duration;

use ferrybus_sea_orm::{migrate, Migrator, NamingStyle, Tables};
use sea_orm::{ConnectOptions, Database, DatabaseConnection};

use crate::error::CliError;
use crate::redact;

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

    /// The default table names of this naming: inbox state, outbox state, outbox message.
    pub(crate) fn default_names(self) -> [&'static str; 3] {
        match self {
            Naming::Snake => ["inbox_state", "outbox_state", "outbox_message"],
            Naming::Pascal => ["InboxState", "OutboxState", "OutboxMessage"],
        }
    }

    /// `snake` / `pascal`, as `FERRYBUS_NAMING` takes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Naming::Snake => "snake",
            Naming::Pascal => "pascal",
        }
    }

    /// A column's name in this naming, from its .NET name (`MessageId` → `message_id`).
    pub(crate) fn column(self, pascal: &str) -> String {
        match self {
            Naming::Pascal => pascal.to_owned(),
            Naming::Snake => {
                let mut out = String::with_capacity(pascal.len() + 4);
                let mut previous: Option<char> = None;
                for c in pascal.chars() {
                    if c.is_uppercase()
                        && previous.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit())
                    {
                        out.push('_');
                    }
                    out.extend(c.to_lowercase());
                    previous = Some(c);
                }
                out
            }
        }
    }
}

/// One table set: a schema, the three table names, the naming.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableSet {
    /// The schema.
    pub(crate) schema: String,
    /// Inbox state table.
    pub(crate) inbox: String,
    /// Outbox state table.
    pub(crate) state: String,
    /// Outbox message table.
    pub(crate) message: String,
    /// The column naming.
    pub(crate) naming: Naming,
}

impl TableSet {
    /// The table set of `schema` in `naming`, with the names given or the naming's defaults.
    pub(crate) fn new(schema: &str, naming: Naming, names: [Option<&str>; 3]) -> Self {
        let defaults = naming.default_names();
        let pick = |i: usize| names[i].unwrap_or(defaults[i]).to_owned();
        Self {
            schema: schema.to_owned(),
            inbox: pick(0),
            state: pick(1),
            message: pick(2),
            naming,
        }
    }

    /// The storage crate's description of these tables.
    pub(crate) fn tables(&self) -> Tables {
        Tables::new()
            .schema(self.schema.clone())
            .names(self.inbox.clone(), self.state.clone(), self.message.clone())
            .naming(self.naming.style())
    }

    /// The environment billing (and any ferrybus service configured the same way) needs for
    /// these tables.
    pub(crate) fn env(&self) -> String {
        format!(
            "FERRYBUS_SCHEMA={} FERRYBUS_NAMING={} FERRYBUS_INBOX_TABLE={} FERRYBUS_OUTBOX_STATE_TABLE={} FERRYBUS_OUTBOX_MESSAGE_TABLE={}",
            self.schema,
            self.naming.as_str(),
            self.inbox,
            self.state,
            self.message
        )
    }
}

/// The DDL that creates these tables (what `migrate` runs), for a DBA.
pub(crate) fn migration_sql(set: &TableSet, foreign_keys: bool) -> String {
    migrate::sql(&set.tables(), foreign_keys)
}

/// Creates whatever of the tables is missing (idempotent, under the migrator's advisory lock).
pub(crate) async fn run_migration(
    db: &DatabaseConnection,
    set: &TableSet,
    foreign_keys: bool,
) -> Result<(), CliError> {
    Migrator::new(set.tables())
        .foreign_keys(foreign_keys)
        .run(db)
        .await
        .map_err(|e| CliError::database(format!("migrating schema {}", set.schema), e))
}

/// Connects to PostgreSQL at `url` (a small pool: the tool runs one query at a time).
pub(crate) async fn connect(url: &str) -> Result<DatabaseConnection, CliError> {
    let shown = redact::url(url);
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
    fn table_sets() {
        let set = TableSet::new("messaging", Naming::Snake, [None, None, None]);
        assert_eq!(set.tables(), Tables::new());
        let dotnet = TableSet::new("public", Naming::Pascal, [None, None, None]);
        assert_eq!(dotnet.tables(), Tables::dotnet_default());
        let custom = TableSet::new(
            "c",
            Naming::Pascal,
            [Some("InboxStates"), None, Some("OutboxMessages")],
        );
        assert_eq!(custom.state, "OutboxState");
        assert_eq!(custom.message, "OutboxMessages");
        assert!(custom
            .env()
            .contains("FERRYBUS_NAMING=pascal FERRYBUS_INBOX_TABLE=InboxStates"));
        assert_eq!(
            Naming::Snake.column("LastSequenceNumber"),
            "last_sequence_number"
        );
        assert_eq!(Naming::Pascal.column("MessageId"), "MessageId");
    }

    #[test]
    fn the_ddl_names_the_tables() {
        let sql = migration_sql(
            &TableSet::new("ops", Naming::Snake, [None, None, None]),
            false,
        );
        assert!(sql.contains(r#"CREATE TABLE IF NOT EXISTS "ops"."inbox_state""#));
        assert!(!sql.contains("FOREIGN KEY"));
    }
}
