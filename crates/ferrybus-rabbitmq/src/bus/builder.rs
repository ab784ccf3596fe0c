//! [`RabbitMqBusBuilder`]: the host, receive endpoints and transport options of a
//! [`RabbitMqBus`].

use std::time::Duration;

use super::RabbitMqBus;
use crate::connection::Connector;
use crate::delay::DelayMode;
use crate::error::{ErrorKind, RabbitMqError, Result};
#[cfg(doc)]
use crate::event::Event;
use crate::event::Events;
use crate::queue::ReceiveEndpoint;
use crate::settings::HostSettings;

/// Configures a [`RabbitMqBus`]: the host, receive endpoints and transport options.
///
/// ```no_run
/// use std::time::Duration;
/// use ferrybus_core::EndpointConfig;
/// use ferrybus_rabbitmq::{DelayMode, RabbitMqBus, ReceiveEndpoint};
/// # async fn run() -> Result<(), ferrybus_rabbitmq::RabbitMqError> {
/// let bus = RabbitMqBus::builder("amqp://guest:guest@localhost:5672/%2f")
///     .connection_name("billing")
///     .receive_endpoint(ReceiveEndpoint::new(EndpointConfig::new("billing-invoice")).quorum())
///     .delay_mode(DelayMode::Auto)
///     .shutdown_timeout(Duration::from_secs(10))
///     .start()
///     .await?;
/// bus.stop().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RabbitMqBusBuilder {
    settings: Result<HostSettings>,
    endpoints: Vec<ReceiveEndpoint>,
    delay_mode: DelayMode,
    shutdown_timeout: Duration,
}

impl RabbitMqBusBuilder {
    /// A builder for the broker at `uri` (`amqp://user:pass@host:port/vhost`, `amqps://...`).
    /// A bad URI is reported by [`start`](Self::start).
    pub fn new(uri: &str) -> Self {
        Self {
            settings: HostSettings::parse(uri),
            endpoints: Vec::new(),
            delay_mode: DelayMode::Auto,
            shutdown_timeout: Duration::from_secs(30),
        }
    }

    fn settings(mut self, f: impl FnOnce(&mut HostSettings)) -> Self {
        if let Ok(settings) = self.settings.as_mut() {
            f(settings);
        }
        self
    }

    /// The connection name shown by the broker (`connection_name` client property).
    pub fn connection_name(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.settings(|s| s.connection_name = Some(name))
    }

    /// How long [`start`](Self::start) keeps trying to connect, and the timeout of one
    /// connection attempt (30 s by default). [`start_background`](Self::start_background) and
    /// reconnects keep trying for as long as it takes; this only bounds each attempt.
    pub fn connect_timeout(self, timeout: Duration) -> Self {
        self.settings(|s| s.connect_timeout = timeout)
    }

    /// How long a publish waits for a connection (then [`ErrorKind::NotConnected`]), and then
    /// for its declarations and confirm (then [`ErrorKind::Timeout`]); 30 s by default.
    pub fn publish_timeout(self, timeout: Duration) -> Self {
        self.settings(|s| s.publish_timeout = timeout)
    }

    /// The reconnect back-off: from `min`, doubling up to `max` (100 ms to 5 s by default).
    pub fn reconnect_backoff(self, min: Duration, max: Duration) -> Self {
        self.settings(|s| {
            s.reconnect_min = min;
            s.reconnect_max = max.max(min);
        })
    }

    /// Adds a receive endpoint (an [`EndpointConfig`](ferrybus_core::EndpointConfig) converts).
    pub fn receive_endpoint(mut self, endpoint: impl Into<ReceiveEndpoint>) -> Self {
        self.endpoints.push(endpoint.into());
        self
    }

    /// How delayed redeliveries are sent ([`DelayMode::Auto`] by default).
    pub fn delay_mode(mut self, mode: DelayMode) -> Self {
        self.delay_mode = mode;
        self
    }

    /// How long `stop` lets in-flight messages finish (30 s by default).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Connects, declares every endpoint's topology and starts consuming. Returns once every
    /// endpoint consumes, or the first setup error; fails if the broker cannot be reached within
    /// the [connect timeout](Self::connect_timeout). To start while the broker may be down, use
    /// [`start_background`](Self::start_background).
    pub async fn start(self) -> Result<RabbitMqBus> {
        let settings = self.settings?;
        check_endpoints(&self.endpoints)?;
        let events = Events::new();
        let connector = Connector::start(settings.clone(), events.clone()).await?;
        let bus = RabbitMqBus::assemble(
            &settings,
            connector,
            events,
            self.shutdown_timeout,
            self.delay_mode,
        );
        let mut readies = Vec::new();
        for endpoint in self.endpoints {
            readies.push(bus.spawn_endpoint(endpoint, true));
        }
        for ready in readies.into_iter().flatten() {
            let outcome = ready
                .await
                .unwrap_or_else(|_| Err(RabbitMqError::new(ErrorKind::Stopped, "endpoint ended")));
            if let Err(error) = outcome {
                bus.stop().await;
                return Err(error);
            }
        }
        Ok(bus)
    }

    /// Returns the bus at once, without waiting for the broker: only the configuration is
    /// checked (the URI, the endpoint names). The connection is opened in the background and
    /// re-tried with the [reconnect back-off](Self::reconnect_backoff) for as long as it takes
    /// (the first failed attempt is logged at WARN, then one a minute; [`Event::ConnectFailed`]
    /// for each); [`Event::Connected`] follows once it is open. Every endpoint then declares
    /// its topology and consumes ([`Event::EndpointReady`]); an endpoint that cannot be declared
    /// (e.g. `PRECONDITION_FAILED`) reports [`Event::EndpointFailed`] and tries again after a
    /// back-off instead of failing the start.
    ///
    /// Until the connection is open, [`publish`](RabbitMqBus::publish),
    /// [`send`](RabbitMqBus::send), [`deliver`](RabbitMqBus::deliver) and the
    /// [`sink`](RabbitMqBus::sink) wait for it up to the
    /// [publish timeout](Self::publish_timeout), then fail with [`ErrorKind::NotConnected`]
    /// (the message names the last connection error). [`RabbitMqBus::is_connected`] tells
    /// whether it is open now; [`RabbitMqBus::stop`] works at any time.
    ///
    /// Use it for services that must come up while RabbitMQ is down, e.g. an API writing to an
    /// outbox; use [`start`](Self::start) to fail fast instead. Must be called within a Tokio
    /// runtime (else an [`ErrorKind::Config`] error).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use ferrybus_core::EndpointConfig;
    /// use ferrybus_rabbitmq::{ErrorKind, Event, RabbitMqBus};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct OrderPlaced { id: u32 }
    /// # impl ferrybus_core::Message for OrderPlaced {
    /// #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Shop:OrderPlaced").unwrap() }
    /// # }
    /// # async fn run() -> Result<(), ferrybus_rabbitmq::RabbitMqError> {
    /// let bus = RabbitMqBus::builder("amqp://guest:guest@localhost:5672/%2f")
    ///     .connection_name("order-api")
    ///     .publish_timeout(Duration::from_secs(5))
    ///     .receive_endpoint(EndpointConfig::new("order-audit"))
    ///     .start_background()?; // returns at once, broker or not
    ///
    /// match bus.publish(&OrderPlaced { id: 7 }).await {
    ///     Ok(message_id) => println!("published {message_id}"),
    ///     // Still no connection after 5 s: keep the message (e.g. in an outbox) and retry later.
    ///     Err(e) if e.kind() == ErrorKind::NotConnected => eprintln!("broker down: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    ///
    /// // Or wait for the connection explicitly.
    /// let mut events = bus.events();
    /// while !bus.is_connected() {
    ///     if let Ok(Event::Connected { .. }) = events.recv().await {
    ///         break;
    ///     }
    /// }
    /// bus.stop().await;
    /// # Ok(()) }
    /// ```
    pub fn start_background(self) -> Result<RabbitMqBus> {
        let settings = self.settings?;
        check_endpoints(&self.endpoints)?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            RabbitMqError::new(
                ErrorKind::Config,
                "start_background must be called within a Tokio runtime",
            )
        })?;
        let events = Events::new();
        let connector = Connector::start_background(settings.clone(), events.clone(), &runtime);
        let bus = RabbitMqBus::assemble(
            &settings,
            connector,
            events,
            self.shutdown_timeout,
            self.delay_mode,
        );
        for endpoint in self.endpoints {
            bus.spawn_endpoint(endpoint, false);
        }
        Ok(bus)
    }
}

fn check_endpoints(endpoints: &[ReceiveEndpoint]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for e in endpoints {
        if e.queue().is_empty() || !seen.insert(e.queue().to_owned()) {
            return Err(RabbitMqError::new(
                ErrorKind::Config,
                format!(
                    "endpoint queue names must be unique and non-empty: {:?}",
                    e.queue()
                ),
            ));
        }
    }
    Ok(())
}
