//! The [`Serializer`] of a bus or endpoint, and raw JSON on the way out (MassTransit's
//! `UseRawJsonSerializer`): the body is the message itself, `application/json`, and the
//! envelope's fields travel as transport headers, as
//! `src/MassTransit/Serialization/RawMessageSerializer.cs` (`SetRawMessageHeaders`) writes them
//! with `RawSerializerOptions.AddTransportHeaders`.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::message::OutgoingMessage;
use crate::envelope::{Envelope, HostInfo, RAW_JSON_CONTENT_TYPE};

/// How a bus or a receive endpoint writes the messages it sends, publishes and responds with
/// (faults and scheduled messages too), and which bodies its endpoints read besides MassTransit
/// envelopes — MassTransit's `UseRawJsonSerializer()` on the bus or on one endpoint
/// (`src/MassTransit/Configuration/RawJsonSerializerConfigurationExtensions.cs`). Set it on the
/// bus with [`BusConfig::serializer`](crate::BusConfig::serializer), on one endpoint with
/// [`EndpointConfig::serializer`](crate::EndpointConfig::serializer).
///
/// Whatever the serializer, an endpoint reads a body by its content type, as MassTransit picks
/// the deserializer by content type (`src/MassTransit/Serialization/Serialization.cs`):
/// `application/vnd.masstransit+json` (or none) is an envelope; `application/json` is raw JSON
/// where the serializer is [`RawJson`](Self::RawJson).
///
/// ```
/// use ferrybus_core::outgoing::{MessageFactory, MessageOrigin, RawSerializerOptions, Serializer};
/// use ferrybus_core::{address::HostAddress, SendOptions};
/// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Shop")]
/// # struct OrderPlaced { id: u32 }
/// let raw = Serializer::RawJson(RawSerializerOptions::default());
/// let factory = MessageFactory::new(HostAddress::loopback()).with_serializer(raw);
/// let message = factory
///     .publish(&OrderPlaced { id: 7 }, &MessageOrigin::default(), SendOptions::new())
///     .unwrap();
/// assert_eq!(message.content_type, "application/json");
/// assert_eq!(&message.body[..], br#"{"id":7}"#);
/// assert_eq!(message.headers.get_str("MT-MessageType"), Some("urn:message:Shop:OrderPlaced"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Serializer {
    /// MassTransit's envelope, `application/vnd.masstransit+json` (the default).
    #[default]
    Envelope,
    /// Raw JSON, `application/json`: the body is the message itself.
    RawJson(RawSerializerOptions),
}

impl Serializer {
    /// Raw JSON with MassTransit's default options (`RawSerializerOptions.Default`).
    pub fn raw_json() -> Self {
        Self::RawJson(RawSerializerOptions::default())
    }
}

/// MassTransit's `RawSerializerOptions` flags (`src/MassTransit/RawSerializerOptions.cs`); the
/// default is theirs, both on (`Default = CopyHeaders | AddTransportHeaders`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSerializerOptions {
    /// Writes the envelope's fields as transport headers on a raw message sent (`MessageId`,
    /// `CorrelationId`, `ConversationId`, `RequestId`, `MT-InitiatorId`, `MT-MessageType`,
    /// `MT-Source-Address`, `MT-Response-Address`, `MT-Fault-Address`, `MT-Host-Info`).
    /// Without it a raw message carries its body and its own headers only.
    pub add_transport_headers: bool,
    /// Keeps the transport headers of a raw message read (but the `MT-` and id headers) as the
    /// message's headers, so that what its consumer sends carries them on. Without it a raw
    /// message read has no headers.
    pub copy_headers: bool,
}

impl Default for RawSerializerOptions {
    fn default() -> Self {
        Self {
            add_transport_headers: true,
            copy_headers: true,
        }
    }
}

/// Turns `message`, built from `envelope`, into raw JSON: the envelope's message as the body,
/// and with `add_transport_headers` its ids, addresses, types and host as headers.
pub(super) fn into_raw_json(
    message: &mut OutgoingMessage,
    envelope: &Envelope,
    options: RawSerializerOptions,
) {
    message.body = Bytes::copy_from_slice(envelope.message.json().as_bytes());
    message.content_type = RAW_JSON_CONTENT_TYPE.to_owned();
    if !options.add_transport_headers {
        return;
    }
    let h = &mut message.headers;
    let ids = [
        ("MessageId", envelope.message_id),
        ("CorrelationId", envelope.correlation_id),
        ("ConversationId", envelope.conversation_id),
        ("MT-InitiatorId", envelope.initiator_id),
        ("RequestId", envelope.request_id),
    ];
    for (name, id) in ids {
        if let Some(id) = id {
            h.insert(name, id.to_string());
        }
    }
    if !envelope.message_type.is_empty() {
        h.insert("MT-MessageType", envelope.message_type.join(";"));
    }
    let addresses = [
        ("MT-Response-Address", &envelope.response_address),
        ("MT-Fault-Address", &envelope.fault_address),
        ("MT-Source-Address", &envelope.source_address),
    ];
    for (name, address) in addresses {
        if let Some(address) = address {
            h.insert(name, address.clone());
        }
    }
    h.insert("MT-Host-Info", host_info(HostInfo::current()));
}

/// The host as MassTransit writes `MT-Host-Info`: `HostInfo` serialized with
/// System.Text.Json's default options, so with .NET's PascalCase property names.
fn host_info(host: &HostInfo) -> String {
    let Ok(Value::Object(camel)) = serde_json::to_value(host) else {
        return "{}".to_owned();
    };
    let pascal: Map<String, Value> = camel
        .into_iter()
        .map(|(k, v)| {
            let mut chars = k.chars();
            let first = chars.next().map(|c| c.to_ascii_uppercase());
            (first.into_iter().chain(chars).collect(), v)
        })
        .collect();
    Value::Object(pascal).to_string()
}
