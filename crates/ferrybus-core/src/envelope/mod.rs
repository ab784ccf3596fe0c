//! The MassTransit JSON envelope (`application/vnd.masstransit+json`).
//!
//! [`Envelope::from_slice`] reads every shape MassTransit has written (v5 to v8, System.Text.Json
//! with nulls, Newtonsoft without them, PascalCase keys, `headers` as an object or an array,
//! comments and trailing commas); serializing an [`Envelope`] writes the v8 shape: all 15 keys in
//! MassTransit's order, camelCase, nulls written.
//!
//! ```
//! use ferrybus_core::Envelope;
//! let body = br#"{
//!     "MessageId": "181c0000-6393-3630-36a4-08daf4e7c6da",
//!     "messageType": ["urn:message:MassTransitRepro:SampleEvent"],
//!     "message": { "value": 1 }, // comments are tolerated, as .NET tolerates them
//! }"#;
//! let envelope = Envelope::from_slice(body).unwrap();
//! assert_eq!(envelope.message_id.unwrap().to_string(), "181c0000-6393-3630-36a4-08daf4e7c6da");
//! assert_eq!(envelope.message["value"], 1);
//!
//! let written = serde_json::to_value(&envelope).unwrap();
//! let keys: Vec<_> = written.as_object().unwrap().keys().cloned().collect();
//! assert_eq!(keys.len(), 15);
//! assert_eq!(keys[0], "messageId");
//! ```

mod error;
mod headers;
mod host;
mod json;
mod model;
mod payload;
mod read;

pub use error::EnvelopeError;
pub use headers::{is_mt_header, Headers};
pub use host::HostInfo;
pub use json::{parse_dotnet_guid, parse_json};
pub use model::{Envelope, ENVELOPE_CONTENT_TYPE, RAW_JSON_CONTENT_TYPE};
pub use payload::Payload;
pub(crate) use read::read_host;
