//! The normalized view of an envelope that `ferrybus envelope inspect` prints.

use chrono::{DateTime, SecondsFormat, Utc};
use ferrybus_core::envelope::EnvelopeError;
use ferrybus_core::envelope::HostInfo;
use ferrybus_core::{Envelope, Headers};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

/// An envelope normalized for people: snake_case keys in a fixed order, lowercase hyphenated ids,
/// UTC RFC 3339 times, headers always an object, absent values `null`.
///
/// A struct rather than a `serde_json::Value` so the key order survives serialization (the
/// workspace's `serde_json` sorts object keys).
#[derive(Debug, Serialize)]
pub(crate) struct Inspection {
    /// The message id.
    message_id: Option<Uuid>,
    /// The request id.
    request_id: Option<Uuid>,
    /// The correlation id.
    correlation_id: Option<Uuid>,
    /// The conversation id.
    conversation_id: Option<Uuid>,
    /// The initiator id.
    initiator_id: Option<Uuid>,
    /// The sender's address.
    source_address: Option<String>,
    /// Where the message was sent or published.
    destination_address: Option<String>,
    /// Where responses go.
    response_address: Option<String>,
    /// Where faults go.
    fault_address: Option<String>,
    /// The message type URNs, as in the body.
    message_type: Vec<String>,
    /// When the message was sent (RFC 3339, UTC).
    sent_time: Option<String>,
    /// When the message expires (RFC 3339, UTC).
    expiration_time: Option<String>,
    /// The headers; `{}` when there are none.
    headers: Headers,
    /// The process that wrote the message.
    host: Option<std::sync::Arc<HostInfo>>,
    /// The payload.
    message: Value,
}

/// Parses a MassTransit message body (any shape [`Envelope::from_slice`] reads) and normalizes it.
pub(crate) fn inspect(body: &[u8]) -> Result<Inspection, EnvelopeError> {
    Envelope::from_slice(body).map(Inspection::from)
}

impl From<Envelope> for Inspection {
    fn from(envelope: Envelope) -> Self {
        Inspection {
            message_id: envelope.message_id,
            request_id: envelope.request_id,
            correlation_id: envelope.correlation_id,
            conversation_id: envelope.conversation_id,
            initiator_id: envelope.initiator_id,
            source_address: envelope.source_address,
            destination_address: envelope.destination_address,
            response_address: envelope.response_address,
            fault_address: envelope.fault_address,
            message_type: envelope.message_type,
            sent_time: envelope.sent_time.as_ref().map(format_time),
            expiration_time: envelope.expiration_time.as_ref().map(format_time),
            headers: envelope.headers,
            host: envelope.host,
            message: envelope.message.into(),
        }
    }
}

/// RFC 3339 in UTC with `Z`, keeping every non-zero fractional digit and no trailing zeros
/// (`2025-05-24T18:39:56.3305069Z`, `2021-05-14T00:00:00Z`), as .NET writes envelope times.
fn format_time(time: &DateTime<Utc>) -> String {
    let full = time.to_rfc3339_opts(SecondsFormat::Nanos, true);
    let trimmed = full
        .trim_end_matches('Z')
        .trim_end_matches('0')
        .trim_end_matches('.');
    format!("{trimmed}Z")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inspect_json(body: &str) -> Value {
        serde_json::to_value(inspect(body.as_bytes()).unwrap()).unwrap()
    }

    fn top_level_keys(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|line| line.strip_prefix("  \""))
            .filter_map(|rest| rest.split_once("\":").map(|(key, _)| key))
            .collect()
    }

    #[test]
    fn writes_every_key_in_order() {
        let inspection = inspect(br#"{"message": {"b": 1, "a": 2}}"#).unwrap();
        let text = serde_json::to_string_pretty(&inspection).unwrap();
        assert_eq!(
            top_level_keys(&text),
            [
                "message_id",
                "request_id",
                "correlation_id",
                "conversation_id",
                "initiator_id",
                "source_address",
                "destination_address",
                "response_address",
                "fault_address",
                "message_type",
                "sent_time",
                "expiration_time",
                "headers",
                "host",
                "message",
            ]
        );
    }

    #[test]
    fn absent_values_are_null_and_headers_an_object() {
        let out = inspect_json(r#"{"message": {}, "headers": []}"#);
        assert_eq!(
            out,
            json!({
                "message_id": null, "request_id": null, "correlation_id": null,
                "conversation_id": null, "initiator_id": null, "source_address": null,
                "destination_address": null, "response_address": null, "fault_address": null,
                "message_type": [], "sent_time": null, "expiration_time": null,
                "headers": {}, "host": null, "message": {}
            })
        );
    }

    #[test]
    fn normalizes_ids_times_and_pascal_case() {
        let out = inspect_json(
            r#"{
                "MessageId": "{181C0000-6393-3630-36A4-08DAF4E7C6DA}",
                "CorrelationId": "00000000000000000000000000000000",
                "MessageType": ["urn:message:A:B", "urn:message:A:C"],
                "SentTime": "2021-12-14T18:08:12.9342242+03:00",
                "ExpirationTime": "2021-05-14T00:00:00",
                "Headers": [{"Key": "Tenant", "Value": "acme"}],
                "Host": {"MachineName": "box", "ProcessId": 7},
                "Message": {"value": 1},
            }"#,
        );
        assert_eq!(out["message_id"], "181c0000-6393-3630-36a4-08daf4e7c6da");
        assert_eq!(
            out["correlation_id"],
            "00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(
            out["message_type"],
            json!(["urn:message:A:B", "urn:message:A:C"])
        );
        assert_eq!(out["sent_time"], "2021-12-14T15:08:12.9342242Z");
        assert_eq!(out["expiration_time"], "2021-05-14T00:00:00Z");
        assert_eq!(out["headers"], json!({"Tenant": "acme"}));
        assert_eq!(out["host"]["machineName"], "box");
        assert_eq!(out["host"]["processId"], 7);
        assert_eq!(out["host"]["assembly"], Value::Null);
        assert_eq!(out["message"], json!({"value": 1}));
    }

    #[test]
    fn formats_times_with_significant_digits_only() {
        let t = |s: &str| format_time(&s.parse::<DateTime<Utc>>().unwrap());
        assert_eq!(
            t("2025-05-24T18:39:56.3305069Z"),
            "2025-05-24T18:39:56.3305069Z"
        );
        assert_eq!(t("2021-12-14T18:08:12.927Z"), "2021-12-14T18:08:12.927Z");
        assert_eq!(t("2021-12-14T18:08:12.100Z"), "2021-12-14T18:08:12.1Z");
        assert_eq!(t("2021-12-14T18:08:10Z"), "2021-12-14T18:08:10Z");
        assert_eq!(
            t("2021-12-14T18:08:10.000000001Z"),
            "2021-12-14T18:08:10.000000001Z"
        );
    }

    #[test]
    fn passes_envelope_errors_through() {
        let err = inspect(br#"{"messageId": "nope", "message": {}}"#).unwrap_err();
        assert_eq!(err.to_string(), "messageId: \"nope\" is not a GUID");
        assert_eq!(
            inspect(br#"{"messageId": null}"#).unwrap_err(),
            EnvelopeError::MissingMessage
        );
        assert!(matches!(
            inspect(b"{nope").unwrap_err(),
            EnvelopeError::Json(_)
        ));
    }
}
