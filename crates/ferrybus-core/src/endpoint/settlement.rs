//! [`Settlement`]: what an endpoint decided for one delivery, as a value the transport carries
//! out in one place.

use std::time::Duration;

use bytes::Bytes;

use crate::envelope::Headers;
use crate::fault::ExceptionInfo;
use crate::outgoing::OutgoingMessage;

/// What the transport must do with a delivery: the `Response` of every endpoint service. Every
/// variant ends with the delivery settled; nothing is dropped.
///
/// | settlement | the transport |
/// |---|---|
/// | `Ack` | acknowledges |
/// | `Duplicate` | acknowledges (the inbox stopped a copy it had seen) |
/// | `Redeliver` | sends [`Redelivery::body`] back to the endpoint after the delay, then acknowledges |
/// | `Fault` | moves the delivery to `<queue>_error` with [`Faulted::headers`], then publishes [`Faulted::fault`] (once), then acknowledges |
/// | `Skip` | moves the delivery to `<queue>_skipped`, then acknowledges |
/// | `Abandon` | gives it back to the broker unacknowledged (requeue) |
///
/// An endpoint layer may return its own settlement without calling the endpoint (a kill switch
/// abandons while tripped) or look at the one that comes back (metrics):
///
/// ```
/// use ferrybus_core::{Settlement, SettlementKind};
/// let settlement = Settlement::Ack;
/// assert_eq!(settlement.kind(), SettlementKind::Ack);
/// assert_eq!(settlement.kind().as_str(), "ack");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Settlement {
    /// Every consumer ran and succeeded (some may have seen a duplicate): acknowledge.
    Ack,
    /// Every consumer had handled this message already (the inbox): acknowledge without
    /// running anything.
    Duplicate,
    /// Send it back to the endpoint after a delay (MassTransit's delayed redelivery), then
    /// acknowledge the original.
    Redeliver(Redelivery),
    /// Move it to `<queue>_error`, publish the fault, acknowledge.
    Fault(Box<Faulted>),
    /// No consumer for any of its message types: move it to `<queue>_skipped`, acknowledge.
    Skip {
        /// Headers added to the moved message (`MT-Reason=dead-letter`, `MT-Host-*`).
        headers: Headers,
    },
    /// Give it back to the broker unacknowledged: the endpoint is stopping (or paused).
    Abandon,
}

/// A delayed redelivery: the rewritten envelope and when to send it.
#[derive(Clone, Debug)]
pub struct Redelivery {
    /// How long to wait.
    pub delay: Duration,
    /// The rewritten envelope (with `MT-Redelivery-Count` in its headers).
    pub body: Bytes,
    /// Headers to set on the transport message (`MT-Redelivery-Count`).
    pub headers: Headers,
    /// The new redelivery count.
    pub count: u32,
}

/// A faulted delivery: everything the transport needs to move it and to publish its fault.
#[derive(Clone, Debug)]
pub struct Faulted {
    /// Headers added to the message in `<queue>_error` (`MT-Reason=fault`, `MT-Fault-*`,
    /// `MT-Host-*`); the original `expiration` is cleared.
    pub headers: Headers,
    /// The `Fault<T>` or `ReceiveFault` to publish (or send to the fault address) after the move;
    /// `None` when faults are not published.
    pub fault: Option<OutgoingMessage>,
    /// What went wrong (the outermost error, its causes as inner exceptions).
    pub exception: ExceptionInfo,
    /// Whether the body could not be read at all (a receive fault) rather than a consumer failed.
    pub receive_fault: bool,
}

/// The kind of a [`Settlement`], for metrics and traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SettlementKind {
    /// [`Settlement::Ack`].
    Ack,
    /// [`Settlement::Duplicate`].
    Duplicate,
    /// [`Settlement::Redeliver`].
    Redeliver,
    /// [`Settlement::Fault`].
    Fault,
    /// [`Settlement::Skip`].
    Skip,
    /// [`Settlement::Abandon`].
    Abandon,
}

impl SettlementKind {
    /// A lowercase name: `ack`, `duplicate`, `redeliver`, `fault`, `skip`, `abandon`.
    pub fn as_str(self) -> &'static str {
        match self {
            SettlementKind::Ack => "ack",
            SettlementKind::Duplicate => "duplicate",
            SettlementKind::Redeliver => "redeliver",
            SettlementKind::Fault => "fault",
            SettlementKind::Skip => "skip",
            SettlementKind::Abandon => "abandon",
        }
    }
}

impl Settlement {
    /// The kind of this settlement.
    pub fn kind(&self) -> SettlementKind {
        match self {
            Settlement::Ack => SettlementKind::Ack,
            Settlement::Duplicate => SettlementKind::Duplicate,
            Settlement::Redeliver(_) => SettlementKind::Redeliver,
            Settlement::Fault(_) => SettlementKind::Fault,
            Settlement::Skip { .. } => SettlementKind::Skip,
            Settlement::Abandon => SettlementKind::Abandon,
        }
    }
}
