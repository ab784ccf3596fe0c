//! One delivery pass: claim outboxes, send their messages in order, delete what was sent.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DatabaseTransaction};
use uuid::Uuid;

use crate::delivery::OutboxDeliveryService;
use crate::error::StoreError;
use crate::send::send_in_order;
use crate::sql::{begin_read_committed, int_array, read_message, stmt, uuid_array, StoredRow};
use crate::telemetry::{timed, OUTBOX_STAGE_SECONDS as STAGE};

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

/// What to write back after sending.
#[derive(Default)]
struct Results {
    complete: Vec<Uuid>,
    sent_seqs: Vec<i64>,
    progress: Vec<(Uuid, i64)>,
}

struct Claimed {
    outbox_id: Uuid,
    delivered: bool,
}

impl OutboxDeliveryService {
    pub(crate) async fn deliver_batch(&self) -> Result<BatchOutcome, StoreError> {
        let txn = begin_read_committed(&self.db).await?;
        let claimed = timed(STAGE, "claim", self.claim(&txn)).await?;
        if claimed.is_empty() {
            txn.commit().await?;
            return Ok(BatchOutcome::default());
        }
        let ids: Vec<Uuid> = claimed.iter().map(|c| c.outbox_id).collect();
        let mut rows = timed(STAGE, "load", self.load(&txn, &ids)).await?;
        let mut outcome = BatchOutcome {
            claimed: claimed.len(),
            ..BatchOutcome::default()
        };
        let mut results = Results::default();
        for outbox in claimed {
            let outbox_rows = rows.remove(&outbox.outbox_id).unwrap_or_default();
            if outbox.delivered {
                // Delivered by a .NET pass that did not get to delete it: remove it.
                results.complete.push(outbox.outbox_id);
                continue;
            }
            self.send_outbox(outbox.outbox_id, outbox_rows, &mut results, &mut outcome)
                .await;
        }
        timed(STAGE, "finish", self.finish(&txn, &results)).await?;
        timed(STAGE, "commit", txn.commit()).await?;
        Ok(outcome)
    }

    async fn claim(&self, txn: &DatabaseTransaction) -> Result<Vec<Claimed>, StoreError> {
        let sql = self.config.storage.sql();
        let excluded = uuid_array(&self.backoff.excluded());
        let limit = i64::try_from(self.config.outboxes_per_claim).unwrap_or(i64::MAX);
        let rows = txn
            .query_all(stmt(&sql.claim_outboxes, [excluded.into(), limit.into()]))
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Claimed {
                    outbox_id: row.try_get("", "outbox_id")?,
                    delivered: row.try_get("", "delivered")?,
                })
            })
            .collect()
    }

    /// The unsent messages of the claimed outboxes, grouped, in sequence order.
    async fn load(
        &self,
        txn: &DatabaseTransaction,
        ids: &[Uuid],
    ) -> Result<HashMap<Uuid, Vec<StoredRow>>, StoreError> {
        let sql = self.config.storage.sql();
        let per_outbox = i64::try_from(self.config.messages_per_outbox).unwrap_or(i64::MAX);
        let rows = txn
            .query_all(stmt(
                &sql.outbox_messages,
                [uuid_array(ids).into(), per_outbox.into()],
            ))
            .await?;
        let mut grouped: HashMap<Uuid, Vec<StoredRow>> = HashMap::new();
        for row in &rows {
            let stored = read_message(row)?;
            if let Some(id) = stored.outbox_id {
                grouped.entry(id).or_default().push(stored);
            }
        }
        Ok(grouped)
    }

    async fn send_outbox(
        &self,
        id: Uuid,
        mut rows: Vec<StoredRow>,
        results: &mut Results,
        outcome: &mut BatchOutcome,
    ) {
        let limit = usize::try_from(self.config.messages_per_outbox).unwrap_or(usize::MAX);
        let complete = rows.len() <= limit;
        rows.truncate(limit);
        let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        let sent = send_in_order(&self.sink, rows, self.config.pipelined, "bus").await;
        outcome.sent += sent.sent;
        match (sent.error, complete) {
            (None, true) => {
                self.backoff.succeeded(id);
                results.complete.push(id);
            }
            (None, false) => {
                self.backoff.succeeded(id);
                results.sent_seqs.extend(&seqs);
                results.progress.push((id, *seqs.last().unwrap_or(&0)));
            }
            (Some(error), _) => {
                outcome.failed += 1;
                let delay = self.backoff.failed(id);
                tracing::warn!(
                    target: "ferrybus::outbox",
                    outbox_id = %id,
                    %error,
                    retry_in = ?delay,
                    "sending an outbox message failed; backing off this outbox"
                );
                if let Some(upto) = sent.processed_upto {
                    results
                        .sent_seqs
                        .extend(seqs.iter().filter(|s| **s <= upto));
                    results.progress.push((id, upto));
                }
            }
        }
    }

    /// Deletes sent messages, then completed states (children first, for the foreign keys),
    /// and records progress of partly sent outboxes.
    async fn finish(&self, txn: &DatabaseTransaction, results: &Results) -> Result<(), StoreError> {
        let sql = self.config.storage.sql();
        if !results.complete.is_empty() || !results.sent_seqs.is_empty() {
            let values = [
                uuid_array(&results.complete).into(),
                int_array(&results.sent_seqs).into(),
            ];
            txn.execute(stmt(&sql.delete_outbox_messages, values))
                .await?;
        }
        if !results.complete.is_empty() {
            let values = [uuid_array(&results.complete).into()];
            txn.execute(stmt(&sql.delete_outbox_states, values)).await?;
        }
        for (id, seq) in &results.progress {
            txn.execute(stmt(&sql.outbox_progress, [(*id).into(), (*seq).into()]))
                .await?;
        }
        Ok(())
    }
}
