//! .NET `Guid` as [`Uuid`]: written in lowercase `D` form
//! (`9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0`), read from any of .NET's `D`, `N`, `B` and `P` forms.
//!
//! System.Text.Json writes a `Guid` in lowercase `D` form and, inside payloads, reads only that
//! form. `Uuid`'s own serde implementation already writes the same text, so a plain `Uuid` field
//! is compatible too; this module spells the contract out, and reads the `P` form (which `Uuid`
//! does not) while refusing `urn:uuid:` (which .NET does not write).
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use uuid::Uuid;
//!
//! #[derive(Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct OrderRef {
//!     #[serde(with = "ferrybus_dotnet::guid")]
//!     order_id: Uuid,
//! }
//!
//! let order: OrderRef =
//!     serde_json::from_str(r#"{"orderId":"(9F8E7D6C-5B4A-3928-1706-F5E4D3C2B1A0)"}"#).unwrap();
//! assert_eq!(
//!     serde_json::to_string(&order).unwrap(),
//!     r#"{"orderId":"9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"}"#
//! );
//! ```

use serde::{Deserializer, Serializer};
use uuid::Uuid;

use super::DotNetValueError;

/// Formats `guid` in .NET's lowercase `D` form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
///
/// ```
/// use ferrybus_dotnet::guid::format_guid;
/// use uuid::Uuid;
///
/// let guid = Uuid::from_u128(0x9F8E7D6C5B4A39281706F5E4D3C2B1A0);
/// assert_eq!(format_guid(&guid), "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0");
/// ```
pub fn format_guid(guid: &Uuid) -> String {
    guid.hyphenated().to_string()
}

/// Parses a GUID in any of .NET's forms, in either case: `D`
/// (`9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0`), `N` (`9f8e7d6c5b4a39281706f5e4d3c2b1a0`), `B`
/// (`{9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0}`) or `P` (`(9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0)`).
///
/// ```
/// use ferrybus_dotnet::guid::parse_guid;
///
/// let d = parse_guid("9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0").unwrap();
/// assert_eq!(parse_guid("9F8E7D6C5B4A39281706F5E4D3C2B1A0").unwrap(), d);
/// assert_eq!(parse_guid("{9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0}").unwrap(), d);
/// assert_eq!(parse_guid("(9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0)").unwrap(), d);
/// assert!(parse_guid("urn:uuid:9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0").is_err());
/// ```
pub fn parse_guid(text: &str) -> Result<Uuid, DotNetValueError> {
    let invalid = || DotNetValueError::Guid(text.to_owned());
    let inner = match text.as_bytes() {
        // `D` and `N`; `Uuid` tells the two apart by length.
        bytes if bytes.len() == 36 || bytes.len() == 32 => text,
        // `B` and `P`: a `D` form in braces or parentheses. Both ends are ASCII, so slicing
        // between them stays on character boundaries.
        [b'{', middle @ .., b'}'] | [b'(', middle @ .., b')'] if middle.len() == 36 => &text[1..37],
        _ => return Err(invalid()),
    };
    Uuid::try_parse(inner).map_err(|_| invalid())
}

/// Writes `guid` as a string in lowercase `D` form.
pub fn serialize<S: Serializer>(guid: &Uuid, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(guid.hyphenated().encode_lower(&mut Uuid::encode_buffer()))
}

/// Reads a string as [`parse_guid`] does.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Uuid, D::Error> {
    super::deserialize_str(deserializer, "a .NET Guid string", parse_guid)
}

/// `Option<Uuid>`: `None` is written as `null`; `null` reads as `None`.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use uuid::Uuid;
///
/// #[derive(Serialize, Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct OrderRef {
///     #[serde(default, with = "ferrybus_dotnet::guid::option")]
///     parent_id: Option<Uuid>,
/// }
///
/// let order: OrderRef = serde_json::from_str("{}").unwrap();
/// assert_eq!(order.parent_id, None);
/// assert_eq!(serde_json::to_string(&order).unwrap(), r#"{"parentId":null}"#);
/// ```
pub mod option {
    use uuid::Uuid;

    crate::option_of_parent!(Uuid);
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    const D: &str = "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0";
    const GUID: Uuid = Uuid::from_u128(0x9f8e7d6c5b4a39281706f5e4d3c2b1a0);

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Payload {
        #[serde(with = "super")]
        id: Uuid,
        #[serde(default, with = "super::option")]
        maybe: Option<Uuid>,
    }

    #[test]
    fn writes_lowercase_d() {
        assert_eq!(format_guid(&GUID), D);
        assert_eq!(
            serde_json::to_string(&Payload {
                id: GUID,
                maybe: Some(Uuid::nil())
            })
            .unwrap(),
            format!(r#"{{"id":"{D}","maybe":"00000000-0000-0000-0000-000000000000"}}"#)
        );
        // The same text as `Uuid`'s own serde implementation.
        assert_eq!(serde_json::to_string(&GUID).unwrap(), format!(r#""{D}""#));
    }

    #[test]
    fn reads_d_n_b_and_p_in_either_case() {
        for text in [
            D,
            "9F8E7D6C-5B4A-3928-1706-F5E4D3C2B1A0",
            "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
            "9F8E7D6C5B4A39281706F5E4D3C2B1A0",
            "{9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0}",
            "{9F8E7D6C-5B4A-3928-1706-F5E4D3C2B1A0}",
            "(9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0)",
        ] {
            assert_eq!(parse_guid(text), Ok(GUID), "{text:?}");
        }
    }

    #[test]
    fn rejects_other_text() {
        for text in [
            "",
            "not-a-guid",
            "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a",
            "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0-",
            "9g8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0",
            "9f8e7d6c_5b4a_3928_1706_f5e4d3c2b1a0",
            "{9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0)",
            "[9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0]",
            "{9f8e7d6c5b4a39281706f5e4d3c2b1a0}",
            " 9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0",
            "urn:uuid:9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0",
            "{0x9f8e7d6c,0x5b4a,0x3928,{0x17,0x06,0xf5,0xe4,0xd3,0xc2,0xb1,0xa0}}",
            "{é8e7d6c-5b4a-3928-1706-f5e4d3c2b1a}",
        ] {
            assert_eq!(
                parse_guid(text),
                Err(DotNetValueError::Guid(text.to_owned())),
                "{text:?}"
            );
        }
        assert_eq!(
            parse_guid("x").unwrap_err().to_string(),
            r#"invalid .NET Guid "x": expected 32 hex digits as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, optionally in braces or parentheses, or without hyphens"#
        );
    }

    #[test]
    fn round_trips() {
        let json = format!(r#"{{"id":"{D}","maybe":"{D}"}}"#);
        let payload: Payload = serde_json::from_str(&json).unwrap();
        assert_eq!(
            payload,
            Payload {
                id: GUID,
                maybe: Some(GUID)
            }
        );
        assert_eq!(serde_json::to_string(&payload).unwrap(), json);
        let upper: Payload =
            serde_json::from_str(r#"{"id":"{9F8E7D6C-5B4A-3928-1706-F5E4D3C2B1A0}"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&upper).unwrap(),
            format!(r#"{{"id":"{D}","maybe":null}}"#)
        );
    }

    #[test]
    fn option_reads_null_and_missing() {
        let read = |json: &str| serde_json::from_str::<Payload>(json).unwrap().maybe;
        assert_eq!(read(&format!(r#"{{"id":"{D}"}}"#)), None);
        assert_eq!(read(&format!(r#"{{"id":"{D}","maybe":null}}"#)), None);
        let error = serde_json::from_str::<Payload>(r#"{"id":42}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid type: integer `42`, expected a .NET Guid string at line 1 column 8"
        );
    }
}
