//! `ferrybus migrate --check`: the storage crate's schema check
//! ([`ferrybus_sea_orm::migrate::check_search`]: the tables found, the naming read from their
//! columns unless given, what ferrybus cannot use), as a report for people and for `--json`.

use std::collections::BTreeMap;
use std::io::Write;

use ferrybus_sea_orm::entity::OutboxTable;
use ferrybus_sea_orm::migrate::{self, SchemaProblem, SchemaReport, TableSearch, TableStatus};
use ferrybus_sea_orm::{Tables, TimestampType};
use sea_orm::DatabaseConnection;
use serde::Serialize;

use crate::error::{CliError, CliErrorKind};
use crate::storage::{self, Naming};

/// The three tables, in the order the reports list them.
const TABLES: [OutboxTable; 3] = [
    OutboxTable::InboxState,
    OutboxTable::OutboxState,
    OutboxTable::OutboxMessage,
];

/// What `--check` found for one schema (one line of `--json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    /// The schema.
    pub(crate) schema: String,
    /// The naming the tables use (`snake`, `pascal`), when they were found.
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

/// Runs the storage crate's check of the tables `search` describes.
pub(crate) async fn read(
    db: &DatabaseConnection,
    search: &TableSearch,
) -> Result<SchemaReport, CliError> {
    migrate::check_search(db, search)
        .await
        .map_err(|e| CliError::database(format!("checking schema {}", search.schema_name()), e))
}

/// A problem as the tool words it: the storage crate's line, with what to do about it on the
/// command line. Missing foreign keys are no problem here (see [`report`]'s notes).
fn problem_line(problem: &SchemaProblem) -> Option<String> {
    match problem {
        SchemaProblem::NoInboxTable { .. } => Some(format!(
            "{problem}; run `ferrybus migrate` to create the tables"
        )),
        SchemaProblem::NamingMismatch {
            table,
            found,
            configured,
        } => {
            let found = Naming::name_of(*found);
            Some(format!(
                "{table} has {found} columns, not {}: use --naming {found} (FERRYBUS_NAMING={found})",
                Naming::name_of(*configured)
            ))
        }
        SchemaProblem::MissingForeignKey { .. } => None,
        other => Some(other.to_string()),
    }
}

/// The tables of `report` for `outbox status`: all three must exist, in the naming given.
pub(crate) fn status_tables(report: SchemaReport) -> Result<Tables, CliError> {
    let missing = TABLES.iter().any(|&t| {
        report
            .table_status(t)
            .is_none_or(|s| s == TableStatus::Missing)
    });
    if missing {
        return Err(CliError::new(
            CliErrorKind::Database,
            format!(
                "{}; or name existing ones with --schema, --naming and the --*-table options",
                problem_lines(&report).join("; ")
            ),
        ));
    }
    // --naming given, the columns have the other one.
    if let Some(line) = report
        .problems
        .iter()
        .filter(|p| matches!(p, SchemaProblem::NamingMismatch { .. }))
        .find_map(problem_line)
    {
        return Err(CliError::new(CliErrorKind::Database, line));
    }
    Ok(report.tables)
}

/// The problems of `report`, as the tool words them.
pub(crate) fn problem_lines(report: &SchemaReport) -> Vec<String> {
    report.problems.iter().filter_map(problem_line).collect()
}

fn data_type(timestamps: TimestampType) -> &'static str {
    match timestamps {
        TimestampType::WithTimeZone => "timestamp with time zone",
        TimestampType::WithoutTimeZone => "timestamp without time zone",
    }
}

/// The tool's report of `r`.
pub(crate) fn report(r: &SchemaReport) -> Report {
    let tables = &r.tables;
    let found = r.found();
    let mut status = BTreeMap::new();
    for table in TABLES {
        if let Some(s) = r.table_status(table) {
            let word = match s {
                TableStatus::Ok => "ok",
                TableStatus::Missing => "missing",
                TableStatus::Problems => "problems",
            };
            status.insert(table.name(tables).to_owned(), word);
        }
    }
    let mut notes = Vec::new();
    let timestamps = match r.timestamps[..] {
        [] => None,
        [one] => Some(data_type(one).to_owned()),
        ref several => {
            notes.push("the time columns mix timestamp and timestamptz".to_owned());
            Some(
                several
                    .iter()
                    .map(|t| data_type(*t))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }
    };
    if r.timestamp_type() == Some(TimestampType::WithoutTimeZone) {
        notes.push("timestamp without time zone (Npgsql's legacy behaviour): ferrybus writes and compares UTC wall-clock times".into());
    }
    let message_table = r.table_status(OutboxTable::OutboxMessage);
    if message_table.is_some_and(|s| s != TableStatus::Missing) {
        if r.foreign_keys.is_empty() {
            notes.push(
                "no foreign keys (MassTransit < 8.3 shape); `ferrybus migrate` would add them"
                    .into(),
            );
        } else {
            for problem in &r.problems {
                if let SchemaProblem::MissingForeignKey { to, .. } = problem {
                    notes.push(format!(
                        "no foreign key to {to} (MassTransit < 8.3 shape); `ferrybus migrate` would add it"
                    ));
                }
            }
        }
    }
    Report {
        schema: tables.schema_name().to_owned(),
        naming: found.then(|| Naming::name_of(tables.naming_style())),
        detected: r.naming_detected,
        tables: TABLES.map(|t| t.name(tables).to_owned()),
        status,
        timestamps,
        foreign_keys: r
            .foreign_keys
            .iter()
            .map(|k| format!("{} → {}", k.table, k.references))
            .collect(),
        problems: problem_lines(r),
        notes,
        ok: r.is_usable(),
        env: found.then(|| storage::env(tables)),
    }
}

/// Prints `r` for people.
pub(crate) fn print(out: &mut impl Write, r: &Report) -> Result<(), CliError> {
    let naming = match (r.naming, r.detected) {
        (Some(n), true) => format!("{n} naming (detected)"),
        (Some(n), false) => format!("{n} naming"),
        (None, _) => "naming unknown".to_owned(),
    };
    writeln!(out, "schema {}: {naming}", r.schema)?;
    for table in &r.tables {
        if let Some(status) = r.status.get(table) {
            writeln!(out, "  {table:<24} {status}")?;
        }
    }
    if let Some(ts) = &r.timestamps {
        writeln!(out, "  time columns: {ts}")?;
    }
    if !r.foreign_keys.is_empty() {
        writeln!(out, "  foreign keys: {}", r.foreign_keys.join(", "))?;
    }
    for note in &r.notes {
        writeln!(out, "  note: {note}")?;
    }
    for problem in &r.problems {
        writeln!(out, "  problem: {problem}")?;
    }
    if r.ok {
        writeln!(out, "ferrybus can use these tables with:")?;
        if let Some(env) = &r.env {
            writeln!(out, "  {env}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrybus_sea_orm::NamingStyle;

    #[test]
    fn problems_say_what_to_do() {
        let mismatch = SchemaProblem::NamingMismatch {
            table: "inbox_state".into(),
            found: NamingStyle::SnakeCase,
            configured: NamingStyle::PascalCase,
        };
        assert_eq!(
            problem_line(&mismatch).unwrap(),
            "inbox_state has snake columns, not pascal: use --naming snake (FERRYBUS_NAMING=snake)"
        );
        let none = SchemaProblem::NoInboxTable {
            schema: "ops".into(),
            looked_for: vec!["inbox_state".into(), "InboxState".into()],
        };
        assert_eq!(
            problem_line(&none).unwrap(),
            "no inbox table in schema ops (looked for inbox_state, InboxState); run `ferrybus migrate` to create the tables"
        );
        let fk = SchemaProblem::MissingForeignKey {
            table: "outbox_message".into(),
            to: "inbox_state".into(),
        };
        assert_eq!(problem_line(&fk), None);
    }
}
