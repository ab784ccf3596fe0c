//! [`PostgresStorage`]: the one value a bus needs for the inbox, the outboxes and the services
//! that keep them (MassTransit's `AddEntityFrameworkOutbox(o => o.UsePostgres())`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use ferrybus_core::resilience::Dependency;
use ferrybus_core::{Background, BoxBatchLayer, BoxConsumeLayer, BoxError, SharedSink, Storage};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use uuid::Uuid;

use crate::cleanup::{CleanupConfig, InboxCleanup};
use crate::config::Tables;
use crate::delivery::{DeliveryConfig, OutboxDeliveryService};
use crate::error::StoreError;
use crate::fast::{postgres_pool, Connections};
use crate::inbox::{BatchInboxLayer, Handoff, InboxConfig, InboxLayer};
use crate::migrate::Migrator;
use crate::settings::StorageConfig;

/// The inbox, consumer outbox and bus outbox on PostgreSQL, on MassTransit's tables: give it to a
/// bus builder (`.storage(PostgresStorage::new(db))`) and every endpoint that calls `.inbox()`
/// runs its consumers in one transaction per delivery; the bus runs the outbox delivery service,
/// the sweeper and the inbox cleanup while it runs, and stops them after its endpoints.
///
/// | setting | default | MassTransit |
/// |---|---|---|
/// | [`tables`](Self::tables) | schema `messaging`, `inbox_state` / `outbox_state` / `outbox_message`, snake_case | the `DbContext` model |
/// | [`migrate`](Self::migrate) | off: the tables must exist (a .NET service may have created them) | EF migrations |
/// | [`duplicate_window`](Self::duplicate_window) | 30 min | `DuplicateDetectionWindow` |
/// | [`poll_interval`](Self::poll_interval) | 1 s (besides `LISTEN`/`NOTIFY`) | `QueryDelay` |
/// | [`delivery_workers`](Self::delivery_workers) | 4 | — |
/// | [`deliver_before_ack`](Self::deliver_before_ack) | off: acknowledged after commit, sent by the after-commit sender | — |
/// | [`sweep_after`](Self::sweep_after) | 1 s | — |
///
/// The time column type (`timestamptz` or .NET's legacy `timestamp`) is read from the existing
/// tables when the bus starts.
///
/// ```no_run
/// use ferrybus_sea_orm::{NamingStyle, PostgresStorage, Tables};
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let db = sea_orm::Database::connect("postgres://postgres@localhost/app").await?;
/// let storage = PostgresStorage::new(db)
///     .tables(Tables::new().schema("billing_messaging").naming(NamingStyle::PascalCase))
///     .migrate(true)
///     .duplicate_window(std::time::Duration::from_secs(24 * 3600));
/// # let _ = storage; Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStorage {
    db: DatabaseConnection,
    tables: Tables,
    channel: Option<String>,
    notify_on_write: bool,
    migrate: bool,
    inbox: InboxConfig,
    delivery: Option<DeliveryConfig>,
    cleanup: Option<CleanupConfig>,
    deliver_before_ack: bool,
    /// The after-commit sender, shared by the clones a bus holds and their inbox layers.
    handoff: Arc<Handoff>,
    /// The connections inbox deliveries run on, kept between deliveries; shared likewise.
    connections: Arc<Connections>,
    /// The storage settings once the tables were looked at (the time column type). Shared by
    /// the clones a bus holds; changing the tables or the channel starts afresh.
    prepared: Arc<RwLock<Option<StorageConfig>>>,
}

impl std::fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStorage")
            .field("tables", &self.tables)
            .field("migrate", &self.migrate)
            .field("delivery", &self.delivery.is_some())
            .field("cleanup", &self.cleanup.is_some())
            .finish_non_exhaustive()
    }
}

impl PostgresStorage {
    /// Storage on `db` with the default tables (schema `messaging`, snake_case), outbox delivery
    /// and inbox cleanup on, migrations off.
    pub fn new(db: DatabaseConnection) -> Self {
        let base = StorageConfig::new(Tables::new());
        Self {
            tables: Tables::new(),
            channel: None,
            notify_on_write: true,
            migrate: false,
            inbox: InboxConfig::new(base.clone()),
            delivery: Some(DeliveryConfig::new(base.clone())),
            cleanup: Some(CleanupConfig::new(base)),
            deliver_before_ack: false,
            handoff: Arc::default(),
            connections: Arc::new(Connections::new(&db)),
            prepared: Arc::default(),
            db,
        }
    }

    /// Where the tables are and how they are named ([`Tables::dotnet_default`] for the shape
    /// EF Core creates with its default naming).
    pub fn tables(mut self, tables: Tables) -> Self {
        self.tables = tables;
        self.prepared = Arc::default();
        self
    }

    /// The `LISTEN`/`NOTIFY` channel the bus outbox signals new rows on (default
    /// `ferrybus_outbox.<schema>.<outbox_state>`, cut to 63 bytes).
    pub fn notify_channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = Some(channel.into());
        self.prepared = Arc::default();
        self
    }

    /// Whether every bus-outbox write sends a `NOTIFY` on the [channel](Self::notify_channel)
    /// (default `true`): an idle delivery service then sends the message within a few
    /// milliseconds of the commit.
    ///
    /// The price is paid by the writers. PostgreSQL serializes the commits of all transactions
    /// that sent a `NOTIFY`, in every database of the server, and holds that lock through the
    /// commit's WAL flush, so notifying transactions no longer share flushes (group commit).
    /// Measured with `pgbench` on PostgreSQL 15 (a 600-byte insert per transaction): 7 100
    /// commits/s without a `NOTIFY` against 4 100–4 500 with one at 4 clients, 9 700 against
    /// 3 700 at 16. A service whose many concurrent transactions each publish through the bus
    /// outbox can turn it off and let the delivery services find new rows by polling:
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrybus_sea_orm::PostgresStorage;
    /// # fn storage(db: sea_orm::DatabaseConnection) -> PostgresStorage {
    /// PostgresStorage::new(db)
    ///     .notify_on_write(false)
    ///     // messages wait up to this long after their commit
    ///     .poll_interval(Duration::from_millis(50))
    /// # }
    /// ```
    ///
    /// Delivery services keep listening either way: writers configured otherwise (another
    /// instance) still wake them.
    pub fn notify_on_write(mut self, enabled: bool) -> Self {
        self.notify_on_write = enabled;
        self.prepared = Arc::default();
        self
    }

    /// Whether starting the bus creates the tables when they are missing (idempotent, safe with
    /// several instances starting at once; tables a .NET service created are left alone).
    pub fn migrate(mut self, enabled: bool) -> Self {
        self.migrate = enabled;
        self
    }

    /// Derives the inbox consumer id of the consumer named `consumer` from the .NET consumer
    /// type (namespace qualified, e.g. `Billing.Consumers.InvoiceConsumer`), as MassTransit
    /// does, so a Rust and a .NET instance of one consumer dedupe against each other.
    pub fn dotnet_consumer(
        mut self,
        consumer: impl Into<String>,
        dotnet_type: impl Into<String>,
    ) -> Self {
        self.inbox = self.inbox.dotnet_consumer(consumer, dotnet_type);
        self
    }

    /// Like [`dotnet_consumer`](Self::dotnet_consumer), also naming the .NET message type.
    pub fn dotnet_consumer_of(
        mut self,
        consumer: impl Into<String>,
        dotnet_type: impl Into<String>,
        dotnet_message_type: impl Into<String>,
    ) -> Self {
        self.inbox = self
            .inbox
            .dotnet_consumer_of(consumer, dotnet_type, dotnet_message_type);
        self
    }

    /// Uses a fixed inbox consumer id for the consumer named `consumer`.
    pub fn consumer_id(mut self, consumer: impl Into<String>, id: Uuid) -> Self {
        self.inbox = self.inbox.consumer_id(consumer, id);
        self
    }

    /// Starts the sends of one outbox (consumer or bus outbox) in sequence order and awaits the
    /// confirms together, instead of one confirm before the next send (off by default). Only for
    /// transports that keep the start order of concurrent sends, including first sends to
    /// destinations still to be declared. After a failed send, later messages may have gone out
    /// already: they are sent again with the rest.
    pub fn pipelined_sends(mut self, enabled: bool) -> Self {
        self.inbox = self.inbox.pipelined(enabled);
        self.delivery = self.delivery.map(|d| d.pipelined(enabled));
        self
    }

    /// Commits the short transaction that records "sent" after a consumer's messages went out
    /// with `synchronous_commit = off` (off by default). The consumer's own transaction stays a
    /// durable commit; a PostgreSQL crash right after can only make messages go out twice,
    /// never lose them.
    pub fn async_delivered_commit(mut self, enabled: bool) -> Self {
        self.inbox = self.inbox.async_delivered_commit(enabled);
        self
    }

    /// Sends a publishing consumer's messages before its delivery is acknowledged, as
    /// MassTransit does (off by default).
    ///
    /// By default, while this instance runs the outbox delivery service (and so the sweeper),
    /// a delivery is acknowledged as soon as the consumer's transaction (its writes, the inbox
    /// row and its messages) has committed, and a per-instance sender sends the messages right
    /// after, batching the "sent" bookkeeping of many deliveries into one short transaction.
    /// If the process dies first, the messages are still in the tables, marked consumed and not
    /// delivered, and the sweeper of any instance sends them, in order, about a second later
    /// ([`sweep_after`](Self::sweep_after)). Nothing is acknowledged before it is committed;
    /// nothing is lost; the consumer never runs twice. With this on (or with the outbox
    /// delivery off in this instance) each delivery sends its own messages, then is
    /// acknowledged: a crash is completed by the broker's redelivery instead.
    pub fn deliver_before_ack(mut self, enabled: bool) -> Self {
        self.deliver_before_ack = enabled;
        self
    }

    /// Whether this instance runs the outbox delivery service and the sweeper (on by default;
    /// every instance should, they share the work).
    pub fn outbox_delivery(mut self, enabled: bool) -> Self {
        self.delivery = match (enabled, self.delivery.take()) {
            (true, Some(d)) => Some(d),
            (true, None) => Some(DeliveryConfig::new(StorageConfig::new(Tables::new()))),
            (false, _) => None,
        };
        self
    }

    /// How often the delivery service looks for rows when no notification arrives (1 s).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.delivery = self.delivery.map(|d| d.poll_interval(interval));
        self
    }

    /// How many delivery workers this instance runs, and how many passes may run at once on
    /// this outbox table across every instance (4). Each pass first takes one of this many
    /// advisory locks of the table (`pg_try_advisory_xact_lock(hashtext('<schema>.<OutboxState>'),
    /// 0..workers)`); a worker that finds none free waits for the next notification or poll. A
    /// second instance adds standby workers, not concurrent claims: each concurrent claim walks
    /// past the rows the others hold (`FOR UPDATE SKIP LOCKED`), so more of them deliver less.
    /// Each pass uses one connection while sending.
    pub fn delivery_workers(mut self, workers: usize) -> Self {
        self.delivery = self.delivery.map(|d| d.workers(workers));
        self
    }

    /// How many outboxes one worker claims per transaction (64).
    pub fn outboxes_per_claim(mut self, count: u64) -> Self {
        self.delivery = self.delivery.map(|d| d.outboxes_per_claim(count));
        self
    }

    /// How many messages of one outbox are sent per pass (100).
    pub fn messages_per_outbox(mut self, count: u64) -> Self {
        self.delivery = self.delivery.map(|d| d.messages_per_outbox(count));
        self
    }

    /// The back-off of an outbox whose send failed: `initial`, doubling up to `max` (1 s to
    /// 60 s).
    pub fn delivery_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.delivery = self.delivery.map(|d| d.retry_backoff(initial, max));
        self
    }

    /// Delivers consumer-outbox rows whose inbox row was consumed this long ago and is still not
    /// delivered, and that no delivery holds (a process died before sending them, or the
    /// inbound message went to the error queue); `None` turns the sweeper off (1 s). Rows a
    /// delivery or the after-commit sender is sending are locked and skipped.
    pub fn sweep_after(mut self, age: Option<Duration>) -> Self {
        self.delivery = self.delivery.map(|d| d.sweep_after(age));
        self
    }

    /// How often the sweeper looks (250 ms).
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.delivery = self.delivery.map(|d| d.sweep_interval(interval));
        self
    }

    /// Whether this instance runs the inbox cleanup (on by default).
    pub fn inbox_cleanup(mut self, enabled: bool) -> Self {
        self.cleanup = match (enabled, self.cleanup.take()) {
            (true, Some(c)) => Some(c),
            (true, None) => Some(CleanupConfig::new(StorageConfig::new(Tables::new()))),
            (false, _) => None,
        };
        self
    }

    /// How long delivered inbox rows are kept (MassTransit's `DuplicateDetectionWindow`, 30 min).
    /// It must cover every way a copy can still arrive: retries, redeliveries, time in an error
    /// queue before a replay. A copy arriving after its row was removed is processed again.
    pub fn duplicate_window(mut self, window: Duration) -> Self {
        self.cleanup = self.cleanup.map(|c| c.window(window));
        self
    }

    /// Inbox rows the cleanup deletes per statement (100).
    pub fn cleanup_batch_size(mut self, size: u64) -> Self {
        self.cleanup = self.cleanup.map(|c| c.batch_size(size));
        self
    }

    /// The pause between cleanup runs (10 s).
    pub fn cleanup_interval(mut self, interval: Duration) -> Self {
        self.cleanup = self.cleanup.map(|c| c.interval(interval));
        self
    }

    /// The connection pool.
    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    /// The tables as configured.
    pub fn table_names(&self) -> &Tables {
        &self.tables
    }

    /// The storage settings: as prepared (the time column type read from the tables) once
    /// [`Storage::prepare`] ran, as configured before.
    pub(crate) fn config(&self) -> StorageConfig {
        let prepared = self.prepared.read().unwrap_or_else(|e| e.into_inner());
        prepared.clone().unwrap_or_else(|| self.configured())
    }

    fn configured(&self) -> StorageConfig {
        let config = StorageConfig::new(self.tables.clone()).notify_on_write(self.notify_on_write);
        match &self.channel {
            Some(channel) => config.notify_channel(channel.clone()),
            None => config,
        }
    }

    fn delivery_service(&self, sink: SharedSink) -> Option<OutboxDeliveryService> {
        let config = self.delivery.clone()?.with_storage(self.config());
        Some(OutboxDeliveryService::new(self.db.clone(), sink, config))
    }

    /// One delivery pass through `sink`: claims up to the configured number of outboxes, sends
    /// them, deletes what was sent. Returns how many messages were sent. (The bus runs this in
    /// a loop; call it to drain an outbox by hand.)
    pub async fn deliver_once(&self, sink: SharedSink) -> Result<usize, StoreError> {
        let service = OutboxDeliveryService::new(
            self.db.clone(),
            sink,
            self.delivery
                .clone()
                .unwrap_or_else(|| DeliveryConfig::new(self.config()))
                .with_storage(self.config()),
        );
        service.deliver_once().await
    }

    /// One sweep through `sink`: delivers the consumer-outbox rows of inbox rows consumed more
    /// than `age` ago and not delivered. Returns how many inbox entries were completed.
    pub async fn sweep_once(&self, sink: SharedSink, age: Duration) -> Result<usize, StoreError> {
        let service =
            OutboxDeliveryService::new(self.db.clone(), sink, DeliveryConfig::new(self.config()));
        service.sweep_once(Some(age)).await
    }

    /// Deletes delivered inbox rows older than the duplicate-detection window until none is
    /// left; returns how many were removed.
    pub async fn cleanup_once(&self) -> Result<u64, StoreError> {
        let config = self
            .cleanup
            .clone()
            .unwrap_or_else(|| CleanupConfig::new(self.config()))
            .with_storage(self.config());
        InboxCleanup::new(self.db.clone(), config).run_once().await
    }
}

#[async_trait]
impl Storage for PostgresStorage {
    /// Checks that the connection is a PostgreSQL pool (a [`StoreErrorKind::Config`] error
    /// otherwise: `LISTEN` needs one), runs the migrations when asked, then reads the time column
    /// type of the inbox table.
    ///
    /// [`StoreErrorKind::Config`]: crate::StoreErrorKind::Config
    async fn prepare(&self) -> Result<(), BoxError> {
        postgres_pool(&self.db)?;
        if self.migrate {
            Migrator::new(self.tables.clone()).run(&self.db).await?;
        }
        let prepared = self.configured().detect(&self.db).await?;
        *self.prepared.write().unwrap_or_else(|e| e.into_inner()) = Some(prepared);
        Ok(())
    }

    fn inbox_layer(&self) -> BoxConsumeLayer {
        let config = self.inbox.clone().with_storage(self.config());
        BoxConsumeLayer::new(InboxLayer::new(
            self.connections.clone(),
            config,
            self.handoff.clone(),
        ))
    }

    fn batch_inbox_layer(&self) -> Option<BoxBatchLayer> {
        let config = self.inbox.clone().with_storage(self.config());
        Some(BoxBatchLayer::new(BatchInboxLayer::new(
            self.connections.clone(),
            config,
            self.handoff.clone(),
        )))
    }

    fn start(&self, sink: SharedSink) -> Background {
        // Acknowledge after commit only where the sweeper runs to cover a crash.
        let handoff = if self.delivery.is_some() && !self.deliver_before_ack {
            self.handoff.start(
                self.connections.clone(),
                self.config(),
                sink.clone(),
                self.inbox.is_pipelined(),
                self.inbox.is_async_delivered_commit(),
            )
        } else {
            Background::default()
        };
        let delivery = self
            .delivery_service(sink)
            .map(OutboxDeliveryService::spawn)
            .unwrap_or_default();
        let cleanup = self
            .cleanup
            .clone()
            .map(|c| InboxCleanup::new(self.db.clone(), c.with_storage(self.config())).spawn())
            .unwrap_or_default();
        let connections = self.connections.spawn_reaper();
        handoff.join(delivery).join(cleanup).join(connections)
    }

    /// Connection failures, pool timeouts and PostgreSQL shutting down or starting up (see
    /// [`is_transient`](crate::is_transient)): the endpoint pauses until the database answers.
    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> Option<Dependency> {
        crate::transient::is_transient(error)
    }

    /// `SELECT 1` within 5 seconds.
    async fn probe(&self) -> bool {
        let ping = self.db.execute_unprepared("SELECT 1");
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(5), ping).await,
            Ok(Ok(_))
        )
    }
}
