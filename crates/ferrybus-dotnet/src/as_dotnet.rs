//! The helpers as [`serde_with`] adapters, for a .NET value anywhere inside a field: in a
//! dictionary, a nullable list, a list of lists. `#[serde_as(as = "…")]` spells the field's
//! type with the adapter where the value sits (`_` for the rest), and serde_with composes
//! `Option`, `Vec` and `HashMap` around it.
//!
//! ```
//! use std::collections::HashMap;
//!
//! use chrono::{DateTime, TimeDelta, Utc};
//! use ferrybus_dotnet::as_dotnet;
//! use ferrybus_dotnet::serde_with::serde_as;
//! use rust_decimal::Decimal;
//! use serde::{Deserialize, Serialize};
//!
//! #[serde_as(crate = "ferrybus_dotnet::serde_with")]
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct StockCounted {
//!     #[serde_as(as = "HashMap<_, as_dotnet::DateTime>")]
//!     counted_at: HashMap<String, DateTime<Utc>>,
//!     #[serde_as(as = "Option<Vec<as_dotnet::TimeSpan>>")]
//!     waits: Option<Vec<TimeDelta>>,
//!     #[serde_as(as = "Vec<Vec<as_dotnet::Decimal>>")]
//!     prices: Vec<Vec<Decimal>>,
//! }
//!
//! let json = r#"{"countedAt":{"A-1":"2025-05-24T18:39:56.33Z"},"waits":null,"prices":[["12.50"],[]]}"#;
//! let counted: StockCounted = serde_json::from_str(json).unwrap();
//! assert_eq!(counted.prices[0][0].to_string(), "12.50");
//! assert_eq!(serde_json::to_string(&counted).unwrap(), json);
//! // What .NET also reads: a decimal as a number, and no `waits` at all.
//! let counted: StockCounted = serde_json::from_str(r#"{"countedAt":{},"prices":[[66.99]]}"#).unwrap();
//! assert_eq!((counted.waits, counted.prices[0][0].to_string()), (None, "66.99".to_owned()));
//! ```

use serde::{Deserializer, Serializer};
use serde_with::{DeserializeAs, SerializeAs};

/// An adapter for `$value` through the helper module `$module`.
macro_rules! adapter {
    ($(#[$doc:meta])* $name:ident, $value:ty, $module:path) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub enum $name {}

        impl SerializeAs<$value> for $name {
            fn serialize_as<S: Serializer>(value: &$value, serializer: S) -> Result<S::Ok, S::Error> {
                {
                    use $module as helper;
                    helper::serialize(value, serializer)
                }
            }
        }

        impl<'de> DeserializeAs<'de, $value> for $name {
            fn deserialize_as<D: Deserializer<'de>>(deserializer: D) -> Result<$value, D::Error> {
                {
                    use $module as helper;
                    helper::deserialize(deserializer)
                }
            }
        }
    };
}

adapter!(
    /// .NET `DateTime` (UTC) as `chrono::DateTime<Utc>`, as [`crate::datetime`] writes it.
    DateTime,
    chrono::DateTime<chrono::Utc>,
    crate::datetime
);
adapter!(
    /// .NET `DateTimeOffset` as `chrono::DateTime<FixedOffset>`, as [`crate::datetime_offset`]
    /// writes it.
    DateTimeOffset,
    chrono::DateTime<chrono::FixedOffset>,
    crate::datetime_offset
);
adapter!(
    /// .NET `TimeSpan` as [`chrono::TimeDelta`], as [`crate::timespan::signed`] writes it.
    TimeSpan,
    chrono::TimeDelta,
    crate::timespan::signed
);
adapter!(
    /// .NET `byte[]` as `Vec<u8>`, as [`crate::bytes`] writes it (base64).
    Bytes,
    Vec<u8>,
    crate::bytes
);
adapter!(
    /// .NET `decimal` as [`rust_decimal::Decimal`], as [`crate::decimal`] writes it (a string,
    /// read from a number too).
    Decimal,
    rust_decimal::Decimal,
    crate::decimal
);
