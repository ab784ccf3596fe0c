//! The fast path: where the storage steps under sea-orm's and sqlx's public API to save round
//! trips and client time per delivery. Everything else in the crate uses sea-orm, sea-query and
//! sqlx as their documentation shows.
//!
//! | part | what it saves |
//! |---|---|
//! | [`pool`]: [`postgres_pool`] | reaches the sqlx pool under a `DatabaseConnection` (for `LISTEN`, and for the connections below) |
//! | [`connections`]: [`Connections`] | sqlx's round trip when a connection goes back to its pool: inbox deliveries keep theirs |
//! | [`transaction`]: [`InboxTransaction`] | sea-orm's per-statement lock, span and copy of the values; `BEGIN` names its isolation level |
//! | [`templates`]: [`Template`](templates::Template) | rendering the hottest statements with sea-query for every delivery |
//! | [`isolation`]: [`Begin`] | the `SET TRANSACTION ISOLATION LEVEL` round trip of `begin_with_config` (delivery passes, sweeper) |
//! | [`guess`]: [`PublishGuess`] | a second write of the inbox row (no library detail: PostgreSQL's visibility rules) |
//!
//! # Upgrade checklist
//!
//! What this module relies on, to check on every upgrade of sea-orm (2.0), sqlx (0.9), sea-query
//! (1.0) and sea-query-sqlx (0.9, the version sea-orm binds with). The tests named check them
//! against a real PostgreSQL where they can.
//!
//! sea-orm:
//!
//! - [ ] `DatabaseConnection::inner` is public and a sqlx PostgreSQL pool is the variant
//!   `DatabaseConnectionType::SqlxPostgresPoolConnection` (matched with `if let`: the other
//!   variants depend on features); `get_postgres_connection_pool()` returns its `PgPool`
//!   ([`pool`]; `a_connection_that_is_not_postgres_is_a_config_error`).
//! - [ ] `sea_orm::sqlx` re-exports the sqlx sea-orm itself uses, and the crate's own
//!   `sea-query-sqlx` dependency is the one sea-orm binds values with (same version), so
//!   `SqlxValues` binds a `Statement`'s values exactly as sea-orm's driver does
//!   ([`transaction`]).
//! - [ ] `ConnectionTrait`'s required methods (`get_database_backend`, `execute_raw`,
//!   `execute_unprepared`, `query_one_raw`, `query_all_raw`, through `async_trait`) and
//!   `StreamTrait`'s (`Stream<'a>`, `get_database_backend`, `stream_raw`): entities, active
//!   models and `Statement`s run on an [`InboxTransaction`] through them alone
//!   (`tests/inbox.rs`, consumers writing through `ctx.db()`).
//! - [ ] `Statement` has public `sql` and `values: Option<Values>` fields (moved out, not copied)
//!   and `Statement::from_sql_and_values` takes a text and values as they are ([`transaction`],
//!   [`templates`]).
//! - [ ] `ExecResult: From<PgQueryResult>` and `QueryResult: From<PgRow>` exist (results read by
//!   `FromQueryResult` as sea-orm's own).
//! - [ ] sea-orm reports a failed statement as `DbErr::Exec`/`DbErr::Query(RuntimeErr::SqlxError
//!   (Arc<sqlx::Error>))` and a pool that cannot lend as `DbErr::ConnectionAcquire(ConnAcquireErr
//!   ::Timeout | ConnectionClosed)`: [`InboxTransaction`] and [`Connections`] report theirs alike,
//!   so `DbErr::sql_err()` and [`is_transient`](crate::is_transient) read both the same.
//! - [ ] `TransactionTrait::begin` sends a plain `BEGIN`, and `begin_with_config` sends `SET
//!   TRANSACTION ISOLATION LEVEL …` as a statement of its own after it ([`isolation`]).
//!
//! sqlx:
//!
//! - [ ] A `PoolConnection` dropped goes back to its pool with a check (a round trip, in a task of
//!   its own) — the reason [`Connections`] keeps them; `close_on_drop()` closes it instead, which
//!   rolls an open transaction back on the server.
//! - [ ] `Pool::acquire`, `num_idle`, `size`, `options().get_max_connections()`, `is_closed`
//!   ([`Connections`]: a starved pool gets its connection back;
//!   `a_starved_pool_gets_its_connection_back`).
//! - [ ] `sqlx::query_with(AssertSqlSafe(text), values)` runs a prepared (cached) statement and
//!   `sqlx::raw_sql(AssertSqlSafe(text))` a simple-protocol one (`BEGIN`, `COMMIT`, `ROLLBACK`,
//!   `execute_unprepared`); `AssertSqlSafe` is sqlx 0.9's marker.
//! - [ ] Which `sqlx::Error` variants mean the connection is gone (`Io`, `Tls`, `Protocol`,
//!   `WorkerCrashed`: the lease is closed) and which one aborted the transaction (`Database`).
//!
//! sea-query:
//!
//! - [ ] A statement of one shape renders to the same text whatever its values (every value is
//!   bound, none inlined; arrays bound as one value), and binds its values left to right in the
//!   order they appear in the text: each templated statement in `sql` lists its values in that
//!   order (`templated_statements_equal_a_fresh_build`, `statements_bind_every_value`).

pub(crate) mod connections;
pub(crate) mod guess;
pub(crate) mod isolation;
pub(crate) mod pool;
pub(crate) mod templates;
pub(crate) mod transaction;

pub(crate) use connections::Connections;
pub(crate) use guess::PublishGuess;
pub(crate) use isolation::Begin;
pub(crate) use pool::postgres_pool;
pub use transaction::InboxTransaction;
