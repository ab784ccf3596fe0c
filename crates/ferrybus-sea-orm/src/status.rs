//! [`outbox_status`]: what is waiting in the inbox and outbox tables and who is delivering it
//! (read-only; `ferrybus outbox status` shows it, dashboards can poll it).
//!
//! * **bus outbox**: outboxes (`OutboxState` rows without `Delivered`; MassTransit's delivery
//!   service sets it, then removes the row on its next pass —
//!   `src/Persistence/MassTransit.EntityFrameworkCoreIntegration/EntityFrameworkCoreIntegration/BusOutboxDeliveryService.cs`)
//!   and their messages (`OutboxMessage` rows with an `OutboxId`), and the sessions delivering
//!   them now: a delivery service (ferrybus's or MassTransit's) holds `FOR UPDATE` row locks on
//!   the outbox states it works on, and a row locked by a running transaction carries that
//!   transaction's id in `xmax`, which `pg_stat_activity.backend_xid` names. Nothing is locked
//!   to find out. Seeing other users' sessions needs the `pg_read_all_stats` role.
//! * **consumer outbox**: messages of consumed inbox rows (`InboxMessageId` set), and inbox rows
//!   consumed but not delivered: stranded once consumed longer ago than
//!   [`Windows::stranded_after`], the rows the sweeper delivers.
//! * **inbox**: rows, delivered rows, rows never consumed, and delivered rows older than
//!   [`Windows::cleanup_window`], the rows the cleanup removes.
//!
//! Every figure comes from one snapshot (one read-only `REPEATABLE READ` transaction); times
//! are read as UTC, whatever the time column type. The windows are compared with this
//! process's clock, as the sweeper and the cleanup do; [`OutboxStatus::read_at`] is the
//! database's.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::sea_query::ExprTrait;
use sea_orm::sea_query::{
    Alias, Asterisk, DynIden, Expr, Func, IntoIden, Order, Query, SelectStatement, SimpleExpr,
    SubQueryStatement,
};
use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseConnection, DatabaseTransaction, FromQueryResult,
    IsolationLevel, TransactionTrait,
};

use crate::config::Tables;
use crate::defaults;
use crate::entity::OutboxTable::{InboxState, OutboxMessage, OutboxState};
use crate::entity::{inbox_state, outbox_message, outbox_state};
use crate::error::{StoreError, StoreErrorKind};
use crate::sql::names::Names;
use crate::sql::{build, read_timestamp_type};

/// The thresholds of an [`OutboxStatus`]: by default [`defaults::STRANDED_AFTER`] (5 min) and
/// [`defaults::DUPLICATE_WINDOW`] (30 min, the storage's default
/// [`duplicate_window`](crate::PostgresStorage::duplicate_window)).
///
/// ```
/// use std::time::Duration;
/// use ferrybus_sea_orm::{defaults, status::Windows};
/// let windows = Windows::default().cleanup_window(Duration::from_secs(24 * 3600));
/// assert_eq!(windows.stranded_after, defaults::STRANDED_AFTER);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Windows {
    /// Consumed, undelivered inbox rows consumed longer ago than this are stranded: the
    /// sweeper, which takes such rows after
    /// [`sweep_after`](crate::PostgresStorage::sweep_after) (1 s), has not delivered them
    /// (see [`defaults::STRANDED_AFTER`]).
    pub stranded_after: Duration,
    /// Delivered inbox rows older than this are past the duplicate-detection window
    /// ([`PostgresStorage::duplicate_window`](crate::PostgresStorage::duplicate_window)).
    pub cleanup_window: Duration,
}

impl Default for Windows {
    fn default() -> Self {
        Self {
            stranded_after: defaults::STRANDED_AFTER,
            cleanup_window: defaults::DUPLICATE_WINDOW,
        }
    }
}

impl Windows {
    /// Sets [`stranded_after`](Self::stranded_after).
    pub fn stranded_after(mut self, age: Duration) -> Self {
        self.stranded_after = age;
        self
    }

    /// Sets [`cleanup_window`](Self::cleanup_window).
    pub fn cleanup_window(mut self, window: Duration) -> Self {
        self.cleanup_window = window;
        self
    }
}

/// What waits in MassTransit's tables, from one snapshot.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OutboxStatus {
    /// The database's time of the snapshot (`now()`): the ages are measured from it.
    pub read_at: DateTime<Utc>,
    /// The windows the figures were counted with.
    pub windows: Windows,
    /// The bus outbox.
    pub bus_outbox: BusOutboxStatus,
    /// The consumer outbox.
    pub consumer_outbox: ConsumerOutboxStatus,
    /// The inbox.
    pub inbox: InboxStatus,
}

impl OutboxStatus {
    /// How long before [`read_at`](Self::read_at) `at` was (negative when a writer's clock is
    /// ahead of the database's).
    ///
    /// ```no_run
    /// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), ferrybus_sea_orm::StoreError> {
    /// use ferrybus_sea_orm::{status, Tables};
    /// let status = status::outbox_status(&db, &Tables::new()).await?;
    /// if let Some(age) = status.age(status.bus_outbox.oldest_message) {
    ///     println!("the oldest bus-outbox message waits for {}s", age.num_seconds());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn age(&self, at: Option<DateTime<Utc>>) -> Option<TimeDelta> {
        at.map(|at| self.read_at - at)
    }
}

/// Bus-outbox figures of an [`OutboxStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BusOutboxStatus {
    /// Outboxes (`OutboxState` rows) not delivered.
    pub outboxes: i64,
    /// When the oldest of them was created.
    pub oldest_outbox: Option<DateTime<Utc>>,
    /// Their messages (`OutboxMessage` rows with an `OutboxId`).
    pub messages: i64,
    /// When the oldest of them was sent (`SentTime`).
    pub oldest_message: Option<DateTime<Utc>>,
    /// The sessions holding row locks on outbox states now, by process id.
    pub being_delivered: Vec<LockHolder>,
}

/// A database session holding row locks on outbox states: a delivery service at work.
#[derive(Clone, Debug, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct LockHolder {
    /// The backend's process id.
    pub pid: i32,
    /// Its `application_name`, unless empty.
    pub application: Option<String>,
    /// Its client address.
    pub client: Option<String>,
    /// Its database user.
    pub user: Option<String>,
    /// How many outbox states it has locked.
    pub outboxes: i64,
    /// When its transaction started.
    pub transaction_start: Option<DateTime<Utc>>,
}

/// Consumer-outbox figures of an [`OutboxStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerOutboxStatus {
    /// Messages of consumed inbox rows (`OutboxMessage` rows with an `InboxMessageId`), not
    /// sent yet.
    pub messages: i64,
    /// When the oldest of them was sent (`SentTime`).
    pub oldest_message: Option<DateTime<Utc>>,
    /// Inbox rows consumed but not delivered: their messages are being sent, or wait for the
    /// sweeper.
    pub pending_inbox_rows: i64,
    /// When the oldest of them was consumed.
    pub oldest_pending: Option<DateTime<Utc>>,
    /// Of those, how many were consumed longer ago than [`Windows::stranded_after`].
    pub stranded: i64,
    /// The oldest of the stranded ones (at most [`STRANDED_LISTED`]), oldest first: entries the
    /// sweeper keeps failing on, and has set aside, are among them.
    pub stranded_entries: Vec<StrandedEntry>,
}

/// How many stranded consumer-outbox entries [`ConsumerOutboxStatus::stranded_entries`] lists.
pub const STRANDED_LISTED: u64 = 20;

/// A consumer-outbox entry consumed longer ago than [`Windows::stranded_after`] and still not
/// delivered: an inbox row and its waiting messages.
#[derive(Clone, Debug, PartialEq, Eq, FromQueryResult)]
#[non_exhaustive]
pub struct StrandedEntry {
    /// The inbox row's `MessageId`.
    pub message_id: uuid::Uuid,
    /// Its `ConsumerId`.
    pub consumer_id: uuid::Uuid,
    /// When it was consumed.
    pub consumed: Option<DateTime<Utc>>,
    /// Its messages still waiting.
    pub messages: i64,
}

/// Inbox figures of an [`OutboxStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxStatus {
    /// All rows.
    pub rows: i64,
    /// Rows delivered.
    pub delivered: i64,
    /// Rows never consumed (a .NET delivery that failed before its consumer finished).
    pub not_consumed: i64,
    /// Delivered rows older than [`Windows::cleanup_window`].
    pub past_cleanup_window: i64,
    /// When the oldest delivered row was delivered.
    pub oldest_delivered: Option<DateTime<Utc>>,
}

/// Reads the [`OutboxStatus`] of `tables` with the default [`Windows`] (the time column type
/// is read from the tables first, as a starting bus does).
///
/// ```no_run
/// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), ferrybus_sea_orm::StoreError> {
/// use ferrybus_sea_orm::{status, Tables};
/// let status = status::outbox_status(&db, &Tables::new()).await?;
/// println!("{} bus-outbox messages waiting", status.bus_outbox.messages);
/// # Ok(()) }
/// ```
pub async fn outbox_status(
    db: &DatabaseConnection,
    tables: &Tables,
) -> Result<OutboxStatus, StoreError> {
    outbox_status_with(db, tables, Windows::default()).await
}

/// Reads the [`OutboxStatus`] of `tables`, counting stranded and expired rows with `windows`.
///
/// ```no_run
/// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), ferrybus_sea_orm::StoreError> {
/// use std::time::Duration;
/// use ferrybus_sea_orm::{status, Tables};
/// let windows = status::Windows::default().stranded_after(Duration::from_secs(60));
/// let status = status::outbox_status_with(&db, &Tables::new(), windows).await?;
/// for session in &status.bus_outbox.being_delivered {
///     println!("pid {} delivers {} outboxes", session.pid, session.outboxes);
/// }
/// println!("{} consumer-outbox rows stranded", status.consumer_outbox.stranded);
/// # Ok(()) }
/// ```
pub async fn outbox_status_with(
    db: &DatabaseConnection,
    tables: &Tables,
    windows: Windows,
) -> Result<OutboxStatus, StoreError> {
    let now = Utc::now();
    before(now, windows.stranded_after, "stranded-after age")?;
    before(now, windows.cleanup_window, "cleanup window")?;
    let timestamps = read_timestamp_type(db, tables).await?;
    let names = &Names::new(&tables.clone().timestamps(timestamps));
    let txn = db
        .begin_with_config(
            Some(IsolationLevel::RepeatableRead),
            Some(AccessMode::ReadOnly),
        )
        .await?;
    let result = read(&txn, names, windows, now).await;
    // Read-only: nothing to keep.
    let _ = txn.rollback().await;
    let (counts, being_delivered, stranded) = result?;
    Ok(counts.into_status(windows, being_delivered, stranded))
}

/// `now - window`, or a [`StoreErrorKind::Config`] error naming `what` when that is before
/// the earliest time there is.
fn before(now: DateTime<Utc>, window: Duration, what: &str) -> Result<DateTime<Utc>, StoreError> {
    chrono::Duration::from_std(window)
        .ok()
        .and_then(|window| now.checked_sub_signed(window))
        .ok_or_else(|| {
            StoreError::config(format!(
                "the {what} ({}s) reaches before the earliest time there is",
                window.as_secs()
            ))
        })
}

/// How long each statement of [`backlog`] may run (`SET LOCAL statement_timeout`): 2 s.
pub const BACKLOG_TIMEOUT: Duration = Duration::from_secs(2);

/// The messages waiting in the outbox tables, read cheaply enough for a readiness probe
/// ([`backlog`]); [`outbox_status`] has the exact figures.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backlog {
    /// The database's time of the reading (`now()`).
    pub read_at: DateTime<Utc>,
    /// Bus-outbox messages waiting, counted up to [`limit`](Self::limit).
    pub bus_messages: i64,
    /// When the first of them was sent (`SentTime` of the lowest sequence number).
    pub oldest_bus_message: Option<DateTime<Utc>>,
    /// Consumer-outbox messages waiting, counted up to [`limit`](Self::limit).
    pub consumer_messages: i64,
    /// When the first of them was sent.
    pub oldest_consumer_message: Option<DateTime<Utc>>,
    /// Where counting stopped: a count equal to it means "at least this many".
    pub limit: i64,
}

impl Backlog {
    /// How long before [`read_at`](Self::read_at) `at` was.
    pub fn age(&self, at: Option<DateTime<Utc>>) -> Option<TimeDelta> {
        at.map(|at| self.read_at - at)
    }
}

/// Reads the [`Backlog`] of `tables`, counting at most `limit` messages of each outbox: bounded
/// work whatever the size of the tables, for a readiness probe. It reads only
/// `OutboxMessage` (which holds waiting messages only; never the inbox, which keeps every
/// message of the duplicate-detection window), through its indexes, each count stopped at
/// `limit` (`LIMIT`), the oldest message by the primary key (`ORDER BY SequenceNumber LIMIT
/// 1`), in a read-only transaction whose statements stop after [`BACKLOG_TIMEOUT`].
///
/// ```no_run
/// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), ferrybus_sea_orm::StoreError> {
/// use ferrybus_sea_orm::{status, Tables};
/// let backlog = status::backlog(&db, &Tables::new(), 10_001).await?;
/// if backlog.bus_messages >= backlog.limit {
///     println!("more than 10 000 bus-outbox messages waiting");
/// }
/// # Ok(()) }
/// ```
pub async fn backlog(
    db: &DatabaseConnection,
    tables: &Tables,
    limit: u64,
) -> Result<Backlog, StoreError> {
    let timestamps = read_timestamp_type(db, tables).await?;
    let names = &Names::new(&tables.clone().timestamps(timestamps));
    let txn = db
        .begin_with_config(None, Some(AccessMode::ReadOnly))
        .await?;
    let result = read_backlog(&txn, names, limit).await;
    let _ = txn.rollback().await;
    result
}

#[derive(FromQueryResult)]
struct BacklogRow {
    read_at: DateTime<Utc>,
    bus_messages: i64,
    oldest_bus_message: Option<DateTime<Utc>>,
    consumer_messages: i64,
    oldest_consumer_message: Option<DateTime<Utc>>,
}

async fn read_backlog(
    txn: &DatabaseTransaction,
    names: &Names,
    limit: u64,
) -> Result<Backlog, StoreError> {
    let timeout = format!("{}", BACKLOG_TIMEOUT.as_millis());
    let set = Query::select()
        .expr(Func::cust(a("set_config")).args([
            Expr::val("statement_timeout"),
            Expr::val(timeout),
            Expr::val(true),
        ]))
        .to_owned();
    txn.query_one_raw(build(&set)).await?;
    let row = txn
        .query_one_raw(build(&backlog_query(names, limit)))
        .await?
        .ok_or_else(|| StoreError::new(StoreErrorKind::Database, "backlog returned no row"))?;
    let row = BacklogRow::from_query_result(&row, "")?;
    Ok(Backlog {
        read_at: row.read_at,
        bus_messages: row.bus_messages,
        oldest_bus_message: row.oldest_bus_message,
        consumer_messages: row.consumer_messages,
        oldest_consumer_message: row.oldest_consumer_message,
        limit: i64::try_from(limit).unwrap_or(i64::MAX),
    })
}

/// The [`backlog`] statement: each figure a scalar subquery bounded by a `LIMIT`.
///
/// ```text
/// SELECT now() AS read_at,
///   (SELECT count(*) FROM (SELECT 1 FROM outbox_message WHERE outbox_id IS NOT NULL LIMIT $n) AS b) AS bus_messages,
///   (SELECT sent_time FROM outbox_message WHERE outbox_id IS NOT NULL ORDER BY sequence_number LIMIT 1) AS oldest_bus_message,
///   … the same with inbox_message_id IS NOT NULL for the consumer outbox
/// ```
pub(crate) fn backlog_query(names: &Names, limit: u64) -> SelectStatement {
    let n = names;
    let sub = |q: SelectStatement| {
        SimpleExpr::SubQuery(None, Box::new(SubQueryStatement::SelectStatement(q)))
    };
    let count = |col: outbox_message::Column| {
        let rows = Query::select()
            .expr(Expr::val(1))
            .from(n.table(OutboxMessage))
            .and_where(Expr::col(n.c(col)).is_not_null())
            .limit(limit)
            .to_owned();
        sub(Query::select()
            .expr(Func::count(Expr::col(Asterisk)))
            .from_subquery(rows, a("b"))
            .to_owned())
    };
    let oldest = |col: outbox_message::Column| {
        sub(Query::select()
            .expr(n.ts_read(n.e(outbox_message::Column::SentTime)))
            .from(n.table(OutboxMessage))
            .and_where(Expr::col(n.c(col)).is_not_null())
            .order_by(n.c(outbox_message::Column::SequenceNumber), Order::Asc)
            .limit(1)
            .to_owned())
    };
    Query::select()
        .expr_as(Expr::current_timestamp(), a("read_at"))
        .expr_as(count(outbox_message::Column::OutboxId), a("bus_messages"))
        .expr_as(
            oldest(outbox_message::Column::OutboxId),
            a("oldest_bus_message"),
        )
        .expr_as(
            count(outbox_message::Column::InboxMessageId),
            a("consumer_messages"),
        )
        .expr_as(
            oldest(outbox_message::Column::InboxMessageId),
            a("oldest_consumer_message"),
        )
        .to_owned()
}

/// The one row of [`counts`].
#[derive(FromQueryResult)]
struct Counts {
    read_at: DateTime<Utc>,
    bus_outboxes: i64,
    oldest_bus_outbox: Option<DateTime<Utc>>,
    bus_messages: i64,
    oldest_bus_message: Option<DateTime<Utc>>,
    consumer_messages: i64,
    oldest_consumer_message: Option<DateTime<Utc>>,
    inbox_rows: i64,
    inbox_delivered: i64,
    inbox_not_consumed: i64,
    inbox_pending: i64,
    oldest_pending: Option<DateTime<Utc>>,
    inbox_stranded: i64,
    inbox_past_window: i64,
    oldest_delivered: Option<DateTime<Utc>>,
}

impl Counts {
    fn into_status(
        self,
        windows: Windows,
        being_delivered: Vec<LockHolder>,
        stranded_entries: Vec<StrandedEntry>,
    ) -> OutboxStatus {
        OutboxStatus {
            read_at: self.read_at,
            windows,
            bus_outbox: BusOutboxStatus {
                outboxes: self.bus_outboxes,
                oldest_outbox: self.oldest_bus_outbox,
                messages: self.bus_messages,
                oldest_message: self.oldest_bus_message,
                being_delivered,
            },
            consumer_outbox: ConsumerOutboxStatus {
                messages: self.consumer_messages,
                oldest_message: self.oldest_consumer_message,
                pending_inbox_rows: self.inbox_pending,
                oldest_pending: self.oldest_pending,
                stranded: self.inbox_stranded,
                stranded_entries,
            },
            inbox: InboxStatus {
                rows: self.inbox_rows,
                delivered: self.inbox_delivered,
                not_consumed: self.inbox_not_consumed,
                past_cleanup_window: self.inbox_past_window,
                oldest_delivered: self.oldest_delivered,
            },
        }
    }
}

async fn read(
    txn: &DatabaseTransaction,
    names: &Names,
    windows: Windows,
    now: DateTime<Utc>,
) -> Result<(Counts, Vec<LockHolder>, Vec<StrandedEntry>), StoreError> {
    let row = txn
        .query_one_raw(build(&counts(names, windows, now)))
        .await?
        .ok_or_else(|| StoreError::new(StoreErrorKind::Database, "status returned no row"))?;
    let counts = Counts::from_query_result(&row, "")?;
    let mut holders = Vec::new();
    for row in txn.query_all_raw(build(&lock_holders(names))).await? {
        holders.push(LockHolder::from_query_result(&row, "")?);
    }
    let mut stranded = Vec::new();
    let stranded_before = before(now, windows.stranded_after, "stranded-after age")?;
    for row in txn
        .query_all_raw(build(&stranded_entries(names, stranded_before)))
        .await?
    {
        stranded.push(StrandedEntry::from_query_result(&row, "")?);
    }
    Ok((counts, holders, stranded))
}

/// The oldest [`STRANDED_LISTED`] inbox rows consumed before `before` and not delivered, with
/// their waiting messages (`IX_InboxState_Delivered`, then the messages' index per row):
///
/// ```text
/// SELECT i.message_id, i.consumer_id, i.consumed, (SELECT count(*) FROM outbox_message AS m
///   WHERE m.inbox_message_id = i.message_id AND m.inbox_consumer_id = i.consumer_id) AS messages
/// FROM inbox_state AS i WHERE i.delivered IS NULL AND i.consumed < $1 ORDER BY i.consumed LIMIT 20
/// ```
fn stranded_entries(names: &Names, before: DateTime<Utc>) -> SelectStatement {
    let n = names;
    let i = |c: inbox_state::Column| n.ac("i", c);
    let waiting = Query::select()
        .expr(Func::count(Expr::col(Asterisk)))
        .from(n.table_as(OutboxMessage, "m"))
        .and_where(
            Expr::expr(n.ac("m", outbox_message::Column::InboxMessageId))
                .eq(i(inbox_state::Column::MessageId)),
        )
        .and_where(
            Expr::expr(n.ac("m", outbox_message::Column::InboxConsumerId))
                .eq(i(inbox_state::Column::ConsumerId)),
        )
        .to_owned();
    Query::select()
        .expr_as(i(inbox_state::Column::MessageId), a("message_id"))
        .expr_as(i(inbox_state::Column::ConsumerId), a("consumer_id"))
        .expr_as(n.ts_read(i(inbox_state::Column::Consumed)), a("consumed"))
        .expr_as(
            SimpleExpr::SubQuery(None, Box::new(SubQueryStatement::SelectStatement(waiting))),
            a("messages"),
        )
        .from(n.table_as(InboxState, "i"))
        .and_where(Expr::expr(i(inbox_state::Column::Delivered)).is_null())
        .and_where(Expr::expr(i(inbox_state::Column::Consumed)).lt(n.ts(before)))
        .order_by_expr(i(inbox_state::Column::Consumed), Order::Asc)
        .limit(STRANDED_LISTED)
        .to_owned()
}

fn a(name: &'static str) -> DynIden {
    Alias::new(name).into_iden()
}

/// `count(CASE WHEN cond THEN 1 END)`: the rows where `cond` holds.
fn count_where(cond: SimpleExpr) -> SimpleExpr {
    Func::count(Expr::case(cond, 1)).into()
}

/// `min(CASE WHEN cond THEN col END)`, read as `timestamptz`.
fn min_where(names: &Names, col: SimpleExpr, cond: SimpleExpr) -> SimpleExpr {
    names.ts_read(Func::min(Expr::case(cond, col)).into())
}

/// Every count in one statement, one scan per table:
/// `SELECT now() AS read_at, * FROM (SELECT … FROM inbox) AS i, (…) AS s, (…) AS m`. The
/// windows end at `now` (this process's clock, as the sweeper and the cleanup count them).
fn counts(names: &Names, windows: Windows, now: DateTime<Utc>) -> SelectStatement {
    let n = names;
    // Checked by `before` first; the earliest time for a window past it.
    let before = |window: Duration| {
        chrono::Duration::from_std(window)
            .ok()
            .and_then(|window| now.checked_sub_signed(window))
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    };
    let all: SimpleExpr = Func::count(Expr::col(Asterisk)).into();

    let state_delivered = || Expr::col(n.c(outbox_state::Column::Delivered));
    let state = Query::select()
        .expr_as(count_where(state_delivered().is_null()), a("bus_outboxes"))
        .expr_as(
            min_where(
                n,
                n.e(outbox_state::Column::Created),
                state_delivered().is_null(),
            ),
            a("oldest_bus_outbox"),
        )
        .from(n.table(OutboxState))
        .to_owned();

    let bus = || Expr::col(n.c(outbox_message::Column::OutboxId)).is_not_null();
    let consumer = || Expr::col(n.c(outbox_message::Column::InboxMessageId)).is_not_null();
    let sent = || n.e(outbox_message::Column::SentTime);
    let message = Query::select()
        .expr_as(count_where(bus()), a("bus_messages"))
        .expr_as(min_where(n, sent(), bus()), a("oldest_bus_message"))
        .expr_as(count_where(consumer()), a("consumer_messages"))
        .expr_as(
            min_where(n, sent(), consumer()),
            a("oldest_consumer_message"),
        )
        .from(n.table(OutboxMessage))
        .to_owned();

    let consumed = || Expr::col(n.c(inbox_state::Column::Consumed));
    let delivered = || Expr::col(n.c(inbox_state::Column::Delivered));
    let pending = || consumed().is_not_null().and(delivered().is_null());
    let inbox = Query::select()
        .expr_as(all, a("inbox_rows"))
        .expr_as(count_where(delivered().is_not_null()), a("inbox_delivered"))
        .expr_as(count_where(consumed().is_null()), a("inbox_not_consumed"))
        .expr_as(count_where(pending()), a("inbox_pending"))
        .expr_as(
            min_where(n, n.e(inbox_state::Column::Consumed), pending()),
            a("oldest_pending"),
        )
        .expr_as(
            count_where(pending().and(consumed().lt(n.ts(before(windows.stranded_after))))),
            a("inbox_stranded"),
        )
        .expr_as(
            count_where(delivered().lt(n.ts(before(windows.cleanup_window)))),
            a("inbox_past_window"),
        )
        .expr_as(
            n.ts_read(Func::min(n.e(inbox_state::Column::Delivered)).into()),
            a("oldest_delivered"),
        )
        .from(n.table(InboxState))
        .to_owned();

    Query::select()
        .expr_as(Expr::current_timestamp(), a("read_at"))
        .column(Asterisk)
        .from_subquery(inbox, a("i"))
        .from_subquery(state, a("s"))
        .from_subquery(message, a("m"))
        .to_owned()
}

/// The sessions holding row locks on outbox states, without locking anything: a row locked by
/// a running transaction has its id in `xmax`.
///
/// ```text
/// SELECT a.pid, NULLIF(a.application_name, '') AS application, host(a.client_addr) AS client,
///        a.usename::text AS user, count(*) AS outboxes, a.xact_start AS transaction_start
/// FROM outbox_state AS s JOIN pg_catalog.pg_stat_activity AS a ON a.backend_xid::text = s.xmax::text
/// WHERE a.pid <> pg_backend_pid() GROUP BY … ORDER BY a.pid
/// ```
fn lock_holders(names: &Names) -> SelectStatement {
    let (s, act) = (a("s"), a("a"));
    let col = |name: &'static str| -> SimpleExpr { Expr::col((act.clone(), a(name))) };
    let text = |e: SimpleExpr| e.cast_as(Alias::new("text"));
    Query::select()
        .expr_as(col("pid"), a("pid"))
        .expr_as(
            Func::cust(a("NULLIF")).args([col("application_name"), Expr::val("")]),
            a("application"),
        )
        .expr_as(Func::cust(a("host")).arg(col("client_addr")), a("client"))
        .expr_as(text(col("usename")), a("user"))
        .expr_as(
            SimpleExpr::from(Func::count(Expr::col(Asterisk))).cast_as(Alias::new("bigint")),
            a("outboxes"),
        )
        .expr_as(col("xact_start"), a("transaction_start"))
        .from(names.table_as(OutboxState, "s"))
        .inner_join(
            crate::entity::schema_table(a("pg_catalog"), a("pg_stat_activity"), Some(act.clone())),
            Expr::expr(text(col("backend_xid"))).eq(text(Expr::col((s, a("xmax"))))),
        )
        .and_where(Expr::expr(col("pid")).ne(Func::cust(a("pg_backend_pid"))))
        .add_group_by(
            [
                "pid",
                "application_name",
                "client_addr",
                "usename",
                "xact_start",
            ]
            .map(col),
        )
        .order_by_expr(col("pid"), Order::Asc)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TimestampType;
    use sea_orm::sea_query::PostgresQueryBuilder;

    #[test]
    fn statements_quote_every_name() {
        let tables = Tables::new()
            .schema("Odd \"schema\"")
            .names("In", "St", "Msg")
            .timestamps(TimestampType::WithoutTimeZone);
        let names = Names::new(&tables);
        let (sql, _) = counts(&names, Windows::default(), Utc::now()).build(PostgresQueryBuilder);
        assert!(sql.contains(r#"FROM "Odd ""schema"""."In""#), "{sql}");
        assert!(
            sql.contains(r#"COUNT((CASE WHEN ("delivered" IS NOT NULL) THEN $1 END))"#),
            "{sql}"
        );
        // Legacy timestamps are read as UTC.
        assert!(
            sql.contains(r#"MIN("delivered") AT TIME ZONE $9 AS "oldest_delivered""#),
            "{sql}"
        );
        let (sql, _) = lock_holders(&names).build(PostgresQueryBuilder);
        assert!(
            sql.contains(r#"FROM "Odd ""schema"""."St" AS "s" INNER JOIN "pg_catalog"."pg_stat_activity" AS "a""#),
            "{sql}"
        );
        assert!(sql.contains(r#"CAST("s"."xmax" AS text)"#), "{sql}");
    }
}
