//! The connection supervisor: one AMQP connection at a time, re-opened with back-off when it is
//! lost. Each open connection is a [`Live`] generation with its own channels and declaration
//! cache, so nothing (an ack, a cached declaration) leaks from a dead connection to a new one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use tokio::sync::{watch, Mutex, OnceCell};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::error::{ErrorKind, RabbitMqError, Result};
use crate::event::{Event, Events};
use crate::settings::HostSettings;
use crate::topology::{short, Topology};

/// One open connection and what belongs to it.
pub(crate) struct Live {
    pub(crate) generation: u64,
    connection: Connection,
    publish: ChannelSlot,
    declare: ChannelSlot,
    pub(crate) topology: Topology,
    delayed_exchange: OnceCell<bool>,
    settings: Arc<HostSettings>,
}

impl Live {
    /// Whether the connection is still usable.
    pub(crate) fn is_open(&self) -> bool {
        self.connection.status().connected()
    }

    /// A new channel (for a consumer).
    pub(crate) async fn create_channel(&self) -> Result<Channel> {
        self.connection
            .create_channel()
            .await
            .map_err(|e| RabbitMqError::amqp("opening a channel", e))
    }

    /// The channel declarations run on (re-opened if a failed declaration closed it).
    pub(crate) async fn declare_channel(&self) -> Result<Channel> {
        self.declare.get(&self.connection).await
    }

    /// Publishes and waits for the broker's confirm. A nack, or a mandatory message that was
    /// returned, is an error.
    pub(crate) async fn publish(
        &self,
        target: PublishTarget<'_>,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<()> {
        let channel = self.publish.get(&self.connection).await?;
        let options = BasicPublishOptions {
            mandatory: target.mandatory,
            ..BasicPublishOptions::default()
        };
        let what = || format!("publishing to exchange {:?}", target.exchange);
        let confirm = channel
            .basic_publish(
                short(target.exchange)?,
                short(target.routing_key)?,
                options,
                body,
                properties,
            )
            .await
            .map_err(|e| RabbitMqError::amqp(what(), e))?;
        let confirmation = tokio::time::timeout(self.settings.publish_timeout, confirm)
            .await
            .map_err(|_| {
                RabbitMqError::new(
                    ErrorKind::Timeout,
                    format!("no publisher confirm: {}", what()),
                )
            })?
            .map_err(|e| RabbitMqError::amqp(what(), e))?;
        match confirmation {
            Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
            Confirmation::Ack(Some(returned)) => Err(RabbitMqError::new(
                ErrorKind::Returned,
                format!(
                    "{}: {} {}",
                    what(),
                    returned.reply_code,
                    returned.reply_text
                ),
            )),
            Confirmation::Nack(_) => Err(RabbitMqError::new(ErrorKind::Nacked, what())),
        }
    }

    /// Whether the broker has the `rabbitmq_delayed_message_exchange` plugin, probed once per
    /// connection on a throwaway connection (an unknown exchange type closes the connection).
    pub(crate) async fn delayed_exchange_supported(&self) -> bool {
        *self
            .delayed_exchange
            .get_or_init(|| probe_delayed_exchange(self.settings.clone()))
            .await
    }

    async fn close(&self) {
        if self.is_open() {
            if let Some(channel) = self.publish.current().await {
                let _ = channel.wait_for_confirms().await;
            }
            let _ = self.connection.close(200, "bye".into()).await;
        }
    }
}

/// Where a message is published: exchange, routing key, mandatory flag.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PublishTarget<'a> {
    pub(crate) exchange: &'a str,
    pub(crate) routing_key: &'a str,
    pub(crate) mandatory: bool,
}

/// A lazily opened channel, re-opened when the broker closed it.
struct ChannelSlot {
    confirm: bool,
    channel: Mutex<Option<Channel>>,
}

impl ChannelSlot {
    fn new(confirm: bool) -> Self {
        Self {
            confirm,
            channel: Mutex::new(None),
        }
    }

    async fn current(&self) -> Option<Channel> {
        self.channel.lock().await.clone()
    }

    async fn get(&self, connection: &Connection) -> Result<Channel> {
        let mut slot = self.channel.lock().await;
        if let Some(channel) = slot.as_ref().filter(|c| c.status().connected()) {
            return Ok(channel.clone());
        }
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| RabbitMqError::amqp("opening a channel", e))?;
        if self.confirm {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| RabbitMqError::amqp("enabling publisher confirms", e))?;
        }
        *slot = Some(channel.clone());
        Ok(channel)
    }
}

async fn open(settings: &HostSettings) -> Result<Connection> {
    let mut properties = ConnectionProperties::default();
    if let Some(name) = &settings.connection_name {
        properties = properties.with_connection_name(name.as_str().into());
    }
    let connect = Connection::connect(settings.uri(), properties);
    tokio::time::timeout(settings.connect_timeout, connect)
        .await
        .map_err(|_| RabbitMqError::new(ErrorKind::Timeout, "connecting to the broker"))?
        .map_err(|e| {
            RabbitMqError::with_source(ErrorKind::NotConnected, "connecting to the broker", e)
        })
}

async fn probe_delayed_exchange(settings: Arc<HostSettings>) -> bool {
    let probe = async {
        let connection = open(&settings).await.ok()?;
        let channel = connection.create_channel().await.ok()?;
        let name = format!("ferrybus.delay-probe.{}", uuid::Uuid::now_v7());
        let mut args = lapin::types::FieldTable::default();
        args.insert(
            "x-delayed-type".into(),
            lapin::types::AMQPValue::LongString("fanout".into()),
        );
        let options = lapin::options::ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        };
        let kind = lapin::ExchangeKind::Custom("x-delayed-message".into());
        let supported = channel
            .exchange_declare(name.as_str().into(), kind, options, args)
            .await
            .is_ok();
        if supported {
            let _ = channel
                .exchange_delete(name.as_str().into(), Default::default())
                .await;
        }
        let _ = connection.close(200, "probe done".into()).await;
        Some(supported)
    };
    let supported = probe.await.unwrap_or(false);
    tracing::info!(target: "ferrybus::rabbitmq", supported, "probed for the delayed message exchange plugin");
    supported
}

/// Owns the connection: opens it, watches it, and re-opens it after a loss.
pub(crate) struct Connector {
    settings: Arc<HostSettings>,
    live: watch::Sender<Option<Arc<Live>>>,
    events: Events,
    shutdown: CancellationToken,
    generation: AtomicU64,
    /// Why the last connection attempt failed, while no connection is open (for error messages).
    last_failure: std::sync::Mutex<Option<String>>,
}

impl Connector {
    fn new(settings: HostSettings, events: Events) -> Arc<Self> {
        Arc::new(Self {
            settings: Arc::new(settings),
            live: watch::channel(None).0,
            events,
            shutdown: CancellationToken::new(),
            generation: AtomicU64::new(0),
            last_failure: std::sync::Mutex::new(None),
        })
    }

    /// Opens the first connection (retrying until the connect timeout) and starts supervising.
    pub(crate) async fn start(settings: HostSettings, events: Events) -> Result<Arc<Self>> {
        let this = Self::new(settings, events);
        let deadline = tokio::time::Instant::now() + this.settings.connect_timeout;
        let live = this
            .connect_until(Some(deadline), Outage::starting())
            .await?;
        this.events.emit(Event::Connected {
            generation: live.generation,
        });
        tokio::spawn(this.clone().supervise(live));
        Ok(this)
    }

    /// Returns at once; the first connection is opened in the background on `runtime`
    /// (retrying with back-off for as long as it takes), then supervised as usual.
    pub(crate) fn start_background(
        settings: HostSettings,
        events: Events,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<Self> {
        let this = Self::new(settings, events);
        runtime.spawn(this.clone().connect_then_supervise());
        this
    }

    async fn connect_then_supervise(self: Arc<Self>) {
        let Ok(live) = self.connect_until(None, Outage::starting()).await else {
            return;
        };
        self.events.emit(Event::Connected {
            generation: live.generation,
        });
        self.supervise(live).await;
    }

    /// Whether a connection is open right now.
    pub(crate) fn is_connected(&self) -> bool {
        self.live.borrow().as_ref().is_some_and(|l| l.is_open())
    }

    /// The open connection, waiting up to `timeout` for a (re)connect.
    pub(crate) async fn live(&self, timeout: Duration) -> Result<Arc<Live>> {
        let mut rx = self.live.subscribe();
        let wait = rx.wait_for(|l| l.as_ref().is_some_and(|l| l.is_open()));
        tokio::select! {
            r = tokio::time::timeout(timeout, wait) => match r {
                Ok(Ok(live)) => Ok(live.clone().expect("checked by wait_for")),
                Ok(Err(_)) => Err(RabbitMqError::new(ErrorKind::Stopped, "the connection supervisor ended")),
                Err(_) => Err(self.not_connected(timeout)),
            },
            () = self.shutdown.cancelled() => Err(RabbitMqError::new(ErrorKind::Stopped, "the bus is stopping")),
        }
    }

    fn not_connected(&self, timeout: Duration) -> RabbitMqError {
        let last = self
            .last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut message = format!("no connection within {timeout:?}");
        if let Some(last) = last {
            message.push_str("; last attempt failed: ");
            message.push_str(&last);
        }
        RabbitMqError::new(ErrorKind::NotConnected, message)
    }

    /// The open connection, waiting as long as it takes; `None` once the bus stops.
    pub(crate) async fn wait_live(&self) -> Option<Arc<Live>> {
        self.live(Duration::from_secs(u64::MAX / 4)).await.ok()
    }

    /// The publish timeout from the settings.
    pub(crate) fn publish_timeout(&self) -> Duration {
        self.settings.publish_timeout
    }

    /// A back-off for reconnect-like retries.
    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(self.settings.reconnect_min, self.settings.reconnect_max)
    }

    /// Stops supervising (and connecting) and closes the connection (after outstanding
    /// confirms).
    pub(crate) async fn close(&self) {
        self.shutdown.cancel();
        let live = self.live.send_replace(None);
        if let Some(live) = live {
            live.close().await;
        }
    }

    fn stopping() -> RabbitMqError {
        RabbitMqError::new(ErrorKind::Stopped, "the bus is stopping")
    }

    async fn connect_until(
        &self,
        deadline: Option<tokio::time::Instant>,
        mut outage: Outage,
    ) -> Result<Arc<Live>> {
        let mut backoff = self.backoff();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let opened = tokio::select! {
                opened = open(&self.settings) => opened,
                () = self.shutdown.cancelled() => return Err(Self::stopping()),
            };
            let error = match opened {
                Ok(connection) => {
                    let live = self.install(connection).await?;
                    outage.log_recovered(live.generation, attempt);
                    return Ok(live);
                }
                Err(error) => error,
            };
            let detail = match error.kind() {
                ErrorKind::NotConnected => error.detail(),
                _ => error.to_string(),
            };
            *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(detail);
            outage.log_failed(attempt, &error);
            self.events.emit(Event::ConnectFailed {
                attempt,
                reason: error.to_string(),
            });
            let delay = backoff.next_delay();
            if deadline.is_some_and(|d| tokio::time::Instant::now() + delay > d) {
                return Err(error);
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.shutdown.cancelled() => return Err(Self::stopping()),
            }
        }
    }

    async fn install(&self, connection: Connection) -> Result<Arc<Live>> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let live = Arc::new(Live {
            generation,
            connection,
            publish: ChannelSlot::new(true),
            declare: ChannelSlot::new(false),
            topology: Topology::default(),
            delayed_exchange: OnceCell::new(),
            settings: self.settings.clone(),
        });
        self.live.send_replace(Some(live.clone()));
        // `close` cancels first, then takes the connection out: if it ran while this one was
        // being opened, it may have missed it, so close it here.
        if self.shutdown.is_cancelled() {
            self.live.send_replace(None);
            live.close().await;
            return Err(Self::stopping());
        }
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(live)
    }

    async fn supervise(self: Arc<Self>, mut live: Arc<Live>) {
        loop {
            let reason = tokio::select! {
                reason = wait_lost(&live) => reason,
                () = self.shutdown.cancelled() => return,
            };
            if self.shutdown.is_cancelled() {
                return;
            }
            tracing::warn!(target: "ferrybus::rabbitmq", generation = live.generation, %reason, "connection lost; reconnecting");
            self.live.send_replace(None);
            self.events.emit(Event::Disconnected {
                generation: live.generation,
                reason,
            });
            live = match self.connect_until(None, Outage::lost()).await {
                Ok(next) => next,
                Err(_) => return,
            };
            self.events.emit(Event::Reconnected {
                generation: live.generation,
            });
        }
    }
}

/// How often a broker that stays unreachable is logged at WARN; the other failed attempts are
/// logged at DEBUG.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Logging of one period without a connection: the first failed attempt and then one a minute at
/// WARN (with the attempt count and how long the broker has been unreachable), the rest at
/// DEBUG; the recovery at INFO with how long it took.
#[derive(Debug)]
struct Outage {
    /// Whether a connection was lost (a reconnect), rather than the first one being opened.
    lost: bool,
    since: std::time::Instant,
    last_warn: Option<std::time::Instant>,
}

impl Outage {
    fn starting() -> Self {
        Self {
            lost: false,
            since: std::time::Instant::now(),
            last_warn: None,
        }
    }

    fn lost() -> Self {
        Self {
            lost: true,
            ..Self::starting()
        }
    }

    /// Whether the failure of `attempt` at `now` is logged at WARN.
    fn warns(&mut self, attempt: u32, now: std::time::Instant) -> bool {
        let warn = attempt == 1
            || self
                .last_warn
                .is_none_or(|last| now.saturating_duration_since(last) >= WARN_EVERY);
        if warn {
            self.last_warn = Some(now);
        }
        warn
    }

    fn log_failed(&mut self, attempt: u32, error: &RabbitMqError) {
        let now = std::time::Instant::now();
        let down_for = Rounded(now.saturating_duration_since(self.since));
        if !self.warns(attempt, now) {
            tracing::debug!(target: "ferrybus::rabbitmq", attempt, %down_for, %error, "connection attempt failed");
        } else if attempt == 1 {
            tracing::warn!(target: "ferrybus::rabbitmq", attempt, %error, "connection attempt failed; retrying with back-off (further failures are logged once a minute)");
        } else {
            tracing::warn!(target: "ferrybus::rabbitmq", attempt, %down_for, %error, "still cannot connect to the broker; retrying");
        }
    }

    fn log_recovered(&self, generation: u64, attempt: u32) {
        let down_for = Rounded(self.since.elapsed());
        let failed_attempts = attempt - 1;
        if self.lost {
            tracing::info!(target: "ferrybus::rabbitmq", generation, failed_attempts, "reconnected after {down_for} without a connection");
        } else if failed_attempts > 0 {
            tracing::info!(target: "ferrybus::rabbitmq", generation, failed_attempts, "connected after the broker was unreachable for {down_for}");
        } else {
            tracing::info!(target: "ferrybus::rabbitmq", generation, "connected");
        }
    }
}

/// A duration for logs: milliseconds under a second, then tenths of seconds, then minutes.
struct Rounded(Duration);

impl std::fmt::Display for Rounded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        match ms {
            0..=999 => write!(f, "{ms}ms"),
            1_000..=59_999 => write!(f, "{:.1}s", self.0.as_secs_f64()),
            _ => write!(f, "{}m{:02}s", ms / 60_000, (ms / 1_000) % 60),
        }
    }
}

/// Resolves when `live`'s connection is no longer usable, with the reason.
async fn wait_lost(live: &Live) -> String {
    let mut errors = live.connection.events_listener();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            event = errors.next() => match event {
                Some(lapin::Event::Error(error)) => return error.to_string(),
                Some(_) => {}
                None => return "the connection ended".to_owned(),
            },
            _ = tick.tick() => {
                if !live.is_open() {
                    return "the connection is closed".to_owned();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_warns_on_the_first_failure_then_once_a_minute() {
        let mut outage = Outage::starting();
        let t0 = std::time::Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(outage.warns(1, at(0)));
        assert!(!outage.warns(2, at(1)));
        assert!(!outage.warns(10, at(59)));
        assert!(outage.warns(11, at(60)));
        assert!(!outage.warns(12, at(65)));
        assert!(outage.warns(30, at(125)));
    }

    #[test]
    fn durations_are_rounded_for_logs() {
        assert_eq!(Rounded(Duration::from_millis(250)).to_string(), "250ms");
        assert_eq!(Rounded(Duration::from_millis(12_345)).to_string(), "12.3s");
        assert_eq!(Rounded(Duration::from_secs(125)).to_string(), "2m05s");
    }
}
