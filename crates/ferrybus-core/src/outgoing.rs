//! Outgoing messages: what a publish, send or respond produces ([`OutgoingMessage`]), built by a
//! [`MessageFactory`] with [`SendOptions`] and a [`MessageOrigin`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::address::{AddressError, EndpointAddress, HostAddress};
use crate::envelope::{Envelope, Headers, HostInfo, Payload, ENVELOPE_CONTENT_TYPE};
use crate::error::PublishError;
use crate::instrument::{
    baggage_header, current_activity_id, ACTIVITY_CORRELATION_CONTEXT_HEADER, ACTIVITY_ID_HEADER,
};
use crate::message::{Message, MessageType, TypeName};

/// One message ready to leave the process: a serialized body and the metadata a transport or an
/// outbox row needs. Its fields map one to one to MassTransit's `OutboxMessage` columns.
#[derive(Clone, Debug, PartialEq)]
pub struct OutgoingMessage {
    /// The message id.
    pub message_id: Uuid,
    /// The conversation id.
    pub conversation_id: Option<Uuid>,
    /// The correlation id.
    pub correlation_id: Option<Uuid>,
    /// The initiator id.
    pub initiator_id: Option<Uuid>,
    /// The request id.
    pub request_id: Option<Uuid>,
    /// The sender's address.
    pub source_address: Option<String>,
    /// Where the message goes: an exchange address (`rabbitmq://host/vhost/name?options`).
    pub destination_address: String,
    /// Where responses go.
    pub response_address: Option<String>,
    /// Where faults go.
    pub fault_address: Option<String>,
    /// The message type URNs.
    pub message_type: Vec<String>,
    /// The body's content type.
    pub content_type: String,
    /// The serialized body (the envelope, for MassTransit's content type).
    pub body: Bytes,
    /// The headers, mirrored to transport headers.
    pub headers: Headers,
    /// When the message was sent.
    pub sent_time: DateTime<Utc>,
    /// When the message expires.
    pub expiration_time: Option<DateTime<Utc>>,
    /// Exchanges of base types to bind from the destination exchange (publishes only).
    pub publish_bindings: Vec<String>,
    /// Transport properties of a message read back from an outbox row that a .NET service
    /// wrote (MassTransit's `OutboxMessage.Properties`: `Delay`, `Durable`, `Mandatory`,
    /// `RMQ-RoutingKey`, `RMQ-Priority`, …), for the transport to apply when it sends, as
    /// MassTransit's `TransportSendContext.ReadPropertiesFrom` does; empty for messages built
    /// by ferrybus, except `RMQ-Priority` (set with [`SendOptions::priority`] or copied from the
    /// consumed message, as MassTransit's `CopyIncomingPropertiesIfPresent` does). Stored in the
    /// outbox row's `Properties`, as MassTransit stores them.
    pub properties: Map<String, Value>,
    /// Names of headers whose values are times, sent as AMQP timestamps when the message goes
    /// straight to the broker (MassTransit's RabbitMQ transport does so for `DateTime` header
    /// values); the envelope and an outbox row keep them as round-trip strings. Not stored.
    pub timestamp_headers: Vec<String>,
}

impl OutgoingMessage {
    /// The remaining time to live, if the message expires (never less than one second, as
    /// MassTransit turns a zero or negative TTL into one second).
    pub fn time_to_live(&self) -> Option<Duration> {
        self.expiration_time.map(|t| {
            let ms = (t - Utc::now()).num_milliseconds().max(1000);
            Duration::from_millis(ms as u64)
        })
    }

    /// Whether it goes to RabbitMQ's direct reply-to pseudo-queue (`…/amq.rabbitmq.reply-to`, a
    /// requester using direct reply-to), as MassTransit's `IsReplyToAddress` tells it.
    pub fn is_reply_to(&self) -> bool {
        self.destination()
            .is_ok_and(|address| address.name == crate::address::DIRECT_REPLY_TO)
    }

    /// The destination address, parsed (once per distinct address:
    /// [`EndpointAddress::parse_shared`]); its `name` is the exchange.
    pub fn destination(&self) -> Result<Arc<EndpointAddress>, AddressError> {
        EndpointAddress::parse_shared(&self.destination_address)
    }

    /// The transport properties MassTransit's outbox stores beside a message
    /// (`{"RMQ-Exchange": "<exchange>"}` for RabbitMQ addresses).
    pub fn transport_properties(&self) -> Option<Map<String, Value>> {
        let address = self.destination().ok()?;
        if !address.scheme.starts_with("rabbitmq") && !address.scheme.starts_with("amqp") {
            return None;
        }
        let mut properties = Map::new();
        properties.insert("RMQ-Exchange".into(), Value::String(address.name.clone()));
        Some(properties)
    }

    /// The base-type exchanges to bind for this message when it was published to its type's
    /// exchange, derived from the URN list (used for messages read back from an outbox table).
    pub fn derive_publish_bindings(&mut self) {
        let Ok(destination) = self.destination() else {
            return;
        };
        let names: Vec<String> = self
            .message_type
            .iter()
            .filter_map(|urn| TypeName::parse(urn).ok())
            .map(|t| t.entity_name())
            .collect();
        if names.first() == Some(&destination.name) {
            self.publish_bindings = names[1..].to_vec();
        }
    }
}

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
    message_id: Option<Uuid>,
    correlation_id: Option<Uuid>,
    request_id: Option<Uuid>,
    conversation_id: Option<Uuid>,
    response_address: Option<String>,
    fault_address: Option<String>,
    time_to_live: Option<Duration>,
    priority: Option<u8>,
    headers: Headers,
    timestamp_headers: Vec<String>,
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
        let text = crate::dotnet::datetime::format_round_trip(&value);
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

    /// The headers set so far.
    pub fn headers(&self) -> &Headers {
        &self.headers
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

    /// The origin of a message sent while consuming `received`: [`consumed`](Self::consumed)
    /// plus the transport priority.
    pub fn received(received: &crate::ReceivedMessage) -> Self {
        Self {
            priority: received.priority,
            reply_to: received.reply_to.clone(),
            ..Self::consumed(&received.envelope, &received.input_address)
        }
    }
}

/// Builds outgoing messages in MassTransit's shape for one host.
#[derive(Clone, Debug)]
pub struct MessageFactory {
    host: HostAddress,
}

impl MessageFactory {
    /// A factory for messages on `host`.
    pub fn new(host: HostAddress) -> Self {
        Self { host }
    }

    /// The host address.
    pub fn host(&self) -> &HostAddress {
        &self.host
    }

    /// A publish of `message`: to the exchange of its type, with every base type advertised.
    pub fn publish<M: Message>(
        &self,
        message: &M,
        origin: &MessageOrigin,
        options: SendOptions,
    ) -> Result<OutgoingMessage, PublishError> {
        let message_type = M::message_type();
        let destination = self.host.entity_address(message_type.entity_name());
        let payload = Payload::of(message)?;
        self.build(&message_type, payload, destination, origin, options, true)
    }

    /// A send of `message` to `address` (`queue:name`, `exchange:name`, or a full URI).
    pub fn send<M: Message>(
        &self,
        address: &str,
        message: &M,
        origin: &MessageOrigin,
        options: SendOptions,
    ) -> Result<OutgoingMessage, PublishError> {
        let destination = self.host.resolve(address)?;
        let payload = Payload::of(message)?;
        self.build(
            &M::message_type(),
            payload,
            destination,
            origin,
            options,
            false,
        )
    }

    /// A message of an explicit type with a JSON payload (faults, forwarded messages).
    pub fn build(
        &self,
        message_type: &MessageType,
        payload: impl Into<Payload>,
        destination: String,
        origin: &MessageOrigin,
        options: SendOptions,
        publish: bool,
    ) -> Result<OutgoingMessage, PublishError> {
        let now = Utc::now();
        let mut headers = origin.headers.clone();
        for (name, value) in options.headers.iter() {
            headers.insert(name, value.clone());
        }
        // The current span (inside a consumer, its process span) continues in whatever
        // receives this message, also when an outbox row carries it there later
        // (`crate::instrument`).
        if !headers.contains(ACTIVITY_ID_HEADER) {
            if let Some(activity_id) = current_activity_id() {
                headers.insert(ACTIVITY_ID_HEADER, activity_id);
            }
        }
        if !headers.contains(ACTIVITY_CORRELATION_CONTEXT_HEADER) {
            if let Some(baggage) = baggage_header(&opentelemetry::Context::current()) {
                headers.insert(ACTIVITY_CORRELATION_CONTEXT_HEADER, baggage);
            }
        }
        let all_types = message_type.all_types();
        let envelope = Envelope {
            message_id: Some(options.message_id.unwrap_or_else(Uuid::now_v7)),
            request_id: options.request_id,
            correlation_id: options.correlation_id,
            conversation_id: Some(
                options
                    .conversation_id
                    .or(origin.conversation_id)
                    .unwrap_or_else(Uuid::now_v7),
            ),
            initiator_id: origin.initiator_id,
            source_address: origin.source_address.clone(),
            destination_address: Some(destination),
            response_address: options.response_address,
            fault_address: options.fault_address,
            message_type: all_types.iter().map(|t| t.urn().to_owned()).collect(),
            message: payload.into(),
            expiration_time: options
                .time_to_live
                .and_then(|ttl| chrono::Duration::from_std(ttl).ok())
                .map(|ttl| now + ttl),
            sent_time: Some(now),
            headers,
            host: Some(HostInfo::shared()),
        };
        let publish_bindings = if publish {
            all_types[1..]
                .iter()
                .map(|t| t.entity_name().to_owned())
                .collect()
        } else {
            Vec::new()
        };
        let mut message = Self::from_envelope(envelope, publish_bindings);
        if let Some(priority) = options.priority.or(origin.priority) {
            message
                .properties
                .insert("RMQ-Priority".into(), Value::from(priority));
        }
        message.timestamp_headers = options.timestamp_headers;
        if let Some(reply_to) = origin.reply_to.as_ref().filter(|_| message.is_reply_to()) {
            // MassTransit's `ReplyToSendEndpoint` routes by the requester's reply-to name and
            // `CopyIncomingPropertiesIfPresent` copies it onto the response.
            for key in ["RMQ-RoutingKey", "RMQ-ReplyTo"] {
                message
                    .properties
                    .insert(key.into(), Value::from(reply_to.as_str()));
            }
        }
        Ok(message)
    }

    /// Wraps a complete envelope as an outgoing message.
    pub fn from_envelope(envelope: Envelope, publish_bindings: Vec<String>) -> OutgoingMessage {
        let body = Bytes::from(envelope.to_vec());
        OutgoingMessage {
            message_id: envelope.message_id.unwrap_or_else(Uuid::now_v7),
            conversation_id: envelope.conversation_id,
            correlation_id: envelope.correlation_id,
            initiator_id: envelope.initiator_id,
            request_id: envelope.request_id,
            source_address: envelope.source_address,
            destination_address: envelope.destination_address.unwrap_or_default(),
            response_address: envelope.response_address,
            fault_address: envelope.fault_address,
            message_type: envelope.message_type,
            content_type: ENVELOPE_CONTENT_TYPE.to_owned(),
            body,
            headers: envelope.headers,
            sent_time: envelope.sent_time.unwrap_or_else(Utc::now),
            expiration_time: envelope.expiration_time,
            publish_bindings,
            properties: Map::new(),
            timestamp_headers: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct OrderPlaced {
        order_id: Uuid,
    }

    impl Message for OrderPlaced {
        fn message_type() -> MessageType {
            MessageType::parse("Bookstore.Contracts:OrderPlaced")
                .unwrap()
                .implements(MessageType::parse("Bookstore.Contracts:IOrderEvent").unwrap())
        }
    }

    #[test]
    fn priority_comes_from_the_consumed_message_unless_set() {
        let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
        let origin = MessageOrigin {
            priority: Some(4),
            ..MessageOrigin::default()
        };
        let order = OrderPlaced {
            order_id: Uuid::nil(),
        };
        let copied = factory
            .publish(&order, &origin, SendOptions::new())
            .unwrap();
        assert_eq!(copied.properties["RMQ-Priority"], 4);
        let own = factory
            .publish(&order, &origin, SendOptions::new().priority(8))
            .unwrap();
        assert_eq!(own.properties["RMQ-Priority"], 8);
        let none = factory
            .publish(&order, &MessageOrigin::default(), SendOptions::new())
            .unwrap();
        assert!(none.properties.is_empty());
    }

    #[test]
    fn publish_follows_masstransit_rules() {
        let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
        let mut consumed = Envelope {
            conversation_id: Some(Uuid::from_u128(7)),
            request_id: Some(Uuid::from_u128(9)),
            ..Envelope::default()
        };
        consumed.headers.insert("Tenant", "acme");
        consumed.headers.insert("MT-Activity-Id", "x");
        let origin = MessageOrigin::consumed(&consumed, "rabbitmq://localhost/billing");
        let out = factory
            .publish(
                &OrderPlaced {
                    order_id: Uuid::nil(),
                },
                &origin,
                SendOptions::new(),
            )
            .unwrap();
        assert_eq!(
            out.destination_address,
            "rabbitmq://localhost/Bookstore.Contracts:OrderPlaced"
        );
        assert_eq!(out.conversation_id, Some(Uuid::from_u128(7)));
        assert_eq!(out.initiator_id, Some(Uuid::from_u128(9)));
        assert_eq!(out.headers.get_str("tenant"), Some("acme"));
        assert!(!out.headers.contains("MT-Activity-Id"));
        assert_eq!(out.publish_bindings, ["Bookstore.Contracts:IOrderEvent"]);
        assert_eq!(
            out.transport_properties().unwrap()["RMQ-Exchange"],
            "Bookstore.Contracts:OrderPlaced"
        );
        let envelope = Envelope::from_slice(&out.body).unwrap();
        assert_eq!(envelope.message["orderId"], Uuid::nil().to_string());
        assert_eq!(
            envelope.source_address.as_deref(),
            Some("rabbitmq://localhost/billing")
        );
    }

    #[test]
    fn derives_bindings_from_urns() {
        let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
        let mut out = factory
            .publish(
                &OrderPlaced {
                    order_id: Uuid::nil(),
                },
                &MessageOrigin::default(),
                SendOptions::new(),
            )
            .unwrap();
        out.publish_bindings.clear();
        out.derive_publish_bindings();
        assert_eq!(out.publish_bindings, ["Bookstore.Contracts:IOrderEvent"]);
    }
}
