//! The payment state machine: `Pending → Captured → Refunded`, driven by `PaymentCaptured` and
//! `PaymentRefunded`, safe against repeats and out-of-order delivery.
//!
//! The rules:
//!
//! * A payment row is created `Pending` by whoever sees the payment first: the invoice consumer
//!   when the gateway charges (payment id derived from the order id, [`payment_id`]), or the
//!   first payment message (`INSERT … ON CONFLICT (payment_id) DO NOTHING`), so a message that
//!   overtakes the invoice is not lost.
//! * `PaymentCaptured`: `UPDATE … SET status = 'Captured' WHERE payment_id = $1 AND status =
//!   'Pending'`.
//! * `PaymentRefunded`: `UPDATE … SET status = 'Refunded' WHERE payment_id = $1 AND status IN
//!   ('Pending', 'Captured')`. A refund is final; one seen before its capture means the capture
//!   message is late.
//! * 0 rows updated means "already done, or a late message": nothing changes, the message is
//!   acknowledged. So three copies of `PaymentCaptured` capture once, and a late
//!   `PaymentCaptured` after `PaymentRefunded` does not move the payment back.
//!
//! The guards hold with or without the inbox; the inbox (on the endpoint) only saves the work.

use example_contracts::{PaymentCaptured, PaymentRefunded};
use ferrybus::sea_orm::TransactionExt;
use ferrybus::{ConsumeContext, ConsumeError, Consumer, Message};
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, Statement};
use uuid::Uuid;

use crate::schema::quote;

/// The namespace of payment ids derived from order ids (UUIDv5).
pub const PAYMENT_NAMESPACE: Uuid = Uuid::from_u128(0x6d1f_1b0e_5c8e_4f0a_9a47_3b8e_6c1d_2f90);

/// The payment id of an order: the same on every instance and every retry.
///
/// ```
/// let order = uuid::Uuid::now_v7();
/// assert_eq!(example_billing::payments::payment_id(order), example_billing::payments::payment_id(order));
/// ```
pub fn payment_id(order_id: Uuid) -> Uuid {
    Uuid::new_v5(&PAYMENT_NAMESPACE, order_id.as_bytes())
}

/// Consumes `PaymentCaptured` and `PaymentRefunded` (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct PaymentsConsumer {
    ensure_sql: String,
    capture_sql: String,
    refund_sql: String,
    status_sql: String,
}

impl PaymentsConsumer {
    /// A consumer of `<schema>.payments`.
    pub fn new(schema: &str) -> Self {
        let s = quote(schema);
        Self {
            ensure_sql: format!(
                "INSERT INTO {s}.payments (payment_id, order_id, status, updated_at) \
                 VALUES ($1, $2, 'Pending', now()) ON CONFLICT (payment_id) DO NOTHING"
            ),
            capture_sql: format!(
                "UPDATE {s}.payments SET status = 'Captured', updated_at = now() \
                 WHERE payment_id = $1 AND status = 'Pending'"
            ),
            refund_sql: format!(
                "UPDATE {s}.payments SET status = 'Refunded', updated_at = now() \
                 WHERE payment_id = $1 AND status IN ('Pending', 'Captured')"
            ),
            status_sql: format!("SELECT status FROM {s}.payments WHERE payment_id = $1"),
        }
    }

    async fn transition<M: Message>(
        &self,
        ctx: &ConsumeContext<M>,
        payment_id: Uuid,
        order_id: Uuid,
        update_sql: &str,
        event: &str,
    ) -> Result<(), ConsumeError> {
        let db = ctx.db();
        db.execute(stmt(&self.ensure_sql, [payment_id.into(), order_id.into()]))
            .await?;
        let moved = db
            .execute(stmt(update_sql, [payment_id.into()]))
            .await?
            .rows_affected();
        let status = self.status(db, payment_id).await?;
        if moved == 1 {
            tracing::info!(%payment_id, %order_id, %status, "{event}: payment is now {status}");
        } else {
            tracing::info!(
                %payment_id, %order_id, %status,
                "{event}: already done or out of order, payment stays {status}"
            );
        }
        Ok(())
    }

    async fn status(
        &self,
        db: &DatabaseTransaction,
        payment_id: Uuid,
    ) -> Result<String, ConsumeError> {
        let row = db
            .query_one(stmt(&self.status_sql, [payment_id.into()]))
            .await?
            .ok_or_else(|| ConsumeError::handler("the payment row vanished"))?;
        Ok(row.try_get("", "status")?)
    }
}

fn stmt<const N: usize>(sql: &str, values: [sea_orm::Value; N]) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

impl Consumer<PaymentCaptured> for PaymentsConsumer {
    async fn consume(&self, ctx: ConsumeContext<PaymentCaptured>) -> Result<(), ConsumeError> {
        let (payment, order) = (ctx.message().payment_id, ctx.message().order_id);
        self.transition(&ctx, payment, order, &self.capture_sql, "PaymentCaptured")
            .await
    }

    fn name(&self) -> std::borrow::Cow<'static, str> {
        "PaymentsConsumer".into()
    }
}

impl Consumer<PaymentRefunded> for PaymentsConsumer {
    async fn consume(&self, ctx: ConsumeContext<PaymentRefunded>) -> Result<(), ConsumeError> {
        let (payment, order) = (ctx.message().payment_id, ctx.message().order_id);
        self.transition(&ctx, payment, order, &self.refund_sql, "PaymentRefunded")
            .await
    }

    fn name(&self) -> std::borrow::Cow<'static, str> {
        "PaymentsConsumer".into()
    }
}
