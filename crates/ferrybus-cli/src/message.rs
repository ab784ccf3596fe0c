//! A message taken from an `_error` or `_skipped` queue, and what the tool shows of it: the
//! MassTransit envelope (when the body is one), the AMQP properties, and the `MT-Reason`,
//! `MT-Fault-*` and `MT-Host-*` headers MassTransit's move transport adds
//! (`src/Transports/MassTransit.RabbitMqTransport/RabbitMqTransport/RabbitMqMoveTransport.cs`,
//! `RabbitMqErrorTransport.cs`; header names in `src/MassTransit.Abstractions/MessageHeaders.cs`).

use chrono::{DateTime, NaiveDateTime, Utc};
use ferrybus_core::{Envelope, Headers};
use ferrybus_rabbitmq::convert::amqp_to_json_lossy;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use serde::Serialize;
use serde_json::Value;

/// One message of a queue snapshot.
#[derive(Debug)]
pub(crate) struct QueuedMessage {
    /// Its 1-based position in the queue when it was read.
    pub(crate) position: usize,
    /// The AMQP properties.
    pub(crate) properties: BasicProperties,
    /// The AMQP headers, as JSON values.
    pub(crate) headers: Headers,
    /// The body bytes.
    pub(crate) body: Vec<u8>,
    /// The envelope, when the body is one.
    pub(crate) envelope: Option<Envelope>,
    /// Whether the broker had delivered it before.
    pub(crate) redelivered: bool,
}

impl QueuedMessage {
    /// Reads a delivery taken at `position`.
    pub(crate) fn new(position: usize, delivery: &lapin::message::Delivery) -> Self {
        let headers = delivery
            .properties
            .headers()
            .as_ref()
            .map(headers_from_amqp)
            .unwrap_or_default();
        Self {
            position,
            properties: delivery.properties.clone(),
            headers,
            body: delivery.data.clone(),
            envelope: Envelope::from_slice(&delivery.data).ok(),
            redelivered: delivery.redelivered,
        }
    }

    /// The message id: the AMQP `message_id` property, else the envelope's.
    pub(crate) fn message_id(&self) -> Option<String> {
        self.properties
            .message_id()
            .as_ref()
            .map(|id| id.to_string())
            .or_else(|| {
                self.envelope
                    .as_ref()
                    .and_then(|e| e.message_id)
                    .map(|id| id.to_string())
            })
    }

    /// Whether this message has id `id` (GUIDs compared as GUIDs, anything else as text).
    pub(crate) fn has_id(&self, id: &str) -> bool {
        let Some(mine) = self.message_id() else {
            return false;
        };
        match (uuid::Uuid::parse_str(&mine), uuid::Uuid::parse_str(id)) {
            (Ok(a), Ok(b)) => a == b,
            _ => mine.eq_ignore_ascii_case(id),
        }
    }

    /// A header as text (strings as they are, numbers and booleans printed).
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        match self.headers.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    }

    /// The message type URNs of the envelope.
    pub(crate) fn message_types(&self) -> Vec<String> {
        self.envelope
            .as_ref()
            .map(|e| e.message_type.clone())
            .unwrap_or_default()
    }

    /// When it faulted (`MT-Fault-Timestamp`), else when it was sent.
    pub(crate) fn time(&self) -> Option<DateTime<Utc>> {
        self.faulted_at()
            .or_else(|| self.envelope.as_ref().and_then(|e| e.sent_time))
    }

    /// `MT-Fault-Timestamp`, as a time.
    pub(crate) fn faulted_at(&self) -> Option<DateTime<Utc>> {
        match self.headers.get("MT-Fault-Timestamp")? {
            Value::String(s) => parse_time(s),
            // An AMQP timestamp: seconds since the epoch.
            Value::Number(n) => n.as_i64().and_then(|s| DateTime::from_timestamp(s, 0)),
            _ => None,
        }
    }

    /// What `errors list` prints of this message.
    pub(crate) fn summary(&self) -> Summary {
        let types = self.message_types();
        Summary {
            position: self.position,
            message_id: self.message_id(),
            message_type: types
                .first()
                .cloned()
                .or_else(|| self.header("MT-Fault-MessageType")),
            message_types: types,
            exception_type: self.header("MT-Fault-ExceptionType"),
            exception_message: self.header("MT-Fault-Message"),
            faulted_at: self.faulted_at().map(|t| format_time(&t)),
            retry_count: self.headers.get_i64("MT-Fault-RetryCount"),
            redelivery_count: self.headers.get_i64("MT-Redelivery-Count"),
            input_address: self.header("MT-Fault-InputAddress"),
            consumer_type: self.header("MT-Fault-ConsumerType"),
            reason: self.header("MT-Reason"),
            host: self.header("MT-Host-MachineName").map(|machine| {
                match self.header("MT-Host-ProcessName") {
                    Some(process) => format!("{machine}/{process}"),
                    None => machine,
                }
            }),
            sent_time: self
                .envelope
                .as_ref()
                .and_then(|e| e.sent_time)
                .map(|t| format_time(&t)),
            correlation_id: self
                .properties
                .correlation_id()
                .as_ref()
                .map(|s| s.to_string()),
            content_type: self
                .properties
                .content_type()
                .as_ref()
                .map(|s| s.to_string()),
            body_bytes: self.body.len(),
            redelivered: self.redelivered,
        }
    }
}

/// One line of `errors list --json` (camelCase keys, in this order).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Summary {
    /// 1-based position in the queue.
    pub(crate) position: usize,
    /// The message id.
    pub(crate) message_id: Option<String>,
    /// The first (most specific) message type URN.
    pub(crate) message_type: Option<String>,
    /// Every message type URN of the envelope.
    pub(crate) message_types: Vec<String>,
    /// `MT-Fault-ExceptionType`.
    pub(crate) exception_type: Option<String>,
    /// `MT-Fault-Message`.
    pub(crate) exception_message: Option<String>,
    /// `MT-Fault-Timestamp` (RFC 3339, UTC).
    pub(crate) faulted_at: Option<String>,
    /// `MT-Fault-RetryCount`.
    pub(crate) retry_count: Option<i64>,
    /// `MT-Redelivery-Count`.
    pub(crate) redelivery_count: Option<i64>,
    /// `MT-Fault-InputAddress`.
    pub(crate) input_address: Option<String>,
    /// `MT-Fault-ConsumerType`.
    pub(crate) consumer_type: Option<String>,
    /// `MT-Reason` (`fault`, `dead-letter`).
    pub(crate) reason: Option<String>,
    /// `MT-Host-MachineName/MT-Host-ProcessName`: where it faulted.
    pub(crate) host: Option<String>,
    /// The envelope's `sentTime`.
    pub(crate) sent_time: Option<String>,
    /// The `correlation_id` property.
    pub(crate) correlation_id: Option<String>,
    /// The `content_type` property.
    pub(crate) content_type: Option<String>,
    /// The body size in bytes.
    pub(crate) body_bytes: usize,
    /// Whether the broker had delivered it before (every peek sets it).
    pub(crate) redelivered: bool,
}

/// Which messages a command applies to.
#[derive(Clone, Debug, Default)]
pub(crate) struct Filter {
    /// Text a message type URN must contain (case-insensitive).
    pub(crate) message_type: Option<String>,
    /// Text the exception type or message must contain (case-insensitive).
    pub(crate) exception: Option<String>,
    /// Faulted (else sent) at or after.
    pub(crate) since: Option<DateTime<Utc>>,
    /// Faulted (else sent) before.
    pub(crate) until: Option<DateTime<Utc>>,
    /// Message ids; empty means any.
    pub(crate) message_ids: Vec<String>,
}

impl Filter {
    /// Whether no condition is set.
    pub(crate) fn is_empty(&self) -> bool {
        self.message_type.is_none()
            && self.exception.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.message_ids.is_empty()
    }

    /// Whether `message` passes every condition.
    pub(crate) fn matches(&self, message: &QueuedMessage) -> bool {
        if !self.message_ids.is_empty() && !self.message_ids.iter().any(|id| message.has_id(id)) {
            return false;
        }
        if let Some(text) = &self.message_type {
            let text = text.to_lowercase();
            let mut types = message.message_types();
            types.extend(message.header("MT-Fault-MessageType"));
            if !types.iter().any(|t| t.to_lowercase().contains(&text)) {
                return false;
            }
        }
        if let Some(text) = &self.exception {
            let text = text.to_lowercase();
            let found = ["MT-Fault-ExceptionType", "MT-Fault-Message"]
                .iter()
                .filter_map(|h| message.header(h))
                .any(|v| v.to_lowercase().contains(&text));
            if !found {
                return false;
            }
        }
        if self.since.is_some() || self.until.is_some() {
            let Some(time) = message.time() else {
                return false;
            };
            if self.since.is_some_and(|since| time < since) {
                return false;
            }
            if self.until.is_some_and(|until| time >= until) {
                return false;
            }
        }
        true
    }
}

/// A time given on the command line: RFC 3339 (`2025-05-24T18:00:00Z`), a date-time without
/// zone (taken as UTC), a date, or a duration ago (`90m`, `2h`, `3days`).
pub(crate) fn parse_time_arg(text: &str) -> Result<DateTime<Utc>, String> {
    if let Some(time) = parse_time(text) {
        return Ok(time);
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(date.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    match humantime::parse_duration(text) {
        Ok(ago) => chrono::Duration::from_std(ago)
            .ok()
            .and_then(|ago| Utc::now().checked_sub_signed(ago))
            .ok_or_else(|| format!("{text:?} is too far back")),
        Err(_) => Err(format!(
            "{text:?} is neither a time (2025-05-24T18:00:00Z, 2025-05-24) nor a duration ago (90m, 2h, 3days)"
        )),
    }
}

/// Parses the times MassTransit writes: RFC 3339 / ISO 8601 with or without zone (UTC then).
pub(crate) fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .map(|t| t.and_utc())
}

/// RFC 3339 in UTC, milliseconds at most.
pub(crate) fn format_time(time: &DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The names of the headers MassTransit adds when it moves a message to `_error` or
/// `_skipped`: `MT-Reason`, every `MT-Fault-*` (exception, input address, consumer, message
/// type, timestamp, stack trace, retry count) and every `MT-Host-*`
/// (`RabbitMqMoveTransport.Move` calls `SetHostHeaders`, `RabbitMqErrorTransport` copies the
/// exception headers, `RabbitMqDeadLetterTransport` sets `MT-Reason`). A replay removes them:
/// they describe the failure, not the message, and a message in flight never has them.
/// MassTransit's sends from a consumer drop every `MT-` header (`TransferConsumeContextHeaders`,
/// `src/MassTransit.Abstractions/Contexts/SendContextExtensions.cs`); its redelivery copies the
/// consumed message's headers (`src/MassTransit/Serialization/ForwardMessagePipe.cs`), so stale
/// ones would travel on, and a new fault overwrites the `MT-Fault-*` headers it sets but would
/// leave, say, an old `MT-Fault-RetryCount` behind.
pub(crate) fn is_fault_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "mt-reason" || lower.starts_with("mt-fault-") || lower.starts_with("mt-host-")
}

/// AMQP headers as JSON values for people: every header, converted by the transport's rules
/// ([`amqp_to_json_lossy`]: byte arrays as text, voids `null`).
pub(crate) fn headers_from_amqp(table: &FieldTable) -> Headers {
    table
        .inner()
        .iter()
        .map(|(k, v)| (k.to_string(), amqp_to_json_lossy(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{AMQPValue, LongString};

    fn message(headers: &[(&str, AMQPValue)], body: &str) -> QueuedMessage {
        let mut table = FieldTable::default();
        for (k, v) in headers {
            table.insert((*k).into(), v.clone());
        }
        let properties = BasicProperties::default()
            .with_message_id("181c0000-6393-3630-36a4-08daf4e7c6da".into())
            .with_headers(table.clone());
        QueuedMessage {
            position: 1,
            headers: headers_from_amqp(&table),
            properties,
            body: body.as_bytes().to_vec(),
            envelope: Envelope::from_slice(body.as_bytes()).ok(),
            redelivered: false,
        }
    }

    fn s(text: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(text))
    }

    #[test]
    fn summarizes_a_faulted_message() {
        let m = message(
            &[
                ("MT-Reason", s("fault")),
                ("MT-Fault-ExceptionType", s("DbErr")),
                (
                    "MT-Fault-Message",
                    s("relation \"invoices\" does not exist"),
                ),
                ("MT-Fault-Timestamp", s("2025-05-24T18:39:56.3305069Z")),
                ("MT-Fault-RetryCount", AMQPValue::LongLongInt(2)),
                (
                    "MT-Fault-InputAddress",
                    s("rabbitmq://localhost/billing-invoice"),
                ),
                ("MT-Host-MachineName", s("box")),
                ("MT-Host-ProcessName", s("billing")),
            ],
            r#"{"messageId": "181c0000-6393-3630-36a4-08daf4e7c6da", "messageType": ["urn:message:Bookstore.Contracts:OrderPlaced"], "message": {}}"#,
        );
        let summary = serde_json::to_value(m.summary()).unwrap();
        assert_eq!(summary["messageId"], "181c0000-6393-3630-36a4-08daf4e7c6da");
        assert_eq!(
            summary["messageType"],
            "urn:message:Bookstore.Contracts:OrderPlaced"
        );
        assert_eq!(summary["exceptionType"], "DbErr");
        assert_eq!(summary["faultedAt"], "2025-05-24T18:39:56.330Z");
        assert_eq!(summary["retryCount"], 2);
        assert_eq!(
            summary["inputAddress"],
            "rabbitmq://localhost/billing-invoice"
        );
        assert_eq!(summary["host"], "box/billing");
        assert!(m.has_id("181C0000-6393-3630-36A4-08DAF4E7C6DA"));
        assert!(!m.has_id("00000000-0000-0000-0000-000000000000"));
    }

    #[test]
    fn filters() {
        let m = message(
            &[
                ("MT-Fault-ExceptionType", s("InvalidOrder")),
                (
                    "MT-Fault-Message",
                    s("currency must be three capital letters"),
                ),
                ("MT-Fault-Timestamp", s("2025-05-24T18:00:00Z")),
            ],
            r#"{"messageType": ["urn:message:Bookstore.Contracts:OrderPlaced"], "message": {}}"#,
        );
        let at = |t: &str| parse_time(t).unwrap();
        let pass = |f: Filter| f.matches(&m);
        assert!(pass(Filter::default()));
        assert!(pass(Filter {
            message_type: Some("orderplaced".into()),
            ..Filter::default()
        }));
        assert!(!pass(Filter {
            message_type: Some("Refund".into()),
            ..Filter::default()
        }));
        assert!(pass(Filter {
            exception: Some("CAPITAL".into()),
            ..Filter::default()
        }));
        assert!(pass(Filter {
            exception: Some("invalidorder".into()),
            ..Filter::default()
        }));
        assert!(!pass(Filter {
            exception: Some("timeout".into()),
            ..Filter::default()
        }));
        assert!(pass(Filter {
            since: Some(at("2025-05-24T17:00:00Z")),
            until: Some(at("2025-05-24T18:00:01Z")),
            ..Filter::default()
        }));
        assert!(!pass(Filter {
            since: Some(at("2025-05-24T18:00:01Z")),
            ..Filter::default()
        }));
        assert!(!pass(Filter {
            until: Some(at("2025-05-24T18:00:00Z")),
            ..Filter::default()
        }));
        assert!(pass(Filter {
            message_ids: vec!["181c0000-6393-3630-36a4-08daf4e7c6da".into()],
            ..Filter::default()
        }));
        assert!(!pass(Filter {
            message_ids: vec!["x".into()],
            ..Filter::default()
        }));
    }

    #[test]
    fn time_arguments() {
        assert_eq!(
            parse_time_arg("2025-05-24T18:00:00+02:00").unwrap(),
            parse_time("2025-05-24T16:00:00Z").unwrap()
        );
        assert_eq!(
            parse_time_arg("2025-05-24").unwrap(),
            parse_time("2025-05-24T00:00:00Z").unwrap()
        );
        let ago = parse_time_arg("2h").unwrap();
        assert!(ago < Utc::now() - chrono::Duration::minutes(119));
        assert!(parse_time_arg("yesterday")
            .unwrap_err()
            .contains("duration ago"));
    }

    #[test]
    fn fault_headers_are_recognized() {
        for name in [
            "MT-Reason",
            "MT-Fault-Message",
            "mt-fault-retrycount",
            "MT-Host-MachineName",
        ] {
            assert!(is_fault_header(name), "{name}");
        }
        for name in ["MT-Redelivery-Count", "Tenant", "MT-Activity-Id"] {
            assert!(!is_fault_header(name), "{name}");
        }
    }
}
