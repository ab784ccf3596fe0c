//! Receive endpoints with RabbitMQ queue options: [`ReceiveEndpoint`], [`QueueOptions`],
//! [`QueueType`].

use std::time::Duration;

use ferrybus_core::EndpointConfig;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use serde_json::Value;

/// The RabbitMQ queue type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueType {
    /// A classic queue (MassTransit's default; no `x-queue-type` argument is sent).
    #[default]
    Classic,
    /// A quorum queue: `x-queue-type=quorum`, always durable.
    Quorum,
}

/// How a receive endpoint's queue is declared. The defaults are MassTransit's: durable, not
/// auto-delete, not exclusive, no arguments.
///
/// ```
/// use std::time::Duration;
/// use ferrybus_rabbitmq::{QueueOptions, QueueType};
/// let options = QueueOptions::default()
///     .queue_type(QueueType::Quorum)
///     .argument("x-delivery-limit", 5)
///     .expires(Duration::from_secs(3600));
/// assert!(options.is_durable());
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

    /// Whether the queue belongs to this connection only.
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.exclusive = exclusive;
        self
    }

    /// Adds a queue argument (`x-max-priority`, `x-single-active-consumer`, `x-delivery-limit`,
    /// ...). Integers are sent as AMQP longs, booleans as booleans, strings as long strings.
    pub fn argument(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        let name = name.into();
        self.arguments.retain(|(n, _)| n != &name);
        self.arguments.push((name, value.into()));
        self
    }

    /// The queue expires after this long without consumers (`x-expires`, ms).
    pub fn expires(self, after: Duration) -> Self {
        let ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
        self.argument("x-expires", ms)
    }

    /// Whether the queue is declared durable (always for quorum queues).
    pub fn is_durable(&self) -> bool {
        self.durable || self.queue_type == QueueType::Quorum
    }

    /// Whether the queue counts as auto-delete (its endpoint exchange is auto-delete too).
    pub fn is_auto_delete(&self) -> bool {
        self.auto_delete
    }

    /// The arguments sent on `queue.declare`, `x-queue-type` included for quorum queues.
    pub(crate) fn arguments_table(&self) -> FieldTable {
        let mut table = FieldTable::default();
        if self.queue_type == QueueType::Quorum {
            table.insert(
                "x-queue-type".into(),
                AMQPValue::LongString("quorum".into()),
            );
        }
        for (name, value) in &self.arguments {
            if let (Ok(key), Some(v)) = (ShortString::try_new(name.as_str()), argument_value(value))
            {
                table.insert(key, v);
            }
        }
        table
    }

    pub(crate) fn exclusive_flag(&self) -> bool {
        self.exclusive
    }
}

fn argument_value(value: &Value) -> Option<AMQPValue> {
    match value {
        Value::Bool(b) => Some(AMQPValue::Boolean(*b)),
        Value::String(s) => Some(AMQPValue::LongString(LongString::from(s.as_str()))),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or_default()),
        }),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// A receive endpoint on RabbitMQ: the transport-independent [`EndpointConfig`] (queue name,
/// prefetch, concurrency, retry, redelivery, layers, consumers) plus [`QueueOptions`].
///
/// ```
/// use ferrybus_core::EndpointConfig;
/// use ferrybus_rabbitmq::{QueueType, ReceiveEndpoint};
/// let endpoint = ReceiveEndpoint::new(EndpointConfig::new("billing-invoice").prefetch(32))
///     .queue_type(QueueType::Quorum)
///     .argument("x-delivery-limit", 10);
/// assert_eq!(endpoint.queue(), "billing-invoice");
/// ```
#[derive(Clone, Debug)]
pub struct ReceiveEndpoint {
    pub(crate) config: EndpointConfig,
    pub(crate) options: QueueOptions,
    pub(crate) bind_message_types: bool,
}

impl ReceiveEndpoint {
    /// An endpoint with MassTransit's default queue options.
    pub fn new(config: EndpointConfig) -> Self {
        Self {
            config,
            options: QueueOptions::default(),
            bind_message_types: true,
        }
    }

    /// The queue name.
    pub fn queue(&self) -> &str {
        self.config.queue()
    }

    /// Replaces the queue options.
    pub fn options(mut self, options: QueueOptions) -> Self {
        self.options = options;
        self
    }

    /// Sets the queue type (`QueueType::Quorum` sends `x-queue-type=quorum`).
    pub fn queue_type(mut self, queue_type: QueueType) -> Self {
        self.options = self.options.queue_type(queue_type);
        self
    }

    /// Shorthand for `queue_type(QueueType::Quorum)`.
    pub fn quorum(self) -> Self {
        self.queue_type(QueueType::Quorum)
    }

    /// Adds a queue argument.
    pub fn argument(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.options = self.options.argument(name, value);
        self
    }

    /// Sets whether the queue is durable.
    pub fn durable(mut self, durable: bool) -> Self {
        self.options = self.options.durable(durable);
        self
    }

    /// Sets whether the queue is auto-delete.
    pub fn auto_delete(mut self, auto_delete: bool) -> Self {
        self.options = self.options.auto_delete(auto_delete);
        self
    }

    /// Sets whether the queue is exclusive to the connection.
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.options = self.options.exclusive(exclusive);
        self
    }

    /// Whether each consumed message type's exchange is bound to the endpoint (MassTransit's
    /// `ConfigureConsumeTopology`, on by default).
    pub fn bind_message_types(mut self, bind: bool) -> Self {
        self.bind_message_types = bind;
        self
    }
}

impl From<EndpointConfig> for ReceiveEndpoint {
    fn from(config: EndpointConfig) -> Self {
        Self::new(config)
    }
}
