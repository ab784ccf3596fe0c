//! Binding a JSON payload to a message type as MassTransit does: property names match
//! case-insensitively.
//!
//! MassTransit's System.Text.Json options set `PropertyNameCaseInsensitive = true`
//! (`src/MassTransit/Serialization/SystemTextJsonMessageSerializer.cs`), and Newtonsoft's
//! contract resolver matches names case-insensitively too, so a .NET consumer of a camelCase
//! contract reads `{"OrderId": …, "Total": …}`. [`bind`] does the same for any serde type, with no
//! `#[serde(alias)]` on the fields: nested structs, `Vec`s, `Option`s, maps' values and enum
//! struct variants included.
//!
//! ```
//! use serde::Deserialize;
//!
//! #[derive(Debug, Deserialize, PartialEq)]
//! #[serde(rename_all = "camelCase")]
//! struct OrderPlaced {
//!     order_id: String,
//!     lines: Vec<Line>,
//! }
//! #[derive(Debug, Deserialize, PartialEq)]
//! #[serde(rename_all = "camelCase")]
//! struct Line {
//!     unit_price: String,
//! }
//!
//! let order: OrderPlaced = ferrybus_dotnet::bind(
//!     r#"{"OrderId": "o-1", "Lines": [{"UnitPrice": "9.99"}]}"#,
//! )
//! .unwrap();
//! assert_eq!(order.lines[0].unit_price, "9.99");
//! ```
//!
//! How it works: serde tells a deserializer, for every struct, the names of its fields (aliases
//! included). A key that is one of them is passed on untouched — the exact-case path costs one
//! comparison per key — and a key that is not is compared with them ignoring case and replaced by
//! the field name it matches. A key that matches no field is passed on as it is (ignored, or
//! refused under `#[serde(deny_unknown_fields)]`).
//!
//! Two keys of one object that differ only in case (`orderId` and `OrderId`) bind to the same
//! field, and the **last one wins**, as System.Text.Json sets the property once per key (so does
//! Newtonsoft); the same goes for a key given twice in the same case. Serde itself refuses a
//! field given twice, so such a payload is read a second time from a parsed tree, keeping only
//! the last of the keys that bind to each field; payloads without duplicates never take that
//! path.
//!
//! Where serde does not say which fields it expects — `#[serde(flatten)]`, untagged and
//! internally tagged enums (they buffer the object first) and maps — keys are matched exactly.

use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};
use serde_json::Value;

/// Deserializes `T` from JSON text, matching struct field names case-insensitively, as
/// MassTransit's System.Text.Json options (`PropertyNameCaseInsensitive`) and Newtonsoft do.
///
/// For every struct (nested ones, those in `Vec`s, `Option`s, map values and enum struct
/// variants included): a key that is a field's name or alias is taken as it is; any other key is
/// compared with the field names ignoring case (as .NET's `OrdinalIgnoreCase`); a key that
/// matches no field is ignored, or refused under `#[serde(deny_unknown_fields)]`. Of several
/// keys that bind to the same field (`orderId` and `OrderId`), the last wins. Map keys, and the
/// keys of `#[serde(flatten)]` fields and of untagged or internally tagged enums, match exactly.
///
/// ```
/// #[derive(serde::Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct OrderPlaced { order_id: u32 }
///
/// let order: OrderPlaced = ferrybus_dotnet::bind(r#"{"orderId": 1, "OrderId": 2}"#).unwrap();
/// assert_eq!(order.order_id, 2);
/// ```
pub fn bind<T: DeserializeOwned>(json: &str) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(json);
    let streamed = T::deserialize(CaseInsensitive(&mut de)).and_then(|v| de.end().map(|()| v));
    match streamed {
        // serde's derive refuses a field given twice (`duplicate field `x``): read the tree
        // again keeping the last key of each field, as System.Text.Json does.
        Err(error) if error.is_data() && error.to_string().starts_with("duplicate field") => {
            let value: Value = serde_json::from_str(json)?;
            bind_value(&value)
        }
        other => other,
    }
}

/// Deserializes `T` from a parsed JSON value, matching struct field names case-insensitively;
/// of several keys that bind to the same field, the last one wins.
pub fn bind_value<T: DeserializeOwned>(value: &Value) -> Result<T, serde_json::Error> {
    T::deserialize(Buffered(value))
}

/// A deserializer that matches struct field names case-insensitively.
struct CaseInsensitive<D>(D);

/// Whether `key` names `field` ignoring case, as .NET's `StringComparer.OrdinalIgnoreCase`
/// compares property names: character by character, each mapped to its simple (one-character)
/// uppercase; `ß` stays `ß`.
fn same_ignoring_case(key: &str, field: &str) -> bool {
    if key.is_ascii() && field.is_ascii() {
        return key.eq_ignore_ascii_case(field);
    }
    fn simple_upper(c: char) -> char {
        let mut upper = c.to_uppercase();
        match (upper.next(), upper.next()) {
            (Some(u), None) => u,
            _ => c,
        }
    }
    key.chars()
        .map(simple_upper)
        .eq(field.chars().map(simple_upper))
}

/// The field `key` binds to: itself when it is one, else the field it names ignoring case.
fn resolve(key: &str, fields: &'static [&'static str]) -> Option<&'static str> {
    if fields.contains(&key) {
        return None;
    }
    fields.iter().copied().find(|f| same_ignoring_case(key, f))
}

macro_rules! forward_wrapped {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.0.$method(Wrap(visitor))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for CaseInsensitive<D> {
    type Error = D::Error;

    forward_wrapped! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, Wrap(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_newtype_struct(name, Wrap(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple(len, Wrap(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple_struct(name, len, Wrap(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0
            .deserialize_struct(name, fields, Struct(visitor, fields))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, Wrap(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// A visitor whose nested values are read case-insensitively too.
struct Wrap<V>(V);

macro_rules! forward_visits {
    ($($method:ident: $ty:ty)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                self.0.$method(v)
            }
        )*
    };
}

macro_rules! scalar_visits {
    () => {
        forward_visits! {
            visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64
            visit_i128: i128 visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64
            visit_u128: u128 visit_f32: f32 visit_f64: f64 visit_char: char visit_str: &str
            visit_borrowed_str: &'de str visit_string: String visit_bytes: &[u8]
            visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            self.0.visit_none()
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            self.0.visit_unit()
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            self.0.visit_some(CaseInsensitive(d))
        }

        fn visit_newtype_struct<D2: Deserializer<'de>>(
            self,
            d: D2,
        ) -> Result<Self::Value, D2::Error> {
            self.0.visit_newtype_struct(CaseInsensitive(d))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            self.0.visit_seq(Seq(seq))
        }

        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
            self.0.visit_enum(Enum(data))
        }
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    scalar_visits!();

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(Map { map, fields: None })
    }
}

/// The visitor of a struct, with its field names.
struct Struct<V>(V, &'static [&'static str]);

impl<'de, V: Visitor<'de>> Visitor<'de> for Struct<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(Map {
            map,
            fields: Some(self.1),
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.visit_seq(Seq(seq))
    }

    // A struct read from anything else (a string through a custom impl, …) is passed on.
    forward_visits! {
        visit_bool: bool visit_i64: i64 visit_i128: i128 visit_u64: u64 visit_u128: u128
        visit_f64: f64 visit_str: &str visit_borrowed_str: &'de str visit_string: String
        visit_bytes: &[u8] visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
        self.0.visit_some(CaseInsensitive(d))
    }

    fn visit_newtype_struct<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
        self.0.visit_newtype_struct(CaseInsensitive(d))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.0.visit_enum(Enum(data))
    }
}

/// A sequence whose elements are read case-insensitively.
struct Seq<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Seq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0.next_element_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// A seed whose value is read case-insensitively.
struct Seed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(CaseInsensitive(d))
    }
}

/// An object: a struct's (keys resolved against its fields) or a map's (keys as they are).
struct Map<A> {
    map: A,
    fields: Option<&'static [&'static str]>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        match self.fields {
            Some(fields) => self.map.next_key_seed(KeySeed { seed, fields }),
            None => self.map.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        self.map.next_value_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// The key of a struct's entry.
struct KeySeed<K> {
    seed: K,
    fields: &'static [&'static str],
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<K> {
    type Value = K::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.seed.deserialize(Key {
            de: d,
            fields: self.fields,
        })
    }
}

/// The deserializer of a struct key: hands the field visitor the resolved name.
struct Key<D> {
    de: D,
    fields: &'static [&'static str],
}

macro_rules! forward_key {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.de.$method(KeyVisitor { visitor, fields: self.fields })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Key<D> {
    type Error = D::Error;

    forward_key! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_struct(name, fields, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.de.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

/// Sees the key's text and hands the field visitor the field name it binds to.
struct KeyVisitor<V> {
    visitor: V,
    fields: &'static [&'static str],
}

impl<'de, V: Visitor<'de>> Visitor<'de> for KeyVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        match resolve(key, self.fields) {
            Some(field) => self.visitor.visit_borrowed_str(field),
            None => self.visitor.visit_str(key),
        }
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Self::Value, E> {
        match resolve(key, self.fields) {
            Some(field) => self.visitor.visit_borrowed_str(field),
            None => self.visitor.visit_borrowed_str(key),
        }
    }

    fn visit_string<E: de::Error>(self, key: String) -> Result<Self::Value, E> {
        match resolve(&key, self.fields) {
            Some(field) => self.visitor.visit_borrowed_str(field),
            None => self.visitor.visit_string(key),
        }
    }

    fn visit_bytes<E: de::Error>(self, key: &[u8]) -> Result<Self::Value, E> {
        match std::str::from_utf8(key) {
            Ok(text) => self.visit_str(text),
            Err(_) => self.visitor.visit_bytes(key),
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.visitor.visit_u64(v)
    }
}

/// An enum whose variant's content is read case-insensitively.
struct Enum<A>(A);

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Enum<A> {
    type Error = A::Error;
    type Variant = Variant<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), Self::Error> {
        self.0
            .variant_seed(seed)
            .map(|(value, variant)| (value, Variant(variant)))
    }
}

struct Variant<A>(A);

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Variant<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, Self::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.tuple_variant(len, Wrap(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.struct_variant(fields, Struct(visitor, fields))
    }
}

/// A parsed tree read case-insensitively, several keys of one struct field resolved to the
/// last.
struct Buffered<'a>(&'a Value);

macro_rules! forward_value {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.0.$method(visitor)
            }
        )*
    };
}

impl<'de> Deserializer<'de> for Buffered<'de> {
    type Error = serde_json::Error;

    forward_value! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_identifier
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(BufferedSeq(items.iter())),
            Value::Object(map) => visitor.visit_map(BufferedMap::new(map, None)),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        if name.starts_with("$serde_json") {
            // serde_json's own tokens (a `RawValue` field): let the tree answer.
            return self.0.deserialize_newtype_struct(name, visitor);
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(BufferedSeq(items.iter())),
            other => other.deserialize_seq(visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(BufferedMap::new(map, None)),
            other => other.deserialize_map(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(BufferedMap::new(map, Some(fields))),
            Value::Array(items) => visitor.visit_seq(BufferedSeq(items.iter())),
            other => other.deserialize_struct(name, fields, visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        CaseInsensitive(self.0).deserialize_enum(name, variants, visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }
}

struct BufferedSeq<'a>(std::slice::Iter<'a, Value>);

impl<'de> SeqAccess<'de> for BufferedSeq<'de> {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0
            .next()
            .map(|item| seed.deserialize(Buffered(item)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

/// An object's entries; for a struct, keys resolved to field names and, of several keys of one
/// field, only the last.
struct BufferedMap<'a> {
    entries: std::vec::IntoIter<(&'a str, &'a Value)>,
    value: Option<&'a Value>,
}

impl<'a> BufferedMap<'a> {
    fn new(
        map: &'a serde_json::Map<String, Value>,
        fields: Option<&'static [&'static str]>,
    ) -> Self {
        let entries: Vec<(&'a str, &'a Value)> = match fields {
            None => map.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            Some(fields) => {
                let resolved: Vec<(&'a str, bool, &'a Value)> = map
                    .iter()
                    .map(|(k, v)| match resolve(k, fields) {
                        Some(field) => (field, true, v),
                        None => (k.as_str(), fields.contains(&k.as_str()), v),
                    })
                    .collect();
                let mut kept: Vec<(&'a str, &'a Value)> = Vec::with_capacity(resolved.len());
                for (i, (name, is_field, value)) in resolved.iter().enumerate() {
                    let later = resolved[i + 1..].iter().any(|(n, f, _)| *f && n == name);
                    if !(*is_field && later) {
                        kept.push((name, value));
                    }
                }
                kept
            }
        };
        Self {
            entries: entries.into_iter(),
            value: None,
        }
    }
}

impl<'de> MapAccess<'de> for BufferedMap<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(BorrowedStrDeserializer::new(key))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(Buffered(value)),
            None => Err(de::Error::custom(
                "a map value was asked for before its key",
            )),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Order {
        order_id: String,
        #[serde(default)]
        note: Option<String>,
        lines: Vec<Line>,
        shipping: Option<Address>,
        #[serde(default)]
        tags: HashMap<String, Address>,
        #[serde(default)]
        status: Option<Status>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Line {
        sku: String,
        unit_price: f64,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Address {
        street_name: String,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    enum Status {
        Held { held_by: String },
        Open,
    }

    #[test]
    fn exact_case_binds_as_serde_does() {
        let json = r#"{"orderId":"o","lines":[{"sku":"a","unitPrice":1.5}],"shipping":null}"#;
        let order: Order = bind(json).unwrap();
        assert_eq!(order, serde_json::from_str::<Order>(json).unwrap());
    }

    #[test]
    fn pascal_case_binds_nested_objects_arrays_options_maps_and_variants() {
        let order: Order = bind(
            r#"{"OrderId":"o","NOTE":"n","Lines":[{"Sku":"a","UnitPrice":1.5}],
                "Shipping":{"StreetName":"Main"},"Tags":{"Home":{"STREETNAME":"x"}},
                "Status":{"held":{"HELD_BY":"ops"}}}"#,
        )
        .unwrap();
        assert_eq!(order.order_id, "o");
        assert_eq!(order.note.as_deref(), Some("n"));
        assert_eq!(order.lines[0].unit_price, 1.5);
        assert_eq!(order.shipping.unwrap().street_name, "Main");
        // Map keys are data: kept as they are; the values' fields still match.
        assert_eq!(order.tags["Home"].street_name, "x");
        assert_eq!(
            order.status,
            Some(Status::Held {
                held_by: "ops".into()
            })
        );
        let from_value: Order =
            bind_value(&serde_json::json!({"ORDERID": "v", "lines": []})).unwrap();
        assert_eq!(from_value.order_id, "v");
    }

    #[test]
    fn optional_fields_in_another_case_are_not_dropped() {
        #[derive(Deserialize)]
        struct AllOptional {
            #[serde(rename = "note")]
            note: Option<String>,
        }
        let read: AllOptional = bind(r#"{"Note":"kept"}"#).unwrap();
        assert_eq!(read.note.as_deref(), Some("kept"));
    }

    #[test]
    fn of_keys_differing_only_in_case_the_last_wins() {
        let order: Order = bind(
            r#"{"orderId":"a","OrderId":"b","lines":[{"sku":"x","SKU":"y",
            "unitPrice":1}]}"#,
        )
        .unwrap();
        assert_eq!(order.order_id, "b");
        assert_eq!(order.lines[0].sku, "y");
        let order: Order =
            bind(r#"{"OrderId":"a","orderId":"b","orderId":"c","lines":[]}"#).unwrap();
        assert_eq!(order.order_id, "c");
        // Map keys are data: both kept.
        let order: Order = bind(
            r#"{"orderId":"a","orderId":"b","lines":[],"tags":{"k":{"streetName":"1"},"K":{"StreetName":"2"}}}"#,
        )
        .unwrap();
        assert_eq!(order.tags.len(), 2);
        assert_eq!(order.tags["K"].street_name, "2");
    }

    #[test]
    fn raw_values_json_values_and_dotnet_helpers_pass_through() {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Mixed {
            raw: Box<serde_json::value::RawValue>,
            any: Value,
            #[serde(with = "crate::decimal")]
            total: rust_decimal::Decimal,
            #[serde(with = "crate::datetime")]
            placed_at: chrono::DateTime<chrono::Utc>,
            id: uuid::Uuid,
            pair: (u8, String),
        }
        let json = r#"{"RAW": {"Keep": [1, 2]}, "Any": {"Inner": 1}, "Total": "12.00",
            "PlacedAt": "2025-05-24T18:39:56.3305069Z", "ID": "7569172a-7c0e-44fb-a297-54bdebe6ce44",
            "Pair": [1, "x"]}"#;
        for mixed in [
            bind::<Mixed>(json).unwrap(),
            bind_value(&serde_json::from_str(json).unwrap()).unwrap(),
        ] {
            assert_eq!(mixed.raw.get().replace(' ', ""), r#"{"Keep":[1,2]}"#);
            assert_eq!(mixed.any["Inner"], 1);
            assert_eq!(mixed.total.to_string(), "12.00");
            assert_eq!(mixed.placed_at.timestamp(), 1_748_111_996);
            assert_eq!(mixed.id.to_string(), "7569172a-7c0e-44fb-a297-54bdebe6ce44");
            assert_eq!(mixed.pair, (1, "x".to_owned()));
        }
    }

    #[test]
    fn unknown_keys_stay_unknown() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Strict {
            #[serde(rename = "a")]
            _a: u8,
        }
        assert!(bind::<Strict>(r#"{"A":1}"#).is_ok());
        let err = bind::<Strict>(r#"{"A":1,"b":2}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `b`"), "{err}");
    }

    #[test]
    fn non_ascii_names_fold_case() {
        #[derive(Deserialize)]
        struct Straße {
            #[serde(rename = "größe")]
            size: u8,
        }
        // `ß` has no one-character uppercase: .NET does not match it with `SS`, nor does this.
        assert!(bind::<Straße>(r#"{"GRÖSSE":1}"#).is_err());
        assert_eq!(bind::<Straße>(r#"{"GRÖßE":2}"#).unwrap().size, 2);
    }
}
