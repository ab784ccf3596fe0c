//! States: the user's [`SagaStates`] enum and the [`State`] an instance is in.

use std::fmt;

/// The states of a state machine, declared as a Rust enum (MassTransit's `State` properties of a
/// `MassTransitStateMachine<T>`). Implement it with [`saga_states!`](crate::saga_states); a state
/// that is not a variant does not compile.
///
/// The name is what the repository stores in `CurrentState`, so keep the .NET property names
/// (`Submitted`, not `submitted`) to share a table with a .NET service.
///
/// ```
/// ferrybus_saga::saga_states! {
///     /// Where an order is.
///     pub enum OrderStatus { Submitted, Invoiced }
/// }
/// use ferrybus_saga::SagaStates;
/// assert_eq!(OrderStatus::Invoiced.name(), "Invoiced");
/// assert_eq!(OrderStatus::from_name("Submitted"), Some(OrderStatus::Submitted));
/// assert_eq!(OrderStatus::all(), [OrderStatus::Submitted, OrderStatus::Invoiced]);
/// ```
pub trait SagaStates: Copy + Eq + fmt::Debug + Send + Sync + 'static {
    /// The state's name (MassTransit's `State.Name`).
    fn name(self) -> &'static str;

    /// The state named `name`, if there is one.
    fn from_name(name: &str) -> Option<Self>;

    /// Every state, in declaration order (the order MassTransit numbers the states an
    /// [`int` state](crate::StateMachine::current_state_as_int) does not list). It must list
    /// every variant: [`saga_states!`](crate::saga_states) generates it.
    fn all() -> &'static [Self];
}

/// Declares an enum of saga states and implements [`SagaStates`] for it (variant name = state
/// name).
///
/// ```
/// ferrybus_saga::saga_states! {
///     /// Where a payment is.
///     #[derive(Hash)]
///     pub enum PaymentStatus { Pending, Paid }
/// }
/// assert_eq!(ferrybus_saga::SagaStates::name(PaymentStatus::Paid), "Paid");
/// ```
#[macro_export]
macro_rules! saga_states {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$vmeta])* #[allow(missing_docs)] $variant),+
        }

        impl $crate::SagaStates for $name {
            fn name(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant)),+
                }
            }

            fn from_name(name: &str) -> Option<Self> {
                match name {
                    $(stringify!($variant) => Some($name::$variant),)+
                    _ => None,
                }
            }

            fn all() -> &'static [Self] {
                &[$($name::$variant),+]
            }
        }
    };
}

/// The state an instance is in: MassTransit's built-in `Initial` and `Final`, or one of the
/// machine's own states.
///
/// ```
/// use ferrybus_saga::State;
/// ferrybus_saga::saga_states! { enum Status { Open } }
/// assert_eq!(State::<Status>::Initial.name(), "Initial");
/// assert_eq!(State::from(Status::Open).name(), "Open");
/// assert_eq!(State::<Status>::parse("Final"), Some(State::Final));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State<S> {
    /// Before the first event (MassTransit's `Initial`); events handled here create instances.
    Initial,
    /// One of the machine's states.
    Is(S),
    /// Finished (MassTransit's `Final`); with
    /// [`set_completed_when_finalized`](crate::StateMachine::set_completed_when_finalized)
    /// the instance is deleted.
    Final,
}

impl<S: SagaStates> State<S> {
    /// The name stored in `CurrentState`.
    pub fn name(self) -> &'static str {
        match self {
            State::Initial => "Initial",
            State::Final => "Final",
            State::Is(s) => s.name(),
        }
    }

    /// The state named `name` (`Initial`, `Final` or a [`SagaStates`] name).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "Initial" => Some(State::Initial),
            "Final" => Some(State::Final),
            other => S::from_name(other).map(State::Is),
        }
    }
}

impl<S: SagaStates> From<S> for State<S> {
    fn from(state: S) -> Self {
        State::Is(state)
    }
}

impl<S: SagaStates> fmt::Display for State<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
