//! [`OutboxDeliveryService`]: sends bus-outbox rows after commit, in every instance.

mod backoff;
mod batch;
pub(crate) mod listener;

use std::sync::Arc;
use std::time::Duration;

use ferrybus_core::SharedSink;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use ferrybus_core::Background;

use crate::background::sleep_or_cancel;
use crate::error::StoreError;
use crate::fast::{postgres_pool, Begin};
use crate::settings::StorageConfig;
use crate::sweeper;

use backoff::Backoff;

/// Settings of the [`OutboxDeliveryService`].
///
#[derive(Clone, Debug)]
pub(crate) struct DeliveryConfig {
    pub(crate) storage: StorageConfig,
    pub(crate) poll_interval: Duration,
    pub(crate) workers: usize,
    pub(crate) outboxes_per_claim: u64,
    pub(crate) messages_per_outbox: u64,
    pub(crate) pipelined: bool,
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) sweep_after: Option<Duration>,
    pub(crate) sweep_interval: Duration,
    pub(crate) sweep_batch: u64,
}

impl DeliveryConfig {
    /// Defaults: poll every 1 s (besides `LISTEN`), 4 workers, 64 outboxes per claim, 100
    /// messages per outbox and pass, pipelined sends (see [`DeliveryConfig::pipelined`]),
    /// back-off 1 s doubling to 60 s, and a sweeper for consumer-outbox rows stranded for 1 s
    /// (checked every 250 ms).
    pub(crate) fn new(storage: StorageConfig) -> Self {
        Self {
            storage,
            poll_interval: Duration::from_secs(1),
            workers: 4,
            outboxes_per_claim: 64,
            messages_per_outbox: 100,
            pipelined: false,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            sweep_after: Some(Duration::from_secs(1)),
            sweep_interval: Duration::from_millis(250),
            sweep_batch: 32,
        }
    }

    /// The same settings on other tables.
    pub(crate) fn with_storage(mut self, storage: StorageConfig) -> Self {
        self.storage = storage;
        self
    }

    /// How often to look for rows when no notification arrives.
    pub(crate) fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How many workers claim outboxes concurrently (each uses one connection while sending),
    /// and how many passes may run at once on the outbox table across every instance (each
    /// pass takes one of `workers` advisory locks of the table in its claim; see
    /// `Sql::claim_outboxes`). A `NOTIFY` wakes one idle worker (so a commit does not wait for
    /// a busy worker's pass to end), and a worker that claims a full batch wakes one more: a
    /// burst brings in every worker, a trickle one at a time.
    pub(crate) fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// How many outboxes one worker claims per transaction (default 64). Their sends run
    /// concurrently, so a larger claim amortises the pass's fixed SQL (begin, claim, load,
    /// delete, commit) over more messages; the rows of a claim stay locked until its pass
    /// commits.
    pub(crate) fn outboxes_per_claim(mut self, count: u64) -> Self {
        self.outboxes_per_claim = count.max(1);
        self
    }

    /// How many messages of one outbox are sent per pass.
    pub(crate) fn messages_per_outbox(mut self, count: u64) -> Self {
        self.messages_per_outbox = count.max(1);
        self
    }

    /// Starts every send of an outbox's pass in order and awaits the confirms together; by
    /// default (`false`) each confirm is awaited before the next send. Pipelining requires a sink
    /// that keeps publish order for sends started one after another, including the first send to
    /// a destination it still has to declare — verify that for your transport before turning it
    /// on. After a failure, later messages of that outbox may have gone out before
    /// it: they are sent again. The outboxes of one claim are always sent concurrently (they are
    /// independent); the messages of one outbox always in sequence order.
    pub(crate) fn pipelined(mut self, enabled: bool) -> Self {
        self.pipelined = enabled;
        self
    }

    /// The back-off of an outbox whose send failed: `initial`, doubling up to `max`.
    pub(crate) fn retry_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff_initial = initial;
        self.backoff_max = max.max(initial);
        self
    }

    /// Deliver consumer-outbox rows whose inbox row was consumed this long ago and is still not
    /// delivered (the inbound message went to the error queue); `None` turns the sweeper off.
    pub(crate) fn sweep_after(mut self, age: Option<Duration>) -> Self {
        self.sweep_after = age;
        self
    }

    /// How often the sweeper looks.
    pub(crate) fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
    }
}

/// Delivers bus-outbox rows (ferrybus's and .NET's) through a sink, typically the broker
/// transport. Run one in every instance: workers claim outboxes with `FOR UPDATE SKIP LOCKED`,
/// so instances share the work; `LISTEN`/`NOTIFY` wakes them right after a commit anywhere.
///
#[derive(Clone)]
pub(crate) struct OutboxDeliveryService {
    pub(crate) db: DatabaseConnection,
    pub(crate) sink: SharedSink,
    pub(crate) config: DeliveryConfig,
    pub(crate) backoff: Arc<Backoff>,
    pub(crate) begin: Arc<Begin>,
}

impl std::fmt::Debug for OutboxDeliveryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxDeliveryService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OutboxDeliveryService {
    /// A service sending through `sink`.
    pub(crate) fn new(db: DatabaseConnection, sink: SharedSink, config: DeliveryConfig) -> Self {
        let backoff = Arc::new(Backoff::new(config.backoff_initial, config.backoff_max));
        Self {
            db,
            sink,
            config,
            backoff,
            begin: Arc::new(Begin::new()),
        }
    }

    /// Starts the listener, the workers and the sweeper.
    pub(crate) fn spawn(self) -> Background {
        let cancel = CancellationToken::new();
        // Notifications and "claimed a full batch" both wake one idle worker.
        let wake = Arc::new(Notify::new());
        let mut tasks = Vec::new();
        match postgres_pool(&self.db) {
            Ok(pool) => {
                let channel = self.config.storage.channel().to_owned();
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
        for _ in 0..self.config.workers {
            tasks.push(tokio::spawn(
                self.clone().work(wake.clone(), cancel.clone()),
            ));
        }
        if self.config.sweep_after.is_some() {
            tasks.push(tokio::spawn(self.clone().sweep_loop(cancel.clone())));
        }
        Background::new(cancel, tasks)
    }

    /// One pass: claims up to `outboxes_per_claim` outboxes and sends them. Returns how many
    /// messages were sent.
    pub(crate) async fn deliver_once(&self) -> Result<usize, StoreError> {
        self.deliver_batch().await.map(|o| o.sent)
    }

    /// One sweep: delivers stranded consumer-outbox rows (see
    /// [`DeliveryConfig::sweep_after`]); `age` overrides the configured age. Returns how many
    /// inbox entries were completed.
    pub(crate) async fn sweep_once(
        &self,
        age: Option<std::time::Duration>,
    ) -> Result<usize, StoreError> {
        let age = age
            .or(self.config.sweep_after)
            .unwrap_or(Duration::from_secs(300));
        sweeper::sweep(
            &self.db,
            &self.begin,
            self.config.storage.sql(),
            &self.sink,
            age,
            self.config.sweep_batch,
        )
        .await
    }

    /// One worker: a pass, then another at once while passes find work, else it waits for
    /// `wake` (a notification, or a worker that claimed a full batch) or the poll interval.
    async fn work(self, wake: Arc<Notify>, cancel: CancellationToken) {
        let mut error_delay = self.config.backoff_initial;
        let full = usize::try_from(self.config.outboxes_per_claim).unwrap_or(usize::MAX);
        while !cancel.is_cancelled() {
            match self.deliver_batch().await {
                Ok(outcome) if outcome.claimed > 0 && outcome.failed < outcome.claimed => {
                    if outcome.claimed >= full {
                        // More is probably waiting: bring in one more worker.
                        wake.notify_one();
                    }
                }
                Ok(outcome) if outcome.claimed > 0 => {
                    sleep_or_cancel(self.config.backoff_initial, &cancel).await;
                }
                Ok(_) => {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = wake.notified() => {}
                        _ = tokio::time::sleep(self.config.poll_interval) => {}
                    }
                }
                Err(error) => {
                    tracing::warn!(target: "ferrybus::outbox", %error, "outbox delivery pass failed");
                    sleep_or_cancel(error_delay, &cancel).await;
                    error_delay = (error_delay * 2).min(self.config.backoff_max);
                    continue;
                }
            }
            error_delay = self.config.backoff_initial;
        }
    }

    async fn sweep_loop(self, cancel: CancellationToken) {
        while sleep_or_cancel(self.config.sweep_interval, &cancel).await {
            if let Err(error) = self.sweep_once(None).await {
                tracing::warn!(target: "ferrybus::outbox", %error, "outbox sweep failed");
            }
        }
    }
}
