//! Conversions between core types and AMQP: headers (masstransit-wire §3.3), basic properties,
//! and inbound deliveries. The public ones are for tools that read the broker directly (the
//! `ferrybus` operator tool): they see headers and properties as the transport does.

use bytes::Bytes;
use ferrybus_core::integration::OutgoingMessage;
use ferrybus_core::{Delivery, Headers};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;
use serde_json::{Map, Number, Value};

/// MassTransit's conversion of one header value to AMQP: strings → longstr, `true` → `"True"`,
/// `false` and `null` dropped, integers → long, other numbers → double, lists and objects
/// dropped.
pub(crate) fn header_to_amqp(value: &Value) -> Option<AMQPValue> {
    match value {
        Value::String(s) => Some(AMQPValue::LongString(LongString::from(s.as_str()))),
        Value::Bool(true) => Some(AMQPValue::LongString(LongString::from("True"))),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or_default()),
        }),
        Value::Bool(false) | Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// Sets every convertible header of `headers` on `table` (a null value removes the key).
pub(crate) fn merge_headers(table: &mut FieldTable, headers: &Headers) {
    for (name, value) in headers.iter() {
        let Ok(key) = ShortString::try_new(name) else {
            tracing::warn!(target: "ferrybus::rabbitmq", header = name, "header name too long; dropped");
            continue;
        };
        match header_to_amqp(value) {
            Some(v) => {
                table.insert(key, v);
            }
            None if value.is_null() => remove_key(table, name),
            None => {}
        }
    }
}

/// A time header as an AMQP timestamp (seconds since the Unix epoch), as MassTransit's
/// `AmqpTimestampExtensions.SetAmqpTimestamp` writes it; a time before the epoch stays text.
fn set_timestamp(table: &mut FieldTable, name: &str, text: Option<&str>) {
    let Some(time) = text.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) else {
        return;
    };
    let Ok(seconds) = u64::try_from(time.timestamp()) else {
        return;
    };
    if let Ok(key) = ShortString::try_new(name) {
        table.insert(key, AMQPValue::Timestamp(seconds));
    }
}

fn remove_key(table: &mut FieldTable, name: &str) {
    if table.contains_key(name) {
        let kept = table
            .inner()
            .iter()
            .filter(|(k, _)| k.as_str() != name)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<std::collections::BTreeMap<_, _>>();
        *table = FieldTable::from(kept);
    }
}

/// AMQP headers as core [`Headers`], as a consumer sees them: strings stay strings, integers
/// and timestamps become numbers, booleans stay booleans, decimals become strings, nested tables
/// and arrays become JSON objects and arrays; byte arrays, voids and non-finite floats are
/// skipped (see [`amqp_to_json`]).
///
/// ```
/// use lapin::types::{AMQPValue, FieldTable};
/// use ferrybus_rabbitmq::convert::headers_from_amqp;
/// let mut table = FieldTable::default();
/// table.insert("MT-Fault-RetryCount".into(), AMQPValue::LongLongInt(2));
/// table.insert("Tenant".into(), AMQPValue::LongString("acme".into()));
/// table.insert("Raw".into(), AMQPValue::ByteArray(vec![0xff].into()));
/// let headers = headers_from_amqp(&table);
/// assert_eq!(headers.get_i64("mt-fault-retrycount"), Some(2));
/// assert_eq!(headers.get_str("Tenant"), Some("acme"));
/// assert!(!headers.contains("Raw"));
/// ```
pub fn headers_from_amqp(table: &FieldTable) -> Headers {
    table
        .inner()
        .iter()
        .filter_map(|(k, v)| amqp_to_json(v).map(|v| (k.to_string(), v)))
        .collect()
}

/// One AMQP value as JSON, as a consumer sees it ([`headers_from_amqp`]): `None` for the values
/// JSON cannot hold (byte arrays, voids, NaN and infinite floats), which are also left out of
/// nested arrays and tables. Long strings are read as UTF-8, invalid bytes replaced.
///
/// ```
/// use lapin::types::{AMQPValue, DecimalValue};
/// use ferrybus_rabbitmq::convert::amqp_to_json;
/// use serde_json::json;
/// assert_eq!(amqp_to_json(&AMQPValue::Timestamp(1_700_000_000)), Some(json!(1_700_000_000)));
/// let price = AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 6699 });
/// assert_eq!(amqp_to_json(&price), Some(json!("66.99")));
/// assert_eq!(amqp_to_json(&AMQPValue::Void), None);
/// ```
pub fn amqp_to_json(value: &AMQPValue) -> Option<Value> {
    to_json(value, Unrepresentable::Skip)
}

/// One AMQP value as JSON for people (the operator tool's `show`): like [`amqp_to_json`], except
/// that nothing is left out: byte arrays become text (UTF-8, invalid bytes replaced), voids and
/// non-finite floats `null`.
///
/// ```
/// use lapin::types::AMQPValue;
/// use ferrybus_rabbitmq::convert::amqp_to_json_lossy;
/// use serde_json::{json, Value};
/// assert_eq!(amqp_to_json_lossy(&AMQPValue::ByteArray(b"raw".to_vec().into())), json!("raw"));
/// assert_eq!(amqp_to_json_lossy(&AMQPValue::Void), Value::Null);
/// assert_eq!(amqp_to_json_lossy(&AMQPValue::LongInt(-4)), json!(-4));
/// ```
pub fn amqp_to_json_lossy(value: &AMQPValue) -> Value {
    to_json(value, Unrepresentable::Show).unwrap_or_default()
}

/// What [`to_json`] does with a value JSON cannot hold.
#[derive(Clone, Copy)]
enum Unrepresentable {
    /// Leave it out.
    Skip,
    /// Byte arrays as lossy text, the rest `null`.
    Show,
}

fn to_json(value: &AMQPValue, unrepresentable: Unrepresentable) -> Option<Value> {
    let int = |i: i64| Some(Value::Number(i.into()));
    let shown = |value: Value| match unrepresentable {
        Unrepresentable::Skip => None,
        Unrepresentable::Show => Some(value),
    };
    let float =
        |f: f64| Number::from_f64(f).map_or_else(|| shown(Value::Null), |n| Some(Value::Number(n)));
    match value {
        AMQPValue::Boolean(b) => Some(Value::Bool(*b)),
        AMQPValue::ShortShortInt(i) => int((*i).into()),
        AMQPValue::ShortShortUInt(i) => int((*i).into()),
        AMQPValue::ShortInt(i) => int((*i).into()),
        AMQPValue::ShortUInt(i) => int((*i).into()),
        AMQPValue::LongInt(i) => int((*i).into()),
        AMQPValue::LongUInt(i) => int((*i).into()),
        AMQPValue::LongLongInt(i) => int(*i),
        AMQPValue::Timestamp(t) => Some(Value::Number((*t).into())),
        AMQPValue::Float(f) => float(f64::from(*f)),
        AMQPValue::Double(f) => float(*f),
        AMQPValue::DecimalValue(d) => Some(Value::String(decimal_text(d.value, d.scale))),
        AMQPValue::ShortString(s) => Some(Value::String(s.to_string())),
        AMQPValue::LongString(s) => Some(Value::String(s.to_string())),
        AMQPValue::FieldArray(a) => Some(Value::Array(
            a.as_slice()
                .iter()
                .filter_map(|v| to_json(v, unrepresentable))
                .collect(),
        )),
        AMQPValue::FieldTable(t) => Some(Value::Object(
            t.inner()
                .iter()
                .filter_map(|(k, v)| to_json(v, unrepresentable).map(|v| (k.to_string(), v)))
                .collect::<Map<String, Value>>(),
        )),
        AMQPValue::ByteArray(b) => shown(Value::String(
            String::from_utf8_lossy(b.as_slice()).into_owned(),
        )),
        AMQPValue::Void => shown(Value::Null),
    }
}

fn decimal_text(value: u32, scale: u8) -> String {
    let digits = value.to_string();
    let scale = usize::from(scale);
    if scale == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{int}.{frac}")
}

/// The AMQP properties MassTransit sets on a message it sends (masstransit-wire §3.3):
/// `content_type`, `message_id`, `correlation_id` (when set), `delivery_mode` 2, `expiration`
/// in ms (when the message has a TTL) and the headers.
pub(crate) fn outgoing_properties(message: &OutgoingMessage) -> BasicProperties {
    let mut headers = FieldTable::default();
    merge_headers(&mut headers, &message.headers);
    for name in &message.timestamp_headers {
        set_timestamp(&mut headers, name, message.headers.get_str(name));
    }
    let mut properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_headers(headers);
    if let Ok(content_type) = ShortString::try_new(message.content_type.as_str()) {
        properties = properties.with_content_type(content_type);
    }
    properties = properties.with_message_id(message.message_id.to_string().into());
    if let Some(id) = message.correlation_id {
        properties = properties.with_correlation_id(id.to_string().into());
    }
    if let Some(ttl) = message.time_to_live() {
        properties = properties.with_expiration(ttl.as_millis().to_string().into());
    }
    properties
}

/// The properties for publishing a copy of a received message again (a move to `_error` or
/// `_skipped`, a redelivery, an operator's replay): every property of `original` with `headers`
/// instead of its headers, `expiration` only when `keep_expiration`, and no `user_id` (the
/// broker refuses a `user_id` other than the publishing connection's user).
///
/// The broker's `x-delivery-count` (how often a quorum queue delivered the original) is left out
/// of `headers`: the copy is a new message, whose deliveries the queue it lands in counts. A copy
/// carrying the old count would count towards a delivery limit wherever the broker leaves the
/// header as it is (a classic queue, a quorum queue that adds it only from the first
/// redelivery), and a replayed message could be faulted as delivered too often.
///
/// ```
/// use lapin::types::{AMQPValue, FieldTable};
/// use lapin::BasicProperties;
/// let original = BasicProperties::default()
///     .with_message_id("m-1".into())
///     .with_expiration("5000".into())
///     .with_user_id("someone".into());
/// let mut headers = FieldTable::default();
/// headers.insert("x-delivery-count".into(), AMQPValue::LongLongInt(3));
/// let copy = ferrybus_rabbitmq::republish_properties(&original, headers, false);
/// assert_eq!(copy.message_id().as_ref().map(|m| m.as_str()), Some("m-1"));
/// assert!(copy.expiration().is_none() && copy.user_id().is_none());
/// assert!(!copy.headers().as_ref().unwrap().contains_key("x-delivery-count"));
/// ```
pub fn republish_properties(
    original: &BasicProperties,
    mut headers: FieldTable,
    keep_expiration: bool,
) -> BasicProperties {
    remove_key(&mut headers, DELIVERY_COUNT);
    let p = original;
    let mut out = BasicProperties::default().with_headers(headers);
    let copy = |value: &Option<ShortString>| value.clone();
    if let Some(v) = copy(p.content_type()) {
        out = out.with_content_type(v);
    }
    if let Some(v) = copy(p.content_encoding()) {
        out = out.with_content_encoding(v);
    }
    if let Some(v) = *p.delivery_mode() {
        out = out.with_delivery_mode(v);
    }
    if let Some(v) = *p.priority() {
        out = out.with_priority(v);
    }
    if let Some(v) = copy(p.correlation_id()) {
        out = out.with_correlation_id(v);
    }
    if let Some(v) = copy(p.reply_to()) {
        out = out.with_reply_to(v);
    }
    if let Some(v) = copy(p.expiration()).filter(|_| keep_expiration) {
        out = out.with_expiration(v);
    }
    if let Some(v) = copy(p.message_id()) {
        out = out.with_message_id(v);
    }
    if let Some(v) = *p.timestamp() {
        out = out.with_timestamp(v);
    }
    if let Some(v) = copy(p.kind()) {
        out = out.with_type(v);
    }
    if let Some(v) = copy(p.app_id()) {
        out = out.with_app_id(v);
    }
    if let Some(v) = copy(p.cluster_id()) {
        out = out.with_cluster_id(v);
    }
    out
}

/// Reads a lapin delivery (whose body was taken out as `body`) into the core's
/// transport-independent shape.
pub(crate) fn inbound(delivery: &lapin::message::Delivery, body: Bytes) -> Delivery {
    let p = &delivery.properties;
    Delivery {
        body,
        content_type: p.content_type().as_ref().map(ToString::to_string),
        headers: p
            .headers()
            .as_ref()
            .map(headers_from_amqp)
            .unwrap_or_default(),
        message_id: p.message_id().as_ref().map(ToString::to_string),
        correlation_id: p.correlation_id().as_ref().map(ToString::to_string),
        redelivered: delivery.redelivered,
        exchange: delivery.exchange.to_string(),
        routing_key: delivery.routing_key.to_string(),
        priority: *p.priority(),
        reply_to: p.reply_to().as_ref().map(ToString::to_string),
        sequence_number: Some(delivery.delivery_tag),
        delivery_count: delivery_count(delivery),
        extensions: http::Extensions::new(),
    }
}

/// The header in which a quorum queue counts a message's deliveries.
const DELIVERY_COUNT: &str = "x-delivery-count";

/// The `x-delivery-count` header a quorum queue sets on redeliveries.
fn delivery_count(delivery: &lapin::message::Delivery) -> Option<u32> {
    let headers = delivery.properties.headers().as_ref()?;
    let value = headers.inner().get(DELIVERY_COUNT)?;
    let count = match value {
        AMQPValue::LongLongInt(n) => *n,
        AMQPValue::LongInt(n) => i64::from(*n),
        AMQPValue::ShortInt(n) => i64::from(*n),
        AMQPValue::LongUInt(n) => i64::from(*n),
        AMQPValue::ShortUInt(n) => i64::from(*n),
        AMQPValue::ShortShortInt(n) => i64::from(*n),
        AMQPValue::ShortShortUInt(n) => i64::from(*n),
        _ => return None,
    };
    u32::try_from(count).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outgoing_headers_follow_masstransit() {
        let headers = Headers::from_json(json!({
            "Tenant": "acme", "Flag": true, "Off": false, "Count": 3, "Ratio": 0.5,
            "MT-Request-AcceptType": ["urn:message:A"], "Obj": {"a": 1}, "Gone": null
        }))
        .unwrap();
        let mut table = FieldTable::default();
        table.insert("Gone".into(), AMQPValue::LongString("x".into()));
        merge_headers(&mut table, &headers);
        let t = table.inner();
        assert_eq!(t["Tenant"], AMQPValue::LongString("acme".into()));
        assert_eq!(t["Flag"], AMQPValue::LongString("True".into()));
        assert_eq!(t["Count"], AMQPValue::LongLongInt(3));
        assert_eq!(t["Ratio"], AMQPValue::Double(0.5));
        for dropped in ["Off", "MT-Request-AcceptType", "Obj", "Gone"] {
            assert!(!t.contains_key(dropped), "{dropped}");
        }
    }

    #[test]
    fn time_headers_go_out_as_amqp_timestamps() {
        use chrono::TimeZone;
        let at = chrono::Utc
            .with_ymd_and_hms(2025, 5, 24, 18, 39, 56)
            .unwrap();
        let before_epoch = chrono::Utc.with_ymd_and_hms(1960, 1, 1, 0, 0, 0).unwrap();
        let options = ferrybus_core::SendOptions::new()
            .header_time("Promised", at)
            .header_time("Old", before_epoch);
        let mut message = sample_message();
        message.headers = options.headers().clone();
        message.timestamp_headers = vec!["Promised".into(), "Old".into()];
        let properties = outgoing_properties(&message);
        let headers = properties.headers().as_ref().unwrap().inner();
        assert_eq!(
            headers["Promised"],
            AMQPValue::Timestamp(at.timestamp() as u64)
        );
        assert_eq!(
            headers["Old"],
            AMQPValue::LongString("1960-01-01T00:00:00.0000000Z".into())
        );
    }

    fn sample_message() -> OutgoingMessage {
        let factory = ferrybus_core::outgoing::MessageFactory::new(
            ferrybus_core::address::HostAddress::loopback(),
        );
        factory
            .build(
                &ferrybus_core::MessageType::new(
                    ferrybus_core::message::TypeName::parse("urn:message:Shop:OrderPlaced")
                        .unwrap(),
                ),
                serde_json::json!({}),
                "rabbitmq://localhost/Shop:OrderPlaced".into(),
                &ferrybus_core::outgoing::MessageOrigin::default(),
                ferrybus_core::SendOptions::new(),
                true,
            )
            .unwrap()
    }

    #[test]
    fn incoming_headers_become_json() {
        let mut table = FieldTable::default();
        table.insert("s".into(), AMQPValue::LongString("v".into()));
        table.insert("i".into(), AMQPValue::LongInt(-4));
        table.insert("b".into(), AMQPValue::Boolean(true));
        table.insert("t".into(), AMQPValue::Timestamp(1_700_000_000));
        table.insert("short".into(), AMQPValue::ShortString("x".into()));
        table.insert("bytes".into(), AMQPValue::ByteArray(vec![1u8].into()));
        table.insert(
            "d".into(),
            AMQPValue::DecimalValue(lapin::types::DecimalValue {
                scale: 2,
                value: 6699,
            }),
        );
        let h = headers_from_amqp(&table);
        assert_eq!(h.get_str("s"), Some("v"));
        assert_eq!(h.get_i64("i"), Some(-4));
        assert_eq!(h.get("b"), Some(&json!(true)));
        assert_eq!(h.get_i64("t"), Some(1_700_000_000));
        assert_eq!(h.get_str("short"), Some("x"));
        assert_eq!(h.get_str("d"), Some("66.99"));
        assert!(!h.contains("bytes"));
    }

    #[test]
    fn values_json_cannot_hold_are_skipped_for_consumers_and_shown_for_people() {
        use lapin::types::FieldArray;
        let mut nested = FieldTable::default();
        nested.insert("count".into(), AMQPValue::LongLongInt(1));
        nested.insert("raw".into(), AMQPValue::ByteArray(b"ab".to_vec().into()));
        let array = AMQPValue::FieldArray(FieldArray::from(vec![
            AMQPValue::LongString("q".into()),
            AMQPValue::Void,
            AMQPValue::Double(f64::NAN),
            AMQPValue::FieldTable(nested),
        ]));
        assert_eq!(amqp_to_json(&array), Some(json!(["q", {"count": 1}])));
        assert_eq!(
            amqp_to_json_lossy(&array),
            json!(["q", null, null, {"count": 1, "raw": "ab"}])
        );
        assert_eq!(amqp_to_json(&AMQPValue::Float(f32::INFINITY)), None);
        assert_eq!(
            amqp_to_json_lossy(&AMQPValue::ByteArray(vec![0x66, 0xff].into())),
            json!("f\u{fffd}")
        );
        let invalid = AMQPValue::LongString(LongString::from(vec![0x61, 0xff]));
        assert_eq!(amqp_to_json(&invalid), Some(json!("a\u{fffd}")));
        assert_eq!(amqp_to_json_lossy(&invalid), json!("a\u{fffd}"));
    }

    #[test]
    fn decimals_keep_their_scale() {
        assert_eq!(decimal_text(5, 2), "0.05");
        assert_eq!(decimal_text(500, 0), "500");
    }
}
