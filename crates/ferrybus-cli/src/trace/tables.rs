//! The database's side of a trace: the message's inbox rows, the outbox rows it produced or is
//! itself, and the saga instances it is linked to. Each read is one `SELECT` whose row
//! PostgreSQL turns into JSON (`row_to_json`), so the tables' naming (snake or Pascal) and time
//! type (with or without time zone) need no model of their own.

use std::collections::BTreeMap;

use ferrybus_sea_orm::{NamingStyle, Tables};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use uuid::Uuid;

use super::queues::QueueSearch;
use crate::check;
use crate::error::{CliError, CliErrorKind};
use crate::message::{format_time, parse_time};
use crate::StorageArgs;

/// An inbox row of the message.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InboxEntry {
    /// The schema of the table.
    #[serde(default)]
    pub(crate) schema: String,
    /// The consumer id.
    pub(crate) consumer_id: Uuid,
    /// The consumer, when a `--consumer` key or a fault header names it.
    #[serde(default)]
    pub(crate) consumer: Option<String>,
    /// When the first copy arrived.
    #[serde(deserialize_with = "time")]
    pub(crate) received: Option<String>,
    /// Copies that arrived after the first.
    pub(crate) receive_count: i64,
    /// When the consumer committed.
    #[serde(deserialize_with = "time")]
    pub(crate) consumed: Option<String>,
    /// When all its outgoing messages were sent.
    #[serde(deserialize_with = "time")]
    pub(crate) delivered: Option<String>,
    /// The last of its outgoing messages sent so far.
    pub(crate) last_sequence_number: Option<i64>,
    /// `delivered`, `consumed` (outgoing messages not all sent) or `received` (the consumer
    /// did not commit).
    #[serde(skip_deserializing)]
    pub(crate) state: &'static str,
}

/// An outbox message row.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OutboxEntry {
    /// The schema of the table.
    #[serde(default)]
    pub(crate) schema: String,
    /// Its sequence number.
    pub(crate) sequence_number: i64,
    /// The outgoing message's id.
    pub(crate) message_id: Uuid,
    /// Its message types (`urn:message:…`, `;`-separated as MassTransit stores them).
    pub(crate) message_type: String,
    /// Where it goes.
    pub(crate) destination_address: Option<String>,
    /// When it was written (`SentTime`).
    #[serde(deserialize_with = "time")]
    pub(crate) sent_time: Option<String>,
    /// When it is due (a scheduled send), if later.
    #[serde(deserialize_with = "time")]
    pub(crate) enqueue_time: Option<String>,
    /// Its correlation id.
    pub(crate) correlation_id: Option<Uuid>,
    /// The consumed message whose consumer produced it (consumer outbox).
    pub(crate) inbox_message_id: Option<Uuid>,
    /// That consumer's id.
    pub(crate) inbox_consumer_id: Option<Uuid>,
    /// That consumer, when known.
    #[serde(default)]
    pub(crate) inbox_consumer: Option<String>,
    /// The bus outbox it waits in (bus outbox).
    pub(crate) outbox_id: Option<Uuid>,
}

/// What the messaging tables hold of the message.
#[derive(Debug, Default)]
pub(crate) struct Read {
    pub(crate) inbox: Vec<InboxEntry>,
    pub(crate) produced: Vec<OutboxEntry>,
    pub(crate) outbox: Vec<OutboxEntry>,
}

/// Reads the rows of message `id` in the tables of every `--schema` (found as `outbox status`
/// finds them: all three must exist; the naming is read from their columns unless given).
pub(crate) async fn read(
    db: &DatabaseConnection,
    storage: &StorageArgs,
    id: Uuid,
) -> Result<Read, CliError> {
    let mut read = Read::default();
    for search in storage.searches() {
        let tables = check::status_tables(check::read(db, &search).await?)?;
        let schema = tables.schema_name().to_owned();
        let mut inbox: Vec<InboxEntry> = rows(db, &tables, &inbox_select(&tables), id).await?;
        for row in &mut inbox {
            row.schema.clone_from(&schema);
            row.state = state(row);
        }
        let by_inbox = outbox_select(&tables, "InboxMessageId");
        let mut produced: Vec<OutboxEntry> = rows(db, &tables, &by_inbox, id).await?;
        let own = outbox_select(&tables, "MessageId");
        let mut outbox: Vec<OutboxEntry> = rows(db, &tables, &own, id).await?;
        for row in produced.iter_mut().chain(outbox.iter_mut()) {
            row.schema.clone_from(&schema);
        }
        read.inbox.append(&mut inbox);
        read.produced.append(&mut produced);
        read.outbox.append(&mut outbox);
    }
    Ok(read)
}

fn state(row: &InboxEntry) -> &'static str {
    match (&row.consumed, &row.delivered) {
        (_, Some(_)) => "delivered",
        (Some(_), None) => "consumed",
        (None, None) => "received",
    }
}

/// A column of `tables`' naming, from its PascalCase name.
fn column(naming: NamingStyle, pascal: &str) -> String {
    match naming {
        NamingStyle::PascalCase => pascal.to_owned(),
        NamingStyle::SnakeCase => {
            let mut snake = String::new();
            for (i, c) in pascal.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    snake.push('_');
                }
                snake.push(c.to_ascii_lowercase());
            }
            snake
        }
    }
}

/// An identifier, quoted.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `SELECT row_to_json(…)` of `columns` (aliased to their camelCase names) of the rows of
/// `table` whose `key` is `$1`, ordered by `order`.
fn select(tables: &Tables, table: &str, columns: &[&str], key: &str, order: &[&str]) -> String {
    let naming = tables.naming_style();
    let camel = |c: &str| {
        let mut chars = c.chars();
        chars
            .next()
            .map(|f| f.to_ascii_lowercase().to_string() + chars.as_str())
            .unwrap_or_default()
    };
    let list = columns
        .iter()
        .map(|c| format!("t.{} AS {}", ident(&column(naming, c)), ident(&camel(c))))
        .collect::<Vec<_>>()
        .join(", ");
    let order = order
        .iter()
        .map(|c| format!("x.{}", ident(&camel(c))))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT row_to_json(x)::text AS row FROM (SELECT {list} FROM {}.{} t WHERE t.{} = $1) x ORDER BY {order}",
        ident(tables.schema_name()),
        ident(table),
        ident(&column(naming, key)),
    )
}

fn inbox_select(tables: &Tables) -> String {
    select(
        tables,
        tables.inbox_state(),
        &[
            "ConsumerId",
            "Received",
            "ReceiveCount",
            "Consumed",
            "Delivered",
            "LastSequenceNumber",
        ],
        "MessageId",
        &["Received", "ConsumerId"],
    )
}

fn outbox_select(tables: &Tables, key: &str) -> String {
    select(
        tables,
        tables.outbox_message(),
        &[
            "SequenceNumber",
            "MessageId",
            "MessageType",
            "DestinationAddress",
            "SentTime",
            "EnqueueTime",
            "CorrelationId",
            "InboxMessageId",
            "InboxConsumerId",
            "OutboxId",
        ],
        key,
        &["InboxConsumerId", "SequenceNumber"],
    )
}

/// The rows `sql` selects with `$1 = id`, each decoded from its JSON.
async fn rows<T: DeserializeOwned>(
    db: &DatabaseConnection,
    tables: &Tables,
    sql: &str,
    id: Uuid,
) -> Result<Vec<T>, CliError> {
    let what = || format!("reading the tables of schema {}", tables.schema_name());
    json_rows(db, sql, id)
        .await
        .map_err(|e| CliError::database(what(), e))?
        .into_iter()
        .map(|row| {
            serde_json::from_value(row)
                .map_err(|e| CliError::new(CliErrorKind::Database, format!("{}: {e}", what())))
        })
        .collect()
}

async fn json_rows(
    db: &DatabaseConnection,
    sql: &str,
    id: Uuid,
) -> Result<Vec<Value>, sea_orm::DbErr> {
    json_texts(db, sql, id)
        .await?
        .iter()
        .map(|text| serde_json::from_str(text).map_err(|e| sea_orm::DbErr::Custom(e.to_string())))
        .collect()
}

/// The `row` column of the rows `sql` selects with `$1 = id`: JSON text as PostgreSQL wrote it.
async fn json_texts(
    db: &DatabaseConnection,
    sql: &str,
    id: Uuid,
) -> Result<Vec<String>, sea_orm::DbErr> {
    let statement = Statement::from_sql_and_values(DbBackend::Postgres, sql, [id.into()]);
    db.query_all_raw(statement)
        .await?
        .iter()
        .map(|row| row.try_get::<String>("", "row"))
        .collect()
}

/// A time as the other commands print it (RFC 3339, UTC, milliseconds); a column without time
/// zone is read as UTC, as MassTransit writes it.
fn time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = Option::<String>::deserialize(d)?;
    Ok(text.map(|t| parse_time(&t).map_or(t, |time| format_time(&time))))
}

/// A `--saga-table`: `TABLE` or `SCHEMA.TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SagaTableName {
    schema: String,
    table: String,
}

impl SagaTableName {
    /// Parses `text`, with `schema` when it names none.
    pub(crate) fn parse(text: &str, schema: &str) -> Result<Self, CliError> {
        let (s, t) = text.split_once('.').unwrap_or((schema, text));
        if s.is_empty() || t.is_empty() || t.contains('.') {
            return Err(CliError::usage(format!(
                "--saga-table {text:?} is not TABLE or SCHEMA.TABLE"
            )));
        }
        Ok(Self {
            schema: s.to_owned(),
            table: t.to_owned(),
        })
    }
}

/// A saga table found: its key and state columns.
#[derive(Debug)]
pub(crate) struct SagaTable {
    name: SagaTableName,
    key: String,
    state: Option<String>,
}

/// Finds each saga table's columns: the key `CorrelationId` (or `correlation_id`) and the state
/// `CurrentState` (or `current_state`), as MassTransit's EF Core saga map and ferrybus-saga
/// name them.
pub(crate) async fn resolve_sagas(
    db: &DatabaseConnection,
    names: &[SagaTableName],
) -> Result<Vec<SagaTable>, CliError> {
    let mut found = Vec::new();
    for name in names {
        let shown = format!("{}.{}", name.schema, name.table);
        let sql = "SELECT column_name::text AS c FROM information_schema.columns \
                   WHERE table_schema = $1 AND table_name = $2";
        let statement = Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            [name.schema.clone().into(), name.table.clone().into()],
        );
        let columns: Vec<String> = db
            .query_all_raw(statement)
            .await
            .map_err(|e| CliError::database(format!("looking up saga table {shown}"), e))?
            .iter()
            .filter_map(|r| r.try_get::<String>("", "c").ok())
            .collect();
        if columns.is_empty() {
            return Err(CliError::new(
                CliErrorKind::Database,
                format!("saga table {shown} does not exist"),
            ));
        }
        let pick = |names: [&str; 2]| {
            names
                .iter()
                .find(|n| columns.iter().any(|c| c == *n))
                .map(|n| (*n).to_owned())
        };
        let key = pick(["CorrelationId", "correlation_id"]).ok_or_else(|| {
            CliError::new(
                CliErrorKind::Database,
                format!("saga table {shown} has no CorrelationId (or correlation_id) column"),
            )
        })?;
        found.push(SagaTable {
            name: name.clone(),
            key,
            state: pick(["CurrentState", "current_state"]),
        });
    }
    Ok(found)
}

/// A saga instance linked to the message.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SagaEntry {
    /// `schema.table`.
    pub(crate) table: String,
    /// The instance's correlation id.
    pub(crate) correlation_id: Uuid,
    /// Its state, when the table has a state column.
    pub(crate) current_state: Option<Value>,
    /// How the message is linked to it (see [`saga_links`]).
    pub(crate) linked_by: Vec<String>,
    /// The whole row, as PostgreSQL writes it in JSON (numbers keep every digit).
    pub(crate) row: Box<RawValue>,
}

/// The correlation ids that link a saga instance to message `id`, each with where it came from:
/// the message id itself, `--correlation-id`, the envelope `correlationId` (or AMQP
/// `correlation_id`) of a copy found in a queue, the `CorrelationId` of the message's own outbox
/// row, and of the outbox rows it produced (a saga publishes with its instance's id).
///
/// The tables record no "message X changed instance Y", so this is what links them: the id
/// MassTransit correlates events to instances by (`CorrelateById(context => context.Message…)`
/// most often reads the same value the envelope carries).
pub(crate) fn saga_links(
    id: Uuid,
    given: &[Uuid],
    queues: &QueueSearch,
    read: &Read,
) -> BTreeMap<Uuid, Vec<String>> {
    let mut links: BTreeMap<Uuid, Vec<String>> = BTreeMap::new();
    let mut add = |id: Option<Uuid>, why: &str| {
        if let Some(id) = id {
            let whys = links.entry(id).or_default();
            if !whys.iter().any(|w| w == why) {
                whys.push(why.to_owned());
            }
        }
    };
    add(Some(id), "message id");
    for given in given {
        add(Some(*given), "--correlation-id");
    }
    for copy in &queues.copies {
        add(
            copy.envelope_correlation_id,
            "correlation id of its copy in a queue",
        );
        let property = copy.summary.correlation_id.as_deref();
        add(
            property.and_then(|p| Uuid::parse_str(p).ok()),
            "correlation id of its copy in a queue",
        );
    }
    for row in &read.outbox {
        add(row.correlation_id, "correlation id of its outbox row");
    }
    for row in &read.produced {
        add(
            row.correlation_id,
            "correlation id of a message it produced",
        );
    }
    links
}

/// The instances of `tables` whose key is one of `ids`.
pub(crate) async fn sagas(
    db: &DatabaseConnection,
    tables: &[SagaTable],
    ids: &BTreeMap<Uuid, Vec<String>>,
) -> Result<Vec<SagaEntry>, CliError> {
    let mut found = Vec::new();
    for table in tables {
        let shown = format!("{}.{}", table.name.schema, table.name.table);
        let sql = format!(
            "SELECT row_to_json(t)::text AS row FROM {}.{} t WHERE t.{} = $1",
            ident(&table.name.schema),
            ident(&table.name.table),
            ident(&table.key)
        );
        for (id, why) in ids {
            let what = || format!("reading saga table {shown}");
            let rows = json_texts(db, &sql, *id)
                .await
                .map_err(|e| CliError::database(what(), e))?;
            for text in rows {
                let bad = |e: serde_json::Error| CliError::database(what(), e);
                let fields: Value = serde_json::from_str(&text).map_err(bad)?;
                found.push(SagaEntry {
                    table: shown.clone(),
                    correlation_id: *id,
                    current_state: table.state.as_ref().and_then(|s| fields.get(s).cloned()),
                    linked_by: why.clone(),
                    row: RawValue::from_string(text).map_err(bad)?,
                });
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_follow_the_naming() {
        assert_eq!(
            column(NamingStyle::SnakeCase, "InboxMessageId"),
            "inbox_message_id"
        );
        assert_eq!(
            column(NamingStyle::PascalCase, "InboxMessageId"),
            "InboxMessageId"
        );
        let sql = inbox_select(&Tables::dotnet_default().schema("ops"));
        assert!(sql.contains(r#"t."ConsumerId" AS "consumerId""#), "{sql}");
        assert!(
            sql.contains(r#"FROM "ops"."InboxState" t WHERE t."MessageId" = $1"#),
            "{sql}"
        );
    }

    #[test]
    fn saga_table_names() {
        let t = SagaTableName::parse("sales.order_state", "messaging").unwrap();
        assert_eq!(
            (t.schema.as_str(), t.table.as_str()),
            ("sales", "order_state")
        );
        let t = SagaTableName::parse("OrderState", "public").unwrap();
        assert_eq!(
            (t.schema.as_str(), t.table.as_str()),
            ("public", "OrderState")
        );
        assert!(SagaTableName::parse("a.b.c", "x").is_err());
        assert!(SagaTableName::parse(".b", "x").is_err());
    }
}
