//! Applying one event: load, run the matching actions, save (again on a conflict), publish.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::event::{Correlation, MissingInstance};
use crate::machine::{
    bindings_for, BehaviorContext, Binding, SagaContext, StateMachine, UnhandledEvent,
};
use crate::repository::{CurrentState, SagaChange, SagaRepository, SaveOutcome};
use crate::state::{SagaStates, State};
use crate::{SagaError, SagaErrorKind};
use ferrybus_core::consume::{ConsumeContext, Consumer};
use ferrybus_core::error::ConsumeError;
use ferrybus_core::message::Message;
use ferrybus_core::outgoing::Publish;
use ferrybus_core::outgoing::SCHEDULING_TOKEN_ID;

/// The consumer of one event type of a machine.
pub(crate) struct SagaConsumer<T, S, M> {
    machine: Arc<StateMachine<T, S>>,
    repository: Arc<dyn SagaRepository<T>>,
    _message: PhantomData<fn(M)>,
}

impl<T, S, M> SagaConsumer<T, S, M> {
    pub(crate) fn new(
        machine: Arc<StateMachine<T, S>>,
        repository: Arc<dyn SagaRepository<T>>,
    ) -> Self {
        Self {
            machine,
            repository,
            _message: PhantomData,
        }
    }
}

impl<T, S, M> SagaConsumer<T, S, M>
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
    M: Message,
{
    /// Applies the event to instance `id`: load, run, save (again on a conflict), publish.
    async fn step(
        &self,
        ctx: &ConsumeContext<M>,
        id: uuid::Uuid,
        event_name: &str,
    ) -> Result<(), ConsumeError> {
        let machine = &self.machine;
        let entry = machine
            .entry::<M>()
            .expect("the consumer exists only for the machine's events");
        for _ in 0..=machine.retries() {
            let loaded = self.repository.load(ctx.request(), id).await?;
            let (state, instance, version) = match loaded {
                Some(stored) => {
                    let state = machine
                        .parse_state(&stored.current_state)
                        .ok_or_else(|| unknown_state(machine, id, &stored.current_state))?;
                    (state, stored.instance, Some(stored.version))
                }
                None if entry.initiates() => (State::Initial, T::default(), None),
                None => return missing(machine, entry.event.missing, event_name, &id.to_string()),
            };
            let step = apply(machine, ctx, id, state, instance, event_name).await?;
            let Step::Changed {
                state: next,
                instance,
                outgoing,
            } = step
            else {
                return Ok(());
            };
            let change = match (version, machine.completes(next)) {
                (None, true) => None,
                (None, false) => Some(SagaChange::Insert {
                    correlation_id: id,
                    current_state: machine.stored_state(next),
                    instance,
                }),
                (Some(version), true) => Some(SagaChange::Delete {
                    correlation_id: id,
                    version,
                }),
                (Some(version), false) => Some(SagaChange::Update {
                    correlation_id: id,
                    current_state: machine.stored_state(next),
                    instance,
                    version,
                }),
            };
            if let Some(change) = change {
                if self.repository.save(ctx.request(), change).await? == SaveOutcome::Conflict {
                    tracing::debug!(
                        target: "ferrybus::saga",
                        saga = machine.name(),
                        %id,
                        "concurrency conflict: applying the event to the fresh instance"
                    );
                    continue;
                }
            }
            tracing::debug!(
                target: "ferrybus::saga",
                saga = machine.name(),
                %id,
                event = %event_name,
                from = state.name(),
                to = next.name(),
                "event applied"
            );
            for message in outgoing {
                ctx.deliver(message).await?;
            }
            return Ok(());
        }
        Err(SagaError::new(
            SagaErrorKind::Concurrency,
            format!(
                "instance {id} kept changing: gave up after {} conflicts",
                machine.retries() + 1
            ),
        )
        .into())
    }
}

/// The error for an instance row whose state the machine does not declare.
fn unknown_state<T, S>(
    machine: &StateMachine<T, S>,
    id: uuid::Uuid,
    stored: &CurrentState,
) -> ConsumeError
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
{
    let hint = match stored {
        CurrentState::Index(_) if !machine.has_int_state() => {
            " (the state column holds numbers: declare the order with current_state_as_int)"
        }
        _ => "",
    };
    SagaError::new(
        SagaErrorKind::UnknownState,
        format!(
            "instance {id} is in state {:?}, which {} does not declare{hint}",
            stored.to_string(),
            machine.name()
        ),
    )
    .into()
}

/// An event whose instance `what` does not exist and that the initial state does not handle:
/// discarded or faulted as the event says.
fn missing<T, S>(
    machine: &StateMachine<T, S>,
    policy: MissingInstance,
    event_name: &str,
    what: &str,
) -> Result<(), ConsumeError>
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
{
    if policy == MissingInstance::Fault {
        return Err(SagaError::new(
            SagaErrorKind::MissingInstance,
            format!("{event_name}: no {} instance {what}", machine.name()),
        )
        .into());
    }
    tracing::debug!(
        target: "ferrybus::saga",
        saga = machine.name(),
        instance = what,
        event = %event_name,
        "missing instance: event discarded"
    );
    Ok(())
}

/// What a step decided.
enum Step<T, S> {
    /// Nothing to save (ignored or filtered out).
    Nothing,
    /// The instance after the actions, with what they published.
    Changed {
        state: State<S>,
        instance: T,
        outgoing: Vec<ferrybus_core::outgoing::OutgoingMessage>,
    },
}

impl<T, S, M> Consumer<M> for SagaConsumer<T, S, M>
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
    M: Message,
{
    async fn consume(&self, ctx: ConsumeContext<M>) -> Result<(), ConsumeError> {
        #[cfg(feature = "otel")]
        let mut instrument = ferrybus_otel::SagaInstrument::start(
            &ctx.request().received().input_address,
            &M::message_type(),
            self.machine.consumer_name(),
        );
        let result = self.handle(ctx).await;
        #[cfg(feature = "otel")]
        if let Err(error) = &result {
            instrument.fault(error.exception_type());
        }
        result
    }

    fn name(&self) -> Cow<'static, str> {
        Cow::Owned(self.machine.consumer_name().to_owned())
    }
}

impl<T, S, M> SagaConsumer<T, S, M>
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
    M: Message,
{
    /// Finds the instances the event is for and applies it to each.
    async fn handle(&self, ctx: ConsumeContext<M>) -> Result<(), ConsumeError> {
        let machine = &self.machine;
        let entry = machine.entry::<M>().ok_or_else(|| {
            SagaError::new(
                SagaErrorKind::UnhandledEvent,
                "the machine has no such event",
            )
        })?;
        let event_name = ferrybus_core::message::short_type_name::<M>().to_owned();
        let (field, value, select_id) = match &entry.event.correlation {
            Correlation::Id(correlate) => {
                let id = correlate(&ctx).ok_or_else(|| {
                    SagaError::new(
                        SagaErrorKind::NoCorrelationId,
                        format!("{event_name} carries no correlation id"),
                    )
                })?;
                return self.step(&ctx, id, &event_name).await;
            }
            Correlation::Property {
                field,
                value,
                select_id,
            } => (field, value, select_id),
        };
        let value =
            value(&ctx).map_err(|e| SagaError::new(SagaErrorKind::Mapping, e.to_string()))?;
        if value.is_null() {
            return Err(SagaError::new(
                SagaErrorKind::NoCorrelationId,
                format!("{event_name} carries no {field} to correlate by"),
            )
            .into());
        }
        let ids = self.repository.find(ctx.request(), field, &value).await?;
        if ids.is_empty() {
            if !entry.initiates() {
                return missing(
                    machine,
                    entry.event.missing,
                    &event_name,
                    &format!("{field} = {value}"),
                );
            }
            let id = select_id
                .as_ref()
                .map(|select| select(ctx.message()))
                .or_else(|| ctx.correlation_id())
                .ok_or_else(|| {
                    SagaError::new(
                        SagaErrorKind::NoCorrelationId,
                        format!(
                            "{event_name}: the correlationId was not present and the {} instance \
                             could not be created (give the event a select_id)",
                            machine.name()
                        ),
                    )
                })?;
            return self.step(&ctx, id, &event_name).await;
        }
        for id in ids {
            self.step(&ctx, id, &event_name).await?;
        }
        Ok(())
    }
}

async fn apply<T, S, M>(
    machine: &StateMachine<T, S>,
    ctx: &ConsumeContext<M>,
    id: uuid::Uuid,
    state: State<S>,
    instance: T,
    event_name: &str,
) -> Result<Step<T, S>, ConsumeError>
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
    M: Message,
{
    let entry = machine
        .entry::<M>()
        .expect("the consumer exists only for the machine's events");
    let mut instance = instance;
    let current_token = match &entry.token {
        None => None,
        Some(token) => {
            // MassTransit's DuringAny(When(schedule.AnyReceived)): only the current token runs.
            let held = *token(&mut instance);
            let carried = ctx
                .headers()
                .get_str(SCHEDULING_TOKEN_ID)
                .and_then(|t| uuid::Uuid::parse_str(t).ok());
            let current = held.is_some() && carried.is_none_or(|t| Some(t) == held);
            if !current {
                tracing::debug!(
                    target: "ferrybus::saga",
                    saga = machine.name(),
                    %id,
                    token = ?carried,
                    "scheduled message not current: ignored"
                );
                return Ok(Step::Nothing);
            }
            held
        }
    };
    let bindings = bindings_for(entry, state);
    if bindings.is_empty() {
        return match machine.unhandled() {
            UnhandledEvent::Ignore => Ok(Step::Nothing),
            _ => Err(SagaError::new(
                SagaErrorKind::UnhandledEvent,
                format!(
                    "the {event_name} event is not handled during the {} state for the {} state machine",
                    state.name(),
                    machine.name()
                ),
            )
            .into()),
        };
    }
    let mut c = BehaviorContext::new(
        SagaContext::new(instance, id, state, ctx.request()),
        ctx.message(),
    );
    let ignored = bindings.iter().any(|b| match b {
        Binding::Ignore { filter } => filter.as_ref().is_none_or(|f| f(&c)),
        Binding::When { .. } => false,
    });
    if ignored {
        return Ok(Step::Nothing);
    }
    let mut ran = false;
    for binding in bindings {
        if let Binding::When { filter, activities } = binding {
            if filter.as_ref().is_none_or(|f| f(&c)) {
                ran = true;
                machine.run(activities, &mut c).await?;
            }
        }
    }
    if !ran {
        return Ok(Step::Nothing);
    }
    let mut saga = c.into_saga();
    if let (Some(token), Some(held)) = (&entry.token, current_token) {
        let field = token(&mut saga.instance);
        if *field == Some(held) {
            *field = None;
        }
    }
    Ok(Step::Changed {
        state: saga.state,
        instance: saga.instance,
        outgoing: saga.outgoing,
    })
}
