//! Back-off of failing entries (bus outboxes for the relay, consumer-outbox entries for the
//! sweeper), kept in memory per storage: an entry whose send failed is left out of the next
//! claims for `initial × 2^(failures-1)`, capped at `max`; after `attempts` failed tries it is
//! **set aside**: logged at error, counted in `ferrybus.outbox.set_aside`, and tried again only
//! every [`SET_ASIDE_RETRY`] (its later failures are reported the same way). A failing entry
//! never blocks the others: the claims skip the entries backed off now.
//!
//! The map is bounded: an entry that has not failed again for long after it became due (it was
//! delivered, by this instance or another, or deleted) is forgotten, and at [`CAPACITY`]
//! entries the one due soonest makes room.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::defaults::SET_ASIDE_RETRY;
use crate::settings::DeliverySettings;

/// At most this many backed-off entries are excluded from one claim.
const MAX_EXCLUDED: usize = 1000;

/// At most this many entries are remembered.
pub(crate) const CAPACITY: usize = 10_000;

/// An entry due for this long (`× max`, at least a minute) without failing again is forgotten.
const FORGET_AFTER_MAX: u32 = 10;

#[derive(Debug)]
struct Entry {
    failures: u32,
    next_attempt: Instant,
}

/// What a failure means for the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The entry's failed tries so far.
    pub(crate) failures: u32,
    /// The delay before it is tried again.
    pub(crate) delay: Duration,
    /// Whether it is set aside (`failures` reached the attempts).
    pub(crate) set_aside: bool,
}

/// When each failing entry (keyed by `K`) may be tried again (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Backoff<K> {
    initial: Duration,
    max: Duration,
    attempts: u32,
    set_aside_retry: Duration,
    entries: Mutex<HashMap<K, Entry>>,
}

impl<K: Copy + Eq + Hash> Backoff<K> {
    /// A back-off with the delivery settings' delays and attempts.
    pub(crate) fn of(delivery: &DeliverySettings) -> Self {
        Self::new(
            delivery.backoff_initial,
            delivery.backoff_max,
            delivery.send_attempts,
        )
    }

    /// `initial` doubling to `max`; set aside after `attempts` failed tries.
    pub(crate) fn new(initial: Duration, max: Duration, attempts: u32) -> Self {
        Self {
            initial,
            max,
            attempts: attempts.max(1),
            set_aside_retry: SET_ASIDE_RETRY,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<K, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long after it became due an entry that did not fail again is kept.
    fn forget_after(&self) -> Duration {
        self.max.max(Duration::from_secs(60)) * FORGET_AFTER_MAX
    }

    /// The entries not to claim now (at most [`MAX_EXCLUDED`]); forgets stale ones.
    pub(crate) fn excluded(&self) -> Vec<K> {
        let now = Instant::now();
        let mut entries = self.entries();
        let forget_after = self.forget_after();
        entries.retain(|_, e| now.saturating_duration_since(e.next_attempt) < forget_after);
        entries
            .iter()
            .filter(|(_, e)| e.next_attempt > now)
            .map(|(key, _)| *key)
            .take(MAX_EXCLUDED)
            .collect()
    }

    /// Whether `key` is backed off now.
    pub(crate) fn is_backed_off(&self, key: K) -> bool {
        let now = Instant::now();
        self.entries()
            .get(&key)
            .is_some_and(|e| e.next_attempt > now)
    }

    /// Records a failure of `key`.
    pub(crate) fn failed(&self, key: K) -> Failure {
        let now = Instant::now();
        let mut entries = self.entries();
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            let forget_after = self.forget_after();
            entries.retain(|_, e| now.saturating_duration_since(e.next_attempt) < forget_after);
            if entries.len() >= CAPACITY {
                let soonest = entries
                    .iter()
                    .min_by_key(|(_, e)| e.next_attempt)
                    .map(|(k, _)| *k);
                if let Some(soonest) = soonest {
                    entries.remove(&soonest);
                }
            }
        }
        let entry = entries.entry(key).or_insert(Entry {
            failures: 0,
            next_attempt: now,
        });
        entry.failures = entry.failures.saturating_add(1);
        let set_aside = entry.failures >= self.attempts;
        let delay = if set_aside {
            self.set_aside_retry
        } else {
            let factor = 2u32.saturating_pow(entry.failures.saturating_sub(1).min(20));
            self.initial.saturating_mul(factor).min(self.max)
        };
        entry.next_attempt = now + delay;
        Failure {
            failures: entry.failures,
            delay,
            set_aside,
        }
    }

    /// Forgets `key` (delivered, or progressing again).
    pub(crate) fn succeeded(&self, key: K) {
        self.entries().remove(&key);
    }

    /// How many entries are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn doubles_up_to_the_cap() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350), 10);
        let id = Uuid::nil();
        assert_eq!(backoff.failed(id).delay, Duration::from_millis(100));
        assert_eq!(backoff.failed(id).delay, Duration::from_millis(200));
        assert_eq!(backoff.failed(id).delay, Duration::from_millis(350));
        assert_eq!(backoff.excluded(), vec![id]);
        backoff.succeeded(id);
        assert!(backoff.excluded().is_empty());
    }

    #[test]
    fn set_aside_after_the_attempts() {
        let backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(2), 3);
        let id = Uuid::nil();
        assert!(!backoff.failed(id).set_aside);
        assert!(!backoff.failed(id).set_aside);
        let third = backoff.failed(id);
        assert!(third.set_aside);
        assert_eq!((third.failures, third.delay), (3, SET_ASIDE_RETRY));
        assert!(backoff.is_backed_off(id));
    }

    #[tokio::test(start_paused = true)]
    async fn entries_nobody_fails_again_are_forgotten() {
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1), 5);
        for _ in 0..100 {
            backoff.failed(Uuid::new_v4());
        }
        assert_eq!(backoff.len(), 100);
        // Their outboxes were delivered elsewhere: nobody claims, nobody fails them again.
        tokio::time::advance(Duration::from_secs(11 * 60)).await;
        let kept = Uuid::new_v4();
        backoff.failed(kept);
        assert_eq!(backoff.excluded(), vec![kept]);
        assert_eq!(backoff.len(), 1, "the stale entries are gone");
    }

    #[test]
    fn the_map_is_bounded() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60), 5);
        for _ in 0..CAPACITY + 50 {
            backoff.failed(Uuid::new_v4());
        }
        assert_eq!(backoff.len(), CAPACITY);
    }
}
