//! .NET on the wire, for ferrybus and its derive macro: MassTransit's type names and URNs
//! ([`TypeName`], the one grammar both use), payload binding with .NET's case-insensitive
//! property names ([`bind()`]), serde helpers that write and read values as .NET does, and
//! MassTransit's endpoint (queue) names for .NET type names ([`EndpointNameFormatter`]).
//!
//! # Values
//!
//! Use each helper module with `#[serde(with = "...")]`:
//!
//! ```
//! use chrono::{DateTime, FixedOffset, Utc};
//! use rust_decimal::Decimal;
//! use serde::{Deserialize, Serialize};
//! use std::time::Duration;
//! use uuid::Uuid;
//!
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct OrderSubmitted {
//!     #[serde(with = "ferrybus_dotnet::guid")]
//!     order_id: Uuid,
//!     #[serde(with = "ferrybus_dotnet::decimal")]
//!     total: Decimal,
//!     // `default` makes a missing key read as `None`, as it does without `with`.
//!     #[serde(default, with = "ferrybus_dotnet::decimal::option")]
//!     discount: Option<Decimal>,
//!     #[serde(with = "ferrybus_dotnet::datetime")]
//!     submitted_at: DateTime<Utc>,
//!     #[serde(with = "ferrybus_dotnet::datetime_offset")]
//!     promised_by: DateTime<FixedOffset>,
//!     #[serde(with = "ferrybus_dotnet::timespan")]
//!     hold_for: Duration,
//! }
//!
//! let order = OrderSubmitted {
//!     order_id: "9F8E7D6C-5B4A-3928-1706-F5E4D3C2B1A0".parse().unwrap(),
//!     total: Decimal::new(1200, 2),
//!     discount: None,
//!     submitted_at: "2025-05-24T18:39:56.3305069Z".parse().unwrap(),
//!     promised_by: DateTime::parse_from_rfc3339("2018-05-08T07:17:03.6952914+02:00").unwrap(),
//!     hold_for: Duration::from_millis(90_500),
//! };
//! let json = serde_json::to_string_pretty(&order).unwrap();
//! assert_eq!(
//!     json,
//!     r#"{
//!   "orderId": "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0",
//!   "total": "12.00",
//!   "discount": null,
//!   "submittedAt": "2025-05-24T18:39:56.3305069Z",
//!   "promisedBy": "2018-05-08T07:17:03.6952914+02:00",
//!   "holdFor": "00:01:30.5000000"
//! }"#
//! );
//! assert_eq!(serde_json::from_str::<OrderSubmitted>(&json).unwrap(), order);
//!
//! // What .NET may send: a decimal as a number, a DateTime without a zone (read as UTC), a
//! // GUID in braces, and no `discount` at all.
//! let from_dotnet: OrderSubmitted = serde_json::from_str(
//!     r#"{"orderId":"{9F8E7D6C-5B4A-3928-1706-F5E4D3C2B1A0}","total":66.99,
//!         "submittedAt":"2021-05-14T00:00:00","promisedBy":"2021-05-14T00:00:00Z",
//!         "holdFor":"1.02:03:04.5"}"#,
//! )
//! .unwrap();
//! assert_eq!(from_dotnet.total.to_string(), "66.99");
//! assert_eq!(from_dotnet.discount, None);
//! assert_eq!(from_dotnet.submitted_at.to_rfc3339(), "2021-05-14T00:00:00+00:00");
//! assert_eq!(from_dotnet.promised_by.to_rfc3339(), "2021-05-14T00:00:00+00:00");
//! assert_eq!(from_dotnet.hold_for, Duration::new(93_784, 500_000_000));
//! ```
//!
//! # The helpers
//!
//! MassTransit serializes payloads with System.Text.Json. Each module here writes a value the way
//! .NET writes it and reads every form .NET writes (and a little more):
//!
//! | .NET type | Rust type | module | written as |
//! |---|---|---|---|
//! | `decimal` | [`rust_decimal::Decimal`] | [`decimal`] | `"66.99"`, `"12.00"` (scale kept) |
//! | `DateTime`, UTC | `chrono::DateTime<Utc>` | [`datetime`] | `"2025-05-24T18:39:56.3305069Z"` |
//! | `DateTimeOffset` | `chrono::DateTime<FixedOffset>` | [`datetime_offset`] | `"2018-05-08T07:17:03.6952914+02:00"` |
//! | `DateTime`, unspecified | [`chrono::NaiveDateTime`] | [`local_datetime`] | `"2021-12-14T18:08:12.927"` |
//! | `TimeSpan` | [`std::time::Duration`] | [`timespan`] | `"00:00:30"`, `"1.02:03:04.5000000"` |
//! | `TimeSpan` | [`chrono::TimeDelta`] | [`timespan::signed`] | `"-00:00:05"` |
//! | `Guid` | [`uuid::Uuid`] | [`guid`] | `"9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"` |
//! | `byte[]` | `Vec<u8>` | [`bytes`] | `"AQID"` (base64) |
//!
//! For a value deeper inside a field (a dictionary's values, a nullable list, a list of lists),
//! [`as_dotnet`] has the same helpers as [`serde_with`] adapters.
//!
//! Each module has an `option` submodule for the `Option<_>` of its type (and `datetime`,
//! `datetime_offset`, `timespan::signed` and `bytes` a `vec` submodule for a `Vec<_>` of it): `None` is written as
//! `null`, and `null` reads as `None`. A field with `with` loses serde's rule that a missing
//! `Option` is `None`, so add `default`:
//! `#[serde(default, with = "ferrybus_dotnet::datetime::option")]`. Add
//! `skip_serializing_if = "Option::is_none"` to leave `None` out rather than write `null`.
//!
//! Date-time and TimeSpan text carries .NET's resolution, 100 ns ticks: finer digits are
//! truncated when writing. Writing a value outside the .NET type's range (a year past 9999, a
//! TimeSpan over ~29,000 years, an offset beyond ±14:00) fails with
//! [`DotNetValueError::OutOfRange`] rather than produce text .NET rejects.
//!
//! # GUIDs
//!
//! .NET writes a `Guid` in lowercase `D` form (`9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0`) and, inside
//! payloads, reads only the `D` form. [`uuid::Uuid`]'s own serde implementation already writes
//! exactly that (and reads `D`, `N`, `B` and `urn:uuid:` forms), so a plain `Uuid` field is
//! compatible; [`guid`] makes it explicit and also reads the `P` form `(…)`.
//!
//! # Enums
//!
//! System.Text.Json writes an enum as its integer value, and reading a string where an enum is
//! expected throws. Give Rust enums integer representations, for instance with the
//! [`serde_repr`](https://docs.rs/serde_repr) crate (not a dependency of ferrybus):
//!
//! ```
//! use serde_repr::{Deserialize_repr, Serialize_repr};
//!
//! #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize_repr, Deserialize_repr)]
//! #[repr(i32)]
//! enum OrderStatus {
//!     Pending = 0,
//!     Shipped = 1,
//!     Cancelled = 2,
//! }
//!
//! // OrderStatus::Shipped is written as `1`, and `1` reads as OrderStatus::Shipped.
//! assert_eq!(serde_json::to_string(&OrderStatus::Shipped).unwrap(), "1");
//! assert_eq!(serde_json::from_str::<OrderStatus>("1").unwrap(), OrderStatus::Shipped);
//! // A number .NET never writes for it, or the member's name, is refused.
//! assert!(serde_json::from_str::<OrderStatus>("7").is_err());
//! assert!(serde_json::from_str::<OrderStatus>(r#""Shipped""#).is_err());
//! ```
//!
//! # Property names
//!
//! MassTransit writes camelCase keys and .NET reads keys case-insensitively, so a .NET consumer
//! also accepts PascalCase. serde matches keys exactly: write camelCase with `rename_all`, and
//! accept the PascalCase spelling too with an `alias` on each field:
//!
//! ```
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct OrderShipped {
//!     #[serde(alias = "OrderId")]
//!     order_id: uuid::Uuid,
//!     #[serde(alias = "Carrier")]
//!     carrier: String,
//! }
//!
//! let camel: OrderShipped = serde_json::from_str(
//!     r#"{"orderId":"9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0","carrier":"DHL"}"#,
//! )
//! .unwrap();
//! let pascal: OrderShipped = serde_json::from_str(
//!     r#"{"OrderId":"9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0","Carrier":"DHL"}"#,
//! )
//! .unwrap();
//! assert_eq!(camel.order_id, pascal.order_id);
//! assert_eq!(
//!     serde_json::to_string(&pascal).unwrap(),
//!     r#"{"orderId":"9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0","carrier":"DHL"}"#
//! );
//! ```

mod bind;
mod endpoint_name;
mod error;
mod iso;
mod type_name;

pub mod as_dotnet;
pub mod bytes;
pub mod datetime;
pub mod datetime_offset;
pub mod decimal;
pub mod guid;
pub mod local_datetime;
pub mod timespan;

pub use bind::{bind, bind_value};
pub use endpoint_name::EndpointNameFormatter;
pub use error::DotNetValueError;
pub use type_name::{ParseTypeNameError, TypeName, URN_PREFIX};

/// The date and time types of the helpers (`chrono::DateTime<Utc>`, `NaiveDate` …), re-exported
/// so that generated contracts (`ferrybus contracts import`) need no dependency of their own.
pub use chrono;
/// The `Decimal` of [`decimal`], re-exported for the same reason.
pub use rust_decimal;
/// The adapters of [`as_dotnet`] are [`serde_with`]'s: re-exported for `#[serde_as]`.
pub use serde_with;

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The `serialize`/`deserialize` pair of one helper module, so that its `option` submodule can
/// be written once, generically.
trait Form {
    /// The Rust type the module handles.
    type Value;

    fn serialize<S: Serializer>(value: &Self::Value, serializer: S) -> Result<S::Ok, S::Error>;

    fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self::Value, D::Error>;
}

/// `ParentForm`: the parent module's `serialize`/`deserialize` pair of `$value` as a [`Form`],
/// shared by the `option` and `vec` submodules.
macro_rules! parent_form {
    ($value:ty) => {
        enum ParentForm {}

        impl $crate::Form for ParentForm {
            type Value = $value;

            fn serialize<S: ::serde::Serializer>(
                value: &$value,
                serializer: S,
            ) -> Result<S::Ok, S::Error> {
                super::serialize(value, serializer)
            }

            fn deserialize<'de, D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<$value, D::Error> {
                super::deserialize(deserializer)
            }
        }
    };
}
use parent_form;

/// The body of a helper module's `option` submodule: `serialize` and `deserialize` of
/// `Option<$value>` through the parent module's pair (`None` is `null`).
macro_rules! option_of_parent {
    ($value:ty) => {
        $crate::parent_form!($value);

        /// Writes `None` as `null` and `Some` as [`super::serialize`] does.
        pub fn serialize<S: ::serde::Serializer>(
            value: &Option<$value>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            $crate::serialize_option::<ParentForm, S>(value, serializer)
        }

        /// Reads `null` as `None` and anything else as [`super::deserialize`] does.
        pub fn deserialize<'de, D: ::serde::Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<$value>, D::Error> {
            $crate::deserialize_option::<ParentForm, D>(deserializer)
        }
    };
}
use option_of_parent;

/// The body of a helper module's `vec` submodule: `serialize` and `deserialize` of
/// `Vec<$value>` through the parent module's pair, each element in .NET's form.
macro_rules! vec_of_parent {
    ($value:ty) => {
        $crate::parent_form!($value);

        /// Writes a JSON array, each element as [`super::serialize`] does.
        pub fn serialize<S: ::serde::Serializer>(
            values: &[$value],
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            $crate::serialize_vec::<ParentForm, S>(values, serializer)
        }

        /// Reads a JSON array, each element as [`super::deserialize`] does.
        pub fn deserialize<'de, D: ::serde::Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Vec<$value>, D::Error> {
            $crate::deserialize_vec::<ParentForm, D>(deserializer)
        }
    };
}
use vec_of_parent;

/// A borrowed value serialized with the form `F`.
struct SerializeWith<'a, F: Form>(&'a F::Value);

impl<F: Form> Serialize for SerializeWith<'_, F> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        F::serialize(self.0, serializer)
    }
}

/// A value deserialized with the form `F`.
struct DeserializeWith<F: Form>(F::Value);

impl<'de, F: Form> Deserialize<'de> for DeserializeWith<F> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        F::deserialize(deserializer).map(DeserializeWith)
    }
}

/// `serialize` of an `option` submodule: `None` as `null`, `Some` in the form `F`.
fn serialize_option<F: Form, S: Serializer>(
    value: &Option<F::Value>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.serialize_some(&SerializeWith::<F>(value)),
        None => serializer.serialize_none(),
    }
}

/// `deserialize` of an `option` submodule: `null` as `None`, anything else in the form `F`.
fn deserialize_option<'de, F: Form, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<F::Value>, D::Error> {
    Ok(Option::<DeserializeWith<F>>::deserialize(deserializer)?.map(|value| value.0))
}

/// `serialize` of a `vec` submodule: an array of elements in the form `F`.
fn serialize_vec<F: Form, S: Serializer>(
    values: &[F::Value],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(values.iter().map(SerializeWith::<F>))
}

/// `deserialize` of a `vec` submodule: an array of elements in the form `F`.
fn deserialize_vec<'de, F: Form, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<F::Value>, D::Error> {
    Ok(Vec::<DeserializeWith<F>>::deserialize(deserializer)?
        .into_iter()
        .map(|value| value.0)
        .collect())
}

/// Reads a string and parses it with `parse`; anything but a string is an invalid type, with
/// `expecting` naming what was wanted.
fn deserialize_str<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    expecting: &'static str,
    parse: fn(&str) -> Result<T, DotNetValueError>,
) -> Result<T, D::Error> {
    deserializer.deserialize_str(StrVisitor { expecting, parse })
}

struct StrVisitor<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, DotNetValueError>,
}

impl<T> Visitor<'_> for StrVisitor<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        (self.parse)(text).map_err(E::custom)
    }
}
