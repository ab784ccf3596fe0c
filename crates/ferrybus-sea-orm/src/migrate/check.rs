//! [`check`]: does an existing schema have what ferrybus needs?

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sea_orm::sea_query::{Alias, Expr, Query};
use sea_orm::{ColumnTrait, ColumnType, ConnectionTrait, FromQueryResult, Iterable};

use crate::config::Tables;
use crate::entity::OutboxTable::{self, InboxState, OutboxMessage, OutboxState};
use crate::entity::{inbox_state, outbox_message, outbox_state};
use crate::error::StoreError;
use crate::sql::build;
use crate::sql::names::column_name;

/// One way an existing schema differs from what ferrybus needs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaProblem {
    /// The table does not exist.
    MissingTable {
        /// Its name.
        table: String,
    },
    /// A column is missing.
    MissingColumn {
        /// The table.
        table: String,
        /// The column.
        column: String,
    },
    /// A column has a type ferrybus cannot read or write.
    ColumnType {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// What it is (`information_schema.columns.data_type`).
        found: String,
        /// What ferrybus accepts.
        expected: Vec<&'static str>,
    },
    /// `InboxState` has no unique constraint on (`MessageId`, `ConsumerId`), which the inbox's
    /// `ON CONFLICT` needs.
    MissingInboxKey,
    /// `OutboxMessage` has no foreign key to this table (MassTransit 8.3+ has two; ferrybus
    /// works without them, the migrator adds them).
    MissingForeignKey {
        /// The referenced table.
        to: String,
    },
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaProblem::MissingTable { table } => write!(f, "table {table} is missing"),
            SchemaProblem::MissingColumn { table, column } => {
                write!(f, "column {table}.{column} is missing")
            }
            SchemaProblem::ColumnType {
                table,
                column,
                found,
                expected,
            } => write!(
                f,
                "column {table}.{column} is {found}, expected {}",
                expected.join(" or ")
            ),
            SchemaProblem::MissingInboxKey => {
                f.write_str("inbox state has no unique constraint on (message id, consumer id)")
            }
            SchemaProblem::MissingForeignKey { to } => {
                write!(f, "outbox message has no foreign key to {to}")
            }
        }
    }
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchemaReport {
    /// Every difference, tables in order inbox state, outbox state, outbox message.
    pub problems: Vec<SchemaProblem>,
}

impl SchemaReport {
    /// Whether ferrybus can run on the schema: no problem other than missing foreign keys.
    pub fn is_usable(&self) -> bool {
        self.problems
            .iter()
            .all(|p| matches!(p, SchemaProblem::MissingForeignKey { .. }))
    }

    /// Whether the schema is exactly what the migrations create (nothing missing).
    pub fn is_complete(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The `data_type`s ferrybus reads and writes for a column type: the legacy shapes (Npgsql's
/// timestamps, `integer` identities) included.
fn accepted(column_type: &ColumnType) -> Vec<&'static str> {
    match column_type {
        ColumnType::BigInteger => vec!["bigint", "integer"],
        ColumnType::Integer => vec!["integer"],
        ColumnType::Uuid => vec!["uuid"],
        ColumnType::TimestampWithTimeZone | ColumnType::DateTime | ColumnType::Timestamp => {
            vec!["timestamp with time zone", "timestamp without time zone"]
        }
        ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob => vec!["bytea"],
        _ => vec!["text", "character varying"],
    }
}

#[derive(FromQueryResult)]
struct ColumnRow {
    table_name: String,
    column_name: String,
    data_type: String,
}

#[derive(FromQueryResult)]
struct KeyRow {
    constraint_name: String,
    column_name: String,
}

/// Compares the schema of `tables` in `db` with what ferrybus needs: the three tables, every
/// column with a usable type, the inbox key, the foreign keys. Read-only.
///
/// ```no_run
/// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), ferrybus_sea_orm::StoreError> {
/// use ferrybus_sea_orm::{migrate, Tables};
/// let report = migrate::check(&db, &Tables::new()).await?;
/// for problem in &report.problems {
///     println!("{problem}");
/// }
/// assert!(report.is_usable());
/// # Ok(()) }
/// ```
pub async fn check(db: &impl ConnectionTrait, tables: &Tables) -> Result<SchemaReport, StoreError> {
    let a = Alias::new;
    let text = |col: &'static str| Expr::col(a(col)).cast_as(a("text"));
    let names = [InboxState, OutboxState, OutboxMessage].map(|t| t.name(tables).to_owned());
    let query = Query::select()
        .expr_as(text("table_name"), a("table_name"))
        .expr_as(text("column_name"), a("column_name"))
        .expr_as(text("data_type"), a("data_type"))
        .from((a("information_schema"), a("columns")))
        .and_where(text("table_schema").eq(tables.schema_name()))
        .and_where(Expr::expr(text("table_name")).is_in(names.clone()))
        .to_owned();
    let mut found: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for row in db.query_all(build(&query)).await? {
        let row = ColumnRow::from_query_result(&row, "")?;
        found
            .entry(row.table_name)
            .or_default()
            .insert(row.column_name, row.data_type);
    }
    let style = tables.naming_style();
    let expected: [(OutboxTable, Vec<(String, ColumnType)>); 3] = [
        (InboxState, columns::<inbox_state::Column>(style)),
        (OutboxState, columns::<outbox_state::Column>(style)),
        (OutboxMessage, columns::<outbox_message::Column>(style)),
    ];
    let mut problems = Vec::new();
    for (table, columns) in &expected {
        let name = table.name(tables).to_owned();
        let Some(existing) = found.get(&name) else {
            problems.push(SchemaProblem::MissingTable { table: name });
            continue;
        };
        for (column, column_type) in columns {
            match existing.get(column) {
                None => problems.push(SchemaProblem::MissingColumn {
                    table: name.clone(),
                    column: column.clone(),
                }),
                Some(data_type) => {
                    let expected = accepted(column_type);
                    if !expected.contains(&data_type.as_str()) {
                        problems.push(SchemaProblem::ColumnType {
                            table: name.clone(),
                            column: column.clone(),
                            found: data_type.clone(),
                            expected,
                        });
                    }
                }
            }
        }
    }
    if found.contains_key(tables.inbox_state()) && !has_inbox_key(db, tables).await? {
        problems.push(SchemaProblem::MissingInboxKey);
    }
    if found.contains_key(tables.outbox_message()) {
        for to in [InboxState, OutboxState] {
            if found.contains_key(to.name(tables))
                && !super::m0001_outbox_tables::has_foreign_key(db, tables, OutboxMessage, to)
                    .await?
            {
                problems.push(SchemaProblem::MissingForeignKey {
                    to: to.name(tables).to_owned(),
                });
            }
        }
    }
    Ok(SchemaReport { problems })
}

fn columns<C: ColumnTrait + Iterable>(style: crate::NamingStyle) -> Vec<(String, ColumnType)> {
    C::iter()
        .map(|c| (column_name(c, style), c.def().get_column_type().clone()))
        .collect()
}

/// Whether a unique or primary-key constraint of the inbox table covers exactly (`MessageId`,
/// `ConsumerId`).
async fn has_inbox_key(db: &impl ConnectionTrait, tables: &Tables) -> Result<bool, StoreError> {
    let a = Alias::new;
    let (tc, kcu) = (a("tc"), a("kcu"));
    let text = |t: &Alias, col: &'static str| Expr::col((t.clone(), a(col))).cast_as(a("text"));
    let query = Query::select()
        .expr_as(text(&tc, "constraint_name"), a("constraint_name"))
        .expr_as(text(&kcu, "column_name"), a("column_name"))
        .from_as(
            (a("information_schema"), a("table_constraints")),
            tc.clone(),
        )
        .inner_join(
            sea_orm::sea_query::TableRef::SchemaTableAlias(
                sea_orm::sea_query::IntoIden::into_iden(a("information_schema")),
                sea_orm::sea_query::IntoIden::into_iden(a("key_column_usage")),
                sea_orm::sea_query::IntoIden::into_iden(kcu.clone()),
            ),
            Expr::col((kcu.clone(), a("constraint_name")))
                .equals((tc.clone(), a("constraint_name")))
                .and(
                    Expr::col((kcu.clone(), a("constraint_schema")))
                        .equals((tc.clone(), a("constraint_schema"))),
                ),
        )
        .and_where(text(&tc, "table_schema").eq(tables.schema_name()))
        .and_where(text(&tc, "table_name").eq(tables.inbox_state()))
        .and_where(Expr::expr(text(&tc, "constraint_type")).is_in(["UNIQUE", "PRIMARY KEY"]))
        .to_owned();
    let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in db.query_all(build(&query)).await? {
        let row = KeyRow::from_query_result(&row, "")?;
        keys.entry(row.constraint_name)
            .or_default()
            .insert(row.column_name);
    }
    let style = tables.naming_style();
    let wanted: BTreeSet<String> = [
        column_name(inbox_state::Column::MessageId, style),
        column_name(inbox_state::Column::ConsumerId, style),
    ]
    .into();
    Ok(keys.values().any(|cols| *cols == wanted))
}
