//! [`InboxTransaction`]: the transaction one delivery runs in, as a sea-orm connection.
//!
//! The inbox runs the transaction itself rather than through sea-orm's `DatabaseTransaction`,
//! on a connection kept between deliveries ([`Connections`]): the connection does not go back
//! to the pool after every delivery (sqlx checks every connection it takes back with a round
//! trip), and the statements skip sea-orm's per-statement lock, tracing span and copy of the
//! bound values. The consumer sees a sea-orm connection ([`ConnectionTrait`], [`StreamTrait`]):
//! entities, active models, `Statement`s all work on it as on a `DatabaseTransaction`, through
//! the same sqlx driver and statement cache.

use std::pin::Pin;
use std::sync::Arc;

use futures::Future;
use sea_orm::sqlx::{self, Executor};
use sea_orm::{
    ConnectionTrait, DbBackend, DbErr, ExecResult, QueryResult, RuntimeErr, Statement, StreamTrait,
};
use sea_query_sqlx::SqlxValues;
use tokio::sync::Mutex;

use crate::error::{StoreError, StoreErrorKind};
use crate::fast::connections::{Connections, Lease, LeaseState};

/// Starts a READ COMMITTED transaction whatever the server's, database's, role's or session's
/// default is (a waiter on a row lock then sees the committed row instead of failing with a
/// serialization error); it costs what a plain `BEGIN` costs.
const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// The inbox transaction of one delivery: the consumer's writes, its inbox row and the messages
/// it publishes commit together or not at all. Use it as any sea-orm connection (it implements
/// [`ConnectionTrait`] and [`StreamTrait`]); reach it with
/// [`TransactionExt::db`](crate::TransactionExt::db).
///
/// Within it, PostgreSQL's rules for one transaction hold: after a statement fails, the
/// transaction is aborted and every later statement fails, unless you rolled back to a
/// savepoint (`execute_unprepared("SAVEPOINT s")`, `… "ROLLBACK TO SAVEPOINT s"`). A consumer
/// that returns `Ok` although its last statement failed is not acknowledged as if its writes
/// were saved: the delivery fails with [`StoreErrorKind::TransactionAborted`] and is retried.
///
/// ```no_run
/// use ferrybus_core::{ConsumeContext, ConsumeError};
/// use ferrybus_sea_orm::TransactionExt;
/// use sea_orm::{ConnectionTrait, DbBackend, Statement};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct OrderPlaced { order_id: uuid::Uuid }
/// # impl ferrybus_core::Message for OrderPlaced {
/// #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Ns:OrderPlaced").unwrap() }
/// # }
/// async fn consume(ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
///     let db = ctx.db(); // &InboxTransaction
///     db.execute_raw(Statement::from_sql_and_values(
///         DbBackend::Postgres,
///         "INSERT INTO invoices (order_id) VALUES ($1)",
///         [ctx.message().order_id.into()],
///     ))
///     .await?;
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct InboxTransaction {
    inner: Arc<Mutex<Open>>,
}

impl std::fmt::Debug for InboxTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InboxTransaction")
    }
}

/// The connection of an open transaction and whether its last statement failed.
#[derive(Debug)]
struct Open {
    lease: Lease,
    aborted: bool,
}

impl Open {
    fn conn(&mut self) -> &mut sqlx::PgConnection {
        self.lease.conn()
    }

    /// Notes what a statement's `result` says about the transaction and the connection.
    fn record<T>(&mut self, result: &Result<T, sqlx::Error>) {
        match result {
            Ok(_) => self.aborted = false,
            Err(sqlx::Error::Database(_)) => self.aborted = true,
            Err(error) if connection_failed(error) => self.lease.set_state(LeaseState::Broken),
            Err(_) => {}
        }
    }

    /// Runs `ROLLBACK`; the connection is closed when that fails.
    async fn rollback(&mut self) {
        let result = self
            .conn()
            .execute(sqlx::raw_sql(sqlx::AssertSqlSafe("ROLLBACK")))
            .await;
        match result {
            Ok(_) if self.lease.state() != LeaseState::Broken => {
                self.lease.set_state(LeaseState::Clean)
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(target: "ferrybus::inbox", %error, "rollback failed");
                self.lease.set_state(LeaseState::Broken);
            }
        }
    }
}

/// Whether `error` means the connection itself is gone or unusable.
fn connection_failed(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed
    )
}

/// A failed statement, as sea-orm reports it (so [`is_transient`](crate::is_transient) and
/// `DbErr::sql_err` read it alike).
fn exec_err(error: sqlx::Error) -> DbErr {
    DbErr::Exec(RuntimeErr::SqlxError(Arc::new(error)))
}

/// A failed query, as sea-orm reports it.
fn query_err(error: sqlx::Error) -> DbErr {
    DbErr::Query(RuntimeErr::SqlxError(Arc::new(error)))
}

/// The sqlx query of `stmt`, its values moved (sea-orm's driver clones them).
fn query(stmt: &mut Statement) -> sqlx::query::Query<'_, sqlx::Postgres, SqlxValues> {
    let values = stmt.values.take().unwrap_or(sea_orm::Values(Vec::new()));
    // The text is a statement sea-query built (or the application wrote as sea-orm `Statement`);
    // its values are bound.
    sqlx::query_with(sqlx::AssertSqlSafe(stmt.sql.as_str()), SqlxValues(values))
}

impl InboxTransaction {
    /// Opens a READ COMMITTED transaction on a connection from `connections`.
    pub(crate) async fn begin(connections: &Arc<Connections>) -> Result<Self, StoreError> {
        let mut open = Open {
            lease: connections.lease().await?,
            aborted: false,
        };
        let result = open
            .conn()
            .execute(sqlx::raw_sql(sqlx::AssertSqlSafe(BEGIN_READ_COMMITTED)))
            .await;
        if let Err(error) = result {
            if connection_failed(&error) {
                open.lease.set_state(LeaseState::Broken);
            }
            return Err(StoreError::database(exec_err(error)));
        }
        open.lease.set_state(LeaseState::InTransaction);
        Ok(Self {
            inner: Arc::new(Mutex::new(open)),
        })
    }

    /// The transaction, once nobody else holds it (the consumer gave it back).
    fn into_open(self) -> Result<Open, StoreError> {
        Arc::try_unwrap(self.inner)
            .map(Mutex::into_inner)
            .map_err(|_| {
                StoreError::new(
                    StoreErrorKind::TransactionHeld,
                    "the consumer kept the inbox transaction",
                )
            })
    }

    /// Commits. Fails without committing when the last statement failed (the transaction is
    /// aborted: PostgreSQL would answer the `COMMIT` with a rollback), or when someone still
    /// holds the transaction.
    pub(crate) async fn commit(self) -> Result<(), StoreError> {
        let mut open = self.into_open()?;
        if open.aborted {
            open.rollback().await;
            return Err(StoreError::new(
                StoreErrorKind::TransactionAborted,
                "a statement in the inbox transaction failed and the transaction was aborted, \
                 but the consumer returned Ok: nothing was committed",
            ));
        }
        let result = open
            .conn()
            .execute(sqlx::raw_sql(sqlx::AssertSqlSafe("COMMIT")))
            .await;
        match result {
            Ok(_) => {
                open.lease.set_state(LeaseState::Clean);
                Ok(())
            }
            Err(error) => {
                // Nothing is known about the transaction: a COMMIT the server refused (a
                // deferred constraint) rolled it back, but the error may also be an earlier
                // statement's, one the consumer gave up waiting for, that sqlx reads before
                // it sends the COMMIT, which then never left: the transaction would still be
                // open (and aborted) on a kept connection. Close the connection: the server
                // rolls back whatever is open, and the next delivery gets a clean one.
                let state = if connection_failed(&error) {
                    LeaseState::Broken
                } else {
                    LeaseState::Retired
                };
                open.lease.set_state(state);
                Err(StoreError::database(exec_err(error)))
            }
        }
    }

    /// Commits when `result` is `Ok` and passes it on; rolls back when it is an error and
    /// passes that on.
    pub(crate) async fn finish<T>(self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match result {
            Ok(value) => {
                self.commit().await?;
                Ok(value)
            }
            Err(error) => Err(self.abort(error).await),
        }
    }

    /// Rolls back and passes `error` on.
    pub(crate) async fn abort(self, error: StoreError) -> StoreError {
        self.rollback().await;
        error
    }

    /// Rolls back. When someone still holds the transaction, its connection is closed when the
    /// last holder lets go (the server then rolls back).
    pub(crate) async fn rollback(self) {
        if let Ok(mut open) = self.into_open() {
            open.rollback().await;
        }
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for InboxTransaction {
    fn get_database_backend(&self) -> DbBackend {
        DbBackend::Postgres
    }

    async fn execute_raw(&self, mut stmt: Statement) -> Result<ExecResult, DbErr> {
        let mut open = self.inner.lock().await;
        let result = query(&mut stmt).execute(open.conn()).await;
        open.record(&result);
        result.map(ExecResult::from).map_err(exec_err)
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        let mut open = self.inner.lock().await;
        // As sea-orm's own `execute_unprepared`: the application's text, run as it is.
        let result = open
            .conn()
            .execute(sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())))
            .await;
        open.record(&result);
        result.map(ExecResult::from).map_err(exec_err)
    }

    async fn query_one_raw(&self, mut stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        let mut open = self.inner.lock().await;
        let result = query(&mut stmt).fetch_optional(open.conn()).await;
        open.record(&result);
        result
            .map(|row| row.map(QueryResult::from))
            .map_err(query_err)
    }

    async fn query_all_raw(&self, mut stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        let mut open = self.inner.lock().await;
        let result = query(&mut stmt).fetch_all(open.conn()).await;
        open.record(&result);
        result
            .map(|rows| rows.into_iter().map(QueryResult::from).collect())
            .map_err(query_err)
    }
}

/// The rows of a streamed query.
type Rows = futures::stream::Iter<
    std::iter::Map<std::vec::IntoIter<QueryResult>, fn(QueryResult) -> Result<QueryResult, DbErr>>,
>;

/// Streams by reading all rows first (the transaction's connection is busy until a query's
/// rows are read anyway).
impl StreamTrait for InboxTransaction {
    type Stream<'a> = Rows;

    fn get_database_backend(&self) -> DbBackend {
        DbBackend::Postgres
    }

    fn stream_raw<'a>(
        &'a self,
        stmt: Statement,
    ) -> Pin<Box<dyn Future<Output = Result<Self::Stream<'a>, DbErr>> + 'a + Send>> {
        Box::pin(async move {
            let rows = self.query_all_raw(stmt).await?;
            let ok: fn(QueryResult) -> Result<QueryResult, DbErr> = Ok;
            Ok(futures::stream::iter(rows.into_iter().map(ok)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::{Database, FromQueryResult};

    fn url() -> String {
        std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    async fn connections() -> Arc<Connections> {
        let db = Database::connect(url())
            .await
            .expect("PostgreSQL at DATABASE_URL");
        Arc::new(Connections::new(&db))
    }

    #[derive(Debug, FromQueryResult)]
    struct Level {
        level: String,
    }

    #[tokio::test]
    async fn begins_read_committed_whatever_the_session_default() {
        let connections = connections().await;
        let txn = InboxTransaction::begin(&connections).await.unwrap();
        txn.execute_unprepared(
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        )
        .await
        .unwrap();
        txn.commit().await.unwrap();
        let txn = InboxTransaction::begin(&connections).await.unwrap();
        let level = txn
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT current_setting('transaction_isolation') AS level",
            ))
            .await
            .unwrap()
            .map(|row| Level::from_query_result(&row, "").unwrap());
        assert_eq!(level.unwrap().level, "read committed");
        txn.commit().await.unwrap();
    }

    #[tokio::test]
    async fn a_consumer_that_swallowed_a_failed_statement_does_not_commit() {
        let connections = connections().await;
        let table = format!("fb_txn_test_{}", uuid::Uuid::new_v4().simple());
        let admin = Database::connect(url()).await.unwrap();
        admin
            .execute_unprepared(&format!("CREATE TABLE {table} (x int PRIMARY KEY)"))
            .await
            .unwrap();
        let txn = InboxTransaction::begin(&connections).await.unwrap();
        txn.execute_unprepared(&format!("INSERT INTO {table} VALUES (1)"))
            .await
            .unwrap();
        let failed = txn
            .execute_unprepared(&format!("INSERT INTO {table} VALUES (1)"))
            .await;
        assert!(failed.is_err(), "duplicate key");
        let error = txn.commit().await.unwrap_err();
        assert_eq!(error.kind(), StoreErrorKind::TransactionAborted);
        let count = admin
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                format!("SELECT count(*)::int AS n FROM {table}"),
            ))
            .await
            .unwrap()
            .unwrap()
            .try_get::<i32>("", "n")
            .unwrap();
        assert_eq!(count, 0, "nothing committed");
        // A savepoint that rolled the failure back leaves a transaction that commits.
        let txn = InboxTransaction::begin(&connections).await.unwrap();
        txn.execute_unprepared(&format!("INSERT INTO {table} VALUES (2)"))
            .await
            .unwrap();
        txn.execute_unprepared("SAVEPOINT s").await.unwrap();
        assert!(txn
            .execute_unprepared(&format!("INSERT INTO {table} VALUES (2)"))
            .await
            .is_err());
        txn.execute_unprepared("ROLLBACK TO SAVEPOINT s")
            .await
            .unwrap();
        txn.commit().await.unwrap();
        admin
            .execute_unprepared(&format!("DROP TABLE {table}"))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_held_transaction_is_not_committed_and_its_connection_is_closed() {
        let connections = connections().await;
        let txn = InboxTransaction::begin(&connections).await.unwrap();
        let kept = txn.clone();
        let error = txn.commit().await.unwrap_err();
        assert_eq!(error.kind(), StoreErrorKind::TransactionHeld);
        drop(kept);
        assert_eq!(connections.kept(), 0, "closed, not kept");
    }

    #[tokio::test]
    async fn a_committed_transaction_leaves_its_connection_for_the_next() {
        let connections = connections().await;
        let txn = InboxTransaction::begin(&connections).await.unwrap();
        txn.commit().await.unwrap();
        assert_eq!(connections.kept(), 1);
        let txn = InboxTransaction::begin(&connections).await.unwrap();
        assert_eq!(connections.kept(), 0);
        txn.rollback().await;
        assert_eq!(connections.kept(), 1);
        connections.release_all();
    }
}
