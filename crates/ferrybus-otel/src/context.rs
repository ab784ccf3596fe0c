//! Trace context on the wire, as MassTransit carries it: the W3C `traceparent` text in the
//! `MT-Activity-Id` header.
//!
//! MassTransit 8.5 reads the parent of its receive activity from the transport header
//! `MT-Activity-Id` with `ActivityContext.TryParse` (W3C format, `00-<trace>-<span>-<flags>`),
//! honours `MT-Activity-Propagation` (`Link`: a new trace linked to the sender's, `New`: a new
//! trace, anything else: a child), and writes its send activity's id into `MT-Activity-Id` of
//! every message it sends, the outbox's rows included (`src/MassTransit/Logging/Diagnostics/
//! LogContextActivityExtensions.cs`, `GetParentActivityContext`, `StartReceiveActivity`,
//! `PopulateSendActivity`; names in `DiagnosticHeaders.cs`). ferrybus reads the same headers,
//! and also a plain W3C `traceparent` header when `MT-Activity-Id` is absent (what other
//! OpenTelemetry clients write).

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

use ferrybus_core::Headers;

/// The header carrying the W3C trace context (MassTransit's `DiagnosticHeaders.ActivityId`).
pub const ACTIVITY_ID_HEADER: &str = "MT-Activity-Id";
/// How a receiver relates its trace to the sender's: `Link`, `New`, or (absent) child.
pub const ACTIVITY_PROPAGATION_HEADER: &str = "MT-Activity-Propagation";
/// The W3C header read when `MT-Activity-Id` is absent.
pub const TRACEPARENT_HEADER: &str = "traceparent";
/// The envelope header carrying the sender's baggage (MassTransit's
/// `DiagnosticHeaders.ActivityCorrelationContext`): a list of `{"Key", "Value"}` pairs, read in
/// `DiagnosticActivityExtensions.AddConsumeContextTags` and written in `PopulateSendActivity`
/// without the conversation and correlation ids. MassTransit's RabbitMQ transport drops list
/// headers from the AMQP headers, so it travels in the envelope only.
pub const ACTIVITY_CORRELATION_CONTEXT_HEADER: &str = "MT-Activity-Correlation-Context";

/// The baggage MassTransit leaves out of `MT-Activity-Correlation-Context` (it sets both from
/// the message itself).
const OWN_BAGGAGE: [&str; 2] = [
    "messaging.masstransit.correlation_id",
    "messaging.message.conversation_id",
];

/// The baggage pairs of an `MT-Activity-Correlation-Context` value: System.Text.Json's
/// `[{"Key": …, "Value": …}]`, or a plain object; non-text and blank values are skipped, as
/// MassTransit skips them.
///
/// ```
/// use ferrybus_otel::baggage_pairs;
/// let value = serde_json::json!([{"Key": "tenant", "Value": "acme"}, {"Key": "n", "Value": 1}]);
/// assert_eq!(baggage_pairs(&value), [("tenant".to_owned(), "acme".to_owned())]);
/// let object = serde_json::json!({"tenant": "acme", "blank": " "});
/// assert_eq!(baggage_pairs(&object), [("tenant".to_owned(), "acme".to_owned())]);
/// ```
pub fn baggage_pairs(value: &serde_json::Value) -> Vec<(String, String)> {
    use serde_json::Value;
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        _ => None,
    };
    let field = |pair: &serde_json::Map<String, Value>, name: &str| {
        pair.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
            .cloned()
    };
    match value {
        Value::Array(pairs) => pairs
            .iter()
            .filter_map(|pair| {
                let pair = pair.as_object()?;
                let key = text(field(pair, "Key").as_ref())?;
                Some((key, text(field(pair, "Value").as_ref())?))
            })
            .collect(),
        Value::Object(map) => map
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), text(Some(v))?)))
            .collect(),
        _ => Vec::new(),
    }
}

/// `MT-Activity-Correlation-Context` for `cx`'s baggage, as MassTransit writes it; `None` when
/// there is none to carry.
pub(crate) fn baggage_header(cx: &opentelemetry::Context) -> Option<serde_json::Value> {
    use opentelemetry::baggage::BaggageExt as _;
    let pairs: Vec<serde_json::Value> = cx
        .baggage()
        .iter()
        .filter(|(key, _)| !OWN_BAGGAGE.contains(&key.as_str()))
        .filter(|(_, (value, _))| !value.as_str().trim().is_empty())
        .map(|(key, (value, _))| serde_json::json!({"Key": key.as_str(), "Value": value.as_str()}))
        .collect();
    (!pairs.is_empty()).then_some(serde_json::Value::Array(pairs))
}

/// How a delivery's spans relate to the sender's trace (`MT-Activity-Propagation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// The receive span is a child of the sender's span (the default).
    Child,
    /// A new trace with a link to the sender's span (`Link`).
    Link,
    /// A new trace, no relation (`New`).
    New,
}

/// Parses a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`) into a remote span context;
/// `None` for anything else (an all-zero id, another version's extra fields are accepted as
/// W3C says, a malformed value is ignored, never an error).
///
/// ```
/// use ferrybus_otel::parse_traceparent;
/// let cx = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
/// assert_eq!(cx.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
/// assert!(cx.is_sampled() && cx.is_remote());
/// assert!(parse_traceparent("|abc.1.").is_none());
/// ```
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    if trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let cx = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    );
    cx.is_valid().then_some(cx)
}

/// Writes `cx` as a W3C `traceparent`, the form MassTransit writes in `MT-Activity-Id`.
///
/// ```
/// use ferrybus_otel::{format_traceparent, parse_traceparent};
/// let text = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
/// assert_eq!(format_traceparent(&parse_traceparent(text).unwrap()), text);
/// ```
pub fn format_traceparent(cx: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags().to_u8()
    )
}

/// The sender's span context in `headers`: `MT-Activity-Id`, else `traceparent`.
///
/// ```
/// use ferrybus_core::Headers;
/// use ferrybus_otel::remote_parent;
/// let mut headers = Headers::new();
/// headers.insert("MT-Activity-Id", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
/// assert!(remote_parent(&headers).is_some());
/// assert!(remote_parent(&Headers::new()).is_none());
/// ```
pub fn remote_parent(headers: &Headers) -> Option<SpanContext> {
    headers
        .get_str(ACTIVITY_ID_HEADER)
        .and_then(parse_traceparent)
        .or_else(|| {
            headers
                .get_str(TRACEPARENT_HEADER)
                .and_then(parse_traceparent)
        })
}

/// `MT-Activity-Propagation` in `headers`.
///
/// ```
/// use ferrybus_core::Headers;
/// use ferrybus_otel::{propagation, Propagation};
/// let mut headers = Headers::new();
/// assert_eq!(propagation(&headers), Propagation::Child);
/// headers.insert("MT-Activity-Propagation", "Link");
/// assert_eq!(propagation(&headers), Propagation::Link);
/// ```
pub fn propagation(headers: &Headers) -> Propagation {
    match headers.get_str(ACTIVITY_PROPAGATION_HEADER) {
        Some("Link") => Propagation::Link,
        Some("New") => Propagation::New,
        _ => Propagation::Child,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_w3c() {
        for bad in [
            "",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
            "|0af7651916cd43dd.1.",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
        let future = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-more";
        let cx = parse_traceparent(future).unwrap();
        assert!(!cx.is_sampled());
    }
}
