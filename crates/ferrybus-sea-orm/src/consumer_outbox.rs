//! The consumer outbox rows of one inbox entry: write them, read what is left, send and finish
//! under the inbox row lock. Shared by the inbox layer and the sweeper.

use chrono::Utc;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::outgoing::SharedSink;
use sea_orm::{ConnectionTrait, FromQueryResult};
use uuid::Uuid;

use crate::error::StoreError;
use crate::send::{send_in_order, SendOutcome};
use crate::sql::{read_message, InboxKey, RowState, Seq, Sql, StoredRow, BINDS_PER_MESSAGE};
use crate::telemetry::SendSource;

/// PostgreSQL accepts at most 65 535 bind parameters per statement (the messages' values, and
/// the inbox key and a timestamp in the CTE).
const MAX_ROWS_PER_INSERT: usize = (65_535 - 4) / BINDS_PER_MESSAGE;

/// Locks the inbox row (`FOR UPDATE`); `None` when it does not exist. `async_commit` also
/// turns off `synchronous_commit` for the rest of this transaction (same statement).
pub(crate) async fn lock(
    db: &impl ConnectionTrait,
    sql: &Sql,
    key: InboxKey,
    async_commit: bool,
) -> Result<Option<RowState>, StoreError> {
    let row = db.query_one_raw(sql.inbox_lock(key, async_commit)).await?;
    Ok(row
        .as_ref()
        .map(|row| RowState::from_query_result(row, ""))
        .transpose()?)
}

/// Inserts the consumer's messages (one multi-row INSERT per 4 000 messages) and, with
/// `mark_pending`, in the same statement marks the inbox row consumed and not delivered (not
/// needed when the row was inserted that way); returns their sequence numbers in order.
pub(crate) async fn insert(
    db: &impl ConnectionTrait,
    sql: &Sql,
    key: InboxKey,
    messages: &[OutgoingMessage],
    mark_pending: bool,
) -> Result<Vec<i64>, StoreError> {
    let mut seqs = Vec::with_capacity(messages.len());
    for (i, chunk) in messages.chunks(MAX_ROWS_PER_INSERT).enumerate() {
        let pending_at = (i == 0 && mark_pending).then(Utc::now);
        let rows = db
            .query_all_raw(sql.insert_inbox_messages(key, chunk, pending_at)?)
            .await?;
        for row in &rows {
            seqs.push(Seq::from_query_result(row, "")?.seq);
        }
    }
    Ok(seqs)
}

/// The rows of `key` after sequence number `after`, in order.
pub(crate) async fn load(
    db: &impl ConnectionTrait,
    sql: &Sql,
    key: InboxKey,
    after: Option<i64>,
) -> Result<Vec<StoredRow>, StoreError> {
    let rows = db
        .query_all_raw(sql.inbox_messages(key, after.unwrap_or(0)))
        .await?;
    rows.iter().map(read_message).collect()
}

/// Sends `rows` and records the result on the locked inbox row: all sent → `Delivered` set and
/// the rows deleted; a failure → progress (`LastSequenceNumber`) kept and the error returned.
/// `pipelined` starts every send in order and awaits the confirms together (see
/// [`send_in_order`]: only for sinks that keep publish order). Does not commit.
pub(crate) async fn deliver(
    db: &impl ConnectionTrait,
    sql: &Sql,
    sink: &SharedSink,
    key: InboxKey,
    rows: Vec<StoredRow>,
    pipelined: bool,
    source: SendSource,
) -> Result<usize, StoreError> {
    let last = rows.last().map(|r| r.seq);
    let SendOutcome {
        processed_upto,
        sent,
        error,
    } = send_in_order(sink, rows, pipelined, source).await;
    match error {
        None => {
            finish(db, sql, key, last, true).await?;
            Ok(sent)
        }
        Some(error) => {
            if processed_upto.is_some() {
                finish(db, sql, key, processed_upto, false).await?;
            }
            Err(StoreError::send(error))
        }
    }
}

async fn finish(
    db: &impl ConnectionTrait,
    sql: &Sql,
    key: InboxKey,
    last: Option<i64>,
    complete: bool,
) -> Result<(), StoreError> {
    db.execute_raw(sql.inbox_finish(key, Utc::now(), last, Uuid::new_v4(), complete))
        .await?;
    Ok(())
}
