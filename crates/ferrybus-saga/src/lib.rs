//! State machine sagas, as MassTransit's `MassTransitStateMachine<T>`: states, events
//! correlated to an instance, and per state what each event does.
//!
//! A [`StateMachine`] is a definition (no I/O); [`SagaEndpointExt::saga`] binds it to a receive
//! endpoint with a [`SagaRepository`] that stores the instances: [`InMemorySagaRepository`] for
//! tests, `postgres::PostgresSagaRepository` (feature `sea-orm`) for PostgreSQL (in the inbox
//! transaction, on MassTransit's EF Core tables).
//!
//! One event, one step: the repository loads the instance (or, for an event the initial state
//! handles, starts a new one), the actions of every matching `when` run in order on a copy,
//! then the repository saves it — insert, update at the version it was read with, or delete
//! when completed. On a concurrency conflict the step runs again on the fresh instance; what
//! the actions published leaves only after the save, so a step that lost a conflict publishes
//! nothing.
//!
//! ```
//! use ferrybus_core::memory::TestHarness;
//! use ferrybus_saga::{Event, InMemorySagaRepository, SagaEndpointExt, StateMachine};
//! use ferrybus_core::Publish;
//! # use serde::{Deserialize, Serialize};
//! #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
//! #[message(namespace = "Bookstore.Contracts")]
//! #[serde(rename_all = "camelCase")]
//! struct OrderSubmitted { order_id: uuid::Uuid }
//!
//! ferrybus_saga::saga_states! { enum OrderStatus { Submitted } }
//!
//! # tokio_test_block_on(async {
//! let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
//! let machine = StateMachine::<(), OrderStatus>::new("OrderState")
//!     .initially(|s| s.when(&submitted, |b| b.transition_to(OrderStatus::Submitted)));
//! let repository = InMemorySagaRepository::new();
//! let harness = TestHarness::builder()
//!     .receive_endpoint(machine.endpoint_name(), |e| e.saga(machine, repository.clone()))
//!     .start()
//!     .await
//!     .unwrap();
//! let order_id = uuid::Uuid::now_v7();
//! let id = harness.publish(&OrderSubmitted { order_id }).await.unwrap();
//! harness.consumed(id).await.unwrap();
//! assert_eq!(repository.state(order_id).as_deref(), Some("Submitted"));
//! # harness.stop().await;
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

//! Names are types, so a wrong one does not compile. A state that is not a variant:
//!
//! ```compile_fail
//! use ferrybus_saga::StateMachine;
//! ferrybus_saga::saga_states! { enum OrderStatus { Submitted } }
//! let machine = StateMachine::<(), OrderStatus>::new("OrderState")
//!     .during(OrderStatus::Shipped, |s| s);
//! ```
//!
//! An event handler whose actions read another message type than the event's:
//!
//! ```compile_fail
//! use ferrybus_saga::{Event, StateMachine};
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
//! # #[message(namespace = "Ns")]
//! # struct OrderSubmitted { order_id: uuid::Uuid }
//! # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
//! # #[message(namespace = "Ns")]
//! # struct OrderShipped { order_id: uuid::Uuid, carrier: String }
//! ferrybus_saga::saga_states! { enum OrderStatus { Submitted } }
//! let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
//! let machine = StateMachine::<(), OrderStatus>::new("OrderState")
//!     .initially(|s| s.when(&submitted, |b| b.then(|c| {
//!         let _: &OrderShipped = c.message();
//!     })));
//! ```
//!
//! And a message that is no declared [`Event`] cannot be handled at all: `when` takes an
//! `&Event<M>`.

mod event;
mod machine;
#[cfg(feature = "sea-orm")]
pub mod postgres;
mod repository;
mod request;
mod run;
mod schedule;
mod state;

pub use event::{Event, MissingInstance};
pub use ferrybus_core::outgoing::SCHEDULING_TOKEN_ID;
pub use machine::{
    ActionFuture, BehaviorContext, EventBinder, FinallyBinder, SagaContext, SagaEndpointExt,
    StateBinder, StateMachine, UnhandledEvent,
};
pub use repository::{
    CurrentState, InMemorySagaRepository, SagaChange, SagaRepository, SaveOutcome, StoredSaga,
};
pub use request::{Request, RequestTimeoutExpired, REQUEST_ACCEPT_TYPE};
pub use schedule::Schedule;
pub use state::{SagaStates, State};

/// What kind of saga failure a [`SagaError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SagaErrorKind {
    /// The instance's state does not handle the event (MassTransit's `UnhandledEventException`).
    UnhandledEvent,
    /// No instance, and the event was set to fault ([`MissingInstance::Fault`]).
    MissingInstance,
    /// The stored `CurrentState` is no state of the machine.
    UnknownState,
    /// The message has no correlation id.
    NoCorrelationId,
    /// The instance changed under every attempt ([`StateMachine::conflict_retries`]).
    Concurrency,
    /// The instance row could not be read or written as the instance type.
    Mapping,
}

/// A saga failure; it fails the message (retried, then faulted). Find it in a
/// [`ConsumeError`](ferrybus_core::ConsumeError) with `error.find::<SagaError>()`.
///
/// ```
/// use ferrybus_saga::{SagaError, SagaErrorKind};
/// let error = SagaError::new(SagaErrorKind::MissingInstance, "no instance");
/// assert_eq!(error.kind(), SagaErrorKind::MissingInstance);
/// assert_eq!(error.to_string(), "no instance");
/// ```
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct SagaError {
    kind: SagaErrorKind,
    message: String,
}

impl SagaError {
    /// An error of `kind`.
    pub fn new(kind: SagaErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> SagaErrorKind {
        self.kind
    }
}
