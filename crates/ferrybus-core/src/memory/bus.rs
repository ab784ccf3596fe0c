//! The in-memory bus: receive endpoints on an [`InMemoryBroker`], with the same endpoint services
//! and the same settlement rules as the RabbitMQ transport (routing by message type, `_error` /
//! `_skipped` queues, faults published once after the move, retries, delayed redelivery).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::broker::{InMemoryBroker, StoredMessage};
use crate::address::HostAddress;
use crate::bus::BusConfig;
use crate::endpoint::{
    error_queue_name, skipped_queue_name, Delivery, Endpoint, EndpointConfig, Settlement,
    SettlementKind,
};
use crate::envelope::Headers;
use crate::error::BoxError;
use crate::error::PublishError;
use crate::outgoing::{MessageFactory, MessageOrigin, OutgoingMessage, DELAY_PROPERTY};
use crate::outgoing::{MessageSink, Publish};
use crate::storage::{Background, Storage};

/// Something that happened on the bus, for tests to wait on.
#[derive(Clone, Debug, PartialEq)]
pub enum BusEvent {
    /// A message left through the bus or a consumer (publish, send, respond, fault).
    Sent(Box<OutgoingMessage>),
    /// A delivery on `queue` was settled.
    Settled {
        /// The endpoint.
        queue: String,
        /// The message id property.
        message_id: Option<String>,
        /// How it was settled.
        settlement: SettlementKind,
    },
}

impl BusEvent {
    /// Whether this settled the delivery with message id property `id` as one of `kinds`.
    pub fn settles(&self, id: &str, kinds: &[SettlementKind]) -> bool {
        matches!(self, BusEvent::Settled { message_id: Some(m), settlement, .. }
            if m == id && kinds.contains(settlement))
    }
}

/// An append-only log of [`BusEvent`]s that waiters can watch.
#[derive(Clone)]
pub(crate) struct EventLog {
    events: Arc<Mutex<Vec<BusEvent>>>,
    version: watch::Sender<u64>,
}

impl EventLog {
    pub(crate) fn new() -> Self {
        Self {
            events: Arc::default(),
            version: watch::channel(0).0,
        }
    }

    pub(crate) fn push(&self, event: BusEvent) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
        self.version.send_modify(|v| *v += 1);
    }

    pub(crate) fn snapshot(&self) -> Vec<BusEvent> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

/// Delivers outgoing messages into the in-memory broker, declaring exchanges on first use and
/// binding a published type's exchange to its base types' exchanges.
#[derive(Clone)]
pub struct InMemorySink {
    broker: InMemoryBroker,
    events: EventLog,
}

#[async_trait]
impl MessageSink for InMemorySink {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        let destination = message.destination()?;
        self.broker.declare_exchange(&destination.name);
        if let Some(queue) = &destination.queue {
            self.broker.declare_queue(queue);
            self.broker.bind_queue(&destination.name, queue);
        }
        for base in &message.publish_bindings {
            self.broker.declare_exchange(base);
            self.broker.bind_exchange(&destination.name, base);
        }
        match delay_of(&message) {
            // A scheduled message waits in the process, as it would wait in the broker.
            Some(delay) => {
                let (broker, exchange) = (self.broker.clone(), destination.name.clone());
                let stored = stored(&message);
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    broker.publish(&exchange, stored);
                });
            }
            None => {
                self.broker.publish(&destination.name, stored(&message));
            }
        }
        self.events.push(BusEvent::Sent(Box::new(message)));
        Ok(())
    }
}

/// The `Delay` transport property of a scheduled message, when there is one.
fn delay_of(message: &OutgoingMessage) -> Option<std::time::Duration> {
    let text = message.properties.get(DELAY_PROPERTY)?.as_str()?;
    ferrybus_dotnet::timespan::parse_timespan(text)
        .ok()
        .filter(|d| !d.is_zero())
}

fn stored(message: &OutgoingMessage) -> StoredMessage {
    StoredMessage {
        body: message.body.clone(),
        content_type: Some(message.content_type.clone()),
        headers: message.headers.clone(),
        message_id: Some(message.message_id.to_string()),
        correlation_id: message.correlation_id.map(|c| c.to_string()),
        message_type: message.message_type.clone(),
        redelivered: false,
    }
}

/// Builds an [`InMemoryBus`]: the same configuration tree as the RabbitMQ bus.
#[derive(Debug, Default)]
pub struct InMemoryBusBuilder {
    config: BusConfig,
}

impl InMemoryBusBuilder {
    /// Adds a receive endpoint named `name`, configured by `configure`.
    pub fn receive_endpoint(
        mut self,
        name: impl Into<String>,
        configure: impl FnOnce(EndpointConfig) -> EndpointConfig,
    ) -> Self {
        self.config = self.config.receive_endpoint(name, configure);
        self
    }

    /// Sets the storage (inbox, outboxes and their background services).
    pub fn storage(mut self, storage: impl Storage) -> Self {
        self.config = self.config.storage(storage);
        self
    }

    /// Changes the bus configuration directly: layers an add-on puts on every endpoint
    /// ([`BusConfig::endpoint_layer`], [`BusConfig::consumer_layer`]).
    ///
    /// ```
    /// use ferrybus_core::memory::InMemoryBus;
    /// use ferrybus_core::endpoint::BoxEndpointLayer;
    /// let builder = InMemoryBus::builder().configure(|bus| {
    ///     bus.endpoint_layer(|_| BoxEndpointLayer::new(tower::layer::util::Identity::new()))
    /// });
    /// # let _ = builder;
    /// ```
    pub fn configure(mut self, configure: impl FnOnce(BusConfig) -> BusConfig) -> Self {
        self.config = configure(self.config);
        self
    }

    /// Prepares the storage, declares the topology and starts consuming.
    pub async fn start(self) -> Result<InMemoryBus, BoxError> {
        self.config.validate()?;
        self.config.prepare_storage().await?;
        let broker = InMemoryBroker::new();
        let events = EventLog::new();
        let factory = Arc::new(
            MessageFactory::new(HostAddress::loopback())
                .with_serializer(self.config.serializer_ref()),
        );
        let sink = InMemorySink {
            broker: broker.clone(),
            events: events.clone(),
        };
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for endpoint in self.config.endpoints() {
            let queue = endpoint.name().to_owned();
            broker.declare_endpoint(&queue);
            if endpoint.binds_message_types() {
                for t in endpoint.message_types() {
                    broker.declare_exchange(t.entity_name());
                    broker.bind_exchange(t.entity_name(), &queue);
                }
            }
            let context = self.config.endpoint_context(
                endpoint,
                factory.host().entity_address(&queue),
                Arc::new(sink.clone()),
                factory.clone(),
                CancellationToken::new(),
            );
            let runner = EndpointRunner {
                queue,
                broker: broker.clone(),
                events: events.clone(),
                sink: sink.clone(),
                service: endpoint.build(context),
            };
            tasks.spawn(runner.run(endpoint.concurrency_limit(), stop.clone()));
        }
        let background = self.config.start_storage(Arc::new(sink.clone()));
        let origin = MessageOrigin {
            source_address: Some(factory.host().entity_address("bus")),
            ..MessageOrigin::default()
        };
        Ok(InMemoryBus {
            broker,
            events,
            factory,
            origin,
            sink,
            stop,
            tasks,
            background,
        })
    }
}

/// A running in-memory bus. See [`TestHarness`](crate::memory::TestHarness) for the
/// test-friendly wrapper. Publish through its [`Publish`] implementation.
pub struct InMemoryBus {
    broker: InMemoryBroker,
    events: EventLog,
    factory: Arc<MessageFactory>,
    origin: MessageOrigin,
    sink: InMemorySink,
    stop: CancellationToken,
    tasks: JoinSet<()>,
    background: Background,
}

impl InMemoryBus {
    /// A builder.
    pub fn builder() -> InMemoryBusBuilder {
        InMemoryBusBuilder::default()
    }

    /// The broker, to inspect queues.
    pub fn broker(&self) -> &InMemoryBroker {
        &self.broker
    }

    /// Puts raw bytes on exchange `exchange` as a foreign publisher would.
    pub fn publish_raw(&self, exchange: &str, message: StoredMessage) {
        self.broker.declare_exchange(exchange);
        self.broker.publish(exchange, message);
    }

    pub(crate) fn events(&self) -> &EventLog {
        &self.events
    }

    /// Stops consuming, lets in-flight deliveries finish, then stops the storage's background
    /// services.
    pub async fn stop(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        std::mem::take(&mut self.background).stop().await;
    }
}

impl Publish for InMemoryBus {
    fn message_factory(&self) -> &MessageFactory {
        &self.factory
    }

    fn message_origin(&self) -> &MessageOrigin {
        &self.origin
    }

    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        self.sink.deliver(message).await
    }
}

struct EndpointRunner {
    queue: String,
    broker: InMemoryBroker,
    events: EventLog,
    sink: InMemorySink,
    service: Endpoint,
}

impl EndpointRunner {
    async fn run(self, concurrency: usize, stop: CancellationToken) {
        let this = Arc::new(self);
        let limit = Arc::new(Semaphore::new(concurrency));
        let mut in_flight = JoinSet::new();
        let mut sequence = 0u64;
        loop {
            // Paused (a transient failure, a kill switch …): take nothing until it resumes.
            let control = this.service.control().clone();
            if control.is_paused() {
                tokio::select! {
                    _ = control.until_resumed() => {}
                    () = stop.cancelled() => break,
                }
            }
            let Ok(permit) = limit.clone().acquire_owned().await else {
                break;
            };
            let Some(message) = this.broker.receive(&this.queue, &stop).await else {
                break;
            };
            let runner = this.clone();
            sequence += 1;
            // Boxed, as the RabbitMQ endpoint does: tokio moves a task's future by value.
            in_flight.spawn(Box::pin(async move {
                runner.handle(message, sequence).await;
                drop(permit);
            }));
            while in_flight.try_join_next().is_some() {}
        }
        while in_flight.join_next().await.is_some() {}
    }

    async fn handle(&self, message: StoredMessage, sequence: u64) {
        let delivery = Delivery {
            body: message.body.clone(),
            content_type: message.content_type.clone(),
            headers: message.headers.clone(),
            message_id: message.message_id.clone(),
            correlation_id: message.correlation_id.clone(),
            redelivered: message.redelivered,
            exchange: self.queue.clone(),
            sequence_number: Some(sequence),
            ..Delivery::default()
        };
        let Ok(settlement) = self.service.clone().oneshot(delivery).await;
        self.settle(message, settlement).await;
    }

    /// Carries out a [`Settlement`], as the RabbitMQ transport does: moves first, then publishes
    /// the fault, then "acknowledges" (records the event).
    async fn settle(&self, message: StoredMessage, settlement: Settlement) {
        let kind = settlement.kind();
        let message_id = message.message_id.clone();
        match settlement {
            Settlement::Ack | Settlement::Duplicate => {}
            Settlement::Fault(faulted) => {
                self.move_to(error_queue_name(&self.queue), message, faulted.headers);
                if let Some(fault) = faulted.fault {
                    if let Err(error) = self.sink.deliver(fault).await {
                        tracing::warn!(target: "ferrybus::memory", %error, "could not publish the fault");
                    }
                }
            }
            Settlement::Skip { headers } => {
                self.move_to(skipped_queue_name(&self.queue), message, headers)
            }
            Settlement::Redeliver(redelivery) => {
                let mut again = message;
                again.body = redelivery.body;
                merge(&mut again.headers, redelivery.headers);
                let broker = self.broker.clone();
                let target = self.queue.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(redelivery.delay).await;
                    broker.publish(&target, again);
                });
            }
            Settlement::Abandon => self.broker.requeue(&self.queue, message),
        }
        self.events.push(BusEvent::Settled {
            queue: self.queue.clone(),
            message_id,
            settlement: kind,
        });
    }

    fn move_to(&self, name: String, mut message: StoredMessage, headers: Headers) {
        self.broker.declare_endpoint(&name);
        merge(&mut message.headers, headers);
        self.broker.publish(&name, message);
    }
}

fn merge(target: &mut Headers, extra: Headers) {
    for (name, value) in extra.iter() {
        target.insert(name, value.clone());
    }
}
