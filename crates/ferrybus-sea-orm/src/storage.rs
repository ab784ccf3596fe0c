//! [`PostgresStorage`]: the one value a bus needs for the inbox, the outboxes and the services
//! that keep them (MassTransit's `AddEntityFrameworkOutbox(o => o.UsePostgres())`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use ferrybus_core::consume::BoxConsumeLayer;
use ferrybus_core::error::BoxError;
use ferrybus_core::outgoing::SharedSink;
use ferrybus_core::pause::Dependency;
use ferrybus_core::storage::Background;
use ferrybus_core::storage::Storage;
use sea_orm::{ConnectionTrait, DatabaseConnection};
use uuid::Uuid;

use crate::backoff::Backoff;
use crate::cleanup::InboxCleanup;
use crate::config::Tables;
use crate::delivery::OutboxDeliveryService;
use crate::error::StoreError;
use crate::fast::{postgres_pool, Connections};
use crate::inbox::{Handoff, InboxConfig, InboxLayer};
use crate::migrate::Migrator;
use crate::settings::Settings;
use crate::sql::{read_timestamp_type, InboxKey};

/// The inbox, consumer outbox and bus outbox on PostgreSQL, on MassTransit's tables: give it to a
/// bus builder (`.storage(PostgresStorage::new(db))`) and every endpoint that calls `.inbox()`
/// runs its consumers in one transaction per delivery; the bus runs the outbox delivery service,
/// the sweeper and the inbox cleanup while it runs, and stops them after its endpoints.
///
/// | setting | default | MassTransit |
/// |---|---|---|
/// | [`tables`](Self::tables) | schema `messaging`, `inbox_state` / `outbox_state` / `outbox_message`, snake_case | the `DbContext` model |
/// | [`migrate`](Self::migrate) | off: the tables must exist (a .NET service may have created them) | EF migrations |
/// | [`duplicate_window`](Self::duplicate_window) | [`DUPLICATE_WINDOW`](crate::defaults::DUPLICATE_WINDOW), 30 min | `DuplicateDetectionWindow` |
/// | [`poll_interval`](Self::poll_interval) | [`POLL_INTERVAL`](crate::defaults::POLL_INTERVAL), 1 s (besides `LISTEN`/`NOTIFY`) | `QueryDelay` |
/// | [`delivery_workers`](Self::delivery_workers) | [`DELIVERY_WORKERS`](crate::defaults::DELIVERY_WORKERS), 4 | — |
/// | [`deliver_before_ack`](Self::deliver_before_ack) | off: acknowledged after commit, sent by the after-commit sender | — |
/// | [`sweep_after`](Self::sweep_after) | [`SWEEP_AFTER`](crate::defaults::SWEEP_AFTER), 1 s | — |
///
/// Every default is in [`defaults`](crate::defaults).
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
    /// The settings as the builder methods set them.
    settings: Arc<Settings>,
    /// The settings every part runs with once [`Storage::prepare`] read the tables' time column
    /// type. Shared by the clones a bus holds; a builder method makes a new one.
    prepared: Arc<RwLock<Option<Arc<Settings>>>>,
    /// The after-commit sender, shared by the clones a bus holds and their inbox layers.
    handoff: Arc<Handoff>,
    /// The connections inbox deliveries run on, kept between deliveries; shared likewise.
    connections: Arc<Connections>,
    /// The sweeper's back-off and set-aside entries, shared likewise (a builder method makes a
    /// new one, with its settings).
    sweep_backoff: Arc<Backoff<InboxKey>>,
}

impl std::fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStorage")
            .field("tables", self.settings.tables())
            .field("migrate", &self.settings.migrate)
            .field("delivery", &self.settings.delivery.enabled)
            .field("cleanup", &self.settings.cleanup.enabled)
            .finish_non_exhaustive()
    }
}

impl PostgresStorage {
    /// Storage on `db` with the default tables (schema `messaging`, snake_case), outbox delivery
    /// and inbox cleanup on, migrations off, every other setting from
    /// [`defaults`](crate::defaults).
    pub fn new(db: DatabaseConnection) -> Self {
        let settings = Arc::new(Settings::new(Tables::new()));
        Self {
            sweep_backoff: Arc::new(Backoff::of(&settings.delivery)),
            settings,
            prepared: Arc::default(),
            handoff: Arc::default(),
            connections: Arc::new(Connections::new(&db)),
            db,
        }
    }

    /// This storage with its settings changed by `change`: the one place the builder methods
    /// write. The changed storage has settings of its own; it keeps the time column type
    /// [`Storage::prepare`] read unless the tables changed.
    fn configure(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        let tables = self.settings.tables().clone();
        let detected = self.prepared().map(|p| p.tables().timestamp_type());
        change(Arc::make_mut(&mut self.settings));
        let prepared = detected
            .filter(|_| self.settings.tables() == &tables)
            .map(|timestamps| self.settings.with_timestamps(timestamps));
        self.prepared = Arc::new(RwLock::new(prepared));
        self.sweep_backoff = Arc::new(Backoff::of(&self.settings.delivery));
        self
    }

    /// Where the tables are and how they are named ([`Tables::dotnet_default`] for the shape
    /// EF Core creates with its default naming).
    pub fn tables(self, tables: Tables) -> Self {
        self.configure(|s| s.set_tables(tables))
    }

    /// The `LISTEN`/`NOTIFY` channel the bus outbox signals new rows on (default
    /// `ferrybus_outbox.<schema>.<outbox_state>`, cut to 63 bytes).
    pub fn notify_channel(self, channel: impl Into<String>) -> Self {
        self.configure(|s| s.set_channel(channel.into()))
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
    pub fn notify_on_write(self, enabled: bool) -> Self {
        self.configure(|s| s.notify_on_write = enabled)
    }

    /// Whether starting the bus creates the tables when they are missing (idempotent, safe with
    /// several instances starting at once; tables a .NET service created are left alone).
    pub fn migrate(self, enabled: bool) -> Self {
        self.configure(|s| s.migrate = enabled)
    }

    /// Derives the inbox consumer id of the consumer named `consumer` from the .NET consumer
    /// type (namespace qualified, e.g. `Billing.Consumers.InvoiceConsumer`), as MassTransit
    /// does, so a Rust and a .NET instance of one consumer dedupe against each other.
    pub fn dotnet_consumer(
        self,
        consumer: impl Into<String>,
        dotnet_type: impl Into<String>,
    ) -> Self {
        let (consumer, dotnet_type) = (consumer.into(), dotnet_type.into());
        self.configure(|s| s.inbox.dotnet_consumer(consumer, dotnet_type, None))
    }

    /// Like [`dotnet_consumer`](Self::dotnet_consumer), also naming the .NET message type.
    pub fn dotnet_consumer_of(
        self,
        consumer: impl Into<String>,
        dotnet_type: impl Into<String>,
        dotnet_message_type: impl Into<String>,
    ) -> Self {
        let (consumer, dotnet_type) = (consumer.into(), dotnet_type.into());
        let message_type = Some(dotnet_message_type.into());
        self.configure(|s| s.inbox.dotnet_consumer(consumer, dotnet_type, message_type))
    }

    /// Uses a fixed inbox consumer id for the consumer named `consumer`.
    pub fn consumer_id(self, consumer: impl Into<String>, id: Uuid) -> Self {
        let consumer = consumer.into();
        self.configure(|s| s.inbox.fixed_consumer_id(consumer, id))
    }

    /// Starts the sends of one outbox (consumer or bus outbox) in sequence order and awaits the
    /// confirms together, instead of one confirm before the next send (off by default). Only for
    /// transports that keep the start order of concurrent sends, including first sends to
    /// destinations still to be declared. After a failed send, later messages may have gone out
    /// already: they are sent again with the rest.
    pub fn pipelined_sends(self, enabled: bool) -> Self {
        self.configure(|s| s.pipelined_sends = enabled)
    }

    /// Commits the short transaction that records "sent" after a consumer's messages went out
    /// with `synchronous_commit = off` (off by default). The consumer's own transaction stays a
    /// durable commit; a PostgreSQL crash right after can only make messages go out twice,
    /// never lose them.
    pub fn async_delivered_commit(self, enabled: bool) -> Self {
        self.configure(|s| s.inbox.async_delivered_commit = enabled)
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
    /// delivery or the sweeper off in this instance) each delivery sends its own messages, then
    /// is acknowledged: a crash is completed by the broker's redelivery instead. The only
    /// delivery of its endpoint in flight (every delivery at concurrency 1) always sends first,
    /// so a sequential endpoint sends in the order it committed.
    ///
    /// Either way a send that fails after the commit is tried again (up to
    /// [`send_attempts`](Self::send_attempts)) and then, where the sweeper runs, the delivery
    /// is acknowledged and the sweeper sends the rows: the consumer's work committed, so the
    /// message is never faulted for it.
    pub fn deliver_before_ack(self, enabled: bool) -> Self {
        self.configure(|s| s.deliver_before_ack = enabled)
    }

    /// Whether this instance runs the outbox delivery service and the sweeper (on by default;
    /// every instance should, they share the work).
    pub fn outbox_delivery(self, enabled: bool) -> Self {
        self.configure(|s| s.delivery.enabled = enabled)
    }

    /// How often the delivery service looks for rows when no notification arrives
    /// ([`POLL_INTERVAL`](crate::defaults::POLL_INTERVAL), 1 s).
    pub fn poll_interval(self, interval: Duration) -> Self {
        self.configure(|s| s.delivery.poll_interval = interval)
    }

    /// How many delivery workers this instance runs, and how many passes may run at once on
    /// this outbox table across every instance
    /// ([`DELIVERY_WORKERS`](crate::defaults::DELIVERY_WORKERS), 4; at least 1). Each pass first takes one of this many
    /// advisory locks of the table (`pg_try_advisory_xact_lock(hashtext('<schema>.<OutboxState>'),
    /// 0..workers)`); a worker that finds none free waits for the next notification or poll. A
    /// second instance adds standby workers, not concurrent claims: each concurrent claim walks
    /// past the rows the others hold (`FOR UPDATE SKIP LOCKED`), so more of them deliver less.
    /// Each pass uses one connection while sending.
    pub fn delivery_workers(self, workers: usize) -> Self {
        self.configure(|s| s.delivery.workers = workers.max(1))
    }

    /// How many outboxes one worker claims per transaction
    /// ([`OUTBOXES_PER_CLAIM`](crate::defaults::OUTBOXES_PER_CLAIM), 64; at least 1).
    pub fn outboxes_per_claim(self, count: u64) -> Self {
        self.configure(|s| s.delivery.outboxes_per_claim = count.max(1))
    }

    /// How many messages of one outbox are sent per pass
    /// ([`MESSAGES_PER_OUTBOX`](crate::defaults::MESSAGES_PER_OUTBOX), 100; at least 1).
    pub fn messages_per_outbox(self, count: u64) -> Self {
        self.configure(|s| s.delivery.messages_per_outbox = count.max(1))
    }

    /// The back-off of an outbox whose send failed: `initial`, doubling up to `max`
    /// ([`DELIVERY_BACKOFF_INITIAL`](crate::defaults::DELIVERY_BACKOFF_INITIAL), 1 s, to
    /// [`DELIVERY_BACKOFF_MAX`](crate::defaults::DELIVERY_BACKOFF_MAX), 60 s).
    pub fn delivery_backoff(self, initial: Duration, max: Duration) -> Self {
        self.configure(|s| {
            s.delivery.backoff_initial = initial;
            s.delivery.backoff_max = max.max(initial);
        })
    }

    /// Delivers consumer-outbox rows whose inbox row was consumed this long ago and is still not
    /// delivered, and that no delivery holds (a process died before sending them, or their
    /// send failed); `None` turns the sweeper off
    /// ([`SWEEP_AFTER`](crate::defaults::SWEEP_AFTER), 1 s). Rows a delivery or the
    /// after-commit sender is sending are locked and skipped.
    ///
    /// Without the sweeper nothing in this instance would send what a failed send left
    /// behind, so a publishing delivery is not acknowledged before its messages are sent (as
    /// with [`deliver_before_ack`](Self::deliver_before_ack)), and a send that keeps failing
    /// fails the delivery: its retry or redelivery sends the rest without running the consumer
    /// again.
    pub fn sweep_after(self, age: Option<Duration>) -> Self {
        self.configure(|s| s.delivery.sweep_after = age)
    }

    /// How many times one entry's send is tried, with the [delivery
    /// back-off](Self::delivery_backoff) between tries, before it is given up on
    /// ([`SEND_ATTEMPTS`](crate::defaults::SEND_ATTEMPTS), 5; at least 1). A delivery sending
    /// its own messages after commit then acknowledges and leaves them to the sweeper; the
    /// sweeper and the bus-outbox relay set the entry aside: logged at error, counted in
    /// `ferrybus.outbox.set_aside`, listed by `ferrybus outbox status`, tried again only every
    /// [`SET_ASIDE_RETRY`](crate::defaults::SET_ASIDE_RETRY), and never in the way of others.
    pub fn send_attempts(self, attempts: u32) -> Self {
        self.configure(|s| s.delivery.send_attempts = attempts.max(1))
    }

    /// How often the sweeper looks ([`SWEEP_INTERVAL`](crate::defaults::SWEEP_INTERVAL), 250 ms).
    pub fn sweep_interval(self, interval: Duration) -> Self {
        self.configure(|s| s.delivery.sweep_interval = interval)
    }

    /// Whether this instance runs the inbox cleanup (on by default).
    pub fn inbox_cleanup(self, enabled: bool) -> Self {
        self.configure(|s| s.cleanup.enabled = enabled)
    }

    /// How long delivered inbox rows are kept (MassTransit's `DuplicateDetectionWindow`,
    /// [`DUPLICATE_WINDOW`](crate::defaults::DUPLICATE_WINDOW), 30 min). It must cover every
    /// way a copy can still arrive: retries, redeliveries, time in an error queue before a
    /// replay. A copy arriving after its row was removed is processed again.
    pub fn duplicate_window(self, window: Duration) -> Self {
        self.configure(|s| s.cleanup.window = window)
    }

    /// Inbox rows the cleanup deletes per statement
    /// ([`CLEANUP_BATCH_SIZE`](crate::defaults::CLEANUP_BATCH_SIZE), 100; at least 1).
    pub fn cleanup_batch_size(self, size: u64) -> Self {
        self.configure(|s| s.cleanup.batch_size = size.max(1))
    }

    /// The pause between cleanup runs
    /// ([`CLEANUP_INTERVAL`](crate::defaults::CLEANUP_INTERVAL), 10 s).
    pub fn cleanup_interval(self, interval: Duration) -> Self {
        self.configure(|s| s.cleanup.interval = interval)
    }

    /// The connection pool.
    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    /// The tables as configured.
    pub fn table_names(&self) -> &Tables {
        self.settings.tables()
    }

    /// The settings every part runs with: as prepared (the time column type read from the
    /// tables) once [`Storage::prepare`] ran, as configured before.
    pub(crate) fn settings(&self) -> Arc<Settings> {
        self.prepared().unwrap_or_else(|| self.settings.clone())
    }

    /// The settings as prepared, once [`Storage::prepare`] ran.
    fn prepared(&self) -> Option<Arc<Settings>> {
        self.prepared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn delivery_service(&self, sink: SharedSink) -> OutboxDeliveryService {
        OutboxDeliveryService::new(
            self.db.clone(),
            sink,
            self.settings(),
            self.sweep_backoff.clone(),
        )
    }

    /// One delivery pass through `sink`: claims up to the configured number of outboxes, sends
    /// them, deletes what was sent. Returns how many messages were sent. (The bus runs this in
    /// a loop; call it to drain an outbox by hand.)
    pub async fn deliver_once(&self, sink: SharedSink) -> Result<usize, StoreError> {
        self.delivery_service(sink).deliver_once().await
    }

    /// One sweep through `sink`: delivers the consumer-outbox rows of inbox rows consumed more
    /// than `age` ago and not delivered. Returns how many inbox entries were completed.
    pub async fn sweep_once(&self, sink: SharedSink, age: Duration) -> Result<usize, StoreError> {
        self.delivery_service(sink).sweep_once(age).await
    }

    /// Deletes delivered inbox rows older than the duplicate-detection window until none is
    /// left; returns how many were removed.
    pub async fn cleanup_once(&self) -> Result<u64, StoreError> {
        InboxCleanup::new(self.db.clone(), self.settings())
            .run_once()
            .await
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
        let tables = self.settings.tables();
        if self.settings.migrate {
            Migrator::new(tables.clone()).run(&self.db).await?;
        }
        let timestamps = read_timestamp_type(&self.db, tables).await?;
        let prepared = self.settings.with_timestamps(timestamps);
        *self.prepared.write().unwrap_or_else(|e| e.into_inner()) = Some(prepared);
        Ok(())
    }

    fn inbox_layer(&self) -> BoxConsumeLayer {
        let config = InboxConfig::new(self.settings());
        BoxConsumeLayer::new(InboxLayer::new(
            self.connections.clone(),
            config,
            self.handoff.clone(),
        ))
    }

    /// The batch inbox (`ferrybus_batch::BatchInbox`, feature `batch`).
    fn add_on(&self, type_id: std::any::TypeId) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        #[cfg(feature = "batch")]
        if type_id == std::any::TypeId::of::<ferrybus_batch::BatchInbox>() {
            let layer = crate::inbox::BatchInboxLayer::new(
                self.connections.clone(),
                InboxConfig::new(self.settings()),
                self.handoff.clone(),
            );
            return Some(Box::new(ferrybus_batch::BatchInbox(
                ferrybus_batch::BoxBatchLayer::new(layer),
            )));
        }
        let _ = type_id;
        None
    }

    fn start(&self, sink: SharedSink) -> Background {
        let settings = self.settings();
        let delivery_runs = settings.delivery.enabled;
        // Acknowledge before sending only where the sweeper runs to cover a crash or a failure.
        let handoff = if settings.acks_before_sending() {
            self.handoff
                .start(self.connections.clone(), settings.clone(), sink.clone())
        } else {
            Background::default()
        };
        let delivery = if delivery_runs {
            self.delivery_service(sink).spawn()
        } else {
            Background::default()
        };
        let cleanup = if settings.cleanup.enabled {
            InboxCleanup::new(self.db.clone(), settings).spawn()
        } else {
            Background::default()
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TimestampType;

    /// A storage as `prepare` leaves it on tables with .NET's legacy timestamps.
    fn prepared_on_legacy_tables() -> PostgresStorage {
        let storage = PostgresStorage::new(DatabaseConnection::default());
        let legacy = storage
            .settings
            .with_timestamps(TimestampType::WithoutTimeZone);
        *storage.prepared.write().unwrap() = Some(legacy);
        storage
    }

    #[test]
    fn a_builder_method_keeps_the_detected_time_type_unless_the_tables_change() {
        let storage = prepared_on_legacy_tables()
            .inbox_cleanup(false)
            .poll_interval(Duration::from_millis(50));
        let settings = storage.settings();
        assert_eq!(
            settings.tables().timestamp_type(),
            TimestampType::WithoutTimeZone
        );
        assert!(!settings.cleanup.enabled);
        assert_eq!(settings.delivery.poll_interval, Duration::from_millis(50));

        let moved = storage.tables(Tables::new().schema("elsewhere"));
        let settings = moved.settings();
        assert_eq!(settings.tables().schema_name(), "elsewhere");
        assert_eq!(
            settings.tables().timestamp_type(),
            TimestampType::WithTimeZone,
            "other tables are read again when the bus starts"
        );
        assert_eq!(settings.channel(), "ferrybus_outbox.elsewhere.outbox_state");
    }

    #[test]
    fn clones_share_the_prepared_settings() {
        let storage = PostgresStorage::new(DatabaseConnection::default());
        let clone = storage.clone();
        let legacy = storage
            .settings
            .with_timestamps(TimestampType::WithoutTimeZone);
        *clone.prepared.write().unwrap() = Some(legacy.clone());
        assert!(Arc::ptr_eq(&storage.settings(), &legacy));
    }
}
