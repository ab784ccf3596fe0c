//! [`Connections`]: the connections inbox deliveries (and the after-commit sender's passes) run
//! on, kept between transactions.
//!
//! sqlx checks every connection that goes back to its pool with a round trip (a `Sync` and its
//! `ReadyForQuery`, in a task spawned for it), so a delivery that borrowed a connection for its
//! transaction paid one more round trip, and the server one more wake-up, after its commit.
//! The inbox keeps the connections of finished deliveries here instead and lends them to the
//! next ones: a connection leaves the pool while deliveries use it, and goes back to it (with
//! sqlx's check) when it has not been needed for [`IDLE`], after [`KEPT`] in all, when it broke,
//! when the pool has nothing left for anybody else, and when the bus stops.
//!
//! A connection whose server went away fails its next statement, as one the pool lends without
//! testing it does; that failure also hands every other kept connection back to the pool (the
//! server probably went for all of them), so one outage costs one failed delivery, not one per
//! kept connection.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrybus_core::storage::Background;
use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::{PgPool, Postgres};
use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;

use crate::error::StoreError;
use crate::fast::postgres_pool;

/// A kept connection unused this long goes back to the pool.
pub(crate) const IDLE: Duration = Duration::from_millis(500);

/// A connection goes back to the pool once it has been kept this long, so that the pool's
/// `max_lifetime` and its other checks still apply to it.
pub(crate) const KEPT: Duration = Duration::from_secs(10 * 60);

/// How often idle kept connections are handed back while the bus runs.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// A connection and when it left the pool.
#[derive(Debug)]
struct Kept {
    conn: PoolConnection<Postgres>,
    taken: Instant,
}

/// The connections inbox deliveries and the after-commit sender run on (see the
/// [module docs](self)). One per storage, shared by its endpoints and its sender.
#[derive(Debug)]
pub(crate) struct Connections {
    /// The pool under the storage's `DatabaseConnection`; `None` when it is not a PostgreSQL
    /// pool (the storage's `prepare` reports that).
    pool: Option<PgPool>,
    /// Kept connections, the most recently used last, with the time they were put back.
    idle: Mutex<Vec<(Kept, Instant)>>,
}

impl Connections {
    /// The connections of `db`'s pool.
    pub(crate) fn new(db: &DatabaseConnection) -> Self {
        Self::of_pool(postgres_pool(db).ok())
    }

    fn of_pool(pool: Option<PgPool>) -> Self {
        Self {
            pool,
            idle: Mutex::default(),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(Kept, Instant)>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection for one delivery: the most recently used kept one, else one from the pool.
    pub(crate) async fn lease(self: &Arc<Self>) -> Result<Lease, StoreError> {
        let kept = self.idle().pop().map(|(kept, _)| kept);
        let kept = match kept {
            Some(kept) => kept,
            None => {
                let pool = self.pool.as_ref().ok_or_else(|| {
                    StoreError::config(
                        "the inbox needs a PostgreSQL connection pool (sea-orm's sqlx-postgres)",
                    )
                })?;
                // Boxed: sqlx's acquire future is kilobytes, and every delivery's future would
                // carry it (and move it) although a kept connection usually makes it unneeded.
                let conn = Box::pin(pool.acquire())
                    .await
                    .map_err(|e| StoreError::database(acquire_err(e)))?;
                Kept {
                    conn,
                    taken: Instant::now(),
                }
            }
        };
        Ok(Lease {
            kept: Some(kept),
            home: self.clone(),
            state: LeaseState::Clean,
        })
    }

    /// Keeps `kept` for the next delivery, or gives it back to the pool (see the module docs).
    fn put_back(&self, kept: Kept) {
        let Some(pool) = &self.pool else { return };
        let pool_starved =
            pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections();
        if pool_starved || pool.is_closed() || kept.taken.elapsed() >= KEPT {
            return; // dropped: back to the pool
        }
        self.idle().push((kept, Instant::now()));
    }

    /// Gives every kept connection unused for `idle` back to the pool; returns how many.
    pub(crate) fn release_idle(&self, idle: Duration) -> usize {
        let released: Vec<_> = {
            let mut kept = self.idle();
            let now = Instant::now();
            let (old, fresh): (Vec<_>, Vec<_>) = kept
                .drain(..)
                .partition(|(_, since)| now.duration_since(*since) >= idle);
            *kept = fresh;
            old
        };
        released.len()
    }

    /// Gives every kept connection back to the pool.
    pub(crate) fn release_all(&self) -> usize {
        self.release_idle(Duration::ZERO)
    }

    /// How many connections are kept now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.idle().len()
    }

    /// Hands idle connections back every [`REAP_EVERY`] while the bus runs, and all of them
    /// when it stops.
    pub(crate) fn spawn_reaper(self: &Arc<Self>) -> Background {
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let connections = self.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(REAP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => { connections.release_idle(IDLE); }
                    _ = token.cancelled() => break,
                }
            }
            connections.release_all();
        });
        Background::new(cancel, vec![task])
    }
}

/// A pool that could not lend a connection, as sea-orm reports it (a timeout is transient).
fn acquire_err(error: sea_orm::sqlx::Error) -> sea_orm::DbErr {
    use sea_orm::{ConnAcquireErr, DbErr, RuntimeErr};
    match error {
        sea_orm::sqlx::Error::PoolTimedOut => DbErr::ConnectionAcquire(ConnAcquireErr::Timeout),
        sea_orm::sqlx::Error::PoolClosed => {
            DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed)
        }
        other => DbErr::Conn(RuntimeErr::SqlxError(std::sync::Arc::new(other))),
    }
}

/// What a lease's connection has been through, which decides where it goes afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// No transaction open: kept for the next delivery.
    Clean,
    /// A transaction is open: if the lease ends now (a cancelled delivery), the connection is
    /// closed, which rolls the transaction back on the server.
    InTransaction,
    /// The connection failed (I/O, protocol): closed; the other kept ones go back to the pool.
    Broken,
    /// The connection works but its session state is unknown (a failed `COMMIT`): closed, which
    /// rolls back whatever is still open on the server; the other kept ones stay.
    Retired,
}

/// One delivery's connection. When it ends it goes back to [`Connections`] (or is closed, see
/// [`LeaseState`]).
#[derive(Debug)]
pub(crate) struct Lease {
    kept: Option<Kept>,
    home: Arc<Connections>,
    state: LeaseState,
}

impl Lease {
    /// The connection.
    pub(crate) fn conn(&mut self) -> &mut PoolConnection<Postgres> {
        &mut self
            .kept
            .as_mut()
            .expect("a lease holds its connection")
            .conn
    }

    /// Records what happened to the connection.
    pub(crate) fn set_state(&mut self, state: LeaseState) {
        self.state = state;
    }

    /// What happened to the connection.
    pub(crate) fn state(&self) -> LeaseState {
        self.state
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(mut kept) = self.kept.take() else {
            return;
        };
        match self.state {
            LeaseState::Clean => self.home.put_back(kept),
            LeaseState::InTransaction | LeaseState::Retired => kept.conn.close_on_drop(),
            LeaseState::Broken => {
                kept.conn.close_on_drop();
                self.home.release_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::sqlx::postgres::PgPoolOptions;
    use sea_orm::sqlx::Connection;

    fn url() -> String {
        std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    async fn pool(max: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(max)
            .connect(&url())
            .await
            .expect("PostgreSQL at DATABASE_URL")
    }

    async fn backend_pid(lease: &mut Lease) -> i32 {
        sea_orm::sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut **lease.conn())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_finished_lease_is_lent_again_without_the_pool() {
        let connections = Arc::new(Connections::of_pool(Some(pool(4).await)));
        let mut first = connections.lease().await.unwrap();
        let pid = backend_pid(&mut first).await;
        drop(first);
        assert_eq!(connections.kept(), 1);
        assert_eq!(
            connections.pool.as_ref().unwrap().num_idle(),
            0,
            "not back in the pool"
        );
        let mut again = connections.lease().await.unwrap();
        assert_eq!(backend_pid(&mut again).await, pid, "the same connection");
        drop(again);
        assert_eq!(connections.release_idle(Duration::from_secs(60)), 0);
        assert_eq!(connections.release_all(), 1);
        assert_eq!(connections.kept(), 0);
    }

    #[tokio::test]
    async fn a_lease_dropped_in_a_transaction_is_closed_not_kept() {
        let connections = Arc::new(Connections::of_pool(Some(pool(4).await)));
        let mut lease = connections.lease().await.unwrap();
        let pid = backend_pid(&mut lease).await;
        sea_orm::sqlx::raw_sql("BEGIN")
            .execute(&mut **lease.conn())
            .await
            .unwrap();
        lease.set_state(LeaseState::InTransaction);
        drop(lease);
        assert_eq!(connections.kept(), 0);
        // The server ends that backend (and its transaction) once the close arrives.
        let mut probe = sea_orm::sqlx::PgConnection::connect(&url()).await.unwrap();
        let mut gone = false;
        for _ in 0..100 {
            let alive: bool = sea_orm::sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)",
            )
            .bind(pid)
            .fetch_one(&mut probe)
            .await
            .unwrap();
            if !alive {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone, "backend {pid} still there");
    }

    #[tokio::test]
    async fn a_broken_lease_sends_every_kept_connection_back() {
        let connections = Arc::new(Connections::of_pool(Some(pool(4).await)));
        let a = connections.lease().await.unwrap();
        let b = connections.lease().await.unwrap();
        let mut c = connections.lease().await.unwrap();
        drop(a);
        drop(b);
        assert_eq!(connections.kept(), 2);
        c.set_state(LeaseState::Broken);
        drop(c);
        assert_eq!(connections.kept(), 0);
    }

    #[tokio::test]
    async fn a_starved_pool_gets_its_connection_back() {
        let connections = Arc::new(Connections::of_pool(Some(pool(1).await)));
        let lease = connections.lease().await.unwrap();
        // The pool is at its size with nothing idle: somebody else may be waiting.
        drop(lease);
        assert_eq!(connections.kept(), 0);
        let pool = connections.pool.as_ref().unwrap();
        tokio::time::timeout(Duration::from_secs(5), pool.acquire())
            .await
            .expect("the pool lends it again")
            .unwrap();
    }
}
