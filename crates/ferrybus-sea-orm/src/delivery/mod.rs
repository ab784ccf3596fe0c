//! [`OutboxDeliveryService`]: sends bus-outbox rows after commit, in every instance.

pub(crate) mod batch;
pub(crate) mod listener;

use std::sync::Arc;
use std::time::Duration;

use ferrybus_core::outgoing::SharedSink;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use ferrybus_core::storage::Background;

use crate::background::sleep_or_cancel;
use crate::error::StoreError;
use crate::fast::{postgres_pool, Begin};
use crate::settings::{DeliverySettings, Settings};
use crate::sql::InboxKey;
use crate::sweeper;

use crate::backoff::Backoff;

/// Delivers bus-outbox rows (ferrybus's and .NET's) through a sink, typically the broker
/// transport. Run one in every instance: workers claim outboxes with `FOR UPDATE SKIP LOCKED`,
/// so instances share the work; `LISTEN`/`NOTIFY` wakes them right after a commit anywhere.
///
#[derive(Clone)]
pub(crate) struct OutboxDeliveryService {
    pub(crate) db: DatabaseConnection,
    pub(crate) sink: SharedSink,
    pub(crate) settings: Arc<Settings>,
    pub(crate) backoff: Arc<Backoff<Uuid>>,
    /// The sweeper's back-off of consumer-outbox entries, shared by the storage's clones (so a
    /// `sweep_once` by hand sees what the running sweeper set aside).
    pub(crate) sweep_backoff: Arc<Backoff<InboxKey>>,
    pub(crate) begin: Arc<Begin>,
}

impl std::fmt::Debug for OutboxDeliveryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxDeliveryService")
            .field("delivery", &self.settings.delivery)
            .finish_non_exhaustive()
    }
}

impl OutboxDeliveryService {
    /// A service sending through `sink`, with the delivery settings of `settings`.
    pub(crate) fn new(
        db: DatabaseConnection,
        sink: SharedSink,
        settings: Arc<Settings>,
        sweep_backoff: Arc<Backoff<InboxKey>>,
    ) -> Self {
        let backoff = Arc::new(Backoff::of(&settings.delivery));
        Self {
            db,
            sink,
            settings,
            backoff,
            sweep_backoff,
            begin: Arc::new(Begin::new()),
        }
    }

    /// The delivery settings.
    pub(crate) fn config(&self) -> &DeliverySettings {
        &self.settings.delivery
    }

    /// Starts the listener, the workers and the sweeper.
    pub(crate) fn spawn(self) -> Background {
        let cancel = CancellationToken::new();
        // Notifications and "claimed a full batch" both wake one idle worker.
        let wake = Arc::new(Notify::new());
        let mut tasks = Vec::new();
        match postgres_pool(&self.db) {
            Ok(pool) => {
                let channel = self.settings.channel().to_owned();
                tasks.push(tokio::spawn(listener::listen(
                    pool,
                    channel,
                    wake.clone(),
                    cancel.clone(),
                )));
            }
            Err(error) => tracing::error!(
                target: "ferrybus::outbox",
                %error,
                "no LISTEN on this connection; the outbox delivery only polls"
            ),
        }
        for _ in 0..self.config().workers {
            tasks.push(tokio::spawn(
                self.clone().work(wake.clone(), cancel.clone()),
            ));
        }
        if let Some(age) = self.config().sweep_after {
            tasks.push(tokio::spawn(self.clone().sweep_loop(age, cancel.clone())));
        }
        Background::new(cancel, tasks)
    }

    /// One pass: claims up to `outboxes_per_claim` outboxes and sends them. Returns how many
    /// messages were sent.
    pub(crate) async fn deliver_once(&self) -> Result<usize, StoreError> {
        self.deliver_batch().await.map(|o| o.sent)
    }

    /// One sweep: delivers the consumer-outbox rows of inbox rows consumed more than `age` ago,
    /// not delivered and held by no delivery (see [`DeliverySettings::sweep_after`]). Returns
    /// how many inbox entries were completed.
    pub(crate) async fn sweep_once(&self, age: Duration) -> Result<usize, StoreError> {
        sweeper::sweep(
            &self.db,
            &self.begin,
            self.settings.sql(),
            &self.sink,
            &self.sweep_backoff,
            age,
        )
        .await
    }

    /// One worker: a pass, then another at once while passes find work, else it waits for
    /// `wake` (a notification, or a worker that claimed a full batch) or the poll interval.
    async fn work(self, wake: Arc<Notify>, cancel: CancellationToken) {
        let config = self.config();
        let mut error_delay = config.backoff_initial;
        let full = usize::try_from(config.outboxes_per_claim).unwrap_or(usize::MAX);
        while !cancel.is_cancelled() {
            match self.deliver_batch().await {
                Ok(outcome) if outcome.claimed > 0 && outcome.failed < outcome.claimed => {
                    if outcome.claimed >= full {
                        // More is probably waiting: bring in one more worker.
                        wake.notify_one();
                    }
                }
                Ok(outcome) if outcome.claimed > 0 => {
                    sleep_or_cancel(config.backoff_initial, &cancel).await;
                }
                Ok(_) => {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = wake.notified() => {}
                        _ = tokio::time::sleep(config.poll_interval) => {}
                    }
                }
                Err(error) => {
                    tracing::warn!(target: "ferrybus::outbox", %error, "outbox delivery pass failed");
                    sleep_or_cancel(error_delay, &cancel).await;
                    error_delay = (error_delay * 2).min(config.backoff_max);
                    continue;
                }
            }
            error_delay = config.backoff_initial;
        }
    }

    async fn sweep_loop(self, age: Duration, cancel: CancellationToken) {
        while sleep_or_cancel(self.config().sweep_interval, &cancel).await {
            if let Err(error) = self.sweep_once(age).await {
                tracing::warn!(target: "ferrybus::outbox", %error, "outbox sweep failed");
            }
        }
    }
}
