//! Staying up when what an endpoint depends on does not: pausing on transient failures, a kill
//! switch, a circuit breaker, rate and concurrency limits.
//!
//! * **Transient failures are not the message's fault.** A connection refused or reset, a pool
//!   timeout, PostgreSQL shutting down (`57P01`) or starting up (`57P03`), the broker not
//!   connected: [`Transience`] tells them from the consumer's own errors, in one place. On one,
//!   the endpoint **pauses** ([`EndpointControl`]): the delivery goes back to the queue
//!   unacknowledged without spending a retry, the transport stops taking deliveries, probes the
//!   dependency with a growing back-off and resumes once it answers. Every endpoint has this
//!   guard, between its retry and its inbox ([`EndpointConfig::pause_on_transient`] turns it
//!   off; [`EndpointConfig::transient_if`] adds rules; the storage adds its own through
//!   [`Storage::classify`](crate::Storage::classify)).
//! * **[`KillSwitchLayer`]** (MassTransit's `UseKillSwitch`) stops an endpoint whose messages fail
//!   too often, for a restart timeout.
//! * **[`CircuitBreakerLayer`]** (MassTransit's `UseCircuitBreaker`) opens on a share of failures
//!   and closes again after a half-open trial, with growing reset timeouts.
//! * **[`RateLimitLayer`]** (MassTransit's `UseRateLimit`) and tower's
//!   [`ConcurrencyLimitLayer`](tower::limit::ConcurrencyLimitLayer) limit the pace.
//!
//! All of them are endpoint layers ([`EndpointConfig::layer`]); the pause is the
//! [`EndpointControl`] every built [`Endpoint`](crate::Endpoint) has
//! ([`Endpoint::control`](crate::Endpoint::control)), which transports watch and health checks
//! can read ([`EndpointState`]).
//!
//! ```
//! use std::time::Duration;
//! use ferrybus_core::resilience::{CircuitBreakerLayer, CircuitBreakerOptions, KillSwitchLayer, KillSwitchOptions, RateLimitLayer};
//! use ferrybus_core::EndpointConfig;
//!
//! let endpoint = EndpointConfig::new("billing-invoice")
//!     .layer(KillSwitchLayer::new(KillSwitchOptions::default().trip_threshold(15)))
//!     .layer(RateLimitLayer::new(200, Duration::from_secs(1)))
//!     .layer(tower::limit::ConcurrencyLimitLayer::new(8));
//! # let _ = (endpoint, CircuitBreakerLayer::new(CircuitBreakerOptions::default()));
//! ```
//!
//! [`EndpointConfig::layer`]: crate::EndpointConfig::layer
//! [`EndpointConfig::pause_on_transient`]: crate::EndpointConfig::pause_on_transient
//! [`EndpointConfig::transient_if`]: crate::EndpointConfig::transient_if

mod circuit_breaker;
mod control;
mod kill_switch;
mod rate_limit;
mod transient;
mod window;

pub use circuit_breaker::{CircuitBreaker, CircuitBreakerLayer, CircuitBreakerOptions};
pub use control::{EndpointControl, EndpointState, PauseCause, Paused, ProbeFn, Resume};
pub use kill_switch::{KillSwitch, KillSwitchLayer, KillSwitchOptions};
pub use rate_limit::{RateLimit, RateLimitLayer};
pub use transient::{builtin, Classifier, Dependency, EndpointPaused, Transience};
pub(crate) use transient::{Strikes, TransientGuardLayer};
pub use window::FailureFilter;
