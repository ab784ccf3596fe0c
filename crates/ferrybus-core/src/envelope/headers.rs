//! Message headers: an ordered map with case-insensitive names, as MassTransit keeps them.

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Message headers: insertion-ordered, names compared case-insensitively, values kept as JSON.
///
/// MassTransit reads envelope `headers` into a case-insensitive dictionary; strings stay strings,
/// booleans stay booleans, numbers stay numbers, lists and objects are nested (masstransit-wire §1.3).
///
/// ```
/// use ferrybus_core::Headers;
/// let mut headers = Headers::new();
/// headers.insert("Tenant", "acme");
/// assert_eq!(headers.get_str("tenant"), Some("acme"));
/// headers.insert("TENANT", "globex");
/// assert_eq!(headers.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Headers(IndexMap<String, Value>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `name`, compared case-insensitively.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.position(name).map(|i| &self.0[i])
    }

    /// The value of `name` if it is a string.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_str)
    }

    /// The value of `name` as an integer, accepting a number or a numeric string.
    pub fn get_i64(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// Sets `name`, replacing a value stored under any casing of the same name.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Value>) {
        let name = name.into();
        let value = value.into();
        match self.position(&name) {
            Some(i) => self.0[i] = value,
            None => {
                self.0.insert(name, value);
            }
        }
    }

    /// Removes `name` (any casing) and returns its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        let i = self.position(name)?;
        self.0.shift_remove_index(i).map(|(_, v)| v)
    }

    /// Whether `name` is present.
    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// The number of headers.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The headers in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The headers a consumer passes on when it publishes, sends or responds: every header whose
    /// name does not start with `MT-` (MassTransit's `TransferConsumeContextHeaders`).
    pub fn transferable(&self) -> Headers {
        Headers(
            self.0
                .iter()
                .filter(|(k, v)| !is_mt_header(k) && !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    }

    fn position(&self, name: &str) -> Option<usize> {
        if let Some(i) = self.0.get_index_of(name) {
            return Some(i);
        }
        self.0.keys().position(|k| k.eq_ignore_ascii_case(name))
    }
}

/// Whether a header name is one of MassTransit's own (`MT-` prefix, any casing).
pub fn is_mt_header(name: &str) -> bool {
    name.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("MT-"))
}

impl FromIterator<(String, Value)> for Headers {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        let mut headers = Headers::new();
        for (k, v) in iter {
            headers.insert(k, v);
        }
        headers
    }
}

impl Serialize for Headers {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Headers::from_json(value).map_err(serde::de::Error::custom)
    }
}

impl Headers {
    /// Reads headers in every shape MassTransit has written: an object, `null`, `[]`, or an array
    /// of `{"Key": .., "Value": ..}` objects.
    pub fn from_json(value: Value) -> Result<Headers, &'static str> {
        match value {
            Value::Null => Ok(Headers::new()),
            Value::Object(map) => Ok(map.into_iter().collect()),
            Value::Array(items) => items.into_iter().map(key_value_pair).collect(),
            _ => Err("expected an object or an array of {Key, Value} pairs"),
        }
    }
}

fn key_value_pair(item: Value) -> Result<(String, Value), &'static str> {
    let Value::Object(map) = item else {
        return Err("a header array item must be a {Key, Value} object");
    };
    let mut key = None;
    let mut value = Value::Null;
    for (k, v) in map {
        if k.eq_ignore_ascii_case("key") {
            key = v.as_str().map(str::to_owned);
        } else if k.eq_ignore_ascii_case("value") {
            value = v;
        }
    }
    key.map(|k| (k, value))
        .ok_or("a header array item has no string Key")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_every_shape() {
        assert!(Headers::from_json(json!([])).unwrap().is_empty());
        assert!(Headers::from_json(Value::Null).unwrap().is_empty());
        let h = Headers::from_json(json!([{"Key": "a", "Value": 1}, {"key": "B", "value": "x"}]))
            .unwrap();
        assert_eq!(h.get_i64("A"), Some(1));
        assert_eq!(h.get_str("b"), Some("x"));
        assert!(Headers::from_json(json!(5)).is_err());
    }

    #[test]
    fn transferable_drops_mt_headers() {
        let h = Headers::from_json(
            json!({"MT-Activity-Id": "x", "mt-redelivery-count": 1, "Tenant": "a"}),
        )
        .unwrap();
        let t = h.transferable();
        assert_eq!(t.len(), 1);
        assert_eq!(t.get_str("tenant"), Some("a"));
    }
}
