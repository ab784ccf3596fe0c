//! .NET `TimeSpan` as [`std::time::Duration`] (and as [`chrono::TimeDelta`] in [`signed`]),
//! in .NET's constant (`"c"`) format: `[-][d.]hh:mm:ss[.fffffff]`.
//!
//! System.Text.Json writes a `TimeSpan` with the `"c"` format: days only when there is at least
//! one, and exactly 7 fractional digits (100 ns ticks) when the fraction is not zero:
//! `"00:00:30"`, `"1.02:03:04.5000000"`, `"-00:00:05"`. Writing here does the same, truncating
//! nanoseconds below a tick. Reading takes every form System.Text.Json reads: `d`, `hh:mm`,
//! `d.hh:mm`, `hh:mm:ss`, `d.hh:mm:ss`, each with a leading `-`, and a fraction of 1 to 7 digits
//! after the seconds (`"1.02:03:04.5"`).
//!
//! A `Duration` cannot be negative: reading `"-00:00:05"` into one is an error (use
//! [`signed`]), and so is writing one longer than `TimeSpan.MaxValue`,
//! `10675199.02:48:05.4775807`.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use std::time::Duration;
//!
//! #[derive(Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct Retry {
//!     #[serde(with = "ferrybus_dotnet::timespan")]
//!     delay: Duration,
//! }
//!
//! let retry = Retry { delay: Duration::from_secs(30) };
//! assert_eq!(serde_json::to_string(&retry).unwrap(), r#"{"delay":"00:00:30"}"#);
//! let retry: Retry = serde_json::from_str(r#"{"delay":"1.02:03:04.5"}"#).unwrap();
//! assert_eq!(retry.delay, Duration::new(93_784, 500_000_000));
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use serde::{ser, Deserializer, Serializer};

use super::DotNetValueError;

const TICKS_PER_SECOND: u128 = 10_000_000;
const NANOS_PER_TICK: u128 = 100;
const RANGE: &str = "-10675199.02:48:05.4775808 to 10675199.02:48:05.4775807";

/// Formats a tick count (100 ns) as `[-][d.]hh:mm:ss[.fffffff]`.
fn format_ticks(negative: bool, ticks: u128) -> String {
    let mut out = String::with_capacity(26);
    if negative && ticks != 0 {
        out.push('-');
    }
    let seconds = ticks / TICKS_PER_SECOND;
    let fraction = ticks % TICKS_PER_SECOND;
    let days = seconds / 86_400;
    // Writing to a String cannot fail.
    if days > 0 {
        let _ = write!(out, "{days}.");
    }
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}",
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60
    );
    if fraction != 0 {
        let _ = write!(out, ".{fraction:07}");
    }
    out
}

/// Parses the `"c"` format into a signed tick count within `TimeSpan`'s range.
fn parse_ticks(text: &str) -> Result<i64, DotNetValueError> {
    let invalid = || DotNetValueError::TimeSpan(text.to_owned());
    let (negative, body) = match text.strip_prefix('-') {
        Some(body) => (true, body),
        None => (false, text),
    };
    let (days, hours, minutes, seconds, fraction) = match body.split_once(':') {
        // `d`
        None => (number(body).ok_or_else(invalid)?, 0, 0, 0, 0),
        // `[d.]hh:mm[:ss[.fffffff]]`
        Some((head, tail)) => {
            let (days, hours) = match head.split_once('.') {
                Some((days, hours)) => (number(days), number(hours)),
                None => (Some(0), number(head)),
            };
            let (minutes, rest) = match tail.split_once(':') {
                Some((minutes, rest)) => (minutes, Some(rest)),
                None => (tail, None),
            };
            let (seconds, fraction) = match rest {
                None => (Some(0), Some(0)),
                Some(rest) => match rest.split_once('.') {
                    Some((seconds, fraction)) => (number(seconds), ticks_of_fraction(fraction)),
                    None => (number(rest), Some(0)),
                },
            };
            (
                days.ok_or_else(invalid)?,
                hours.filter(|&h| h < 24).ok_or_else(invalid)?,
                number(minutes).filter(|&m| m < 60).ok_or_else(invalid)?,
                seconds.filter(|&s| s < 60).ok_or_else(invalid)?,
                fraction.ok_or_else(invalid)?,
            )
        }
    };
    let seconds = ((u128::from(days) * 24 + u128::from(hours)) * 60 + u128::from(minutes)) * 60
        + u128::from(seconds);
    let magnitude = seconds * TICKS_PER_SECOND + u128::from(fraction);
    let ticks = if negative {
        // -(i64::MIN) is one more than i64::MAX.
        0i128.checked_sub_unsigned(magnitude)
    } else {
        i128::try_from(magnitude).ok()
    };
    ticks
        .and_then(|ticks| i64::try_from(ticks).ok())
        .ok_or_else(|| DotNetValueError::OutOfRange {
            kind: "TimeSpan",
            value: text.to_owned(),
            range: RANGE,
        })
}

/// One or more ASCII digits, as a number (`None` on overflow).
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// 1 to 7 fractional digits, as ticks.
fn ticks_of_fraction(text: &str) -> Option<u64> {
    if !(1..=7).contains(&text.len()) {
        return None;
    }
    let digits = number(text)?;
    Some(digits * 10u64.pow(7 - text.len() as u32))
}

/// Formats `duration` in .NET's `"c"` format, as System.Text.Json writes a `TimeSpan`:
/// `[d.]hh:mm:ss[.fffffff]`, days only when there is at least one, 7 fractional digits when the
/// fraction (in 100 ns ticks; finer digits are truncated) is not zero.
///
/// Durations beyond `TimeSpan.MaxValue` still get text, which .NET cannot read; [`serialize`]
/// refuses them instead.
///
/// ```
/// use ferrybus_dotnet::timespan::format_timespan;
/// use std::time::Duration;
///
/// assert_eq!(format_timespan(Duration::from_secs(30)), "00:00:30");
/// assert_eq!(format_timespan(Duration::from_millis(500)), "00:00:00.5000000");
/// assert_eq!(format_timespan(Duration::new(93_784, 500_000_000)), "1.02:03:04.5000000");
/// ```
pub fn format_timespan(duration: Duration) -> String {
    format_ticks(false, duration.as_nanos() / NANOS_PER_TICK)
}

/// Parses a non-negative `TimeSpan` in .NET's `"c"` format: `d`, `hh:mm`, `d.hh:mm`,
/// `hh:mm:ss`, `d.hh:mm:ss`, the last two with 1 to 7 fractional digits (`.fffffff`).
///
/// Hours must be below 24, minutes and seconds below 60; no whitespace is allowed. A negative
/// value is [`DotNetValueError::NegativeTimeSpan`] (`"-00:00:00"` reads as zero).
///
/// ```
/// use ferrybus_dotnet::timespan::parse_timespan;
/// use std::time::Duration;
///
/// assert_eq!(parse_timespan("00:00:30").unwrap(), Duration::from_secs(30));
/// assert_eq!(parse_timespan("1.02:03:04.5").unwrap(), Duration::new(93_784, 500_000_000));
/// assert_eq!(parse_timespan("00:00:00.0000001").unwrap(), Duration::from_nanos(100));
/// assert!(parse_timespan("-00:00:05").is_err());
/// assert!(parse_timespan("30s").is_err());
/// ```
pub fn parse_timespan(text: &str) -> Result<Duration, DotNetValueError> {
    let ticks = parse_ticks(text)?;
    let ticks =
        u64::try_from(ticks).map_err(|_| DotNetValueError::NegativeTimeSpan(text.to_owned()))?;
    Ok(Duration::new(
        ticks / TICKS_PER_SECOND as u64,
        (ticks % TICKS_PER_SECOND as u64) as u32 * NANOS_PER_TICK as u32,
    ))
}

/// Writes `duration` as a string, as [`format_timespan`] does; a duration longer than
/// `TimeSpan.MaxValue` (`10675199.02:48:05.4775807`) is an error.
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    let ticks = duration.as_nanos() / NANOS_PER_TICK;
    if ticks > i64::MAX as u128 {
        return Err(ser::Error::custom(DotNetValueError::OutOfRange {
            kind: "TimeSpan",
            value: format_timespan(*duration),
            range: RANGE,
        }));
    }
    serializer.serialize_str(&format_ticks(false, ticks))
}

/// Reads a string as [`parse_timespan`] does.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    super::deserialize_str(deserializer, "a .NET TimeSpan string", parse_timespan)
}

/// `Option<Duration>`: `None` is written as `null`; `null` reads as `None`.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use std::time::Duration;
///
/// #[derive(Serialize, Deserialize)]
/// struct Retry {
///     #[serde(default, with = "ferrybus_dotnet::timespan::option")]
///     timeout: Option<Duration>,
/// }
///
/// let retry: Retry = serde_json::from_str("{}").unwrap();
/// assert_eq!(retry.timeout, None);
/// let retry = Retry { timeout: Some(Duration::from_secs(90)) };
/// assert_eq!(serde_json::to_string(&retry).unwrap(), r#"{"timeout":"00:01:30"}"#);
/// ```
pub mod option {
    use std::time::Duration;

    crate::option_of_parent!(Duration);
}

/// .NET `TimeSpan` as [`chrono::TimeDelta`], which, like `TimeSpan`, may be negative
/// (`"-00:00:05"`).
///
/// Same format as the parent module: `[-][d.]hh:mm:ss[.fffffff]`, 7 fractional digits when not
/// zero, nanoseconds below a tick truncated toward zero.
///
/// ```
/// use chrono::TimeDelta;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Skew {
///     #[serde(with = "ferrybus_dotnet::timespan::signed")]
///     clock_skew: TimeDelta,
/// }
///
/// let skew = Skew { clock_skew: TimeDelta::seconds(-5) };
/// assert_eq!(serde_json::to_string(&skew).unwrap(), r#"{"clock_skew":"-00:00:05"}"#);
/// let skew: Skew = serde_json::from_str(r#"{"clock_skew":"-1.00:00:00.25"}"#).unwrap();
/// assert_eq!(skew.clock_skew, -TimeDelta::days(1) - TimeDelta::milliseconds(250));
/// ```
pub mod signed {
    use chrono::TimeDelta;
    use serde::{ser, Deserializer, Serializer};

    use super::{format_ticks, parse_ticks, NANOS_PER_TICK, RANGE, TICKS_PER_SECOND};
    use crate::DotNetValueError;

    /// The whole ticks in `delta`, truncated toward zero, as a sign and a magnitude.
    fn ticks(delta: TimeDelta) -> (bool, u128) {
        let nanos =
            i128::from(delta.num_seconds()) * 1_000_000_000 + i128::from(delta.subsec_nanos());
        (nanos < 0, nanos.unsigned_abs() / NANOS_PER_TICK)
    }

    /// Formats `delta` in .NET's `"c"` format: `[-][d.]hh:mm:ss[.fffffff]`, days only when
    /// there is at least one, 7 fractional digits when the fraction (in 100 ns ticks, truncated
    /// toward zero) is not zero.
    ///
    /// ```
    /// use chrono::TimeDelta;
    /// use ferrybus_dotnet::timespan::signed::format_timespan;
    ///
    /// assert_eq!(format_timespan(TimeDelta::seconds(-5)), "-00:00:05");
    /// assert_eq!(format_timespan(TimeDelta::milliseconds(-1500)), "-00:00:01.5000000");
    /// assert_eq!(format_timespan(TimeDelta::hours(26)), "1.02:00:00");
    /// ```
    pub fn format_timespan(delta: TimeDelta) -> String {
        let (negative, ticks) = ticks(delta);
        format_ticks(negative, ticks)
    }

    /// Parses a `TimeSpan` in .NET's `"c"` format, negative or not: `d`, `hh:mm`, `d.hh:mm`,
    /// `hh:mm:ss`, `d.hh:mm:ss`, the last two with 1 to 7 fractional digits, each with an
    /// optional leading `-`.
    ///
    /// ```
    /// use chrono::TimeDelta;
    /// use ferrybus_dotnet::timespan::signed::parse_timespan;
    ///
    /// assert_eq!(parse_timespan("-00:00:05").unwrap(), TimeDelta::seconds(-5));
    /// assert_eq!(parse_timespan("1.02:03:04.5").unwrap().num_milliseconds(), 93_784_500);
    /// assert!(parse_timespan("--00:00:05").is_err());
    /// ```
    pub fn parse_timespan(text: &str) -> Result<TimeDelta, DotNetValueError> {
        let ticks = i128::from(parse_ticks(text)?);
        let per_second = TICKS_PER_SECOND as i128;
        // Every TimeSpan fits in a TimeDelta (±292 million years).
        TimeDelta::new(
            ticks.div_euclid(per_second) as i64,
            (ticks.rem_euclid(per_second) * NANOS_PER_TICK as i128) as u32,
        )
        .ok_or_else(|| DotNetValueError::OutOfRange {
            kind: "TimeSpan",
            value: text.to_owned(),
            range: RANGE,
        })
    }

    /// Writes `delta` as a string, as [`format_timespan`] does; a value beyond `TimeSpan`'s range
    /// (about ±29,000 years) is an error.
    pub fn serialize<S: Serializer>(delta: &TimeDelta, serializer: S) -> Result<S::Ok, S::Error> {
        let (negative, ticks) = ticks(*delta);
        let limit = if negative {
            i64::MIN.unsigned_abs()
        } else {
            i64::MAX.unsigned_abs()
        };
        if ticks > u128::from(limit) {
            return Err(ser::Error::custom(DotNetValueError::OutOfRange {
                kind: "TimeSpan",
                value: format_ticks(negative, ticks),
                range: RANGE,
            }));
        }
        serializer.serialize_str(&format_ticks(negative, ticks))
    }

    /// Reads a string as [`parse_timespan`] does.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<TimeDelta, D::Error> {
        crate::deserialize_str(deserializer, "a .NET TimeSpan string", parse_timespan)
    }

    /// `Option<TimeDelta>`: `None` is written as `null`; `null` reads as `None`.
    ///
    /// ```
    /// use chrono::TimeDelta;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Skew {
    ///     #[serde(default, with = "ferrybus_dotnet::timespan::signed::option")]
    ///     clock_skew: Option<TimeDelta>,
    /// }
    ///
    /// let skew: Skew = serde_json::from_str(r#"{"clock_skew":null}"#).unwrap();
    /// assert_eq!(skew.clock_skew, None);
    /// let skew = Skew { clock_skew: Some(TimeDelta::seconds(-5)) };
    /// assert_eq!(serde_json::to_string(&skew).unwrap(), r#"{"clock_skew":"-00:00:05"}"#);
    /// ```
    pub mod option {
        use chrono::TimeDelta;

        crate::option_of_parent!(TimeDelta);
    }

    /// `Vec<TimeDelta>`: a JSON array, each element in .NET's form.
    ///
    /// ```
    /// use chrono::TimeDelta;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Values {
    ///     #[serde(with = "ferrybus_dotnet::timespan::signed::vec")]
    ///     values: Vec<TimeDelta>,
    /// }
    ///
    /// let json = r#"{"values":["-00:00:05","1.02:03:04.5000000"]}"#;
    /// let values: Values = serde_json::from_str(json).unwrap();
    /// assert_eq!(values.values[0], TimeDelta::seconds(-5));
    /// assert_eq!(serde_json::to_string(&values).unwrap(), json);
    /// ```
    pub mod vec {
        use chrono::TimeDelta;

        crate::vec_of_parent!(TimeDelta);
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Payload {
        #[serde(with = "super")]
        duration: Duration,
        #[serde(default, with = "super::option")]
        maybe: Option<Duration>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct SignedPayload {
        #[serde(with = "super::signed")]
        delta: TimeDelta,
        #[serde(default, with = "super::signed::option")]
        maybe: Option<TimeDelta>,
    }

    const MAX: Duration = Duration::new(922_337_203_685, 477_580_700);

    #[test]
    fn formats_like_dotnet_c() {
        assert_eq!(format_timespan(Duration::ZERO), "00:00:00");
        assert_eq!(format_timespan(Duration::from_secs(30)), "00:00:30");
        assert_eq!(
            format_timespan(Duration::from_millis(500)),
            "00:00:00.5000000"
        );
        assert_eq!(
            format_timespan(Duration::from_nanos(100)),
            "00:00:00.0000001"
        );
        // Below a tick: truncated.
        assert_eq!(format_timespan(Duration::from_nanos(99)), "00:00:00");
        assert_eq!(
            format_timespan(Duration::from_nanos(1_999)),
            "00:00:00.0000019"
        );
        assert_eq!(format_timespan(Duration::from_secs(86_399)), "23:59:59");
        assert_eq!(format_timespan(Duration::from_secs(86_400)), "1.00:00:00");
        assert_eq!(
            format_timespan(Duration::new(93_784, 500_000_000)),
            "1.02:03:04.5000000"
        );
        assert_eq!(
            format_timespan(Duration::from_secs(400 * 86_400)),
            "400.00:00:00"
        );
        assert_eq!(format_timespan(MAX), "10675199.02:48:05.4775807");
    }

    #[test]
    fn formats_signed_like_dotnet_c() {
        use signed::format_timespan;
        assert_eq!(format_timespan(TimeDelta::zero()), "00:00:00");
        assert_eq!(format_timespan(TimeDelta::seconds(-5)), "-00:00:05");
        assert_eq!(format_timespan(TimeDelta::seconds(5)), "00:00:05");
        assert_eq!(
            format_timespan(TimeDelta::milliseconds(-500)),
            "-00:00:00.5000000"
        );
        assert_eq!(
            format_timespan(-(TimeDelta::seconds(93_784) + TimeDelta::milliseconds(500))),
            "-1.02:03:04.5000000"
        );
        // Truncated toward zero, and no "-" left on a zero.
        assert_eq!(
            format_timespan(TimeDelta::nanoseconds(-150)),
            "-00:00:00.0000001"
        );
        assert_eq!(format_timespan(TimeDelta::nanoseconds(-99)), "00:00:00");
        assert_eq!(
            format_timespan(TimeDelta::new(-922_337_203_686, 522_419_200).unwrap()),
            "-10675199.02:48:05.4775808"
        );
    }

    #[test]
    fn parses_every_form_system_text_json_reads() {
        let ok = |text: &str| parse_timespan(text).unwrap();
        assert_eq!(ok("00:00:30"), Duration::from_secs(30));
        assert_eq!(ok("1.02:03:04.5"), Duration::new(93_784, 500_000_000));
        assert_eq!(ok("1.02:03:04.5000000"), Duration::new(93_784, 500_000_000));
        assert_eq!(ok("00:00:00.0000001"), Duration::from_nanos(100));
        assert_eq!(ok("00:00:00.123"), Duration::from_millis(123));
        assert_eq!(
            ok("12:34:56"),
            Duration::from_secs(12 * 3600 + 34 * 60 + 56)
        );
        // `d`, `hh:mm` and `d.hh:mm`.
        assert_eq!(ok("3"), Duration::from_secs(3 * 86_400));
        assert_eq!(ok("02:03"), Duration::from_secs(2 * 3600 + 3 * 60));
        assert_eq!(
            ok("1.02:03"),
            Duration::from_secs(86_400 + 2 * 3600 + 3 * 60)
        );
        // One-digit components, as .NET allows.
        assert_eq!(ok("1:2:3"), Duration::from_secs(3723));
        assert_eq!(ok("-00:00:00"), Duration::ZERO);
        assert_eq!(ok("10675199.02:48:05.4775807"), MAX);
    }

    #[test]
    fn parses_signed() {
        use signed::parse_timespan;
        let ok = |text: &str| parse_timespan(text).unwrap();
        assert_eq!(ok("-00:00:05"), TimeDelta::seconds(-5));
        assert_eq!(ok("00:00:05"), TimeDelta::seconds(5));
        assert_eq!(ok("-00:00:00.5"), TimeDelta::milliseconds(-500));
        assert_eq!(ok("-00:00:00.0000001"), TimeDelta::nanoseconds(-100));
        assert_eq!(
            ok("-1.02:03:04.5"),
            -(TimeDelta::seconds(93_784) + TimeDelta::milliseconds(500))
        );
        assert_eq!(ok("-3"), TimeDelta::days(-3));
        assert_eq!(
            ok("-10675199.02:48:05.4775808"),
            TimeDelta::new(-922_337_203_686, 522_419_200).unwrap()
        );
        assert_eq!(
            parse_timespan("-10675199.02:48:05.4775809"),
            Err(DotNetValueError::OutOfRange {
                kind: "TimeSpan",
                value: "-10675199.02:48:05.4775809".to_owned(),
                range: RANGE,
            })
        );
    }

    #[test]
    fn rejects_malformed_text() {
        for text in [
            "",
            "-",
            "30s",
            " 00:00:30",
            "00:00:30 ",
            "+00:00:30",
            "--00:00:30",
            "00:00:",
            ":00:30",
            "00::30",
            "00:00:30.",
            "00:00:30.12345678",
            "00:00:30.5a",
            "00:00.5",
            "1.02",
            "1.02:03:04:05",
            "1.02:03:04.5.6",
            "24:00:00",
            "00:60:00",
            "00:00:60",
            "1.24:00:00",
            "PT30S",
            "0x10",
            "١:٠٠:٠٠",
        ] {
            assert_eq!(
                parse_timespan(text),
                Err(DotNetValueError::TimeSpan(text.to_owned())),
                "{text:?}"
            );
            assert_eq!(
                signed::parse_timespan(text),
                Err(DotNetValueError::TimeSpan(text.to_owned())),
                "{text:?}"
            );
        }
    }

    #[test]
    fn rejects_negative_and_out_of_range() {
        assert_eq!(
            parse_timespan("-00:00:05"),
            Err(DotNetValueError::NegativeTimeSpan("-00:00:05".to_owned()))
        );
        assert_eq!(
            parse_timespan("-00:00:05").unwrap_err().to_string(),
            r#"invalid .NET TimeSpan "-00:00:05": negative, but std::time::Duration cannot be (use dotnet::timespan::signed)"#
        );
        assert_eq!(
            parse_timespan("10675199.02:48:05.4775808")
                .unwrap_err()
                .to_string(),
            "10675199.02:48:05.4775808 is out of range for a .NET TimeSpan \
             (-10675199.02:48:05.4775808 to 10675199.02:48:05.4775807)"
        );
        assert!(matches!(
            parse_timespan("99999999999999999999.00:00:00"),
            Err(DotNetValueError::TimeSpan(_))
        ));
        assert!(matches!(
            parse_timespan("18446744073709551615.00:00:00"),
            Err(DotNetValueError::OutOfRange { .. })
        ));
    }

    #[test]
    fn round_trips_what_dotnet_writes() {
        for text in [
            "00:00:00",
            "00:00:30",
            "00:00:00.5000000",
            "1.02:03:04.5000000",
            "23:59:59.9999999",
            "10675199.02:48:05.4775807",
        ] {
            let json = format!(r#"{{"duration":"{text}","maybe":"{text}"}}"#);
            let payload: Payload = serde_json::from_str(&json).unwrap();
            assert_eq!(payload.maybe, Some(payload.duration));
            assert_eq!(serde_json::to_string(&payload).unwrap(), json);
        }
        for text in [
            "-00:00:05",
            "00:00:05",
            "-1.02:03:04.5000000",
            "-00:00:00.0000001",
            "-10675199.02:48:05.4775808",
            "10675199.02:48:05.4775807",
        ] {
            let json = format!(r#"{{"delta":"{text}","maybe":"{text}"}}"#);
            let payload: SignedPayload = serde_json::from_str(&json).unwrap();
            assert_eq!(payload.maybe, Some(payload.delta));
            assert_eq!(serde_json::to_string(&payload).unwrap(), json);
        }
    }

    #[test]
    fn refuses_to_write_beyond_timespan() {
        let too_long = MAX + Duration::from_nanos(100);
        let error = serde_json::to_string(&Payload {
            duration: too_long,
            maybe: None,
        })
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "10675199.02:48:05.4775808 is out of range for a .NET TimeSpan \
             (-10675199.02:48:05.4775808 to 10675199.02:48:05.4775807)"
        );
        // The last tick of a too-long duration is dropped, not rounded up into range.
        assert!(serde_json::to_string(&Payload {
            duration: MAX + Duration::from_nanos(99),
            maybe: None
        })
        .is_ok());
        let error = serde_json::to_string(&SignedPayload {
            delta: TimeDelta::days(-10_675_200),
            maybe: None,
        })
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "-10675200.00:00:00 is out of range for a .NET TimeSpan \
             (-10675199.02:48:05.4775808 to 10675199.02:48:05.4775807)"
        );
    }

    #[test]
    fn reports_wrong_types() {
        let error = serde_json::from_str::<Payload>(r#"{"duration":30}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid type: integer `30`, expected a .NET TimeSpan string at line 1 column 14"
        );
        let error = serde_json::from_str::<Payload>(r#"{"duration":"30s"}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"invalid .NET TimeSpan "30s": expected [d.]hh:mm:ss[.fffffff] at line 1 column 17"#
        );
    }

    #[test]
    fn options_read_null_missing_and_values() {
        let read = |json: &str| serde_json::from_str::<Payload>(json).unwrap().maybe;
        assert_eq!(read(r#"{"duration":"00:00:01"}"#), None);
        assert_eq!(read(r#"{"duration":"00:00:01","maybe":null}"#), None);
        assert_eq!(
            read(r#"{"duration":"00:00:01","maybe":"00:01"}"#),
            Some(Duration::from_secs(60))
        );
        let read = |json: &str| serde_json::from_str::<SignedPayload>(json).unwrap().maybe;
        assert_eq!(read(r#"{"delta":"00:00:01"}"#), None);
        assert_eq!(read(r#"{"delta":"00:00:01","maybe":null}"#), None);
        assert_eq!(
            read(r#"{"delta":"00:00:01","maybe":"-00:01"}"#),
            Some(TimeDelta::minutes(-1))
        );
        let payload = SignedPayload {
            delta: TimeDelta::zero(),
            maybe: None,
        };
        assert_eq!(
            serde_json::to_string(&payload).unwrap(),
            r#"{"delta":"00:00:00","maybe":null}"#
        );
    }
}
