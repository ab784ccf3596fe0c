//! The error of the .NET value helpers.

/// A value that cannot be read from, or written as, the text .NET (System.Text.Json) uses.
///
/// Reading errors carry the offending text; the `Display` form names the .NET type and the
/// expected shape, as in `invalid .NET TimeSpan "x": expected [d.]hh:mm:ss[.fffffff]`.
///
/// ```
/// use ferrybus_dotnet::{timespan, DotNetValueError};
///
/// let error = timespan::parse_timespan("x").unwrap_err();
/// assert_eq!(error, DotNetValueError::TimeSpan("x".to_owned()));
/// assert_eq!(
///     error.to_string(),
///     r#"invalid .NET TimeSpan "x": expected [d.]hh:mm:ss[.fffffff]"#
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DotNetValueError {
    /// The text is not a decimal number.
    #[error("invalid .NET decimal {0:?}: expected a decimal number such as \"66.99\"")]
    Decimal(String),
    /// The text is not an ISO 8601 date-time as .NET writes them.
    #[error(
        "invalid .NET DateTime {0:?}: expected ISO 8601 yyyy-MM-ddTHH:mm[:ss[.fffffff]][Z|±hh:mm]"
    )]
    DateTime(String),
    /// The text is not a TimeSpan in .NET's constant (`"c"`) format.
    #[error("invalid .NET TimeSpan {0:?}: expected [d.]hh:mm:ss[.fffffff]")]
    TimeSpan(String),
    /// The text is a negative TimeSpan, which `std::time::Duration` cannot hold.
    #[error(
        "invalid .NET TimeSpan {0:?}: negative, but std::time::Duration cannot be (use dotnet::timespan::signed)"
    )]
    NegativeTimeSpan(String),
    /// The text is not a GUID in one of .NET's `D`, `N`, `B` or `P` forms.
    #[error(
        "invalid .NET Guid {0:?}: expected 32 hex digits as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, \
         optionally in braces or parentheses, or without hyphens"
    )]
    Guid(String),
    /// The text is not base64, as .NET writes a `byte[]` (the first 40 characters).
    #[error("invalid .NET byte[] {0:?}: expected base64 text such as \"AQID\"")]
    Bytes(String),
    /// The value is well-formed but outside what the .NET type can hold.
    #[error("{value} is out of range for a .NET {kind} ({range})")]
    OutOfRange {
        /// The .NET type, such as `TimeSpan`.
        kind: &'static str,
        /// The value, as text.
        value: String,
        /// The range the .NET type accepts.
        range: &'static str,
    },
    /// A consumer or saga type whose name is only the suffix an endpoint name drops
    /// (`Consumer`, `Saga`), which MassTransit's endpoint name formatters refuse.
    #[error("a {kind} may not be named {suffix:?}: add a meaningful prefix to {type_name:?}")]
    EndpointName {
        /// `consumer` or `saga`.
        kind: &'static str,
        /// The suffix, `Consumer` or `Saga`.
        suffix: String,
        /// The .NET type name given.
        type_name: String,
    },
}
