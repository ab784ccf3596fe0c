//! The state machine definition: [`StateMachine`], its binders and the contexts actions get.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use uuid::Uuid;

use crate::event::Event;
use crate::repository::{CurrentState, SagaRepository};
use crate::request::{Request, RequestTimeoutExpired, REQUEST_ACCEPT_TYPE};
use crate::run::SagaConsumer;
use crate::schedule::{Schedule, TokenFn};
use crate::state::{SagaStates, State};
use ferrybus_core::consume::ConsumeRequest;
use ferrybus_core::endpoint::EndpointConfig;
use ferrybus_core::endpoint::EndpointNameFormatter;
use ferrybus_core::envelope::Envelope;
use ferrybus_core::error::ConsumeError;
use ferrybus_core::message::Message;
use ferrybus_core::outgoing::{MessageOrigin, OutgoingMessage, SendOptions};
use ferrybus_core::outgoing::{ScheduledMessage, SCHEDULING_TOKEN_ID};
use ferrybus_core::PublishError;

/// What happens to an event the instance's current state does not handle (MassTransit's
/// `OnUnhandledEvent`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnhandledEvent {
    /// Fail the message, so it is retried and then faulted (MassTransit's default, which throws
    /// `UnhandledEventException`: `MassTransit/SagaStateMachine/MassTransitStateMachine.cs`,
    /// `DefaultUnhandledEventCallback`).
    #[default]
    Fault,
    /// Acknowledge it and change nothing (`OnUnhandledEvent(x => x.Ignore())`).
    Ignore,
}

type EventFn<T, S, M> =
    Box<dyn Fn(&mut BehaviorContext<'_, T, S, M>) -> Result<(), ConsumeError> + Send + Sync>;
/// A boxed future of an asynchronous action, borrowing its context.
pub type ActionFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ConsumeError>> + Send + 'a>>;
type AsyncEventFn<T, S, M> =
    Box<dyn for<'a, 'b> Fn(&'a mut BehaviorContext<'b, T, S, M>) -> ActionFuture<'a> + Send + Sync>;
type CondFn<T, S, M> = Box<dyn Fn(&BehaviorContext<'_, T, S, M>) -> bool + Send + Sync>;
type FinalFn<T, S> =
    Box<dyn Fn(&mut SagaContext<'_, T, S>) -> Result<(), ConsumeError> + Send + Sync>;
type Register<T, S> =
    fn(EndpointConfig, Arc<StateMachine<T, S>>, Arc<dyn SagaRepository<T>>) -> EndpointConfig;

pub(crate) enum Activity<T, S, M> {
    Then(EventFn<T, S, M>),
    ThenAsync(AsyncEventFn<T, S, M>),
    TransitionTo(State<S>),
    If(
        CondFn<T, S, M>,
        Vec<Activity<T, S, M>>,
        Vec<Activity<T, S, M>>,
    ),
}

pub(crate) enum Binding<T, S, M> {
    When {
        filter: Option<CondFn<T, S, M>>,
        activities: Vec<Activity<T, S, M>>,
    },
    Ignore {
        filter: Option<CondFn<T, S, M>>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Selector<S> {
    State(State<S>),
    /// Every state but `Initial` and `Final` (MassTransit's `DuringAny`).
    Any,
}

impl<S: SagaStates> Selector<S> {
    fn matches(self, state: State<S>) -> bool {
        match self {
            Selector::State(s) => s == state,
            Selector::Any => !matches!(state, State::Initial | State::Final),
        }
    }
}

type SelectedBinding<T, S, M> = (Selector<S>, Arc<Binding<T, S, M>>);

pub(crate) struct EventEntry<T, S, M> {
    pub(crate) event: Event<M>,
    pub(crate) bindings: Vec<SelectedBinding<T, S, M>>,
    /// For a schedule's event: the instance's token field (stale messages are ignored).
    pub(crate) token: Option<TokenFn<T>>,
}

impl<T, S: SagaStates, M> EventEntry<T, S, M> {
    /// Whether the initial state handles the event, so a missing instance is created
    /// (MassTransit's `NewOrExistingSagaPolicy`, `MessageEventCorrelation.GetSagaPolicy`).
    pub(crate) fn initiates(&self) -> bool {
        self.bindings
            .iter()
            .any(|(s, _)| *s == Selector::State(State::Initial))
    }
}

/// A state machine saga over instances of `T` in the states of `S` (MassTransit's
/// `MassTransitStateMachine<TInstance>`). Built once, then bound to a receive endpoint with
/// [`SagaEndpointExt::saga`], which adds one consumer per event.
///
/// | ferrybus | MassTransit |
/// |---|---|
/// | `StateMachine::new("OrderState")` | `class OrderStateMachine : MassTransitStateMachine<OrderState>` |
/// | a [`SagaStates`] enum ([`saga_states!`](crate::saga_states)) | `public State Submitted { get; }` |
/// | [`Event::correlated_by`] | `Event(() => X, x => x.CorrelateById(..))` |
/// | [`initially`](Self::initially) / [`during`](Self::during) / [`during_any`](Self::during_any) / [`finally`](Self::finally) | `Initially` / `During` / `DuringAny` / `Finally` |
/// | [`StateBinder::when`], [`StateBinder::when_if`] | `When(event)`, `When(event, filter)` |
/// | [`StateBinder::ignore`] | `Ignore(event)` |
/// | [`EventBinder::then`], [`EventBinder::transition_to`], [`EventBinder::finalize`] | `Then`, `TransitionTo`, `Finalize` |
/// | [`EventBinder::then_async`] | `ThenAsync` |
/// | [`EventBinder::request`], [`StateMachine::request`], [`Request`] | `Request(…)`, `.Request(request, …)` |
/// | [`Event::correlated_by_property`], [`Event::select_id`] | `CorrelateBy(x => x.Property, …)`, `SelectId` |
/// | [`current_state_as_int`](Self::current_state_as_int) | `InstanceState(x => x.CurrentState, …)` on an `int` |
/// | [`dotnet_type`](Self::dotnet_type) | the instance type's name (inbox consumer id, fault consumer type) |
/// | [`EventBinder::publish`], [`EventBinder::send`], [`EventBinder::respond`] | `Publish`, `Send`, `Respond` |
/// | [`EventBinder::if_then`], [`EventBinder::if_else`] | `If`, `IfElse` |
/// | [`set_completed_when_finalized`](Self::set_completed_when_finalized) | `SetCompletedWhenFinalized()` |
/// | [`on_unhandled_event`](Self::on_unhandled_event) | `OnUnhandledEvent` |
/// | [`MissingInstance`](crate::MissingInstance) | `OnMissingInstance` |
///
/// ```
/// use ferrybus_saga::{Event, StateMachine};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Bookstore.Contracts")]
/// # #[serde(rename_all = "camelCase")]
/// # struct OrderSubmitted { order_id: uuid::Uuid }
/// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Bookstore.Contracts")]
/// # #[serde(rename_all = "camelCase")]
/// # struct OrderItemAdded { order_id: uuid::Uuid }
/// ferrybus_saga::saga_states! { enum OrderStatus { Submitted } }
///
/// #[derive(Clone, Debug, Default)]
/// struct OrderState { item_count: i32 }
///
/// let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
/// let item_added = Event::<OrderItemAdded>::correlated_by(|m| m.order_id);
/// let machine = StateMachine::<OrderState, OrderStatus>::new("OrderState")
///     .initially(|s| s.when(&submitted, |b| b.transition_to(OrderStatus::Submitted)))
///     .during(OrderStatus::Submitted, |s| {
///         s.when(&item_added, |b| b.then(|c| c.instance.item_count += 1))
///             .ignore(&submitted)
///     });
/// assert_eq!(machine.endpoint_name(), "order-state");
/// assert_eq!(machine.event_count(), 2);
/// ```
pub struct StateMachine<T, S> {
    name: String,
    dotnet_type: Option<String>,
    /// The states after `Initial` (1) and `Final` (2) when `CurrentState` is an int.
    int_states: Option<Vec<S>>,
    events: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    registrations: Vec<Register<T, S>>,
    finally: Vec<FinalFn<T, S>>,
    completed_when_finalized: bool,
    unhandled: UnhandledEvent,
    conflict_retries: u32,
}

impl<T, S> StateMachine<T, S>
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
{
    /// A machine named `name`: the consumer name in faults and inbox ids, and (see
    /// [`endpoint_name`](Self::endpoint_name)) its endpoint's. Use the .NET instance type's name
    /// (`OrderState`).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            dotnet_type: None,
            int_states: None,
            events: HashMap::new(),
            registrations: Vec::new(),
            finally: Vec::new(),
            completed_when_finalized: false,
            unhandled: UnhandledEvent::default(),
            conflict_retries: 100,
        }
    }

    /// The machine's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Names the .NET saga instance type this machine shares its queue and tables with
    /// (namespace qualified, nested types with `+`: `Sales.Sagas.OrderState`), so that a Rust
    /// and a .NET instance of the saga on one queue deduplicate each other's redeliveries
    /// through the same `inbox_state` row.
    ///
    /// MassTransit keys a saga's inbox rows by `JobMetadataCache<TSaga, TMessage>
    /// .GenerateJobTypeId(queue)`: the MD5 of `"{saga instance type}:{message type}:{queue}"`
    /// read as a .NET `Guid` (`MassTransit/JobService/JobService/JobMetadataCache.cs`, used by
    /// `OutboxConsumePipeSpecificationObserver.SagaMessageConfigured`), and names the same type
    /// as the consumer of its faults (`CorrelatedSagaFilter`). With this set, the saga's
    /// consumers are named after the .NET type, so both come out as .NET's; the endpoint name
    /// and log fields keep [`name`](Self::name).
    ///
    /// ```
    /// use ferrybus_saga::{Event, StateMachine};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
    /// # #[message(namespace = "Sales.Contracts")]
    /// # #[serde(rename_all = "camelCase")]
    /// # struct OrderSubmitted { order_id: uuid::Uuid }
    /// ferrybus_saga::saga_states! { enum OrderStatus { Submitted } }
    /// let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    /// let machine = StateMachine::<(), OrderStatus>::new("OrderState")
    ///     .dotnet_type("Sales.Sagas.OrderState")
    ///     .initially(|s| s.when(&submitted, |b| b.transition_to(OrderStatus::Submitted)));
    /// assert_eq!(machine.consumer_name(), "Sales.Sagas.OrderState");
    /// assert_eq!(
    ///     machine.consumer_id::<OrderSubmitted>("order-state"),
    ///     ferrybus_core::message::consumer_id(
    ///         "Sales.Sagas.OrderState",
    ///         "Sales.Contracts.OrderSubmitted",
    ///         "order-state",
    ///     ),
    /// );
    /// ```
    pub fn dotnet_type(mut self, type_name: impl Into<String>) -> Self {
        self.dotnet_type = Some(type_name.into());
        self
    }

    /// The name of the machine's consumers: the [`dotnet_type`](Self::dotnet_type) when set,
    /// else [`name`](Self::name). It is the consumer type in fault headers and the first part
    /// of the inbox consumer id.
    pub fn consumer_name(&self) -> &str {
        self.dotnet_type.as_deref().unwrap_or(&self.name)
    }

    /// The inbox consumer id the machine's consumer of `M` uses on the endpoint `queue` (with
    /// no `PostgresStorage::consumer_id` override): MD5 of
    /// `"{consumer_name}:{M's .NET type}:{queue}"`, as MassTransit derives it.
    pub fn consumer_id<M: Message>(&self, queue: &str) -> Uuid {
        ferrybus_core::message::consumer_id(
            self.consumer_name(),
            &M::message_type().dotnet_name(),
            queue,
        )
    }

    /// The endpoint name MassTransit's kebab-case formatter gives the saga: `Saga` trimmed,
    /// then kebab case (`OrderState` → `order-state`; `DefaultEndpointNameFormatter.GetSagaName`).
    /// Other formatters: [`EndpointNameFormatter::saga`] with [`name`](Self::name).
    pub fn endpoint_name(&self) -> String {
        EndpointNameFormatter::kebab_case()
            .saga(&self.name)
            .unwrap_or_else(|_| self.name.clone())
    }

    /// Stores `CurrentState` as a number, as MassTransit's
    /// `InstanceState(x => x.CurrentState, Submitted, Accepted)` on an `int` property does:
    /// `Initial` is 1, `Final` 2, then the states of `order` from 3, then the machine's other
    /// states in declaration order; 0 (an instance never assigned) reads as `Initial`
    /// (`MassTransit/SagaStateMachine/SagaStateMachine/Accessors/StateAccessorIndex.cs`,
    /// `IntStateAccessor.cs`, `InitialIfNullStateAccessor.cs`). The repository needs an integer
    /// state column (`SagaTable::int_state` for PostgreSQL).
    ///
    /// ```
    /// use ferrybus_saga::{CurrentState, State, StateMachine};
    /// ferrybus_saga::saga_states! { enum OrderStatus { Accepted, Submitted } }
    /// let machine = StateMachine::<(), OrderStatus>::new("OrderState")
    ///     .current_state_as_int([OrderStatus::Submitted, OrderStatus::Accepted]);
    /// assert_eq!(machine.stored_state(State::Initial), CurrentState::Index(1));
    /// assert_eq!(machine.stored_state(State::Final), CurrentState::Index(2));
    /// assert_eq!(machine.stored_state(OrderStatus::Submitted.into()), CurrentState::Index(3));
    /// assert_eq!(machine.stored_state(OrderStatus::Accepted.into()), CurrentState::Index(4));
    /// assert_eq!(machine.parse_state(&CurrentState::Index(0)), Some(State::Initial));
    /// ```
    pub fn current_state_as_int(mut self, order: impl IntoIterator<Item = S>) -> Self {
        let mut states: Vec<S> = Vec::new();
        for state in order.into_iter().chain(S::all().iter().copied()) {
            if !states.contains(&state) {
                states.push(state);
            }
        }
        self.int_states = Some(states);
        self
    }

    /// Whether `CurrentState` is stored as a number
    /// ([`current_state_as_int`](Self::current_state_as_int)).
    pub fn has_int_state(&self) -> bool {
        self.int_states.is_some()
    }

    /// What the repository stores for `state`: its name, or its number with
    /// [`current_state_as_int`](Self::current_state_as_int).
    pub fn stored_state(&self, state: State<S>) -> CurrentState {
        let Some(states) = &self.int_states else {
            return CurrentState::Name(state.name().to_owned());
        };
        CurrentState::Index(match state {
            State::Initial => 1,
            State::Final => 2,
            State::Is(s) => {
                let position = states.iter().position(|x| *x == s).unwrap_or_default();
                i32::try_from(position).map_or(i32::MAX, |p| p.saturating_add(3))
            }
        })
    }

    /// The state a stored `CurrentState` names; `None` for a name or number the machine does
    /// not declare.
    pub fn parse_state(&self, stored: &CurrentState) -> Option<State<S>> {
        match stored {
            CurrentState::Name(name) => State::parse(name),
            CurrentState::Index(index) => {
                let states = self.int_states.as_ref()?;
                match *index {
                    0 | 1 => Some(State::Initial),
                    2 => Some(State::Final),
                    n => {
                        let position = usize::try_from(n.checked_sub(3)?).ok()?;
                        states.get(position).copied().map(State::Is)
                    }
                }
            }
        }
    }

    /// How many event types the machine handles (one consumer each).
    pub fn event_count(&self) -> usize {
        self.registrations.len()
    }

    /// Events handled while the instance does not exist yet (MassTransit's `Initially`): such
    /// an event creates the instance (`T::default()` in `Initial`).
    pub fn initially(
        self,
        bind: impl FnOnce(StateBinder<'_, T, S>) -> StateBinder<'_, T, S>,
    ) -> Self {
        self.bind(vec![Selector::State(State::Initial)], bind)
    }

    /// Events handled in `state` (MassTransit's `During(state, …)`); `State::Final` too.
    pub fn during(
        self,
        state: impl Into<State<S>>,
        bind: impl FnOnce(StateBinder<'_, T, S>) -> StateBinder<'_, T, S>,
    ) -> Self {
        self.bind(vec![Selector::State(state.into())], bind)
    }

    /// Events handled in each of `states` (`During(state1, state2, …)`).
    pub fn during_each(
        self,
        states: impl IntoIterator<Item = S>,
        bind: impl FnOnce(StateBinder<'_, T, S>) -> StateBinder<'_, T, S>,
    ) -> Self {
        let selectors = states
            .into_iter()
            .map(|s| Selector::State(State::Is(s)))
            .collect();
        self.bind(selectors, bind)
    }

    /// Declares `request` (MassTransit's `Request(() => X, …)`): in every state but `Initial`
    /// and `Final`, its response clears the instance's pending request id before the actions
    /// of the state's own `when` run (`DuringAny(When(Completed).CancelRequestTimeout(…))`), and
    /// so does its fault with [`Request::clear_request_id_on_faulted`]; a timeout that arrives
    /// after that finds no instance and is discarded. Declare it before the states that handle
    /// its events.
    pub fn request<R: Message, P: Message>(self, request: &Request<T, R, P>) -> Self {
        let completed = request.request_id.clone();
        let faulted = request.clear_on_faulted.then(|| request.request_id.clone());
        self.during_any(|s| {
            let s = s.when(&request.completed, move |b| {
                b.then(move |c| *completed(&mut c.instance) = None)
            });
            match faulted {
                Some(clear) => s.when(&request.faulted, move |b| {
                    b.then(move |c| *clear(&mut c.instance) = None)
                }),
                None => s.when(&request.faulted, |b| b),
            }
        })
    }

    /// Events handled in every state except `Initial` and `Final` (MassTransit's `DuringAny`,
    /// which leaves those two out "to avoid reviving finalized state machine instances or
    /// creating new ones accidentally").
    pub fn during_any(
        self,
        bind: impl FnOnce(StateBinder<'_, T, S>) -> StateBinder<'_, T, S>,
    ) -> Self {
        self.bind(vec![Selector::Any], bind)
    }

    /// Actions run when an instance enters `Final` (MassTransit's `Finally`).
    pub fn finally(self, bind: impl FnOnce(FinallyBinder<T, S>) -> FinallyBinder<T, S>) -> Self {
        let binder = bind(FinallyBinder {
            activities: Vec::new(),
        });
        let mut this = self;
        this.finally.extend(binder.activities);
        this
    }

    /// Deletes an instance once it is in `Final` (MassTransit's `SetCompletedWhenFinalized`);
    /// without it, finalized instances stay with `CurrentState = 'Final'`.
    pub fn set_completed_when_finalized(mut self) -> Self {
        self.completed_when_finalized = true;
        self
    }

    /// What happens to an event the current state does not handle (default: fault).
    pub fn on_unhandled_event(mut self, unhandled: UnhandledEvent) -> Self {
        self.unhandled = unhandled;
        self
    }

    /// How many times an event is applied again to the fresh instance after a concurrency
    /// conflict before the message fails (100 by default).
    pub fn conflict_retries(mut self, retries: u32) -> Self {
        self.conflict_retries = retries;
        self
    }

    fn bind(
        mut self,
        selectors: Vec<Selector<S>>,
        bind: impl FnOnce(StateBinder<'_, T, S>) -> StateBinder<'_, T, S>,
    ) -> Self {
        bind(StateBinder {
            machine: &mut self,
            selectors,
        });
        self
    }

    fn entry_mut<M: Message>(&mut self, event: &Event<M>) -> &mut EventEntry<T, S, M> {
        let id = TypeId::of::<M>();
        let registrations = &mut self.registrations;
        self.events
            .entry(id)
            .or_insert_with(|| {
                registrations.push(register::<T, S, M>);
                let entry: EventEntry<T, S, M> = EventEntry {
                    event: event.clone(),
                    bindings: Vec::new(),
                    token: None,
                };
                Box::new(entry)
            })
            .downcast_mut()
            .expect("entries are keyed by their message type")
    }

    pub(crate) fn entry<M: Message>(&self) -> Option<&EventEntry<T, S, M>> {
        self.events
            .get(&TypeId::of::<M>())
            .and_then(|e| e.downcast_ref())
    }

    pub(crate) fn completes(&self, state: State<S>) -> bool {
        self.completed_when_finalized && state == State::Final
    }

    pub(crate) fn unhandled(&self) -> UnhandledEvent {
        self.unhandled
    }

    pub(crate) fn retries(&self) -> u32 {
        self.conflict_retries
    }

    /// Runs the activities of `activities` on `c`, in order.
    pub(crate) fn run<'c, 'r, M>(
        &'c self,
        activities: &'c [Activity<T, S, M>],
        c: &'c mut BehaviorContext<'r, T, S, M>,
    ) -> ActionFuture<'c>
    where
        M: Sync,
        'r: 'c,
    {
        Box::pin(async move {
            for activity in activities {
                match activity {
                    Activity::Then(f) => f(c)?,
                    Activity::ThenAsync(f) => f(c).await?,
                    Activity::TransitionTo(to) => {
                        let from = c.saga.state;
                        c.saga.state = *to;
                        if *to == State::Final && from != State::Final {
                            for f in &self.finally {
                                f(&mut c.saga)?;
                            }
                        }
                    }
                    Activity::If(condition, yes, no) => {
                        let branch = if condition(c) { yes } else { no };
                        self.run(branch, c).await?;
                    }
                }
            }
            Ok(())
        })
    }
}

impl<T, S> std::fmt::Debug for StateMachine<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine")
            .field("name", &self.name)
            .field("dotnet_type", &self.dotnet_type)
            .field("int_state", &self.int_states.is_some())
            .field("events", &self.registrations.len())
            .field("completed_when_finalized", &self.completed_when_finalized)
            .field("unhandled", &self.unhandled)
            .finish_non_exhaustive()
    }
}

fn register<T, S, M>(
    endpoint: EndpointConfig,
    machine: Arc<StateMachine<T, S>>,
    repository: Arc<dyn SagaRepository<T>>,
) -> EndpointConfig
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
    M: Message,
{
    endpoint.consumer::<M, _>(SagaConsumer::<T, S, M>::new(machine, repository))
}

/// Binds a saga to a receive endpoint: one consumer per event of the machine, so the endpoint
/// binds each event's exchange, and with `.inbox()` every step runs in the inbox transaction.
///
/// ```
/// use ferrybus_saga::{Event, InMemorySagaRepository, SagaEndpointExt, StateMachine};
/// use ferrybus_core::EndpointConfig;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Bookstore.Contracts")]
/// # #[serde(rename_all = "camelCase")]
/// # struct OrderSubmitted { order_id: uuid::Uuid }
/// ferrybus_saga::saga_states! { enum OrderStatus { Submitted } }
/// let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
/// let machine = StateMachine::<u32, OrderStatus>::new("OrderState")
///     .initially(|s| s.when(&submitted, |b| b.transition_to(OrderStatus::Submitted)));
/// let endpoint = EndpointConfig::new(machine.endpoint_name())
///     .saga(machine, InMemorySagaRepository::new());
/// assert_eq!(endpoint.message_types().len(), 1);
/// ```
pub trait SagaEndpointExt: Sized {
    /// Adds the machine's consumers, storing instances in `repository`.
    fn saga<T, S>(
        self,
        machine: impl Into<Arc<StateMachine<T, S>>>,
        repository: impl SagaRepository<T>,
    ) -> Self
    where
        T: Clone + Default + Send + Sync + 'static,
        S: SagaStates;
}

impl SagaEndpointExt for EndpointConfig {
    fn saga<T, S>(
        self,
        machine: impl Into<Arc<StateMachine<T, S>>>,
        repository: impl SagaRepository<T>,
    ) -> Self
    where
        T: Clone + Default + Send + Sync + 'static,
        S: SagaStates,
    {
        let machine = machine.into();
        let repository: Arc<dyn SagaRepository<T>> = Arc::new(repository);
        machine
            .registrations
            .iter()
            .fold(self, |endpoint, register| {
                register(endpoint, machine.clone(), repository.clone())
            })
    }
}

/// Binds events to the states of one `initially` / `during` / `during_any` block.
pub struct StateBinder<'m, T, S> {
    machine: &'m mut StateMachine<T, S>,
    selectors: Vec<Selector<S>>,
}

impl<T, S> StateBinder<'_, T, S>
where
    T: Clone + Default + Send + Sync + 'static,
    S: SagaStates,
{
    /// Handles `event` with the actions `bind` adds (MassTransit's `When(event)`).
    pub fn when<M: Message>(
        self,
        event: &Event<M>,
        bind: impl FnOnce(EventBinder<T, S, M>) -> EventBinder<T, S, M>,
    ) -> Self {
        let binder = bind(EventBinder::new());
        self.add(
            event,
            Binding::When {
                filter: None,
                activities: binder.activities,
            },
        )
    }

    /// Handles `event` when `filter` holds (MassTransit's `When(event, filter)`); otherwise the
    /// event is acknowledged and changes nothing.
    pub fn when_if<M: Message>(
        self,
        event: &Event<M>,
        filter: impl Fn(&BehaviorContext<'_, T, S, M>) -> bool + Send + Sync + 'static,
        bind: impl FnOnce(EventBinder<T, S, M>) -> EventBinder<T, S, M>,
    ) -> Self {
        let binder = bind(EventBinder::new());
        self.add(
            event,
            Binding::When {
                filter: Some(Box::new(filter)),
                activities: binder.activities,
            },
        )
    }

    /// Handles the arrival of `schedule`'s message (MassTransit's `When(Schedule.Received)`):
    /// only the current one runs `bind`'s actions; one whose token the instance no longer
    /// holds is ignored.
    pub fn when_scheduled<M: Message>(
        self,
        schedule: &Schedule<T, M>,
        bind: impl FnOnce(EventBinder<T, S, M>) -> EventBinder<T, S, M>,
    ) -> Self {
        let token = schedule.token.clone();
        self.machine.entry_mut(&schedule.received).token = Some(token);
        self.when(&schedule.received, bind)
    }

    /// Acknowledges `event` in these states without changing anything (MassTransit's
    /// `Ignore(event)`), instead of the unhandled-event fault.
    pub fn ignore<M: Message>(self, event: &Event<M>) -> Self {
        self.add(event, Binding::Ignore { filter: None })
    }

    /// Ignores `event` when `filter` holds (`Ignore(event, filter)`).
    pub fn ignore_if<M: Message>(
        self,
        event: &Event<M>,
        filter: impl Fn(&BehaviorContext<'_, T, S, M>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.add(
            event,
            Binding::Ignore {
                filter: Some(Box::new(filter)),
            },
        )
    }

    fn add<M: Message>(self, event: &Event<M>, binding: Binding<T, S, M>) -> Self {
        let binding = Arc::new(binding);
        let selectors = self.selectors.clone();
        let entry = self.machine.entry_mut(event);
        for selector in selectors {
            entry.bindings.push((selector, binding.clone()));
        }
        self
    }
}

impl<T, S> std::fmt::Debug for StateBinder<'_, T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateBinder").finish_non_exhaustive()
    }
}

pub(crate) fn bindings_for<T, S: SagaStates, M>(
    entry: &EventEntry<T, S, M>,
    state: State<S>,
) -> Vec<&Binding<T, S, M>> {
    entry
        .bindings
        .iter()
        .filter(|(selector, _)| selector.matches(state))
        .map(|(_, b)| b.as_ref())
        .collect()
}

/// The actions of one `When(event)` (MassTransit's `EventActivityBinder<TInstance, TData>`),
/// run in order.
pub struct EventBinder<T, S, M> {
    activities: Vec<Activity<T, S, M>>,
}

impl<T, S, M> EventBinder<T, S, M>
where
    T: Send + Sync + 'static,
    S: SagaStates,
    M: Message,
{
    fn new() -> Self {
        Self {
            activities: Vec::new(),
        }
    }

    /// Changes the instance (MassTransit's `Then`).
    pub fn then(
        self,
        f: impl Fn(&mut BehaviorContext<'_, T, S, M>) + Send + Sync + 'static,
    ) -> Self {
        self.try_then(move |c| {
            f(c);
            Ok(())
        })
    }

    /// A `Then` that may fail: the error fails the message and nothing of the step is saved.
    pub fn try_then(
        mut self,
        f: impl Fn(&mut BehaviorContext<'_, T, S, M>) -> Result<(), ConsumeError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.activities.push(Activity::Then(Box::new(f)));
        self
    }

    /// An asynchronous action (MassTransit's `ThenAsync`): awaited in order with the others,
    /// inside the step, so what it changes is saved with the instance (and, behind the inbox,
    /// in the same transaction). Return the future boxed (`Box::pin(async move { … })`); an
    /// error fails the message and nothing of the step is saved.
    ///
    /// ```
    /// use ferrybus_saga::{Event, StateMachine};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
    /// # #[message(namespace = "Bookstore.Contracts")]
    /// # #[serde(rename_all = "camelCase")]
    /// # struct OrderSubmitted { order_id: uuid::Uuid, customer: String }
    /// # async fn credit_limit(_customer: &str) -> Result<i64, ferrybus_core::ConsumeError> { Ok(100) }
    /// ferrybus_saga::saga_states! { enum OrderStatus { Submitted } }
    /// #[derive(Clone, Debug, Default)]
    /// struct OrderState { credit_limit: i64 }
    ///
    /// let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    /// let machine = StateMachine::<OrderState, OrderStatus>::new("OrderState").initially(|s| {
    ///     s.when(&submitted, |b| {
    ///         b.then_async(|c| Box::pin(async move {
    ///             c.instance.credit_limit = credit_limit(&c.message().customer).await?;
    ///             Ok(())
    ///         }))
    ///         .transition_to(OrderStatus::Submitted)
    ///     })
    /// });
    /// # let _ = machine;
    /// ```
    pub fn then_async<F>(mut self, f: F) -> Self
    where
        F: for<'a, 'b> Fn(&'a mut BehaviorContext<'b, T, S, M>) -> ActionFuture<'a>
            + Send
            + Sync
            + 'static,
    {
        self.activities.push(Activity::ThenAsync(Box::new(f)));
        self
    }

    /// Moves the instance to `state` (MassTransit's `TransitionTo`).
    pub fn transition_to(mut self, state: impl Into<State<S>>) -> Self {
        self.activities.push(Activity::TransitionTo(state.into()));
        self
    }

    /// Moves the instance to `Final` (MassTransit's `Finalize`), running the
    /// [`finally`](StateMachine::finally) actions.
    pub fn finalize(self) -> Self {
        self.transition_to(State::Final)
    }

    /// Publishes the message `build` makes (MassTransit's `Publish`); it leaves only if the step
    /// is saved (and, behind the inbox, committed).
    pub fn publish<P: Message>(
        self,
        build: impl Fn(&BehaviorContext<'_, T, S, M>) -> P + Send + Sync + 'static,
    ) -> Self {
        self.try_then(move |c| {
            let message = build(c);
            c.publish(&message)?;
            Ok(())
        })
    }

    /// Sends the message `build` makes to `address` (MassTransit's `Send`).
    pub fn send<P: Message>(
        self,
        address: impl Into<String>,
        build: impl Fn(&BehaviorContext<'_, T, S, M>) -> P + Send + Sync + 'static,
    ) -> Self {
        let address = address.into();
        self.try_then(move |c| {
            let message = build(c);
            c.send(&address, &message)?;
            Ok(())
        })
    }

    /// Responds to the event's request with the message `build` makes (MassTransit's
    /// `Respond`).
    pub fn respond<P: Message>(
        self,
        build: impl Fn(&BehaviorContext<'_, T, S, M>) -> P + Send + Sync + 'static,
    ) -> Self {
        self.try_then(move |c| {
            let message = build(c);
            c.respond(&message)?;
            Ok(())
        })
    }

    /// Schedules the message `build` makes (MassTransit's `Schedule(schedule, …)`): sent to
    /// this endpoint after the schedule's delay, with a new token stored in the instance and in
    /// its `MT-Scheduling-TokenId` header. Like a publish, it leaves only if the step is saved.
    pub fn schedule<P: Message>(
        self,
        schedule: &Schedule<T, P>,
        build: impl Fn(&BehaviorContext<'_, T, S, M>) -> P + Send + Sync + 'static,
    ) -> Self {
        let schedule = schedule.clone();
        self.try_then(move |c| {
            let message = build(c);
            c.schedule_send(&message, schedule.delay, &schedule.token)?;
            Ok(())
        })
    }

    /// Forgets the scheduled message (MassTransit's `Unschedule`): the token is cleared, so the
    /// message is ignored when it arrives (a delayed RabbitMQ message cannot be taken back,
    /// as with MassTransit's delayed-exchange scheduler).
    pub fn unschedule<P: Message>(self, schedule: &Schedule<T, P>) -> Self {
        let token = schedule.token.clone();
        self.then(move |c| *token(&mut c.instance) = None)
    }

    /// Sends the request `build` makes (MassTransit's `.Request(request, ctx => …)`): see
    /// [`Request`]. Like a publish, it leaves only if the step is saved; the pending request's
    /// id is in the instance from then on.
    pub fn request<R: Message, P: Message>(
        self,
        request: &Request<T, R, P>,
        build: impl Fn(&BehaviorContext<'_, T, S, M>) -> R + Send + Sync + 'static,
    ) -> Self {
        let request = request.clone();
        self.try_then(move |c| {
            let message = build(c);
            c.send_request(&request, message)?;
            Ok(())
        })
    }

    /// Runs the actions `bind` adds only when `condition` holds (MassTransit's `If`).
    pub fn if_then(
        self,
        condition: impl Fn(&BehaviorContext<'_, T, S, M>) -> bool + Send + Sync + 'static,
        bind: impl FnOnce(EventBinder<T, S, M>) -> EventBinder<T, S, M>,
    ) -> Self {
        self.if_else(condition, bind, |b| b)
    }

    /// Runs `yes`'s actions when `condition` holds, else `no`'s (MassTransit's `IfElse`).
    pub fn if_else(
        mut self,
        condition: impl Fn(&BehaviorContext<'_, T, S, M>) -> bool + Send + Sync + 'static,
        yes: impl FnOnce(EventBinder<T, S, M>) -> EventBinder<T, S, M>,
        no: impl FnOnce(EventBinder<T, S, M>) -> EventBinder<T, S, M>,
    ) -> Self {
        let yes = yes(EventBinder::new()).activities;
        let no = no(EventBinder::new()).activities;
        self.activities
            .push(Activity::If(Box::new(condition), yes, no));
        self
    }
}

impl<T, S, M> std::fmt::Debug for EventBinder<T, S, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBinder")
            .field("activities", &self.activities.len())
            .finish()
    }
}

/// The actions of [`StateMachine::finally`]: no event message, only the instance.
pub struct FinallyBinder<T, S> {
    activities: Vec<FinalFn<T, S>>,
}

impl<T, S> FinallyBinder<T, S>
where
    T: Send + Sync + 'static,
    S: SagaStates,
{
    /// Changes the instance (MassTransit's `Then`).
    pub fn then(self, f: impl Fn(&mut SagaContext<'_, T, S>) + Send + Sync + 'static) -> Self {
        self.try_then(move |c| {
            f(c);
            Ok(())
        })
    }

    /// A `Then` that may fail.
    pub fn try_then(
        mut self,
        f: impl Fn(&mut SagaContext<'_, T, S>) -> Result<(), ConsumeError> + Send + Sync + 'static,
    ) -> Self {
        self.activities.push(Box::new(f));
        self
    }

    /// Publishes the message `build` makes.
    pub fn publish<P: Message>(
        self,
        build: impl Fn(&SagaContext<'_, T, S>) -> P + Send + Sync + 'static,
    ) -> Self {
        self.try_then(move |c| {
            let message = build(c);
            c.publish(&message)?;
            Ok(())
        })
    }
}

impl<T, S> std::fmt::Debug for FinallyBinder<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinallyBinder")
            .field("activities", &self.activities.len())
            .finish()
    }
}

/// What every action sees: the instance (its data in [`instance`](Self::instance)), its id and
/// state, and publish / send / respond, which keep what they build until the step is saved
/// (MassTransit's `BehaviorContext<TInstance>` without the event).
pub struct SagaContext<'a, T, S> {
    /// The instance's data (MassTransit's `context.Saga`); change it in `then`.
    pub instance: T,
    correlation_id: Uuid,
    pub(crate) state: State<S>,
    request: &'a ConsumeRequest,
    origin: MessageOrigin,
    pub(crate) outgoing: Vec<OutgoingMessage>,
}

impl<'a, T, S: SagaStates> SagaContext<'a, T, S> {
    pub(crate) fn new(
        instance: T,
        correlation_id: Uuid,
        state: State<S>,
        request: &'a ConsumeRequest,
    ) -> Self {
        let origin = MessageOrigin::consumed(
            &request.received().envelope,
            &request.received().input_address,
        );
        Self {
            instance,
            correlation_id,
            state,
            request,
            origin,
            outgoing: Vec::new(),
        }
    }

    /// The instance id (`CorrelationId`).
    pub fn correlation_id(&self) -> Uuid {
        self.correlation_id
    }

    /// The state the instance is in now (after earlier `transition_to`s of this step).
    pub fn state(&self) -> State<S> {
        self.state
    }

    /// The envelope of the event being consumed.
    pub fn envelope(&self) -> &Envelope {
        &self.request.received().envelope
    }

    /// Publishes `message` when the step is saved; returns its message id.
    pub fn publish<P: Message>(&mut self, message: &P) -> Result<Uuid, PublishError> {
        self.publish_with(message, SendOptions::new())
    }

    /// [`publish`](Self::publish) with options.
    pub fn publish_with<P: Message>(
        &mut self,
        message: &P,
        options: SendOptions,
    ) -> Result<Uuid, PublishError> {
        let built = self
            .request
            .factory()
            .publish(message, &self.origin, options)?;
        Ok(self.keep(built))
    }

    /// Sends `message` to `address` when the step is saved.
    pub fn send<P: Message>(&mut self, address: &str, message: &P) -> Result<Uuid, PublishError> {
        self.send_with(address, message, SendOptions::new())
    }

    /// [`send`](Self::send) with options.
    pub fn send_with<P: Message>(
        &mut self,
        address: &str,
        message: &P,
        options: SendOptions,
    ) -> Result<Uuid, PublishError> {
        let built = self
            .request
            .factory()
            .send(address, message, &self.origin, options)?;
        Ok(self.keep(built))
    }

    /// Responds to the event's request when the step is saved (to its `responseAddress` with its
    /// `requestId`; published when there is none), as [`ConsumeContext::respond`](ferrybus_core::ConsumeContext::respond).
    pub fn respond<P: Message>(&mut self, message: &P) -> Result<Uuid, PublishError> {
        let envelope = self.envelope();
        let mut options = SendOptions::new();
        if let Some(id) = envelope.request_id {
            options = options.request_id(id);
        }
        if let Some(expires) = envelope.expiration_time {
            let remaining = (expires - Utc::now()).num_milliseconds().max(1000);
            options = options.time_to_live(Duration::from_millis(remaining as u64));
        }
        match envelope.response_address.clone() {
            Some(address) => self.send_with(&address, message, options),
            None => self.publish_with(message, options),
        }
    }

    /// Sends `message` to this endpoint after `delay`, as a scheduled message whose token
    /// `token` stores in the instance.
    pub(crate) fn schedule_send<P: Message>(
        &mut self,
        message: &P,
        delay: Duration,
        token: &TokenFn<T>,
    ) -> Result<Uuid, PublishError> {
        let id = Uuid::now_v7();
        let options = SendOptions::new()
            .message_id(id)
            .header(SCHEDULING_TOKEN_ID, id.to_string());
        self.send_to_self_after(message, delay, options)?;
        *token(&mut self.instance) = Some(id);
        Ok(id)
    }

    /// Sends `message` to this endpoint after `delay` (the transport's delayed send).
    fn send_to_self_after<P: Message>(
        &mut self,
        message: &P,
        delay: Duration,
        options: SendOptions,
    ) -> Result<Uuid, PublishError> {
        let address = self.request.received().input_address.clone();
        let mut built = self
            .request
            .factory()
            .send(&address, message, &self.origin, options)?;
        let token_id = built.message_id;
        ScheduledMessage::delay(&mut built, token_id, delay);
        Ok(self.keep(built))
    }

    /// Sends `message` as `request`'s request (MassTransit's `RequestActivityImpl.SendRequest`):
    /// a new request id, stored in the instance, this endpoint as the response address, the
    /// accepted response type, and the timeout scheduled to this endpoint. Returns the id.
    pub(crate) fn send_request<R: Message, P: Message>(
        &mut self,
        request: &Request<T, R, P>,
        message: R,
    ) -> Result<Uuid, PublishError> {
        let request_id = Uuid::now_v7();
        let input_address = self.request.received().input_address.clone();
        let mut options = SendOptions::new()
            .request_id(request_id)
            .response_address(input_address)
            .header(
                REQUEST_ACCEPT_TYPE,
                serde_json::json!([P::message_type().urn()]),
            );
        if let Some(ttl) = request.time_to_live {
            options = options.time_to_live(ttl);
        }
        match &request.service_address {
            Some(address) => self.send_with(address, &message, options)?,
            None => self.publish_with(&message, options)?,
        };
        *(request.request_id)(&mut self.instance) = Some(request_id);
        if !request.timeout.is_zero() {
            let now = Utc::now();
            let expired = RequestTimeoutExpired {
                correlation_id: self.correlation_id,
                timestamp: now,
                expiration_time: now
                    + chrono::Duration::from_std(request.timeout).unwrap_or(chrono::Duration::MAX),
                request_id,
                message: Some(message),
            };
            self.send_to_self_after(&expired, request.timeout, SendOptions::new())?;
        }
        Ok(request_id)
    }

    fn keep(&mut self, message: OutgoingMessage) -> Uuid {
        let id = message.message_id;
        self.outgoing.push(message);
        id
    }
}

/// What an event's actions see: the [`SagaContext`] (through `Deref`, so `c.instance` works)
/// and the event's message (MassTransit's `BehaviorContext<TInstance, TData>`).
pub struct BehaviorContext<'a, T, S, M> {
    pub(crate) saga: SagaContext<'a, T, S>,
    message: &'a M,
}

impl<'a, T, S, M> BehaviorContext<'a, T, S, M> {
    pub(crate) fn new(saga: SagaContext<'a, T, S>, message: &'a M) -> Self {
        Self { saga, message }
    }

    /// The event's message (MassTransit's `context.Message`).
    pub fn message(&self) -> &M {
        self.message
    }

    pub(crate) fn into_saga(self) -> SagaContext<'a, T, S> {
        self.saga
    }
}

impl<'a, T, S, M> Deref for BehaviorContext<'a, T, S, M> {
    type Target = SagaContext<'a, T, S>;

    fn deref(&self) -> &Self::Target {
        &self.saga
    }
}

impl<T, S, M> DerefMut for BehaviorContext<'_, T, S, M> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.saga
    }
}
