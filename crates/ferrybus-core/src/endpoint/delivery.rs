//! [`Delivery`]: one message as a transport received it, before anything was read.

use bytes::Bytes;

use crate::envelope::{Headers, ENVELOPE_CONTENT_TYPE};

/// One message as a transport received it: what an endpoint [`Service`](tower::Service) takes.
///
/// ```
/// use ferrybus_core::Delivery;
/// let delivery = Delivery::new(br#"{"messageType":["urn:message:Shop:OrderPlaced"],"message":{}}"#.to_vec())
///     .content_type("application/vnd.masstransit+json")
///     .message_id("5e1a0000-0000-0000-0000-000000000001");
/// assert_eq!(delivery.effective_content_type(), "application/vnd.masstransit+json");
/// assert_eq!(delivery.body.len(), 61);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Delivery {
    /// The body bytes (shared, not copied, between the transport and the pipeline).
    pub body: Bytes,
    /// The content type property.
    pub content_type: Option<String>,
    /// The transport headers.
    pub headers: Headers,
    /// The transport's message id property.
    pub message_id: Option<String>,
    /// The transport's correlation id property.
    pub correlation_id: Option<String>,
    /// Whether the broker redelivered it (after a nack or a lost channel).
    pub redelivered: bool,
    /// The exchange it was published to (empty for the default exchange or unknown).
    pub exchange: String,
    /// The routing key it was published with.
    pub routing_key: String,
    /// The transport's message priority (AMQP `priority`), copied onto what a consumer of it
    /// sends, as MassTransit's RabbitMQ transport does.
    pub priority: Option<u8>,
    /// The transport's reply-to property (RabbitMQ's direct reply-to name of the requester), used
    /// for responses to a `…/amq.rabbitmq.reply-to` response address.
    pub reply_to: Option<String>,
    /// Where the transport delivered it in sequence (RabbitMQ's delivery tag; MassTransit's
    /// `ITransportSequenceNumber`): orders the messages of a batch.
    pub sequence_number: Option<u64>,
    /// How often the broker has delivered it without a settlement, when the transport knows
    /// (RabbitMQ quorum queues: `x-delivery-count`); past the endpoint's delivery limit it is
    /// faulted unread (see `EndpointContext::delivery_limit`).
    pub delivery_count: Option<u32>,
    /// Values the transport or endpoint layers attach (e.g. a tracing context).
    pub extensions: http::Extensions,
}

impl Delivery {
    /// A delivery of `body` with no properties.
    pub fn new(body: impl Into<Bytes>) -> Self {
        Self {
            body: body.into(),
            ..Self::default()
        }
    }

    /// Sets the content type property.
    pub fn content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// Sets the transport's message priority.
    ///
    /// ```
    /// use ferrybus_core::Delivery;
    /// assert_eq!(Delivery::new(b"{}".to_vec()).priority(5).priority, Some(5));
    /// ```
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets the message id property.
    pub fn message_id(mut self, message_id: impl Into<String>) -> Self {
        self.message_id = Some(message_id.into());
        self
    }

    /// The content type: the property, else the `Content-Type` header, else MassTransit's
    /// envelope type (the default deserializer).
    pub fn effective_content_type(&self) -> &str {
        self.content_type
            .as_deref()
            .filter(|c| !c.is_empty())
            .or_else(|| self.headers.get_str("Content-Type"))
            .or_else(|| self.headers.get_str("ContentType"))
            .unwrap_or(ENVELOPE_CONTENT_TYPE)
    }
}
