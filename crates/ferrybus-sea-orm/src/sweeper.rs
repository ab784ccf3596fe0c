//! The sweeper: sends the consumer-outbox messages nobody is sending, those of inbox rows
//! consumed more than `sweep_after` ago ([`SWEEP_AFTER`](crate::defaults::SWEEP_AFTER)), not
//! delivered and held by no delivery: a process died before its after-commit sender sent them,
//! their send failed after the commit, or the inbound message went to the error queue after the
//! consumer committed.
//!
//! An entry whose send fails does not hold up the others: the sweep goes on with the next one,
//! and the failed entry is left out of the next claims for its back-off ([`Backoff`]); after
//! `send_attempts` failed tries it is set aside (logged at error, counted in
//! `ferrybus.outbox.set_aside`, tried again every
//! [`SET_ASIDE_RETRY`](crate::defaults::SET_ASIDE_RETRY)); `ferrybus outbox status` lists such
//! entries as stranded. Nothing is written to the tables for it: they keep MassTransit's shape.

use std::time::Duration;

use chrono::Utc;
use ferrybus_core::outgoing::SharedSink;
use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, FromQueryResult};

use crate::backoff::Backoff;
use crate::consumer_outbox;
use crate::error::{StoreError, StoreErrorKind};
use crate::fast::Begin;
use crate::sql::{InboxKey, Sql, SweptInbox};
use crate::telemetry::{count_set_aside, SendSource};

/// The inbox rows one sweep claims at most.
const SWEEP_BATCH: u64 = 32;

/// Claims up to [`SWEEP_BATCH`] inbox rows consumed more than `age` ago and not delivered
/// (skipping rows a delivery holds and entries `backoff` holds back), sends their remaining
/// messages, marks them delivered and deletes the rows, in one transaction. Returns how many
/// entries were completed.
pub(crate) async fn sweep(
    db: &DatabaseConnection,
    begin: &Begin,
    sql: &Sql,
    sink: &SharedSink,
    backoff: &Backoff<InboxKey>,
    age: Duration,
) -> Result<usize, StoreError> {
    let before = Utc::now() - chrono::Duration::from_std(age).unwrap_or(chrono::Duration::zero());
    let txn = begin.read_committed(db).await?;
    let claimed = txn
        .query_all_raw(sql.sweep_claim(before, &backoff.excluded(), SWEEP_BATCH))
        .await?;
    let mut completed = 0;
    for row in &claimed {
        let swept = SweptInbox::from_query_result(row, "")?;
        let key = InboxKey {
            message_id: swept.message_id,
            consumer_id: swept.consumer_id,
        };
        if backoff.is_backed_off(key) {
            // Backed off by a concurrent sweep after this one read the excluded list.
            continue;
        }
        match sweep_one(&txn, sql, sink, key, swept.last_sequence_number).await {
            Ok(sent) => {
                completed += 1;
                backoff.succeeded(key);
                tracing::info!(
                    target: "ferrybus::outbox",
                    message_id = %key.message_id,
                    consumer_id = %key.consumer_id,
                    sent,
                    "the sweeper delivered consumer-outbox messages nobody was sending"
                );
            }
            // The transaction is aborted: what was recorded so far is lost, the rest waits.
            Err(error) if error.kind() == StoreErrorKind::Database => {
                let _ = txn.rollback().await;
                return Err(error);
            }
            Err(error) => failed(backoff, key, &error),
        }
    }
    txn.commit().await?;
    Ok(completed)
}

/// Sends what is left of one claimed entry and records it (progress too, after a failure).
async fn sweep_one(
    txn: &DatabaseTransaction,
    sql: &Sql,
    sink: &SharedSink,
    key: InboxKey,
    after: Option<i64>,
) -> Result<usize, StoreError> {
    let rows = consumer_outbox::load(txn, sql, key, after).await?;
    consumer_outbox::deliver(txn, sql, sink, key, rows, false, SendSource::Sweeper).await
}

/// Backs `key` off after its send failed, or sets it aside.
fn failed(backoff: &Backoff<InboxKey>, key: InboxKey, error: &StoreError) {
    let failure = backoff.failed(key);
    if failure.set_aside {
        count_set_aside("consumer");
        tracing::error!(
            target: "ferrybus::outbox",
            message_id = %key.message_id,
            consumer_id = %key.consumer_id,
            %error,
            failures = failure.failures,
            retry_in = ?failure.delay,
            "a consumer-outbox entry keeps failing; set aside (the others are swept), \
             see `ferrybus outbox status`"
        );
    } else {
        tracing::warn!(
            target: "ferrybus::outbox",
            message_id = %key.message_id,
            consumer_id = %key.consumer_id,
            %error,
            retry_in = ?failure.delay,
            "sweeping a consumer outbox failed; backing it off"
        );
    }
}
