//! [`TestEnv`]: one test's private world (schemas, queues, exchanges) and its clean-up.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use example_billing::Config;
use ferrybus::sea_orm::Tables;
use ferrybus_testing::{amqp_url, database_url, init_tracing, unique_suffix, Probe};
use futures::FutureExt;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use uuid::Uuid;

/// One test's private world: its schemas, queues and exchanges, and what cleans them up.
#[derive(Debug)]
pub struct TestEnv {
    /// The suffix all names share.
    pub id: String,
    /// An admin pool for assertions.
    pub db: DatabaseConnection,
    /// The broker probe.
    pub probe: Probe,
    schemas: std::sync::Mutex<Vec<String>>,
}

impl TestEnv {
    /// A new environment named after `test`.
    pub async fn new(test: &str) -> Self {
        init_tracing();
        let id = format!("{}_{}", test.replace('-', "_"), unique_suffix());
        let mut options = sea_orm::ConnectOptions::new(database_url());
        options
            .max_connections(4)
            .min_connections(0)
            .sqlx_logging(false);
        let db = Database::connect(options)
            .await
            .expect("PostgreSQL is reachable");
        let probe = Probe::connect(&amqp_url()).await;
        Self {
            id,
            db,
            probe,
            schemas: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A schema name unique to this test (dropped by [`TestEnv::cleanup`]).
    pub fn schema(&self, name: &str) -> String {
        let schema = format!("e2e_{}_{}", self.id, name);
        self.schemas.lock().unwrap().push(schema.clone());
        schema
    }

    /// A queue name unique to this test; the queue, its `_error`/`_skipped` companions and
    /// their exchanges are deleted by [`TestEnv::cleanup`].
    pub fn queue(&self, name: &str) -> String {
        let queue = format!("e2e-{}-{}", name, self.id.replace('_', "-"));
        self.probe.track_endpoint(&queue);
        queue
    }

    /// Billing's configuration for this test: unique billing and messaging schemas (so a
    /// notify channel of their own), unique queues; the endpoints do not bind the shared message-type exchanges
    /// (tests send straight to the queues) unless `bind` is set.
    pub fn billing_config(&self, bind: bool) -> Config {
        self.billing_config_tagged("", bind)
    }

    /// Like [`TestEnv::billing_config`], for a second (third …) billing of the same test: `tag`
    /// keeps the names apart.
    pub fn billing_config_tagged(&self, tag: &str, bind: bool) -> Config {
        let messaging = self.schema(&format!("messaging{tag}"));
        Config {
            database_url: database_url(),
            amqp_url: amqp_url(),
            concurrency: 4,
            payment_delay: Duration::from_millis(200),
            billing_schema: self.schema(&format!("billing{tag}")),
            tables: tables(&messaging),
            invoice_queue: self.queue(&format!("invoice{tag}")),
            payments_queue: self.queue(&format!("payments{tag}")),
            bind_message_types: bind,
            connection_name: format!("e2e-billing-{}", self.id),
            ..Config::default()
        }
    }

    /// How many inbox rows of `config`'s messaging schema have `message_id` consumed.
    pub async fn inbox_consumed(&self, config: &Config, message_id: Uuid) -> i64 {
        self.consumed_in(config.tables.schema_name(), message_id)
            .await
    }

    /// How many inbox rows of the messaging schema `schema` (snake_case tables) have
    /// `message_id` consumed.
    pub async fn consumed_in(&self, schema: &str, message_id: Uuid) -> i64 {
        self.count(
            &format!(
                "SELECT count(*) AS n FROM \"{schema}\".inbox_state WHERE message_id = $1 AND consumed IS NOT NULL"
            ),
            message_id,
        )
        .await
    }

    /// Runs `body`, then cleans up whether it passed or panicked (and re-raises the panic).
    pub async fn run<F: Future<Output = ()>>(self, body: impl FnOnce(Arc<Self>) -> F) {
        let env = Arc::new(self);
        let result = AssertUnwindSafe(body(env.clone())).catch_unwind().await;
        env.cleanup().await;
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }

    /// Drops the schemas and deletes the queues and exchanges.
    pub async fn cleanup(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
        for schema in schemas {
            let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
            if let Err(error) = self.db.execute_unprepared(&sql).await {
                eprintln!("cleanup: {sql}: {error}");
            }
        }
        self.probe.cleanup().await;
    }

    /// `SELECT count(*)` of `sql` (which must select a count named `n`) with one uuid parameter.
    pub async fn count(&self, sql: &str, id: Uuid) -> i64 {
        let row = self
            .db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                [id.into()],
            ))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .expect("a count row");
        row.try_get("", "n").expect("column n")
    }

    /// How many invoices `schema` has for `order_id`.
    pub async fn invoices(&self, schema: &str, order_id: Uuid) -> i64 {
        self.count(
            &format!("SELECT count(*) AS n FROM \"{schema}\".invoices WHERE order_id = $1"),
            order_id,
        )
        .await
    }

    /// The charge rows of `order_id`: their `attempts`, one entry per idempotency key.
    pub async fn charges(&self, schema: &str, order_id: Uuid) -> Vec<i32> {
        let rows = self
            .db
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!("SELECT attempts FROM \"{schema}\".charges WHERE order_id = $1 ORDER BY attempts"),
                [order_id.into()],
            ))
            .await
            .expect("charges");
        rows.iter()
            .map(|r| r.try_get("", "attempts").expect("attempts"))
            .collect()
    }

    /// The status of a payment, if it has a row.
    pub async fn payment_status(&self, schema: &str, payment_id: Uuid) -> Option<String> {
        self.db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!("SELECT status FROM \"{schema}\".payments WHERE payment_id = $1"),
                [payment_id.into()],
            ))
            .await
            .expect("payments")
            .map(|r| r.try_get("", "status").expect("status"))
    }
}

/// The inbox/outbox tables in `schema` (snake_case, the migrator's default names). The bus
/// outbox notifies on a channel named after the schema, so each test has its own.
pub fn tables(schema: &str) -> Tables {
    Tables::new().schema(schema)
}
