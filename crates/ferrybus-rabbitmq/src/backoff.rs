//! Exponential back-off with jitter for reconnects.

use std::time::Duration;

/// Delays growing ×2 from `initial` up to `max`, each with ±20 % jitter.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial,
        }
    }

    /// The next delay to wait.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        base.mul_f64(0.8 + fastrand::f64() * 0.4)
    }

    /// Starts over after a success.
    pub(crate) fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(80) && first <= Duration::from_millis(120));
        for _ in 0..10 {
            assert!(b.next_delay() <= Duration::from_millis(1200));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(120));
    }
}
