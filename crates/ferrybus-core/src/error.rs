//! The errors of the core: [`ConsumeError`] (why consuming a message failed) and [`PublishError`]
//! (why a publish or send failed).

use std::any::Any;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;

/// A boxed error that can cross threads.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What kind of failure a [`ConsumeError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConsumeErrorKind {
    /// The payload could not be deserialized into the consumer's message type.
    Deserialize,
    /// No consumer on the endpoint handles any of the message's types.
    UnknownMessageType,
    /// The consumer itself failed.
    Handler,
    /// The storage layer (inbox, outbox, database) failed.
    Storage,
    /// Sending to the broker failed.
    Transport,
    /// The operation took too long.
    Timeout,
    /// The endpoint is shutting down and the work was cancelled.
    Cancelled,
}

impl ConsumeErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            ConsumeErrorKind::Deserialize => "message could not be deserialized",
            ConsumeErrorKind::UnknownMessageType => "no consumer for the message type",
            ConsumeErrorKind::Handler => "consumer failed",
            ConsumeErrorKind::Storage => "storage failed",
            ConsumeErrorKind::Transport => "transport failed",
            ConsumeErrorKind::Timeout => "timed out",
            ConsumeErrorKind::Cancelled => "cancelled",
        }
    }
}

/// Why consuming a message failed: a [`ConsumeErrorKind`], the underlying error chain, and
/// whether retrying can help.
///
/// Any `std::error::Error` converts into a `ConsumeError` of kind [`ConsumeErrorKind::Handler`], so
/// consumers can use `?`. Like `anyhow::Error`, `ConsumeError` itself does not implement
/// `std::error::Error` (that would conflict with the blanket conversion); use
/// [`ConsumeError::into_boxed`] where a boxed error is needed.
///
/// ```
/// use ferrybus_core::{ConsumeError, ConsumeErrorKind};
///
/// fn parse(input: &str) -> Result<i32, ConsumeError> {
///     Ok(input.parse::<i32>()?)
/// }
/// let err = parse("x").unwrap_err();
/// assert_eq!(err.kind(), ConsumeErrorKind::Handler);
/// assert_eq!(err.exception_type(), "ParseIntError");
/// assert!(!err.is_permanent());
///
/// let err = ConsumeError::permanent("total must be positive");
/// assert!(err.is_permanent());
/// assert_eq!(err.to_string(), "total must be positive");
/// ```
pub struct ConsumeError {
    kind: ConsumeErrorKind,
    source: BoxError,
    type_name: Cow<'static, str>,
    permanent: bool,
    retry_count: u32,
    backtrace: Backtrace,
}

impl ConsumeError {
    /// An error of `kind` caused by `source`.
    pub fn new<E>(kind: ConsumeErrorKind, source: E) -> Self
    where
        E: Into<BoxError>,
    {
        let raw = std::any::type_name::<E>();
        let source: BoxError = source.into();
        let type_name = if raw.starts_with("alloc::boxed::Box<") {
            Cow::Owned(dyn_error_type(&*source))
        } else if raw == "alloc::string::String" || raw == "&str" {
            Cow::Borrowed("Exception")
        } else {
            Cow::Borrowed(short_name(raw))
        };
        Self {
            kind,
            source,
            type_name,
            permanent: false,
            retry_count: 0,
            backtrace: Backtrace::capture(),
        }
    }

    /// A consumer failure with a message (MassTransit would show it as the exception message).
    pub fn handler(message: impl Into<String>) -> Self {
        Self::with_type(
            ConsumeErrorKind::Handler,
            message.into(),
            "ConsumerException",
        )
    }

    /// A failure that no retry policy retries (validation errors, poison messages): the message
    /// goes straight to the error queue.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        let mut error = Self::new(ConsumeErrorKind::Handler, error);
        error.permanent = true;
        if error.type_name == "Exception" {
            error.type_name = Cow::Borrowed("PermanentException");
        }
        error
    }

    /// A consumer (or a layer) panicked: exception type `Panic`, the panic message as the message.
    /// Retried like any error, then faulted.
    pub fn panic(message: impl Into<String>) -> Self {
        Self::with_type(ConsumeErrorKind::Handler, message.into(), "Panic")
    }

    pub(crate) fn with_type(
        kind: ConsumeErrorKind,
        message: String,
        type_name: &'static str,
    ) -> Self {
        let mut error = Self::new(kind, message);
        error.type_name = Cow::Borrowed(type_name);
        error
    }

    /// Marks this error as permanent (never retried).
    pub fn into_permanent(mut self) -> Self {
        self.permanent = true;
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ConsumeErrorKind {
        self.kind
    }

    /// Whether retry policies must not retry this error.
    pub fn is_permanent(&self) -> bool {
        self.permanent
            || matches!(
                self.kind,
                ConsumeErrorKind::Deserialize | ConsumeErrorKind::Cancelled
            )
    }

    /// How many retries happened before this error was final (`MT-Fault-RetryCount`).
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    pub(crate) fn set_retry_count(&mut self, count: u32) {
        self.retry_count = count;
    }

    /// The underlying error.
    pub fn source(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.source
    }

    /// Finds an error of type `E` in the chain, for retry filters.
    pub fn find<E: StdError + 'static>(&self) -> Option<&E> {
        self.chain().find_map(|e| e.downcast_ref::<E>())
    }

    /// The error chain, outermost first.
    pub fn chain(&self) -> impl Iterator<Item = &(dyn StdError + 'static)> {
        let first: &(dyn StdError + 'static) = &*self.source;
        std::iter::successors(Some(first), |e| (*e).source())
    }

    /// The short type name of the outermost error, as MassTransit reports `exceptionType`.
    pub fn exception_type(&self) -> &str {
        &self.type_name
    }

    /// The captured backtrace text, when `RUST_BACKTRACE` enabled capturing; empty otherwise.
    pub fn stack_trace(&self) -> String {
        match self.backtrace.status() {
            BacktraceStatus::Captured => self.backtrace.to_string(),
            _ => String::new(),
        }
    }

    /// Converts into a boxed `std::error::Error`.
    pub fn into_boxed(self) -> BoxError {
        self.source
    }
}

impl fmt::Display for ConsumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl fmt::Debug for ConsumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumeError")
            .field("kind", &self.kind.as_str())
            .field("type", &self.type_name)
            .field("error", &self.source.to_string())
            .field("permanent", &self.is_permanent())
            .field("retry_count", &self.retry_count)
            .finish()
    }
}

impl<E> From<E> for ConsumeError
where
    E: StdError + Send + Sync + 'static,
{
    /// A consumer's `?`: kind [`ConsumeErrorKind::Handler`], or the matching transport or storage
    /// kind for a failed publish ([`PublishError`](crate::PublishError)).
    fn from(error: E) -> Self {
        let kind = (&error as &dyn Any)
            .downcast_ref::<PublishError>()
            .map_or(ConsumeErrorKind::Handler, |e| e.kind.consume_kind());
        ConsumeError::new(kind, error)
    }
}

/// What kind of failure a [`PublishError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PublishErrorKind {
    /// The message could not be serialized.
    Serialize,
    /// The destination address is not valid.
    Address,
    /// No connection to the broker (within the publish timeout).
    NotConnected,
    /// The broker did not confirm in time.
    Timeout,
    /// The broker refused the message (nack, or a mandatory message returned).
    Rejected,
    /// Any other transport failure.
    Transport,
    /// Writing the message to an outbox table failed.
    Storage,
    /// The publisher is closed (a consumer outbox after its consumer returned, a stopped bus).
    Closed,
}

impl PublishErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            PublishErrorKind::Serialize => "could not serialize the message",
            PublishErrorKind::Address => "invalid destination address",
            PublishErrorKind::NotConnected => "not connected to the broker",
            PublishErrorKind::Timeout => "the broker did not confirm in time",
            PublishErrorKind::Rejected => "the broker rejected the message",
            PublishErrorKind::Transport => "transport failed",
            PublishErrorKind::Storage => "writing to the outbox failed",
            PublishErrorKind::Closed => "the publisher is closed",
        }
    }

    /// The [`ConsumeErrorKind`] a consumer's `?` on this error gives.
    pub(crate) fn consume_kind(self) -> ConsumeErrorKind {
        match self {
            PublishErrorKind::Storage => ConsumeErrorKind::Storage,
            PublishErrorKind::Serialize | PublishErrorKind::Address => ConsumeErrorKind::Handler,
            _ => ConsumeErrorKind::Transport,
        }
    }
}

/// Why a publish or send failed: a [`PublishErrorKind`] and the underlying error (a
/// `RabbitMqError`, a `StoreError`, `serde_json::Error` …), reachable through
/// [`source`](std::error::Error::source).
///
/// ```
/// use ferrybus_core::{PublishError, PublishErrorKind};
/// let error = PublishError::new(PublishErrorKind::NotConnected, "no connection within 5s");
/// assert_eq!(error.kind(), PublishErrorKind::NotConnected);
/// assert_eq!(error.to_string(), "not connected to the broker: no connection within 5s");
/// ```
pub struct PublishError {
    kind: PublishErrorKind,
    source: BoxError,
    /// Whether the source's own text already says what went wrong (a transport's or storage's
    /// error), so `Display` does not repeat the kind.
    self_describing: bool,
}

impl PublishError {
    /// An error of `kind` caused by `source`; displayed as `<kind>: <source>`.
    pub fn new(kind: PublishErrorKind, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            source: source.into(),
            self_describing: false,
        }
    }

    /// An error of `kind` whose `source` (a transport's or storage's own error) describes itself;
    /// displayed as the source alone.
    ///
    /// ```
    /// use ferrybus_core::{PublishError, PublishErrorKind};
    /// let io = std::io::Error::other("not connected to the broker: connection refused");
    /// let error = PublishError::from_source(PublishErrorKind::NotConnected, io);
    /// assert_eq!(error.to_string(), "not connected to the broker: connection refused");
    /// ```
    pub fn from_source(kind: PublishErrorKind, source: impl Into<BoxError>) -> Self {
        Self {
            self_describing: true,
            ..Self::new(kind, source)
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> PublishErrorKind {
        self.kind
    }

    /// The underlying error.
    pub fn into_source(self) -> BoxError {
        self.source
    }

    /// Finds an error of type `E` in the chain (e.g. the transport's own error type).
    pub fn find<E: StdError + 'static>(&self) -> Option<&E> {
        let first: &(dyn StdError + 'static) = &*self.source;
        std::iter::successors(Some(first), |e| (*e).source()).find_map(|e| e.downcast_ref::<E>())
    }
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.self_describing {
            fmt::Display::fmt(&self.source, f)
        } else {
            write!(f, "{}: {}", self.kind.as_str(), self.source)
        }
    }
}

impl fmt::Debug for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublishError")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

impl StdError for PublishError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

impl From<crate::address::AddressError> for PublishError {
    fn from(error: crate::address::AddressError) -> Self {
        Self::new(PublishErrorKind::Address, error)
    }
}

impl From<serde_json::Error> for PublishError {
    fn from(error: serde_json::Error) -> Self {
        Self::new(PublishErrorKind::Serialize, error)
    }
}

/// The last path segment of a type name, without generic arguments' paths:
/// `core::num::error::ParseIntError` → `ParseIntError`.
pub(crate) fn short_name(type_name: &'static str) -> &'static str {
    let head = type_name.split('<').next().unwrap_or(type_name);
    let start = head.rfind("::").map_or(0, |i| i + 2);
    &type_name[start..]
}

/// The type name of an error known only as `dyn Error`, read from its `Debug` text (the derived
/// `Debug` of a struct or enum starts with its name); falls back to `Error`.
pub(crate) fn dyn_error_type(error: &(dyn StdError + 'static)) -> String {
    let debug = format!("{error:?}");
    let name: String = debug
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_uppercase()) {
        "Error".to_owned()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn chain_and_types() {
        let err = ConsumeError::from(Outer(std::io::Error::other("disk")));
        assert_eq!(err.exception_type(), "Outer");
        let chain: Vec<String> = err.chain().map(|e| e.to_string()).collect();
        assert_eq!(chain, ["outer failed", "disk"]);
        assert!(err.find::<std::io::Error>().is_some());
        let inner = err.chain().nth(1).unwrap();
        assert_eq!(dyn_error_type(inner), "Custom");
    }

    #[test]
    fn handler_messages() {
        let err = ConsumeError::handler("payment declined");
        assert_eq!(err.to_string(), "payment declined");
        assert_eq!(err.exception_type(), "ConsumerException");
        assert_eq!(err.kind(), ConsumeErrorKind::Handler);
    }
}
