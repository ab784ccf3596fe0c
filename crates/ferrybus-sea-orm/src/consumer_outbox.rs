//! The consumer outbox rows of one inbox entry: write them, read what is left, send and finish
//! under the inbox row lock. Shared by the inbox layer and the sweeper.

use chrono::Utc;
use ferrybus_core::{OutgoingMessage, SharedSink};
use sea_orm::{ConnectionTrait, Value};
use uuid::Uuid;

use crate::error::StoreError;
use crate::send::{send_in_order, SendOutcome};
use crate::sql::{message_values, read_message, stmt, Sql, StoredRow, MESSAGE_VALUE_COUNT};

/// PostgreSQL accepts at most 65 535 bind parameters per statement (2 key values, the messages'
/// values and one timestamp).
const MAX_ROWS_PER_INSERT: usize = 65_535 / MESSAGE_VALUE_COUNT - 1;

/// The inbox key: (original message id, consumer id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct InboxKey {
    pub(crate) message_id: Uuid,
    pub(crate) consumer_id: Uuid,
}

impl InboxKey {
    fn values(&self) -> [Value; 2] {
        [self.message_id.into(), self.consumer_id.into()]
    }
}

/// The state of an existing inbox row, read while holding its lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowState {
    pub(crate) consumed: bool,
    pub(crate) delivered: bool,
    pub(crate) last_sequence_number: Option<i64>,
}

impl RowState {
    pub(crate) fn read(row: &sea_orm::QueryResult) -> Result<Self, StoreError> {
        Ok(Self {
            consumed: row.try_get("", "consumed")?,
            delivered: row.try_get("", "delivered")?,
            last_sequence_number: row.try_get("", "last_sequence_number")?,
        })
    }
}

/// Locks the inbox row (`FOR UPDATE`); `None` when it does not exist. `async_commit` also
/// turns off `synchronous_commit` for the rest of this transaction (same statement).
pub(crate) async fn lock(
    db: &impl ConnectionTrait,
    sql: &Sql,
    key: InboxKey,
    async_commit: bool,
) -> Result<Option<RowState>, StoreError> {
    let statement = if async_commit {
        &sql.inbox_lock_async_commit
    } else {
        &sql.inbox_lock
    };
    let row = db.query_one(stmt(statement, key.values())).await?;
    row.as_ref().map(RowState::read).transpose()
}

/// Inserts the consumer's messages (one multi-row INSERT per 4 000 messages) and, in the same
/// statement, marks the inbox row consumed and not delivered; returns their sequence numbers in
/// order.
pub(crate) async fn insert(
    db: &impl ConnectionTrait,
    sql: &Sql,
    key: InboxKey,
    messages: &[OutgoingMessage],
) -> Result<Vec<i64>, StoreError> {
    let mut seqs = Vec::with_capacity(messages.len());
    for (i, chunk) in messages.chunks(MAX_ROWS_PER_INSERT).enumerate() {
        let mark_pending = i == 0;
        let mut values: Vec<Value> = key.values().into();
        for message in chunk {
            values.extend(message_values(message)?);
        }
        if mark_pending {
            values.push(Value::ChronoDateTimeUtc(Some(Box::new(Utc::now()))));
        }
        let rows = db
            .query_all(stmt(
                &sql.insert_inbox_messages(chunk.len(), mark_pending),
                values,
            ))
            .await?;
        for row in rows {
            seqs.push(row.try_get::<i64>("", "seq")?);
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
    let mut values: Vec<Value> = key.values().into();
    values.push(after.unwrap_or(0).into());
    let rows = db.query_all(stmt(&sql.inbox_messages, values)).await?;
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
    source: &'static str,
) -> Result<usize, StoreError> {
    let last = rows.last().map(|r| r.seq);
    let SendOutcome {
        processed_upto,
        sent,
        error,
    } = send_in_order(sink, rows, pipelined, source).await;
    match error {
        None => {
            finish(db, &sql.inbox_delivered, key, last).await?;
            Ok(sent)
        }
        Some(error) => {
            if processed_upto.is_some() {
                finish(db, &sql.inbox_progress, key, processed_upto).await?;
            }
            Err(StoreError::send(error))
        }
    }
}

async fn finish(
    db: &impl ConnectionTrait,
    statement: &str,
    key: InboxKey,
    last: Option<i64>,
) -> Result<(), StoreError> {
    let mut values: Vec<Value> = key.values().into();
    values.push(Value::ChronoDateTimeUtc(Some(Box::new(Utc::now()))));
    values.push(last.into());
    values.push(Uuid::new_v4().into());
    db.execute(stmt(statement, values)).await?;
    Ok(())
}
