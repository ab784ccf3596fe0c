//! Reading an envelope in one pass: a serde visitor over the body's top-level object.
//!
//! Keys match case-insensitively (System.Text.Json with `PropertyNameCaseInsensitive`, Newtonsoft
//! by default), in any order, any of them missing; unknown keys are skipped; a key given twice
//! keeps its last value. Field values are read loosely so that a wrong shape becomes an
//! [`EnvelopeError`] naming the field, not a parse error; `message` is kept as JSON text.
//!
//! MassTransit's `MessageEnvelope` (`src/MassTransit.Abstractions/Serialization/Serialization/MessageEnvelope.cs`) types
//! `messageType` as `string[]`: a single string is refused, as System.Text.Json refuses it.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;
use uuid::Uuid;

use super::error::EnvelopeError;
use super::headers::Headers;
use super::host::HostInfo;
use super::json::{parse_dotnet_guid, parse_lenient};
use super::model::Envelope;
use super::payload::Payload;
use crate::shared_text::TextCache;

/// Reads the top-level object into an [`Envelope`]; anything else is
/// [`EnvelopeError::NotAnObject`]. The outer `Result` carries JSON syntax errors.
pub(super) struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Result<Envelope, EnvelopeError>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a MassTransit envelope (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut envelope = Envelope::default();
        let mut message: Option<Box<RawValue>> = None;
        let mut first_error = None;
        while let Some(key) = map.next_key::<Key>()? {
            let read = match key {
                Key::MessageId => map
                    .next_value::<Loose<'_>>()
                    .map(|v| guid("messageId", v).map(|v| envelope.message_id = v))?,
                Key::RequestId => map
                    .next_value::<Loose<'_>>()
                    .map(|v| guid("requestId", v).map(|v| envelope.request_id = v))?,
                Key::CorrelationId => map
                    .next_value::<Loose<'_>>()
                    .map(|v| guid("correlationId", v).map(|v| envelope.correlation_id = v))?,
                Key::ConversationId => map
                    .next_value::<Loose<'_>>()
                    .map(|v| guid("conversationId", v).map(|v| envelope.conversation_id = v))?,
                Key::InitiatorId => map
                    .next_value::<Loose<'_>>()
                    .map(|v| guid("initiatorId", v).map(|v| envelope.initiator_id = v))?,
                Key::SourceAddress => map
                    .next_value::<Loose<'_>>()
                    .map(|v| text("sourceAddress", v).map(|v| envelope.source_address = v))?,
                Key::DestinationAddress => map.next_value::<Loose<'_>>().map(|v| {
                    text("destinationAddress", v).map(|v| envelope.destination_address = v)
                })?,
                Key::ResponseAddress => map
                    .next_value::<Loose<'_>>()
                    .map(|v| text("responseAddress", v).map(|v| envelope.response_address = v))?,
                Key::FaultAddress => map
                    .next_value::<Loose<'_>>()
                    .map(|v| text("faultAddress", v).map(|v| envelope.fault_address = v))?,
                Key::MessageType => map
                    .next_value::<Types>()
                    .map(|v| types(v).map(|v| envelope.message_type = v))?,
                Key::Message => {
                    message = Some(map.next_value::<Box<RawValue>>()?);
                    Ok(())
                }
                Key::ExpirationTime => map
                    .next_value::<Loose<'_>>()
                    .map(|v| time("expirationTime", v).map(|v| envelope.expiration_time = v))?,
                Key::SentTime => map
                    .next_value::<Loose<'_>>()
                    .map(|v| time("sentTime", v).map(|v| envelope.sent_time = v))?,
                Key::Headers => map.next_value::<Value>().map(|v| {
                    Headers::from_json(v)
                        .map(|h| envelope.headers = h)
                        .map_err(|r| EnvelopeError::field("headers", r))
                })?,
                Key::Host => map
                    .next_value::<Box<RawValue>>()
                    .map(|raw| read_raw_host(&raw).map(|v| envelope.host = v))?,
                Key::Other => map.next_value::<IgnoredAny>().map(|_| Ok(()))?,
            };
            if let Err(error) = read {
                first_error.get_or_insert(error);
            }
        }
        if let Some(error) = first_error {
            return Ok(Err(error));
        }
        Ok(match message {
            Some(raw) if raw.get() != "null" => {
                envelope.message = Payload::from_raw(raw);
                Ok(envelope)
            }
            _ => Err(EnvelopeError::MissingMessage),
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Err(EnvelopeError::NotAnObject))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(EnvelopeError::NotAnObject))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(EnvelopeError::NotAnObject))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(EnvelopeError::NotAnObject))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(EnvelopeError::NotAnObject))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err(EnvelopeError::NotAnObject))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Err(EnvelopeError::NotAnObject))
    }
}

/// An envelope key, matched case-insensitively.
#[derive(Clone, Copy)]
enum Key {
    MessageId,
    RequestId,
    CorrelationId,
    ConversationId,
    InitiatorId,
    SourceAddress,
    DestinationAddress,
    ResponseAddress,
    FaultAddress,
    MessageType,
    Message,
    ExpirationTime,
    SentTime,
    Headers,
    Host,
    Other,
}

const KEYS: [(&str, Key); 15] = [
    ("messageId", Key::MessageId),
    ("requestId", Key::RequestId),
    ("correlationId", Key::CorrelationId),
    ("conversationId", Key::ConversationId),
    ("initiatorId", Key::InitiatorId),
    ("sourceAddress", Key::SourceAddress),
    ("destinationAddress", Key::DestinationAddress),
    ("responseAddress", Key::ResponseAddress),
    ("faultAddress", Key::FaultAddress),
    ("messageType", Key::MessageType),
    ("message", Key::Message),
    ("expirationTime", Key::ExpirationTime),
    ("sentTime", Key::SentTime),
    ("headers", Key::Headers),
    ("host", Key::Host),
];

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an envelope key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                // Exact camelCase first (what v8 writes), then any casing.
                Ok(KEYS
                    .iter()
                    .find(|(name, _)| *name == key)
                    .or_else(|| KEYS.iter().find(|(name, _)| name.eq_ignore_ascii_case(key)))
                    .map_or(Key::Other, |(_, k)| *k))
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// A scalar envelope value, read without failing on a wrong shape; text borrowed from the body
/// where it has no escapes.
enum Loose<'de> {
    Null,
    Text(Cow<'de, str>),
    Wrong(&'static str),
}

impl<'de> Deserialize<'de> for Loose<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LooseVisitor)
    }
}

struct LooseVisitor;

impl<'de> Visitor<'de> for LooseVisitor {
    type Value = Loose<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or null")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Loose<'de>, E> {
        Ok(Loose::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Loose<'de>, E> {
        Ok(Loose::Null)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Loose<'de>, E> {
        Ok(Loose::Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Loose<'de>, E> {
        Ok(Loose::Text(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Loose<'de>, E> {
        Ok(Loose::Text(Cow::Owned(v)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Loose<'de>, E> {
        Ok(Loose::Wrong("a boolean"))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Loose<'de>, E> {
        Ok(Loose::Wrong("a number"))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Loose<'de>, E> {
        Ok(Loose::Wrong("a number"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Loose<'de>, E> {
        Ok(Loose::Wrong("a number"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Loose::Wrong("an array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Loose::Wrong("an object"))
    }
}

/// The `messageType` value.
enum Types {
    Null,
    List(Vec<String>),
    Wrong(&'static str),
}

impl<'de> Deserialize<'de> for Types {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TypesVisitor;
        impl<'de> Visitor<'de> for TypesVisitor {
            type Value = Types;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of URN strings")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Types, E> {
                Ok(Types::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Types, A::Error> {
                let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(2));
                let mut wrong = None;
                while let Some(item) = seq.next_element::<Loose<'_>>()? {
                    match item {
                        Loose::Text(urn) => list.push(urn.into_owned()),
                        Loose::Null => wrong = wrong.or(Some("null")),
                        Loose::Wrong(kind) => wrong = wrong.or(Some(kind)),
                    }
                }
                Ok(wrong.map_or(Types::List(list), Types::Wrong))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Types, E> {
                Ok(Types::Wrong("a string"))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Types, E> {
                Ok(Types::Wrong("a boolean"))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Types, E> {
                Ok(Types::Wrong("a number"))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Types, E> {
                Ok(Types::Wrong("a number"))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Types, E> {
                Ok(Types::Wrong("a number"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Types, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Types::Wrong("an object"))
            }
        }
        deserializer.deserialize_any(TypesVisitor)
    }
}

fn guid(field: &'static str, value: Loose<'_>) -> Result<Option<Uuid>, EnvelopeError> {
    match value {
        Loose::Null => Ok(None),
        Loose::Text(s) if s.trim().is_empty() => Ok(None),
        Loose::Text(s) => parse_dotnet_guid(&s)
            .map(Some)
            .ok_or_else(|| EnvelopeError::field(field, format!("{s:?} is not a GUID"))),
        Loose::Wrong(kind) => Err(EnvelopeError::field(
            field,
            format!("expected a GUID string, found {kind}"),
        )),
    }
}

fn text(field: &'static str, value: Loose<'_>) -> Result<Option<String>, EnvelopeError> {
    match value {
        Loose::Null => Ok(None),
        Loose::Text(s) => Ok(Some(s.into_owned())),
        Loose::Wrong(kind) => Err(EnvelopeError::field(
            field,
            format!("expected a string, found {kind}"),
        )),
    }
}

fn types(value: Types) -> Result<Vec<String>, EnvelopeError> {
    match value {
        Types::Null => Ok(Vec::new()),
        Types::List(list) => Ok(list),
        Types::Wrong(kind) => Err(EnvelopeError::field(
            "messageType",
            format!("expected an array of URN strings, found {kind} (MassTransit reads string[])"),
        )),
    }
}

fn time(field: &'static str, value: Loose<'_>) -> Result<Option<DateTime<Utc>>, EnvelopeError> {
    match value {
        Loose::Null => Ok(None),
        Loose::Text(s) if s.is_empty() => Ok(None),
        Loose::Text(s) => ferrybus_dotnet::datetime::parse_datetime(s.trim())
            .map(Some)
            .map_err(|_| EnvelopeError::field(field, format!("{s:?} is not a date-time"))),
        Loose::Wrong(kind) => Err(EnvelopeError::field(
            field,
            format!("expected a date-time string, found {kind}"),
        )),
    }
}

/// Reads the envelope's `host` from its JSON text: an object, keys in any case, or `null`.
///
/// A peer writes the same `host` text into every message it sends, so each distinct text is
/// read once and its `HostInfo` shared ([`TextCache`]).
fn read_raw_host(raw: &RawValue) -> Result<Option<Arc<HostInfo>>, EnvelopeError> {
    let text = raw.get();
    if text == "null" {
        return Ok(None);
    }
    if !text.starts_with('{') {
        let kind = match text.as_bytes()[0] {
            b'[' => "an array",
            b'"' => "a string",
            b't' | b'f' => "a boolean",
            _ => "a number",
        };
        return Err(EnvelopeError::field(
            "host",
            format!("expected an object, found {kind}"),
        ));
    }
    static HOSTS: TextCache<Arc<HostInfo>> = TextCache::new();
    HOSTS
        .get_or_try(text, |text| {
            crate::message::bind::<HostInfo>(text).map(Arc::new)
        })
        .map(Some)
        .map_err(|e| EnvelopeError::field("host", e.to_string()))
}

/// Reads a `host` object (keys in any case), as the envelope and `MT-Host-Info` carry it.
pub(crate) fn read_host(value: Value) -> Result<Option<HostInfo>, EnvelopeError> {
    match value {
        Value::Null => Ok(None),
        value @ Value::Object(_) => crate::message::bind_value(&value)
            .map(Some)
            .map_err(|e| EnvelopeError::field("host", e.to_string())),
        other => Err(EnvelopeError::field(
            "host",
            format!("expected an object, found {}", json_kind(&other)),
        )),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Envelope {
    /// Reads an envelope from a message body, in one pass: the envelope's fields are read (keys
    /// matched case-insensitively, as System.Text.Json reads them with MassTransit's options) and
    /// `message` is kept as JSON text ([`Payload`]). A leading UTF-8 BOM is skipped; a body
    /// with comments or trailing commas is read again with a lenient parser.
    pub fn from_slice(body: &[u8]) -> Result<Envelope, EnvelopeError> {
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let mut de = serde_json::Deserializer::from_slice(body);
        let strict = serde::Deserializer::deserialize_any(&mut de, EnvelopeVisitor)
            .and_then(|read| de.end().map(|()| read));
        match strict {
            Ok(read) => read,
            Err(strict) if strict.is_syntax() || strict.is_eof() => {
                let value =
                    parse_lenient(body).ok_or_else(|| EnvelopeError::Json(strict.to_string()))?;
                Self::from_value(value)
            }
            Err(other) => Err(EnvelopeError::Json(other.to_string())),
        }
    }

    /// Reads an envelope from parsed JSON, matching keys case-insensitively.
    pub fn from_value(value: Value) -> Result<Envelope, EnvelopeError> {
        serde::Deserializer::deserialize_any(value, EnvelopeVisitor)
            .unwrap_or_else(|e| Err(EnvelopeError::Json(e.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_ids_with_the_field_name() {
        let err = Envelope::from_slice(br#"{"messageId": "nope", "message": {}}"#).unwrap_err();
        assert_eq!(err.to_string(), "messageId: \"nope\" is not a GUID");
    }

    #[test]
    fn requires_a_message() {
        let err = Envelope::from_slice(br#"{"messageId": null}"#).unwrap_err();
        assert_eq!(err, EnvelopeError::MissingMessage);
        let err = Envelope::from_slice(br#"{"message": null}"#).unwrap_err();
        assert_eq!(err, EnvelopeError::MissingMessage);
    }

    #[test]
    fn reports_bad_json() {
        assert!(matches!(
            Envelope::from_slice(b"{not json").unwrap_err(),
            EnvelopeError::Json(_)
        ));
        assert_eq!(
            Envelope::from_slice(b"[1]").unwrap_err(),
            EnvelopeError::NotAnObject
        );
    }

    #[test]
    fn accepts_dotnet_guid_formats() {
        for s in [
            "181c0000-6393-3630-36a4-08daf4e7c6da",
            "181c00006393363036a408daf4e7c6da",
            "{181c0000-6393-3630-36a4-08daf4e7c6da}",
            "(181C0000-6393-3630-36A4-08DAF4E7C6DA)",
        ] {
            assert_eq!(
                parse_dotnet_guid(s).unwrap().to_string(),
                "181c0000-6393-3630-36a4-08daf4e7c6da"
            );
        }
    }

    #[test]
    fn a_peer_s_host_is_read_once_and_shared() {
        let body = |host: &str| format!(r#"{{"message": {{}}, "host": {host}}}"#);
        let peer = r#"{"machineName": "web-1", "ProcessId": 42, "massTransitVersion": "8.5.5.0"}"#;
        let first = Envelope::from_slice(body(peer).as_bytes()).unwrap();
        let again = Envelope::from_slice(body(peer).as_bytes()).unwrap();
        let (first, again) = (first.host.unwrap(), again.host.unwrap());
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(first.machine_name.as_deref(), Some("web-1"));
        assert_eq!(first.process_id, Some(42));

        let other = r#"{"machineName": "web-2", "ProcessId": 42, "massTransitVersion": "8.5.5.0"}"#;
        let other = Envelope::from_slice(body(other).as_bytes())
            .unwrap()
            .host
            .unwrap();
        assert_eq!(other.machine_name.as_deref(), Some("web-2"));
        let bad = Envelope::from_slice(body(r#"{"processId": "x"}"#).as_bytes()).unwrap_err();
        assert!(bad.to_string().starts_with("host: "), "{bad}");
        // Many hosts, each read right.
        for n in 0..20 {
            let host = format!(r#"{{"machineName": "m{n}"}}"#);
            let read = Envelope::from_slice(body(&host).as_bytes())
                .unwrap()
                .host
                .unwrap();
            assert_eq!(read.machine_name, Some(format!("m{n}")));
        }
    }

    #[test]
    fn writes_this_process_s_host_as_any_other() {
        let host = HostInfo::shared();
        let shared = Envelope {
            message: serde_json::json!({}).into(),
            host: Some(host.clone()),
            ..Envelope::default()
        };
        let copied = Envelope {
            host: Some(Arc::new((*host).clone())),
            ..shared.clone()
        };
        assert_eq!(shared.to_vec(), copied.to_vec());
        let value: Value = serde_json::to_value(&shared).unwrap();
        assert_eq!(value["host"], serde_json::to_value(&*host).unwrap());
        let read = Envelope::from_slice(&shared.to_vec()).unwrap();
        assert_eq!(read.host.as_deref(), Some(&*host));
    }

    #[test]
    fn writes_all_keys_in_order_with_nulls() {
        let envelope = Envelope {
            message: serde_json::json!({}).into(),
            ..Envelope::default()
        };
        let text = String::from_utf8(envelope.to_vec()).unwrap();
        assert_eq!(
            text,
            r#"{"messageId":null,"requestId":null,"correlationId":null,"conversationId":null,"initiatorId":null,"sourceAddress":null,"destinationAddress":null,"responseAddress":null,"faultAddress":null,"messageType":[],"message":{},"expirationTime":null,"sentTime":null,"headers":{},"host":null}"#
        );
    }
}
