//! .NET date-time text, as envelopes carry it.

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

/// Parses a .NET `DateTime`/`DateTimeOffset` text: ISO 8601 with `Z`, an offset, or no zone (read
/// as UTC, which is what MassTransit writes for envelope times), with 0 to 7 fractional digits.
pub(crate) fn parse_dotnet_time(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Some(t.and_utc());
        }
    }
    None
}

/// Formats a UTC time as .NET's round-trip text: 7 fractional digits with trailing zeros trimmed,
/// then `Z` (`2025-05-24T18:39:56.3305069Z`).
pub(crate) fn format_dotnet_time(time: &DateTime<Utc>) -> String {
    let ticks = time.timestamp_subsec_nanos() / 100;
    let base = time.to_rfc3339_opts(SecondsFormat::Secs, true);
    let base = base.trim_end_matches('Z');
    if ticks == 0 {
        return format!("{base}Z");
    }
    let fraction = format!("{ticks:07}");
    format!("{base}.{}Z", fraction.trim_end_matches('0'))
}

/// serde `with` module for `Option<DateTime<Utc>>` in .NET's format.
pub(crate) mod option {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        value: &Option<DateTime<Utc>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(t) => serializer.serialize_str(&super::format_dotnet_time(t)),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            None => Ok(None),
            Some(s) => super::parse_dotnet_time(&s)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not a date-time"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_ticks() {
        let t = parse_dotnet_time("2025-05-24T18:39:56.3305069Z").unwrap();
        assert_eq!(format_dotnet_time(&t), "2025-05-24T18:39:56.3305069Z");
        let t = parse_dotnet_time("2021-12-14T18:08:12.9342242+03:00").unwrap();
        assert_eq!(format_dotnet_time(&t), "2021-12-14T15:08:12.9342242Z");
        let t = parse_dotnet_time("2021-05-14T00:00:00").unwrap();
        assert_eq!(format_dotnet_time(&t), "2021-05-14T00:00:00Z");
        let t = parse_dotnet_time("2021-12-14T18:08:12.927").unwrap();
        assert_eq!(format_dotnet_time(&t), "2021-12-14T18:08:12.927Z");
        assert!(parse_dotnet_time("yesterday").is_none());
    }
}
