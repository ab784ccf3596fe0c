//! Pausing an endpoint instead of faulting good messages while what it depends on is down.
//!
//! A connection refused or reset, a pool timeout, PostgreSQL shutting down (`57P01`) or starting
//! up (`57P03`), the broker not connected: [`Transience`] tells such failures from the consumer's
//! own errors, in one place. On one, the endpoint **pauses** ([`EndpointControl`]): the delivery
//! goes back to the queue unacknowledged without spending a retry, the transport stops taking
//! deliveries, probes the dependency with a growing back-off and resumes once it answers. Every
//! endpoint has this guard ([`TransientGuardLayer`]) between its retry and its inbox;
//! `EndpointConfig::pause_on_transient(false)` turns it off, `EndpointConfig::transient_if` adds
//! rules, and the storage adds its own through `Storage::classify`.
//!
//! The same switch serves the endpoint layers of `ferrybus-resilience` (kill switch, circuit
//! breaker), which find it in every delivery's extensions, and the transport, which watches it.
//!
//! ```
//! use ferrybus_core::pause::{Dependency, Transience};
//! use ferrybus_core::ConsumeError;
//!
//! let refused = ConsumeError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
//! assert_eq!(Transience::default().classify(&refused), Some(Dependency::Other));
//! ```

mod control;
mod transient;

pub use control::{
    Dependency, EndpointControl, EndpointState, PauseCause, Paused, ProbeFn, Resume,
};
pub use transient::{
    builtin, Classifier, EndpointPaused, Guarded, Transience, TransientGuard, TransientGuardLayer,
};
