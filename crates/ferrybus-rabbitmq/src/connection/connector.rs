//! [`Connector`]: opens the connection, watches it, and re-opens it after a loss.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lapin::Connection;
use tokio::sync::{watch, OnceCell};
use tokio_util::sync::CancellationToken;

use super::outage::Outage;
use super::{open, wait_lost, Live};
use crate::backoff::Backoff;
use crate::channel::ChannelSlot;
use crate::error::{ErrorKind, RabbitMqError, Result};
use crate::event::{Event, Events};
use crate::settings::HostSettings;
use crate::shutdown::CLOSE_TIMEOUT;
use crate::topology::Topology;

/// Owns the connection: opens it, watches it, and re-opens it after a loss.
pub(crate) struct Connector {
    settings: Arc<HostSettings>,
    live: watch::Sender<Option<Arc<Live>>>,
    events: Events,
    shutdown: CancellationToken,
    generation: AtomicU64,
    /// The host the next connection attempt goes to (index into the settings' hosts).
    next_host: AtomicUsize,
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
            next_host: AtomicUsize::new(0),
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
    /// confirms), waiting for the broker until `until` at most.
    pub(crate) async fn close(&self, until: tokio::time::Instant) {
        self.shutdown.cancel();
        let live = self.live.send_replace(None);
        if let Some(live) = live {
            live.close(until).await;
        }
    }

    fn stopping() -> RabbitMqError {
        RabbitMqError::new(ErrorKind::Stopped, "the bus is stopping")
    }

    /// Connects, trying the hosts in turn from the next one; backs off after each round in
    /// which every host failed (a single host: after every failure).
    async fn connect_until(
        &self,
        deadline: Option<tokio::time::Instant>,
        mut outage: Outage,
    ) -> Result<Arc<Live>> {
        let mut backoff = self.backoff();
        let hosts = self.settings.host_count();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let index = self.next_host.load(Ordering::SeqCst) % hosts;
            let opened = tokio::select! {
                opened = open(&self.settings, index) => opened,
                () = self.shutdown.cancelled() => return Err(Self::stopping()),
            };
            let error = match opened {
                Ok(connection) => {
                    let live = self.install(connection, index).await?;
                    outage.log_recovered(live.generation, attempt);
                    return Ok(live);
                }
                Err(error) => error,
            };
            self.next_host.store(index + 1, Ordering::SeqCst);
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
            if !(attempt as usize).is_multiple_of(hosts) {
                continue; // the next host at once
            }
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

    /// `host:port` of the host the bus is connected to, if it is.
    pub(crate) fn connected_host(&self) -> Option<String> {
        let live = self.live.borrow();
        let live = live.as_ref().filter(|l| l.is_open())?;
        Some(self.settings.host_label(live.host_index))
    }

    async fn install(&self, connection: Connection, host_index: usize) -> Result<Arc<Live>> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let live = Arc::new(Live {
            generation,
            host_index,
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
            live.close(tokio::time::Instant::now() + CLOSE_TIMEOUT)
                .await;
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
            let host = self.settings.host_label(live.host_index);
            tracing::warn!(target: "ferrybus::rabbitmq", generation = live.generation, %host, %reason, "connection lost; reconnecting");
            self.live.send_replace(None);
            self.events.emit(Event::Disconnected {
                generation: live.generation,
                reason,
            });
            // Fail over: the next attempt goes to the next host (the same one if there is only
            // one), after a random pause so that many clients losing one node at once do not
            // all reconnect in the same instant.
            self.next_host.store(live.host_index + 1, Ordering::SeqCst);
            let spread = self.settings.reconnect_min.mul_f64(fastrand::f64() * 5.0);
            tokio::select! {
                () = tokio::time::sleep(spread) => {}
                () = self.shutdown.cancelled() => return,
            }
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
