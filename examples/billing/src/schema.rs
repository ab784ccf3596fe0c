//! The business tables of billing, in their own schema (`billing` by default), apart from the
//! `messaging` schema of the inbox and outbox.
//!
//! ```sql
//! CREATE TABLE billing.charges  (idempotency_key text PRIMARY KEY, order_id uuid, amount numeric,
//!                                currency text, attempts int, charged_at timestamptz);
//! CREATE TABLE billing.invoices (id uuid PRIMARY KEY, order_id uuid UNIQUE, amount numeric,
//!                                currency text, created_at timestamptz);
//! CREATE TABLE billing.payments (payment_id uuid PRIMARY KEY, order_id uuid, status text,
//!                                updated_at timestamptz);
//! ```
//!
//! `charges` belongs to the fake payment provider (an external system that happens to keep its
//! state in the same database); `invoices` and `payments` belong to billing.

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};

/// Whether `invoices.order_id` is unique: the natural key that makes "one invoice per order"
/// hold whatever the messages do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InvoiceKey {
    /// `order_id uuid NOT NULL UNIQUE` (the default, and the right choice).
    #[default]
    UniqueOrderId,
    /// No unique constraint on `order_id`, to show what goes wrong without one.
    None,
}

/// Quotes an identifier for PostgreSQL.
pub fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// Creates `schema` and its three tables if they are missing.
pub async fn create(db: &DatabaseConnection, schema: &str, key: InvoiceKey) -> Result<(), DbErr> {
    let s = quote(schema);
    let unique = match key {
        InvoiceKey::UniqueOrderId => " UNIQUE",
        InvoiceKey::None => "",
    };
    let sql = format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
         CREATE TABLE IF NOT EXISTS {s}.charges (
             idempotency_key text PRIMARY KEY,
             order_id uuid NOT NULL,
             amount numeric NOT NULL,
             currency text NOT NULL,
             attempts int NOT NULL DEFAULT 1,
             charged_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE IF NOT EXISTS {s}.invoices (
             id uuid PRIMARY KEY,
             order_id uuid NOT NULL{unique},
             amount numeric NOT NULL,
             currency text NOT NULL,
             created_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE IF NOT EXISTS {s}.payments (
             payment_id uuid PRIMARY KEY,
             order_id uuid NOT NULL,
             status text NOT NULL,
             updated_at timestamptz NOT NULL DEFAULT now());"
    );
    // Several instances may start at once: serialize the DDL on an advisory lock.
    let txn = sea_orm::TransactionTrait::begin(db).await?;
    txn.execute_unprepared("SELECT pg_advisory_xact_lock(7242424242)")
        .await?;
    txn.execute_unprepared(&sql).await?;
    txn.commit().await
}

/// Drops `schema` and everything in it (tests clean up with this).
pub async fn drop(db: &DatabaseConnection, schema: &str) -> Result<(), DbErr> {
    db.execute_unprepared(&format!("DROP SCHEMA IF EXISTS {} CASCADE", quote(schema)))
        .await
        .map(|_| ())
}
