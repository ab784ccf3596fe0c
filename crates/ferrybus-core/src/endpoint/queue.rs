//! [`QueueOptions`]: how an endpoint's queue is declared ([`QueueType`], flags, arguments).

use std::time::Duration;

use serde_json::Value;

/// The queue type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueType {
    /// A classic queue (MassTransit's default; no `x-queue-type` argument is sent).
    #[default]
    Classic,
    /// A quorum queue: `x-queue-type=quorum`, always durable.
    Quorum,
}

/// How a receive endpoint's queue is declared. The defaults are MassTransit's: durable, not
/// auto-delete, not exclusive, no arguments. Set them on the endpoint
/// ([`EndpointConfig::quorum`](crate::EndpointConfig::quorum),
/// [`queue_argument`](crate::EndpointConfig::queue_argument) …); transports without queues
/// (the in-memory one) ignore them.
///
/// ```
/// use std::time::Duration;
/// use ferrybus_core::{QueueOptions, QueueType};
/// let options = QueueOptions::default()
///     .queue_type(QueueType::Quorum)
///     .argument("x-delivery-limit", 5)
///     .expires(Duration::from_secs(3600));
/// assert!(options.is_durable());
/// assert_eq!(options.arguments().len(), 2);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct QueueOptions {
    queue_type: QueueType,
    durable: bool,
    auto_delete: bool,
    exclusive: bool,
    arguments: Vec<(String, Value)>,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            queue_type: QueueType::Classic,
            durable: true,
            auto_delete: false,
            exclusive: false,
            arguments: Vec::new(),
        }
    }
}

impl QueueOptions {
    /// The queue type.
    pub fn queue_type(mut self, queue_type: QueueType) -> Self {
        self.queue_type = queue_type;
        self
    }

    /// Whether the queue (and its endpoint exchange) survives a broker restart. Quorum queues
    /// are always durable.
    pub fn durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    /// Whether the queue is deleted when its last consumer leaves.
    pub fn auto_delete(mut self, auto_delete: bool) -> Self {
        self.auto_delete = auto_delete;
        self
    }

    /// Whether the queue belongs to one connection only.
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.exclusive = exclusive;
        self
    }

    /// Adds (or replaces) a queue argument (`x-max-priority`, `x-single-active-consumer`,
    /// `x-delivery-limit` …). Integers are sent as AMQP longs, booleans as booleans, strings as
    /// long strings.
    pub fn argument(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        let name = name.into();
        self.arguments.retain(|(n, _)| n != &name);
        self.arguments.push((name, value.into()));
        self
    }

    /// How often a quorum queue delivers a message that is not settled (given back, or left
    /// unacknowledged by a consumer that died) before it drops or dead-letters it
    /// (`x-delivery-limit`; RabbitMQ 4.x applies 20 when none is set, 3.x none). Set it
    /// explicitly so both behave alike; a transport that knows the limit moves a message that
    /// reached it to `<queue>_error` with its fault before the broker drops it.
    pub fn delivery_limit(self, deliveries: u32) -> Self {
        self.argument("x-delivery-limit", deliveries)
    }

    /// The queue expires after this long without consumers (`x-expires`, ms).
    pub fn expires(self, after: Duration) -> Self {
        let ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
        self.argument("x-expires", ms)
    }

    /// The queue type.
    pub fn kind(&self) -> QueueType {
        self.queue_type
    }

    /// Whether the queue is declared durable (always for quorum queues).
    pub fn is_durable(&self) -> bool {
        self.durable || self.queue_type == QueueType::Quorum
    }

    /// Whether the queue counts as auto-delete (its endpoint exchange is auto-delete too).
    pub fn is_auto_delete(&self) -> bool {
        self.auto_delete
    }

    /// Whether the queue is exclusive to one connection.
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }

    /// The arguments set, in the order set (`x-queue-type` is not among them: see
    /// [`QueueOptions::kind`]).
    pub fn arguments(&self) -> &[(String, Value)] {
        &self.arguments
    }
}
