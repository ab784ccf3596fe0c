//! Events: a message type and how it finds its instance ([`Event`]).

use std::sync::Arc;

use uuid::Uuid;

use ferrybus_core::consume::ConsumeContext;
use ferrybus_core::message::Message;

/// A message that carries the id of the instance it belongs to (MassTransit's
/// `CorrelatedBy<Guid>`); [`Event::new`] correlates such messages by it.
///
/// ```
/// use ferrybus_saga::Correlated;
/// struct PaymentReceived { correlation_id: uuid::Uuid }
/// impl Correlated for PaymentReceived {
///     fn correlation_id(&self) -> uuid::Uuid { self.correlation_id }
/// }
/// ```
pub trait Correlated {
    /// The instance's id (`CorrelationId`).
    fn correlation_id(&self) -> Uuid;
}

/// What happens to an event whose instance does not exist and that the initial state does not
/// handle (MassTransit's `OnMissingInstance`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingInstance {
    /// Acknowledge and drop it (`m.Discard()`, MassTransit's default: an empty missing pipe,
    /// `MassTransit/Sagas/Saga/AnyExistingSagaPolicy.cs`).
    #[default]
    Discard,
    /// Fail it, so it is retried and then moved to `_error` with a `Fault<T>` (`m.Fault()`).
    Fault,
}

type Correlate<M> = Arc<dyn Fn(&ConsumeContext<M>) -> Option<Uuid> + Send + Sync>;

/// An event of a state machine: the message type `M` and how a message finds its instance
/// (MassTransit's `Event<T>` declared with `Event(() => X, x => x.CorrelateById(..))`).
///
/// Handlers take a `&Event<M>`, so an event that was never declared, or a message that is not
/// `M`, does not compile.
///
/// ```
/// use ferrybus_saga::{Event, MissingInstance};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// #[message(namespace = "Bookstore.Contracts")]
/// #[serde(rename_all = "camelCase")]
/// struct OrderShipped { order_id: uuid::Uuid }
///
/// // x.CorrelateById(context => context.Message.OrderId)
/// let shipped = Event::<OrderShipped>::correlated_by(|m| m.order_id)
///     .on_missing_instance(MissingInstance::Fault);
/// # let _ = shipped;
/// ```
pub struct Event<M> {
    pub(crate) correlate: Correlate<M>,
    pub(crate) missing: MissingInstance,
}

impl<M> Clone for Event<M> {
    fn clone(&self) -> Self {
        Self {
            correlate: self.correlate.clone(),
            missing: self.missing,
        }
    }
}

impl<M: Message + Correlated> Event<M> {
    /// An event correlated by the message's own [`Correlated::correlation_id`] (MassTransit's
    /// default for `CorrelatedBy<Guid>` messages).
    pub fn new() -> Self {
        Self::correlated_by(Correlated::correlation_id)
    }
}

impl<M: Message + Correlated> Default for Event<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: Message> Event<M> {
    /// An event correlated by a property of the message (`CorrelateById(ctx => ctx.Message.X)`).
    pub fn correlated_by(select: impl Fn(&M) -> Uuid + Send + Sync + 'static) -> Self {
        Self::correlated_by_context(move |ctx| Some(select(ctx.message())))
    }

    /// An event correlated by the envelope's `correlationId` (a message without one faults).
    pub fn correlated_by_envelope() -> Self {
        Self::correlated_by_context(|ctx| ctx.correlation_id())
    }

    /// An event correlated by anything in the consume context; `None` faults the message.
    pub fn correlated_by_context(
        select: impl Fn(&ConsumeContext<M>) -> Option<Uuid> + Send + Sync + 'static,
    ) -> Self {
        Self {
            correlate: Arc::new(select),
            missing: MissingInstance::default(),
        }
    }

    /// What happens when the instance is missing and the initial state does not handle the
    /// event (`OnMissingInstance`).
    pub fn on_missing_instance(mut self, missing: MissingInstance) -> Self {
        self.missing = missing;
        self
    }
}

impl<M> std::fmt::Debug for Event<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("message", &std::any::type_name::<M>())
            .field("missing", &self.missing)
            .finish_non_exhaustive()
    }
}
