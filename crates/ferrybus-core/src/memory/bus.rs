//! The in-memory bus: receive endpoints on an [`InMemoryBroker`], with the same semantics as the
//! RabbitMQ transport (routing by message type, `_error` / `_skipped` queues, faults, retries,
//! delayed redelivery).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::address::HostAddress;
use crate::envelope::Headers;
use crate::memory::broker::{InMemoryBroker, StoredMessage};
use crate::message::Message;
use crate::outgoing::{MessageFactory, MessageOrigin, MessageSink, OutgoingMessage, SendOptions};
use crate::pipeline::{Disposition, EndpointConfig, InboundDelivery, ReceivePipeline};
use crate::BoxError;

/// Something that happened on the bus, for tests to wait on.
#[derive(Clone, Debug, PartialEq)]
pub enum BusEvent {
    /// A message left through the bus or a consumer (publish, send, respond, fault).
    Sent(Box<OutgoingMessage>),
    /// Every consumer on `queue` finished message `message_id`.
    Consumed {
        /// The endpoint.
        queue: String,
        /// The message id property.
        message_id: Option<String>,
    },
    /// The message was moved to `<queue>_error`.
    Faulted {
        /// The endpoint.
        queue: String,
        /// The message id property.
        message_id: Option<String>,
    },
    /// The message was moved to `<queue>_skipped`.
    Skipped {
        /// The endpoint.
        queue: String,
        /// The message id property.
        message_id: Option<String>,
    },
    /// A delayed redelivery was scheduled.
    Redelivered {
        /// The endpoint.
        queue: String,
        /// The message id property.
        message_id: Option<String>,
    },
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
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), BoxError> {
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
        self.broker.publish(&destination.name, stored(&message));
        self.events.push(BusEvent::Sent(Box::new(message)));
        Ok(())
    }
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

/// Builds an [`InMemoryBus`].
#[derive(Default)]
pub struct InMemoryBusBuilder {
    endpoints: Vec<EndpointConfig>,
}

impl InMemoryBusBuilder {
    /// Adds a receive endpoint.
    pub fn receive_endpoint(mut self, endpoint: EndpointConfig) -> Self {
        self.endpoints.push(endpoint);
        self
    }

    /// Declares the topology and starts consuming.
    pub fn start(self) -> InMemoryBus {
        let broker = InMemoryBroker::new();
        let events = EventLog::new();
        let factory = Arc::new(MessageFactory::new(HostAddress::loopback()));
        let sink = InMemorySink {
            broker: broker.clone(),
            events: events.clone(),
        };
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for endpoint in self.endpoints {
            let queue = endpoint.queue().to_owned();
            broker.declare_endpoint(&queue);
            for t in endpoint.message_types() {
                broker.declare_exchange(t.entity_name());
                broker.bind_exchange(t.entity_name(), &queue);
            }
            let concurrency = endpoint.concurrency_limit();
            let pipeline = endpoint.build(
                factory.host().entity_address(&queue),
                Arc::new(sink.clone()),
                factory.clone(),
                cancel.child_token(),
            );
            let runner = EndpointRunner {
                queue,
                broker: broker.clone(),
                events: events.clone(),
                pipeline,
            };
            tasks.spawn(runner.run(concurrency, cancel.clone()));
        }
        InMemoryBus {
            broker,
            events,
            factory,
            sink,
            cancel,
            tasks,
        }
    }
}

/// A running in-memory bus. See [`crate::memory::TestHarness`] for the test-friendly wrapper.
pub struct InMemoryBus {
    broker: InMemoryBroker,
    events: EventLog,
    factory: Arc<MessageFactory>,
    sink: InMemorySink,
    cancel: CancellationToken,
    tasks: JoinSet<()>,
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

    /// Publishes `message` from outside any consumer; returns its message id.
    pub async fn publish<M: Message>(&self, message: &M) -> Result<Uuid, BoxError> {
        self.publish_with(message, SendOptions::new()).await
    }

    /// Publishes with options.
    pub async fn publish_with<M: Message>(
        &self,
        message: &M,
        options: SendOptions,
    ) -> Result<Uuid, BoxError> {
        let out = self.factory.publish(message, &self.bus_origin(), options)?;
        let id = out.message_id;
        self.sink.deliver(out).await?;
        Ok(id)
    }

    /// Sends `message` to `address`; returns its message id.
    pub async fn send<M: Message>(&self, address: &str, message: &M) -> Result<Uuid, BoxError> {
        let out = self
            .factory
            .send(address, message, &self.bus_origin(), SendOptions::new())?;
        let id = out.message_id;
        self.sink.deliver(out).await?;
        Ok(id)
    }

    /// Puts raw bytes on exchange `exchange` as a foreign publisher would.
    pub fn publish_raw(&self, exchange: &str, message: StoredMessage) {
        self.broker.declare_exchange(exchange);
        self.broker.publish(exchange, message);
    }

    fn bus_origin(&self) -> MessageOrigin {
        MessageOrigin {
            source_address: Some(self.factory.host().entity_address("bus")),
            ..MessageOrigin::default()
        }
    }

    pub(crate) fn events(&self) -> &EventLog {
        &self.events
    }

    /// Stops every endpoint: no new deliveries, in-flight ones finish.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

struct EndpointRunner {
    queue: String,
    broker: InMemoryBroker,
    events: EventLog,
    pipeline: ReceivePipeline,
}

impl EndpointRunner {
    async fn run(self, concurrency: usize, cancel: CancellationToken) {
        let this = Arc::new(self);
        let limit = Arc::new(Semaphore::new(concurrency));
        let mut in_flight = JoinSet::new();
        loop {
            let Ok(permit) = limit.clone().acquire_owned().await else {
                break;
            };
            let Some(message) = this.broker.receive(&this.queue, &cancel).await else {
                break;
            };
            let runner = this.clone();
            in_flight.spawn(async move {
                runner.handle(message).await;
                drop(permit);
            });
            while in_flight.try_join_next().is_some() {}
        }
        while in_flight.join_next().await.is_some() {}
    }

    async fn handle(&self, message: StoredMessage) {
        let delivery = InboundDelivery {
            body: message.body.to_vec(),
            content_type: message.content_type.clone(),
            headers: message.headers.clone(),
            message_id: message.message_id.clone(),
            correlation_id: message.correlation_id.clone(),
            redelivered: message.redelivered,
        };
        let disposition = self.pipeline.handle(&delivery).await;
        self.settle(message, disposition);
    }

    /// Carries out a [`Disposition`], as the RabbitMQ transport does with acks and moves.
    fn settle(&self, message: StoredMessage, disposition: Disposition) {
        let queue = self.queue.clone();
        let message_id = message.message_id.clone();
        match disposition {
            Disposition::Consumed => self.events.push(BusEvent::Consumed { queue, message_id }),
            Disposition::Faulted { headers } => {
                self.move_to(&format!("{queue}_error"), message, headers);
                self.events.push(BusEvent::Faulted { queue, message_id });
            }
            Disposition::Skipped { headers } => {
                self.move_to(&format!("{queue}_skipped"), message, headers);
                self.events.push(BusEvent::Skipped { queue, message_id });
            }
            Disposition::Redeliver {
                delay,
                body,
                headers,
            } => {
                let mut again = message;
                again.body = body.into();
                merge(&mut again.headers, headers);
                let broker = self.broker.clone();
                let target = queue.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    broker.publish(&target, again);
                });
                self.events
                    .push(BusEvent::Redelivered { queue, message_id });
            }
            Disposition::Abandoned => self.broker.requeue(&queue, message),
        }
    }

    fn move_to(&self, name: &str, mut message: StoredMessage, headers: Headers) {
        self.broker.declare_endpoint(name);
        merge(&mut message.headers, headers);
        self.broker.publish(name, message);
    }
}

fn merge(target: &mut Headers, extra: Headers) {
    for (name, value) in extra.iter() {
        target.insert(name, value.clone());
    }
}
