//! .NET `DateTime` of UTC kind as `DateTime<Utc>`: written `2025-05-24T18:39:56.3305069Z`, read
//! from any ISO 8601 form .NET writes.
//!
//! Writing gives up to 7 fractional digits (100 ns ticks; finer digits are truncated) with
//! trailing zeros trimmed, none when the fraction is zero, then `Z`, as .NET's round-trip format
//! writes a UTC `DateTime`. Reading converts a time with an offset (what .NET writes for a
//! local-kind `DateTime`) to UTC, and takes a time without a zone (unspecified kind) as UTC.
//!
//! ```
//! use chrono::{DateTime, Utc};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct Shipped {
//!     #[serde(with = "ferrybus_dotnet::datetime")]
//!     shipped_at: DateTime<Utc>,
//! }
//!
//! let json = r#"{"shippedAt":"2021-12-14T18:08:12.9342242+03:00"}"#;
//! let shipped: Shipped = serde_json::from_str(json).unwrap();
//! assert_eq!(
//!     serde_json::to_string(&shipped).unwrap(),
//!     r#"{"shippedAt":"2021-12-14T15:08:12.9342242Z"}"#
//! );
//! ```

use chrono::{DateTime, Utc};
use serde::{ser, Deserializer, Serializer};

use super::{iso, DotNetValueError};

/// Formats `time` as .NET writes a UTC `DateTime`: `yyyy-MM-ddTHH:mm:ss[.fffffff]Z`, the fraction
/// in 100 ns ticks with trailing zeros trimmed and left out when zero.
///
/// A year outside 0000 to 9999 is written with a sign (`+10000-…`), which .NET cannot read;
/// [`serialize`] refuses years outside 0001 to 9999 instead.
///
/// ```
/// use chrono::{DateTime, Utc};
/// use ferrybus_dotnet::datetime::format_datetime;
///
/// let time: DateTime<Utc> = "2025-05-24T18:39:56.330506900Z".parse().unwrap();
/// assert_eq!(format_datetime(&time), "2025-05-24T18:39:56.3305069Z");
/// let time: DateTime<Utc> = "2021-05-14T00:00:00Z".parse().unwrap();
/// assert_eq!(format_datetime(&time), "2021-05-14T00:00:00Z");
/// ```
pub fn format_datetime(time: &DateTime<Utc>) -> String {
    let mut out = String::with_capacity(28);
    iso::write_naive(&mut out, &time.naive_utc());
    out.push('Z');
    out
}

/// Formats `time` as .NET's round-trip format `"O"` writes a UTC `DateTime`:
/// `yyyy-MM-ddTHH:mm:ss.fffffffZ`, always seven fractional digits (100 ns ticks, finer digits
/// truncated). MassTransit writes header timestamps such as `MT-Fault-Timestamp` this way;
/// JSON bodies use [`format_datetime`], which trims trailing zeros as System.Text.Json does.
///
/// ```
/// use chrono::{DateTime, Utc};
/// use ferrybus_dotnet::datetime::format_round_trip;
///
/// let time: DateTime<Utc> = "2025-05-24T18:39:56.330506999Z".parse().unwrap();
/// assert_eq!(format_round_trip(&time), "2025-05-24T18:39:56.3305069Z");
/// let time: DateTime<Utc> = "2021-05-14T00:00:00Z".parse().unwrap();
/// assert_eq!(format_round_trip(&time), "2021-05-14T00:00:00.0000000Z");
/// ```
pub fn format_round_trip(time: &DateTime<Utc>) -> String {
    use chrono::Timelike;
    let ticks = time.nanosecond().min(999_999_999) / 100;
    format!("{}.{ticks:07}Z", time.format("%Y-%m-%dT%H:%M:%S"))
}

/// Parses ISO 8601 text as .NET writes a `DateTime` or `DateTimeOffset`, as a UTC time: `Z` is
/// UTC, an offset is converted to UTC, no zone is taken as UTC.
///
/// Accepted: `yyyy-MM-dd[Thh:mm[:ss[.f…]]][Z|±hh[:mm]]`, the forms System.Text.Json reads, and
/// also `t` or a space between date and time, a lowercase `z` and `±hhmm` offsets. Up to 9
/// fractional digits are kept.
///
/// ```
/// use ferrybus_dotnet::datetime::parse_datetime;
///
/// let utc = parse_datetime("2021-12-14T18:08:12.927").unwrap();
/// assert_eq!(utc.to_rfc3339(), "2021-12-14T18:08:12.927+00:00");
/// let converted = parse_datetime("2018-05-08T07:17:03.6952914+02:00").unwrap();
/// assert_eq!(converted.to_rfc3339(), "2018-05-08T05:17:03.695291400+00:00");
/// assert!(parse_datetime("08/05/2018").is_err());
/// ```
pub fn parse_datetime(text: &str) -> Result<DateTime<Utc>, DotNetValueError> {
    let (time, offset) = iso::parse(text)?;
    let utc = match offset {
        None => time,
        Some(offset) => time
            .checked_sub_offset(offset)
            .ok_or_else(|| DotNetValueError::DateTime(text.to_owned()))?,
    };
    Ok(utc.and_utc())
}

/// Checks that .NET can hold `time`, for [`serialize`].
fn check_range(time: &DateTime<Utc>) -> Result<(), DotNetValueError> {
    if iso::year_in_range(&time.naive_utc()) {
        Ok(())
    } else {
        Err(DotNetValueError::OutOfRange {
            kind: "DateTime",
            value: format_datetime(time),
            range: iso::YEAR_RANGE,
        })
    }
}

/// Writes `time` as a string, as [`format_datetime`] does; a year outside 0001 to 9999 is an
/// error.
pub fn serialize<S: Serializer>(time: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    check_range(time).map_err(ser::Error::custom)?;
    serializer.serialize_str(&format_datetime(time))
}

/// Reads a string as [`parse_datetime`] does.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
    super::deserialize_str(deserializer, "a .NET DateTime string", parse_datetime)
}

/// `Option<DateTime<Utc>>`: `None` is written as `null`; `null` reads as `None`.
///
/// ```
/// use chrono::{DateTime, Utc};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct Shipped {
///     #[serde(default, with = "ferrybus_dotnet::datetime::option")]
///     delivered_at: Option<DateTime<Utc>>,
/// }
///
/// let shipped: Shipped = serde_json::from_str(r#"{"deliveredAt":null}"#).unwrap();
/// assert_eq!(shipped.delivered_at, None);
/// let json = r#"{"deliveredAt":"2021-05-14T00:00:00"}"#;
/// let shipped: Shipped = serde_json::from_str(json).unwrap();
/// assert_eq!(
///     serde_json::to_string(&shipped).unwrap(),
///     r#"{"deliveredAt":"2021-05-14T00:00:00Z"}"#
/// );
/// ```
pub mod option {
    use chrono::{DateTime, Utc};

    crate::option_of_parent!(DateTime<Utc>);
}

/// `Vec<DateTime<Utc>>`: a JSON array, each element in .NET's form.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use chrono::{DateTime, Utc};
///
/// #[derive(Serialize, Deserialize)]
/// struct Values {
///     #[serde(with = "ferrybus_dotnet::datetime::vec")]
///     values: Vec<DateTime<Utc>>,
/// }
///
/// let json = r#"{"values":["2025-05-24T18:39:56.3305069Z","2021-05-14T00:00:00Z"]}"#;
/// let values: Values = serde_json::from_str(json).unwrap();
/// assert_eq!(serde_json::to_string(&values).unwrap(), json);
/// ```
pub mod vec {
    use chrono::{DateTime, Utc};

    crate::vec_of_parent!(DateTime<Utc>);
}

#[cfg(test)]
mod tests {
    use chrono::{NaiveDate, TimeZone, Timelike};
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Payload {
        #[serde(with = "super")]
        at: DateTime<Utc>,
        #[serde(default, with = "super::option")]
        maybe: Option<DateTime<Utc>>,
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn writes_ticks_trimmed_with_z() {
        assert_eq!(
            format_datetime(&utc("2025-05-24T18:39:56.3305069Z")),
            "2025-05-24T18:39:56.3305069Z"
        );
        assert_eq!(
            format_datetime(&utc("2021-05-14T00:00:00Z")),
            "2021-05-14T00:00:00Z"
        );
        assert_eq!(
            format_datetime(&utc("2021-12-14T18:08:12.927Z")),
            "2021-12-14T18:08:12.927Z"
        );
        assert_eq!(
            format_datetime(&utc("2021-12-14T18:08:12.5Z")),
            "2021-12-14T18:08:12.5Z"
        );
        // Nanoseconds below a tick are truncated, not rounded.
        assert_eq!(
            format_datetime(&utc("2021-12-14T18:08:12.123456789Z")),
            "2021-12-14T18:08:12.1234567Z"
        );
        assert_eq!(
            format_datetime(&utc("2021-12-14T18:08:12.000000099Z")),
            "2021-12-14T18:08:12Z"
        );
        assert_eq!(
            format_datetime(&utc("0001-01-01T00:00:00Z")),
            "0001-01-01T00:00:00Z"
        );
        assert_eq!(
            format_datetime(&utc("9999-12-31T23:59:59.9999999Z")),
            "9999-12-31T23:59:59.9999999Z"
        );
    }

    #[test]
    fn writes_a_leap_second_as_the_last_tick() {
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_500_000_000)
            .unwrap()
            .and_utc();
        assert_eq!(format_datetime(&leap), "2016-12-31T23:59:59.9999999Z");
    }

    #[test]
    fn reads_utc_offsets_and_unspecified() {
        assert_eq!(
            parse_datetime("2025-05-24T18:39:56.3305069Z").unwrap(),
            utc("2025-05-24T18:39:56.3305069Z")
        );
        assert_eq!(
            parse_datetime("2021-05-14T00:00:00").unwrap(),
            Utc.with_ymd_and_hms(2021, 5, 14, 0, 0, 0).unwrap()
        );
        assert_eq!(
            parse_datetime("2021-12-14T18:08:12.927").unwrap(),
            utc("2021-12-14T18:08:12.927Z")
        );
        assert_eq!(
            parse_datetime("2021-12-14T18:08:12.9342242+03:00").unwrap(),
            utc("2021-12-14T15:08:12.9342242Z")
        );
        assert_eq!(
            parse_datetime("2021-12-14T23:30:00-02:30").unwrap(),
            utc("2021-12-15T02:00:00Z")
        );
        assert_eq!(
            parse_datetime("2021-05-14").unwrap(),
            utc("2021-05-14T00:00:00Z")
        );
        assert_eq!(
            parse_datetime("2021-05-14T10:32").unwrap(),
            utc("2021-05-14T10:32:00Z")
        );
        assert_eq!(
            parse_datetime("2021-05-14T10:32:05.123456789Z")
                .unwrap()
                .nanosecond(),
            123_456_789
        );
    }

    #[test]
    fn round_trips_what_dotnet_writes() {
        for text in [
            "2025-05-24T18:39:56.3305069Z",
            "2021-05-14T00:00:00Z",
            "2021-12-14T18:08:12.927Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.9999999Z",
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
            parse_datetime("2021-13-01T00:00:00Z"),
            Err(DotNetValueError::DateTime(
                "2021-13-01T00:00:00Z".to_owned()
            ))
        );
        let error = serde_json::from_str::<Payload>(r#"{"at":"soon"}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"invalid .NET DateTime "soon": expected ISO 8601 yyyy-MM-ddTHH:mm[:ss[.fffffff]][Z|±hh:mm] at line 1 column 12"#
        );
        let error = serde_json::from_str::<Payload>(r#"{"at":1620950400}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid type: integer `1620950400`, expected a .NET DateTime string at line 1 column 16"
        );
    }

    #[test]
    fn refuses_to_write_years_dotnet_cannot_hold() {
        let far = Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(format_datetime(&far), "+10000-01-01T00:00:00Z");
        let error = serde_json::to_string(&Payload {
            at: far,
            maybe: None,
        })
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "+10000-01-01T00:00:00Z is out of range for a .NET DateTime (years 0001 to 9999)"
        );
        let zero = Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).unwrap();
        let error = serde_json::to_string(&Payload {
            at: zero,
            maybe: Some(zero),
        })
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "0000-01-01T00:00:00Z is out of range for a .NET DateTime (years 0001 to 9999)"
        );
    }

    #[test]
    fn option_reads_null_missing_and_values() {
        let read = |json: &str| serde_json::from_str::<Payload>(json).unwrap().maybe;
        let at = r#""at":"2021-05-14T00:00:00Z""#;
        assert_eq!(read(&format!("{{{at}}}")), None);
        assert_eq!(read(&format!(r#"{{{at},"maybe":null}}"#)), None);
        assert_eq!(
            read(&format!(r#"{{{at},"maybe":"2021-05-14T02:00:00+02:00"}}"#)),
            Some(utc("2021-05-14T00:00:00Z"))
        );
        let payload = Payload {
            at: utc("2021-05-14T00:00:00Z"),
            maybe: None,
        };
        assert_eq!(
            serde_json::to_string(&payload).unwrap(),
            r#"{"at":"2021-05-14T00:00:00Z","maybe":null}"#
        );
    }
}
