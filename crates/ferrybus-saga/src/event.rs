//! Events: a message type and how it finds its instance ([`Event`]).

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value as Json;
use uuid::Uuid;

use ferrybus_core::consume::ConsumeContext;
use ferrybus_core::message::Message;

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
type SelectValue<M> =
    Arc<dyn Fn(&ConsumeContext<M>) -> Result<Json, serde_json::Error> + Send + Sync>;
type SelectId<M> = Arc<dyn Fn(&M) -> Uuid + Send + Sync>;

/// How an event finds its instance.
pub(crate) enum Correlation<M> {
    /// By the instance id.
    Id(Correlate<M>),
    /// By an instance field equal to a value of the message; a new instance takes the
    /// `select_id` id, else the envelope's `correlationId`.
    Property {
        field: String,
        value: SelectValue<M>,
        select_id: Option<SelectId<M>>,
    },
}

impl<M> Clone for Correlation<M> {
    fn clone(&self) -> Self {
        match self {
            Correlation::Id(f) => Correlation::Id(f.clone()),
            Correlation::Property {
                field,
                value,
                select_id,
            } => Correlation::Property {
                field: field.clone(),
                value: value.clone(),
                select_id: select_id.clone(),
            },
        }
    }
}

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
    pub(crate) correlation: Correlation<M>,
    pub(crate) missing: MissingInstance,
}

impl<M> Clone for Event<M> {
    fn clone(&self) -> Self {
        Self {
            correlation: self.correlation.clone(),
            missing: self.missing,
        }
    }
}

impl<M: Message> Event<M> {
    /// An event correlated by the message's own id, [`Message::correlation_id`]: the field
    /// `#[message(correlated_by = "…")]` names (MassTransit's `CorrelatedBy<Guid>`), else the
    /// `CorrelationId` / `EventId` / `CommandId` convention. A message without one faults.
    ///
    /// ```
    /// use ferrybus_saga::Event;
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
    /// #[message(namespace = "Bookstore.Contracts")]
    /// #[serde(rename_all = "camelCase")]
    /// struct PaymentReceived { correlation_id: uuid::Uuid }
    ///
    /// let received = Event::<PaymentReceived>::new();
    /// # let _ = received;
    /// ```
    pub fn new() -> Self {
        Self::correlated_by_context(|ctx| ctx.message().correlation_id())
    }
}

impl<M: Message> Default for Event<M> {
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
            correlation: Correlation::Id(Arc::new(select)),
            missing: MissingInstance::default(),
        }
    }

    /// An event correlated by a property other than the id (MassTransit's
    /// `CorrelateBy(x => x.OrderNumber, ctx => ctx.Message.OrderNumber)`): the instances whose
    /// field `field` (its serde name; for PostgreSQL a column of the `SagaTable`) equals the
    /// value `select` takes from the message. Every instance found handles the event, as
    /// MassTransit's `QuerySagaFilter` does.
    ///
    /// An event of the initial state that finds none creates an instance, with the id
    /// [`select_id`](Self::select_id) gives, else the envelope's `correlationId`; without
    /// either the message faults, as MassTransit's `DefaultSagaFactory` ("The correlationId was
    /// not present and the saga could not be created"). Put a unique index on the column: two
    /// such events arriving together otherwise start two instances.
    ///
    /// ```
    /// use ferrybus_saga::Event;
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
    /// #[message(namespace = "Bookstore.Contracts")]
    /// #[serde(rename_all = "camelCase")]
    /// struct OrderSubmitted { order_number: String }
    ///
    /// // x.CorrelateBy(s => s.OrderNumber, ctx => ctx.Message.OrderNumber)
    /// //  .SelectId(_ => NewId.NextGuid())
    /// let submitted = Event::<OrderSubmitted>::correlated_by_property("order_number", |m| {
    ///     m.order_number.clone()
    /// })
    /// .select_id(|_| uuid::Uuid::now_v7());
    /// # let _ = submitted;
    /// ```
    pub fn correlated_by_property<V: Serialize>(
        field: impl Into<String>,
        select: impl Fn(&M) -> V + Send + Sync + 'static,
    ) -> Self {
        Self::correlated_by_property_in_context(field, move |ctx| select(ctx.message()))
    }

    /// [`correlated_by_property`](Self::correlated_by_property) with the value taken from the
    /// consume context (a request's responses correlate by the envelope's `requestId`).
    pub(crate) fn correlated_by_property_in_context<V: Serialize>(
        field: impl Into<String>,
        select: impl Fn(&ConsumeContext<M>) -> V + Send + Sync + 'static,
    ) -> Self {
        Self {
            correlation: Correlation::Property {
                field: field.into(),
                value: Arc::new(move |ctx| serde_json::to_value(select(ctx))),
                select_id: None,
            },
            missing: MissingInstance::default(),
        }
    }

    /// The id of an instance a [property-correlated](Self::correlated_by_property) event
    /// creates (MassTransit's `SelectId`); ignored for an event correlated by id.
    pub fn select_id(mut self, select: impl Fn(&M) -> Uuid + Send + Sync + 'static) -> Self {
        if let Correlation::Property { select_id, .. } = &mut self.correlation {
            *select_id = Some(Arc::new(select));
        }
        self
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
