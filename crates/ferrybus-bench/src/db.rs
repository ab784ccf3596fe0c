//! PostgreSQL plumbing: a schema per scenario run holding MassTransit's EF Core tables (the
//! canonical PascalCase shape) and a business table, and pools whose `search_path` points there.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool};

use ferrybus_sea_orm::{migrate, Tables};

use crate::BoxError;

/// The business table every consumer writes to. MassTransit's tables come from the storage
/// crate's migration template, in .NET's default PascalCase shape.
const BUSINESS_TABLE: &str = r#"
CREATE TABLE bench_orders (
  order_id uuid PRIMARY KEY, message_id uuid NOT NULL, customer text NOT NULL,
  amount numeric(12, 2) NOT NULL, created timestamp with time zone NOT NULL DEFAULT now());
"#;

/// The business insert every inbox consumer does, ferrybus or hand-rolled.
pub(crate) const INSERT_ORDER: &str =
    "INSERT INTO bench_orders (order_id, message_id, customer, amount) \
     VALUES ($1, $2, $3, $4::numeric)";

/// A connection pool of `size` whose search path is `schema` (or the default when `None`).
pub(crate) async fn pool(url: &str, schema: Option<&str>, size: u32) -> Result<PgPool, BoxError> {
    let mut options = PgConnectOptions::from_str(url)?;
    if let Some(schema) = schema {
        options = options.options([("search_path", schema)]);
    }
    Ok(PgPoolOptions::new()
        .max_connections(size)
        .min_connections(size.min(4))
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await?)
}

/// `url` without TLS (`sslmode=disable` added) unless it names an `sslmode`: on loopback sqlx
/// would otherwise negotiate TLS (`prefer`), which billing's twin (tokio-postgres, `NoTls`)
/// does not, and which costs sqlx 0.9.0 two delayed ACKs per new connection (no
/// `TCP_NODELAY`, transact-rs/sqlx#4335): ~0.4 s of a relay instance's start-up.
pub(crate) fn plain_url(url: &str) -> String {
    if url.contains("sslmode=") {
        return url.to_owned();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode=disable")
}

/// Creates schema `schema` with the tables.
pub(crate) async fn create_schema(admin: &PgPool, schema: &str) -> Result<(), BoxError> {
    let mut tx = admin.begin().await?;
    tx.execute(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA \"{schema}\"; SET LOCAL search_path = \"{schema}\";"
    )))
    .await?;
    let tables = Tables::dotnet_default().schema(schema);
    tx.execute(sqlx::AssertSqlSafe(migrate::sql(&tables, true)))
        .await?;
    tx.execute(BUSINESS_TABLE).await?;
    tx.commit().await?;
    Ok(())
}

/// Drops schema `schema` and everything in it.
pub(crate) async fn drop_schema(admin: &PgPool, schema: &str) -> Result<(), BoxError> {
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .await?;
    Ok(())
}

/// `SELECT count(*)` of `table` in `schema`.
pub(crate) async fn count(admin: &PgPool, schema: &str, table: &str) -> Result<i64, BoxError> {
    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{schema}\".{table}"
    )))
    .fetch_one(admin)
    .await?;
    Ok(n)
}
