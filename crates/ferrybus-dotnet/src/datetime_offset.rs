//! .NET `DateTimeOffset` as `DateTime<FixedOffset>`: written with its offset,
//! `2018-05-08T07:17:03.6952914+02:00`, and `+00:00` rather than `Z` for UTC.
//!
//! Writing gives up to 7 fractional digits (100 ns ticks; finer digits are truncated) with
//! trailing zeros trimmed, none when the fraction is zero. Reading takes any ISO 8601 form .NET
//! writes: `Z` reads as `+00:00`, and a time without a zone as `+00:00` too (.NET would take the
//! reading machine's local offset; this module stays machine-independent).
//!
//! ```
//! use chrono::{DateTime, FixedOffset};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct Booked {
//!     #[serde(with = "ferrybus_dotnet::datetime_offset")]
//!     starts_at: DateTime<FixedOffset>,
//! }
//!
//! let json = r#"{"startsAt":"2018-05-08T07:17:03.6952914+02:00"}"#;
//! let booked: Booked = serde_json::from_str(json).unwrap();
//! assert_eq!(booked.starts_at.offset().local_minus_utc(), 7200);
//! assert_eq!(
//!     serde_json::to_string(&booked).unwrap(),
//!     r#"{"startsAt":"2018-05-08T07:17:03.6952914+02:00"}"#
//! );
//! ```

use chrono::{DateTime, FixedOffset, Offset, Utc};
use serde::{ser, Deserializer, Serializer};

use super::{iso, DotNetValueError};

/// The largest offset .NET's `DateTimeOffset` holds, in seconds (14 hours).
const MAX_OFFSET_SECONDS: i32 = 14 * 3600;

/// Formats `time` as .NET writes a `DateTimeOffset`:
/// `yyyy-MM-ddTHH:mm:ss[.fffffff]±hh:mm`, the fraction in 100 ns ticks with trailing zeros
/// trimmed and left out when zero, and a zero offset written `+00:00`.
///
/// Values .NET cannot hold still get text ([`serialize`] refuses them): an offset that is not a
/// whole number of minutes is written `±hh:mm:ss`, and a year outside 0000 to 9999 with a sign.
///
/// ```
/// use chrono::DateTime;
/// use ferrybus_dotnet::datetime_offset::format_datetime_offset;
///
/// let time = DateTime::parse_from_rfc3339("2018-05-08T07:17:03.695291400+02:00").unwrap();
/// assert_eq!(format_datetime_offset(&time), "2018-05-08T07:17:03.6952914+02:00");
/// let time = DateTime::parse_from_rfc3339("2021-05-14T00:00:00Z").unwrap();
/// assert_eq!(format_datetime_offset(&time), "2021-05-14T00:00:00+00:00");
/// ```
pub fn format_datetime_offset(time: &DateTime<FixedOffset>) -> String {
    let mut out = String::with_capacity(33);
    iso::write_naive(&mut out, &time.naive_local());
    iso::write_offset(&mut out, time.offset());
    out
}

/// Parses ISO 8601 text as .NET writes a `DateTimeOffset` or `DateTime`, keeping the written
/// offset; `Z` and a missing zone both read as `+00:00`.
///
/// Accepted: `yyyy-MM-dd[Thh:mm[:ss[.f…]]][Z|±hh[:mm]]`, the forms System.Text.Json reads, and
/// also `t` or a space between date and time, a lowercase `z` and `±hhmm` offsets. Up to 9
/// fractional digits are kept.
///
/// ```
/// use ferrybus_dotnet::datetime_offset::parse_datetime_offset;
///
/// let time = parse_datetime_offset("2018-05-08T07:17:03.6952914+02:00").unwrap();
/// assert_eq!(time.to_rfc3339(), "2018-05-08T07:17:03.695291400+02:00");
/// let time = parse_datetime_offset("2021-05-14T00:00:00Z").unwrap();
/// assert_eq!(time.to_rfc3339(), "2021-05-14T00:00:00+00:00");
/// let time = parse_datetime_offset("2021-05-14T00:00:00").unwrap();
/// assert_eq!(time.to_rfc3339(), "2021-05-14T00:00:00+00:00");
/// ```
pub fn parse_datetime_offset(text: &str) -> Result<DateTime<FixedOffset>, DotNetValueError> {
    let (time, offset) = iso::parse(text)?;
    let offset = offset.unwrap_or(Utc.fix());
    let utc = time
        .checked_sub_offset(offset)
        .ok_or_else(|| DotNetValueError::DateTime(text.to_owned()))?;
    Ok(DateTime::from_naive_utc_and_offset(utc, offset))
}

/// Checks that .NET can hold `time`, for [`serialize`].
fn check_range(time: &DateTime<FixedOffset>) -> Result<(), DotNetValueError> {
    let offset = time.offset().local_minus_utc();
    if offset % 60 != 0 || offset.abs() > MAX_OFFSET_SECONDS {
        let mut value = String::from("offset ");
        iso::write_offset(&mut value, time.offset());
        return Err(DotNetValueError::OutOfRange {
            kind: "DateTimeOffset",
            value,
            range: "offsets in whole minutes, -14:00 to +14:00",
        });
    }
    if !iso::year_in_range(&time.naive_local()) || !iso::year_in_range(&time.naive_utc()) {
        return Err(DotNetValueError::OutOfRange {
            kind: "DateTimeOffset",
            value: format_datetime_offset(time),
            range: "years 0001 to 9999, in UTC and at the offset",
        });
    }
    Ok(())
}

/// Writes `time` as a string, as [`format_datetime_offset`] does; an offset that is not whole
/// minutes or beyond ±14:00, or a year outside 0001 to 9999, is an error.
pub fn serialize<S: Serializer>(
    time: &DateTime<FixedOffset>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    check_range(time).map_err(ser::Error::custom)?;
    serializer.serialize_str(&format_datetime_offset(time))
}

/// Reads a string as [`parse_datetime_offset`] does.
pub fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<DateTime<FixedOffset>, D::Error> {
    super::deserialize_str(
        deserializer,
        "a .NET DateTimeOffset string",
        parse_datetime_offset,
    )
}

/// `Option<DateTime<FixedOffset>>`: `None` is written as `null`; `null` reads as `None`.
///
/// ```
/// use chrono::{DateTime, FixedOffset};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct Booked {
///     #[serde(default, with = "ferrybus_dotnet::datetime_offset::option")]
///     cancelled_at: Option<DateTime<FixedOffset>>,
/// }
///
/// let booked: Booked = serde_json::from_str("{}").unwrap();
/// assert_eq!(booked.cancelled_at, None);
/// let booked: Booked = serde_json::from_str(r#"{"cancelledAt":"2021-05-14T00:00:00Z"}"#).unwrap();
/// assert_eq!(
///     serde_json::to_string(&booked).unwrap(),
///     r#"{"cancelledAt":"2021-05-14T00:00:00+00:00"}"#
/// );
/// ```
pub mod option {
    use chrono::{DateTime, FixedOffset};

    crate::option_of_parent!(DateTime<FixedOffset>);
}

/// `Vec<DateTime<FixedOffset>>`: a JSON array, each element in .NET's form.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use chrono::{DateTime, FixedOffset};
///
/// #[derive(Serialize, Deserialize)]
/// struct Values {
///     #[serde(with = "ferrybus_dotnet::datetime_offset::vec")]
///     values: Vec<DateTime<FixedOffset>>,
/// }
///
/// let json = r#"{"values":["2018-05-08T07:17:03.6952914+02:00"]}"#;
/// let values: Values = serde_json::from_str(json).unwrap();
/// assert_eq!(serde_json::to_string(&values).unwrap(), json);
/// ```
pub mod vec {
    use chrono::{DateTime, FixedOffset};

    crate::vec_of_parent!(DateTime<FixedOffset>);
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Timelike};
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Payload {
        #[serde(with = "super")]
        at: DateTime<FixedOffset>,
        #[serde(default, with = "super::option")]
        maybe: Option<DateTime<FixedOffset>>,
    }

    fn rfc3339(text: &str) -> DateTime<FixedOffset> {
        DateTime::parse_from_rfc3339(text).unwrap()
    }

    fn offset_of(text: &str) -> i32 {
        parse_datetime_offset(text)
            .unwrap()
            .offset()
            .local_minus_utc()
    }

    #[test]
    fn writes_the_offset_never_z() {
        assert_eq!(
            format_datetime_offset(&rfc3339("2018-05-08T07:17:03.6952914+02:00")),
            "2018-05-08T07:17:03.6952914+02:00"
        );
        assert_eq!(
            format_datetime_offset(&rfc3339("2021-05-14T00:00:00Z")),
            "2021-05-14T00:00:00+00:00"
        );
        assert_eq!(
            format_datetime_offset(&rfc3339("2021-05-14T00:00:00.120-05:30")),
            "2021-05-14T00:00:00.12-05:30"
        );
        assert_eq!(
            format_datetime_offset(&rfc3339("2021-05-14T00:00:00.999999999+14:00")),
            "2021-05-14T00:00:00.9999999+14:00"
        );
    }

    #[test]
    fn reads_offsets_z_and_unspecified() {
        assert_eq!(
            parse_datetime_offset("2018-05-08T07:17:03.6952914+02:00").unwrap(),
            rfc3339("2018-05-08T07:17:03.6952914+02:00")
        );
        assert_eq!(offset_of("2018-05-08T07:17:03.6952914+02:00"), 7200);
        assert_eq!(offset_of("2018-05-08T07:17:03-05:00"), -18000);
        assert_eq!(offset_of("2018-05-08T07:17:03Z"), 0);
        assert_eq!(offset_of("2018-05-08T07:17:03"), 0);
        assert_eq!(offset_of("2018-05-08T07:17:03+00:00"), 0);
        let time = parse_datetime_offset("2018-05-08T07:17:03.5-05").unwrap();
        assert_eq!(time.naive_local().to_string(), "2018-05-08 07:17:03.500");
        assert_eq!(time.nanosecond(), 500_000_000);
    }

    #[test]
    fn round_trips_what_dotnet_writes() {
        for text in [
            "2018-05-08T07:17:03.6952914+02:00",
            "2021-05-14T00:00:00+00:00",
            "2021-12-14T18:08:12.927-03:30",
            "0001-01-01T00:00:00+00:00",
            "9999-12-31T23:59:59.9999999+00:00",
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
            parse_datetime_offset("2018-05-08T07:17:03+2:00"),
            Err(DotNetValueError::DateTime(
                "2018-05-08T07:17:03+2:00".to_owned()
            ))
        );
        let error = serde_json::from_str::<Payload>(r#"{"at":"later"}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"invalid .NET DateTime "later": expected ISO 8601 yyyy-MM-ddTHH:mm[:ss[.fffffff]][Z|±hh:mm] at line 1 column 13"#
        );
        let error = serde_json::from_str::<Payload>(r#"{"at":null}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid type: null, expected a .NET DateTimeOffset string at line 1 column 10"
        );
    }

    #[test]
    fn refuses_to_write_what_dotnet_cannot_hold() {
        let write = |at| {
            serde_json::to_string(&Payload { at, maybe: None })
                .unwrap_err()
                .to_string()
        };
        let seconds = FixedOffset::east_opt(19815).unwrap();
        let odd = seconds.with_ymd_and_hms(2021, 5, 14, 0, 0, 0).unwrap();
        assert_eq!(format_datetime_offset(&odd), "2021-05-14T00:00:00+05:30:15");
        assert_eq!(
            write(odd),
            "offset +05:30:15 is out of range for a .NET DateTimeOffset (offsets in whole minutes, -14:00 to +14:00)"
        );
        let far = FixedOffset::west_opt(15 * 3600).unwrap();
        assert_eq!(
            write(far.with_ymd_and_hms(2021, 5, 14, 0, 0, 0).unwrap()),
            "offset -15:00 is out of range for a .NET DateTimeOffset (offsets in whole minutes, -14:00 to +14:00)"
        );
        // 0001-01-01T00:00 at +01:00 is still year 0 in UTC.
        let early = FixedOffset::east_opt(3600).unwrap();
        assert_eq!(
            write(early.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap()),
            "0001-01-01T00:00:00+01:00 is out of range for a .NET DateTimeOffset (years 0001 to 9999, in UTC and at the offset)"
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
            Some(rfc3339("2021-05-14T02:00:00+02:00"))
        );
        let payload = Payload {
            at: rfc3339("2021-05-14T00:00:00Z"),
            maybe: Some(rfc3339("2021-05-14T02:00:00+02:00")),
        };
        assert_eq!(
            serde_json::to_string(&payload).unwrap(),
            r#"{"at":"2021-05-14T00:00:00+00:00","maybe":"2021-05-14T02:00:00+02:00"}"#
        );
    }
}
