//! .NET `DateTime` of unspecified kind as [`NaiveDateTime`]: written without a zone,
//! `2021-12-14T18:08:12.927`.
//!
//! Use it for wall-clock times that .NET code keeps without a zone (dates of birth, business
//! dates, `DateTime`s read from a database). Writing gives up to 7 fractional digits (100 ns
//! ticks; finer digits are truncated) with trailing zeros trimmed, none when the fraction is
//! zero, and no suffix.
//!
//! Reading a time without a zone keeps it as written. A time with `Z` or an offset is converted to
//! UTC wall-clock time (`2021-05-14T02:00:00+02:00` reads as `2021-05-14T00:00:00`): .NET would
//! convert it to the reading machine's local time, which depends on that machine; UTC does not.
//!
//! ```
//! use chrono::NaiveDateTime;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct Customer {
//!     #[serde(with = "ferrybus_dotnet::local_datetime")]
//!     born_on: NaiveDateTime,
//! }
//!
//! let customer: Customer = serde_json::from_str(r#"{"bornOn":"1990-05-14T00:00:00"}"#).unwrap();
//! assert_eq!(
//!     serde_json::to_string(&customer).unwrap(),
//!     r#"{"bornOn":"1990-05-14T00:00:00"}"#
//! );
//! ```

use chrono::NaiveDateTime;
use serde::{ser, Deserializer, Serializer};

use super::{iso, DotNetValueError};

/// Formats `time` as .NET writes a `DateTime` of unspecified kind:
/// `yyyy-MM-ddTHH:mm:ss[.fffffff]`, the fraction in 100 ns ticks with trailing zeros trimmed and
/// left out when zero.
///
/// A year outside 0000 to 9999 is written with a sign (`+10000-…`), which .NET cannot read;
/// [`serialize`] refuses years outside 0001 to 9999 instead.
///
/// ```
/// use chrono::NaiveDate;
/// use ferrybus_dotnet::local_datetime::format_local_datetime;
///
/// let time = NaiveDate::from_ymd_opt(2021, 12, 14)
///     .unwrap()
///     .and_hms_milli_opt(18, 8, 12, 927)
///     .unwrap();
/// assert_eq!(format_local_datetime(&time), "2021-12-14T18:08:12.927");
/// ```
pub fn format_local_datetime(time: &NaiveDateTime) -> String {
    let mut out = String::with_capacity(27);
    iso::write_naive(&mut out, time);
    out
}

/// Parses ISO 8601 text as a wall-clock time: kept as written without a zone, converted to UTC
/// with `Z` or an offset.
///
/// Accepted: `yyyy-MM-dd[Thh:mm[:ss[.f…]]][Z|±hh[:mm]]`, the forms System.Text.Json reads, and
/// also `t` or a space between date and time, a lowercase `z` and `±hhmm` offsets. Up to 9
/// fractional digits are kept.
///
/// ```
/// use ferrybus_dotnet::local_datetime::parse_local_datetime;
///
/// let time = parse_local_datetime("2021-12-14T18:08:12.927").unwrap();
/// assert_eq!(time.to_string(), "2021-12-14 18:08:12.927");
/// let time = parse_local_datetime("2021-05-14T02:00:00+02:00").unwrap();
/// assert_eq!(time.to_string(), "2021-05-14 00:00:00");
/// ```
pub fn parse_local_datetime(text: &str) -> Result<NaiveDateTime, DotNetValueError> {
    let (time, offset) = iso::parse(text)?;
    match offset {
        None => Ok(time),
        Some(offset) => time
            .checked_sub_offset(offset)
            .ok_or_else(|| DotNetValueError::DateTime(text.to_owned())),
    }
}

/// Writes `time` as a string, as [`format_local_datetime`] does; a year outside 0001 to 9999 is
/// an error.
pub fn serialize<S: Serializer>(time: &NaiveDateTime, serializer: S) -> Result<S::Ok, S::Error> {
    if !iso::year_in_range(time) {
        return Err(ser::Error::custom(DotNetValueError::OutOfRange {
            kind: "DateTime",
            value: format_local_datetime(time),
            range: iso::YEAR_RANGE,
        }));
    }
    serializer.serialize_str(&format_local_datetime(time))
}

/// Reads a string as [`parse_local_datetime`] does.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<NaiveDateTime, D::Error> {
    super::deserialize_str(deserializer, "a .NET DateTime string", parse_local_datetime)
}

/// `Option<NaiveDateTime>`: `None` is written as `null`; `null` reads as `None`.
///
/// ```
/// use chrono::NaiveDateTime;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct Customer {
///     #[serde(default, with = "ferrybus_dotnet::local_datetime::option")]
///     deceased_on: Option<NaiveDateTime>,
/// }
///
/// let customer: Customer = serde_json::from_str(r#"{"deceasedOn":null}"#).unwrap();
/// assert_eq!(customer.deceased_on, None);
/// assert_eq!(serde_json::to_string(&customer).unwrap(), r#"{"deceasedOn":null}"#);
/// ```
pub mod option {
    use chrono::NaiveDateTime;

    crate::option_of_parent!(NaiveDateTime);
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Payload {
        #[serde(with = "super")]
        at: NaiveDateTime,
        #[serde(default, with = "super::option")]
        maybe: Option<NaiveDateTime>,
    }

    fn naive(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, nano: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d)
            .unwrap()
            .and_hms_nano_opt(h, mi, s, nano)
            .unwrap()
    }

    #[test]
    fn writes_no_suffix() {
        assert_eq!(
            format_local_datetime(&naive(2021, 5, 14, 0, 0, 0, 0)),
            "2021-05-14T00:00:00"
        );
        assert_eq!(
            format_local_datetime(&naive(2021, 12, 14, 18, 8, 12, 927_000_000)),
            "2021-12-14T18:08:12.927"
        );
        assert_eq!(
            format_local_datetime(&naive(2025, 5, 24, 18, 39, 56, 330_506_999)),
            "2025-05-24T18:39:56.3305069"
        );
    }

    #[test]
    fn reads_unspecified_as_written_and_zoned_as_utc() {
        assert_eq!(
            parse_local_datetime("2021-05-14T00:00:00").unwrap(),
            naive(2021, 5, 14, 0, 0, 0, 0)
        );
        assert_eq!(
            parse_local_datetime("2021-12-14T18:08:12.927").unwrap(),
            naive(2021, 12, 14, 18, 8, 12, 927_000_000)
        );
        assert_eq!(
            parse_local_datetime("2025-05-24T18:39:56.3305069Z").unwrap(),
            naive(2025, 5, 24, 18, 39, 56, 330_506_900)
        );
        assert_eq!(
            parse_local_datetime("2021-05-14T01:00:00+02:00").unwrap(),
            naive(2021, 5, 13, 23, 0, 0, 0)
        );
        assert_eq!(
            parse_local_datetime("1990-05-14").unwrap(),
            naive(1990, 5, 14, 0, 0, 0, 0)
        );
    }

    #[test]
    fn round_trips_what_dotnet_writes() {
        for text in [
            "2021-05-14T00:00:00",
            "2021-12-14T18:08:12.927",
            "2025-05-24T18:39:56.3305069",
            "0001-01-01T00:00:00",
            "9999-12-31T23:59:59.9999999",
        ] {
            let json = format!(r#"{{"at":"{text}","maybe":"{text}"}}"#);
            let payload: Payload = serde_json::from_str(&json).unwrap();
            assert_eq!(payload.maybe, Some(payload.at));
            assert_eq!(serde_json::to_string(&payload).unwrap(), json);
        }
    }

    #[test]
    fn reports_errors() {
        assert_eq!(
            parse_local_datetime("14/05/2021"),
            Err(DotNetValueError::DateTime("14/05/2021".to_owned()))
        );
        let error =
            serde_json::from_str::<Payload>(r#"{"at":"2021-05-14T00:00:00+25:00"}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"invalid .NET DateTime "2021-05-14T00:00:00+25:00": expected ISO 8601 yyyy-MM-ddTHH:mm[:ss[.fffffff]][Z|±hh:mm] at line 1 column 33"#
        );
        let far = naive(12345, 1, 1, 0, 0, 0, 0);
        let error = serde_json::to_string(&Payload {
            at: far,
            maybe: None,
        })
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "+12345-01-01T00:00:00 is out of range for a .NET DateTime (years 0001 to 9999)"
        );
    }

    #[test]
    fn option_reads_null_missing_and_values() {
        let read = |json: &str| serde_json::from_str::<Payload>(json).unwrap().maybe;
        let at = r#""at":"2021-05-14T00:00:00""#;
        assert_eq!(read(&format!("{{{at}}}")), None);
        assert_eq!(read(&format!(r#"{{{at},"maybe":null}}"#)), None);
        assert_eq!(
            read(&format!(r#"{{{at},"maybe":"2021-05-14T10:32"}}"#)),
            Some(naive(2021, 5, 14, 10, 32, 0, 0))
        );
        let payload = Payload {
            at: naive(2021, 5, 14, 0, 0, 0, 0),
            maybe: Some(naive(2021, 5, 14, 10, 32, 0, 500_000_000)),
        };
        assert_eq!(
            serde_json::to_string(&payload).unwrap(),
            r#"{"at":"2021-05-14T00:00:00","maybe":"2021-05-14T10:32:00.5"}"#
        );
    }
}
