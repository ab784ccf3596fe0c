//! [`PaymentGateway`]: a fake payment provider that behaves like a real one.
//!
//! It is an **external system**: it has its own connection pool, and what it does is committed
//! at once, outside the consumer's transaction, so a rollback in billing does not undo a charge
//! (scenario 5, "side effects do not roll back"). Like Stripe or Adyen it takes an idempotency
//! key: the first request with a key charges, later ones return the first result. Each key has
//! one row in `billing.charges`, and `attempts` counts every request, so the table shows
//! whether the inbox kept a duplicate away from the gateway (`attempts = 1`) or the idempotency
//! key kept a retry from charging twice (`attempts = 2`, still one charge).

use std::time::Duration;

use rust_decimal::Decimal;
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr, EntityTrait, Set};
use uuid::Uuid;

use crate::schema::{charges, InSchema};

/// The provider's answer to one charge request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    /// How many requests this idempotency key has seen, this one included.
    pub attempts: i32,
}

impl Charge {
    /// Whether this request charged the customer (only the first one with a key does).
    pub fn is_new(&self) -> bool {
        self.attempts == 1
    }
}

/// A fake payment gateway (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct PaymentGateway {
    db: DatabaseConnection,
    schema: String,
    delay: Duration,
}

impl PaymentGateway {
    /// Connects the provider's own pool to `database_url`; it keeps its rows in
    /// `<schema>.charges` and takes `delay` per call.
    pub async fn connect(database_url: &str, schema: &str, delay: Duration) -> Result<Self, DbErr> {
        let mut options = ConnectOptions::new(database_url);
        options
            .max_connections(8)
            .min_connections(0)
            .test_before_acquire(false)
            .sqlx_logging(false);
        let db = Database::connect(options).await?;
        Ok(Self::new(db, schema, delay))
    }

    /// A gateway over an existing pool (it must not be the consumer's transaction).
    pub fn new(db: DatabaseConnection, schema: &str, delay: Duration) -> Self {
        Self {
            db,
            schema: schema.to_owned(),
            delay,
        }
    }

    /// Charges `amount` for `order_id` under `idempotency_key`, after the network delay:
    /// `INSERT … ON CONFLICT (idempotency_key) DO UPDATE SET attempts = charges.attempts + 1
    /// RETURNING *`, with sea-orm's `on_conflict`.
    pub async fn charge(
        &self,
        idempotency_key: &str,
        order_id: Uuid,
        amount: Decimal,
        currency: &str,
    ) -> Result<Charge, DbErr> {
        if !self.delay.is_zero() {
            // A zero sleep would still wait for the timer's next millisecond tick.
            tokio::time::sleep(self.delay).await;
        }
        let charge = charges::Entity::insert(charges::ActiveModel {
            idempotency_key: Set(idempotency_key.to_owned()),
            order_id: Set(order_id),
            amount: Set(amount),
            currency: Set(currency.to_owned()),
            attempts: Set(1),
            ..Default::default()
        })
        .on_conflict(
            OnConflict::column(charges::Column::IdempotencyKey)
                .value(
                    charges::Column::Attempts,
                    Expr::col((charges::Entity, charges::Column::Attempts)).add(1),
                )
                .to_owned(),
        )
        .in_schema(&self.schema)
        .exec_with_returning(&self.db)
        .await?;
        Ok(Charge {
            attempts: charge.attempts,
        })
    }
}
