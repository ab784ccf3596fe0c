//! ISO 8601 date-time text as System.Text.Json reads and writes it, shared by the date-time
//! helpers.

use std::fmt::Write as _;

use chrono::{Datelike, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Offset, Timelike, Utc};

use super::DotNetValueError;

/// The range of years a .NET `DateTime` holds, as the error text names it.
pub(super) const YEAR_RANGE: &str = "years 0001 to 9999";

/// Parses `yyyy-MM-dd[Thh:mm[:ss[.f…]]][Z|±hh[:mm]]` into the written wall-clock time and its
/// zone: `None` when no zone is written, `+00:00` for `Z`.
///
/// This is System.Text.Json's grammar, a little more lenient: `t` or a space may separate date
/// and time, `z` stands for `Z`, `±hhmm` offsets and offsets up to ±23:59 are read, and fractions
/// keep up to 9 digits (nanoseconds; further digits are ignored).
pub(super) fn parse(text: &str) -> Result<(NaiveDateTime, Option<FixedOffset>), DotNetValueError> {
    parse_inner(text.as_bytes()).ok_or_else(|| DotNetValueError::DateTime(text.to_owned()))
}

fn parse_inner(bytes: &[u8]) -> Option<(NaiveDateTime, Option<FixedOffset>)> {
    let mut cursor = Cursor { bytes, at: 0 };
    let year = cursor.digits(4)?;
    cursor.expect(b'-')?;
    let month = cursor.digits(2)?;
    cursor.expect(b'-')?;
    let day = cursor.digits(2)?;
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    if cursor.is_done() {
        return Some((date.and_time(NaiveTime::MIN), None));
    }

    if !matches!(cursor.next()?, b'T' | b't' | b' ') {
        return None;
    }
    let hour = cursor.digits(2)?;
    cursor.expect(b':')?;
    let minute = cursor.digits(2)?;
    let (mut second, mut nano) = (0, 0);
    if cursor.eat(b':') {
        second = cursor.digits(2)?;
        if cursor.eat(b'.') {
            nano = cursor.fraction()?;
        }
    }
    let time = NaiveTime::from_hms_nano_opt(hour, minute, second, nano)?;

    let offset = match cursor.next() {
        None => None,
        Some(b'Z' | b'z') => Some(Utc.fix()),
        Some(sign @ (b'+' | b'-')) => {
            let hours = cursor.digits(2)?;
            let minutes = if cursor.eat(b':') || cursor.remaining() == 2 {
                cursor.digits(2)?
            } else {
                0
            };
            if minutes > 59 {
                return None;
            }
            let seconds = i32::try_from(hours * 3600 + minutes * 60).ok()?;
            Some(FixedOffset::east_opt(if sign == b'-' {
                -seconds
            } else {
                seconds
            })?)
        }
        Some(_) => return None,
    };
    cursor.is_done().then_some((date.and_time(time), offset))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn next(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.bytes.get(self.at) == Some(&byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// Exactly `count` ASCII digits.
    fn digits(&mut self, count: usize) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + count)?;
        let mut value = 0;
        for &digit in digits {
            if !digit.is_ascii_digit() {
                return None;
            }
            value = value * 10 + u32::from(digit - b'0');
        }
        self.at += count;
        Some(value)
    }

    /// One or more digits of a fraction of a second, as nanoseconds (digits past the ninth are
    /// dropped).
    fn fraction(&mut self) -> Option<u32> {
        let start = self.at;
        let mut nanos = 0;
        let mut scale = 100_000_000;
        while let Some(digit) = self.bytes.get(self.at).filter(|b| b.is_ascii_digit()) {
            nanos += u32::from(digit - b'0') * scale;
            scale /= 10;
            self.at += 1;
        }
        (self.at > start).then_some(nanos)
    }
}

/// Whether .NET's `DateTime` can hold the year.
pub(super) fn year_in_range(time: &NaiveDateTime) -> bool {
    (1..=9999).contains(&time.year())
}

/// Writes `yyyy-MM-ddTHH:mm:ss[.fffffff]`: the fraction in 100 ns ticks (sub-tick nanoseconds are
/// truncated), trailing zeros trimmed, left out when zero. A leap second is written as
/// `:59.9999999`. Years outside 0000 to 9999 get a sign (`+10000`), which .NET cannot read.
pub(super) fn write_naive(out: &mut String, time: &NaiveDateTime) {
    let year = time.year();
    if (0..=9999).contains(&year) {
        push_digits(out, year.unsigned_abs(), 4);
    } else {
        // Writing to a String cannot fail.
        let _ = write!(out, "{year:+05}");
    }
    for (separator, value) in [
        ('-', time.month()),
        ('-', time.day()),
        ('T', time.hour()),
        (':', time.minute()),
        (':', time.second()),
    ] {
        out.push(separator);
        push_digits(out, value, 2);
    }
    let ticks = time.nanosecond().min(999_999_999) / 100;
    if ticks != 0 {
        out.push('.');
        let mut width = 7;
        let mut trimmed = ticks;
        while trimmed.is_multiple_of(10) {
            trimmed /= 10;
            width -= 1;
        }
        push_digits(out, trimmed, width);
    }
}

/// Writes the `width` low decimal digits of `value`, zero-padded (these timestamps are written
/// for every message, so without `fmt`).
fn push_digits(out: &mut String, value: u32, width: usize) {
    let mut digits = [b'0'; 10];
    let mut rest = value;
    for digit in digits[..width].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend(digits[..width].iter().map(|&d| char::from(d)));
}

/// Writes an offset as `±hh:mm` (`+00:00` for UTC), with `:ss` only for an offset that is not a
/// whole number of minutes (which .NET cannot hold).
pub(super) fn write_offset(out: &mut String, offset: &FixedOffset) {
    let total = offset.local_minus_utc();
    let sign = if total < 0 { '-' } else { '+' };
    let total = total.unsigned_abs();
    let _ = write!(out, "{sign}{:02}:{:02}", total / 3600, total / 60 % 60);
    if !total.is_multiple_of(60) {
        let _ = write!(out, ":{:02}", total % 60);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> (String, Option<i32>) {
        let (time, offset) = parse(text).unwrap();
        let mut out = String::new();
        write_naive(&mut out, &time);
        (out, offset.map(|o| o.local_minus_utc()))
    }

    #[test]
    fn reads_every_shape_system_text_json_reads() {
        assert_eq!(parsed("2021-05-14"), ("2021-05-14T00:00:00".into(), None));
        assert_eq!(
            parsed("2021-05-14T10:32"),
            ("2021-05-14T10:32:00".into(), None)
        );
        assert_eq!(
            parsed("2021-05-14T10:32:05"),
            ("2021-05-14T10:32:05".into(), None)
        );
        assert_eq!(
            parsed("2021-12-14T18:08:12.927"),
            ("2021-12-14T18:08:12.927".into(), None)
        );
        assert_eq!(
            parsed("2025-05-24T18:39:56.3305069Z"),
            ("2025-05-24T18:39:56.3305069".into(), Some(0))
        );
        assert_eq!(
            parsed("2018-05-08T07:17:03.6952914+02:00"),
            ("2018-05-08T07:17:03.6952914".into(), Some(7200))
        );
        assert_eq!(
            parsed("2018-05-08T07:17-05"),
            ("2018-05-08T07:17:00".into(), Some(-18000))
        );
        assert_eq!(
            parsed("2018-05-08T07:17:03+0530"),
            ("2018-05-08T07:17:03".into(), Some(19800))
        );
        assert_eq!(
            parsed("2018-05-08 07:17:03z"),
            ("2018-05-08T07:17:03".into(), Some(0))
        );
        // More than 7 digits: nanoseconds are read, writing truncates to ticks.
        let (time, _) = parse("2018-05-08T07:17:03.123456789123Z").unwrap();
        assert_eq!(time.nanosecond(), 123_456_789);
        assert_eq!(
            parsed("2018-05-08T07:17:03.12345678Z").0,
            "2018-05-08T07:17:03.1234567"
        );
    }

    #[test]
    fn rejects_malformed_text() {
        for text in [
            "",
            "yesterday",
            "2021-5-14",
            "2021-05-14T",
            "2021-05-14T10",
            "2021-05-14T10:32:",
            "2021-05-14T10:32:05.",
            "2021-05-14T10:32:05.5Q",
            "2021-05-14T10:32:05Z ",
            " 2021-05-14T10:32:05Z",
            "2021-05-14T10:32:05+2",
            "2021-05-14T10:32:05+02:",
            "2021-05-14T10:32:05+02:60",
            "2021-05-14T10:32:05+24:00",
            "2021-02-30T00:00:00",
            "2021-05-14T24:00:00",
            "2021-05-14T23:59:60",
            "2021-05-14T10:32:05Zjunk",
        ] {
            assert_eq!(
                parse(text),
                Err(DotNetValueError::DateTime(text.to_owned())),
                "{text:?}"
            );
        }
    }

    #[test]
    fn writes_every_field_zero_padded_and_the_fraction_trimmed() {
        let at = |y, mo, d, h, mi, s, nanos| {
            let time = NaiveDate::from_ymd_opt(y, mo, d)
                .unwrap()
                .and_hms_nano_opt(h, mi, s, nanos)
                .unwrap();
            let mut out = String::new();
            write_naive(&mut out, &time);
            out
        };
        for ((y, mo, d, h, mi, s, nanos), written) in [
            ((1, 2, 3, 4, 5, 6, 0), "0001-02-03T04:05:06"),
            (
                (2025, 12, 31, 23, 59, 59, 330_506_900),
                "2025-12-31T23:59:59.3305069",
            ),
            (
                (2025, 5, 24, 18, 9, 0, 100_000_000),
                "2025-05-24T18:09:00.1",
            ),
            ((2025, 5, 24, 18, 9, 0, 100), "2025-05-24T18:09:00.0000001"),
            ((2025, 5, 24, 18, 9, 0, 99), "2025-05-24T18:09:00"),
            (
                (2025, 5, 24, 18, 9, 0, 120_000_099),
                "2025-05-24T18:09:00.12",
            ),
            (
                (999, 1, 1, 0, 0, 59, 1_999_999_999),
                "0999-01-01T00:00:59.9999999",
            ),
        ] {
            assert_eq!(at(y, mo, d, h, mi, s, nanos), written);
        }
    }

    #[test]
    fn writes_years_outside_dotnet_with_a_sign() {
        let time = NaiveDate::from_ymd_opt(10000, 1, 1)
            .unwrap()
            .and_time(NaiveTime::MIN);
        let mut out = String::new();
        write_naive(&mut out, &time);
        assert_eq!(out, "+10000-01-01T00:00:00");
        assert!(!year_in_range(&time));
    }

    #[test]
    fn writes_offsets() {
        let mut out = String::new();
        write_offset(&mut out, &FixedOffset::east_opt(0).unwrap());
        write_offset(&mut out, &FixedOffset::west_opt(9000).unwrap());
        write_offset(&mut out, &FixedOffset::east_opt(19815).unwrap());
        assert_eq!(out, "+00:00-02:30+05:30:15");
    }
}
