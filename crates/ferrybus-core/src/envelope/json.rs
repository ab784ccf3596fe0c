//! JSON as .NET writes it: comments and trailing commas tolerated, GUIDs in every format.

use serde_json::Value;
use uuid::Uuid;

use super::error::EnvelopeError;

/// Parses JSON strictly, and falls back to a lenient parser that skips `//` and `/* */` comments
/// and trailing commas, as System.Text.Json does with MassTransit's options.
pub fn parse_json(body: &[u8]) -> Result<Value, EnvelopeError> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    match serde_json::from_slice(body) {
        Ok(value) => Ok(value),
        Err(strict) if strict.is_syntax() || strict.is_eof() => {
            parse_lenient(body).ok_or_else(|| EnvelopeError::Json(strict.to_string()))
        }
        Err(other) => Err(EnvelopeError::Json(other.to_string())),
    }
}

pub(crate) fn parse_lenient(body: &[u8]) -> Option<Value> {
    let mut de = serde_json_lenient::Deserializer::from_slice(body);
    de.set_ignore_trailing_commas(true);
    de.set_allow_comments(true);
    let lenient: serde_json_lenient::Value = serde::Deserialize::deserialize(&mut de).ok()?;
    de.end().ok()?;
    // Both crates share the JSON data model; re-encode once to hand back a serde_json value.
    serde_json::from_slice(&serde_json_lenient::to_vec(&lenient).ok()?).ok()
}

/// Parses a GUID in any format .NET's `Guid.TryParse` accepts for envelope ids: `D`
/// (hyphenated), `N` (32 digits), `B` (`{...}`), `P` (`(...)`).
pub fn parse_dotnet_guid(text: &str) -> Option<Uuid> {
    let t = text.trim();
    let inner = t
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(t);
    Uuid::try_parse(inner).ok()
}
