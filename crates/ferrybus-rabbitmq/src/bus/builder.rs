//! [`RabbitMqBusBuilder`]: the host, the storage, the receive endpoints and the transport
//! options of a [`RabbitMqBus`], in one configuration tree.

use std::time::Duration;

use ferrybus_core::integration::Storage;
use ferrybus_core::outgoing::Serializer;
use ferrybus_core::{BusConfig, EndpointConfig};

use super::{BusOptions, RabbitMqBus};
use crate::connection::Connector;
use crate::delay::DelayMode;
use crate::error::{ErrorKind, RabbitMqError, Result};
#[cfg(doc)]
use crate::event::Event;
use crate::event::Events;
use crate::queue::DEFAULT_CONSUMER_TIMEOUT;
use crate::settings::HostSettings;

/// Configures a [`RabbitMqBus`]: the host, the storage, the receive endpoints and transport
/// options. Starting the bus starts everything they need; stopping it stops them in order.
///
/// ```no_run
/// use std::time::Duration;
/// use ferrybus_core::RetryPolicy;
/// use ferrybus_rabbitmq::{DelayMode, QueueEndpointExt, RabbitMqBus};
/// # async fn run() -> Result<(), ferrybus_rabbitmq::RabbitMqError> {
/// let bus = RabbitMqBus::builder("amqp://guest:guest@localhost:5672/%2f")
///     .connection_name("billing")
///     .receive_endpoint("billing-invoice", |e| {
///         e.prefetch(16).concurrency(4).quorum().retry(RetryPolicy::immediate(2))
///     })
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
    config: BusConfig,
    options: BusOptions,
}

impl RabbitMqBusBuilder {
    /// A builder for the broker at `uri` (`amqp://user:pass@host:port/vhost`, `amqps://...`; a
    /// comma-separated list of them, or one URI with several hosts, for a cluster). A bad URI is
    /// reported by [`start`](Self::start), without its password.
    pub fn new(uri: &str) -> Self {
        Self {
            settings: HostSettings::parse(uri),
            config: instrumented(BusConfig::default()),
            options: BusOptions {
                delay_mode: DelayMode::Auto,
                shutdown_timeout: Duration::from_secs(30),
                consumer_timeout: DEFAULT_CONSUMER_TIMEOUT,
            },
        }
    }

    /// Changes the bus configuration directly: layers every endpoint or consumer of the bus
    /// gets ([`BusConfig::endpoint_layer`], [`BusConfig::consumer_layer`]).
    ///
    /// ```
    /// use ferrybus_core::endpoint::BoxEndpointLayer;
    /// let builder = ferrybus_rabbitmq::RabbitMqBus::builder("amqp://localhost").configure(|bus| {
    ///     bus.endpoint_layer(|_| BoxEndpointLayer::new(tower::layer::util::Identity::new()))
    /// });
    /// # let _ = builder;
    /// ```
    pub fn configure(mut self, configure: impl FnOnce(BusConfig) -> BusConfig) -> Self {
        self.config = configure(self.config);
        self
    }

    fn settings(mut self, f: impl FnOnce(&mut HostSettings)) -> Self {
        if let Ok(settings) = self.settings.as_mut() {
            f(settings);
        }
        self
    }

    /// Adds a receive endpoint named `name` (its queue and exchange), configured in one place by
    /// `configure`: prefetch, concurrency, queue options, retry, redelivery, inbox, consumers and
    /// layers (MassTransit's `cfg.ReceiveEndpoint("name", e => …)`).
    pub fn receive_endpoint(
        mut self,
        name: impl Into<String>,
        configure: impl FnOnce(EndpointConfig) -> EndpointConfig,
    ) -> Self {
        self.config = self.config.receive_endpoint(name, configure);
        self
    }

    /// Sets the storage (e.g. `ferrybus_sea_orm::PostgresStorage`): the inbox of endpoints that
    /// use it, and the outbox delivery, sweeper and cleanup the bus runs while it runs.
    pub fn storage(mut self, storage: impl Storage) -> Self {
        self.config = self.config.storage(storage);
        self
    }

    /// Writes every message of the bus with `serializer` and lets its endpoints read that form
    /// besides envelopes ([`BusConfig::serializer`]): MassTransit's `cfg.UseRawJsonSerializer()`
    /// is `.serializer(Serializer::raw_json())`.
    ///
    /// ```
    /// use ferrybus_core::outgoing::Serializer;
    /// let builder = ferrybus_rabbitmq::RabbitMqBus::builder("amqp://localhost")
    ///     .serializer(Serializer::raw_json());
    /// # let _ = builder;
    /// ```
    pub fn serializer(mut self, serializer: Serializer) -> Self {
        self.config = self.config.serializer(serializer);
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

    /// Trusts the certificates in `pem` (one or more PEM certificates, e.g. a private CA) for
    /// `amqps://` connections, besides the system's. The TLS stack is rustls.
    pub fn tls_root_certificates(self, pem: impl Into<String>) -> Self {
        let pem = pem.into();
        self.settings(|s| s.tls_roots = Some(pem))
    }

    /// How delayed redeliveries are sent ([`DelayMode::Auto`] by default).
    pub fn delay_mode(mut self, mode: DelayMode) -> Self {
        self.options.delay_mode = mode;
        self
    }

    /// How long `stop` lets in-flight messages finish (30 s by default); also how long a pause
    /// waits for the deliveries in flight. `stop` returns within it plus two seconds.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.options.shutdown_timeout = timeout;
        self
    }

    /// The broker's delivery acknowledgement timeout (its `consumer_timeout`; RabbitMQ's default
    /// is [30 minutes](DEFAULT_CONSUMER_TIMEOUT)), if yours sets another: a delivery not settled
    /// within it is taken back by the broker, which closes its channel and redelivers it. ferrybus
    /// does not read it from the broker; it warns at start about an endpoint whose in-memory retry
    /// can wait longer than this in all (an endpoint's `x-consumer-timeout` queue argument, on
    /// RabbitMQ 3.12 and later, counts instead for that endpoint).
    pub fn consumer_timeout(mut self, timeout: Duration) -> Self {
        self.options.consumer_timeout = timeout;
        self
    }

    /// Prepares the storage (migrations when asked), connects, starts the storage's background
    /// services, declares every endpoint's topology and starts consuming. Returns once every
    /// endpoint consumes, or the first error; fails if the broker cannot be reached within the
    /// [connect timeout](Self::connect_timeout). To start while the broker may be down, use
    /// [`start_background`](Self::start_background).
    pub async fn start(self) -> Result<RabbitMqBus> {
        let settings = self.settings?;
        self.config.validate()?;
        prepare(&self.config).await?;
        let events = Events::new();
        let connector = Connector::start(settings.clone(), events.clone()).await?;
        let bus = RabbitMqBus::assemble(&settings, self.config, connector, events, self.options);
        bus.start_storage();
        for ready in bus.spawn_endpoints(true) {
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

    /// Returns the bus without waiting for the broker: the configuration is checked (the URI,
    /// the endpoints), the storage is prepared (migrations when asked: the database must be
    /// reachable) and its background services start. The connection is opened in the
    /// background and re-tried with the [reconnect back-off](Self::reconnect_backoff) for as
    /// long as it takes (the first failed attempt is logged at WARN, then one a minute;
    /// [`Event::ConnectFailed`] for each); [`Event::Connected`] follows once it is open. Every
    /// endpoint then declares its topology and consumes ([`Event::EndpointReady`]); an endpoint
    /// that cannot be declared (e.g. `PRECONDITION_FAILED`) reports [`Event::EndpointFailed`]
    /// and tries again after a back-off instead of failing the start.
    ///
    /// Until the connection is open, a publish or send waits for it up to the
    /// [publish timeout](Self::publish_timeout), then fails with
    /// [`PublishErrorKind::NotConnected`](ferrybus_core::error::PublishErrorKind::NotConnected) (the
    /// message names the last connection error); the storage's outbox delivery backs off and
    /// tries again meanwhile. [`RabbitMqBus::is_connected`] tells whether it is open now;
    /// [`RabbitMqBus::stop`] works at any time.
    ///
    /// Use it for services that must come up while RabbitMQ is down, e.g. an API writing to an
    /// outbox; use [`start`](Self::start) to fail fast instead. Polled outside a Tokio runtime it
    /// fails with [`ErrorKind::Config`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use ferrybus_core::Publish;
    /// use ferrybus_core::error::PublishErrorKind;
    /// use ferrybus_rabbitmq::{Event, RabbitMqBus};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct OrderPlaced { id: u32 }
    /// # impl ferrybus_core::Message for OrderPlaced {
    /// #     fn message_type() -> ferrybus_core::MessageType { ferrybus_core::MessageType::parse("Shop:OrderPlaced").unwrap() }
    /// # }
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let bus = RabbitMqBus::builder("amqp://guest:guest@localhost:5672/%2f")
    ///     .connection_name("order-api")
    ///     .publish_timeout(Duration::from_secs(5))
    ///     .start_background()
    ///     .await?; // returns at once, broker or not
    ///
    /// match bus.publish(&OrderPlaced { id: 7 }).await {
    ///     Ok(message_id) => println!("published {message_id}"),
    ///     // Still no connection after 5 s: keep the message (e.g. in an outbox) and retry later.
    ///     Err(e) if e.kind() == PublishErrorKind::NotConnected => eprintln!("broker down: {e}"),
    ///     Err(e) => return Err(e.into()),
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
    pub async fn start_background(self) -> Result<RabbitMqBus> {
        let settings = self.settings?;
        self.config.validate()?;
        prepare(&self.config).await?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            RabbitMqError::new(
                ErrorKind::Config,
                "start_background must be called within a Tokio runtime",
            )
        })?;
        let events = Events::new();
        let connector = Connector::start_background(settings.clone(), events.clone(), &runtime);
        let bus = RabbitMqBus::assemble(&settings, self.config, connector, events, self.options);
        bus.start_storage();
        bus.spawn_endpoints(false);
        Ok(bus)
    }
}

async fn prepare(config: &BusConfig) -> Result<()> {
    config.prepare_storage().await.map_err(|error| {
        RabbitMqError::with_source(ErrorKind::Config, "preparing the storage", error)
    })
}

/// Every endpoint and consumer of a RabbitMQ bus carries MassTransit's spans and metrics when the
/// `otel` feature is on (the default).
#[cfg(feature = "otel")]
fn instrumented(config: BusConfig) -> BusConfig {
    ferrybus_otel::instrument(config)
}

#[cfg(not(feature = "otel"))]
fn instrumented(config: BusConfig) -> BusConfig {
    config
}
