//! [`RabbitMqBus`] and its builder: MassTransit's `UsingRabbitMq` + `ReceiveEndpoint` in Rust.

mod builder;

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

pub use builder::RabbitMqBusBuilder;

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
