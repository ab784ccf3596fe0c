//! [`Payload`]: an envelope's `message`, kept as the JSON text it arrived as.

use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// An envelope's `message`: the payload's JSON text, bound to a message type without an
/// intermediate tree ([`Payload::bind`]), and readable as a [`serde_json::Value`] through
/// `Deref`, parsed on first use.
///
/// The receive path parses a body once: the envelope's fields are read and `message` is kept as
/// text; the consumer's message type is then deserialized straight from that text.
///
/// ```
/// use ferrybus_core::envelope::Payload;
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct OrderPlaced { order_id: String }
///
/// let payload = Payload::from(serde_json::json!({"OrderId": "o-1"}));
/// assert_eq!(payload.json(), r#"{"OrderId":"o-1"}"#);
/// assert_eq!(payload["OrderId"], "o-1"); // as a serde_json::Value
/// let order: OrderPlaced = payload.bind().unwrap(); // property names match ignoring case
/// assert_eq!(order.order_id, "o-1");
/// ```
pub struct Payload {
    raw: Box<RawValue>,
    value: OnceLock<Value>,
}

impl Payload {
    /// A payload of JSON text already checked by serde_json.
    pub fn from_raw(raw: Box<RawValue>) -> Self {
        Self {
            raw,
            value: OnceLock::new(),
        }
    }

    /// The payload of `message` serialized as JSON.
    pub fn of<T: Serialize + ?Sized>(message: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(message).map(Self::from_raw)
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        self.raw.get()
    }

    /// The JSON text as serde_json's raw value.
    pub fn raw(&self) -> &RawValue {
        &self.raw
    }

    /// Deserializes `T` from the text, matching struct field names case-insensitively as
    /// MassTransit does ([`crate::message::bind`]).
    pub fn bind<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        crate::message::bind(self.raw.get())
    }

    /// The payload as a [`Value`], parsed once and cached. A number serde_json cannot hold
    /// (`1e400`) makes the whole value `null` here; [`Payload::json`] still has the text.
    pub fn value(&self) -> &Value {
        self.value
            .get_or_init(|| serde_json::from_str(self.raw.get()).unwrap_or(Value::Null))
    }

    /// The payload as an owned [`Value`].
    pub fn into_value(self) -> Value {
        match self.value.into_inner() {
            Some(value) => value,
            None => serde_json::from_str(self.raw.get()).unwrap_or(Value::Null),
        }
    }

    /// Whether the payload is JSON `null`.
    pub fn is_null(&self) -> bool {
        self.raw.get() == "null"
    }
}

impl Deref for Payload {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl Default for Payload {
    /// JSON `null`.
    fn default() -> Self {
        Self::from(Value::Null)
    }
}

impl Clone for Payload {
    fn clone(&self) -> Self {
        Self {
            raw: self.raw.clone(),
            value: self.value.clone(),
        }
    }
}

impl From<Value> for Payload {
    fn from(value: Value) -> Self {
        let raw = serde_json::value::to_raw_value(&value).expect("a JSON value always serializes");
        let cached = OnceLock::new();
        let _ = cached.set(value);
        Self { raw, value: cached }
    }
}

impl From<Payload> for Value {
    fn from(payload: Payload) -> Self {
        payload.into_value()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.raw.get() == other.raw.get() || self.value() == other.value()
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Payload").field(&self.raw.get()).finish()
    }
}

impl Serialize for Payload {
    /// Writes the JSON text as it is.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Self::from_raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_compares_by_value() {
        let p: Payload = serde_json::from_str(r#"{ "a" : [1, 2] }"#).unwrap();
        assert_eq!(p.json(), r#"{ "a" : [1, 2] }"#);
        assert_eq!(p, json!({"a": [1, 2]}));
        assert_eq!(p, Payload::from(json!({"a": [1, 2]})));
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{ "a" : [1, 2] }"#);
        assert_eq!(serde_json::to_value(&p).unwrap(), json!({"a": [1, 2]}));
        assert!(Payload::default().is_null());
        let huge: Payload = serde_json::from_str("1e400").unwrap();
        assert!(huge.value().is_null());
        assert_eq!(huge.json(), "1e400");
    }
}
