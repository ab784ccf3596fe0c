//! Per-outbox back-off after a failed send, kept in memory per service.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// At most this many backed-off outboxes are excluded from one claim.
const MAX_EXCLUDED: usize = 1000;

#[derive(Debug)]
struct Entry {
    failures: u32,
    next_attempt: Instant,
}

/// When each failing outbox may be tried again: `initial × 2^(failures-1)`, capped at `max`.
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    entries: Mutex<HashMap<Uuid, Entry>>,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The outboxes not to claim now.
    pub(crate) fn excluded(&self) -> Vec<Uuid> {
        let now = Instant::now();
        self.entries()
            .iter()
            .filter(|(_, e)| e.next_attempt > now)
            .map(|(id, _)| *id)
            .take(MAX_EXCLUDED)
            .collect()
    }

    /// Whether `id` is backed off now.
    pub(crate) fn is_backed_off(&self, id: Uuid) -> bool {
        let now = Instant::now();
        self.entries()
            .get(&id)
            .is_some_and(|e| e.next_attempt > now)
    }

    /// Records a failure; returns the delay before the next attempt.
    pub(crate) fn failed(&self, id: Uuid) -> Duration {
        let mut entries = self.entries();
        let entry = entries.entry(id).or_insert(Entry {
            failures: 0,
            next_attempt: Instant::now(),
        });
        entry.failures += 1;
        let factor = 2u32.saturating_pow(entry.failures.saturating_sub(1).min(20));
        let delay = self.initial.saturating_mul(factor).min(self.max);
        entry.next_attempt = Instant::now() + delay;
        delay
    }

    /// Forgets an outbox (delivered, or progressing again).
    pub(crate) fn succeeded(&self, id: Uuid) {
        self.entries().remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let id = Uuid::nil();
        assert_eq!(backoff.failed(id), Duration::from_millis(100));
        assert_eq!(backoff.failed(id), Duration::from_millis(200));
        assert_eq!(backoff.failed(id), Duration::from_millis(350));
        assert_eq!(backoff.excluded(), vec![id]);
        backoff.succeeded(id);
        assert!(backoff.excluded().is_empty());
    }
}
