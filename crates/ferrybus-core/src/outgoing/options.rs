//! [`SendOptions`] of one publish or send, and the [`MessageOrigin`] a message is built from.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::raw::Serializer;
use crate::envelope::{Envelope, Headers};
use crate::message::Message;

/// Options of one publish or send, MassTransit's `SendContext` settings.
///
/// ```
/// use ferrybus_core::SendOptions;
/// use std::time::Duration;
/// let options = SendOptions::new()
///     .header("Tenant", "acme")
///     .time_to_live(Duration::from_secs(30))
///     .correlation_id(uuid::Uuid::nil());
/// assert_eq!(options.headers().get_str("tenant"), Some("acme"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct SendOptions {
    pub(super) message_id: Option<Uuid>,
    pub(super) correlation_id: Option<Uuid>,
    pub(super) request_id: Option<Uuid>,
    pub(super) conversation_id: Option<Uuid>,
    pub(super) response_address: Option<String>,
    pub(super) fault_address: Option<String>,
    pub(super) time_to_live: Option<Duration>,
    pub(super) priority: Option<u8>,
    pub(super) headers: Headers,
    pub(super) timestamp_headers: Vec<String>,
    pub(super) serializer: Option<Serializer>,
}

impl SendOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses this message id instead of a new one (keep it stable across retries of a publisher).
    pub fn message_id(mut self, id: Uuid) -> Self {
        self.message_id = Some(id);
        self
    }

    /// Sets the correlation id.
    pub fn correlation_id(mut self, id: Uuid) -> Self {
        self.correlation_id = Some(id);
        self
    }

    /// Sets the request id.
    pub fn request_id(mut self, id: Uuid) -> Self {
        self.request_id = Some(id);
        self
    }

    /// Sets the conversation id (normally kept from the consumed message or new).
    pub fn conversation_id(mut self, id: Uuid) -> Self {
        self.conversation_id = Some(id);
        self
    }

    /// Sets where responses go.
    pub fn response_address(mut self, address: impl Into<String>) -> Self {
        self.response_address = Some(address.into());
        self
    }

    /// Sets where faults go.
    pub fn fault_address(mut self, address: impl Into<String>) -> Self {
        self.fault_address = Some(address.into());
        self
    }

    /// Sets the time to live (`expirationTime` in the envelope, `expiration` on AMQP).
    pub fn time_to_live(mut self, ttl: Duration) -> Self {
        self.time_to_live = Some(ttl);
        self
    }

    /// Adds a header (written to the envelope `headers`, mirrored to transport headers).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Adds a header whose value is a time: in the envelope it is .NET's round-trip text
    /// (`2025-05-24T18:39:56.3305069Z`); on a message sent straight to RabbitMQ it is an AMQP
    /// timestamp (whole seconds), as MassTransit sends `DateTime` header values
    /// (`RabbitMqSendTransportContext.SetHeaders`).
    ///
    /// ```
    /// use ferrybus_core::SendOptions;
    /// use chrono::TimeZone;
    /// let at = chrono::Utc.with_ymd_and_hms(2025, 5, 24, 18, 39, 56).unwrap();
    /// let options = SendOptions::new().header_time("Promised", at);
    /// assert_eq!(options.headers().get_str("Promised"), Some("2025-05-24T18:39:56.0000000Z"));
    /// ```
    pub fn header_time(mut self, name: impl Into<String>, value: DateTime<Utc>) -> Self {
        let name = name.into();
        let text = ferrybus_dotnet::datetime::format_round_trip(&value);
        self.headers.insert(name.clone(), text);
        self.timestamp_headers.push(name);
        self
    }

    /// Sets the message priority (AMQP `priority`, kept as `RMQ-Priority` in an outbox row,
    /// MassTransit's `SetPriority`). Without it, a message sent from a consumer takes the
    /// priority of the message consumed.
    ///
    /// ```
    /// use ferrybus_core::SendOptions;
    /// let options = SendOptions::new().priority(7);
    /// # let _ = options;
    /// ```
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Writes this one message with `serializer` rather than the bus's or endpoint's
    /// [`Serializer`] (MassTransit's `SendContext.Serializer`): raw JSON for one receiver that
    /// reads only raw JSON (MassTransit's `UseRawJsonDeserializer`) or no MassTransit at all.
    ///
    /// ```
    /// use ferrybus_core::outgoing::{MessageFactory, MessageOrigin, Serializer};
    /// use ferrybus_core::{address::HostAddress, SendOptions};
    /// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
    /// # #[message(namespace = "Shop")]
    /// # struct OrderPlaced { id: u32 }
    /// let factory = MessageFactory::new(HostAddress::loopback());
    /// let origin = MessageOrigin::default();
    /// let raw = SendOptions::new().serializer(Serializer::raw_json());
    /// let message = factory.send("queue:orders", &OrderPlaced { id: 7 }, &origin, raw).unwrap();
    /// assert_eq!(message.content_type, "application/json");
    /// assert_eq!(&message.body[..], br#"{"id":7}"#);
    /// ```
    pub fn serializer(mut self, serializer: Serializer) -> Self {
        self.serializer = Some(serializer);
        self
    }

    /// The headers set so far.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The correlation id convention, applied to every message built from a typed message: the
    /// caller's correlation id, else the message's own ([`Message::correlation_id`]).
    pub(super) fn correlated_by<M: Message>(mut self, message: &M) -> Self {
        self.correlation_id = self.correlation_id.or_else(|| message.correlation_id());
        self
    }
}

/// What the message being built inherits from the message being consumed (MassTransit's
/// `TransferConsumeContextHeaders`): conversation, initiator, non-`MT-` headers, source address.
#[derive(Clone, Debug, Default)]
pub struct MessageOrigin {
    /// The address written as `sourceAddress`.
    pub source_address: Option<String>,
    /// The consumed message's conversation id.
    pub conversation_id: Option<Uuid>,
    /// The consumed message's correlation id, else its request id.
    pub initiator_id: Option<Uuid>,
    /// Headers carried over.
    pub headers: Headers,
    /// The consumed message's transport priority, given to what is sent unless set.
    pub priority: Option<u8>,
    /// The consumed message's transport reply-to (a direct reply-to requester), where a response
    /// to `…/amq.rabbitmq.reply-to` is routed.
    pub reply_to: Option<String>,
}

impl MessageOrigin {
    /// The origin of a message sent from inside a consumer of `consumed`, at `input_address`.
    pub fn consumed(consumed: &Envelope, input_address: &str) -> Self {
        Self {
            source_address: Some(input_address.to_owned()),
            conversation_id: consumed.conversation_id,
            initiator_id: consumed.correlation_id.or(consumed.request_id),
            headers: consumed.headers.transferable(),
            priority: None,
            reply_to: None,
        }
    }
}
