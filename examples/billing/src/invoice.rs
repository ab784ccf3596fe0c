//! The invoice consumer: `OrderPlaced` → charge → invoice → `InvoiceCreated`.
//!
//! [`InvoiceConsumer`] is the right way, and it takes three layers of protection, each for a
//! different failure (see `docs/examples.md`):
//!
//! 1. **The inbox** (`.inbox()` on the endpoint, over the bus's `PostgresStorage`) runs the
//!    consumer once per (MessageId, consumer): a second copy of the same message waits on the
//!    first one's inbox row and is then acknowledged without running the consumer, so the payment
//!    gateway sees one request.
//! 2. **The idempotency key** (the order id) makes a second charge request, after a rollback, a
//!    no-op at the provider: side effects do not roll back, so they need their own key.
//! 3. **The unique business key** (`invoices.order_id UNIQUE`, the invoice written as an
//!    `ActiveModel` with sea-orm's `on_conflict(order_id).do_nothing()`) keeps one invoice per
//!    order even when the same order arrives under two MessageIds.
//!
//! [`CheckThenActConsumer`] is the broken way (scenario 2), kept to show why.

use example_contracts::{InvoiceCreated, OrderPlaced, PaymentCaptured};
use ferrybus::sea_orm::TransactionExt;
use ferrybus::{ConsumeContext, ConsumeError, Consumer};
use rust_decimal::Decimal;
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ColumnTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter, Set, TryInsertResult,
};
use uuid::Uuid;

use crate::gateway::PaymentGateway;
use crate::payments::{ensure_payment, payment_id};
use crate::schema::{invoices, InSchema};

/// Why an order cannot be invoiced. The endpoint's retry policy retries it like any error (as
/// MassTransit would without a retry filter), then the message goes to `billing-invoice_error`
/// and a `Fault<OrderPlaced>` is published.
#[derive(Debug, thiserror::Error)]
pub enum InvalidOrder {
    /// The total is zero or negative.
    #[error("order {order_id}: total must be positive, got {total}")]
    NonPositiveTotal {
        /// The order.
        order_id: Uuid,
        /// Its total.
        total: Decimal,
    },
    /// The currency is not an ISO 4217 code.
    #[error("order {order_id}: currency must be three capital letters, got {currency:?}")]
    BadCurrency {
        /// The order.
        order_id: Uuid,
        /// Its currency.
        currency: String,
    },
}

/// Checks the order before anything is charged.
///
/// ```
/// use example_billing::invoice::validate;
/// use example_contracts::OrderPlaced;
/// let order = |total: &str, currency: &str| OrderPlaced {
///     order_id: uuid::Uuid::nil(),
///     total: total.parse().unwrap(),
///     currency: currency.into(),
/// };
/// assert!(validate(&order("12.00", "TRY")).is_ok());
/// assert!(validate(&order("0", "TRY")).is_err());
/// assert!(validate(&order("5", "try")).is_err());
/// assert!(validate(&order("5", "EURO")).is_err());
/// ```
pub fn validate(order: &OrderPlaced) -> Result<(), InvalidOrder> {
    if order.total <= Decimal::ZERO {
        return Err(InvalidOrder::NonPositiveTotal {
            order_id: order.order_id,
            total: order.total,
        });
    }
    let currency = order.currency.as_bytes();
    if currency.len() != 3 || !currency.iter().all(u8::is_ascii_uppercase) {
        return Err(InvalidOrder::BadCurrency {
            order_id: order.order_id,
            currency: order.currency.clone(),
        });
    }
    Ok(())
}

/// How [`InvoiceConsumer`] writes the invoice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InvoiceWrite {
    /// `INSERT … ON CONFLICT (order_id) DO NOTHING` (sea-orm's `on_conflict` + `do_nothing`):
    /// a conflict means the order is invoiced already (needs
    /// [`InvoiceKey::UniqueOrderId`](crate::schema::InvoiceKey)). The default.
    #[default]
    Upsert,
    /// A plain `INSERT`: only the inbox protects it, so the same order under two MessageIds gets
    /// two invoices (scenario 4, shown by the tests on a table without the unique key).
    PlainInsert,
}

/// Invoices an order (see the [module docs](self)). Runs inside the inbox transaction:
/// [`TransactionExt::db`] is that transaction, and `ctx.publish` writes to the consumer outbox.
#[derive(Clone, Debug)]
pub struct InvoiceConsumer {
    gateway: PaymentGateway,
    schema: String,
    write: InvoiceWrite,
}

impl InvoiceConsumer {
    /// A consumer writing into `<schema>.invoices`, charging through `gateway`.
    pub fn new(gateway: PaymentGateway, schema: &str) -> Self {
        Self::with_write(gateway, schema, InvoiceWrite::Upsert)
    }

    /// Like [`InvoiceConsumer::new`], choosing how the invoice is written.
    pub fn with_write(gateway: PaymentGateway, schema: &str, write: InvoiceWrite) -> Self {
        Self {
            gateway,
            schema: schema.to_owned(),
            write,
        }
    }
}

/// The invoice of `order` (`created_at` from the column default, the transaction's `now()`).
fn new_invoice(invoice_id: Uuid, order: &OrderPlaced) -> invoices::ActiveModel {
    invoices::ActiveModel {
        id: Set(invoice_id),
        order_id: Set(order.order_id),
        amount: Set(order.total),
        currency: Set(order.currency.clone()),
        ..Default::default()
    }
}

impl Consumer<OrderPlaced> for InvoiceConsumer {
    async fn consume(&self, ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
        let order = ctx.message();
        validate(order)?;

        // 1. The side effect, with the order id as idempotency key: a retry after a rollback
        //    does not charge again.
        let charge = self
            .gateway
            .charge(
                &order.order_id.to_string(),
                order.order_id,
                order.total,
                &order.currency,
            )
            .await?;

        // 2. The invoice, in the inbox transaction, keyed by the order.
        let invoice_id = Uuid::now_v7();
        let invoice = invoices::Entity::insert(new_invoice(invoice_id, order));
        let inserted = match self.write {
            InvoiceWrite::Upsert => {
                let result = invoice
                    .on_conflict(
                        OnConflict::column(invoices::Column::OrderId)
                            .do_nothing()
                            .to_owned(),
                    )
                    .in_schema(&self.schema)
                    .try_insert()
                    .exec(ctx.db())
                    .await?;
                matches!(result, TryInsertResult::Inserted(_))
            }
            InvoiceWrite::PlainInsert => {
                invoice.in_schema(&self.schema).exec(ctx.db()).await?;
                true
            }
        };
        if !inserted {
            tracing::info!(
                order_id = %order.order_id,
                charge_attempts = charge.attempts,
                "order already invoiced (unique order_id): nothing to do"
            );
            return Ok(());
        }

        // 3. The payment the gateway captured, and the events: written to the consumer outbox,
        //    sent after the commit.
        let payment_id = payment_id(order.order_id);
        ensure_payment(ctx.db(), &self.schema, payment_id, order.order_id).await?;
        ctx.publish(&InvoiceCreated {
            invoice_id,
            order_id: order.order_id,
            amount: order.total,
            currency: order.currency.clone(),
        })
        .await?;
        ctx.publish(&PaymentCaptured {
            payment_id,
            order_id: order.order_id,
        })
        .await?;
        tracing::info!(
            order_id = %order.order_id,
            %invoice_id,
            amount = %order.total,
            currency = %order.currency,
            charge_attempts = charge.attempts,
            "invoice created"
        );
        Ok(())
    }

    fn name(&self) -> std::borrow::Cow<'static, str> {
        "InvoiceConsumer".into()
    }
}

/// **Do not do this.** The check-then-act consumer of scenario 2: it asks "is there an invoice
/// already?", charges with a fresh random idempotency key, and inserts the invoice, each step
/// committed on its own (no inbox, no unique key). Two copies of one message handled at the same
/// moment both see "no invoice": two charges, two invoices.
#[derive(Clone, Debug)]
pub struct CheckThenActConsumer {
    db: DatabaseConnection,
    gateway: PaymentGateway,
    schema: String,
}

impl CheckThenActConsumer {
    /// A consumer writing into `<schema>.invoices` through `db` directly.
    pub fn new(db: DatabaseConnection, gateway: PaymentGateway, schema: &str) -> Self {
        Self {
            db,
            gateway,
            schema: schema.to_owned(),
        }
    }
}

impl Consumer<OrderPlaced> for CheckThenActConsumer {
    async fn consume(&self, ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
        let order = ctx.message();
        validate(order)?;
        let existing = invoices::Entity::find()
            .filter(invoices::Column::OrderId.eq(order.order_id))
            .in_schema(&self.schema)
            .count(&self.db)
            .await?;
        if existing > 0 {
            tracing::info!(order_id = %order.order_id, "invoice exists, skipping (check-then-act)");
            return Ok(());
        }
        // The gap: another copy can pass the check while this one waits for the gateway.
        let key = Uuid::new_v4().to_string();
        self.gateway
            .charge(&key, order.order_id, order.total, &order.currency)
            .await?;
        invoices::Entity::insert(new_invoice(Uuid::now_v7(), order))
            .in_schema(&self.schema)
            .exec(&self.db)
            .await?;
        tracing::info!(order_id = %order.order_id, "invoice created (check-then-act)");
        Ok(())
    }

    fn name(&self) -> std::borrow::Cow<'static, str> {
        "CheckThenActConsumer".into()
    }
}
