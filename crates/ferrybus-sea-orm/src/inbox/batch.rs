//! The inbox for batch consumers: one READ COMMITTED transaction per batch.
//!
//! ```text
//! BEGIN ─ per message, in message-id order (so two batches sharing messages lock alike):
//!         INSERT inbox row ON CONFLICT DO NOTHING, or lock the existing one
//!           ─ new (or an older row not consumed) ▶ stays in the batch
//!           ─ consumed ▶ dropped from the batch (a duplicate; one still undelivered is left to
//!                        the sweeper, which sends its rows)
//!       ─ none left ▶ COMMIT, every message acknowledged as a duplicate
//! run the consumer on what is left, the transaction in every message's context
//!       ─ Err ▶ ROLLBACK (no row stays: the retry or the error queue sees the whole batch again)
//!       └ Ok  ▶ published: outbox rows under the last message's inbox row (consumed, not
//!                delivered); older unconsumed rows marked consumed ─ COMMIT
//! after COMMIT, if it published: the after-commit sender (or, without it, this delivery) sends
//! them, as for a single message
//! ```

use std::sync::Arc;
use std::task::{Context, Poll};

use chrono::Utc;
use ferrybus_batch::BatchRequest;
use ferrybus_batch::BoxBatchService;
use ferrybus_core::consume::ConsumeOutcome;
use ferrybus_core::consume::ConsumeRequest;
use ferrybus_core::ConsumeError;
use futures::future::BoxFuture;
use sea_orm::ConnectionTrait;
use tower::{Layer, Service, ServiceExt};
use tracing::Instrument;

use crate::consumer_outbox;
use crate::error::{StoreError, StoreErrorKind};
use crate::fast::{Connections, InboxTransaction};
use crate::inbox::flow::{after_commit, begin, claim, send_after_commit, Claim};
use crate::inbox::handoff::Committed;
use crate::inbox::layer::Shared;
use crate::inbox::sink::CaptureSink;
use crate::inbox::{Handoff, InboxConfig};
use crate::sql::{InboxKey, Sql, StoredRow};
use crate::telemetry::{count_duplicate, inbox_stage, timed};

/// The batch inbox as a tower layer over a batch pipeline (see the [module docs](self)).
#[derive(Clone, Debug)]
pub(crate) struct BatchInboxLayer {
    shared: Arc<Shared>,
}

impl BatchInboxLayer {
    pub(crate) fn new(
        connections: Arc<Connections>,
        config: InboxConfig,
        handoff: Arc<Handoff>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared::new(connections, config, handoff)),
        }
    }
}

impl Layer<BoxBatchService> for BatchInboxLayer {
    type Service = BatchInbox;

    fn layer(&self, inner: BoxBatchService) -> BatchInbox {
        BatchInbox {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The batch inbox service.
#[derive(Clone)]
pub(crate) struct BatchInbox {
    inner: BoxBatchService,
    shared: Arc<Shared>,
}

impl Service<BatchRequest> for BatchInbox {
    type Response = Vec<ConsumeOutcome>;
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<Vec<ConsumeOutcome>, ConsumeError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConsumeError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: BatchRequest) -> Self::Future {
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        let span = tracing::info_span!(
            target: "ferrybus::inbox",
            "batch_inbox",
            messages = request.items().len(),
            consumer = request.consumer().name(),
        );
        Box::pin(handle(shared, inner, request).instrument(span))
    }
}

fn key_of(shared: &Shared, request: &ConsumeRequest) -> Result<InboxKey, ConsumeError> {
    let Some(message_id) = request.received().original_message_id() else {
        let error = StoreError::new(
            StoreErrorKind::MissingMessageId,
            "the inbox needs a message id (a message of the batch has none)",
        );
        return Err(error.into_consume_error().into_permanent());
    };
    Ok(InboxKey {
        message_id,
        consumer_id: shared.consumer_id(request.consumer()),
    })
}

async fn handle(
    shared: Arc<Shared>,
    inner: BoxBatchService,
    mut request: BatchRequest,
) -> Result<Vec<ConsumeOutcome>, ConsumeError> {
    let keys = request
        .items()
        .iter()
        .map(|item| key_of(&shared, item))
        .collect::<Result<Vec<_>, _>>()?;
    let sql = shared.config.storage().sql();
    let (txn, claims) = timed(&inbox_stage::CLAIM, claim_all(&shared, sql, &keys))
        .await
        .map_err(StoreError::into_consume_error)?;
    let runs: Vec<bool> = claims
        .iter()
        .map(|c| matches!(c, Claim::Run { .. }))
        .collect();
    for (item, run) in request.items().iter().zip(&runs) {
        if !run {
            tracing::info!(
                target: "ferrybus::inbox",
                message_id = ?item.received().original_message_id(),
                consumer = item.consumer().name(),
                "duplicate message dropped from the batch"
            );
            count_duplicate(item);
        }
    }
    let outcomes: Vec<ConsumeOutcome> = runs
        .iter()
        .map(|&run| {
            if run {
                ConsumeOutcome::Consumed
            } else {
                ConsumeOutcome::Duplicate
            }
        })
        .collect();
    let kept: Vec<(InboxKey, bool)> = keys
        .iter()
        .zip(&claims)
        .filter_map(|(key, claim)| match claim {
            Claim::Run { row } => Some((*key, row.inserted())),
            _ => None,
        })
        .collect();
    let Some(&(last, _)) = kept.last() else {
        txn.commit().await.map_err(StoreError::into_consume_error)?;
        return Ok(outcomes);
    };
    request.retain(|i| runs[i]);

    let transport = request.context().sink().clone();
    let capture = CaptureSink::new();
    request.set_sink(Arc::new(capture.clone()));
    for item in request.requests_mut() {
        item.extensions_mut().insert(txn.clone());
    }
    let result = timed(&inbox_stage::CONSUME, inner.oneshot(request)).await;
    let messages = capture.take();
    if let Err(error) = result {
        txn.rollback().await;
        return Err(error);
    }
    let seqs = timed(
        &inbox_stage::COMMIT,
        commit(txn, sql, &kept, last, &messages),
    )
    .await
    .map_err(StoreError::into_consume_error)?;
    if messages.is_empty() {
        return Ok(outcomes);
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
    let rows = match shared.handoff.offer(Committed { key: last, rows }) {
        Ok(()) => return Ok(outcomes),
        Err(entry) => entry.rows,
    };
    let sent = timed(
        &inbox_stage::DELIVER,
        send_after_commit(&shared, &transport, last, rows),
    )
    .await;
    after_commit(&shared, last, sent, outcomes)
}

/// Begins the batch's transaction and claims every message's inbox row, in message-id order
/// (so two batches sharing messages lock alike).
async fn claim_all(
    shared: &Shared,
    sql: &Sql,
    keys: &[InboxKey],
) -> Result<(InboxTransaction, Vec<Claim>), StoreError> {
    let txn = begin(shared).await?;
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| keys[i].message_id);
    let mut claims = vec![Claim::Duplicate; keys.len()];
    for i in order {
        match claim(&txn, sql, keys[i], false).await {
            Ok(claimed) => claims[i] = claimed,
            Err(error) => return Err(txn.abort(error).await),
        }
    }
    Ok((txn, claims))
}

/// Writes the batch's outbox rows ([`write`]) and commits; returns their sequence numbers.
async fn commit(
    txn: InboxTransaction,
    sql: &Sql,
    kept: &[(InboxKey, bool)],
    last: InboxKey,
    messages: &[ferrybus_core::outgoing::OutgoingMessage],
) -> Result<Vec<i64>, StoreError> {
    let written = write(&txn, sql, kept, last, messages).await;
    txn.finish(written).await
}

/// Marks older unconsumed rows consumed (rows this transaction inserted are already), and
/// writes what the batch published under the last message's row.
async fn write(
    txn: &impl ConnectionTrait,
    sql: &Sql,
    kept: &[(InboxKey, bool)],
    last: InboxKey,
    messages: &[ferrybus_core::outgoing::OutgoingMessage],
) -> Result<Vec<i64>, StoreError> {
    let now = Utc::now();
    // The last row is marked by the outbox insert when the batch published something.
    let marked_by_insert = |key: InboxKey| key == last && !messages.is_empty();
    for &(key, inserted) in kept {
        if !inserted && !marked_by_insert(key) {
            txn.execute_raw(sql.inbox_consumed_delivered(key, now))
                .await?;
        }
    }
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    consumer_outbox::insert(txn, sql, last, messages, true).await
}
