//! Endpoint layers that keep a service up when its messages keep failing: MassTransit's kill
//! switch, circuit breaker and rate limit, for ferrybus endpoints.
//!
//! * **[`KillSwitchLayer`]** (MassTransit's `UseKillSwitch`) stops an endpoint whose messages
//!   fail too often, for a restart timeout.
//! * **[`CircuitBreakerLayer`]** (MassTransit's `UseCircuitBreaker`) opens on a share of
//!   failures and closes again after a half-open trial, with growing reset timeouts.
//! * **[`RateLimitLayer`]** (MassTransit's `UseRateLimit`) and tower's
//!   [`ConcurrencyLimitLayer`](tower::limit::ConcurrencyLimitLayer) limit the pace.
//!
//! All of them are endpoint layers (`EndpointConfig::layer`) that watch settlements; the kill
//! switch and the breaker stop an endpoint through the pause switch every endpoint has
//! ([`EndpointControl`](ferrybus_core::pause::EndpointControl), found in each delivery's
//! extensions), which the transport watches. Pausing on outages of the database or the broker is
//! not here: every endpoint does it ([`ferrybus_core::pause`]).
//!
//! ```
//! use std::time::Duration;
//! use ferrybus_core::EndpointConfig;
//! use ferrybus_resilience::{CircuitBreakerLayer, CircuitBreakerOptions, KillSwitchLayer, KillSwitchOptions, RateLimitLayer};
//!
//! let endpoint = EndpointConfig::new("billing-invoice")
//!     .layer(KillSwitchLayer::new(KillSwitchOptions::default().trip_threshold(15)))
//!     .layer(RateLimitLayer::new(200, Duration::from_secs(1)))
//!     .layer(tower::limit::ConcurrencyLimitLayer::new(8));
//! # let _ = (endpoint, CircuitBreakerLayer::new(CircuitBreakerOptions::default()));
//! ```

mod circuit_breaker;
mod kill_switch;
mod rate_limit;
mod window;

pub use circuit_breaker::{CircuitBreaker, CircuitBreakerLayer, CircuitBreakerOptions};
pub use kill_switch::{KillSwitch, KillSwitchLayer, KillSwitchOptions};
pub use rate_limit::{RateLimit, RateLimitLayer};
pub use window::FailureFilter;
