//! One delivery pass: claim outboxes, send their messages in order, delete what was sent.

use futures::future::join_all;
use sea_orm::{ConnectionTrait, DatabaseTransaction, FromQueryResult, IdenStatic};
use uuid::Uuid;

use crate::delivery::OutboxDeliveryService;
use crate::entity::outbox_message::Column as MessageColumn;
use crate::error::StoreError;
use crate::send::send_in_order;
use crate::sql::{read_message, ClaimedOutbox, StoredRow};
use crate::telemetry::{count_set_aside, outbox_stage, timed, SendSource};

/// One claimed outbox and its unsent messages of this pass.
struct Claimed {
    outbox: ClaimedOutbox,
    rows: Vec<StoredRow>,
}

/// What one pass did.
#[derive(Debug, Default)]
pub(crate) struct BatchOutcome {
    /// Outboxes claimed.
    pub(crate) claimed: usize,
    /// Outboxes whose send failed.
    pub(crate) failed: usize,
    /// Messages sent.
    pub(crate) sent: usize,
}

/// What sending one claimed outbox achieved, and what to write back for it.
#[derive(Debug, PartialEq, Eq)]
enum OutboxResult {
    /// Every message sent (or the outbox was already delivered): delete its rows and state.
    Complete { sent: usize },
    /// The pass's share sent, more remain: delete the sent rows, record progress.
    Partial { sent: usize, seqs: Vec<i64> },
    /// A send failed; the rows up to the failure (if any) were sent.
    Failed { sent: usize, seqs: Vec<i64> },
}

/// What to write back after sending, gathered from the per-outbox results.
#[derive(Default)]
struct Results {
    complete: Vec<Uuid>,
    sent_seqs: Vec<i64>,
    progress: Vec<(Uuid, i64)>,
}

impl Results {
    fn add(&mut self, id: Uuid, result: OutboxResult, outcome: &mut BatchOutcome) {
        match result {
            OutboxResult::Complete { sent } => {
                outcome.sent += sent;
                self.complete.push(id);
            }
            OutboxResult::Partial { sent, seqs } | OutboxResult::Failed { sent, seqs } => {
                outcome.sent += sent;
                if let Some(last) = seqs.last() {
                    self.progress.push((id, *last));
                }
                self.sent_seqs.extend(seqs);
            }
        }
    }
}

impl OutboxDeliveryService {
    pub(crate) async fn deliver_batch(&self) -> Result<BatchOutcome, StoreError> {
        let txn = self.begin.read_committed(&self.db).await?;
        let mut claimed = timed(&outbox_stage::CLAIM, self.claim(&txn)).await?;
        // The excluded list was read before the claim: an outbox another worker backed off in
        // between was claimed anyway. Leave it alone (it stays locked until this commit).
        claimed.retain(|c| !self.backoff.is_backed_off(c.outbox.outbox_id));
        if claimed.is_empty() {
            txn.commit().await?;
            return Ok(BatchOutcome::default());
        }
        let mut outcome = BatchOutcome {
            claimed: claimed.len(),
            ..BatchOutcome::default()
        };
        // Outboxes are independent: send them concurrently, each strictly in order.
        let sends = claimed.into_iter().map(|Claimed { outbox, rows }| {
            async move {
                let result = if outbox.delivered {
                    // Delivered by a .NET pass that did not get to delete it: remove it.
                    OutboxResult::Complete { sent: 0 }
                } else {
                    self.send_outbox(outbox.outbox_id, rows).await
                };
                (outbox.outbox_id, result)
            }
        });
        let sent = timed(&outbox_stage::SEND, join_all(sends)).await;
        let mut results = Results::default();
        for (id, result) in sent {
            if matches!(result, OutboxResult::Failed { .. }) {
                outcome.failed += 1;
            }
            results.add(id, result, &mut outcome);
        }
        timed(&outbox_stage::FINISH, self.finish(&txn, &results)).await?;
        timed(&outbox_stage::COMMIT, txn.commit()).await?;
        Ok(outcome)
    }

    /// Claims outboxes and reads their unsent messages (one statement), grouped per outbox in
    /// sequence order.
    async fn claim(&self, txn: &DatabaseTransaction) -> Result<Vec<Claimed>, StoreError> {
        let config = self.config();
        let statement = self.settings.sql().claim_outboxes(
            &self.backoff.excluded(),
            config.outboxes_per_claim,
            config.messages_per_outbox,
            u32::try_from(config.workers).unwrap_or(u32::MAX),
        );
        let rows = txn.query_all_raw(statement).await?;
        // A claimed outbox with no message left comes as one row whose message is NULL.
        let sequence_number = MessageColumn::SequenceNumber.as_str();
        let mut claimed: Vec<Claimed> = Vec::new();
        for row in &rows {
            let outbox = ClaimedOutbox::from_query_result(row, "")?;
            let message = match row.try_get::<Option<i64>>("", sequence_number)? {
                Some(_) => Some(read_message(row)?),
                None => None,
            };
            // Rows come ordered by outbox, then sequence number.
            match claimed.last_mut() {
                Some(last) if last.outbox.outbox_id == outbox.outbox_id => {
                    last.rows.extend(message);
                }
                _ => claimed.push(Claimed {
                    outbox,
                    rows: message.into_iter().collect(),
                }),
            }
        }
        Ok(claimed)
    }

    /// Sends one outbox's rows of this pass in sequence order (pipelined when configured) and
    /// records success or failure in the back-off.
    async fn send_outbox(&self, id: Uuid, mut rows: Vec<StoredRow>) -> OutboxResult {
        let limit = usize::try_from(self.config().messages_per_outbox).unwrap_or(usize::MAX);
        let complete = rows.len() <= limit;
        rows.truncate(limit);
        let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        let pipelined = self.settings.pipelined_sends;
        let outcome = send_in_order(&self.sink, rows, pipelined, SendSource::Bus).await;
        match (outcome.error, complete) {
            (None, true) => {
                self.backoff.succeeded(id);
                OutboxResult::Complete { sent: outcome.sent }
            }
            (None, false) => {
                self.backoff.succeeded(id);
                OutboxResult::Partial {
                    sent: outcome.sent,
                    seqs,
                }
            }
            (Some(error), _) => {
                let failure = self.backoff.failed(id);
                if failure.set_aside {
                    count_set_aside("bus");
                    tracing::error!(
                        target: "ferrybus::outbox",
                        outbox_id = %id,
                        %error,
                        failures = failure.failures,
                        retry_in = ?failure.delay,
                        "an outbox keeps failing; set aside (the others are delivered), \
                         see `ferrybus outbox status`"
                    );
                } else {
                    tracing::warn!(
                        target: "ferrybus::outbox",
                        outbox_id = %id,
                        %error,
                        retry_in = ?failure.delay,
                        "sending an outbox message failed; backing off this outbox"
                    );
                }
                let seqs = match outcome.processed_upto {
                    Some(upto) => seqs.into_iter().filter(|s| *s <= upto).collect(),
                    None => Vec::new(),
                };
                OutboxResult::Failed {
                    sent: outcome.sent,
                    seqs,
                }
            }
        }
    }

    /// Deletes sent messages, then completed states (children first, for the foreign keys),
    /// and records progress of partly sent outboxes.
    async fn finish(&self, txn: &DatabaseTransaction, results: &Results) -> Result<(), StoreError> {
        let sql = self.settings.sql();
        if !results.complete.is_empty() || !results.sent_seqs.is_empty() {
            txn.execute_raw(sql.delete_outbox_messages(&results.complete, &results.sent_seqs))
                .await?;
        }
        if !results.complete.is_empty() {
            txn.execute_raw(sql.delete_outbox_states(&results.complete))
                .await?;
        }
        for (id, seq) in &results.progress {
            txn.execute_raw(sql.outbox_progress(*id, *seq)).await?;
        }
        Ok(())
    }
}
