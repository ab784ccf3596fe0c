//! [`StoreError`]: why a storage operation failed.

use std::fmt;

use ferrybus_core::{ConsumeError, PublishError};

use ferrybus_core::error::BoxError;

use ferrybus_core::error::ConsumeErrorKind;

use ferrybus_core::error::PublishErrorKind;
use sea_orm::DbErr;

/// What kind of failure a [`StoreError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// A database statement or transaction failed.
    Database,
    /// A message could not be written as an outbox row.
    Encode,
    /// An outbox row could not be read back.
    Decode,
    /// The received message has no message id (the inbox key).
    MissingMessageId,
    /// The consumer kept a clone of the inbox transaction after it returned.
    TransactionHeld,
    /// The consumer returned `Ok`, but its last statement had failed, which aborted the inbox
    /// transaction: nothing was committed.
    TransactionAborted,
    /// Sending an outbox message through the sink failed.
    Send,
    /// The configuration does not match the database.
    Config,
    /// Waiting took longer than allowed.
    Timeout,
}

impl StoreErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            StoreErrorKind::Database => "database error",
            StoreErrorKind::Encode => "cannot write outbox row",
            StoreErrorKind::Decode => "cannot read outbox row",
            StoreErrorKind::MissingMessageId => "message has no message id",
            StoreErrorKind::TransactionHeld => "consumer kept the inbox transaction",
            StoreErrorKind::TransactionAborted => "inbox transaction aborted",
            StoreErrorKind::Send => "sending an outbox message failed",
            StoreErrorKind::Config => "configuration error",
            StoreErrorKind::Timeout => "timed out",
        }
    }
}

/// A storage failure: a [`StoreErrorKind`] and, where there is one, the underlying error (a
/// [`DbErr`] for [`StoreErrorKind::Database`]).
///
/// ```
/// use ferrybus_sea_orm::{StoreError, StoreErrorKind};
/// let err = StoreError::new(StoreErrorKind::Config, "no such table");
/// assert_eq!(err.kind(), StoreErrorKind::Config);
/// assert_eq!(err.to_string(), "configuration error: no such table");
/// let consume = err.into_consume_error();
/// assert_eq!(consume.kind(), ferrybus_core::error::ConsumeErrorKind::Storage);
/// ```
pub struct StoreError {
    kind: StoreErrorKind,
    source: Option<BoxError>,
}

impl StoreError {
    /// An error of `kind` caused by `source`.
    pub fn new(kind: StoreErrorKind, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            source: Some(source.into()),
        }
    }

    pub(crate) fn database(error: DbErr) -> Self {
        Self::new(StoreErrorKind::Database, error)
    }

    pub(crate) fn encode(reason: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Encode, reason.into())
    }

    pub(crate) fn decode(reason: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Decode, reason.into())
    }

    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Config, reason.into())
    }

    pub(crate) fn send(error: ferrybus_core::PublishError) -> Self {
        Self::new(StoreErrorKind::Send, error)
    }

    /// The kind of failure.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The database error, for [`StoreErrorKind::Database`].
    pub fn db_err(&self) -> Option<&DbErr> {
        self.source.as_ref().and_then(|s| s.downcast_ref::<DbErr>())
    }

    /// Converts into a [`ConsumeError`]: [`ConsumeErrorKind::Transport`] for send failures,
    /// [`ConsumeErrorKind::Storage`] otherwise (both retried by retry policies).
    pub fn into_consume_error(self) -> ConsumeError {
        let kind = match self.kind {
            StoreErrorKind::Send => ConsumeErrorKind::Transport,
            _ => ConsumeErrorKind::Storage,
        };
        ConsumeError::new(kind, self)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{}: {source}", self.kind.as_str()),
            None => f.write_str(self.kind.as_str()),
        }
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreError")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

impl From<DbErr> for StoreError {
    fn from(error: DbErr) -> Self {
        Self::database(error)
    }
}

/// A failed outbox write as [`Publish`](ferrybus_core::Publish) reports it.
impl From<StoreError> for PublishError {
    fn from(error: StoreError) -> Self {
        let kind = match error.kind {
            StoreErrorKind::Encode => PublishErrorKind::Serialize,
            _ => PublishErrorKind::Storage,
        };
        PublishError::from_source(kind, error)
    }
}
