//! Raw JSON on the way out (MassTransit's `UseRawJsonSerializer`): the body is the message
//! itself, `application/json`, and the envelope's fields travel as transport headers, as
//! `src/MassTransit/Serialization/RawMessageSerializer.cs` (`SetRawMessageHeaders`) writes them
//! with its default `RawSerializerOptions.AddTransportHeaders`.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::message::OutgoingMessage;
use crate::envelope::{Envelope, HostInfo, RAW_JSON_CONTENT_TYPE};

/// Turns `message`, built from `envelope`, into raw JSON: the envelope's message as the body,
/// its ids, addresses, types and host as headers.
pub(super) fn into_raw_json(message: &mut OutgoingMessage, envelope: &Envelope) {
    message.body = Bytes::copy_from_slice(envelope.message.json().as_bytes());
    message.content_type = RAW_JSON_CONTENT_TYPE.to_owned();
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
