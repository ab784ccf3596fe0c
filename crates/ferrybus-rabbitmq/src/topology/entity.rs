//! The entities the transport declares ([`Exchange`], [`Queue`]), their [`Arguments`], and the
//! [`Binding`]s between them, with MassTransit's flags.

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::ExchangeKind;
use serde_json::Value;

use crate::queue::{ErrorQueueArguments, QueueOptions, QueueType, MESSAGE_DROPPING_ARGUMENTS};

/// The arguments of an exchange or queue declaration, in the order they were set (on the wire
/// they are a [`FieldTable`], whose order does not matter).
///
/// ```
/// use ferrybus_rabbitmq::topology::EndpointTopology;
/// use ferrybus_rabbitmq::{QueueOptions, QueueType};
/// let options = QueueOptions::default()
///     .queue_type(QueueType::Quorum)
///     .argument("x-delivery-limit", 5);
/// let topology = EndpointTopology::new("billing-invoice", &options, Vec::<String>::new());
/// let arguments = topology.queue().arguments();
/// let names: Vec<&str> = arguments.iter().map(|(name, _)| name).collect();
/// assert_eq!(names, ["x-queue-type", "x-delivery-limit"]);
/// assert_eq!(arguments.to_field_table().inner().len(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Arguments(Vec<(ShortString, AMQPValue)>);

impl Arguments {
    /// Sets `name`, replacing its value in place when it is set already.
    pub(crate) fn insert(&mut self, name: ShortString, value: AMQPValue) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name, value)),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&AMQPValue> {
        self.0
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, v)| v)
    }

    /// Whether `name` is set.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The arguments, in the order they were set.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AMQPValue)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// How many arguments there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The arguments as sent on `exchange.declare` / `queue.declare`.
    pub fn to_field_table(&self) -> FieldTable {
        let mut table = FieldTable::default();
        for (name, value) in &self.0 {
            table.insert(name.clone(), value.clone());
        }
        table
    }

    /// A queue's arguments: `x-queue-type=quorum` for quorum queues, then the configured ones
    /// (integers as longs, other numbers as doubles, booleans as booleans, strings as long
    /// strings; nulls, lists and objects, and names longer than 255 bytes, are not sent).
    pub(crate) fn for_queue(options: &QueueOptions) -> Self {
        let mut arguments = Self::default();
        if options.kind() == QueueType::Quorum {
            arguments.insert(
                "x-queue-type".into(),
                AMQPValue::LongString("quorum".into()),
            );
        }
        for (name, value) in options.arguments() {
            if let (Ok(key), Some(v)) = (ShortString::try_new(name.as_str()), argument_value(value))
            {
                arguments.insert(key, v);
            }
        }
        arguments
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

/// An exchange as the transport declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) durable: bool,
    pub(crate) auto_delete: bool,
    pub(crate) arguments: Arguments,
}

impl Exchange {
    /// A fanout exchange, MassTransit's default type.
    pub(crate) fn fanout(name: &str, durable: bool, auto_delete: bool) -> Self {
        Self {
            name: name.to_owned(),
            kind: "fanout".to_owned(),
            durable,
            auto_delete,
            arguments: Arguments::default(),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its type as RabbitMQ names it (`fanout`, `direct`, `x-delayed-message` …).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Its type as lapin declares it.
    pub fn exchange_kind(&self) -> ExchangeKind {
        match self.kind.as_str() {
            "fanout" => ExchangeKind::Fanout,
            "direct" => ExchangeKind::Direct,
            "topic" => ExchangeKind::Topic,
            "headers" => ExchangeKind::Headers,
            other => ExchangeKind::Custom(other.to_owned()),
        }
    }

    /// Its arguments.
    pub fn arguments(&self) -> &Arguments {
        &self.arguments
    }

    /// The flags sent on `exchange.declare`.
    pub fn declare_options(&self) -> ExchangeDeclareOptions {
        ExchangeDeclareOptions {
            durable: self.durable,
            auto_delete: self.auto_delete,
            ..ExchangeDeclareOptions::default()
        }
    }

    pub(crate) fn key(&self) -> String {
        format!("e:{}", self.name)
    }
}

/// A queue as the transport declares it, holding the flags as configured;
/// [`Queue::declare_options`] applies MassTransit's `BrokerTopologyBuilder.QueueDeclare` rules
/// (`src/Transports/MassTransit.RabbitMqTransport/RabbitMqTransport/Topology/BrokerTopologyBuilder.cs`).
#[derive(Clone, Debug, PartialEq)]
pub struct Queue {
    pub(crate) name: String,
    pub(crate) durable: bool,
    pub(crate) auto_delete: bool,
    pub(crate) exclusive: bool,
    pub(crate) arguments: Arguments,
}

impl Queue {
    /// The queue of a receive endpoint.
    pub(crate) fn for_endpoint(name: &str, options: &QueueOptions) -> Self {
        Self {
            name: name.to_owned(),
            durable: options.is_durable(),
            auto_delete: options.is_auto_delete(),
            exclusive: options.is_exclusive(),
            arguments: Arguments::for_queue(options),
        }
    }

    /// A queue copying this one's flags and arguments (the `_error` and `_skipped` queues,
    /// MassTransit's `RabbitMqErrorSettings`), never exclusive; with
    /// [`ErrorQueueArguments::KeepMessages`], without [`MESSAGE_DROPPING_ARGUMENTS`].
    pub(crate) fn sibling(&self, name: String, arguments: ErrorQueueArguments) -> Self {
        let mut sibling = Self {
            name,
            exclusive: false,
            ..self.clone()
        };
        if arguments == ErrorQueueArguments::KeepMessages {
            sibling
                .arguments
                .0
                .retain(|(name, _)| !MESSAGE_DROPPING_ARGUMENTS.contains(&name.as_str()));
        }
        sibling
    }

    /// Those of its arguments that make the broker expire, drop or dead-letter its messages
    /// ([`MESSAGE_DROPPING_ARGUMENTS`]), in the order set.
    ///
    /// ```
    /// use ferrybus_rabbitmq::topology::EndpointTopology;
    /// use ferrybus_rabbitmq::QueueOptions;
    /// let options = QueueOptions::default()
    ///     .argument("x-max-length", 10_000)
    ///     .argument("x-single-active-consumer", true)
    ///     .argument("x-message-ttl", 60_000);
    /// let topology = EndpointTopology::new("orders", &options, Vec::<String>::new());
    /// let dropping: Vec<&str> = topology.error().queue().message_dropping_arguments().collect();
    /// assert_eq!(dropping, ["x-max-length", "x-message-ttl"]);
    /// ```
    pub fn message_dropping_arguments(&self) -> impl Iterator<Item = &str> {
        self.arguments
            .iter()
            .map(|(name, _)| name)
            .filter(|name| MESSAGE_DROPPING_ARGUMENTS.contains(name))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its arguments (`x-queue-type` first for a quorum queue).
    pub fn arguments(&self) -> &Arguments {
        &self.arguments
    }

    /// The flags sent on `queue.declare`: with `x-expires` the queue is not auto-delete (the
    /// broker's expiry cleans up) but still counts as auto-delete for exclusivity; a
    /// non-durable auto-delete queue is exclusive.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrybus_rabbitmq::topology::EndpointTopology;
    /// use ferrybus_rabbitmq::QueueOptions;
    /// let temporary = QueueOptions::default()
    ///     .durable(false)
    ///     .auto_delete(true)
    ///     .expires(Duration::from_secs(60));
    /// let topology = EndpointTopology::new("bus", &temporary, Vec::<String>::new());
    /// let flags = topology.queue().declare_options();
    /// assert!(!flags.durable && !flags.auto_delete && flags.exclusive);
    /// ```
    pub fn declare_options(&self) -> QueueDeclareOptions {
        let expires = self.arguments.contains_key("x-expires");
        QueueDeclareOptions {
            durable: self.durable,
            auto_delete: self.auto_delete && !expires,
            exclusive: self.exclusive || (self.auto_delete && !self.durable),
            ..QueueDeclareOptions::default()
        }
    }

    pub(crate) fn key(&self) -> String {
        format!("q:{}", self.name)
    }
}

/// Whether an entity is an exchange or a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntityKind {
    /// An exchange.
    Exchange,
    /// A queue.
    Queue,
}

impl EntityKind {
    /// `exchange` or `queue`, as RabbitMQ names them (a binding's `destination_type`).
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Exchange => "exchange",
            EntityKind::Queue => "queue",
        }
    }
}

/// A binding the transport declares, always with routing key `""` and no arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub(crate) source: String,
    pub(crate) destination: String,
    pub(crate) destination_kind: EntityKind,
}

impl Binding {
    /// Exchange `source` bound to queue `destination`.
    pub(crate) fn to_queue(source: &str, destination: &str) -> Self {
        Self {
            source: source.to_owned(),
            destination: destination.to_owned(),
            destination_kind: EntityKind::Queue,
        }
    }

    /// Exchange `source` bound to exchange `destination`.
    pub(crate) fn to_exchange(source: &str, destination: &str) -> Self {
        Self {
            source: source.to_owned(),
            destination: destination.to_owned(),
            destination_kind: EntityKind::Exchange,
        }
    }

    /// The source exchange.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The destination exchange or queue.
    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// Whether the destination is an exchange or a queue.
    pub fn destination_kind(&self) -> EntityKind {
        self.destination_kind
    }
}
