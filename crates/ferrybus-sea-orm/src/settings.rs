//! [`Settings`]: everything the parts of a [`PostgresStorage`](crate::PostgresStorage) read, in
//! one value the storage builds and every part shares (`Arc<Settings>`): the tables and their
//! statements, the `NOTIFY` channel, and the settings of the inbox, the outbox delivery (with the
//! sweeper) and the inbox cleanup. The defaults are [`crate::defaults`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferrybus_core::message::consumer_id;

use ferrybus_core::consume::ConsumerInfo;
use uuid::Uuid;

use crate::config::{Tables, TimestampType};
use crate::defaults;
use crate::sql::Sql;

/// The storage's settings (see the [module docs](self)). The builder methods of
/// [`PostgresStorage`](crate::PostgresStorage) change them; the parts only read them.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    tables: Tables,
    /// The statements for `tables`, shared by the clones a builder makes.
    sql: Arc<Sql>,
    /// The bus outbox's `LISTEN`/`NOTIFY` channel.
    channel: String,
    /// Whether `channel` was set rather than derived from the tables.
    channel_named: bool,
    /// Whether each bus-outbox write sends a `NOTIFY`.
    pub(crate) notify_on_write: bool,
    /// Whether starting the bus creates missing tables.
    pub(crate) migrate: bool,
    /// Whether the sends of one outbox (consumer or bus outbox) are pipelined.
    pub(crate) pipelined_sends: bool,
    /// Whether a publishing consumer's delivery sends its messages before it is acknowledged.
    pub(crate) deliver_before_ack: bool,
    pub(crate) inbox: InboxSettings,
    pub(crate) delivery: DeliverySettings,
    pub(crate) cleanup: CleanupSettings,
}

impl Settings {
    /// The defaults, on `tables`.
    pub(crate) fn new(tables: Tables) -> Self {
        Self {
            sql: Arc::new(Sql::new(&tables)),
            channel: default_channel(&tables),
            channel_named: false,
            tables,
            notify_on_write: true,
            migrate: false,
            pipelined_sends: false,
            deliver_before_ack: false,
            inbox: InboxSettings::default(),
            delivery: DeliverySettings::default(),
            cleanup: CleanupSettings::default(),
        }
    }

    /// The tables.
    pub(crate) fn tables(&self) -> &Tables {
        &self.tables
    }

    /// Moves to other tables (their statements, and the default channel with them).
    pub(crate) fn set_tables(&mut self, tables: Tables) {
        self.sql = Arc::new(Sql::new(&tables));
        if !self.channel_named {
            self.channel = default_channel(&tables);
        }
        self.tables = tables;
    }

    /// The same settings for tables whose time columns are of type `timestamps` (read from the
    /// tables when the bus starts): these settings when they already say so.
    pub(crate) fn with_timestamps(self: &Arc<Self>, timestamps: TimestampType) -> Arc<Self> {
        if self.tables.timestamp_type() == timestamps {
            return self.clone();
        }
        let mut settings = Settings::clone(self);
        settings.set_tables(self.tables.clone().timestamps(timestamps));
        Arc::new(settings)
    }

    /// The statements for the tables.
    pub(crate) fn sql(&self) -> &Sql {
        &self.sql
    }

    /// The `LISTEN`/`NOTIFY` channel of the bus outbox.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Names the channel (instead of the tables' default).
    pub(crate) fn set_channel(&mut self, channel: String) {
        self.channel = channel;
        self.channel_named = true;
    }

    /// Whether this instance runs the sweeper: what a delivery failed to send after its commit
    /// is then sent by it, so the delivery may be acknowledged.
    pub(crate) fn sweeps(&self) -> bool {
        self.delivery.enabled && self.delivery.sweep_after.is_some()
    }

    /// Whether the after-commit sender runs: deliveries are acknowledged after their commit and
    /// their messages sent after that. Only where the sweeper runs (it sends what the sender
    /// could not), and not with `deliver_before_ack`.
    pub(crate) fn acks_before_sending(&self) -> bool {
        self.sweeps() && !self.deliver_before_ack
    }

    /// The channel a bus-outbox write notifies, `None` when writes do not notify.
    pub(crate) fn write_notify(&self) -> Option<&str> {
        self.notify_on_write.then_some(self.channel.as_str())
    }
}

/// `ferrybus_outbox.<schema>.<outbox_state>`, cut to PostgreSQL's 63-byte identifier limit, so
/// delivery services of different schemas do not wake each other.
fn default_channel(tables: &Tables) -> String {
    let mut channel = format!(
        "ferrybus_outbox.{}.{}",
        tables.schema_name(),
        tables.outbox_state()
    );
    while channel.len() > 63 {
        channel.pop();
    }
    channel
}

/// How the inbox derives the consumer id of one consumer.
#[derive(Clone, Debug)]
enum ConsumerIdSource {
    Fixed(Uuid),
    DotNet {
        consumer_type: String,
        message_type: Option<String>,
    },
}

/// The inbox's settings.
///
/// The inbox key is (original message id, consumer id). By default the consumer id is derived
/// as MassTransit derives it, from the Rust names: MD5 of
/// `"<consumer name>:<message .NET type>:<queue>"`. To dedupe against a .NET instance of the
/// same consumer, give the .NET consumer type name (or a fixed id):
/// `PostgresStorage::dotnet_consumer`, `PostgresStorage::consumer_id`.
#[derive(Clone, Debug, Default)]
pub(crate) struct InboxSettings {
    consumer_ids: HashMap<String, ConsumerIdSource>,
    /// Whether the "sent" bookkeeping after commit commits with `synchronous_commit = off`
    /// (set in the statement that locks the row: no extra round trip). The consumer's own
    /// transaction stays a durable commit.
    pub(crate) async_delivered_commit: bool,
}

impl InboxSettings {
    /// Uses a fixed consumer id for the consumer named `consumer` (its [`ConsumerInfo::name`]).
    pub(crate) fn fixed_consumer_id(&mut self, consumer: String, id: Uuid) {
        self.consumer_ids
            .insert(consumer, ConsumerIdSource::Fixed(id));
    }

    /// Derives the consumer id of `consumer` from the .NET consumer type name (namespace
    /// qualified, e.g. `Billing.Consumers.InvoiceConsumer`), the message's .NET name (or
    /// `message_type`) and the queue, exactly as MassTransit does.
    pub(crate) fn dotnet_consumer(
        &mut self,
        consumer: String,
        consumer_type: String,
        message_type: Option<String>,
    ) {
        let source = ConsumerIdSource::DotNet {
            consumer_type,
            message_type,
        };
        self.consumer_ids.insert(consumer, source);
    }

    /// The consumer id the inbox uses for `consumer`.
    pub(crate) fn resolve_consumer_id(&self, consumer: &ConsumerInfo) -> Uuid {
        match self.consumer_ids.get(consumer.name()) {
            None => consumer.consumer_id(),
            Some(ConsumerIdSource::Fixed(id)) => *id,
            Some(ConsumerIdSource::DotNet {
                consumer_type,
                message_type,
            }) => {
                let message = message_type
                    .clone()
                    .unwrap_or_else(|| consumer.message_type().dotnet_name());
                consumer_id(consumer_type, &message, consumer.queue())
            }
        }
    }
}

/// The settings of the outbox delivery service and its sweeper.
#[derive(Clone, Debug)]
pub(crate) struct DeliverySettings {
    /// Whether this instance runs them.
    pub(crate) enabled: bool,
    /// How often to look for rows when no notification arrives.
    pub(crate) poll_interval: Duration,
    /// How many workers claim outboxes concurrently (each uses one connection while sending),
    /// and how many passes may run at once on the outbox table across every instance (each
    /// pass takes one of `workers` advisory locks of the table in its claim; see
    /// `Sql::claim_outboxes`). A `NOTIFY` wakes one idle worker (so a commit does not wait for
    /// a busy worker's pass to end), and a worker that claims a full batch wakes one more: a
    /// burst brings in every worker, a trickle one at a time. At least 1.
    pub(crate) workers: usize,
    /// How many outboxes one worker claims per transaction. Their sends run concurrently, so a
    /// larger claim amortises the pass's fixed SQL (begin, claim, load, delete, commit) over
    /// more messages; the rows of a claim stay locked until its pass commits. At least 1.
    pub(crate) outboxes_per_claim: u64,
    /// How many messages of one outbox are sent per pass. At least 1.
    pub(crate) messages_per_outbox: u64,
    /// The back-off of an outbox whose send failed: this, doubling up to `backoff_max`.
    pub(crate) backoff_initial: Duration,
    /// The longest back-off (not below `backoff_initial`).
    pub(crate) backoff_max: Duration,
    /// How many times one entry's send is tried before it is given up on (left to the sweeper
    /// by a delivery, set aside by the sweeper and the relay). At least 1.
    pub(crate) send_attempts: u32,
    /// Deliver consumer-outbox rows whose inbox row was consumed this long ago and is still not
    /// delivered (and that no delivery holds); `None` turns the sweeper off.
    pub(crate) sweep_after: Option<Duration>,
    /// How often the sweeper looks.
    pub(crate) sweep_interval: Duration,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            poll_interval: defaults::POLL_INTERVAL,
            workers: defaults::DELIVERY_WORKERS,
            outboxes_per_claim: defaults::OUTBOXES_PER_CLAIM,
            messages_per_outbox: defaults::MESSAGES_PER_OUTBOX,
            backoff_initial: defaults::DELIVERY_BACKOFF_INITIAL,
            backoff_max: defaults::DELIVERY_BACKOFF_MAX,
            send_attempts: defaults::SEND_ATTEMPTS,
            sweep_after: Some(defaults::SWEEP_AFTER),
            sweep_interval: defaults::SWEEP_INTERVAL,
        }
    }
}

/// The settings of the inbox cleanup.
///
/// The window must cover every way a copy of a message can still arrive: the retry chain,
/// delayed redeliveries, the time a message may sit in an error or dead-letter queue, and any
/// replay window. A copy arriving after its row was removed is processed again.
#[derive(Clone, Debug)]
pub(crate) struct CleanupSettings {
    /// Whether this instance runs the cleanup.
    pub(crate) enabled: bool,
    /// How long delivered rows are kept (the duplicate-detection window).
    pub(crate) window: Duration,
    /// Rows deleted per statement (at least 1).
    pub(crate) batch_size: u64,
    /// The pause between runs.
    pub(crate) interval: Duration,
}

impl Default for CleanupSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            window: defaults::DUPLICATE_WINDOW,
            batch_size: defaults::CLEANUP_BATCH_SIZE,
            interval: defaults::CLEANUP_INTERVAL,
        }
    }
}
