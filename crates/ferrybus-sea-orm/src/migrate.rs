//! The idempotent migrator: MassTransit 8.5's three tables, rendered from one SQL template for
//! any schema, table names and naming style.
//!
//! The template is `migrations/template.sql` in the repository; the files rendered for the two
//! default shapes sit beside it for DBAs (`messaging-snake-case.sql`,
//! `dotnet-default-pascal-case.sql`), and a test checks they equal [`render`]'s output.

use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait};

use crate::config::Tables;
use crate::error::StoreError;
use crate::sql::names::{column_name, constraint_name, literal, quote, Col};

/// The SQL template, with `{{…}}` placeholders.
pub const TEMPLATE: &str = include_str!("../../../migrations/template.sql");

/// The advisory lock key that serializes concurrent migrators (`pg_advisory_xact_lock`).
pub const ADVISORY_LOCK_KEY: i64 = 0x6665_7272_7962_7573; // "ferrybus"

const FK_BEGIN: &str = "-- ferrybus:foreign-keys:begin";
const FK_END: &str = "-- ferrybus:foreign-keys:end";

/// Renders the migration for `tables`; without the foreign-key section when `foreign_keys` is
/// false (for databases that must stay in the pre-8.3 shape).
///
/// ```
/// use ferrybus_sea_orm::{migrate, Tables};
/// let sql = migrate::render(&Tables::new(), true);
/// assert!(sql.contains(r#"CREATE TABLE IF NOT EXISTS "messaging"."inbox_state""#));
/// assert!(sql.contains(r#""message_id" uuid NOT NULL"#));
/// let dotnet = migrate::render(&Tables::dotnet_default(), false);
/// assert!(dotnet.contains(r#"CONSTRAINT "PK_InboxState" PRIMARY KEY ("Id")"#));
/// assert!(!dotnet.contains("FOREIGN KEY"));
/// ```
pub fn render(tables: &Tables, foreign_keys: bool) -> String {
    let template = if foreign_keys {
        TEMPLATE.to_owned()
    } else {
        strip_section(TEMPLATE)
    };
    let mut out = String::with_capacity(template.len() + 1024);
    let mut rest = template.as_str();
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .map(|e| start + e)
            .expect("unclosed placeholder");
        out.push_str(&placeholder(tables, &rest[start + 2..end]));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

fn strip_section(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut skipping = false;
    for line in template.lines() {
        if line.trim() == FK_BEGIN {
            skipping = true;
        } else if line.trim() == FK_END {
            skipping = false;
        } else if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn placeholder(tables: &Tables, key: &str) -> String {
    let style = tables.naming_style();
    let table = |name: &str| match name {
        "inbox_state" => tables.inbox_state(),
        "outbox_state" => tables.outbox_state(),
        "outbox_message" => tables.outbox_message(),
        other => panic!("unknown table placeholder {other}"),
    };
    let qualified = |name: &str| format!("{}.{}", quote(tables.schema_name()), quote(table(name)));
    if key == "schema" {
        return quote(tables.schema_name());
    }
    if let Some(name) = key.strip_prefix("t.") {
        return qualified(name);
    }
    if let Some(name) = key.strip_prefix("reg.") {
        return format!("{}::regclass", literal(&qualified(name)));
    }
    if let Some(name) = key.strip_prefix("c.") {
        let col = Col::ALL
            .into_iter()
            .find(|c| c.pascal() == name)
            .unwrap_or_else(|| panic!("unknown column placeholder {name}"));
        return quote(&column_name(col, style));
    }
    if let Some(name) = key.strip_prefix("n.") {
        return quote(&constraint(tables, name));
    }
    panic!("unknown placeholder {key}")
}

/// The EF-style name of constraint or index `key` of the template.
fn constraint(tables: &Tables, key: &str) -> String {
    let style = tables.naming_style();
    let col = |c: Col| column_name(c, style);
    let (inbox, state, message) = (
        tables.inbox_state(),
        tables.outbox_state(),
        tables.outbox_message(),
    );
    let (prefix, table, cols): (&str, &str, Vec<String>) = match key {
        "pk_inbox_state" => ("PK", inbox, vec![]),
        "ak_inbox_state" => ("AK", inbox, vec![col(Col::MessageId), col(Col::ConsumerId)]),
        "pk_outbox_state" => ("PK", state, vec![]),
        "pk_outbox_message" => ("PK", message, vec![]),
        "ix_inbox_state_delivered" => ("IX", inbox, vec![col(Col::Delivered)]),
        "ix_outbox_message_enqueue_time" => ("IX", message, vec![col(Col::EnqueueTime)]),
        "ix_outbox_message_expiration_time" => ("IX", message, vec![col(Col::ExpirationTime)]),
        "ix_outbox_message_inbox" => (
            "IX",
            message,
            vec![
                col(Col::InboxMessageId),
                col(Col::InboxConsumerId),
                col(Col::SequenceNumber),
            ],
        ),
        "ix_outbox_message_outbox" => (
            "IX",
            message,
            vec![col(Col::OutboxId), col(Col::SequenceNumber)],
        ),
        "ix_outbox_state_created" => ("IX", state, vec![col(Col::Created)]),
        "fk_outbox_message_inbox_state" => (
            "FK",
            message,
            vec![
                inbox.to_owned(),
                col(Col::InboxMessageId),
                col(Col::InboxConsumerId),
            ],
        ),
        "fk_outbox_message_outbox_state" => {
            ("FK", message, vec![state.to_owned(), col(Col::OutboxId)])
        }
        other => panic!("unknown constraint placeholder {other}"),
    };
    let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
    constraint_name(prefix, table, &cols, style)
}

/// Creates the schema, tables, indexes and (optionally) foreign keys if they are missing.
///
/// Runs in one transaction under `pg_advisory_xact_lock`, so several instances may start at
/// once. Tables that already exist (created by .NET or an earlier run) are left as they are;
/// a foreign key is added only when `outbox_message` has none to that table.
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

    /// The SQL this migrator runs (what a DBA would apply by hand).
    pub fn sql(&self) -> String {
        render(&self.tables, self.foreign_keys)
    }

    /// Applies the migration.
    pub async fn run(&self, db: &DatabaseConnection) -> Result<(), StoreError> {
        let txn = db.begin().await?;
        // `IF NOT EXISTS` makes PostgreSQL send "already exists, skipping" notices on every
        // start; they are not news.
        txn.execute_unprepared("SET LOCAL client_min_messages = warning")
            .await?;
        txn.execute_unprepared(&format!(
            "SELECT pg_advisory_xact_lock({ADVISORY_LOCK_KEY})"
        ))
        .await?;
        txn.execute_unprepared(&self.sql()).await?;
        txn.commit().await?;
        tracing::info!(
            target: "ferrybus::migrate",
            schema = self.tables.schema_name(),
            "outbox tables are in place"
        );
        Ok(())
    }
}
