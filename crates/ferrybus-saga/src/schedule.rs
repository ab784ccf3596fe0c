//! Scheduled events (MassTransit's `Schedule` / `Unschedule`): a message the saga sends to its
//! own endpoint after a delay, and the instance field that remembers which one is current.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::event::Event;

pub(crate) type TokenFn<T> = Arc<dyn Fn(&mut T) -> &mut Option<Uuid> + Send + Sync>;

/// A schedule of a state machine (MassTransit's `Schedule<TInstance, TMessage>`, declared with
/// `Schedule(() => X, instance => instance.XTokenId, s => { s.Delay = …; s.Received = … })`):
/// the event `M` that arrives when it fires, the delay, and the instance field holding the
/// current token.
///
/// [`EventBinder::schedule`](crate::EventBinder::schedule) sends `M` to the saga's own
/// endpoint with the delay (the transport's delayed redelivery: on RabbitMQ the
/// delayed-message exchange or TTL queues, so the message waits in the broker and survives a
/// restart of the service) and stores its token; [`EventBinder::unschedule`] clears it. Bind
/// the arrival with [`StateBinder::when_scheduled`](crate::StateBinder::when_scheduled):
/// as in MassTransit, a message whose token is not the instance's current one (unscheduled, or
/// scheduled again since) is ignored, and the token is cleared when it is handled.
///
/// [`EventBinder::unschedule`]: crate::EventBinder::unschedule
///
/// ```
/// use std::time::Duration;
/// use ferrybus_saga::{Event, Schedule};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// #[message(namespace = "Bookstore.Contracts")]
/// #[serde(rename_all = "camelCase")]
/// struct PaymentTimeout { order_id: uuid::Uuid }
///
/// #[derive(Clone, Default)]
/// struct OrderState { payment_timeout_token: Option<uuid::Uuid> }
///
/// let timeout = Schedule::<OrderState, PaymentTimeout>::new(
///     Event::correlated_by(|m: &PaymentTimeout| m.order_id),
///     Duration::from_secs(300),
///     |s| &mut s.payment_timeout_token,
/// );
/// assert_eq!(timeout.delay(), Duration::from_secs(300));
/// ```
pub struct Schedule<T, M> {
    pub(crate) received: Event<M>,
    pub(crate) delay: Duration,
    pub(crate) token: TokenFn<T>,
}

impl<T, M> Clone for Schedule<T, M> {
    fn clone(&self) -> Self {
        Self {
            received: self.received.clone(),
            delay: self.delay,
            token: self.token.clone(),
        }
    }
}

impl<T, M> Schedule<T, M> {
    /// A schedule whose message arrives as `received`, `delay` after it is scheduled, its token
    /// kept in the instance field `token` returns.
    pub fn new(
        received: Event<M>,
        delay: Duration,
        token: impl Fn(&mut T) -> &mut Option<Uuid> + Send + Sync + 'static,
    ) -> Self {
        Self {
            received,
            delay,
            token: Arc::new(token),
        }
    }

    /// The delay.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// The event the scheduled message arrives as.
    pub fn received(&self) -> &Event<M> {
        &self.received
    }
}

impl<T, M> std::fmt::Debug for Schedule<T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("message", &std::any::type_name::<M>())
            .field("delay", &self.delay)
            .finish_non_exhaustive()
    }
}
