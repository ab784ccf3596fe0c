//! [`RabbitMqBus`] and its builder: MassTransit's `AddMassTransit` + `UsingRabbitMq` +
//! `ReceiveEndpoint` in one configuration tree.

mod builder;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::request::BusHandle;
use ferrybus_core::address::HostAddress;
use ferrybus_core::consume::{BoxConsumeLayer, ConsumeRequest};
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::outgoing::MessageOrigin;
use ferrybus_core::outgoing::MessageSink;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::pause::{Dependency, EndpointControl, EndpointState};
use ferrybus_core::storage::Background;
use ferrybus_core::{BusConfig, EndpointConfig, Publish, PublishError};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::connection::Connector;
use crate::delay::DelayMode;
use crate::endpoint::EndpointRunner;
use crate::error::Result;
use crate::event::{Event, Events};
use crate::naming::temporary_queue_name;
use crate::properties::RabbitMqProperties;
use crate::publish::Publisher;
use crate::queue::{QueueEndpointExt, QueueOptions};
use crate::request::ResponseEndpoint;
use crate::settings::HostSettings;
use crate::shutdown::Shutdown;
use crate::topology::EndpointTopology;

pub use builder::RabbitMqBusBuilder;

/// The transport options of a bus, set on its builder.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BusOptions {
    pub(crate) delay_mode: DelayMode,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) consumer_timeout: Duration,
}

pub(crate) struct Inner {
    pub(crate) address: String,
    pub(crate) bus_queue: String,
    host: HostAddress,
    origin: MessageOrigin,
    pub(crate) connector: Arc<Connector>,
    pub(crate) publisher: Publisher,
    pub(crate) factory: Arc<MessageFactory>,
    pub(crate) events: Events,
    config: BusConfig,
    stop: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
    background: Mutex<Background>,
    pub(crate) responses: tokio::sync::OnceCell<Arc<ResponseEndpoint>>,
    shutdown: Shutdown,
    delay_mode: DelayMode,
    consumer_timeout: Duration,
    controls: Mutex<Vec<(String, EndpointControl)>>,
}

/// A running bus on RabbitMQ: its receive endpoints consume, its storage's background services
/// run; publish and send through [`Publish`], subscribe to [`Event`]s, create request clients,
/// stop gracefully. Cheap to clone.
///
/// ```no_run
/// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Message, MessageType, Publish};
/// use ferrybus_rabbitmq::RabbitMqBus;
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct OrderPlaced { id: u32 }
/// # impl Message for OrderPlaced {
/// #     fn message_type() -> MessageType { MessageType::parse("Shop:OrderPlaced").unwrap() }
/// # }
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let bus = RabbitMqBus::builder("amqp://guest:guest@localhost:5672/%2f")
///     .receive_endpoint("order-audit", |e| {
///         e.consumer(consumer_fn("OrderAuditConsumer", |ctx: ConsumeContext<OrderPlaced>| async move {
///             println!("order {}", ctx.message().id);
///             Ok::<_, ConsumeError>(())
///         }))
///     })
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
        config: BusConfig,
        connector: Arc<Connector>,
        events: Events,
        options: BusOptions,
    ) -> Self {
        let host = settings.host_address();
        let factory = Arc::new(
            MessageFactory::new(host.clone())
                .with_transport(Arc::new(RabbitMqProperties))
                .with_serializer(config.serializer_ref()),
        );
        let publisher = Publisher::new(connector.clone());
        let bus_queue = temporary_queue_name("bus");
        let address = format!("{}?temporary=true", host.entity_address(&bus_queue));
        RabbitMqBus {
            inner: Arc::new(Inner {
                origin: MessageOrigin {
                    source_address: Some(address.clone()),
                    ..MessageOrigin::default()
                },
                address,
                bus_queue,
                host,
                connector,
                publisher,
                factory,
                events,
                config,
                stop: CancellationToken::new(),
                tasks: Mutex::new(JoinSet::new()),
                background: Mutex::new(Background::default()),
                responses: tokio::sync::OnceCell::new(),
                shutdown: Shutdown::new(options.shutdown_timeout),
                delay_mode: options.delay_mode,
                consumer_timeout: options.consumer_timeout,
                controls: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A builder for the broker at `uri`: one URI, a comma-separated list of URIs (a cluster),
    /// or one URI with several hosts (see [`HostSettings`]).
    pub fn builder(uri: &str) -> RabbitMqBusBuilder {
        RabbitMqBusBuilder::new(uri)
    }

    /// A builder for a cluster: the bus connects to the first of `uris` that answers and fails
    /// over to the next when its connection is lost.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), ferrybus_rabbitmq::RabbitMqError> {
    /// let bus = ferrybus_rabbitmq::RabbitMqBus::cluster([
    ///     "amqp://app:secret@rabbit-1:5672/%2f",
    ///     "amqp://app:secret@rabbit-2:5672/%2f",
    ///     "amqp://app:secret@rabbit-3:5672/%2f",
    /// ])
    /// .start()
    /// .await?;
    /// println!("connected to {:?}", bus.connected_host());
    /// # Ok(()) }
    /// ```
    pub fn cluster<I, S>(uris: I) -> RabbitMqBusBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let joined = uris
            .into_iter()
            .map(|u| u.as_ref().trim().to_owned())
            .collect::<Vec<_>>()
            .join(",");
        RabbitMqBusBuilder::new(&joined)
    }

    /// `host:port` of the broker node the bus is connected to now (no credentials), `None`
    /// while it is not connected.
    pub fn connected_host(&self) -> Option<String> {
        self.inner.connector.connected_host()
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

    /// Whether the bus has an open connection to the broker right now. False before the first
    /// connection of a bus started with
    /// [`start_background`](RabbitMqBusBuilder::start_background), while reconnecting, and after
    /// [`stop`](Self::stop).
    pub fn is_connected(&self) -> bool {
        self.inner.connector.is_connected()
    }

    /// Starts the storage's background services (outbox delivery, sweeper, cleanup), which send
    /// through this bus.
    fn start_storage(&self) {
        let background = self
            .inner
            .config
            .start_storage(Arc::new(self.inner.publisher.clone()));
        *self.background() = background;
    }

    fn background(&self) -> std::sync::MutexGuard<'_, Background> {
        self.inner
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Spawns every endpoint's receive loop. With `report`, the outcome of each first setup
    /// comes back on the receivers and a failed first setup ends that endpoint; without, a
    /// failed setup is retried.
    fn spawn_endpoints(&self, report: bool) -> Vec<oneshot::Receiver<Result<()>>> {
        let mut readies = Vec::new();
        for endpoint in self.inner.config.endpoints() {
            let (ready, rx) = if report {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            } else {
                (None, None)
            };
            readies.extend(rx);
            let runner = self.runner(endpoint);
            self.tasks().spawn(runner.run(ready));
        }
        readies
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, JoinSet<()>> {
        self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn runner(&self, endpoint: &EndpointConfig) -> EndpointRunner {
        let inner = &self.inner;
        let pipeline_cancel = CancellationToken::new();
        let queue = endpoint.queue_options();
        warn_about_retry(endpoint, &queue, inner.consumer_timeout);
        let mut context = inner.config.endpoint_context(
            endpoint,
            inner.host.entity_address(endpoint.name()),
            Arc::new(inner.publisher.clone()),
            inner.factory.clone(),
            pipeline_cancel.clone(),
        );
        context.delivery_limit = queue.kept_delivery_limit();
        context.consumer_layers.push(self.handle_layer());
        let service = endpoint.build(context);
        let connector = inner.connector.clone();
        service.control().set_probe(Dependency::Broker, move || {
            let connected = connector.is_connected();
            async move { connected }
        });
        self.controls()
            .push((endpoint.name().to_owned(), service.control().clone()));
        let topology = EndpointTopology::for_endpoint(endpoint);
        warn_about_error_queues(&topology);
        EndpointRunner {
            topology,
            prefetch: endpoint.prefetch_count(),
            concurrency: endpoint.concurrency_limit(),
            service,
            pipeline_cancel,
            connector: inner.connector.clone(),
            publisher: inner.publisher.clone(),
            events: inner.events.clone(),
            delay_mode: inner.delay_mode,
            stop: inner.stop.clone(),
            shutdown: inner.shutdown.clone(),
        }
    }

    /// The consumer layer handing this bus to consumers, for their request clients
    /// ([`ConsumeContextRequestExt`](crate::ConsumeContextRequestExt)).
    fn handle_layer(&self) -> BoxConsumeLayer {
        let handle = BusHandle(Arc::downgrade(&self.inner));
        BoxConsumeLayer::new(tower::util::MapRequestLayer::new(
            move |mut request: ConsumeRequest| {
                request.extensions_mut().insert(handle.clone());
                request
            },
        ))
    }

    fn controls(&self) -> std::sync::MutexGuard<'_, Vec<(String, EndpointControl)>> {
        self.inner
            .controls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Every receive endpoint's state (running, or paused and why), for health checks.
    ///
    /// ```no_run
    /// # fn run(bus: ferrybus_rabbitmq::RabbitMqBus) {
    /// for (queue, state) in bus.endpoint_states() {
    ///     println!("{queue}: {}", if state.is_paused() { "paused" } else { "running" });
    /// }
    /// # }
    /// ```
    pub fn endpoint_states(&self) -> Vec<(String, EndpointState)> {
        self.controls()
            .iter()
            .map(|(name, control)| (name.clone(), control.state()))
            .collect()
    }

    /// The pause switch of the endpoint `queue` (to pause it by hand, or watch it), once the
    /// bus started it.
    pub fn endpoint_control(&self, queue: &str) -> Option<EndpointControl> {
        self.controls()
            .iter()
            .find(|(name, _)| name == queue)
            .map(|(_, control)| control.clone())
    }

    /// Stops gracefully, in order: endpoints stop taking deliveries (`basic.cancel`), in-flight
    /// messages finish (up to the shutdown timeout; then they are cancelled, and a second later
    /// left unacknowledged for the broker to redeliver), the storage's background services stop
    /// (a batch being sent is sent and recorded), outstanding confirms are awaited, and the
    /// connection is closed.
    ///
    /// It returns within the shutdown timeout plus two seconds whatever the broker does: every
    /// wait for it (an answer to `basic.cancel` or to a close, a publisher confirm) is bounded,
    /// so a broker that reads nothing from the connection (a memory or disk alarm blocks
    /// publishing connections) does not hold the stop up; what did not finish by then is left
    /// to the broker (unacknowledged deliveries are redelivered, an unconfirmed outbox message
    /// is sent again).
    pub async fn stop(&self) {
        let shutdown = &self.inner.shutdown;
        shutdown.begin();
        self.inner.stop.cancel();
        let end = shutdown.end();
        let mut tasks = std::mem::take(&mut *self.tasks());
        let endpoints = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout_at(end, endpoints).await.is_err() {
            tracing::warn!(target: "ferrybus::rabbitmq", "endpoints still stopping after the shutdown timeout; abandoned");
        }
        drop(tasks);
        let background = std::mem::take(&mut *self.background());
        if tokio::time::timeout_at(end, background.stop())
            .await
            .is_err()
        {
            tracing::warn!(target: "ferrybus::rabbitmq", "the storage's background services still stopping after the shutdown timeout; left to end on their own");
        }
        if let Some(responses) = self.inner.responses.get() {
            responses.stop();
        }
        self.inner.connector.close(end).await;
        self.inner.events.emit(Event::Stopped);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stop.is_cancelled()
    }
}

/// Warns when the endpoint's in-memory retry can wait longer, in all, than the broker lets a
/// delivery go unacknowledged: the broker would take the delivery back while it is retried, and
/// hand it to a consumer again.
fn warn_about_retry(endpoint: &EndpointConfig, queue: &QueueOptions, broker: Duration) {
    if let Some((retries, timeout)) = retry_outlasts(endpoint, queue, broker) {
        tracing::warn!(target: "ferrybus::rabbitmq", queue = endpoint.name(), ?retries, consumer_timeout = ?timeout, "the endpoint's retry policy can wait longer in all than the broker's consumer_timeout: the broker would close the channel and redeliver a message while it is retried; use fewer or shorter retries (delayed redelivery for long waits), or raise consumer_timeout");
    }
}

/// Warns when the endpoint's `_error` and `_skipped` queues copy arguments that can drop a
/// faulted message (MassTransit's declaration, kept by default).
fn warn_about_error_queues(topology: &EndpointTopology) {
    let dropping: Vec<&str> = topology
        .error()
        .queue()
        .message_dropping_arguments()
        .collect();
    if !dropping.is_empty() {
        tracing::warn!(target: "ferrybus::rabbitmq", queue = %topology.queue().name(), arguments = ?dropping, "the endpoint's error and skipped queues copy its queue's arguments, as MassTransit declares them, and these can expire or drop faulted messages; if no .NET service declares this endpoint, .error_queue_arguments(ErrorQueueArguments::KeepMessages) declares them without");
    }
}

/// The longest total delay of the endpoint's retry policy and the acknowledgement timeout that
/// applies to it (its queue's `x-consumer-timeout`, else the broker's), when the first is not
/// shorter.
fn retry_outlasts(
    endpoint: &EndpointConfig,
    queue: &QueueOptions,
    broker: Duration,
) -> Option<(Duration, Duration)> {
    let retries = endpoint.retry_policy()?.max_total_delay();
    let timeout = queue.consumer_timeout().unwrap_or(broker);
    (retries >= timeout).then_some((retries, timeout))
}

/// Publishes and sends with publisher confirms; waits up to the publish timeout for a
/// connection while the broker is away, then fails with
/// [`PublishErrorKind::NotConnected`](ferrybus_core::error::PublishErrorKind::NotConnected).
impl Publish for RabbitMqBus {
    fn message_factory(&self) -> &MessageFactory {
        &self.inner.factory
    }

    fn message_origin(&self) -> &MessageOrigin {
        &self.inner.origin
    }

    async fn deliver(&self, message: OutgoingMessage) -> std::result::Result<(), PublishError> {
        self.inner.publisher.deliver(message).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrybus_core::RetryPolicy;

    #[test]
    fn retries_longer_than_the_consumer_timeout_are_found() {
        let minute = Duration::from_secs(60);
        let broker = crate::DEFAULT_CONSUMER_TIMEOUT;
        let patient = EndpointConfig::new("q").retry(RetryPolicy::interval(4, 10 * minute));
        let check = |e: &EndpointConfig, timeout| retry_outlasts(e, &e.queue_options(), timeout);
        assert_eq!(check(&patient, broker), Some((40 * minute, 30 * minute)));
        assert_eq!(check(&patient, 60 * minute), None);
        let quick = EndpointConfig::new("q").retry(RetryPolicy::intervals([minute, 5 * minute]));
        assert_eq!(check(&quick, broker), None);
        assert_eq!(check(&EndpointConfig::new("q"), Duration::ZERO), None);
        // The queue's own timeout counts for its endpoint.
        let own = quick.queue_argument("x-consumer-timeout", 120_000);
        assert_eq!(check(&own, broker), Some((6 * minute, 2 * minute)));
    }
}
