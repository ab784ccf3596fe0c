//! [`MessageFactory`]: builds outgoing messages in MassTransit's shape for one host.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use chrono::Utc;
use serde_json::Map;
use uuid::Uuid;

use super::message::OutgoingMessage;
use super::options::{MessageOrigin, SendOptions};
use super::raw::Serializer;
use super::schedule::CancelledSchedules;
use crate::address::HostAddress;
use crate::envelope::{Envelope, Headers, HostInfo, Payload, ENVELOPE_CONTENT_TYPE};
use crate::error::PublishError;
use crate::message::{Message, MessageType};

/// Writes the caller's trace context into the headers of a message being built (MassTransit's
/// `MT-Activity-Id` and `MT-Activity-Correlation-Context`), leaving headers already set alone.
pub type TraceStamp = fn(&mut Headers);

static TRACE_STAMP: OnceLock<TraceStamp> = OnceLock::new();

/// Sets the [`TraceStamp`] every message built from now on passes through, so that whatever
/// receives it continues the trace it was built in (inside a consumer, its process span; in an
/// HTTP handler, the request's span), also when an outbox row carries it there later.
/// `ferrybus-otel` sets it; without one, messages carry only the trace headers they were given.
/// The first stamp set stays; returns whether this one was set.
///
/// ```
/// use ferrybus_core::outgoing::set_trace_stamp;
/// fn stamp(headers: &mut ferrybus_core::Headers) {
///     if !headers.contains("MT-Activity-Id") {
///         headers.insert("MT-Activity-Id", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
///     }
/// }
/// let _ = set_trace_stamp(stamp);
/// ```
pub fn set_trace_stamp(stamp: TraceStamp) -> bool {
    TRACE_STAMP.set(stamp).is_ok()
}

/// What a transport writes into every message its [`MessageFactory`] builds: the transport
/// properties MassTransit's outbox keeps beside a message, in the names the transport reads back
/// (and its .NET counterpart's delivery service reads from an outbox row). The RabbitMQ transport
/// writes `RMQ-Exchange`, `RMQ-Priority` and, for a response to a direct reply-to requester,
/// `RMQ-RoutingKey`/`RMQ-ReplyTo`.
///
/// ```
/// use std::sync::Arc;
/// use ferrybus_core::outgoing::{MessageFactory, MessageOrigin, OutgoingMessage, TransportProperties};
/// use ferrybus_core::address::HostAddress;
/// use ferrybus_core::SendOptions;
/// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Shop")]
/// # struct OrderPlaced {}
/// #[derive(Debug)]
/// struct Priorities;
/// impl TransportProperties for Priorities {
///     fn write(&self, message: &mut OutgoingMessage, priority: Option<u8>, _reply_to: Option<&str>) {
///         if let Some(priority) = priority {
///             message.properties.insert("Priority".into(), priority.into());
///         }
///     }
/// }
/// let factory = MessageFactory::new(HostAddress::loopback()).with_transport(Arc::new(Priorities));
/// let message = factory
///     .publish(&OrderPlaced {}, &MessageOrigin::default(), SendOptions::new().priority(3))
///     .unwrap();
/// assert_eq!(message.properties["Priority"], 3);
/// ```
pub trait TransportProperties: std::fmt::Debug + Send + Sync + 'static {
    /// Writes `message`'s transport properties: the message's own `priority` (set, or copied
    /// from the consumed message), and the consumed message's `reply_to` (its requester's
    /// direct reply-to name, when it had one).
    fn write(&self, message: &mut OutgoingMessage, priority: Option<u8>, reply_to: Option<&str>);
}

/// Builds outgoing messages in MassTransit's shape for one host.
#[derive(Clone, Debug)]
pub struct MessageFactory {
    host: HostAddress,
    transport: Option<Arc<dyn TransportProperties>>,
    cancelled: Arc<CancelledSchedules>,
    serializer: Serializer,
}

impl MessageFactory {
    /// A factory for messages on `host`, with no transport properties.
    pub fn new(host: HostAddress) -> Self {
        Self {
            host,
            transport: None,
            cancelled: Arc::default(),
            serializer: Serializer::Envelope,
        }
    }

    /// The same factory, writing every message it builds with `serializer` unless its
    /// [`SendOptions::serializer`] says otherwise (a bus gives its factory its
    /// [`BusConfig::serializer`](crate::BusConfig::serializer), an endpoint its own).
    pub fn with_serializer(mut self, serializer: Serializer) -> Self {
        self.serializer = serializer;
        self
    }

    /// How the messages it builds are written.
    pub fn serializer(&self) -> Serializer {
        self.serializer
    }

    /// The same factory, writing `transport`'s properties into every message it builds (the
    /// transport's own factory does; see [`TransportProperties`]).
    pub fn with_transport(mut self, transport: Arc<dyn TransportProperties>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// The host address.
    pub fn host(&self) -> &HostAddress {
        &self.host
    }

    /// The scheduling tokens cancelled on this factory's bus (its clones share them), which its
    /// endpoints check on arrival.
    pub fn cancelled_schedules(&self) -> &CancelledSchedules {
        &self.cancelled
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
        let options = options.correlated_by(message);
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
        let options = options.correlated_by(message);
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
        if let Some(stamp) = TRACE_STAMP.get() {
            stamp(&mut headers);
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
        let mut message = match options.serializer.unwrap_or(self.serializer) {
            Serializer::Envelope => Self::from_envelope(envelope, publish_bindings),
            Serializer::RawJson(raw) => {
                let mut message = Self::from_envelope(envelope.clone(), publish_bindings);
                super::raw::into_raw_json(&mut message, &envelope, raw);
                message
            }
        };
        message.timestamp_headers = options.timestamp_headers;
        if let Some(transport) = &self.transport {
            let priority = options.priority.or(origin.priority);
            transport.write(&mut message, priority, origin.reply_to.as_deref());
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
        assert!(
            out.properties.is_empty(),
            "no transport, no transport properties"
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
