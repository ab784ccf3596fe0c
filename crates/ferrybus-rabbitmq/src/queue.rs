//! [`QueueOptions`]: how an endpoint's queue is declared ([`QueueType`], flags, arguments).

use std::time::Duration;

use ferrybus_core::EndpointConfig;
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
/// auto-delete, not exclusive, no arguments. Set them on the endpoint with [`QueueEndpointExt`]
/// (`.quorum()`, `.queue_argument(..)` …); transports without queues (the in-memory one) ignore
/// them.
///
/// ```
/// use std::time::Duration;
/// use ferrybus_rabbitmq::{QueueOptions, QueueType};
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
    error_queue_arguments: ErrorQueueArguments,
}

/// The queue arguments that make RabbitMQ expire, drop or dead-letter messages (or delete the
/// queue with them): `x-expires`, `x-message-ttl`, `x-max-length`, `x-max-length-bytes`,
/// `x-overflow`, `x-dead-letter-exchange`, `x-dead-letter-routing-key`, `x-dead-letter-strategy`.
/// On an endpoint's queue they shape its traffic; copied to its `<queue>_error` queue, a faulted
/// message can expire there, or be dropped, before anyone looked at it.
pub const MESSAGE_DROPPING_ARGUMENTS: [&str; 8] = [
    "x-expires",
    "x-message-ttl",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
];

/// Which of an endpoint queue's arguments its `<queue>_error` and `<queue>_skipped` queues are
/// declared with ([`QueueEndpointExt::error_queue_arguments`]).
///
/// ```
/// use ferrybus_rabbitmq::topology::EndpointTopology;
/// use ferrybus_rabbitmq::{ErrorQueueArguments, QueueOptions, QueueType};
/// let options = QueueOptions::default()
///     .queue_type(QueueType::Quorum)
///     .argument("x-message-ttl", 60_000);
/// let inherited = EndpointTopology::new("orders", &options, Vec::<String>::new());
/// assert!(inherited.error().queue().arguments().contains_key("x-message-ttl"));
///
/// let kept = options.error_queue_arguments(ErrorQueueArguments::KeepMessages);
/// let topology = EndpointTopology::new("orders", &kept, Vec::<String>::new());
/// let arguments = topology.error().queue().arguments();
/// assert!(!arguments.contains_key("x-message-ttl"));
/// assert!(arguments.contains_key("x-queue-type"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorQueueArguments {
    /// All of them, flags included, as MassTransit declares them (`RabbitMqErrorSettings`
    /// copies the source queue's arguments): the default, and what an endpoint that a .NET
    /// service declares too needs (the broker refuses a declaration of an existing queue with
    /// other arguments). The bus warns at start when this copies
    /// [`MESSAGE_DROPPING_ARGUMENTS`].
    #[default]
    Inherit,
    /// All but [`MESSAGE_DROPPING_ARGUMENTS`]: the error queues keep every message until someone
    /// takes it. For durable endpoints that no .NET service declares (MassTransit would declare
    /// the error queues with the arguments, and one of the two declarations would be refused
    /// with `PRECONDITION_FAILED`). An error queue that exists already with other arguments must
    /// be deleted (or emptied and deleted) first, for the same reason.
    KeepMessages,
}

impl Default for QueueOptions {
    fn default() -> Self {
        Self {
            queue_type: QueueType::Classic,
            durable: true,
            auto_delete: false,
            exclusive: false,
            arguments: Vec::new(),
            error_queue_arguments: ErrorQueueArguments::Inherit,
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

    /// Which of the queue's arguments its `_error` and `_skipped` queues are declared with
    /// ([`ErrorQueueArguments::Inherit`], MassTransit's way, by default).
    pub fn error_queue_arguments(mut self, arguments: ErrorQueueArguments) -> Self {
        self.error_queue_arguments = arguments;
        self
    }

    /// Which of the queue's arguments its `_error` and `_skipped` queues are declared with.
    pub fn error_queues(&self) -> ErrorQueueArguments {
        self.error_queue_arguments
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

    /// The queue's own delivery acknowledgement timeout, when its `x-consumer-timeout`
    /// argument (RabbitMQ 3.12 and later; ms) is set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrybus_rabbitmq::QueueOptions;
    /// let options = QueueOptions::default().argument("x-consumer-timeout", 600_000);
    /// assert_eq!(options.consumer_timeout(), Some(Duration::from_secs(600)));
    /// assert_eq!(QueueOptions::default().consumer_timeout(), None);
    /// ```
    pub fn consumer_timeout(&self) -> Option<Duration> {
        self.arguments
            .iter()
            .find(|(name, _)| name == "x-consumer-timeout")
            .and_then(|(_, value)| value.as_u64())
            .map(Duration::from_millis)
    }

    /// The delivery limit ferrybus keeps for the queue, before the broker does: a quorum
    /// queue's `x-delivery-limit`, else RabbitMQ 4.x's default of 20; none for classic queues
    /// (they count no deliveries). A message delivered that often without being settled (a
    /// consumer that crashed the process each time) is moved to `<queue>_error` with its fault
    /// instead of being dropped by the broker.
    ///
    /// ```
    /// use ferrybus_rabbitmq::{QueueOptions, QueueType};
    /// assert_eq!(QueueOptions::default().kept_delivery_limit(), None);
    /// let quorum = QueueOptions::default().queue_type(QueueType::Quorum);
    /// assert_eq!(quorum.kept_delivery_limit(), Some(20));
    /// assert_eq!(quorum.delivery_limit(5).kept_delivery_limit(), Some(5));
    /// ```
    pub fn kept_delivery_limit(&self) -> Option<u32> {
        if self.queue_type != QueueType::Quorum {
            return None;
        }
        let configured = self
            .arguments
            .iter()
            .find(|(name, _)| name == "x-delivery-limit")
            .and_then(|(_, value)| value.as_u64())
            .and_then(|n| u32::try_from(n).ok());
        Some(configured.unwrap_or(DEFAULT_QUORUM_DELIVERY_LIMIT))
    }
}

/// RabbitMQ's delivery acknowledgement timeout (`consumer_timeout`) when the broker sets none: 30
/// minutes. See [`RabbitMqBusBuilder::consumer_timeout`](crate::RabbitMqBusBuilder::consumer_timeout).
pub const DEFAULT_CONSUMER_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// RabbitMQ 4.x's delivery limit of quorum queues when none is configured.
pub const DEFAULT_QUORUM_DELIVERY_LIMIT: u32 = 20;

/// Sets how an endpoint's queue is declared on RabbitMQ (its [`QueueOptions`], kept on the
/// endpoint; other transports ignore them).
///
/// ```
/// use ferrybus_core::EndpointConfig;
/// use ferrybus_rabbitmq::{QueueEndpointExt, QueueOptions, QueueType};
/// let endpoint = EndpointConfig::new("billing-invoice").quorum().delivery_limit(5);
/// assert_eq!(endpoint.queue_options().kind(), QueueType::Quorum);
/// assert_eq!(endpoint.queue_options().kept_delivery_limit(), Some(5));
/// ```
pub trait QueueEndpointExt: Sized {
    /// The queue options set so far (MassTransit's defaults when none were).
    fn queue_options(&self) -> QueueOptions;

    /// Replaces all queue options at once.
    fn with_queue_options(self, options: QueueOptions) -> Self;

    /// Declares the queue as a quorum queue (MassTransit's `SetQuorumQueue`).
    fn quorum(self) -> Self {
        self.queue_type(QueueType::Quorum)
    }

    /// Sets the queue type.
    fn queue_type(self, queue_type: QueueType) -> Self {
        let options = self.queue_options().queue_type(queue_type);
        self.with_queue_options(options)
    }

    /// Adds a queue argument (`x-delivery-limit`, `x-max-priority` …).
    fn queue_argument(self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        let options = self.queue_options().argument(name, value);
        self.with_queue_options(options)
    }

    /// The delivery limit of a quorum queue (`x-delivery-limit`, see
    /// [`QueueOptions::delivery_limit`]).
    fn delivery_limit(self, deliveries: u32) -> Self {
        let options = self.queue_options().delivery_limit(deliveries);
        self.with_queue_options(options)
    }

    /// Which of the queue's arguments its `<queue>_error` and `<queue>_skipped` queues are
    /// declared with. By default all of them, as MassTransit declares them
    /// ([`ErrorQueueArguments::Inherit`]); [`ErrorQueueArguments::KeepMessages`] leaves out
    /// those that expire, drop or dead-letter messages, for endpoints no .NET service shares.
    ///
    /// ```
    /// use ferrybus_core::EndpointConfig;
    /// use ferrybus_rabbitmq::{ErrorQueueArguments, QueueEndpointExt};
    /// let endpoint = EndpointConfig::new("billing-invoice")
    ///     .queue_argument("x-message-ttl", 3_600_000)
    ///     .error_queue_arguments(ErrorQueueArguments::KeepMessages);
    /// assert_eq!(endpoint.queue_options().error_queues(), ErrorQueueArguments::KeepMessages);
    /// ```
    fn error_queue_arguments(self, arguments: ErrorQueueArguments) -> Self {
        let options = self.queue_options().error_queue_arguments(arguments);
        self.with_queue_options(options)
    }
}

impl QueueEndpointExt for EndpointConfig {
    fn queue_options(&self) -> QueueOptions {
        self.extension::<QueueOptions>()
            .cloned()
            .unwrap_or_default()
    }

    fn with_queue_options(self, options: QueueOptions) -> Self {
        self.with_extension(options)
    }
}
