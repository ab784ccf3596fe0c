//! [`check`] and [`check_search`]: does an existing schema (one a .NET service created, or an
//! older ferrybus) have what ferrybus needs, and which naming does it use? Read-only catalog
//! queries ([`catalog`](super::catalog)).
//!
//! ferrybus needs MassTransit ≥ 8.1's tables (`docs/reference/masstransit-outbox.md`): every
//! column it reads or writes, with a type it can use; the (`MessageId`, `ConsumerId`) unique key
//! its inbox insert conflicts on (MassTransit ≥ 8.0.8); defaults on `Id` and `SequenceNumber`
//! (it never inserts them); and no other `NOT NULL` column without a default among those it
//! does not write. The two foreign keys of MassTransit 8.3 are reported
//! ([`SchemaProblem::MissingForeignKey`]) but not required, and so is the time column type
//! ([`SchemaReport::timestamps`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sea_orm::{ColumnTrait, ColumnType, ConnectionTrait, Iterable};

use super::catalog::{self, Column, ForeignKey};
use crate::config::{NamingStyle, Tables, TimestampType};
use crate::entity::OutboxTable::{self, InboxState, OutboxMessage, OutboxState};
use crate::entity::{inbox_state, outbox_message, outbox_state};
use crate::error::StoreError;
use crate::sql::names::column_name;

const TABLES: [OutboxTable; 3] = [InboxState, OutboxState, OutboxMessage];

/// Where to look for MassTransit's tables when only some of [`Tables`] is known: a schema, and
/// optionally the naming and any of the three table names. Without a naming,
/// [`check_search`] looks for ferrybus's snake_case names first, then for EF Core's PascalCase
/// ones, and reads the naming from the inbox table's columns.
///
/// ```
/// use ferrybus_sea_orm::migrate::TableSearch;
/// use ferrybus_sea_orm::{NamingStyle, Tables};
/// let search = TableSearch::new("billing");
/// let [snake, pascal] = &search.candidates()[..] else { unreachable!() };
/// assert_eq!(snake, &Tables::new().schema("billing"));
/// assert_eq!(pascal, &Tables::dotnet_default().schema("billing"));
///
/// let given = TableSearch::new("communication")
///     .naming(NamingStyle::PascalCase)
///     .inbox_state("InboxStates");
/// assert_eq!(given.candidates().len(), 1);
/// assert_eq!(given.tables().inbox_state(), "InboxStates");
/// assert_eq!(given.tables().outbox_state(), "OutboxState");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSearch {
    schema: String,
    naming: Option<NamingStyle>,
    names: [Option<String>; 3],
}

impl TableSearch {
    /// Looks in `schema`, for either naming and its default table names.
    pub fn new(schema: impl Into<String>) -> Self {
        Self {
            schema: schema.into(),
            naming: None,
            names: [None, None, None],
        }
    }

    /// The tables use this naming (not read from the columns).
    pub fn naming(mut self, naming: NamingStyle) -> Self {
        self.naming = Some(naming);
        self
    }

    /// The inbox state table is named so (whatever the naming).
    pub fn inbox_state(mut self, name: impl Into<String>) -> Self {
        self.names[0] = Some(name.into());
        self
    }

    /// The outbox state table is named so.
    pub fn outbox_state(mut self, name: impl Into<String>) -> Self {
        self.names[1] = Some(name.into());
        self
    }

    /// The outbox message table is named so.
    pub fn outbox_message(mut self, name: impl Into<String>) -> Self {
        self.names[2] = Some(name.into());
        self
    }

    /// The schema.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// The naming, when given.
    pub fn naming_style(&self) -> Option<NamingStyle> {
        self.naming
    }

    /// The table sets looked for, in order: the given naming, or snake_case then PascalCase,
    /// each with the names given and that naming's defaults (`inbox_state` …, `InboxState` …)
    /// for the others.
    pub fn candidates(&self) -> Vec<Tables> {
        let namings = match self.naming {
            Some(naming) => vec![naming],
            None => vec![NamingStyle::SnakeCase, NamingStyle::PascalCase],
        };
        namings.into_iter().map(|n| self.in_naming(n)).collect()
    }

    /// The first of the [`candidates`](Self::candidates): the tables as given, snake_case
    /// unless a naming is given (what [`Migrator`](crate::Migrator) creates for this search).
    pub fn tables(&self) -> Tables {
        self.in_naming(self.naming.unwrap_or_default())
    }

    fn in_naming(&self, naming: NamingStyle) -> Tables {
        let defaults = match naming {
            NamingStyle::SnakeCase => Tables::new(),
            NamingStyle::PascalCase => Tables::dotnet_default(),
        };
        let pick = |i: usize, default: &str| self.names[i].as_deref().unwrap_or(default).to_owned();
        Tables::new()
            .schema(self.schema.clone())
            .names(
                pick(0, defaults.inbox_state()),
                pick(1, defaults.outbox_state()),
                pick(2, defaults.outbox_message()),
            )
            .naming(naming)
    }
}

/// One way an existing schema differs from what ferrybus needs. `Display` is one line for an
/// operator (`ferrybus migrate --check` prints it).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaProblem {
    /// [`check_search`] found no inbox table under any of the names it looked for (nothing else
    /// was checked).
    NoInboxTable {
        /// The schema.
        schema: String,
        /// The inbox table names looked for.
        looked_for: Vec<String>,
    },
    /// The inbox table's columns have another naming than the one given ([`check_search`]
    /// then checks the tables in the naming they have).
    NamingMismatch {
        /// The inbox table.
        table: String,
        /// The naming its columns have.
        found: NamingStyle,
        /// The naming given.
        configured: NamingStyle,
    },
    /// The inbox table has neither a `message_id` nor a `MessageId` column.
    NotAnInbox {
        /// The table.
        table: String,
    },
    /// The table does not exist.
    MissingTable {
        /// The schema.
        schema: String,
        /// The table.
        table: String,
    },
    /// A column ferrybus reads or writes is missing (`MessageType`: MassTransit < 8.1).
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
    /// `Id` or `SequenceNumber` has no default or identity: ferrybus never inserts them.
    MissingDefault {
        /// The table.
        table: String,
        /// The column.
        column: String,
    },
    /// A column ferrybus does not write on insert is `NOT NULL` without a default, so its
    /// inserts fail.
    NotNullWithoutDefault {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// Whether it is one of MassTransit's columns (else one added to the table).
        masstransit: bool,
    },
    /// The inbox table has no unique key on exactly (`MessageId`, `ConsumerId`), which the
    /// inbox's `INSERT … ON CONFLICT` needs (MassTransit < 8.0.8): a unique constraint, primary
    /// key or unique index, not partial.
    MissingInboxKey {
        /// The inbox table.
        table: String,
        /// The two columns, in this naming.
        columns: [String; 2],
    },
    /// `OutboxMessage` has no foreign key to this table (MassTransit 8.3+ has two; ferrybus
    /// works without them, the migrator adds them).
    MissingForeignKey {
        /// The outbox message table.
        table: String,
        /// The referenced table.
        to: String,
    },
}

fn naming_name(naming: NamingStyle) -> &'static str {
    match naming {
        NamingStyle::SnakeCase => "snake_case",
        NamingStyle::PascalCase => "PascalCase",
    }
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaProblem::NoInboxTable { schema, looked_for } => write!(
                f,
                "no inbox table in schema {schema} (looked for {})",
                looked_for.join(", ")
            ),
            SchemaProblem::NamingMismatch {
                table,
                found,
                configured,
            } => write!(
                f,
                "{table} has {} columns, not {}",
                naming_name(*found),
                naming_name(*configured)
            ),
            SchemaProblem::NotAnInbox { table } => write!(
                f,
                "{table} has neither a message_id nor a MessageId column: not a MassTransit inbox table"
            ),
            SchemaProblem::MissingTable { schema, table } => {
                write!(f, "table {schema}.{table} does not exist")
            }
            SchemaProblem::MissingColumn { table, column } => {
                let hint = if column == "MessageType" || column == "message_type" {
                    " (MassTransit < 8.1)"
                } else {
                    ""
                };
                write!(f, "{table}: column {column} is missing{hint}")
            }
            SchemaProblem::ColumnType {
                table,
                column,
                found,
                expected,
            } => write!(
                f,
                "{table}.{column} is {found}, expected {}",
                expected.join(" or ")
            ),
            SchemaProblem::MissingDefault { table, column } => write!(
                f,
                "{table}.{column} has no default or identity: ferrybus never inserts it"
            ),
            SchemaProblem::NotNullWithoutDefault {
                table,
                column,
                masstransit,
            } => {
                let which = if *masstransit {
                    ""
                } else {
                    " (not a MassTransit column)"
                };
                write!(
                    f,
                    "{table}.{column}{which} is NOT NULL without a default: ferrybus does not write it"
                )
            }
            SchemaProblem::MissingInboxKey {
                table,
                columns: [message_id, consumer_id],
            } => write!(
                f,
                "{table} has no unique key on ({message_id}, {consumer_id}) (MassTransit < 8.0.8): the inbox cannot detect duplicates"
            ),
            SchemaProblem::MissingForeignKey { table, to } => {
                write!(f, "{table} has no foreign key to {to} (MassTransit < 8.3)")
            }
        }
    }
}

impl SchemaProblem {
    /// The table whose shape this problem is about ([`SchemaReport::table_status`]); none for
    /// the search's problems and for a missing foreign key (not required).
    pub fn table(&self) -> Option<&str> {
        match self {
            SchemaProblem::NoInboxTable { .. }
            | SchemaProblem::NamingMismatch { .. }
            | SchemaProblem::MissingForeignKey { .. } => None,
            SchemaProblem::NotAnInbox { table }
            | SchemaProblem::MissingTable { table, .. }
            | SchemaProblem::MissingColumn { table, .. }
            | SchemaProblem::ColumnType { table, .. }
            | SchemaProblem::MissingDefault { table, .. }
            | SchemaProblem::NotNullWithoutDefault { table, .. }
            | SchemaProblem::MissingInboxKey { table, .. } => Some(table),
        }
    }
}

/// How one table fared in a [`SchemaReport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TableStatus {
    /// It exists and has what ferrybus needs.
    Ok,
    /// It does not exist.
    Missing,
    /// It exists with problems ([`SchemaProblem::table`] names it).
    Problems,
}

/// What [`check`] or [`check_search`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaReport {
    /// The tables checked: those given to [`check`]; for [`check_search`] the ones found, in
    /// the naming their columns have (when no inbox table was found, the first looked for).
    /// Their [`TimestampType`] is that of the inbox `Received` column, as a starting bus reads
    /// it.
    pub tables: Tables,
    /// Whether the naming was to be read from the columns ([`check_search`] without a naming).
    pub naming_detected: bool,
    /// Every difference: the search's, then the tables' in order inbox state, outbox state,
    /// outbox message (each in column order, then columns that are not MassTransit's), then the
    /// inbox key, then the foreign keys.
    pub problems: Vec<SchemaProblem>,
    /// The types of the time columns that have one, each once (`timestamp with time zone`
    /// first): two when the tables mix them.
    pub timestamps: Vec<TimestampType>,
    /// The foreign keys declared on the outbox message table (to any table), ordered by the
    /// referenced table.
    pub foreign_keys: Vec<ForeignKey>,
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

    /// Whether the tables were found ([`check_search`] found an inbox table; always true for
    /// [`check`]).
    pub fn found(&self) -> bool {
        !self
            .problems
            .iter()
            .any(|p| matches!(p, SchemaProblem::NoInboxTable { .. }))
    }

    /// How `table` fared; `None` when no tables were [`found`](Self::found).
    pub fn table_status(&self, table: OutboxTable) -> Option<TableStatus> {
        if !self.found() {
            return None;
        }
        let name = table.name(&self.tables);
        let mut status = TableStatus::Ok;
        for problem in &self.problems {
            match problem {
                SchemaProblem::MissingTable { table, .. } if table == name => {
                    return Some(TableStatus::Missing)
                }
                p if p.table() == Some(name) => status = TableStatus::Problems,
                _ => {}
            }
        }
        Some(status)
    }

    /// The one time column type, unless the tables mix them (or have none).
    pub fn timestamp_type(&self) -> Option<TimestampType> {
        match self.timestamps[..] {
            [one] => Some(one),
            _ => None,
        }
    }
}

/// What ferrybus does with a column, which decides what the check asks of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// Never inserted: the database must fill it (identity or default).
    Generated,
    /// Written by every insert (`crate::sql`'s `inbox_insert`, `bus_insert`,
    /// `message_values`).
    Written,
    /// Not written on insert: nullable or with a default.
    Unwritten,
    /// Never read or written: may be missing (`RowVersion`, always NULL on PostgreSQL).
    Unused,
}

// Exhaustive matches: a column added to an entity needs a decision here.
fn inbox_use(column: inbox_state::Column) -> Use {
    use inbox_state::Column as C;
    match column {
        C::Id => Use::Generated,
        C::MessageId
        | C::ConsumerId
        | C::LockId
        | C::Received
        | C::ReceiveCount
        | C::Consumed
        | C::Delivered => Use::Written,
        C::ExpirationTime | C::LastSequenceNumber => Use::Unwritten,
        C::RowVersion => Use::Unused,
    }
}

fn state_use(column: outbox_state::Column) -> Use {
    use outbox_state::Column as C;
    match column {
        C::OutboxId | C::LockId | C::Created => Use::Written,
        C::Delivered | C::LastSequenceNumber => Use::Unwritten,
        C::RowVersion => Use::Unused,
    }
}

fn message_use(column: outbox_message::Column) -> Use {
    use outbox_message::Column as C;
    match column {
        C::SequenceNumber => Use::Generated,
        C::EnqueueTime => Use::Unwritten,
        C::SentTime
        | C::Headers
        | C::Properties
        | C::InboxMessageId
        | C::InboxConsumerId
        | C::OutboxId
        | C::MessageId
        | C::ContentType
        | C::MessageType
        | C::Body
        | C::ConversationId
        | C::CorrelationId
        | C::InitiatorId
        | C::RequestId
        | C::SourceAddress
        | C::DestinationAddress
        | C::ResponseAddress
        | C::FaultAddress
        | C::ExpirationTime => Use::Written,
    }
}

const TIME: &[&str] = &["timestamp with time zone", "timestamp without time zone"];

/// The `data_type`s ferrybus reads and writes for a column type: the legacy shapes (Npgsql's
/// `timestamp without time zone`, `integer` ids) included; every integer is bound and read as
/// a value that fits either.
fn accepted(column_type: &ColumnType) -> &'static [&'static str] {
    match column_type {
        ColumnType::BigInteger | ColumnType::Integer => &["bigint", "integer"],
        ColumnType::Uuid => &["uuid"],
        ColumnType::TimestampWithTimeZone | ColumnType::DateTime | ColumnType::Timestamp => TIME,
        ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob => &["bytea"],
        _ => &["text", "character varying"],
    }
}

fn timestamp_type(data_type: &str) -> Option<TimestampType> {
    match data_type {
        "timestamp with time zone" => Some(TimestampType::WithTimeZone),
        "timestamp without time zone" => Some(TimestampType::WithoutTimeZone),
        _ => None,
    }
}

/// Checks the columns of one existing table against its entity's.
fn check_columns<C: ColumnTrait + Iterable>(
    table: &str,
    style: NamingStyle,
    usage: fn(C) -> Use,
    existing: &BTreeMap<String, Column>,
    problems: &mut Vec<SchemaProblem>,
    times: &mut BTreeSet<String>,
) {
    let mut known = BTreeSet::new();
    let problem = |column: &str| (table.to_owned(), column.to_owned());
    for c in C::iter() {
        let name = column_name(c, style);
        known.insert(name.clone());
        let usage = usage(c);
        let Some(column) = existing.get(&name) else {
            if usage != Use::Unused {
                let (table, column) = problem(&name);
                problems.push(SchemaProblem::MissingColumn { table, column });
            }
            continue;
        };
        let expected = accepted(c.def().get_column_type());
        if !expected.contains(&column.data_type.as_str()) {
            let found = column.data_type.clone();
            let (table, column) = problem(&name);
            problems.push(SchemaProblem::ColumnType {
                table,
                column,
                found,
                expected: expected.to_vec(),
            });
        } else if expected == TIME {
            times.insert(column.data_type.clone());
        }
        let filled = column.has_default;
        if usage == Use::Generated && !filled {
            let (table, column) = problem(&name);
            problems.push(SchemaProblem::MissingDefault { table, column });
        }
        if matches!(usage, Use::Unwritten | Use::Unused) && !column.nullable && !filled {
            let (table, column) = problem(&name);
            problems.push(SchemaProblem::NotNullWithoutDefault {
                table,
                column,
                masstransit: true,
            });
        }
    }
    for (name, column) in existing {
        if !known.contains(name) && !column.nullable && !column.has_default {
            let (table, column) = problem(name);
            problems.push(SchemaProblem::NotNullWithoutDefault {
                table,
                column,
                masstransit: false,
            });
        }
    }
}

/// The naming of an inbox table from its columns: `message_id` → snake_case, `MessageId` →
/// PascalCase.
fn naming_of(columns: &BTreeMap<String, Column>) -> Option<NamingStyle> {
    [NamingStyle::SnakeCase, NamingStyle::PascalCase]
        .into_iter()
        .find(|&style| columns.contains_key(&column_name(inbox_state::Column::MessageId, style)))
}

/// Compares the schema of `tables` in `db` with what ferrybus needs: the three tables; every
/// column it reads or writes, with a type it can use (MassTransit ≥ 8.1's `MessageType`
/// included, `RowVersion` optional); defaults on `Id` and `SequenceNumber`; no `NOT NULL`
/// column without a default among those it does not write; the (`MessageId`, `ConsumerId`)
/// unique key (MassTransit ≥ 8.0.8); the two foreign keys of MassTransit 8.3 (reported, not
/// required). Also reads the time column types and the foreign keys declared. Read-only.
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
    let names = TABLES.map(|t| t.name(tables));
    let columns = catalog::columns(db, tables.schema_name(), &names).await?;
    inspect(db, tables.clone(), false, Vec::new(), &columns).await
}

/// Finds the tables `search` describes and [`check`]s them: the first of its
/// [`candidates`](TableSearch::candidates) whose inbox table exists, in the naming its columns
/// have ([`SchemaProblem::NamingMismatch`] when a naming was given and they have the other).
/// When no inbox table exists the report has only [`SchemaProblem::NoInboxTable`]. Read-only.
///
/// ```no_run
/// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), ferrybus_sea_orm::StoreError> {
/// use ferrybus_sea_orm::migrate::{self, TableSearch};
/// use ferrybus_sea_orm::status;
/// // Tables a .NET service created in `billing`, naming unknown:
/// let report = migrate::check_search(&db, &TableSearch::new("billing")).await?;
/// if report.is_usable() {
///     let status = status::outbox_status(&db, &report.tables).await?;
///     println!("{} bus-outbox messages waiting", status.bus_outbox.messages);
/// }
/// # Ok(()) }
/// ```
pub async fn check_search(
    db: &impl ConnectionTrait,
    search: &TableSearch,
) -> Result<SchemaReport, StoreError> {
    let candidates = search.candidates();
    let mut names: Vec<&str> = Vec::new();
    for tables in &candidates {
        for table in TABLES {
            if !names.contains(&table.name(tables)) {
                names.push(table.name(tables));
            }
        }
    }
    let columns = catalog::columns(db, search.schema_name(), &names).await?;
    let naming_detected = search.naming.is_none();
    let Some(found) = candidates
        .iter()
        .find(|t| columns.contains_key(t.inbox_state()))
    else {
        let mut looked_for: Vec<String> = Vec::new();
        for tables in &candidates {
            if !looked_for.iter().any(|n| n == tables.inbox_state()) {
                looked_for.push(tables.inbox_state().to_owned());
            }
        }
        return Ok(SchemaReport {
            tables: candidates[0].clone(),
            naming_detected,
            problems: vec![SchemaProblem::NoInboxTable {
                schema: search.schema_name().to_owned(),
                looked_for,
            }],
            timestamps: Vec::new(),
            foreign_keys: Vec::new(),
        });
    };
    let mut problems = Vec::new();
    let inbox = found.inbox_state().to_owned();
    let tables = match naming_of(&columns[&inbox]) {
        Some(naming) => {
            if let Some(configured) = search.naming.filter(|&given| given != naming) {
                problems.push(SchemaProblem::NamingMismatch {
                    table: inbox,
                    found: naming,
                    configured,
                });
            }
            found.clone().naming(naming)
        }
        None => {
            problems.push(SchemaProblem::NotAnInbox { table: inbox });
            found.clone()
        }
    };
    inspect(db, tables, naming_detected, problems, &columns).await
}

/// Checks `tables`, whose columns (those that exist) are `columns`.
async fn inspect(
    db: &impl ConnectionTrait,
    tables: Tables,
    naming_detected: bool,
    mut problems: Vec<SchemaProblem>,
    columns: &BTreeMap<String, BTreeMap<String, Column>>,
) -> Result<SchemaReport, StoreError> {
    let style = tables.naming_style();
    let schema = tables.schema_name();
    let mut times = BTreeSet::new();
    for table in TABLES {
        let name = table.name(&tables);
        let Some(existing) = columns.get(name) else {
            problems.push(SchemaProblem::MissingTable {
                schema: schema.to_owned(),
                table: name.to_owned(),
            });
            continue;
        };
        let p = &mut problems;
        match table {
            InboxState => check_columns(name, style, inbox_use, existing, p, &mut times),
            OutboxState => check_columns(name, style, state_use, existing, p, &mut times),
            OutboxMessage => check_columns(name, style, message_use, existing, p, &mut times),
        }
    }
    let inbox = tables.inbox_state();
    let received = columns
        .get(inbox)
        .and_then(|c| c.get(&column_name(inbox_state::Column::Received, style)));
    if columns.contains_key(inbox) {
        let key = [
            inbox_state::Column::MessageId,
            inbox_state::Column::ConsumerId,
        ]
        .map(|c| column_name(c, style));
        let wanted: BTreeSet<String> = key.iter().cloned().collect();
        if !catalog::unique_keys(db, schema, inbox)
            .await?
            .contains(&wanted)
        {
            problems.push(SchemaProblem::MissingInboxKey {
                table: inbox.to_owned(),
                columns: key,
            });
        }
    }
    let message = tables.outbox_message();
    let mut foreign_keys = Vec::new();
    if columns.contains_key(message) {
        foreign_keys = catalog::foreign_keys(db, schema, message).await?;
        for to in [InboxState, OutboxState] {
            if columns.contains_key(to.name(&tables))
                && !foreign_keys.iter().any(|k| k.points_to(&tables, to))
            {
                problems.push(SchemaProblem::MissingForeignKey {
                    table: message.to_owned(),
                    to: to.name(&tables).to_owned(),
                });
            }
        }
    }
    let timestamps = received
        .and_then(|c| timestamp_type(&c.data_type))
        .unwrap_or_default();
    Ok(SchemaReport {
        tables: tables.clone().timestamps(timestamps),
        naming_detected,
        problems,
        // Sorted by their names: with time zone first.
        timestamps: times.iter().filter_map(|t| timestamp_type(t)).collect(),
        foreign_keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_read_as_one_line() {
        let missing = SchemaProblem::MissingColumn {
            table: "OutboxMessage".into(),
            column: "MessageType".into(),
        };
        assert_eq!(
            missing.to_string(),
            "OutboxMessage: column MessageType is missing (MassTransit < 8.1)"
        );
        let extra = SchemaProblem::NotNullWithoutDefault {
            table: "outbox_state".into(),
            column: "tenant".into(),
            masstransit: false,
        };
        assert_eq!(
            extra.to_string(),
            "outbox_state.tenant (not a MassTransit column) is NOT NULL without a default: ferrybus does not write it"
        );
        let key = SchemaProblem::MissingInboxKey {
            table: "inbox_state".into(),
            columns: ["message_id".into(), "consumer_id".into()],
        };
        assert!(key
            .to_string()
            .starts_with("inbox_state has no unique key on (message_id, consumer_id)"));
        assert_eq!(key.table(), Some("inbox_state"));
        let fk = SchemaProblem::MissingForeignKey {
            table: "outbox_message".into(),
            to: "inbox_state".into(),
        };
        assert_eq!(fk.table(), None);
    }

    #[test]
    fn searches_name_their_candidates() {
        let all = TableSearch::new("s")
            .inbox_state("a")
            .outbox_state("b")
            .outbox_message("c");
        let candidates = all.candidates();
        assert_eq!(candidates.len(), 2);
        assert!(candidates.iter().all(|t| t.inbox_state() == "a"));
        assert_eq!(all.tables().naming_style(), NamingStyle::SnakeCase);
        assert_eq!(
            all.naming(NamingStyle::PascalCase).tables().naming_style(),
            NamingStyle::PascalCase
        );
    }

    /// Every entity column has a type the check accepts in the shape the migrator creates.
    #[test]
    fn the_migrators_types_are_accepted() {
        assert_eq!(
            accepted(inbox_state::Column::ReceiveCount.def().get_column_type()),
            ["bigint", "integer"]
        );
        assert_eq!(
            accepted(outbox_message::Column::Body.def().get_column_type()),
            ["text", "character varying"]
        );
        assert_eq!(
            accepted(outbox_state::Column::RowVersion.def().get_column_type()),
            ["bytea"]
        );
        assert_eq!(
            accepted(outbox_state::Column::Created.def().get_column_type()),
            TIME
        );
    }
}
