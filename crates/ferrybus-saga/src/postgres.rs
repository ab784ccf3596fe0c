//! State machine instances in PostgreSQL: [`PostgresSagaRepository`] over a [`SagaTable`], in
//! the inbox transaction, on the instance tables MassTransit's EF Core saga repository uses.
//!
//! The table is MassTransit's EF Core saga map on Npgsql: the key `CorrelationId` (uuid), the
//! state name `CurrentState` (text), the user's columns, and as concurrency token the row's
//! system column `xmin` (Npgsql maps `[Timestamp] uint RowVersion` / `UseXminAsConcurrencyToken`
//! to it, so a .NET table has no token column of its own), or a version column. Columns follow
//! the messaging tables' [`NamingStyle`]: `"CorrelationId"`, `"ItemCount"` (EF's default) or
//! `correlation_id`, `item_count` (EFCore.NamingConventions' snake case).
//!
//! Concurrency is MassTransit's on PostgreSQL
//! (`Persistence/MassTransit.EntityFrameworkCoreIntegration/EntityFrameworkCoreIntegration/Saga/`):
//! optimistic by default — read the row and its token, write `… WHERE "CorrelationId" = $1 AND
//! xmin = $2`; no row written is a conflict, and the event is applied again to the fresh row in
//! the same transaction (READ COMMITTED: the retried read sees the winner's commit) — or
//! pessimistic, reading with `PostgresLockStatementFormatter`'s `SELECT … FOR UPDATE`, which
//! holds the row until the inbox transaction ends.

use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use ferrybus_core::consume::ConsumeRequest;
use ferrybus_core::ConsumeError;
use sea_orm::prelude::Decimal;
use sea_orm::sea_query::ExprTrait;
use sea_orm::sea_query::{
    Alias, ColumnDef, Expr, LockType, OnConflict, PostgresQueryBuilder, Query, SchemaName,
    SimpleExpr, Table, TableName, TableRef,
};
use sea_orm::{
    ConnectionTrait, DbBackend, QueryResult, Statement, TransactionSession, TransactionTrait, Value,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value as Json};
use uuid::Uuid;

use ferrybus_sea_orm::{NamingStyle, StoreError, StoreErrorKind, Tables, TransactionExt};

use crate::{
    CurrentState, SagaChange, SagaError, SagaErrorKind, SagaRepository, SaveOutcome, StoredSaga,
};

/// The PostgreSQL type of an instance column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnType {
    /// `integer` (an `i32` field).
    Integer,
    /// `bigint` (`i64`).
    BigInt,
    /// `double precision` (`f64`).
    Double,
    /// `numeric` (a `rust_decimal::Decimal` or its string).
    Decimal,
    /// `boolean`.
    Boolean,
    /// `text`.
    Text,
    /// `uuid`.
    Uuid,
    /// `timestamp with time zone` (a `DateTime<Utc>`).
    Timestamp,
    /// `jsonb` (any serde value).
    Json,
}

/// How a write knows nobody changed the row since it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConcurrencyToken {
    /// PostgreSQL's `xmin` system column, as Npgsql maps a `uint` row version (the default;
    /// nothing to create).
    Xmin,
    /// A `bigint` column the repository increments on every write.
    Version(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Column {
    field: String,
    name: String,
    kind: ColumnType,
}

/// Where the instances of one state machine live: schema, table, naming, the user's columns
/// (each a field of the instance type, by its serde name) and the concurrency token.
///
/// ```
/// use ferrybus_saga::postgres::{ColumnType, SagaTable};
/// use ferrybus_sea_orm::NamingStyle;
/// // What EF Core's saga map creates for `OrderState` on Npgsql:
/// let dotnet = SagaTable::new("OrderState")
///     .naming(NamingStyle::PascalCase)
///     .column("item_count", ColumnType::Integer)
///     .column("invoice_id", ColumnType::Uuid);
/// assert_eq!(dotnet.key_column(), "CorrelationId");
/// assert_eq!(dotnet.column_name("item_count"), Some("ItemCount"));
///
/// let snake = SagaTable::new("order_state")
///     .schema("orders")
///     .column("item_count", ColumnType::Integer)
///     .version_column("version");
/// assert_eq!(snake.state_column(), "current_state");
/// assert!(snake.create_sql().starts_with("CREATE TABLE IF NOT EXISTS \"orders\".\"order_state\""));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SagaTable {
    schema: String,
    name: String,
    naming: NamingStyle,
    columns: Vec<Column>,
    token: ConcurrencyToken,
    int_state: bool,
}

impl SagaTable {
    /// The table `name` in schema `public`, snake_case, with `xmin` as token.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            schema: "public".into(),
            name: name.into(),
            naming: NamingStyle::SnakeCase,
            columns: Vec::new(),
            token: ConcurrencyToken::Xmin,
            int_state: false,
        }
    }

    /// The state column is an `integer` (MassTransit's `int` `CurrentState`, for a machine
    /// with [`current_state_as_int`](crate::StateMachine::current_state_as_int)) instead of
    /// the state's name.
    pub fn int_state(mut self) -> Self {
        self.int_state = true;
        self
    }

    /// Whether the state column is an integer ([`int_state`](Self::int_state)).
    pub fn has_int_state(&self) -> bool {
        self.int_state
    }

    /// The schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// How columns are named (renames columns added before too).
    pub fn naming(mut self, naming: NamingStyle) -> Self {
        self.naming = naming;
        for column in &mut self.columns {
            column.name = column_name(naming, &column.field);
        }
        self
    }

    /// The schema and naming of the messaging tables.
    pub fn like(self, tables: &Tables) -> Self {
        self.schema(tables.schema_name())
            .naming(tables.naming_style())
    }

    /// A column for the instance field `field` (its serde name), named by the naming style.
    /// Fields without a column are not stored.
    pub fn column(mut self, field: impl Into<String>, kind: ColumnType) -> Self {
        let field = field.into();
        let name = column_name(self.naming, &field);
        self.columns.push(Column { field, name, kind });
        self
    }

    /// A column with an explicit name (a .NET property mapped with `HasColumnName`).
    pub fn column_named(
        mut self,
        field: impl Into<String>,
        column: impl Into<String>,
        kind: ColumnType,
    ) -> Self {
        self.columns.push(Column {
            field: field.into(),
            name: column.into(),
            kind,
        });
        self
    }

    /// Uses a `bigint` version column as concurrency token instead of `xmin`.
    pub fn version_column(mut self, column: impl Into<String>) -> Self {
        self.token = ConcurrencyToken::Version(column.into());
        self
    }

    /// The key column (`CorrelationId` / `correlation_id`).
    pub fn key_column(&self) -> &'static str {
        match self.naming {
            NamingStyle::PascalCase => "CorrelationId",
            NamingStyle::SnakeCase => "correlation_id",
        }
    }

    /// The state column (`CurrentState` / `current_state`).
    pub fn state_column(&self) -> &'static str {
        match self.naming {
            NamingStyle::PascalCase => "CurrentState",
            NamingStyle::SnakeCase => "current_state",
        }
    }

    /// The column of instance field `field`.
    pub fn column_name(&self, field: &str) -> Option<&str> {
        self.columns
            .iter()
            .find(|c| c.field == field)
            .map(|c| c.name.as_str())
    }

    /// The concurrency token.
    pub fn token(&self) -> &ConcurrencyToken {
        &self.token
    }

    fn table(&self) -> TableRef {
        TableRef::Table(
            TableName(
                Some(SchemaName(
                    None,
                    Alias::new(self.schema.as_str()).into_iden(),
                )),
                Alias::new(self.name.as_str()).into_iden(),
            ),
            None,
        )
    }

    fn version_expr(&self) -> SimpleExpr {
        match &self.token {
            ConcurrencyToken::Xmin => Expr::cust("xmin::text::bigint"),
            ConcurrencyToken::Version(column) => Expr::col(Alias::new(column.as_str())),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS …` for the table (the SQL for DBAs; the schema must exist).
    pub fn create_sql(&self) -> String {
        let mut create = Table::create();
        create
            .table(self.table())
            .if_not_exists()
            .col(
                ColumnDef::new(Alias::new(self.key_column()))
                    .uuid()
                    .not_null()
                    .primary_key(),
            )
            .col({
                let mut state = ColumnDef::new(Alias::new(self.state_column()));
                if self.int_state {
                    state.integer();
                } else {
                    state.text();
                }
                state.not_null().to_owned()
            });
        for column in &self.columns {
            let mut def = ColumnDef::new(Alias::new(column.name.as_str()));
            match column.kind {
                ColumnType::Integer => def.integer(),
                ColumnType::BigInt => def.big_integer(),
                ColumnType::Double => def.double(),
                ColumnType::Decimal => def.decimal(),
                ColumnType::Boolean => def.boolean(),
                ColumnType::Text => def.text(),
                ColumnType::Uuid => def.uuid(),
                ColumnType::Timestamp => def.timestamp_with_time_zone(),
                ColumnType::Json => def.json_binary(),
            };
            create.col(&mut def);
        }
        if let ConcurrencyToken::Version(column) = &self.token {
            create.col(
                ColumnDef::new(Alias::new(column.as_str()))
                    .big_integer()
                    .not_null()
                    .default(0),
            );
        }
        create.to_string(PostgresQueryBuilder)
    }
}

trait IntoIden {
    fn into_iden(self) -> sea_orm::sea_query::DynIden;
}

impl IntoIden for Alias {
    fn into_iden(self) -> sea_orm::sea_query::DynIden {
        sea_orm::sea_query::SeaRc::new(self)
    }
}

/// `item_count` → `ItemCount` for PascalCase; as written for snake_case.
fn column_name(naming: NamingStyle, field: &str) -> String {
    match naming {
        NamingStyle::SnakeCase => field.to_owned(),
        NamingStyle::PascalCase => field
            .split('_')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let mut chars = p.chars();
                chars.next().map_or_else(String::new, |c| {
                    c.to_uppercase().chain(chars).collect::<String>()
                })
            })
            .collect(),
    }
}

/// How the repository keeps two steps on one instance apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Concurrency {
    /// Read the token, write only if unchanged, apply again on a conflict (MassTransit's
    /// `ConcurrencyMode.Optimistic`, the default here as the issue asks).
    #[default]
    Optimistic,
    /// Lock the row on read (`SELECT … FOR UPDATE`, MassTransit's `ConcurrencyMode.Pessimistic`).
    Pessimistic,
}

/// State machine instances of `T` in a [`SagaTable`], read and written in the inbox
/// transaction: a step, the inbox row and what the step published commit together, so a
/// redelivered or duplicated event applies once. The endpoint must use `.inbox()`.
///
/// `T` is (de)serialized with serde: each [`SagaTable::column`] is a field of `T` by its serde
/// name; fields without a column take their serde default on load.
///
/// ```no_run
/// use ferrybus_saga::SagaEndpointExt;
/// use ferrybus_saga::postgres::{ColumnType, PostgresSagaRepository, SagaTable};
/// # #[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
/// # struct OrderState { item_count: i32 }
/// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), ferrybus_sea_orm::StoreError> {
/// let repository = PostgresSagaRepository::<OrderState>::new(
///     SagaTable::new("order_state").schema("orders").column("item_count", ColumnType::Integer),
/// )
/// .pessimistic();
/// repository.create_table(&db).await?;
/// # Ok(()) }
/// ```
pub struct PostgresSagaRepository<T> {
    table: Arc<SagaTable>,
    concurrency: Concurrency,
    _instance: PhantomData<fn() -> T>,
}

impl<T> Clone for PostgresSagaRepository<T> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
            concurrency: self.concurrency,
            _instance: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for PostgresSagaRepository<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSagaRepository")
            .field("table", &self.table)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

impl<T> PostgresSagaRepository<T> {
    /// Instances in `table`, optimistic concurrency.
    pub fn new(table: SagaTable) -> Self {
        Self {
            table: Arc::new(table),
            concurrency: Concurrency::Optimistic,
            _instance: PhantomData,
        }
    }

    /// Locks the instance row on read instead (`SELECT … FOR UPDATE`).
    pub fn pessimistic(self) -> Self {
        self.concurrency(Concurrency::Pessimistic)
    }

    /// Sets the concurrency mode.
    pub fn concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The table.
    pub fn table(&self) -> &SagaTable {
        &self.table
    }

    /// Creates the schema and the table when absent (a table .NET created is left as it is),
    /// under a transaction-scoped advisory lock so instances starting together do not race.
    pub async fn create_table<C>(&self, db: &C) -> Result<(), StoreError>
    where
        C: ConnectionTrait + TransactionTrait,
    {
        let schema = self.table.schema.replace('"', "\"\"");
        let txn = db.begin().await?;
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            [format!("ferrybus.saga:{}.{}", self.table.schema, self.table.name).into()],
        ))
        .await?;
        txn.execute_unprepared(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
            .await?;
        txn.execute_unprepared(&self.table.create_sql()).await?;
        txn.commit().await?;
        Ok(())
    }

    fn load_statement(&self, id: Uuid) -> sea_orm::Statement {
        let table = &self.table;
        let mut select = Query::select();
        select
            .from(table.table())
            .column(Alias::new(table.key_column()))
            .column(Alias::new(table.state_column()))
            .expr_as(table.version_expr(), Alias::new("__ferrybus_version"))
            .and_where(Expr::col(Alias::new(table.key_column())).eq(id));
        for column in &table.columns {
            select.column(Alias::new(column.name.as_str()));
        }
        if self.concurrency == Concurrency::Pessimistic {
            select.lock(LockType::Update);
        }
        DbBackend::Postgres.build(&select)
    }

    fn save_statement(
        &self,
        change: SagaChange<Map<String, Json>>,
    ) -> Result<sea_orm::Statement, ConsumeError> {
        let table = &self.table;
        let key = Alias::new(table.key_column());
        let token_matches = |version: i64| Expr::expr(table.version_expr()).eq(version);
        let statement = match change {
            SagaChange::Insert {
                correlation_id,
                current_state,
                instance,
            } => {
                let mut insert = Query::insert();
                let mut columns = vec![key.clone(), Alias::new(table.state_column())];
                let mut values: Vec<SimpleExpr> = vec![
                    correlation_id.into(),
                    self.state_value(current_state)?.into(),
                ];
                for column in &table.columns {
                    columns.push(Alias::new(column.name.as_str()));
                    values.push(to_value(column, instance.get(&column.field))?.into());
                }
                if let ConcurrencyToken::Version(column) = &table.token {
                    columns.push(Alias::new(column.as_str()));
                    values.push(1i64.into());
                }
                insert
                    .into_table(table.table())
                    .columns(columns)
                    .values(values)
                    .map_err(|e| mapping(e.to_string()))?
                    .on_conflict(OnConflict::column(key).do_nothing().to_owned());
                DbBackend::Postgres.build(&insert)
            }
            SagaChange::Update {
                correlation_id,
                current_state,
                instance,
                version,
            } => {
                let mut update = Query::update();
                update.table(table.table()).value(
                    Alias::new(table.state_column()),
                    self.state_value(current_state)?,
                );
                for column in &table.columns {
                    update.value(
                        Alias::new(column.name.as_str()),
                        to_value(column, instance.get(&column.field))?,
                    );
                }
                if let ConcurrencyToken::Version(column) = &table.token {
                    update.value(
                        Alias::new(column.as_str()),
                        Expr::col(Alias::new(column.as_str())).add(1),
                    );
                }
                update
                    .and_where(Expr::col(key).eq(correlation_id))
                    .and_where(token_matches(version));
                DbBackend::Postgres.build(&update)
            }
            SagaChange::Delete {
                correlation_id,
                version,
            } => {
                let mut delete = Query::delete();
                delete
                    .from_table(table.table())
                    .and_where(Expr::col(key).eq(correlation_id))
                    .and_where(token_matches(version));
                DbBackend::Postgres.build(&delete)
            }
        };
        Ok(statement)
    }

    /// The state column's value for `state`; a name for an integer column (or a number for a
    /// text one) is a mapping error naming both sides.
    fn state_value(&self, state: CurrentState) -> Result<Value, ConsumeError> {
        match (state, self.table.int_state) {
            (CurrentState::Name(name), false) => Ok(name.into()),
            (CurrentState::Index(index), true) => Ok(index.into()),
            (CurrentState::Name(name), true) => Err(mapping(format!(
                "the state column of {} is an integer (SagaTable::int_state) but the machine \
                 stores the state name {name:?}: call StateMachine::current_state_as_int",
                self.table.name
            ))),
            (CurrentState::Index(index), false) => Err(mapping(format!(
                "the machine stores the state as the number {index} \
                 (StateMachine::current_state_as_int) but the state column of {} is text: \
                 call SagaTable::int_state",
                self.table.name
            ))),
        }
    }

    fn find_statement(&self, field: &str, value: &Json) -> Result<Statement, ConsumeError> {
        let table = &self.table;
        let column = table
            .columns
            .iter()
            .find(|c| c.field == field)
            .ok_or_else(|| {
                mapping(format!(
                    "events correlate by the field {field:?}, which is no column of {} \
                     (SagaTable::column)",
                    table.name
                ))
            })?;
        let mut select = Query::select();
        select
            .from(table.table())
            .column(Alias::new(table.key_column()))
            .and_where(
                Expr::col(Alias::new(column.name.as_str())).eq(to_value(column, Some(value))?),
            );
        Ok(DbBackend::Postgres.build(&select))
    }

    fn read(
        &self,
        row: &QueryResult,
    ) -> Result<(Uuid, CurrentState, i64, Map<String, Json>), ConsumeError> {
        let table = &self.table;
        let id: Uuid = row.try_get("", table.key_column()).map_err(db)?;
        let state = if table.int_state {
            CurrentState::Index(row.try_get("", table.state_column()).map_err(db)?)
        } else {
            CurrentState::Name(row.try_get("", table.state_column()).map_err(db)?)
        };
        let version: i64 = row.try_get("", "__ferrybus_version").map_err(db)?;
        let mut fields = Map::new();
        for column in &table.columns {
            fields.insert(column.field.clone(), from_row(row, column)?);
        }
        Ok((id, state, version, fields))
    }
}

fn db(error: sea_orm::DbErr) -> ConsumeError {
    StoreError::from(error).into_consume_error()
}

fn mapping(reason: impl Into<String>) -> ConsumeError {
    SagaError::new(SagaErrorKind::Mapping, reason).into()
}

fn from_row(row: &QueryResult, column: &Column) -> Result<Json, ConsumeError> {
    let name = column.name.as_str();
    let value = match column.kind {
        ColumnType::Integer => row
            .try_get::<Option<i32>>("", name)
            .map(|v| v.map(Json::from)),
        ColumnType::BigInt => row
            .try_get::<Option<i64>>("", name)
            .map(|v| v.map(Json::from)),
        ColumnType::Double => row
            .try_get::<Option<f64>>("", name)
            .map(|v| v.map(Json::from)),
        ColumnType::Decimal => row
            .try_get::<Option<Decimal>>("", name)
            .map(|v| v.map(|d| Json::String(d.to_string()))),
        ColumnType::Boolean => row
            .try_get::<Option<bool>>("", name)
            .map(|v| v.map(Json::from)),
        ColumnType::Text => row
            .try_get::<Option<String>>("", name)
            .map(|v| v.map(Json::from)),
        ColumnType::Uuid => row
            .try_get::<Option<Uuid>>("", name)
            .map(|v| v.map(|u| Json::String(u.to_string()))),
        ColumnType::Timestamp => row
            .try_get::<Option<DateTime<Utc>>>("", name)
            .map(|v| v.map(|t| Json::String(t.to_rfc3339()))),
        ColumnType::Json => row.try_get::<Option<Json>>("", name),
    };
    Ok(value.map_err(db)?.unwrap_or(Json::Null))
}

fn to_value(column: &Column, value: Option<&Json>) -> Result<Value, ConsumeError> {
    let value = value.filter(|v| !v.is_null());
    let bad = || {
        mapping(format!(
            "field {:?} does not fit column {:?} ({:?}): {}",
            column.field,
            column.name,
            column.kind,
            value.map_or_else(String::new, Json::to_string)
        ))
    };
    let text = || value.and_then(Json::as_str);
    Ok(match column.kind {
        ColumnType::Integer => Value::Int(match value {
            None => None,
            Some(v) => Some(
                v.as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(bad)?,
            ),
        }),
        ColumnType::BigInt => Value::BigInt(match value {
            None => None,
            Some(v) => Some(v.as_i64().ok_or_else(bad)?),
        }),
        ColumnType::Double => Value::Double(match value {
            None => None,
            Some(v) => Some(v.as_f64().ok_or_else(bad)?),
        }),
        ColumnType::Decimal => Value::Decimal(match value {
            None => None,
            Some(v) => {
                let s = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                Some(Decimal::from_str(&s).map_err(|_| bad())?)
            }
        }),
        ColumnType::Boolean => Value::Bool(match value {
            None => None,
            Some(v) => Some(v.as_bool().ok_or_else(bad)?),
        }),
        ColumnType::Text => Value::String(match value {
            None => None,
            Some(_) => Some(text().ok_or_else(bad)?.to_owned()),
        }),
        ColumnType::Uuid => Value::Uuid(match value {
            None => None,
            Some(_) => Some(
                text()
                    .and_then(|s| Uuid::parse_str(s).ok())
                    .ok_or_else(bad)?,
            ),
        }),
        ColumnType::Timestamp => Value::ChronoDateTimeUtc(match value {
            None => None,
            Some(_) => Some(
                text()
                    .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                    .map(|t| t.with_timezone(&Utc))
                    .ok_or_else(bad)?,
            ),
        }),
        ColumnType::Json => Value::Json(value.map(|v| Box::new(v.clone()))),
    })
}

fn no_inbox() -> ConsumeError {
    StoreError::new(
        StoreErrorKind::Config,
        "the saga repository runs in the inbox transaction: call .inbox() on the saga's endpoint \
         (the bus needs a PostgresStorage)",
    )
    .into_consume_error()
    .into_permanent()
}

#[ferrybus_core::async_trait]
impl<T> SagaRepository<T> for PostgresSagaRepository<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    async fn load(
        &self,
        request: &ConsumeRequest,
        correlation_id: Uuid,
    ) -> Result<Option<StoredSaga<T>>, ConsumeError> {
        let txn = request.try_transaction().ok_or_else(no_inbox)?;
        let Some(row) = txn
            .query_one_raw(self.load_statement(correlation_id))
            .await
            .map_err(db)?
        else {
            return Ok(None);
        };
        let (correlation_id, current_state, version, fields) = self.read(&row)?;
        let instance = serde_json::from_value(Json::Object(fields)).map_err(|e| {
            mapping(format!(
                "instance {correlation_id} of {}: {e}",
                self.table.name
            ))
        })?;
        Ok(Some(StoredSaga {
            correlation_id,
            current_state,
            instance,
            version,
        }))
    }

    async fn save(
        &self,
        request: &ConsumeRequest,
        change: SagaChange<T>,
    ) -> Result<SaveOutcome, ConsumeError> {
        let txn = request.try_transaction().ok_or_else(no_inbox)?;
        let fields = |instance: &T| match serde_json::to_value(instance) {
            Ok(Json::Object(map)) => Ok(map),
            Ok(other) => Err(mapping(format!(
                "a saga instance must serialize to an object, not {other}"
            ))),
            Err(e) => Err(mapping(e.to_string())),
        };
        let change = match change {
            SagaChange::Insert {
                correlation_id,
                current_state,
                instance,
            } => SagaChange::Insert {
                correlation_id,
                current_state,
                instance: fields(&instance)?,
            },
            SagaChange::Update {
                correlation_id,
                current_state,
                instance,
                version,
            } => SagaChange::Update {
                correlation_id,
                current_state,
                instance: fields(&instance)?,
                version,
            },
            SagaChange::Delete {
                correlation_id,
                version,
            } => SagaChange::Delete {
                correlation_id,
                version,
            },
        };
        let result = txn
            .execute_raw(self.save_statement(change)?)
            .await
            .map_err(db)?;
        Ok(if result.rows_affected() == 1 {
            SaveOutcome::Saved
        } else {
            SaveOutcome::Conflict
        })
    }

    async fn find(
        &self,
        request: &ConsumeRequest,
        field: &str,
        value: &Json,
    ) -> Result<Vec<Uuid>, ConsumeError> {
        let txn = request.try_transaction().ok_or_else(no_inbox)?;
        let rows = txn
            .query_all_raw(self.find_statement(field, value)?)
            .await
            .map_err(db)?;
        rows.iter()
            .map(|row| row.try_get("", self.table.key_column()).map_err(db))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pascal_case_names_follow_ef_core() {
        assert_eq!(
            column_name(NamingStyle::PascalCase, "invoice_id"),
            "InvoiceId"
        );
        assert_eq!(column_name(NamingStyle::PascalCase, "total"), "Total");
        assert_eq!(
            column_name(NamingStyle::SnakeCase, "item_count"),
            "item_count"
        );
    }

    #[test]
    fn statements_quote_every_identifier_and_bind_every_value() {
        let repository = PostgresSagaRepository::<()>::new(
            SagaTable::new("OrderState")
                .schema("sales")
                .naming(NamingStyle::PascalCase)
                .column("item_count", ColumnType::Integer),
        )
        .pessimistic();
        let load = repository.load_statement(Uuid::nil());
        assert_eq!(
            load.sql,
            "SELECT \"CorrelationId\", \"CurrentState\", xmin::text::bigint AS \"__ferrybus_version\", \
             \"ItemCount\" FROM \"sales\".\"OrderState\" WHERE \"CorrelationId\" = $1 FOR UPDATE"
        );
        let mut fields = Map::new();
        fields.insert("item_count".into(), Json::from(3));
        let update = repository
            .save_statement(SagaChange::Update {
                correlation_id: Uuid::nil(),
                current_state: CurrentState::from("Submitted"),
                instance: fields,
                version: 7,
            })
            .unwrap();
        assert_eq!(
            update.sql,
            "UPDATE \"sales\".\"OrderState\" SET \"CurrentState\" = $1, \"ItemCount\" = $2 \
             WHERE \"CorrelationId\" = $3 AND (xmin::text::bigint) = $4"
        );
    }

    #[test]
    fn a_value_that_does_not_fit_its_column_is_a_mapping_error() {
        let column = Column {
            field: "item_count".into(),
            name: "item_count".into(),
            kind: ColumnType::Integer,
        };
        let error = to_value(&column, Some(&Json::from("three"))).unwrap_err();
        assert_eq!(
            error.find::<SagaError>().map(SagaError::kind),
            Some(SagaErrorKind::Mapping)
        );
    }
}
