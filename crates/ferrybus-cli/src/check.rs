//! `ferrybus migrate --check`: is an existing schema (one a .NET service created, or an older
//! ferrybus) what ferrybus needs, and which naming does it use? Read-only catalog queries.
//!
//! ferrybus needs MassTransit ≥ 8.1's tables (`docs/reference/masstransit-outbox.md`): every
//! column it reads or writes with a compatible type, the `(MessageId, ConsumerId)` unique key
//! its inbox insert conflicts on, defaults on `Id` / `SequenceNumber` (it never inserts them),
//! and no other `NOT NULL` column without a default. The foreign keys of 8.3 and the time
//! column type (`timestamptz`, or Npgsql's legacy `timestamp`) are reported, not required.

use std::collections::BTreeMap;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde::Serialize;

use crate::error::CliError;
use crate::storage::{Naming, TableSet};

const TS: &[&str] = &["timestamp with time zone", "timestamp without time zone"];
const INT: &[&str] = &["bigint", "integer"];
const UUID: &[&str] = &["uuid"];
const TEXT: &[&str] = &["text", "character varying"];
const BYTES: &[&str] = &["bytea"];

/// A column ferrybus uses: its .NET name, the types it accepts, whether it must exist, whether
/// ferrybus writes it on insert, whether it needs a default.
struct Need(&'static str, &'static [&'static str], bool, bool, bool);

const INBOX: &[Need] = &[
    Need("Id", INT, true, false, true),
    Need("MessageId", UUID, true, true, false),
    Need("ConsumerId", UUID, true, true, false),
    Need("LockId", UUID, true, true, false),
    Need("RowVersion", BYTES, false, false, false),
    Need("Received", TS, true, true, false),
    Need("ReceiveCount", INT, true, true, false),
    Need("ExpirationTime", TS, true, false, false),
    Need("Consumed", TS, true, true, false),
    Need("Delivered", TS, true, true, false),
    Need("LastSequenceNumber", INT, true, false, false),
];

const STATE: &[Need] = &[
    Need("OutboxId", UUID, true, true, false),
    Need("LockId", UUID, true, true, false),
    Need("RowVersion", BYTES, false, false, false),
    Need("Created", TS, true, true, false),
    Need("Delivered", TS, true, false, false),
    Need("LastSequenceNumber", INT, true, false, false),
];

const MESSAGE: &[Need] = &[
    Need("SequenceNumber", INT, true, false, true),
    Need("EnqueueTime", TS, true, false, false),
    Need("SentTime", TS, true, true, false),
    Need("Headers", TEXT, true, true, false),
    Need("Properties", TEXT, true, true, false),
    Need("InboxMessageId", UUID, true, true, false),
    Need("InboxConsumerId", UUID, true, true, false),
    Need("OutboxId", UUID, true, true, false),
    Need("MessageId", UUID, true, true, false),
    Need("ContentType", TEXT, true, true, false),
    Need("MessageType", TEXT, true, true, false),
    Need("Body", TEXT, true, true, false),
    Need("ConversationId", UUID, true, true, false),
    Need("CorrelationId", UUID, true, true, false),
    Need("InitiatorId", UUID, true, true, false),
    Need("RequestId", UUID, true, true, false),
    Need("SourceAddress", TEXT, true, true, false),
    Need("DestinationAddress", TEXT, true, true, false),
    Need("ResponseAddress", TEXT, true, true, false),
    Need("FaultAddress", TEXT, true, true, false),
    Need("ExpirationTime", TS, true, true, false),
];

/// What `--check` found for one schema.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    /// The schema.
    pub(crate) schema: String,
    /// The naming the tables use (`snake`, `pascal`), when known.
    pub(crate) naming: Option<&'static str>,
    /// Whether the naming was detected rather than given.
    pub(crate) detected: bool,
    /// The three tables: inbox state, outbox state, outbox message.
    pub(crate) tables: [String; 3],
    /// Per table: `ok`, `missing` or `problems`.
    pub(crate) status: BTreeMap<String, &'static str>,
    /// The type of the time columns.
    pub(crate) timestamps: Option<String>,
    /// The foreign keys of the outbox message table, as `table → referenced table`.
    pub(crate) foreign_keys: Vec<String>,
    /// What stops ferrybus from using the tables.
    pub(crate) problems: Vec<String>,
    /// Worth knowing, not a problem.
    pub(crate) notes: Vec<String>,
    /// Whether ferrybus can use the tables as they are.
    pub(crate) ok: bool,
    /// The settings a ferrybus service needs for these tables.
    pub(crate) env: Option<String>,
}

/// A column as the catalog describes it.
#[derive(Debug)]
struct Column {
    data_type: String,
    nullable: bool,
    has_default: bool,
}

async fn columns(
    db: &DatabaseConnection,
    schema: &str,
    table: &str,
) -> Result<BTreeMap<String, Column>, CliError> {
    let rows = db
        .query_all(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT column_name::text AS name, data_type::text AS data_type, (is_nullable = 'YES') AS nullable, \
             (column_default IS NOT NULL OR is_identity = 'YES') AS has_default \
             FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
            [schema.into(), table.into()],
        ))
        .await
        .map_err(|e| CliError::database(format!("reading the columns of {schema}.{table}"), e))?;
    let mut out = BTreeMap::new();
    for row in rows {
        let get = |c: &str| row.try_get::<String>("", c);
        let name = get("name").map_err(|e| CliError::database("reading the catalog", e))?;
        out.insert(
            name,
            Column {
                data_type: get("data_type")
                    .map_err(|e| CliError::database("reading the catalog", e))?,
                nullable: row.try_get("", "nullable").unwrap_or(true),
                has_default: row.try_get("", "has_default").unwrap_or(false),
            },
        );
    }
    Ok(out)
}

async fn unique_keys(
    db: &DatabaseConnection,
    schema: &str,
    table: &str,
) -> Result<Vec<String>, CliError> {
    let rows = db
        .query_all(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT string_agg(a.attname::text, ',' ORDER BY a.attname::text) AS cols \
             FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) \
             WHERE n.nspname = $1 AND c.relname = $2 AND i.indisunique GROUP BY i.indexrelid",
            [schema.into(), table.into()],
        ))
        .await
        .map_err(|e| CliError::database(format!("reading the indexes of {schema}.{table}"), e))?;
    Ok(rows
        .iter()
        .filter_map(|r| r.try_get::<String>("", "cols").ok())
        .collect())
}

async fn foreign_keys(
    db: &DatabaseConnection,
    schema: &str,
    table: &str,
) -> Result<Vec<String>, CliError> {
    let rows = db
        .query_all(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT cf.relname::text AS target FROM pg_constraint k \
             JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_class cf ON cf.oid = k.confrelid \
             WHERE k.contype = 'f' AND n.nspname = $1 AND c.relname = $2 ORDER BY 1",
            [schema.into(), table.into()],
        ))
        .await
        .map_err(|e| {
            CliError::database(format!("reading the foreign keys of {schema}.{table}"), e)
        })?;
    Ok(rows
        .iter()
        .filter_map(|r| r.try_get::<String>("", "target").ok())
        .collect())
}

/// The naming of a table from its columns: `message_id` → snake, `MessageId` → pascal.
fn naming_of(columns: &BTreeMap<String, Column>) -> Option<Naming> {
    if columns.contains_key("message_id") {
        Some(Naming::Snake)
    } else if columns.contains_key("MessageId") {
        Some(Naming::Pascal)
    } else {
        None
    }
}

/// Checks the tables of `schema`: with `naming` and `names` when given, else finds them
/// (snake_case names first, then .NET's PascalCase ones) and detects the naming from the
/// columns.
pub(crate) async fn check(
    db: &DatabaseConnection,
    schema: &str,
    naming: Option<Naming>,
    names: [Option<&str>; 3],
) -> Result<Report, CliError> {
    let candidates: Vec<TableSet> = match naming {
        Some(naming) => vec![TableSet::new(schema, naming, names)],
        None => vec![
            TableSet::new(schema, Naming::Snake, names),
            TableSet::new(schema, Naming::Pascal, names),
        ],
    };
    let mut chosen = None;
    for set in &candidates {
        let inbox = columns(db, schema, &set.inbox).await?;
        if !inbox.is_empty() {
            chosen = Some((set.clone(), inbox));
            break;
        }
    }
    let mut report = Report {
        schema: schema.to_owned(),
        naming: None,
        detected: naming.is_none(),
        tables: [String::new(), String::new(), String::new()],
        status: BTreeMap::new(),
        timestamps: None,
        foreign_keys: Vec::new(),
        problems: Vec::new(),
        notes: Vec::new(),
        ok: false,
        env: None,
    };
    let Some((mut set, inbox_columns)) = chosen else {
        let looked: Vec<String> = candidates.iter().map(|s| s.inbox.clone()).collect();
        report.tables = [
            candidates[0].inbox.clone(),
            candidates[0].state.clone(),
            candidates[0].message.clone(),
        ];
        report.problems.push(format!(
            "no inbox table in schema {schema} (looked for {}); run `ferrybus migrate` to create the tables",
            looked.join(", ")
        ));
        return Ok(report);
    };
    match naming_of(&inbox_columns) {
        Some(found) if naming.is_some_and(|n| n != found) => {
            report.problems.push(format!(
                "{} has {} columns, not {}: use --naming {} (FERRYBUS_NAMING={})",
                set.inbox,
                found.as_str(),
                set.naming.as_str(),
                found.as_str(),
                found.as_str()
            ));
            set.naming = found;
        }
        Some(found) => {
            if naming.is_none() && found != set.naming {
                // e.g. snake_case columns in tables named InboxState…
                set.naming = found;
            }
        }
        None => report.problems.push(format!(
            "{} has neither a message_id nor a MessageId column: not a MassTransit inbox table",
            set.inbox
        )),
    }
    report.naming = Some(set.naming.as_str());
    report.tables = [set.inbox.clone(), set.state.clone(), set.message.clone()];
    let mut time_types = Vec::new();
    for (table, needs, existing) in [
        (set.inbox.clone(), INBOX, Some(inbox_columns)),
        (set.state.clone(), STATE, None),
        (set.message.clone(), MESSAGE, None),
    ] {
        let existing = match existing {
            Some(c) => c,
            None => columns(db, schema, &table).await?,
        };
        let before = report.problems.len();
        if existing.is_empty() {
            report
                .problems
                .push(format!("table {schema}.{table} does not exist"));
            report.status.insert(table, "missing");
            continue;
        }
        check_table(
            &table,
            set.naming,
            needs,
            &existing,
            &mut report.problems,
            &mut time_types,
        );
        report.status.insert(
            table,
            if report.problems.len() == before {
                "ok"
            } else {
                "problems"
            },
        );
    }
    // The inbox insert's ON CONFLICT needs the unique key.
    let key = {
        let mut cols = [
            set.naming.column("ConsumerId"),
            set.naming.column("MessageId"),
        ];
        cols.sort();
        cols.join(",")
    };
    if report.status.get(&set.inbox) == Some(&"ok")
        && !unique_keys(db, schema, &set.inbox).await?.contains(&key)
    {
        report.problems.push(format!(
            "{} has no unique key on ({}, {}) (MassTransit < 8.0.8): the inbox cannot detect duplicates",
            set.inbox,
            set.naming.column("MessageId"),
            set.naming.column("ConsumerId")
        ));
        report.status.insert(set.inbox.clone(), "problems");
    }
    time_types.sort();
    time_types.dedup();
    report.timestamps = match time_types.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        _ => {
            report
                .notes
                .push("the time columns mix timestamp and timestamptz".into());
            Some(time_types.join(", "))
        }
    };
    if report.timestamps.as_deref() == Some("timestamp without time zone") {
        report
            .notes
            .push("timestamp without time zone (Npgsql's legacy behaviour): ferrybus writes and compares UTC wall-clock times".into());
    }
    if report
        .status
        .get(&set.message)
        .is_some_and(|s| *s != "missing")
    {
        report.foreign_keys = foreign_keys(db, schema, &set.message)
            .await?
            .into_iter()
            .map(|target| format!("{} → {target}", set.message))
            .collect();
        if report.foreign_keys.is_empty() {
            report.notes.push(
                "no foreign keys (MassTransit < 8.3 shape); `ferrybus migrate` would add them"
                    .into(),
            );
        }
    }
    report.ok = report.problems.is_empty();
    report.env = Some(set.env());
    Ok(report)
}

fn check_table(
    table: &str,
    naming: Naming,
    needs: &[Need],
    existing: &BTreeMap<String, Column>,
    problems: &mut Vec<String>,
    time_types: &mut Vec<String>,
) {
    let mut known = Vec::new();
    for Need(pascal, types, required, written, needs_default) in needs {
        let name = naming.column(pascal);
        known.push(name.clone());
        let Some(column) = existing.get(&name) else {
            if *required {
                let hint = if *pascal == "MessageType" {
                    " (MassTransit < 8.1)"
                } else {
                    ""
                };
                problems.push(format!("{table}: column {name} is missing{hint}"));
            }
            continue;
        };
        if !types.contains(&column.data_type.as_str()) {
            problems.push(format!(
                "{table}.{name} is {}, expected {}",
                column.data_type,
                types.join(" or ")
            ));
        }
        if TS == *types {
            time_types.push(column.data_type.clone());
        }
        if *needs_default && !column.has_default {
            problems.push(format!(
                "{table}.{name} has no default or identity: ferrybus never inserts it"
            ));
        }
        if !written && !needs_default && !column.nullable && !column.has_default {
            problems.push(format!(
                "{table}.{name} is NOT NULL without a default: ferrybus does not write it"
            ));
        }
    }
    for (name, column) in existing {
        if !known.contains(name) && !column.nullable && !column.has_default {
            problems.push(format!(
                "{table}.{name} (not a MassTransit column) is NOT NULL without a default: ferrybus does not write it"
            ));
        }
    }
}
