//! [`RabbitMqError`]: the one error type of this crate.

use std::error::Error as StdError;
use std::fmt;

use ferrybus_core::error::ConfigError;
use ferrybus_core::error::{BoxError, PublishErrorKind};
use ferrybus_core::PublishError;

/// What went wrong, broadly. Match on it to decide whether to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The configuration (URI, endpoint, queue options) is invalid.
    Config,
    /// An address could not be parsed or resolved.
    Address,
    /// No connection to the broker (it is down, or the wait for a reconnect timed out).
    NotConnected,
    /// The broker refused an AMQP operation (a declaration with different flags, a missing
    /// entity, access refused ...).
    Broker,
    /// The broker negatively acknowledged a publish.
    Nacked,
    /// A mandatory message could not be routed to any queue and was returned.
    Returned,
    /// An operation took longer than its deadline.
    Timeout,
    /// The bus is stopping or stopped.
    Stopped,
    /// A request was answered with a `Fault<T>`.
    Fault,
    /// A message could not be serialized or deserialized.
    Serialization,
}

impl ErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "invalid configuration",
            ErrorKind::Address => "invalid address",
            ErrorKind::NotConnected => "not connected to the broker",
            ErrorKind::Broker => "broker operation failed",
            ErrorKind::Nacked => "the broker rejected the message (nack)",
            ErrorKind::Returned => "the message could not be routed and was returned",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Stopped => "the bus is stopped",
            ErrorKind::Fault => "the request faulted",
            ErrorKind::Serialization => "serialization failed",
        }
    }
}

/// An error of the RabbitMQ transport: a [`ErrorKind`], a message, and the underlying cause
/// (often a [`lapin::Error`]).
///
/// ```
/// use ferrybus_rabbitmq::{ErrorKind, RabbitMqError};
/// let err = RabbitMqError::new(ErrorKind::Timeout, "no confirm within 30s");
/// assert_eq!(err.kind(), ErrorKind::Timeout);
/// assert_eq!(err.to_string(), "timed out: no confirm within 30s");
/// ```
#[derive(Debug)]
pub struct RabbitMqError {
    kind: ErrorKind,
    message: String,
    source: Option<BoxError>,
}

impl RabbitMqError {
    /// An error without an underlying cause.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// An error caused by `source`.
    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A broker (AMQP) failure while doing `what`.
    pub(crate) fn amqp(what: impl Into<String>, error: lapin::Error) -> Self {
        let kind = if error.is_amqp_error() {
            ErrorKind::Broker
        } else {
            ErrorKind::NotConnected
        };
        Self::with_source(kind, what, error)
    }

    /// The message and the cause, without the kind.
    pub(crate) fn detail(&self) -> String {
        match &self.source {
            Some(source) => format!("{} ({source})", self.message),
            None => self.message.clone(),
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The underlying lapin error, if that is the cause.
    pub fn lapin_error(&self) -> Option<&lapin::Error> {
        self.source.as_ref()?.downcast_ref()
    }
}

impl fmt::Display for RabbitMqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)?;
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

impl StdError for RabbitMqError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

impl From<ferrybus_core::address::AddressError> for RabbitMqError {
    fn from(error: ferrybus_core::address::AddressError) -> Self {
        Self::with_source(ErrorKind::Address, "cannot use the address", error)
    }
}

impl From<ConfigError> for RabbitMqError {
    fn from(error: ConfigError) -> Self {
        Self::with_source(ErrorKind::Config, "the bus cannot start", error)
    }
}

/// A transport failure as the [`Publish`](ferrybus_core::Publish) trait reports it; the
/// [`RabbitMqError`] stays reachable as the source.
impl From<RabbitMqError> for PublishError {
    fn from(error: RabbitMqError) -> Self {
        let kind = match error.kind {
            ErrorKind::NotConnected => PublishErrorKind::NotConnected,
            ErrorKind::Timeout => PublishErrorKind::Timeout,
            ErrorKind::Nacked | ErrorKind::Returned => PublishErrorKind::Rejected,
            ErrorKind::Address => PublishErrorKind::Address,
            ErrorKind::Serialization => PublishErrorKind::Serialize,
            ErrorKind::Stopped => PublishErrorKind::Closed,
            ErrorKind::Config | ErrorKind::Broker | ErrorKind::Fault => PublishErrorKind::Transport,
        };
        PublishError::from_source(kind, error)
    }
}

/// A failed publish inside this crate (the request client): the transport's own error back, or
/// the [`PublishError`] as the source with the kind kept.
impl From<PublishError> for RabbitMqError {
    fn from(error: PublishError) -> Self {
        let kind = match error.kind() {
            PublishErrorKind::NotConnected => ErrorKind::NotConnected,
            PublishErrorKind::Timeout => ErrorKind::Timeout,
            PublishErrorKind::Rejected => ErrorKind::Nacked,
            PublishErrorKind::Address => ErrorKind::Address,
            PublishErrorKind::Serialize => ErrorKind::Serialization,
            PublishErrorKind::Closed => ErrorKind::Stopped,
            _ => ErrorKind::Broker,
        };
        match error.into_source().downcast::<RabbitMqError>() {
            Ok(own) => *own,
            Err(source) => Self::with_source(kind, "publishing", source),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = RabbitMqError> = std::result::Result<T, E>;
