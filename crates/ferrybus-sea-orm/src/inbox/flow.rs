//! The per-delivery algorithm of the inbox (see the module docs for the diagram).

use std::sync::Arc;

use chrono::Utc;
use ferrybus_core::consume::ConsumeOutcome;
use ferrybus_core::consume::ConsumeRequest;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::outgoing::SharedSink;
use ferrybus_core::ConsumeError;
use sea_orm::{ConnectionTrait, FromQueryResult};
use tower::{Service, ServiceExt};
use tracing::Instrument;
use uuid::Uuid;

use crate::consumer_outbox;
use crate::error::{StoreError, StoreErrorKind};
use crate::fast::InboxTransaction;
use crate::inbox::handoff::Committed;
use crate::inbox::layer::{InFlight, Shared};
use crate::inbox::sink::CaptureSink;
use crate::sql::{InboxKey, RowState, Sql, StoredRow};
use crate::telemetry::{
    count_duplicate, inbox_decision, inbox_stage, timed, InboxDecision, SendSource,
};

/// What the inbox row says to do with this delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// Not consumed yet: run the consumer; `row` says how the row stands.
    Run { row: RunRow },
    /// Consumed, not delivered: send what is left from `after` on, then finish.
    Recover { after: Option<i64> },
    /// Consumed and delivered: a duplicate.
    Duplicate,
}

pub(super) async fn handle<S>(
    shared: Arc<Shared>,
    inner: S,
    request: ConsumeRequest,
) -> Result<ConsumeOutcome, ConsumeError>
where
    S: Service<ConsumeRequest, Response = ConsumeOutcome, Error = ConsumeError> + Send,
    S::Future: Send,
{
    let Some(message_id) = request.received().original_message_id() else {
        let error = StoreError::new(
            StoreErrorKind::MissingMessageId,
            "the inbox needs a message id",
        );
        return Err(error.into_consume_error().into_permanent());
    };
    let key = InboxKey {
        message_id,
        consumer_id: shared.consumer_id(request.consumer()),
    };
    let span = tracing::info_span!(
        target: "ferrybus::inbox",
        "inbox",
        %message_id,
        consumer_id = %key.consumer_id,
        consumer = request.consumer().name(),
    );
    run(shared, inner, request, key).instrument(span).await
}

async fn run<S>(
    shared: Arc<Shared>,
    inner: S,
    request: ConsumeRequest,
    key: InboxKey,
) -> Result<ConsumeOutcome, ConsumeError>
where
    S: Service<ConsumeRequest, Response = ConsumeOutcome, Error = ConsumeError> + Send,
    S::Future: Send,
{
    let flight = InFlight::enter(&shared.in_flight);
    let sql = shared.config.storage().sql();
    // Whether this delivery publishes, guessed from the last one (see `RunRow`).
    let pending = shared.publish_guess.publishes();
    let (txn, claim) = timed(&inbox_stage::CLAIM, begin_claim(&shared, sql, key, pending))
        .await
        .map_err(StoreError::into_consume_error)?;
    match claim {
        Claim::Run { row } => {
            inbox_decision(request.consumer(), InboxDecision::Run);
            consume(&shared, inner, request, key, row, txn, &flight).await
        }
        Claim::Duplicate => duplicate(&request, key, txn).await,
        Claim::Recover { after } => {
            // The consumer does not run again: the copy completes an earlier attempt.
            inbox_decision(request.consumer(), InboxDecision::Recover);
            let sink = request.sink().clone();
            let sent = recover(sql, &sink, key, after, txn).await;
            after_commit(&shared, key, sent, ConsumeOutcome::Duplicate)
        }
    }
}

/// The inbox row of a delivery the consumer runs for, as the claim left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RunRow {
    /// Inserted by this transaction, consumed and delivered: right for a consumer that sends
    /// nothing.
    Delivered,
    /// Inserted by this transaction, consumed and not delivered: right for a consumer that
    /// publishes (its messages are then written with no update of the row).
    Pending,
    /// An older row with `Consumed` NULL (written by .NET or an earlier ferrybus), still to be
    /// marked.
    Unconsumed,
}

impl RunRow {
    /// Whether this transaction inserted the row (the batch inbox asks).
    #[cfg_attr(not(feature = "batch"), allow(dead_code))]
    pub(super) fn inserted(self) -> bool {
        self != RunRow::Unconsumed
    }
}

/// Begins the delivery's transaction and claims its inbox row ([`claim`]).
async fn begin_claim(
    shared: &Shared,
    sql: &Sql,
    key: InboxKey,
    pending: bool,
) -> Result<(InboxTransaction, Claim), StoreError> {
    let txn = begin(shared).await?;
    match claim(&txn, sql, key, pending).await {
        Ok(claim) => Ok((txn, claim)),
        Err(error) => Err(txn.abort(error).await),
    }
}

/// Begins a transaction on one of the inbox's connections.
pub(super) async fn begin(shared: &Shared) -> Result<InboxTransaction, StoreError> {
    InboxTransaction::begin(&shared.connections).await
}

fn new_row(pending: bool) -> RunRow {
    if pending {
        RunRow::Pending
    } else {
        RunRow::Delivered
    }
}

/// Inserts the inbox row, or locks the existing one (a concurrent first copy makes this wait
/// on the unique index until it commits or rolls back) and reads its state.
/// A new row is inserted not delivered when `pending` (the consumer is expected to publish).
pub(super) async fn claim(
    txn: &InboxTransaction,
    sql: &Sql,
    key: InboxKey,
    pending: bool,
) -> Result<Claim, StoreError> {
    for _ in 0..3 {
        let lock_id = Uuid::new_v4();
        if txn
            .execute_raw(sql.inbox_insert(key, lock_id, Utc::now(), pending))
            .await?
            .rows_affected()
            == 1
        {
            return Ok(Claim::Run {
                row: new_row(pending),
            });
        }
        if let Some(claim) = relock(txn, sql, key).await? {
            return Ok(claim);
        }
        // The row was deleted between the two statements (cleanup): insert again.
    }
    Err(StoreError::new(
        StoreErrorKind::Database,
        "the inbox row kept disappearing",
    ))
}

/// Takes the existing inbox row (new `LockId`, one more receive) and says what to do; `None`
/// when there is no row.
async fn relock(
    txn: &InboxTransaction,
    sql: &Sql,
    key: InboxKey,
) -> Result<Option<Claim>, StoreError> {
    let Some(row) = txn
        .query_one_raw(sql.inbox_relock(key, Uuid::new_v4()))
        .await?
    else {
        return Ok(None);
    };
    let state = RowState::from_query_result(&row, "")?;
    Ok(Some(match (state.consumed, state.delivered) {
        (false, _) => Claim::Run {
            row: RunRow::Unconsumed,
        },
        (true, false) => Claim::Recover {
            after: state.last_sequence_number,
        },
        (true, true) => Claim::Duplicate,
    }))
}

async fn duplicate(
    request: &ConsumeRequest,
    key: InboxKey,
    txn: InboxTransaction,
) -> Result<ConsumeOutcome, ConsumeError> {
    txn.commit().await.map_err(StoreError::into_consume_error)?;
    tracing::info!(
        target: "ferrybus::inbox",
        message_id = %key.message_id,
        consumer_id = %key.consumer_id,
        consumer = request.consumer().name(),
        "duplicate message acknowledged without running the consumer"
    );
    count_duplicate(request);
    Ok(ConsumeOutcome::Duplicate)
}

/// Runs the consumer in the transaction, writes its messages, commits, then delivers them.
async fn consume<S>(
    shared: &Shared,
    mut inner: S,
    mut request: ConsumeRequest,
    key: InboxKey,
    row: RunRow,
    txn: InboxTransaction,
    flight: &InFlight<'_>,
) -> Result<ConsumeOutcome, ConsumeError>
where
    S: Service<ConsumeRequest, Response = ConsumeOutcome, Error = ConsumeError> + Send,
    S::Future: Send,
{
    let sql = shared.config.storage().sql();
    let transport = request.sink().clone();
    let capture = CaptureSink::new();
    request.set_sink(Arc::new(capture.clone()));
    request.extensions_mut().insert(txn.clone());
    let result = timed(&inbox_stage::CONSUME, async move {
        inner.ready().await?.call(request).await
    })
    .await;
    let messages = capture.take();
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) => {
            txn.rollback().await;
            return Err(error);
        }
    };
    let seqs = timed(&inbox_stage::COMMIT, commit(txn, sql, key, row, &messages))
        .await
        .map_err(StoreError::into_consume_error)?;
    shared.publish_guess.learn(!messages.is_empty());
    if messages.is_empty() {
        return Ok(outcome);
    }
    let rows = seqs
        .into_iter()
        .zip(messages)
        .map(|(seq, message)| StoredRow {
            seq,
            message: Some(message),
            unreadable: None,
        })
        .collect();
    // Committed: while the after-commit sender runs, it sends them and the delivery is
    // acknowledged now (a crash before they are sent leaves them to the sweeper). The only
    // delivery of its endpoint in flight (every delivery of a sequential endpoint) sends its
    // own before it is acknowledged: the next delivery's messages cannot overtake them.
    let rows = if flight.alone() {
        rows
    } else {
        match shared.handoff.offer(Committed { key, rows }) {
            Ok(()) => return Ok(outcome),
            Err(entry) => entry.rows,
        }
    };
    let sent = timed(
        &inbox_stage::DELIVER,
        send_after_commit(shared, &transport, key, rows),
    )
    .await;
    after_commit(shared, key, sent, outcome)
}

/// The outcome of a delivery whose transaction committed (this one's or an earlier attempt's)
/// once it tried to send the messages: a send that failed is a matter for the outbox, not a
/// fault of the consumed message, so the delivery is acknowledged and the sweeper sends the
/// rows. Only where this instance runs no sweeper does the failure fail the delivery, whose
/// retry or redelivery then sends the rest (the consumer does not run again).
pub(super) fn after_commit<T>(
    shared: &Shared,
    key: InboxKey,
    sent: Result<(), StoreError>,
    outcome: T,
) -> Result<T, ConsumeError> {
    match sent {
        Ok(()) => Ok(outcome),
        Err(error) if shared.config.storage().sweeps() => {
            tracing::warn!(
                target: "ferrybus::inbox",
                message_id = %key.message_id,
                consumer_id = %key.consumer_id,
                %error,
                "the consumer's work is committed but its messages could not be sent; \
                 acknowledged, the sweeper sends them"
            );
            Ok(outcome)
        }
        Err(error) => Err(error.into_consume_error()),
    }
}

/// Sends a committed delivery's messages ([`deliver_after_commit`]); a failed send is tried
/// again, up to `send_attempts` tries in all with the delivery back-off between them, from
/// what the table says is left (nothing is kept in memory for it).
pub(super) async fn send_after_commit(
    shared: &Shared,
    sink: &SharedSink,
    key: InboxKey,
    rows: Vec<StoredRow>,
) -> Result<(), StoreError> {
    let mut result = deliver_after_commit(shared, sink, key, rows).await;
    let delivery = &shared.config.storage().delivery;
    let mut delay = delivery.backoff_initial;
    for _ in 1..delivery.send_attempts {
        let Err(error) = &result else { break };
        tracing::debug!(
            target: "ferrybus::inbox",
            message_id = %key.message_id,
            %error,
            retry_in = ?delay,
            "sending a committed delivery's messages failed; trying again"
        );
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(delivery.backoff_max);
        result = send_rest(shared, sink, key).await;
    }
    result
}

/// Sends what is left of a committed entry, read from the table, under its inbox row lock (a
/// sender holding it is waited for; an entry it completed is left alone).
async fn send_rest(shared: &Shared, sink: &SharedSink, key: InboxKey) -> Result<(), StoreError> {
    let sql = shared.config.storage().sql();
    let txn = begin(shared).await?;
    let async_commit = shared.config.is_async_delivered_commit();
    let state = match consumer_outbox::lock(&txn, sql, key, async_commit).await {
        Ok(state) => state,
        Err(error) => return Err(txn.abort(error).await),
    };
    let Some(state) = state.filter(|s| !s.delivered) else {
        return txn.commit().await;
    };
    let rows = match consumer_outbox::load(&txn, sql, key, state.last_sequence_number).await {
        Ok(rows) => rows,
        Err(error) => return Err(txn.abort(error).await),
    };
    let pipelined = shared.config.is_pipelined();
    let result =
        consumer_outbox::deliver(&txn, sql, sink, key, rows, pipelined, SendSource::Consumer).await;
    finish(txn, result).await
}

/// Commits the delivery: the inbox row stays consumed and delivered when the consumer published
/// nothing, consumed and not delivered beside its outbox rows when it did. When `row` was
/// inserted the other way, the outbox insert also marks it (one statement), or one update marks
/// it consumed and delivered. Returns the messages' sequence numbers.
async fn commit(
    txn: InboxTransaction,
    sql: &Sql,
    key: InboxKey,
    row: RunRow,
    messages: &[OutgoingMessage],
) -> Result<Vec<i64>, StoreError> {
    let written = write(&txn, sql, key, row, messages).await;
    txn.finish(written).await
}

/// The statements [`commit`] runs before its `COMMIT`.
async fn write(
    txn: &InboxTransaction,
    sql: &Sql,
    key: InboxKey,
    row: RunRow,
    messages: &[OutgoingMessage],
) -> Result<Vec<i64>, StoreError> {
    match (row, messages.is_empty()) {
        (RunRow::Delivered, true) => Ok(Vec::new()),
        (RunRow::Pending, false) => consumer_outbox::insert(txn, sql, key, messages, false).await,
        (_, false) => consumer_outbox::insert(txn, sql, key, messages, true).await,
        (_, true) => {
            txn.execute_raw(sql.inbox_consumed_delivered(key, Utc::now()))
                .await?;
            Ok(Vec::new())
        }
    }
}

/// Sends the committed rows (already in memory) under the inbox row lock, so a concurrent copy
/// of the message either waits for this to finish or (having taken the lock first) delivers
/// them itself: `BEGIN`, lock + state (one statement), send, delete + mark delivered (one
/// statement), `COMMIT`.
async fn deliver_after_commit(
    shared: &Shared,
    sink: &SharedSink,
    key: InboxKey,
    rows: Vec<StoredRow>,
) -> Result<(), StoreError> {
    let sql = shared.config.storage().sql();
    let txn = begin(shared).await?;
    let async_commit = shared.config.is_async_delivered_commit();
    let state = match consumer_outbox::lock(&txn, sql, key, async_commit).await {
        Ok(state) => state,
        Err(error) => return Err(txn.abort(error).await),
    };
    let Some(state) = state.filter(|s| !s.delivered) else {
        return txn.commit().await;
    };
    let after = state.last_sequence_number.unwrap_or(0);
    let rows = rows.into_iter().filter(|r| r.seq > after).collect();
    let pipelined = shared.config.is_pipelined();
    let result =
        consumer_outbox::deliver(&txn, sql, sink, key, rows, pipelined, SendSource::Consumer).await;
    finish(txn, result).await
}

/// Commits what `deliver` recorded (also after a failed send: its progress), then reports the
/// send's result; a statement of its own that failed rolls back instead.
async fn finish(
    txn: InboxTransaction,
    result: Result<usize, StoreError>,
) -> Result<(), StoreError> {
    match result {
        Err(error) if error.kind() == StoreErrorKind::Database => Err(txn.abort(error).await),
        result => {
            txn.commit().await?;
            result.map(drop)
        }
    }
}

/// A consumed but undelivered entry (an earlier attempt crashed or failed to send): send the
/// rest without running the consumer again.
async fn recover(
    sql: &Sql,
    sink: &SharedSink,
    key: InboxKey,
    after: Option<i64>,
    txn: InboxTransaction,
) -> Result<(), StoreError> {
    let rows = match consumer_outbox::load(&txn, sql, key, after).await {
        Ok(rows) => rows,
        Err(error) => return Err(txn.abort(error).await),
    };
    tracing::info!(
        target: "ferrybus::inbox",
        pending = rows.len(),
        "message already consumed; delivering its remaining outbox messages"
    );
    let result =
        consumer_outbox::deliver(&txn, sql, sink, key, rows, false, SendSource::Consumer).await;
    finish(txn, result).await
}
