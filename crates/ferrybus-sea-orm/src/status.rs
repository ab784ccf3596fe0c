//! [`outbox_status`]: what is waiting in the inbox and outbox tables (read-only; for
//! `ferrybus outbox status` and dashboards).

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Alias, Asterisk, Expr, Func, Query, SimpleExpr};
use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult};

use crate::config::{StorageConfig, Tables};
use crate::entity::OutboxTable::{InboxState, OutboxMessage, OutboxState};
use crate::entity::{inbox_state, outbox_message, outbox_state};
use crate::error::{StoreError, StoreErrorKind};
use crate::sql::build;

/// Counts of the rows waiting in MassTransit's tables, read in one statement (one snapshot).
#[derive(Clone, Debug, PartialEq, Eq, FromQueryResult)]
pub struct OutboxStatus {
    /// Bus outboxes (`OutboxState` rows) not yet delivered and removed.
    pub bus_outboxes: i64,
    /// Their messages (`OutboxMessage` rows with `OutboxId`).
    pub bus_messages: i64,
    /// When the oldest waiting bus outbox was written.
    pub oldest_bus_outbox: Option<DateTime<Utc>>,
    /// Inbox rows (delivered ones are kept for the duplicate-detection window).
    pub inbox_rows: i64,
    /// Inbox rows consumed but not delivered: consumer-outbox messages still to send (a
    /// delivery in progress, or left for the sweeper).
    pub inbox_undelivered: i64,
    /// Consumer-outbox messages (`OutboxMessage` rows with `InboxMessageId`).
    pub consumer_messages: i64,
    /// When the oldest undelivered inbox row was consumed.
    pub oldest_undelivered: Option<DateTime<Utc>>,
}

/// Reads the [`OutboxStatus`] of `tables` (the time column type is read from the tables
/// first, as a starting bus does).
///
/// ```no_run
/// # async fn run(db: sea_orm::DatabaseConnection) -> Result<(), ferrybus_sea_orm::StoreError> {
/// use ferrybus_sea_orm::{status, Tables};
/// let status = status::outbox_status(&db, &Tables::new()).await?;
/// println!("{} bus-outbox messages waiting", status.bus_messages);
/// # Ok(()) }
/// ```
pub async fn outbox_status(
    db: &DatabaseConnection,
    tables: &Tables,
) -> Result<OutboxStatus, StoreError> {
    let config = StorageConfig::new(tables.clone()).detect(db).await?;
    let n = &config.sql().names;
    let scalar = |query: sea_orm::sea_query::SelectStatement| -> SimpleExpr {
        SimpleExpr::SubQuery(None, Box::new(query.into_sub_query_statement()))
    };
    let count = |table, filter: Option<SimpleExpr>| -> SimpleExpr {
        let mut q = Query::select();
        q.expr(Func::count(Expr::col(Asterisk)))
            .from(n.table(table));
        if let Some(filter) = filter {
            q.and_where(filter);
        }
        scalar(q)
    };
    let oldest = |table, col: SimpleExpr, filter: Option<SimpleExpr>| -> SimpleExpr {
        let mut q = Query::select();
        q.expr(n.ts_read(Func::min(col).into()))
            .from(n.table(table));
        if let Some(filter) = filter {
            q.and_where(filter);
        }
        scalar(q)
    };
    let undelivered = || {
        Expr::col(n.c(inbox_state::Column::Consumed))
            .is_not_null()
            .and(Expr::col(n.c(inbox_state::Column::Delivered)).is_null())
    };
    let bigint = |e: SimpleExpr| e.cast_as(Alias::new("bigint"));
    let query = Query::select()
        .expr_as(bigint(count(OutboxState, None)), Alias::new("bus_outboxes"))
        .expr_as(
            bigint(count(
                OutboxMessage,
                Some(Expr::col(n.c(outbox_message::Column::OutboxId)).is_not_null()),
            )),
            Alias::new("bus_messages"),
        )
        .expr_as(
            oldest(OutboxState, n.e(outbox_state::Column::Created), None),
            Alias::new("oldest_bus_outbox"),
        )
        .expr_as(bigint(count(InboxState, None)), Alias::new("inbox_rows"))
        .expr_as(
            bigint(count(InboxState, Some(undelivered()))),
            Alias::new("inbox_undelivered"),
        )
        .expr_as(
            bigint(count(
                OutboxMessage,
                Some(Expr::col(n.c(outbox_message::Column::InboxMessageId)).is_not_null()),
            )),
            Alias::new("consumer_messages"),
        )
        .expr_as(
            oldest(
                InboxState,
                n.e(inbox_state::Column::Consumed),
                Some(undelivered()),
            ),
            Alias::new("oldest_undelivered"),
        )
        .to_owned();
    let row = db
        .query_one(build(&query))
        .await?
        .ok_or_else(|| StoreError::new(StoreErrorKind::Database, "status returned no row"))?;
    Ok(OutboxStatus::from_query_result(&row, "")?)
}
