//! .NET `byte[]` as `Vec<u8>`: written as a base64 string with padding (`"AQID"`), as
//! System.Text.Json writes it, and read from one.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Attachment {
//!     #[serde(with = "ferrybus_dotnet::bytes")]
//!     content: Vec<u8>,
//! }
//!
//! let attachment = Attachment { content: vec![1, 2, 3] };
//! assert_eq!(serde_json::to_string(&attachment).unwrap(), r#"{"content":"AQID"}"#);
//! let attachment: Attachment = serde_json::from_str(r#"{"content":"AQIDBA=="}"#).unwrap();
//! assert_eq!(attachment.content, [1, 2, 3, 4]);
//! ```

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserializer, Serializer};

use super::DotNetValueError;

/// Parses base64 text as .NET's `Convert.FromBase64String` reads what STJ wrote (standard
/// alphabet, padded).
pub fn parse_bytes(text: &str) -> Result<Vec<u8>, DotNetValueError> {
    STANDARD
        .decode(text)
        .map_err(|_| DotNetValueError::Bytes(text.chars().take(40).collect()))
}

/// Writes `bytes` as a padded base64 string.
pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&STANDARD.encode(bytes))
}

/// Reads a base64 string as [`parse_bytes`] does.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    super::deserialize_str(deserializer, "a base64 string (.NET byte[])", parse_bytes)
}

/// `Option<Vec<u8>>`: `None` is written as `null`; `null` reads as `None`.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Attachment {
///     #[serde(default, with = "ferrybus_dotnet::bytes::option")]
///     thumbnail: Option<Vec<u8>>,
/// }
///
/// let attachment: Attachment = serde_json::from_str("{}").unwrap();
/// assert_eq!(attachment.thumbnail, None);
/// ```
pub mod option {
    crate::option_of_parent!(Vec<u8>);
}

/// `Vec<Vec<u8>>`: a JSON array, each element in .NET's form.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Values {
///     #[serde(with = "ferrybus_dotnet::bytes::vec")]
///     values: Vec<Vec<u8>>,
/// }
///
/// let json = r#"{"values":["AQID",""]}"#;
/// let values: Values = serde_json::from_str(json).unwrap();
/// assert_eq!(serde_json::to_string(&values).unwrap(), json);
/// ```
pub mod vec {
    crate::vec_of_parent!(Vec<u8>);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_it_writes_and_refuses_what_is_not_base64() {
        assert_eq!(STANDARD.encode([0xff, 0, 7]), "/wAH");
        assert_eq!(parse_bytes("/wAH").unwrap(), [0xff, 0, 7]);
        assert_eq!(
            parse_bytes("not base64!").unwrap_err(),
            DotNetValueError::Bytes("not base64!".to_owned())
        );
    }
}
