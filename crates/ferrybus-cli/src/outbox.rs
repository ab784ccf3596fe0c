//! `ferrybus outbox status`: what waits in the outbox tables, read in one read-only
//! transaction. The statements are built with sea-query, so every table and column name is a
//! quoted identifier, whatever the schema, names and naming.
//!
//! * **bus outbox**: outboxes (`OutboxState` rows not delivered) and their messages
//!   (`OutboxMessage` rows with an `OutboxId`), the age of the oldest message, and which
//!   sessions are delivering right now: a delivery service (ferrybus's or MassTransit's) holds
//!   `FOR UPDATE` row locks on the outbox states it works on, and a row locked by a running
//!   transaction carries that transaction's id in `xmax`, which `pg_stat_activity.backend_xid`
//!   names (pid, application name, client address, user);
//! * **consumer outbox**: messages of consumed inbox rows (`InboxMessageId` set) and inbox rows
//!   consumed but not delivered — stranded once older than the sweeper's age (`--stranded-after`,
//!   5 minutes by default, as `PostgresStorage::sweep_after`);
//! * **inbox**: rows, delivered rows, rows past the duplicate-detection window that the cleanup
//!   removes (`--cleanup-window`, 30 minutes by default, as `PostgresStorage::duplicate_window`),
//!   and rows never consumed.
//!
//! Times are compared in UTC (`SET LOCAL TIME ZONE 'UTC'`), so tables with Npgsql's legacy
//! `timestamp without time zone` columns read as ferrybus writes them.

use std::time::Duration;

use chrono::Utc;
use sea_orm::sea_query::{
    Alias, Asterisk, Expr, Func, JoinType, Order, PostgresQueryBuilder, Query, SelectStatement,
    SimpleExpr,
};
use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, QueryResult,
    Statement, TransactionTrait,
};
use serde::Serialize;

use crate::error::CliError;
use crate::storage::TableSet;

/// The thresholds of the report.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Windows {
    /// Consumed, undelivered inbox rows older than this are stranded.
    pub(crate) stranded_after: Duration,
    /// Delivered inbox rows older than this are past the cleanup window.
    pub(crate) cleanup_window: Duration,
}

/// The status of one table set (one line of `--json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Status {
    /// The schema.
    pub(crate) schema: String,
    /// The naming (`snake`, `pascal`).
    pub(crate) naming: &'static str,
    /// The three tables: inbox state, outbox state, outbox message.
    pub(crate) tables: [String; 3],
    /// The bus outbox.
    pub(crate) bus_outbox: BusOutbox,
    /// The consumer outbox.
    pub(crate) consumer_outbox: ConsumerOutbox,
    /// The inbox.
    pub(crate) inbox: Inbox,
}

/// Bus-outbox figures.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BusOutbox {
    /// Outbox states not delivered.
    pub(crate) outboxes: i64,
    /// Messages waiting in them.
    pub(crate) messages: i64,
    /// Age of the oldest waiting message (its `SentTime`), in seconds.
    pub(crate) oldest_message_age_seconds: Option<f64>,
    /// Sessions holding locks on outbox states now.
    pub(crate) being_delivered: Vec<Deliverer>,
}

/// A session delivering outboxes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Deliverer {
    /// The backend's process id.
    pub(crate) pid: i32,
    /// Its `application_name`.
    pub(crate) application: Option<String>,
    /// Its client address.
    pub(crate) client: Option<String>,
    /// Its database user.
    pub(crate) user: Option<String>,
    /// How many outbox states it has locked.
    pub(crate) outboxes: i64,
    /// How long its transaction has been open, in seconds.
    pub(crate) transaction_age_seconds: Option<f64>,
}

/// Consumer-outbox figures.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConsumerOutbox {
    /// Messages of consumed inbox rows, not sent yet.
    pub(crate) messages: i64,
    /// Age of the oldest of them, in seconds.
    pub(crate) oldest_message_age_seconds: Option<f64>,
    /// Inbox rows consumed but not delivered.
    pub(crate) pending_inbox_rows: i64,
    /// Of those, how many are older than `strandedAfterSeconds` (the sweeper's work).
    pub(crate) stranded: i64,
    /// The stranded threshold, in seconds.
    pub(crate) stranded_after_seconds: u64,
}

/// Inbox figures.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Inbox {
    /// All rows.
    pub(crate) rows: i64,
    /// Rows delivered.
    pub(crate) delivered: i64,
    /// Rows never consumed (a delivery that failed before its consumer finished, written by .NET).
    pub(crate) not_consumed: i64,
    /// Delivered rows older than the cleanup window.
    pub(crate) past_cleanup_window: i64,
    /// The cleanup window, in seconds.
    pub(crate) cleanup_window_seconds: u64,
    /// Age of the oldest delivered row, in seconds.
    pub(crate) oldest_delivered_age_seconds: Option<f64>,
}

/// Identifiers of one table set.
struct Names<'a> {
    set: &'a TableSet,
}

impl Names<'_> {
    fn table(&self, name: &str) -> (Alias, Alias) {
        (Alias::new(self.set.schema.as_str()), Alias::new(name))
    }
    fn col(&self, pascal: &str) -> SimpleExpr {
        Expr::col(Alias::new(self.set.naming.column(pascal))).into()
    }
}

fn count() -> SimpleExpr {
    Func::count(Expr::col(Asterisk)).into()
}

/// `EXTRACT(EPOCH FROM now() - min(col))` as float8 seconds.
fn age_of_min(col: SimpleExpr) -> SimpleExpr {
    Expr::cust_with_expr("EXTRACT(EPOCH FROM (now() - $1))::float8", Func::min(col))
}

/// `EXTRACT(EPOCH FROM now() - min(col) FILTER (WHERE key IS NOT NULL))` as float8 seconds.
fn oldest_where(col: SimpleExpr, key: SimpleExpr) -> SimpleExpr {
    Expr::cust_with_exprs(
        "EXTRACT(EPOCH FROM (now() - min($1) FILTER (WHERE $2 IS NOT NULL)))::float8",
        [col, key],
    )
}

fn filtered_count(cond: SimpleExpr) -> SimpleExpr {
    Expr::cust_with_expr("(count(*) FILTER (WHERE $1))::bigint", cond)
}

async fn one(
    txn: &DatabaseTransaction,
    query: &SelectStatement,
    what: &str,
) -> Result<QueryResult, CliError> {
    let (sql, values) = query.build(PostgresQueryBuilder);
    txn.query_one(Statement::from_sql_and_values(
        DbBackend::Postgres,
        sql,
        values,
    ))
    .await
    .map_err(|e| CliError::database(what, e))?
    .ok_or_else(|| CliError::database(what, "no row"))
}

fn get<T: sea_orm::TryGetable>(row: &QueryResult, column: &str, what: &str) -> Result<T, CliError> {
    row.try_get("", column)
        .map_err(|e| CliError::database(what, e))
}

/// Reads the status of `set`.
pub(crate) async fn status(
    db: &DatabaseConnection,
    set: &TableSet,
    windows: Windows,
) -> Result<Status, CliError> {
    let txn = db
        .begin_with_config(None, Some(AccessMode::ReadOnly))
        .await
        .map_err(|e| CliError::database("starting a read-only transaction", e))?;
    txn.execute_unprepared("SET LOCAL TIME ZONE 'UTC'")
        .await
        .map_err(|e| CliError::database("setting the time zone", e))?;
    let result = read(&txn, set, windows).await;
    let _ = txn.rollback().await;
    result
}

async fn read(
    txn: &DatabaseTransaction,
    set: &TableSet,
    windows: Windows,
) -> Result<Status, CliError> {
    let n = Names { set };
    let now = Utc::now();
    let cutoff = |d: Duration| now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);

    // Bus outbox: states and their messages.
    let what = format!("reading {}.{}", set.schema, set.state);
    let row = one(
        txn,
        Query::select()
            .expr_as(count(), Alias::new("n"))
            .from(n.table(&set.state))
            .and_where(Expr::expr(n.col("Delivered")).is_null()),
        &what,
    )
    .await?;
    let outboxes: i64 = get(&row, "n", &what)?;

    let what = format!("reading {}.{}", set.schema, set.message);
    let row = one(
        txn,
        Query::select()
            .expr_as(
                filtered_count(Expr::expr(n.col("OutboxId")).is_not_null()),
                Alias::new("bus"),
            )
            .expr_as(
                filtered_count(Expr::expr(n.col("InboxMessageId")).is_not_null()),
                Alias::new("consumer"),
            )
            .expr_as(
                oldest_where(n.col("SentTime"), n.col("OutboxId")),
                Alias::new("bus_age"),
            )
            .expr_as(
                oldest_where(n.col("SentTime"), n.col("InboxMessageId")),
                Alias::new("consumer_age"),
            )
            .from(n.table(&set.message)),
        &what,
    )
    .await?;
    let bus_messages: i64 = get(&row, "bus", &what)?;
    let consumer_messages: i64 = get(&row, "consumer", &what)?;
    let bus_age: Option<f64> = get(&row, "bus_age", &what)?;
    let consumer_age: Option<f64> = get(&row, "consumer_age", &what)?;

    // Who holds row locks on outbox states right now.
    let what = format!("reading the locks on {}.{}", set.schema, set.state);
    let group = [
        "a.pid",
        "a.application_name",
        "a.client_addr",
        "a.usename",
        "a.xact_start",
    ];
    let query = Query::select()
        .expr_as(Expr::cust("a.pid"), Alias::new("pid"))
        .expr_as(
            Expr::cust("NULLIF(a.application_name, '')"),
            Alias::new("application"),
        )
        .expr_as(Expr::cust("host(a.client_addr)"), Alias::new("client"))
        .expr_as(Expr::cust("a.usename::text"), Alias::new("usename"))
        .expr_as(Expr::cust("count(*)::bigint"), Alias::new("outboxes"))
        .expr_as(
            Expr::cust("EXTRACT(EPOCH FROM (now() - a.xact_start))::float8"),
            Alias::new("age"),
        )
        .from_as(n.table(&set.state), Alias::new("s"))
        .join_as(
            JoinType::InnerJoin,
            (Alias::new("pg_catalog"), Alias::new("pg_stat_activity")),
            Alias::new("a"),
            Expr::cust("a.backend_xid::text = s.xmax::text"),
        )
        .and_where(Expr::cust("a.pid <> pg_backend_pid()"))
        .add_group_by(group.map(Expr::cust))
        .order_by_expr(Expr::cust("a.pid"), Order::Asc)
        .to_owned();
    let (sql, values) = query.build(PostgresQueryBuilder);
    let rows = txn
        .query_all(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await
        .map_err(|e| CliError::database(&what, e))?;
    let mut being_delivered = Vec::new();
    for row in rows {
        being_delivered.push(Deliverer {
            pid: get(&row, "pid", &what)?,
            application: get(&row, "application", &what)?,
            client: get(&row, "client", &what)?,
            user: get(&row, "usename", &what)?,
            outboxes: get(&row, "outboxes", &what)?,
            transaction_age_seconds: get(&row, "age", &what)?,
        });
    }

    // The inbox: consumed-not-delivered rows (consumer outbox) and the cleanup's view.
    let what = format!("reading {}.{}", set.schema, set.inbox);
    let consumed = || Expr::expr(n.col("Consumed"));
    let delivered = || Expr::expr(n.col("Delivered"));
    let row = one(
        txn,
        Query::select()
            .expr_as(Expr::cust("count(*)::bigint"), Alias::new("rows"))
            .expr_as(
                filtered_count(delivered().is_not_null()),
                Alias::new("delivered"),
            )
            .expr_as(
                filtered_count(consumed().is_null()),
                Alias::new("not_consumed"),
            )
            .expr_as(
                filtered_count(consumed().is_not_null().and(delivered().is_null())),
                Alias::new("pending"),
            )
            .expr_as(
                filtered_count(
                    consumed()
                        .is_not_null()
                        .and(delivered().is_null())
                        .and(consumed().lt(cutoff(windows.stranded_after))),
                ),
                Alias::new("stranded"),
            )
            .expr_as(
                filtered_count(delivered().lt(cutoff(windows.cleanup_window))),
                Alias::new("past_window"),
            )
            .expr_as(
                age_of_min(n.col("Delivered")),
                Alias::new("oldest_delivered"),
            )
            .from(n.table(&set.inbox)),
        &what,
    )
    .await?;
    Ok(Status {
        schema: set.schema.clone(),
        naming: set.naming.as_str(),
        tables: [set.inbox.clone(), set.state.clone(), set.message.clone()],
        bus_outbox: BusOutbox {
            outboxes,
            messages: bus_messages,
            oldest_message_age_seconds: bus_age,
            being_delivered,
        },
        consumer_outbox: ConsumerOutbox {
            messages: consumer_messages,
            oldest_message_age_seconds: consumer_age,
            pending_inbox_rows: get(&row, "pending", &what)?,
            stranded: get(&row, "stranded", &what)?,
            stranded_after_seconds: windows.stranded_after.as_secs(),
        },
        inbox: Inbox {
            rows: get(&row, "rows", &what)?,
            delivered: get(&row, "delivered", &what)?,
            not_consumed: get(&row, "not_consumed", &what)?,
            past_cleanup_window: get(&row, "past_window", &what)?,
            cleanup_window_seconds: windows.cleanup_window.as_secs(),
            oldest_delivered_age_seconds: get(&row, "oldest_delivered", &what)?,
        },
    })
}
