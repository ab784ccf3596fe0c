//! The business tables of billing as sea-orm entities, in their own schema (`billing` by
//! default), apart from the `messaging` schema of the inbox and outbox.
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
//!
//! The entities name schema `billing`; the schema is configuration (`BILLING_SCHEMA`), so every
//! statement goes through [`InSchema::in_schema`], which points sea-orm's statement at
//! `<schema>.<table>` (ferrybus's [`Retarget`]: a sea-query table reference with the entity's
//! name as alias, so filters and `ON CONFLICT` clauses stay as sea-orm wrote them).

use ferrybus::sea_orm::entity::Retarget;
use sea_orm::sea_query::{
    Alias, ColumnDef, Expr, IntoIden, PostgresQueryBuilder, QuotedBuilder, Table,
    TableCreateStatement, TableRef,
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, EntityName, EntityTrait};

/// The charges the fake payment provider recorded, one per idempotency key.
pub mod charges {
    use sea_orm::entity::prelude::*;

    /// One charge.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(schema_name = "billing", table_name = "charges")]
    pub struct Model {
        /// The caller's idempotency key (billing uses the order id).
        #[sea_orm(primary_key, auto_increment = false, column_type = "Text")]
        pub idempotency_key: String,
        /// The order charged.
        pub order_id: Uuid,
        /// The amount.
        #[sea_orm(column_type = "Decimal(None)")]
        pub amount: Decimal,
        /// ISO 4217 currency.
        #[sea_orm(column_type = "Text")]
        pub currency: String,
        /// How many requests this key has seen.
        pub attempts: i32,
        /// When it was first charged.
        pub charged_at: DateTimeUtc,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// Billing's invoices, one per order (with [`InvoiceKey::UniqueOrderId`]).
pub mod invoices {
    use sea_orm::entity::prelude::*;

    /// One invoice.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(schema_name = "billing", table_name = "invoices")]
    pub struct Model {
        /// The invoice id.
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: Uuid,
        /// The order (the natural key).
        pub order_id: Uuid,
        /// The amount.
        #[sea_orm(column_type = "Decimal(None)")]
        pub amount: Decimal,
        /// ISO 4217 currency.
        #[sea_orm(column_type = "Text")]
        pub currency: String,
        /// When it was written.
        pub created_at: DateTimeUtc,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// The payments' state machine (`Pending → Captured → Refunded`, see
/// [`payments`](crate::payments)).
pub mod payments {
    use sea_orm::entity::prelude::*;

    /// One payment.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(schema_name = "billing", table_name = "payments")]
    pub struct Model {
        /// Derived from the order id ([`payment_id`](crate::payments::payment_id)).
        #[sea_orm(primary_key, auto_increment = false)]
        pub payment_id: Uuid,
        /// The order.
        pub order_id: Uuid,
        /// `Pending`, `Captured` or `Refunded`.
        #[sea_orm(column_type = "Text")]
        pub status: String,
        /// When the status last changed.
        pub updated_at: DateTimeUtc,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// Runs a sea-orm statement of one of these entities on the tables of a configured schema.
pub trait InSchema: Retarget {
    /// The statement on `<schema>.<the entity's table>`.
    fn in_schema(self, schema: &str) -> Self {
        let table = <Self::Entity as Default>::default().table_name().to_owned();
        self.retarget(schema, &table)
    }
}

impl<R: Retarget> InSchema for R {}

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

/// `<schema>.<entity's table>`.
fn table<E: EntityTrait>(schema: &str, entity: E) -> TableRef {
    TableRef::from((Alias::new(schema), Alias::new(entity.table_name())))
}

fn tables(schema: &str, key: InvoiceKey) -> [TableCreateStatement; 3] {
    let now = || Expr::current_timestamp();
    let mut order_id = ColumnDef::new(invoices::Column::OrderId);
    order_id.uuid().not_null();
    if key == InvoiceKey::UniqueOrderId {
        order_id.unique_key();
    }
    [
        Table::create()
            .table(table(schema, charges::Entity))
            .if_not_exists()
            .col(
                ColumnDef::new(charges::Column::IdempotencyKey)
                    .text()
                    .primary_key(),
            )
            .col(ColumnDef::new(charges::Column::OrderId).uuid().not_null())
            .col(ColumnDef::new(charges::Column::Amount).decimal().not_null())
            .col(ColumnDef::new(charges::Column::Currency).text().not_null())
            .col(
                ColumnDef::new(charges::Column::Attempts)
                    .integer()
                    .not_null()
                    .default(1),
            )
            .col(
                ColumnDef::new(charges::Column::ChargedAt)
                    .timestamp_with_time_zone()
                    .not_null()
                    .default(now()),
            )
            .to_owned(),
        Table::create()
            .table(table(schema, invoices::Entity))
            .if_not_exists()
            .col(ColumnDef::new(invoices::Column::Id).uuid().primary_key())
            .col(&mut order_id)
            .col(
                ColumnDef::new(invoices::Column::Amount)
                    .decimal()
                    .not_null(),
            )
            .col(ColumnDef::new(invoices::Column::Currency).text().not_null())
            .col(
                ColumnDef::new(invoices::Column::CreatedAt)
                    .timestamp_with_time_zone()
                    .not_null()
                    .default(now()),
            )
            .to_owned(),
        Table::create()
            .table(table(schema, payments::Entity))
            .if_not_exists()
            .col(
                ColumnDef::new(payments::Column::PaymentId)
                    .uuid()
                    .primary_key(),
            )
            .col(ColumnDef::new(payments::Column::OrderId).uuid().not_null())
            .col(ColumnDef::new(payments::Column::Status).text().not_null())
            .col(
                ColumnDef::new(payments::Column::UpdatedAt)
                    .timestamp_with_time_zone()
                    .not_null()
                    .default(now()),
            )
            .to_owned(),
    ]
}

/// `CREATE SCHEMA IF NOT EXISTS "<schema>"` (sea-query has no statement for it; the name is
/// quoted by sea-query).
pub(crate) fn create_schema_sql(schema: &str) -> String {
    let mut sql = String::from("CREATE SCHEMA IF NOT EXISTS ");
    PostgresQueryBuilder.prepare_iden(&Alias::new(schema).into_iden(), &mut sql);
    sql
}

/// Creates `schema` and its three tables if they are missing.
pub async fn create(db: &DatabaseConnection, schema: &str, key: InvoiceKey) -> Result<(), DbErr> {
    // Several instances may start at once: serialize the DDL on an advisory lock.
    let txn = sea_orm::TransactionTrait::begin(db).await?;
    txn.execute_unprepared("SELECT pg_advisory_xact_lock(7242424242)")
        .await?;
    txn.execute_unprepared(&create_schema_sql(schema)).await?;
    for statement in tables(schema, key) {
        txn.execute(&statement).await?;
    }
    txn.commit().await
}

/// Drops `schema` and everything in it (tests clean up with this).
pub async fn drop(db: &DatabaseConnection, schema: &str) -> Result<(), DbErr> {
    let mut sql = String::from("DROP SCHEMA IF EXISTS ");
    PostgresQueryBuilder.prepare_iden(&Alias::new(schema).into_iden(), &mut sql);
    sql.push_str(" CASCADE");
    db.execute_unprepared(&sql).await.map(|_| ())
}
