//! [`EnvelopeError`]: why a body is not an envelope.

/// Why a body is not a usable MassTransit envelope. The `Display` text names the field and the
/// reason in one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The body is not JSON, even with comments and trailing commas allowed.
    #[error("body is not valid JSON: {0}")]
    Json(String),
    /// The body is larger than the endpoint reads.
    #[error("body is {size} bytes, more than the endpoint's limit of {limit} bytes")]
    TooLarge {
        /// The body's size.
        size: usize,
        /// The endpoint's limit.
        limit: usize,
    },
    /// The body is JSON but not an object.
    #[error("body is not a JSON object")]
    NotAnObject,
    /// The envelope has no `message` (or it is null).
    #[error("message: missing or null (a MassTransit envelope must carry a message)")]
    MissingMessage,
    /// A field has a value of the wrong shape.
    #[error("{field}: {reason}")]
    InvalidField {
        /// The envelope key (camelCase).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl EnvelopeError {
    pub(crate) fn field(field: &'static str, reason: impl Into<String>) -> Self {
        EnvelopeError::InvalidField {
            field,
            reason: reason.into(),
        }
    }
}
