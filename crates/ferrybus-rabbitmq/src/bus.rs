//! [`RabbitMqBus`] and its builder: MassTransit's `UsingRabbitMq` + `ReceiveEndpoint` in Rust.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrybus_core::{
    HostAddress, Message, MessageFactory, MessageOrigin, OutgoingMessage, SendOptions,
};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::connection::Connector;
use crate::delay::DelayMode;
use crate::endpoint::EndpointRunner;
use crate::error::{ErrorKind, RabbitMqError, Result};
use crate::event::{Event, Events};
use crate::naming::temporary_queue_name;
use crate::publish::Publisher;
use crate::queue::ReceiveEndpoint;
use crate::request::ResponseEndpoint;
use crate::settings::HostSettings;
use crate::topology::QueueDecl;

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

pub(crate) struct Inner {
    pub(crate) address: String,
    pub(crate) bus_queue: String,
    host: HostAddress,
    pub(crate) connector: Arc<Connector>,
    pub(crate) publisher: Publisher,
    pub(crate) factory: Arc<MessageFactory>,
    pub(crate) events: Events,
    stop: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
    pub(crate) responses: tokio::sync::OnceCell<Arc<ResponseEndpoint>>,
    shutdown_timeout: Duration,
    delay_mode: DelayMode,
}

/// A running bus on RabbitMQ: publish and send from outside consumers, subscribe to
/// [`Event`]s, create request clients, stop gracefully. Cheap to clone.
///
/// ```no_run
/// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig, Message, MessageType};
/// use ferrybus_rabbitmq::RabbitMqBus;
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct OrderPlaced { id: u32 }
/// # impl Message for OrderPlaced {
/// #     fn message_type() -> MessageType { MessageType::parse("Shop:OrderPlaced").unwrap() }
/// # }
/// # async fn run() -> Result<(), ferrybus_rabbitmq::RabbitMqError> {
/// let bus = RabbitMqBus::builder("amqp://guest:guest@localhost:5672/%2f")
///     .receive_endpoint(EndpointConfig::new("order-audit").consumer(consumer_fn(
///         "OrderAuditConsumer",
///         |ctx: ConsumeContext<OrderPlaced>| async move {
///             println!("order {}", ctx.message().id);
///             Ok::<_, ConsumeError>(())
///         },
///     )))
///     .start()
///     .await?;
/// bus.publish(&OrderPlaced { id: 7 }).await?;
/// bus.send("queue:order-audit", &OrderPlaced { id: 8 }).await?;
/// bus.stop().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RabbitMqBus {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for RabbitMqBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqBus")
            .field("address", &self.inner.address)
            .finish_non_exhaustive()
    }
}

impl RabbitMqBus {
    fn assemble(
        settings: &HostSettings,
        connector: Arc<Connector>,
        events: Events,
        shutdown_timeout: Duration,
        delay_mode: DelayMode,
    ) -> Self {
        let host = settings.host_address();
        let factory = Arc::new(MessageFactory::new(host.clone()));
        let publisher = Publisher::new(connector.clone());
        let bus_queue = temporary_queue_name("bus");
        RabbitMqBus {
            inner: Arc::new(Inner {
                address: format!("{}?temporary=true", host.entity_address(&bus_queue)),
                bus_queue,
                host,
                connector,
                publisher,
                factory,
                events,
                stop: CancellationToken::new(),
                tasks: Mutex::new(JoinSet::new()),
                responses: tokio::sync::OnceCell::new(),
                shutdown_timeout,
                delay_mode,
            }),
        }
    }

    /// A builder for the broker at `uri`.
    pub fn builder(uri: &str) -> RabbitMqBusBuilder {
        RabbitMqBusBuilder::new(uri)
    }

    /// The bus address, `rabbitmq://host/vhost/<machine>_<process>_bus_<id>?temporary=true`:
    /// the `sourceAddress` of messages sent from outside consumers, and the response address of
    /// requests.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// The host address (`rabbitmq://host/vhost/`).
    pub fn host(&self) -> &HostAddress {
        &self.inner.host
    }

    /// Subscribes to connection and endpoint [`Event`]s from now on.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// The sink that puts [`OutgoingMessage`]s on the broker (for outbox relays).
    pub fn sink(&self) -> Publisher {
        self.inner.publisher.clone()
    }

    /// The factory building MassTransit-shaped messages for this host.
    pub fn factory(&self) -> &MessageFactory {
        &self.inner.factory
    }

    pub(crate) fn origin(&self) -> MessageOrigin {
        MessageOrigin {
            source_address: Some(self.inner.address.clone()),
            ..MessageOrigin::default()
        }
    }

    /// Publishes `message` to its type's exchange; returns the message id once confirmed.
    pub async fn publish<M: Message>(&self, message: &M) -> Result<Uuid> {
        self.publish_with(message, SendOptions::new()).await
    }

    /// Publishes with options (headers, TTL, correlation id ...).
    pub async fn publish_with<M: Message>(
        &self,
        message: &M,
        options: SendOptions,
    ) -> Result<Uuid> {
        let out = self
            .inner
            .factory
            .publish(message, &self.origin(), options)
            .map_err(serialization)?;
        self.deliver(out).await
    }

    /// Sends `message` to `address`: `queue:name`, `exchange:name`, or
    /// `rabbitmq://host/vhost/name?bind=true&temporary=true...`; returns the message id once
    /// confirmed.
    pub async fn send<M: Message>(&self, address: &str, message: &M) -> Result<Uuid> {
        self.send_with(address, message, SendOptions::new()).await
    }

    /// Sends with options.
    pub async fn send_with<M: Message>(
        &self,
        address: &str,
        message: &M,
        options: SendOptions,
    ) -> Result<Uuid> {
        let out = self
            .inner
            .factory
            .send(address, message, &self.origin(), options)
            .map_err(serialization)?;
        self.deliver(out).await
    }

    /// Delivers a prepared message; returns its id once confirmed.
    pub async fn deliver(&self, message: OutgoingMessage) -> Result<Uuid> {
        self.inner.publisher.send(&message).await?;
        Ok(message.message_id)
    }

    /// Whether the bus has an open connection to the broker right now. False before the first
    /// connection of a bus started with
    /// [`start_background`](RabbitMqBusBuilder::start_background), while reconnecting, and after
    /// [`stop`](Self::stop).
    pub fn is_connected(&self) -> bool {
        self.inner.connector.is_connected()
    }

    /// Spawns the endpoint's receive loop. With `report`, the outcome of its first setup comes
    /// back on the receiver and a failed first setup ends the endpoint; without, a failed setup
    /// is retried.
    fn spawn_endpoint(
        &self,
        endpoint: ReceiveEndpoint,
        report: bool,
    ) -> Option<oneshot::Receiver<Result<()>>> {
        let (ready, rx) = if report {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let runner = self.runner(endpoint);
        self.tasks().spawn(runner.run(ready));
        rx
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, JoinSet<()>> {
        self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn runner(&self, endpoint: ReceiveEndpoint) -> EndpointRunner {
        let inner = &self.inner;
        let ReceiveEndpoint {
            config,
            options,
            bind_message_types,
        } = endpoint;
        let queue = QueueDecl::for_endpoint(config.queue(), &options);
        let message_types = if bind_message_types {
            config
                .message_types()
                .iter()
                .map(|t| t.entity_name().to_owned())
                .collect()
        } else {
            Vec::new()
        };
        let (prefetch, concurrency) = (config.prefetch_count(), config.concurrency_limit());
        let pipeline_cancel = CancellationToken::new();
        let input_address = inner.host.entity_address(config.queue());
        let pipeline = config.build(
            input_address,
            Arc::new(inner.publisher.clone()),
            inner.factory.clone(),
            pipeline_cancel.clone(),
        );
        EndpointRunner {
            queue,
            message_types,
            prefetch,
            concurrency,
            pipeline,
            pipeline_cancel,
            connector: inner.connector.clone(),
            events: inner.events.clone(),
            delay_mode: inner.delay_mode,
            stop: inner.stop.clone(),
            shutdown_timeout: inner.shutdown_timeout,
        }
    }

    /// Stops gracefully: endpoints stop taking deliveries (`basic.cancel`), in-flight messages
    /// finish (up to the shutdown timeout, else they are left unacknowledged for the broker to
    /// redeliver), outstanding confirms are awaited, and the connection is closed.
    pub async fn stop(&self) {
        self.inner.stop.cancel();
        let mut tasks = std::mem::take(&mut *self.tasks());
        while tasks.join_next().await.is_some() {}
        if let Some(responses) = self.inner.responses.get() {
            responses.stop();
        }
        self.inner.connector.close().await;
        self.inner.events.emit(Event::Stopped);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stop.is_cancelled()
    }
}

fn serialization(error: ferrybus_core::BoxError) -> RabbitMqError {
    match error.downcast::<ferrybus_core::AddressError>() {
        Ok(address) => (*address).into(),
        Err(error) => {
            RabbitMqError::with_source(ErrorKind::Serialization, "building the message", error)
        }
    }
}
