//! .NET `decimal` as [`Decimal`]: written as a JSON string keeping the scale (`"66.99"`,
//! `"12.00"`, `"0"`), read from a string or a number.
//!
//! ```
//! use rust_decimal::Decimal;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Line {
//!     #[serde(with = "ferrybus_dotnet::decimal")]
//!     price: Decimal,
//! }
//!
//! let line = Line { price: Decimal::new(1200, 2) };
//! assert_eq!(serde_json::to_string(&line).unwrap(), r#"{"price":"12.00"}"#);
//! let line: Line = serde_json::from_str(r#"{"price":66.99}"#).unwrap();
//! assert_eq!(line.price, Decimal::new(6699, 2));
//! ```
//!
//! serde_json hands over a JSON number with a fraction or an exponent as an `f64` (unless its
//! `arbitrary_precision` feature is on, which this module also reads). It is converted through
//! its shortest decimal text, so `66.99` reads as exactly `66.99`, but the scale of `12.00` is
//! lost (`12`), and so are digits beyond an `f64`'s 15 to 17 significant ones. Integers and
//! strings keep every digit. Reading uses `deserialize_any`, so it needs a self-describing
//! format such as JSON.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::de::{self, MapAccess, Unexpected, Visitor};
use serde::{Deserializer, Serializer};

use super::DotNetValueError;

/// The key under which serde_json's `arbitrary_precision` feature hands over a number's text.
const ARBITRARY_PRECISION_KEY: &str = "$serde_json::private::Number";

/// Parses a .NET decimal's text: plain (`"66.99"`, `"-0.5"`, `"12.00"`, scale kept) or scientific
/// (`"1.5E-3"`); surrounding whitespace is ignored.
///
/// ```
/// use ferrybus_dotnet::decimal::parse_decimal;
/// use rust_decimal::Decimal;
///
/// assert_eq!(parse_decimal("12.00").unwrap().to_string(), "12.00");
/// assert_eq!(parse_decimal("1.5E-3").unwrap(), Decimal::new(15, 4));
/// assert!(parse_decimal("twelve").is_err());
/// ```
pub fn parse_decimal(text: &str) -> Result<Decimal, DotNetValueError> {
    let trimmed = text.trim();
    Decimal::from_str(trimmed)
        .or_else(|_| Decimal::from_scientific(trimmed))
        .map_err(|_| DotNetValueError::Decimal(text.to_owned()))
}

/// Writes `value` as a JSON string, as its `Display` text: the scale is kept (`"12.00"`).
///
/// ```
/// use rust_decimal::Decimal;
///
/// let mut out = Vec::new();
/// ferrybus_dotnet::decimal::serialize(
///     &Decimal::new(6699, 2),
///     &mut serde_json::Serializer::new(&mut out),
/// )
/// .unwrap();
/// assert_eq!(out, br#""66.99""#);
/// ```
pub fn serialize<S: Serializer>(value: &Decimal, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// Reads a decimal from a JSON string (see [`parse_decimal`]) or a JSON number.
///
/// ```
/// use rust_decimal::Decimal;
///
/// let mut json = serde_json::Deserializer::from_str(r#""66.99""#);
/// let value = ferrybus_dotnet::decimal::deserialize(&mut json).unwrap();
/// assert_eq!(value, Decimal::new(6699, 2));
///
/// let mut json = serde_json::Deserializer::from_str("66.99");
/// let value = ferrybus_dotnet::decimal::deserialize(&mut json).unwrap();
/// assert_eq!(value, Decimal::new(6699, 2));
/// ```
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Decimal, D::Error> {
    deserializer.deserialize_any(DecimalVisitor)
}

struct DecimalVisitor;

impl<'de> Visitor<'de> for DecimalVisitor {
    type Value = Decimal;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a .NET decimal as a string such as \"66.99\" or a number")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Decimal, E> {
        parse_decimal(text).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Decimal, E> {
        Ok(Decimal::from(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Decimal, E> {
        Ok(Decimal::from(value))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Decimal, E> {
        Decimal::try_from_i128_with_scale(value, 0)
            .map_err(|_| E::custom(DotNetValueError::Decimal(value.to_string())))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Decimal, E> {
        i128::try_from(value)
            .map_err(|_| E::custom(DotNetValueError::Decimal(value.to_string())))
            .and_then(|value| self.visit_i128(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Decimal, E> {
        // `f64`'s `Display` is the shortest text that reads back as the same `f64`, and never
        // uses an exponent: 66.99 is "66.99", not the exact binary value
        // 66.9899999999999948840923025272786617279052734375.
        let text = value.to_string();
        Decimal::from_str(&text).map_err(|_| E::custom(DotNetValueError::Decimal(text)))
    }

    /// serde_json with `arbitrary_precision` hands a number over as a one-entry map holding its
    /// text.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decimal, A::Error> {
        match map.next_key::<String>()? {
            Some(key) if key == ARBITRARY_PRECISION_KEY => {
                let text: String = map.next_value()?;
                parse_decimal(&text).map_err(de::Error::custom)
            }
            _ => Err(de::Error::invalid_type(Unexpected::Map, &self)),
        }
    }
}

/// `Option<Decimal>`: `None` is written as `null`; `null` reads as `None`, anything else as
/// [`deserialize`] reads it.
///
/// ```
/// use rust_decimal::Decimal;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Line {
///     #[serde(default, with = "ferrybus_dotnet::decimal::option")]
///     discount: Option<Decimal>,
/// }
///
/// let line = Line { discount: Some(Decimal::new(5, 1)) };
/// assert_eq!(serde_json::to_string(&line).unwrap(), r#"{"discount":"0.5"}"#);
/// let line: Line = serde_json::from_str("{}").unwrap();
/// assert_eq!(line.discount, None);
/// ```
pub mod option {
    use rust_decimal::Decimal;

    crate::option_of_parent!(Decimal);
}

#[cfg(test)]
mod tests {
    use rust_decimal::Decimal;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Payload {
        #[serde(with = "super")]
        value: Decimal,
        #[serde(default, with = "super::option")]
        maybe: Option<Decimal>,
    }

    fn write(value: Decimal) -> String {
        serde_json::to_string(&Payload { value, maybe: None }).unwrap()
    }

    fn read(json: &str) -> Result<Decimal, String> {
        serde_json::from_str::<Payload>(&format!(r#"{{"value":{json}}}"#))
            .map(|payload| payload.value)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn writes_strings_keeping_the_scale() {
        assert_eq!(
            write(Decimal::new(6699, 2)),
            r#"{"value":"66.99","maybe":null}"#
        );
        assert_eq!(write(Decimal::ZERO), r#"{"value":"0","maybe":null}"#);
        assert_eq!(
            write(Decimal::new(1200, 2)),
            r#"{"value":"12.00","maybe":null}"#
        );
        assert_eq!(
            write(Decimal::new(-5, 1)),
            r#"{"value":"-0.5","maybe":null}"#
        );
        assert_eq!(
            write(Decimal::MAX),
            r#"{"value":"79228162514264337593543950335","maybe":null}"#
        );
        assert_eq!(
            write(Decimal::new(1, 28)),
            r#"{"value":"0.0000000000000000000000000001","maybe":null}"#
        );
    }

    #[test]
    fn reads_strings_keeping_the_scale() {
        assert_eq!(read(r#""66.99""#).unwrap().to_string(), "66.99");
        assert_eq!(read(r#""12.00""#).unwrap().to_string(), "12.00");
        assert_eq!(read(r#""0""#).unwrap(), Decimal::ZERO);
        assert_eq!(read(r#""-0.5""#).unwrap(), Decimal::new(-5, 1));
        assert_eq!(read(r#"" 66.99 ""#).unwrap(), Decimal::new(6699, 2));
        assert_eq!(read(r#""1.5E-3""#).unwrap(), Decimal::new(15, 4));
        assert_eq!(read(r#""1e5""#).unwrap(), Decimal::from(100_000));
    }

    #[test]
    fn reads_numbers() {
        assert_eq!(read("66.99").unwrap().to_string(), "66.99");
        assert_eq!(read("0.1").unwrap().to_string(), "0.1");
        assert_eq!(read("12.00").unwrap().to_string(), "12");
        assert_eq!(read("0").unwrap(), Decimal::ZERO);
        assert_eq!(read("-42").unwrap(), Decimal::from(-42));
        assert_eq!(
            read("18446744073709551615").unwrap(),
            Decimal::from(u64::MAX)
        );
        assert_eq!(read("1e5").unwrap(), Decimal::from(100_000));
        assert_eq!(read("-1.5e-3").unwrap(), Decimal::new(-15, 4));
    }

    #[test]
    fn reads_arbitrary_precision_numbers() {
        // What serde_json hands over for `66.990` with its `arbitrary_precision` feature on.
        assert_eq!(
            read(r#"{"$serde_json::private::Number":"66.990"}"#)
                .unwrap()
                .to_string(),
            "66.990"
        );
        assert!(read(r#"{"amount":"66.990"}"#)
            .unwrap_err()
            .starts_with("invalid type: map"));
    }

    #[test]
    fn round_trips() {
        for text in [
            "66.99",
            "0",
            "12.00",
            "-0.0001",
            "79228162514264337593543950335",
        ] {
            let json = format!(r#"{{"value":"{text}","maybe":"{text}"}}"#);
            let payload: Payload = serde_json::from_str(&json).unwrap();
            assert_eq!(payload.maybe, Some(payload.value));
            assert_eq!(serde_json::to_string(&payload).unwrap(), json);
        }
    }

    #[test]
    fn reports_errors_clearly() {
        assert_eq!(
            parse_decimal("abc"),
            Err(DotNetValueError::Decimal("abc".to_owned()))
        );
        assert_eq!(
            read(r#""abc""#).unwrap_err(),
            r#"invalid .NET decimal "abc": expected a decimal number such as "66.99" at line 1 column 14"#
        );
        assert!(read(r#""""#)
            .unwrap_err()
            .starts_with(r#"invalid .NET decimal """#));
        assert_eq!(
            read("1e30").unwrap_err(),
            r#"invalid .NET decimal "1000000000000000000000000000000": expected a decimal number such as "66.99" at line 1 column 13"#
        );
        assert_eq!(
            read("true").unwrap_err(),
            r#"invalid type: boolean `true`, expected a .NET decimal as a string such as "66.99" or a number at line 1 column 13"#
        );
    }

    #[test]
    fn option_reads_null_missing_and_values() {
        let read = |json: &str| serde_json::from_str::<Payload>(json).unwrap().maybe;
        assert_eq!(read(r#"{"value":"1","maybe":null}"#), None);
        assert_eq!(read(r#"{"value":"1"}"#), None);
        assert_eq!(
            read(r#"{"value":"1","maybe":"12.00"}"#),
            Some(Decimal::new(1200, 2))
        );
        assert_eq!(
            read(r#"{"value":"1","maybe":66.99}"#),
            Some(Decimal::new(6699, 2))
        );
        assert!(serde_json::from_str::<Payload>(r#"{"value":"1","maybe":"x"}"#).is_err());
        let payload = Payload {
            value: Decimal::ONE,
            maybe: Some(Decimal::new(1200, 2)),
        };
        assert_eq!(
            serde_json::to_string(&payload).unwrap(),
            r#"{"value":"1","maybe":"12.00"}"#
        );
    }
}
