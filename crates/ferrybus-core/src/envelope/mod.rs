//! The MassTransit JSON envelope (`application/vnd.masstransit+json`).
//!
//! [`Envelope::from_slice`] reads every shape MassTransit has written (v5 to v8, System.Text.Json
//! with nulls, Newtonsoft without them, PascalCase keys, `headers` as an object or an array,
//! comments and trailing commas); serializing an [`Envelope`] writes the v8 shape: all 15 keys in
//! MassTransit's order, camelCase, nulls written.
//!
//! ```
//! use ferrybus_core::Envelope;
//! let body = br#"{
//!     "MessageId": "181c0000-6393-3630-36a4-08daf4e7c6da",
//!     "messageType": ["urn:message:MassTransitRepro:SampleEvent"],
//!     "message": { "value": 1 }, // comments are tolerated, as .NET tolerates them
//! }"#;
//! let envelope = Envelope::from_slice(body).unwrap();
//! assert_eq!(envelope.message_id.unwrap().to_string(), "181c0000-6393-3630-36a4-08daf4e7c6da");
//! assert_eq!(envelope.message["value"], 1);
//!
//! let written = serde_json::to_value(&envelope).unwrap();
//! let keys: Vec<_> = written.as_object().unwrap().keys().cloned().collect();
//! assert_eq!(keys.len(), 15);
//! assert_eq!(keys[0], "messageId");
//! ```

mod headers;
mod host;
mod payload;
mod read;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

pub use headers::{is_mt_header, Headers};
pub use host::HostInfo;
pub use payload::Payload;
pub(crate) use read::read_host;

/// The content type of MassTransit's JSON envelope.
pub const ENVELOPE_CONTENT_TYPE: &str = "application/vnd.masstransit+json";
/// The content type of raw (envelope-less) JSON messages.
pub const RAW_JSON_CONTENT_TYPE: &str = "application/json";

/// A MassTransit message envelope: the message payload and its metadata (masstransit-wire §1.1).
///
/// Field order is MassTransit's and is kept when serializing.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// The message id (always set by MassTransit).
    pub message_id: Option<Uuid>,
    /// The request id, on requests, their responses and faults.
    pub request_id: Option<Uuid>,
    /// The correlation id, when the message has one.
    pub correlation_id: Option<Uuid>,
    /// The conversation id, kept through a chain of messages.
    pub conversation_id: Option<Uuid>,
    /// The correlation or request id of the message that caused this one.
    pub initiator_id: Option<Uuid>,
    /// The address of the endpoint (or bus) that sent the message.
    pub source_address: Option<String>,
    /// The address the message was sent or published to.
    pub destination_address: Option<String>,
    /// Where responses go (requests only).
    pub response_address: Option<String>,
    /// Where faults go, when the sender asked for that.
    pub fault_address: Option<String>,
    /// The message type URNs, the most specific first.
    pub message_type: Vec<String>,
    /// The payload, as the JSON text it arrived as (readable as a [`Value`] through `Deref`).
    pub message: Payload,
    /// When the message expires.
    #[serde(with = "crate::dotnet::datetime::option")]
    pub expiration_time: Option<DateTime<Utc>>,
    /// When the message was sent.
    #[serde(with = "crate::dotnet::datetime::option")]
    pub sent_time: Option<DateTime<Utc>>,
    /// Application and MassTransit headers.
    pub headers: Headers,
    /// The process that wrote the message (shared: the envelopes a process writes all point at
    /// [`HostInfo::shared`], written from its JSON text made once).
    #[serde(serialize_with = "host::serialize")]
    pub host: Option<Arc<HostInfo>>,
}

/// Why a body is not a usable MassTransit envelope. The `Display` text names the field and the
/// reason in one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The body is not JSON, even with comments and trailing commas allowed.
    #[error("body is not valid JSON: {0}")]
    Json(String),
    /// The body is larger than the endpoint reads.
    #[error("body is {size} bytes, more than the endpoint's limit of {limit} bytes")]
    TooLarge {
        /// The body's size.
        size: usize,
        /// The endpoint's limit.
        limit: usize,
    },
    /// The body is JSON but not an object.
    #[error("body is not a JSON object")]
    NotAnObject,
    /// The envelope has no `message` (or it is null).
    #[error("message: missing or null (a MassTransit envelope must carry a message)")]
    MissingMessage,
    /// A field has a value of the wrong shape.
    #[error("{field}: {reason}")]
    InvalidField {
        /// The envelope key (camelCase).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl EnvelopeError {
    fn field(field: &'static str, reason: impl Into<String>) -> Self {
        EnvelopeError::InvalidField {
            field,
            reason: reason.into(),
        }
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
        let strict = serde::Deserializer::deserialize_any(&mut de, read::EnvelopeVisitor)
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
        serde::Deserializer::deserialize_any(value, read::EnvelopeVisitor)
            .unwrap_or_else(|e| Err(EnvelopeError::Json(e.to_string())))
    }

    /// The envelope as JSON bytes in the v8 shape.
    pub fn to_vec(&self) -> Vec<u8> {
        // The payload plus room for the ids, addresses, types, headers and host: one allocation
        // for most envelopes instead of one per doubling.
        let mut out = Vec::with_capacity(self.message.json().len() + 1024);
        serde_json::to_writer(&mut out, self).expect("an envelope always serializes");
        out
    }

    /// Whether any of this envelope's message types is `urn` (case-insensitive).
    pub fn has_message_type(&self, urn: &str) -> bool {
        self.message_type
            .iter()
            .any(|t| t.eq_ignore_ascii_case(urn))
    }
}

/// Parses JSON strictly, and falls back to a lenient parser that skips `//` and `/* */` comments
/// and trailing commas, as System.Text.Json does with MassTransit's options.
pub fn parse_json(body: &[u8]) -> Result<Value, EnvelopeError> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    match serde_json::from_slice(body) {
        Ok(value) => Ok(value),
        Err(strict) if strict.is_syntax() || strict.is_eof() => {
            parse_lenient(body).ok_or_else(|| EnvelopeError::Json(strict.to_string()))
        }
        Err(other) => Err(EnvelopeError::Json(other.to_string())),
    }
}

fn parse_lenient(body: &[u8]) -> Option<Value> {
    let mut de = serde_json_lenient::Deserializer::from_slice(body);
    de.set_ignore_trailing_commas(true);
    de.set_allow_comments(true);
    let lenient: serde_json_lenient::Value = serde::Deserialize::deserialize(&mut de).ok()?;
    de.end().ok()?;
    // Both crates share the JSON data model; re-encode once to hand back a serde_json value.
    serde_json::from_slice(&serde_json_lenient::to_vec(&lenient).ok()?).ok()
}

/// Parses a GUID in any format .NET's `Guid.TryParse` accepts for envelope ids: `D`
/// (hyphenated), `N` (32 digits), `B` (`{...}`), `P` (`(...)`).
pub fn parse_dotnet_guid(text: &str) -> Option<Uuid> {
    let t = text.trim();
    let inner = t
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(t);
    Uuid::try_parse(inner).ok()
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
