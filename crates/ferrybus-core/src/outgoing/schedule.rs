//! Scheduled messages, as MassTransit's delayed message scheduler sends them
//! (`src/MassTransit/Scheduling/DelayedScheduleMessageProvider.cs`, `ScheduleSendPipe.cs`): an
//! ordinary send or publish with a `Delay` transport property and a `MT-Scheduling-TokenId`
//! header. The transport holds it back (on RabbitMQ the delayed-message exchange, or TTL queues
//! without the plugin), so it waits in the broker, not in the process, and survives a restart.
//!
//! MassTransit's delayed scheduler cannot take a message back: its `CancelScheduledSend` does
//! nothing. ferrybus keeps the cancelled tokens instead ([`CancelledSchedules`]), and an endpoint
//! of the same bus acknowledges a message carrying a cancelled token without running its
//! consumers.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::message::OutgoingMessage;
use crate::envelope::Headers;

/// The header carrying a scheduled message's token (MassTransit's
/// `MessageHeaders.SchedulingTokenId`).
pub const SCHEDULING_TOKEN_ID: &str = "MT-Scheduling-TokenId";

/// The transport property holding a send's delay, as .NET TimeSpan text (MassTransit's
/// `SendContext.Delay`, kept as `Delay` in an outbox row's `Properties`).
pub const DELAY_PROPERTY: &str = "Delay";

/// A message scheduled with [`Publish::schedule_send`](super::Publish::schedule_send) or
/// [`Publish::schedule_publish`](super::Publish::schedule_publish) (MassTransit's
/// `ScheduledMessage<T>`): keep [`token_id`](Self::token_id) to cancel it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledMessage {
    /// The scheduling token (`MT-Scheduling-TokenId`), for
    /// [`Publish::cancel_scheduled_send`](super::Publish::cancel_scheduled_send).
    pub token_id: Uuid,
    /// The message id.
    pub message_id: Uuid,
    /// When the message is due.
    pub scheduled_time: DateTime<Utc>,
    /// Where it goes.
    pub destination_address: String,
}

impl ScheduledMessage {
    /// Delays `message` by `delay` (no delay when it is zero, as MassTransit) and describes it.
    pub fn delay(message: &mut OutgoingMessage, token_id: Uuid, delay: Duration) -> Self {
        if !delay.is_zero() {
            let text = ferrybus_dotnet::timespan::format_timespan(delay);
            message
                .properties
                .insert(DELAY_PROPERTY.into(), text.into());
        }
        let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
        Self {
            token_id,
            message_id: message.message_id,
            scheduled_time: Utc::now()
                .checked_add_signed(delay)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
            destination_address: message.destination_address.clone(),
        }
    }
}

/// The scheduling tokens cancelled on one bus: a message arriving at one of its endpoints with
/// such a token is acknowledged without running a consumer, and the token forgotten.
///
/// The set lives in the process: a cancellation reaches the bus that made it, not another
/// instance of the service, and does not outlive a restart. A token is kept until its message
/// arrives at an endpoint of this bus: cancel only messages scheduled to this bus's own
/// endpoints (a message scheduled to another service cannot be cancelled this way, and its
/// token would be kept for the life of the process).
///
/// ```
/// use ferrybus_core::outgoing::CancelledSchedules;
/// let cancelled = CancelledSchedules::default();
/// let token = uuid::Uuid::now_v7();
/// cancelled.cancel(token);
/// assert!(cancelled.take(token));
/// assert!(!cancelled.take(token), "taken once");
/// ```
#[derive(Debug, Default)]
pub struct CancelledSchedules {
    tokens: Mutex<HashSet<Uuid>>,
}

impl CancelledSchedules {
    /// Cancels the message scheduled with `token_id`.
    pub fn cancel(&self, token_id: Uuid) {
        self.lock().insert(token_id);
    }

    /// Whether `token_id` was cancelled; forgets it.
    pub fn take(&self, token_id: Uuid) -> bool {
        self.lock().remove(&token_id)
    }

    /// Whether the message with `headers` carries a cancelled token (forgotten once seen).
    pub fn take_from(&self, headers: &Headers) -> bool {
        let token = headers
            .get_str(SCHEDULING_TOKEN_ID)
            .and_then(crate::envelope::parse_dotnet_guid);
        token.is_some_and(|token| self.take(token))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<Uuid>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }
}
