//! [`EndpointTopology`]: what the transport declares for a receive endpoint, and when.

use ferrybus_core::endpoint::{error_queue_name, skipped_queue_name};
use ferrybus_core::EndpointConfig;

use super::entity::{Binding, Exchange, Queue};
use crate::queue::{QueueEndpointExt, QueueOptions};
#[cfg(doc)]
use crate::ErrorQueueArguments;

/// A queue with the exchange of the same name bound to it (routing key `""`): an endpoint's own
/// entry point, and its `<queue>_error` and `<queue>_skipped` pairs. The exchange is a fanout
/// with the queue's durability and auto-delete flag.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundQueue {
    exchange: Exchange,
    queue: Queue,
    binding: Binding,
}

impl BoundQueue {
    fn new(queue: Queue) -> Self {
        Self {
            exchange: Exchange::fanout(&queue.name, queue.durable, queue.auto_delete),
            binding: Binding::to_queue(&queue.name, &queue.name),
            queue,
        }
    }

    /// The exchange (named like the queue): where messages for the queue are published.
    pub fn exchange(&self) -> &Exchange {
        &self.exchange
    }

    /// The queue.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The binding of the exchange to the queue.
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// The exchange, the queue and the binding, in the order they are declared.
    pub fn declarations(&self) -> [Declaration<'_>; 3] {
        [
            Declaration::Exchange(&self.exchange),
            Declaration::Queue(&self.queue),
            Declaration::Binding(&self.binding),
        ]
    }
}

/// One thing the transport declares: an exchange, a queue or a binding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Declaration<'a> {
    /// `exchange.declare`.
    Exchange(&'a Exchange),
    /// `queue.declare`.
    Queue(&'a Queue),
    /// `queue.bind` or `exchange.bind`.
    Binding(&'a Binding),
}

/// When the transport declares something of an endpoint's topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeclaredWhen {
    /// When the endpoint starts consuming, and again on every new connection.
    Start,
    /// Lazily, on the first message moved there (the `_error` and `_skipped` pairs).
    FirstMove,
}

/// The topology of a receive endpoint `Q`, as MassTransit declares it
/// (`src/Transports/MassTransit.RabbitMqTransport/RabbitMqTransport/Configuration/RabbitMqReceiveEndpointBuilder.cs`,
/// masstransit-wire §4.2): the one description the transport declares from and that tools
/// compare the broker with.
///
/// * On start: exchange `Q` (fanout, the queue's durability) bound to queue `Q` (its
///   [`QueueOptions`]: durable, not exclusive, not auto-delete by default, `x-queue-type=quorum`
///   for quorum queues, the configured arguments), then, for each consumed message type, its
///   exchange (fanout, durable) bound to exchange `Q`.
/// * On the first move there: the `Q_error` and `Q_skipped` pairs
///   ([`error_queue_name`], [`skipped_queue_name`]), copying the queue's flags and arguments
///   (all of them, or all but those that drop messages: [`ErrorQueueArguments`]).
///
/// ```
/// use ferrybus_rabbitmq::topology::{Declaration, DeclaredWhen, EndpointTopology};
/// use ferrybus_rabbitmq::{QueueOptions, QueueType};
/// let options = QueueOptions::default().queue_type(QueueType::Quorum);
/// let topology = EndpointTopology::new("billing-invoice", &options, ["Shop:OrderPlaced"]);
/// assert_eq!(topology.error().queue().name(), "billing-invoice_error");
/// assert!(topology.error().queue().arguments().contains_key("x-queue-type"));
/// let lazy = topology
///     .declarations()
///     .into_iter()
///     .filter(|(_, when)| *when == DeclaredWhen::FirstMove)
///     .count();
/// assert_eq!(lazy, 6);
/// assert!(matches!(topology.on_start()[3], Declaration::Exchange(e) if e.name() == "Shop:OrderPlaced"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointTopology {
    endpoint: BoundQueue,
    message_types: Vec<(Exchange, Binding)>,
    error: BoundQueue,
    skipped: BoundQueue,
}

impl EndpointTopology {
    /// The topology of endpoint `queue` declared with `options`, consuming `message_types`
    /// (their exchange names, [`MessageType::entity_name`](ferrybus_core::MessageType::entity_name)).
    pub fn new<I>(queue: &str, options: &QueueOptions, message_types: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let queue = Queue::for_endpoint(queue, options);
        let message_types = message_types
            .into_iter()
            .map(|name| {
                let name = name.as_ref();
                (
                    Exchange::fanout(name, true, false),
                    Binding::to_exchange(name, &queue.name),
                )
            })
            .collect();
        let siblings = options.error_queues();
        Self {
            error: BoundQueue::new(queue.sibling(error_queue_name(&queue.name), siblings)),
            skipped: BoundQueue::new(queue.sibling(skipped_queue_name(&queue.name), siblings)),
            endpoint: BoundQueue::new(queue),
            message_types,
        }
    }

    /// The topology the bus declares for `endpoint`: its name, its queue options
    /// ([`QueueEndpointExt`]) and, unless it does not bind them, the exchanges of the message
    /// types its consumers take.
    pub fn for_endpoint(endpoint: &EndpointConfig) -> Self {
        let message_types = if endpoint.binds_message_types() {
            endpoint.message_types()
        } else {
            Vec::new()
        };
        Self::new(
            endpoint.name(),
            &endpoint.queue_options(),
            message_types.iter().map(|t| t.entity_name()),
        )
    }

    /// The endpoint's queue.
    pub fn queue(&self) -> &Queue {
        &self.endpoint.queue
    }

    /// The endpoint's exchange and queue.
    pub fn endpoint(&self) -> &BoundQueue {
        &self.endpoint
    }

    /// The consumed message types' exchanges, each bound to the endpoint's exchange.
    pub fn message_types(&self) -> impl Iterator<Item = (&Exchange, &Binding)> {
        self.message_types.iter().map(|(e, b)| (e, b))
    }

    /// The `<queue>_error` pair, where faulted messages are moved.
    pub fn error(&self) -> &BoundQueue {
        &self.error
    }

    /// The `<queue>_skipped` pair, where messages no consumer takes are moved.
    pub fn skipped(&self) -> &BoundQueue {
        &self.skipped
    }

    /// What is declared when the endpoint starts, in order: its exchange, queue and binding,
    /// then each message type's exchange and its binding.
    pub fn on_start(&self) -> Vec<Declaration<'_>> {
        let mut declarations = self.endpoint.declarations().to_vec();
        for (exchange, binding) in &self.message_types {
            declarations.push(Declaration::Exchange(exchange));
            declarations.push(Declaration::Binding(binding));
        }
        declarations
    }

    /// Everything, in order, with when it is declared: [`on_start`](Self::on_start), then the
    /// error pair, then the skipped pair.
    pub fn declarations(&self) -> Vec<(Declaration<'_>, DeclaredWhen)> {
        let start = self
            .on_start()
            .into_iter()
            .map(|d| (d, DeclaredWhen::Start));
        let lazy = self
            .error
            .declarations()
            .into_iter()
            .chain(self.skipped.declarations())
            .map(|d| (d, DeclaredWhen::FirstMove));
        start.chain(lazy).collect()
    }
}
