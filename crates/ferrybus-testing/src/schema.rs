//! [`TestSchema`]: a fresh PostgreSQL schema holding MassTransit's tables in one of the
//! [`Shape`]s .NET services create, dropped when the test is done.

use ferrybus_core::storage::Storage;
use ferrybus_sea_orm::{Migrator, NamingStyle, PostgresStorage, Tables};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
    TransactionTrait, Value,
};

use crate::database_url;

/// The table shapes every storage test runs on: the migrator's two namings, and the two schemas
/// .NET services created (with their foreign keys, and in a legacy variant without them, with
/// `integer` ids and `timestamp without time zone`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The migrator's default: snake_case.
    Snake,
    /// The migrator with .NET's default naming (PascalCase).
    Pascal,
    /// `fixtures/schemas/bookworm-finance-snakecase.sql` as .NET created it (with FKs).
    BookwormFixture,
    /// `fixtures/schemas/canonical-pascalcase.sql` (with FKs).
    CanonicalFixture,
    /// The BookWorm fixture without FKs, `integer` ids and `timestamp without time zone`.
    BookwormLegacy,
    /// The canonical fixture without FKs, `integer` ids and `timestamp without time zone`.
    CanonicalLegacy,
}

/// Every [`Shape`].
pub const SHAPES: [Shape; 6] = [
    Shape::Snake,
    Shape::Pascal,
    Shape::BookwormFixture,
    Shape::CanonicalFixture,
    Shape::BookwormLegacy,
    Shape::CanonicalLegacy,
];

impl Shape {
    /// The column naming of this shape.
    pub fn naming(self) -> NamingStyle {
        match self {
            Shape::Snake | Shape::BookwormFixture | Shape::BookwormLegacy => NamingStyle::SnakeCase,
            Shape::Pascal | Shape::CanonicalFixture | Shape::CanonicalLegacy => {
                NamingStyle::PascalCase
            }
        }
    }

    /// The tables of this shape in `schema`.
    pub fn tables(self, schema: &str) -> Tables {
        match self.naming() {
            NamingStyle::SnakeCase => Tables::new(),
            NamingStyle::PascalCase => Tables::dotnet_default(),
        }
        .schema(schema)
    }

    fn fixture(self) -> Option<&'static str> {
        match self {
            Shape::BookwormFixture | Shape::BookwormLegacy => Some(include_str!(
                "../../../fixtures/schemas/bookworm-finance-snakecase.sql"
            )),
            Shape::CanonicalFixture | Shape::CanonicalLegacy => Some(include_str!(
                "../../../fixtures/schemas/canonical-pascalcase.sql"
            )),
            Shape::Snake | Shape::Pascal => None,
        }
    }

    fn legacy(self) -> bool {
        matches!(self, Shape::BookwormLegacy | Shape::CanonicalLegacy)
    }
}

/// Runs an async test function `fn(Shape)` once per [`Shape`], as one `#[tokio::test]` each
/// (`<test>::snake_case`, `<test>::pascal_case`, …).
///
/// ```
/// use ferrybus_testing::Shape;
///
/// async fn consumes_once(shape: Shape) {
///     let _ = shape; // set up a schema of this shape, run the consumer, assert the rows
/// }
/// ferrybus_testing::on_every_shape!(consumes_once);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! on_every_shape {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            use $crate::Shape;
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn snake_case() { super::$test(Shape::Snake).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn pascal_case() { super::$test(Shape::Pascal).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn bookworm_fixture() { super::$test(Shape::BookwormFixture).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn canonical_fixture() { super::$test(Shape::CanonicalFixture).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn bookworm_legacy() { super::$test(Shape::BookwormLegacy).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn canonical_legacy() { super::$test(Shape::CanonicalLegacy).await }
        }
    )*};
}

/// A fresh schema `fb_test_<uuid>` with MassTransit's tables in one [`Shape`] (created by the
/// migrator, or loaded from the .NET fixture), dropped (CASCADE) when this guard drops, even
/// after a failed assertion.
pub struct TestSchema {
    /// A pool on the test database (12 connections).
    pub db: DatabaseConnection,
    /// The schema name.
    pub schema: String,
    /// The shape.
    pub shape: Shape,
}

impl std::fmt::Debug for TestSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestSchema")
            .field("schema", &self.schema)
            .field("shape", &self.shape)
            .finish_non_exhaustive()
    }
}

impl TestSchema {
    /// Creates the schema and its tables.
    pub async fn new(shape: Shape) -> TestSchema {
        let mut options = ConnectOptions::new(database_url());
        options.max_connections(12).sqlx_logging(false);
        let db = Database::connect(options)
            .await
            .expect("PostgreSQL at DATABASE_URL");
        let schema = format!("fb_test_{}", uuid::Uuid::new_v4().simple());
        let guard = TestSchema {
            db,
            schema: schema.clone(),
            shape,
        };
        match shape.fixture() {
            None => Migrator::new(shape.tables(&schema))
                .run(&guard.db)
                .await
                .expect("migrations run"),
            Some(sql) => guard.load_fixture(sql, shape.legacy()).await,
        }
        guard
    }

    /// The tables of this schema.
    pub fn tables(&self) -> Tables {
        self.shape.tables(&self.schema)
    }

    /// A [`PostgresStorage`] on these tables, prepared (the time column type read), as a bus
    /// would start it.
    pub async fn storage(&self) -> PostgresStorage {
        let storage = PostgresStorage::new(self.db.clone()).tables(self.tables());
        storage.prepare().await.expect("the storage prepares");
        storage
    }

    async fn load_fixture(&self, sql: &str, legacy: bool) {
        let mut sql = sql.to_owned();
        if legacy {
            sql = sql
                .replace(
                    "bigint GENERATED BY DEFAULT AS IDENTITY",
                    "integer GENERATED BY DEFAULT AS IDENTITY",
                )
                .replace("timestamp with time zone", "timestamp without time zone");
        }
        let txn = self.db.begin().await.unwrap();
        txn.execute_unprepared(&format!(
            "CREATE SCHEMA \"{}\"; SET LOCAL search_path TO \"{}\"",
            self.schema, self.schema
        ))
        .await
        .unwrap();
        txn.execute_unprepared(&sql).await.unwrap();
        if legacy {
            txn.execute_unprepared(&format!(
                "DO $$ DECLARE r record; BEGIN FOR r IN SELECT conrelid::regclass AS t, conname FROM pg_constraint \
                 WHERE contype = 'f' AND connamespace = '\"{}\"'::regnamespace LOOP \
                 EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.t, r.conname); END LOOP; END $$",
                self.schema
            ))
            .await
            .unwrap();
        }
        txn.commit().await.unwrap();
    }

    /// Runs `sql` (any number of statements, no parameters).
    pub async fn exec(&self, sql: &str) {
        self.db
            .execute_unprepared(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A column name in this shape's style, quoted: `c("MessageId")` is `"message_id"` or
    /// `"MessageId"`.
    pub fn c(&self, pascal: &str) -> String {
        match self.shape.naming() {
            NamingStyle::PascalCase => format!("\"{pascal}\""),
            NamingStyle::SnakeCase => {
                let mut out = String::new();
                for (i, ch) in pascal.chars().enumerate() {
                    if ch.is_uppercase() && i > 0 {
                        out.push('_');
                    }
                    out.extend(ch.to_lowercase());
                }
                format!("\"{out}\"")
            }
        }
    }

    /// A schema-qualified, quoted table: `inbox`, `state` and `message` name the three
    /// MassTransit tables, anything else is taken as is.
    pub fn t(&self, which: &str) -> String {
        let tables = self.tables();
        let name = match which {
            "inbox" => tables.inbox_state(),
            "state" => tables.outbox_state(),
            "message" => tables.outbox_message(),
            other => other,
        };
        format!("\"{}\".\"{}\"", self.schema, name)
    }

    /// `SELECT (<sql>)::bigint` with `values` bound.
    pub async fn count(&self, sql: &str, values: Vec<Value>) -> i64 {
        let row = self
            .db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!("SELECT ({sql})::bigint AS n"),
                values,
            ))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .expect("a count row");
        row.try_get("", "n").unwrap()
    }

    /// The number of rows of [`t`](Self::t)`(which)`.
    pub async fn rows(&self, which: &str) -> i64 {
        self.count(&format!("SELECT count(*) FROM {}", self.t(which)), vec![])
            .await
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(db) = Database::connect(database_url()).await {
                    let _ = db
                        .execute_unprepared(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .await;
                    let _ = db.close().await;
                }
            });
        })
        .join();
    }
}
