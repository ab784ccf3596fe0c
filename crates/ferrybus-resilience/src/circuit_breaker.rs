//! [`CircuitBreakerLayer`]: MassTransit's `UseCircuitBreaker` as an endpoint layer.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use futures::future::BoxFuture;
use tower::{Layer, Service, ServiceExt};

use crate::window::{control_of, outcome, FailureFilter, Outcome, Settled, Window};
use ferrybus_core::endpoint::BoxEndpointService;
use ferrybus_core::pause::{PauseCause, Resume};
use ferrybus_core::{Delivery, Settlement};

/// MassTransit's default reset timeouts
/// (`src/MassTransit/Configuration/Configuration/CircuitBreakerPipeSpecification.cs`): 100 ms,
/// 200 ms, 500 ms, 1 s, 5 s, 10 s, 15 s, 30 s, then 60 s for every later opening.
const DEFAULT_RESET: [Duration; 9] = [
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(15),
    Duration::from_secs(30),
    Duration::from_secs(60),
];

/// The circuit breaker's settings, with MassTransit's names and defaults (active threshold 5,
/// trip threshold 5 %, tracking period 1 minute, the reset timeouts above).
#[derive(Clone)]
pub struct CircuitBreakerOptions {
    active_threshold: u32,
    trip_threshold: u32,
    tracking_period: Duration,
    reset: Arc<[Duration]>,
    filter: Option<FailureFilter>,
}

impl Default for CircuitBreakerOptions {
    fn default() -> Self {
        Self {
            active_threshold: 5,
            trip_threshold: 5,
            tracking_period: Duration::from_secs(60),
            reset: DEFAULT_RESET.into(),
            filter: None,
        }
    }
}

impl CircuitBreakerOptions {
    /// How many messages must be consumed (within the tracking period) before the breaker can
    /// open, and how many must succeed while half-open before it closes (5 by default).
    pub fn active_threshold(mut self, messages: u32) -> Self {
        self.active_threshold = messages.max(1);
        self
    }

    /// The share of failed messages that opens the breaker, in percent, 0–100 (5 by default).
    pub fn trip_threshold(mut self, percent: u32) -> Self {
        self.trip_threshold = percent.min(100);
        self
    }

    /// The window the counts are kept for (1 minute by default).
    pub fn tracking_period(mut self, period: Duration) -> Self {
        self.tracking_period = period.max(Duration::from_millis(1));
        self
    }

    /// One reset timeout for every opening (MassTransit's `ResetInterval`).
    pub fn reset_interval(self, interval: Duration) -> Self {
        self.reset_timeouts([interval])
    }

    /// The reset timeout of the first, second … opening in a row; the last repeats. An empty
    /// list keeps the defaults.
    pub fn reset_timeouts(mut self, timeouts: impl IntoIterator<Item = Duration>) -> Self {
        let timeouts: Arc<[Duration]> = timeouts.into_iter().collect();
        if !timeouts.is_empty() {
            self.reset = timeouts;
        }
        self
    }

    /// Counts only the failures for which `filter` returns true; the rest count as successes.
    pub fn failure_if(
        mut self,
        filter: impl Fn(&Settlement) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }

    fn reset_timeout(&self, opening: usize) -> Duration {
        self.reset[opening.min(self.reset.len() - 1)]
    }
}

impl std::fmt::Debug for CircuitBreakerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreakerOptions")
            .field("active_threshold", &self.active_threshold)
            .field("trip_threshold", &self.trip_threshold)
            .field("tracking_period", &self.tracking_period)
            .field("reset", &self.reset)
            .field("filtered", &self.filter.is_some())
            .finish()
    }
}

/// MassTransit's circuit breaker (`src/MassTransit/Middleware/CircuitBreakerFilter.cs` and
/// `CircuitBreaker/*Behavior.cs`) as an endpoint layer. **Closed**: deliveries pass, attempts
/// and failures are counted within the tracking period; once more than the active threshold of
/// messages were consumed and at least the trip threshold of them failed, it **opens**.
/// **Open**: for the reset timeout of this opening (they grow: 100 ms, 200 ms … 60 s) the
/// endpoint takes no deliveries. **Half-open**: deliveries pass; more than the active threshold
/// of successes close it, a failure opens it again with the next reset timeout.
///
/// One difference from MassTransit: while open, MassTransit fails each message at once (it
/// goes to the error queue unless retried or redelivered); ferrybus pauses the endpoint
/// instead, so no good message lands in `_error` because of the breaker — the deliveries
/// already taken go back to the queue unprocessed ([`Settlement::Abandon`]).
///
/// ```
/// use std::time::Duration;
/// use ferrybus_resilience::{CircuitBreakerLayer, CircuitBreakerOptions};
/// use ferrybus_core::EndpointConfig;
///
/// let endpoint = EndpointConfig::new("billing-invoice").layer(CircuitBreakerLayer::new(
///     CircuitBreakerOptions::default()
///         .trip_threshold(15)
///         .active_threshold(10)
///         .reset_interval(Duration::from_secs(5)),
/// ));
/// # let _ = endpoint;
/// ```
#[derive(Clone, Debug, Default)]
pub struct CircuitBreakerLayer {
    options: CircuitBreakerOptions,
}

impl CircuitBreakerLayer {
    /// A circuit breaker with `options`.
    pub fn new(options: CircuitBreakerOptions) -> Self {
        Self { options }
    }
}

impl Layer<BoxEndpointService> for CircuitBreakerLayer {
    type Service = CircuitBreaker;

    fn layer(&self, inner: BoxEndpointService) -> CircuitBreaker {
        CircuitBreaker {
            inner,
            state: Arc::new(Mutex::new(Breaker {
                state: BreakerState::Closed(Window::new(self.options.tracking_period)),
                openings: 0,
            })),
            options: Arc::new(self.options.clone()),
        }
    }
}

/// The service of a [`CircuitBreakerLayer`].
#[derive(Clone)]
pub struct CircuitBreaker {
    inner: BoxEndpointService,
    options: Arc<CircuitBreakerOptions>,
    state: Arc<Mutex<Breaker>>,
}

#[derive(Debug)]
struct Breaker {
    state: BreakerState,
    /// Openings in a row (the index of the next reset timeout).
    openings: usize,
}

#[derive(Debug)]
enum BreakerState {
    Closed(Window),
    Open(Instant),
    HalfOpen(u32),
}

/// The breaker is open: for this long, why.
struct Opened(Duration, String);

impl CircuitBreaker {
    fn admits(&self) -> Result<(), Duration> {
        let mut breaker = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let BreakerState::Open(until) = breaker.state {
            match until.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => return Err(left),
                _ => breaker.state = BreakerState::HalfOpen(0),
            }
        }
        Ok(())
    }

    fn record(&self, outcome: Outcome) -> Option<Opened> {
        let options = &self.options;
        let mut breaker = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let reason = match (&mut breaker.state, outcome) {
            (_, Outcome::Neutral) | (BreakerState::Open(_), _) => None,
            (BreakerState::Closed(window), _) => window
                .record(
                    outcome == Outcome::Failure,
                    options.active_threshold,
                    options.trip_threshold,
                )
                .then(|| {
                    format!(
                        "{} of {} messages failed within {:?}",
                        window.failures, window.attempts, options.tracking_period
                    )
                }),
            (BreakerState::HalfOpen(_), Outcome::Failure) => {
                Some("a message failed while half-open".to_owned())
            }
            (BreakerState::HalfOpen(successes), Outcome::Success) => {
                *successes += 1;
                if *successes > options.active_threshold {
                    breaker.state = BreakerState::Closed(Window::new(options.tracking_period));
                    breaker.openings = 0;
                    tracing::info!(target: "ferrybus::resilience", "circuit breaker closed");
                }
                None
            }
        };
        let reason = reason?;
        let timeout = options.reset_timeout(breaker.openings);
        breaker.openings += 1;
        breaker.state = BreakerState::Open(Instant::now() + timeout);
        Some(Opened(timeout, reason))
    }
}

impl Service<Delivery> for CircuitBreaker {
    type Response = Settlement;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Settled>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        if let Err(left) = self.admits() {
            if let Some(control) = control_of(&delivery) {
                control.pause(
                    PauseCause::CircuitBreaker,
                    "circuit breaker open",
                    Resume::After(left),
                );
            }
            return Box::pin(async { Ok(Settlement::Abandon) });
        }
        let this = self.clone();
        Box::pin(async move {
            let control = control_of(&delivery);
            let Ok(settlement) = this.inner.clone().oneshot(delivery).await;
            let outcome = outcome(&settlement, this.options.filter.as_ref());
            if let Some(Opened(timeout, reason)) = this.record(outcome) {
                tracing::warn!(target: "ferrybus::resilience", %reason, reset_in = ?timeout, "circuit breaker opened; pausing the endpoint");
                if let Some(control) = control {
                    control.pause(PauseCause::CircuitBreaker, reason, Resume::After(timeout));
                }
            }
            Ok(settlement)
        })
    }
}
