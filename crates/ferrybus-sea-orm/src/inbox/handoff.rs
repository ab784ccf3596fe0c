//! The after-commit sender: once a publishing consumer's transaction has committed, the inbox
//! hands its messages (already in memory, with their sequence numbers) to this per-instance
//! sender and the delivery is acknowledged at once. The sender takes whatever has piled up,
//! locks those inbox rows in one transaction (`FOR UPDATE SKIP LOCKED`), sends each entry's
//! messages in sequence order (entries concurrently), deletes the sent rows and marks the
//! entries delivered in one statement, and commits: the bookkeeping of many deliveries in one
//! short transaction.
//!
//! Nothing is lost when the process dies before or while sending: the rows are committed, the
//! inbox row says "consumed, not delivered", and the sweeper of any instance's delivery service
//! delivers them in order about a second later (`PostgresStorage::sweep_after`). A row the
//! sweeper or a redelivered copy holds is skipped here (`SKIP LOCKED`): whoever holds the lock
//! sends, and records what it sent before it lets go, so no message goes out twice from two
//! senders at once, and none out of order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use ferrybus_core::outgoing::SharedSink;
use ferrybus_core::storage::Background;
use futures::future::join_all;
use sea_orm::{ConnectionTrait, FromQueryResult};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::StoreError;
use crate::fast::{Connections, InboxTransaction};
use crate::send::send_in_order;
use crate::settings::Settings;
use crate::sql::{InboxKey, LockedInbox, StoredRow};
use crate::telemetry::{inbox_stage, timed, SendSource};

/// How many entries one pass takes at most.
const MAX_ENTRIES_PER_PASS: usize = 256;

/// A pass with fewer entries than this waits [`LINGER`] for more first.
const LINGER_BELOW: usize = 8;
const LINGER: std::time::Duration = std::time::Duration::from_millis(1);

/// How many committed entries may wait for the sender; when it is that far behind, deliveries
/// send their own messages before they are acknowledged (back-pressure on the consumers).
const QUEUE_CAPACITY: usize = 1024;

/// One committed entry waiting to be sent.
#[derive(Debug)]
pub(crate) struct Committed {
    pub(crate) key: InboxKey,
    pub(crate) rows: Vec<StoredRow>,
}

/// Where committed entries go: the sender's queue while it runs (set by the storage's
/// `start`), none before and after. Shared by every clone of a storage and its inbox layers.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    queue: Mutex<Option<mpsc::Sender<Committed>>>,
}

impl Handoff {
    /// Hands `entry` to the running sender; gives it back when there is none or its queue is
    /// full (the caller sends it itself, before acknowledging).
    pub(crate) fn offer(&self, entry: Committed) -> Result<(), Committed> {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        match queue.as_ref() {
            Some(tx) => tx.try_send(entry).map_err(|e| match e {
                mpsc::error::TrySendError::Full(entry)
                | mpsc::error::TrySendError::Closed(entry) => entry,
            }),
            None => Err(entry),
        }
    }

    /// Starts the sender through `sink`. Stopping it stops taking entries, sends what was
    /// handed over already, then ends.
    pub(crate) fn start(
        self: &Arc<Self>,
        connections: Arc<Connections>,
        settings: Arc<Settings>,
        sink: SharedSink,
    ) -> Background {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        *self.queue.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        let cancel = CancellationToken::new();
        let sender = Sender {
            connections,
            settings,
            sink,
        };
        let handoff = self.clone();
        let token = cancel.clone();
        let task = tokio::spawn(async move { sender.run(rx, handoff, token).await });
        Background::new(cancel, vec![task])
    }

    fn close(&self) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// Takes what is queued, up to [`MAX_ENTRIES_PER_PASS`] in all.
fn drain(rx: &mut mpsc::Receiver<Committed>, batch: &mut Vec<Committed>) {
    while batch.len() < MAX_ENTRIES_PER_PASS {
        match rx.try_recv() {
            Ok(entry) => batch.push(entry),
            Err(_) => break,
        }
    }
}

struct Sender {
    /// The inbox's kept connections: a pass runs its transaction as a delivery does
    /// ([`InboxTransaction`]), without a trip through the pool.
    connections: Arc<Connections>,
    settings: Arc<Settings>,
    sink: SharedSink,
}

impl Sender {
    async fn run(
        self,
        mut rx: mpsc::Receiver<Committed>,
        handoff: Arc<Handoff>,
        cancel: CancellationToken,
    ) {
        loop {
            let first = tokio::select! {
                entry = rx.recv() => entry,
                _ = cancel.cancelled() => {
                    // No new entries; what is queued is still sent.
                    handoff.close();
                    rx.close();
                    rx.recv().await
                }
            };
            let Some(first) = first else { return };
            let mut batch = vec![first];
            drain(&mut rx, &mut batch);
            if batch.len() < LINGER_BELOW && !cancel.is_cancelled() {
                // A short pause lets the deliveries finishing now join this pass: each pass
                // costs the same four statements, however many entries it records.
                tokio::time::sleep(LINGER).await;
                drain(&mut rx, &mut batch);
            }
            let count = batch.len();
            if let Err(error) = timed(&inbox_stage::HANDOFF, self.pass(batch)).await {
                // The rows stay committed; the sweeper delivers them.
                tracing::warn!(
                    target: "ferrybus::inbox",
                    %error,
                    entries = count,
                    "sending committed consumer-outbox messages failed; the sweeper will retry"
                );
            }
        }
    }

    /// One transaction: lock the entries still undelivered (skipping those someone else
    /// holds), send, record, commit.
    async fn pass(&self, batch: Vec<Committed>) -> Result<(), StoreError> {
        let txn = InboxTransaction::begin(&self.connections).await?;
        let result = self.send_and_record(&txn, batch).await;
        txn.finish(result).await
    }

    /// The body of a [`Sender::pass`], in its transaction `txn`.
    async fn send_and_record(
        &self,
        txn: &InboxTransaction,
        batch: Vec<Committed>,
    ) -> Result<(), StoreError> {
        let sql = self.settings.sql();
        let async_commit = self.settings.inbox.async_delivered_commit;
        let keys: Vec<InboxKey> = batch.iter().map(|c| c.key).collect();
        let locked = txn
            .query_all_raw(sql.inbox_lock_many(&keys, async_commit))
            .await?;
        let mut after: HashMap<InboxKey, i64> = HashMap::with_capacity(locked.len());
        for row in &locked {
            let row = LockedInbox::from_query_result(row, "")?;
            after.insert(
                InboxKey {
                    message_id: row.message_id,
                    consumer_id: row.consumer_id,
                },
                row.last_sequence_number.unwrap_or(0),
            );
        }
        let sends = batch.into_iter().filter_map(|entry| {
            let after = *after.get(&entry.key)?;
            let rows: Vec<StoredRow> = entry.rows.into_iter().filter(|r| r.seq > after).collect();
            let last = rows.last().map(|r| r.seq);
            Some(async move {
                let pipelined = self.settings.pipelined_sends;
                let outcome =
                    send_in_order(&self.sink, rows, pipelined, SendSource::Consumer).await;
                (entry.key, last, outcome)
            })
        });
        let results = join_all(sends).await;
        let mut complete = Vec::with_capacity(results.len());
        let now = Utc::now();
        for (key, last, outcome) in results {
            match outcome.error {
                None => complete.push((key, last)),
                Some(error) => {
                    tracing::warn!(
                        target: "ferrybus::inbox",
                        message_id = %key.message_id,
                        consumer_id = %key.consumer_id,
                        %error,
                        "sending a consumer-outbox message failed; the sweeper will retry"
                    );
                    if outcome.processed_upto.is_some() {
                        txn.execute_raw(sql.inbox_finish(
                            key,
                            now,
                            outcome.processed_upto,
                            uuid::Uuid::new_v4(),
                            false,
                        ))
                        .await?;
                    }
                }
            }
        }
        if !complete.is_empty() {
            txn.execute_raw(sql.inbox_finish_many(&complete, now, uuid::Uuid::new_v4()))
                .await?;
        }
        Ok(())
    }
}
