//! The errors of the core: [`ConsumeError`] (why consuming a message failed) and [`PublishError`]
//! (why a publish or send failed).

mod trace;

use std::any::Any;
use std::backtrace::Backtrace;
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
/// use ferrybus_core::ConsumeError;
/// use ferrybus_core::error::ConsumeErrorKind;
///
/// fn parse(input: &str) -> Result<i32, ConsumeError> {
///     Ok(input.parse::<i32>()?)
/// }
/// let err = parse("x").unwrap_err();
/// assert_eq!(err.kind(), ConsumeErrorKind::Handler);
/// assert_eq!(err.exception_type(), "core::num::ParseIntError");
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
            Cow::Owned(trace::readable_type_name(raw))
        };
        Self {
            kind,
            source,
            type_name,
            permanent: false,
            retry_count: 0,
            // Always captured (resolved only when a fault is written), so faults carry the same
            // trace whatever `RUST_BACKTRACE` says.
            backtrace: Backtrace::force_capture(),
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
        self.permanent || self.kind == ConsumeErrorKind::Cancelled
    }

    /// How many retries happened before this error was final (`MT-Fault-RetryCount`).
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    /// Records how many retries happened before this error was final: what a retry policy does
    /// when it gives up (`RetryPolicy` for consumers and batches).
    ///
    /// ```
    /// let mut error = ferrybus_core::ConsumeError::handler("declined");
    /// error.set_retry_count(2);
    /// assert_eq!(error.retry_count(), 2);
    /// ```
    pub fn set_retry_count(&mut self, count: u32) {
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
        let first: &(dyn StdError + 'static) = match self.source.downcast_ref::<SharedFailure>() {
            Some(shared) => shared.0.source(),
            None => &*self.source,
        };
        std::iter::successors(Some(first), |e| (*e).source())
    }

    /// The Rust type name of the outermost error, as MassTransit reports `exceptionType`: its
    /// path without private `error` modules (`serde_json::Error`, `std::io::Error`,
    /// `billing::invoice::InvoiceError`); `Exception` for a plain message.
    pub fn exception_type(&self) -> &str {
        &self.type_name
    }

    /// Where the error was made, as .NET writes a stack trace: `   at <function> in
    /// <crate>/src/<file>:line <n>` per frame of the application and its libraries (the
    /// runtime's and the standard library's frames left out), paths relative to the crate, at
    /// most 2048 characters. Captured whether or not `RUST_BACKTRACE` is set; file and line
    /// need debug info (`debug = "line-tables-only"` in a release profile is enough).
    pub fn stack_trace(&self) -> String {
        match self.source.downcast_ref::<SharedFailure>() {
            Some(shared) => shared.0.stack_trace(),
            None => trace::render(&self.backtrace),
        }
    }

    /// The same failure again, for each message of a failed batch: the kind, exception type,
    /// retry count, message, causes and stack trace of `error`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ferrybus_core::ConsumeError;
    /// let batch = Arc::new(ConsumeError::handler("the ledger is closed"));
    /// let each = ConsumeError::shared(&batch);
    /// assert_eq!(each.to_string(), "the ledger is closed");
    /// ```
    pub fn shared(error: &std::sync::Arc<ConsumeError>) -> Self {
        Self {
            kind: error.kind,
            source: Box::new(SharedFailure(error.clone())),
            type_name: error.type_name.clone(),
            permanent: error.permanent,
            retry_count: error.retry_count,
            backtrace: Backtrace::disabled(),
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

/// One failure shared by several messages (a batch's): reads as the original error.
#[derive(Debug)]
struct SharedFailure(std::sync::Arc<ConsumeError>);

impl fmt::Display for SharedFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for SharedFailure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source().source()
    }
}

impl<E> From<E> for ConsumeError
where
    E: StdError + Send + Sync + 'static,
{
    /// A consumer's `?`: kind [`ConsumeErrorKind::Handler`], or the matching transport or storage
    /// kind for a failed publish ([`PublishError`]).
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
/// use ferrybus_core::PublishError;
/// use ferrybus_core::error::PublishErrorKind;
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
    /// use ferrybus_core::PublishError;
    /// use ferrybus_core::error::PublishErrorKind;
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

pub(crate) use trace::truncate;

/// A bus configuration that cannot run: the reason in one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ConfigError {
    /// A configuration error with this reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// The type name of an error known only as `dyn Error` (a cause in a chain, a boxed error):
/// well-known types by downcasting, else the name its derived `Debug` starts with, else
/// `Exception` (the text of a `Box<dyn Error>` made from a string, or an unknown type).
pub(crate) fn dyn_error_type(error: &(dyn StdError + 'static)) -> String {
    macro_rules! known {
        ($($ty:ty),* $(,)?) => {
            $(if error.is::<$ty>() {
                return trace::readable_type_name(std::any::type_name::<$ty>());
            })*
        };
    }
    known! {
        std::io::Error,
        serde_json::Error,
        std::fmt::Error,
        std::num::ParseIntError,
        std::num::ParseFloatError,
        std::num::TryFromIntError,
        std::str::ParseBoolError,
        std::str::Utf8Error,
        std::string::FromUtf8Error,
        uuid::Error,
        chrono::ParseError,
        url::ParseError,
        tokio::time::error::Elapsed,
        ferrybus_dotnet::DotNetValueError,
        crate::envelope::EnvelopeError,
        crate::address::AddressError,
        PublishError,
    }
    let debug = format!("{error:?}");
    let name: String = debug
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if name.starts_with(|c: char| c.is_ascii_uppercase()) && name != "Error" {
        name
    } else {
        "Exception".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dyn_types_are_named() {
        let io = std::io::Error::other("x");
        assert_eq!(dyn_error_type(&io), "std::io::Error");
        let boxed: Box<dyn StdError + Send + Sync> = "text".into();
        assert_eq!(dyn_error_type(&*boxed), "Exception");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn chain_and_types() {
        let err = ConsumeError::from(Outer(std::io::Error::other("disk")));
        // The private `error` module is left out, as crates re-export their errors above it.
        assert_eq!(err.exception_type(), "ferrybus_core::tests::Outer");
        let chain: Vec<String> = err.chain().map(|e| e.to_string()).collect();
        assert_eq!(chain, ["outer failed", "disk"]);
        assert!(err.find::<std::io::Error>().is_some());
        let inner = err.chain().nth(1).unwrap();
        assert_eq!(dyn_error_type(inner), "std::io::Error");
    }

    #[test]
    fn handler_messages() {
        let err = ConsumeError::handler("payment declined");
        assert_eq!(err.to_string(), "payment declined");
        assert_eq!(err.exception_type(), "ConsumerException");
        assert_eq!(err.kind(), ConsumeErrorKind::Handler);
    }
}
