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
//!   'Pending'` (sea-orm's `update_many` with both filters).
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
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set};
use uuid::Uuid;

use crate::schema::{payments, InSchema};

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

/// Creates the payment `Pending` unless it exists (`INSERT … ON CONFLICT (payment_id) DO
/// NOTHING`, sea-orm's `on_conflict` + `do_nothing`).
pub async fn ensure_payment(
    db: &impl ConnectionTrait,
    schema: &str,
    payment_id: Uuid,
    order_id: Uuid,
) -> Result<(), DbErr> {
    payments::Entity::insert(payments::ActiveModel {
        payment_id: Set(payment_id),
        order_id: Set(order_id),
        status: Set("Pending".to_owned()),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::column(payments::Column::PaymentId)
            .do_nothing()
            .to_owned(),
    )
    .in_schema(schema)
    .try_insert()
    .exec(db)
    .await?;
    Ok(())
}

/// A status change: to `to`, from one of `from`.
#[derive(Clone, Copy, Debug)]
struct Transition {
    to: &'static str,
    from: &'static [&'static str],
}

const CAPTURE: Transition = Transition {
    to: "Captured",
    from: &["Pending"],
};

const REFUND: Transition = Transition {
    to: "Refunded",
    from: &["Pending", "Captured"],
};

/// Consumes `PaymentCaptured` and `PaymentRefunded` (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct PaymentsConsumer {
    schema: String,
}

impl PaymentsConsumer {
    /// A consumer of `<schema>.payments`.
    pub fn new(schema: &str) -> Self {
        Self {
            schema: schema.to_owned(),
        }
    }

    async fn transition<M: Message>(
        &self,
        ctx: &ConsumeContext<M>,
        payment_id: Uuid,
        order_id: Uuid,
        transition: Transition,
        event: &str,
    ) -> Result<(), ConsumeError> {
        let db = ctx.db();
        ensure_payment(db, &self.schema, payment_id, order_id).await?;
        let moved = payments::Entity::update_many()
            .col_expr(payments::Column::Status, Expr::value(transition.to))
            .col_expr(payments::Column::UpdatedAt, Expr::current_timestamp())
            .filter(payments::Column::PaymentId.eq(payment_id))
            .filter(payments::Column::Status.is_in(transition.from.iter().copied()))
            .in_schema(&self.schema)
            .exec(db)
            .await?
            .rows_affected;
        let status = payments::Entity::find_by_id(payment_id)
            .in_schema(&self.schema)
            .one(db)
            .await?
            .ok_or_else(|| ConsumeError::handler("the payment row vanished"))?
            .status;
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
}

impl Consumer<PaymentCaptured> for PaymentsConsumer {
    async fn consume(&self, ctx: ConsumeContext<PaymentCaptured>) -> Result<(), ConsumeError> {
        let (payment, order) = (ctx.message().payment_id, ctx.message().order_id);
        self.transition(&ctx, payment, order, CAPTURE, "PaymentCaptured")
            .await
    }

    fn name(&self) -> std::borrow::Cow<'static, str> {
        "PaymentsConsumer".into()
    }
}

impl Consumer<PaymentRefunded> for PaymentsConsumer {
    async fn consume(&self, ctx: ConsumeContext<PaymentRefunded>) -> Result<(), ConsumeError> {
        let (payment, order) = (ctx.message().payment_id, ctx.message().order_id);
        self.transition(&ctx, payment, order, REFUND, "PaymentRefunded")
            .await
    }

    fn name(&self) -> std::borrow::Cow<'static, str> {
        "PaymentsConsumer".into()
    }
}
