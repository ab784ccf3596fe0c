//! How a consumer reaches the inbox transaction: [`TransactionExt`].

use ferrybus_core::{ConsumeContext, Message};

use ferrybus_core::consume::ConsumeRequest;

use crate::fast::InboxTransaction;

/// Gives consumers the inbox's open transaction: their writes commit together with the inbox
/// row and the messages they publish, or roll back together. The inbox puts it into the request
/// extensions of an endpoint that calls `.inbox()` on a bus with a
/// [`PostgresStorage`](crate::PostgresStorage).
///
/// Use it only while the consumer runs: do not clone the [`InboxTransaction`] out of the
/// context or move it into a spawned task. The layer takes the transaction back when the
/// consumer returns, and fails the delivery if someone still holds it.
///
/// ```no_run
/// use ferrybus_core::{ConsumeContext, ConsumeError};
/// use ferrybus_sea_orm::TransactionExt;
/// use sea_orm::{ConnectionTrait, Statement, DbBackend};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)] struct OrderPlaced { order_id: uuid::Uuid }
/// # impl ferrybus_core::Message for OrderPlaced {
/// #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Ns:OrderPlaced").unwrap() }
/// # }
///
/// async fn invoice(ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
///     ctx.db()
///         .execute_raw(Statement::from_sql_and_values(
///             DbBackend::Postgres,
///             "INSERT INTO invoices (order_id) VALUES ($1)",
///             [ctx.message().order_id.into()],
///         ))
///         .await?;
///     Ok(())
/// }
/// ```
pub trait TransactionExt {
    /// The inbox transaction, if the consumer runs behind the inbox (`.inbox()` on its endpoint).
    fn try_transaction(&self) -> Option<&InboxTransaction>;

    /// The inbox transaction.
    ///
    /// # Panics
    /// When the endpoint does not use the inbox (no `.inbox()`, or no storage on the bus).
    fn transaction(&self) -> &InboxTransaction {
        self.try_transaction().expect(
            "no inbox transaction: call .inbox() on the endpoint (the bus needs a PostgresStorage)",
        )
    }

    /// The inbox transaction (short name of [`TransactionExt::transaction`]).
    fn db(&self) -> &InboxTransaction {
        self.transaction()
    }
}

impl TransactionExt for ConsumeRequest {
    fn try_transaction(&self) -> Option<&InboxTransaction> {
        self.extensions().get::<InboxTransaction>()
    }
}

impl<M: Message> TransactionExt for ConsumeContext<M> {
    fn try_transaction(&self) -> Option<&InboxTransaction> {
        self.request().try_transaction()
    }
}
