//! What the kill switch and the circuit breaker share: which settlements count as failures, the
//! tracking window, and the endpoint layer plumbing.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use ferrybus_core::pause::EndpointControl;
use ferrybus_core::{Delivery, Settlement};

/// Which settlements a kill switch or circuit breaker counts as failures.
pub type FailureFilter = Arc<dyn Fn(&Settlement) -> bool + Send + Sync>;

/// How a settlement counts: a consumer failure (`Fault` of a consumer, `Redeliver`), a success
/// (`Ack`, `Duplicate`), or not at all (`Skip`, `Abandon`, a body that could not be read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    Failure,
    Neutral,
}

pub(crate) fn outcome(settlement: &Settlement, filter: Option<&FailureFilter>) -> Outcome {
    match settlement {
        Settlement::Ack | Settlement::Duplicate => Outcome::Success,
        Settlement::Fault(faulted) if faulted.receive_fault => Outcome::Neutral,
        Settlement::Fault(_) | Settlement::Redeliver(_) => match filter {
            Some(filter) if !filter(settlement) => Outcome::Success,
            _ => Outcome::Failure,
        },
        _ => Outcome::Neutral,
    }
}

/// Attempts and failures within a tracking period (MassTransit resets both counters every
/// `TrackingPeriod` with a timer; here the first outcome after the period starts a new one).
#[derive(Debug)]
pub(crate) struct Window {
    period: Duration,
    started: Instant,
    pub(crate) attempts: u32,
    pub(crate) failures: u32,
}

impl Window {
    pub(crate) fn new(period: Duration) -> Self {
        Self {
            period,
            started: Instant::now(),
            attempts: 0,
            failures: 0,
        }
    }

    /// Records an outcome; returns whether the trip condition holds: more than `activation`
    /// attempts and at least `trip_percent` % of them failed.
    pub(crate) fn record(&mut self, failed: bool, activation: u32, trip_percent: u32) -> bool {
        if self.started.elapsed() >= self.period {
            *self = Self::new(self.period);
        }
        self.attempts += 1;
        if !failed {
            return false;
        }
        self.failures += 1;
        self.attempts > activation
            && u64::from(self.failures) * 100 / u64::from(self.attempts) >= u64::from(trip_percent)
    }
}

/// The control of the endpoint a delivery came to, if the transport supplies one.
pub(crate) fn control_of(delivery: &Delivery) -> Option<EndpointControl> {
    delivery.extensions.get::<EndpointControl>().cloned()
}

pub(crate) type Settled = Result<Settlement, Infallible>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_past_the_activation_threshold_at_the_share_of_failures() {
        let mut w = Window::new(Duration::from_secs(60));
        // 3 attempts needed before it can trip; 50 % failures trips.
        assert!(!w.record(true, 3, 50));
        assert!(!w.record(false, 3, 50));
        assert!(!w.record(true, 3, 50));
        assert!(w.record(true, 3, 50)); // 4 attempts, 3 failures
        let mut w = Window::new(Duration::from_secs(60));
        for _ in 0..10 {
            assert!(!w.record(false, 3, 50));
        }
        assert!(!w.record(true, 3, 50)); // 1 of 11
    }
}
