//! The sweeper: sends the consumer-outbox messages nobody is sending, those of inbox rows
//! consumed more than `sweep_after` ago ([`SWEEP_AFTER`](crate::defaults::SWEEP_AFTER)), not
//! delivered and held by no delivery: a process died before its after-commit sender sent them,
//! or the inbound message went to the error queue after the consumer committed.

use std::time::Duration;

use chrono::Utc;
use ferrybus_core::outgoing::SharedSink;
use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult};

use crate::consumer_outbox;
use crate::error::StoreError;
use crate::fast::Begin;
use crate::sql::{InboxKey, Sql, SweptInbox};
use crate::telemetry::SendSource;

/// The inbox rows one sweep claims at most.
const SWEEP_BATCH: u64 = 32;

/// Claims up to [`SWEEP_BATCH`] inbox rows consumed more than `age` ago and not delivered
/// (skipping rows a delivery holds), sends their remaining messages, marks them delivered and
/// deletes the rows, in one transaction. Returns how many entries were completed.
pub(crate) async fn sweep(
    db: &DatabaseConnection,
    begin: &Begin,
    sql: &Sql,
    sink: &SharedSink,
    age: Duration,
) -> Result<usize, StoreError> {
    let before = Utc::now() - chrono::Duration::from_std(age).unwrap_or(chrono::Duration::zero());
    let txn = begin.read_committed(db).await?;
    let claimed = txn
        .query_all_raw(sql.sweep_claim(before, SWEEP_BATCH))
        .await?;
    let mut completed = 0;
    for row in &claimed {
        let swept = SweptInbox::from_query_result(row, "")?;
        let key = InboxKey {
            message_id: swept.message_id,
            consumer_id: swept.consumer_id,
        };
        let after = swept.last_sequence_number;
        let rows = consumer_outbox::load(&txn, sql, key, after).await?;
        match consumer_outbox::deliver(&txn, sql, sink, key, rows, false, SendSource::Sweeper).await
        {
            Ok(sent) => {
                completed += 1;
                tracing::info!(
                    target: "ferrybus::outbox",
                    message_id = %key.message_id,
                    consumer_id = %key.consumer_id,
                    sent,
                    "the sweeper delivered consumer-outbox messages nobody was sending"
                );
            }
            Err(error) => {
                tracing::warn!(target: "ferrybus::outbox", %error, "sweeping a consumer outbox failed");
                break;
            }
        }
    }
    txn.commit().await?;
    Ok(completed)
}
