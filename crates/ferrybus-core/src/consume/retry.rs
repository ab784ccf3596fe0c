//! Retry: MassTransit's `UseMessageRetry` policies as a tower [`Policy`].
//!
//! The delivery stays un-acked while retries run (in-memory retry). Each retry gets a fresh
//! [`ConsumeRequest`] (new extensions, so a new database transaction in the storage layer).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tower::retry::Policy;

use super::request::{ConsumeOutcome, ConsumeRequest};
use crate::error::ConsumeError;

/// Which delays a [`RetryPolicy`] waits before each retry.
#[derive(Clone, Debug, PartialEq)]
enum Schedule {
    Never,
    Intervals(Arc<[Duration]>),
    Incremental {
        limit: u32,
        initial: Duration,
        increment: Duration,
    },
    Exponential {
        limit: u32,
        min: Duration,
        max: Duration,
        delta: Duration,
    },
}

type ErrorFilter = Arc<dyn Fn(&ConsumeError) -> bool + Send + Sync>;

/// A retry policy with MassTransit's names: [`none`](RetryPolicy::none),
/// [`immediate`](RetryPolicy::immediate), [`interval`](RetryPolicy::interval),
/// [`intervals`](RetryPolicy::intervals), [`incremental`](RetryPolicy::incremental),
/// [`exponential`](RetryPolicy::exponential), with an error filter
/// ([`retry_if`](RetryPolicy::retry_if)). Errors marked permanent are never retried.
///
/// ```
/// use std::time::Duration;
/// use ferrybus_core::RetryPolicy;
///
/// let policy = RetryPolicy::intervals([Duration::from_millis(100), Duration::from_millis(500)])
///     .retry_if(|e| e.find::<std::io::Error>().is_some());
/// assert_eq!(policy.retry_limit(), 2);
/// assert_eq!(policy.delay(1), Some(Duration::from_millis(500)));
/// assert_eq!(policy.delay(2), None);
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    schedule: Schedule,
    filter: Option<ErrorFilter>,
    retries: u32,
}

impl std::fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("schedule", &self.schedule)
            .field("filtered", &self.filter.is_some())
            .finish()
    }
}

impl RetryPolicy {
    fn with(schedule: Schedule) -> Self {
        Self {
            schedule,
            filter: None,
            retries: 0,
        }
    }

    /// No retries (MassTransit's default).
    pub fn none() -> Self {
        Self::with(Schedule::Never)
    }

    /// `retries` retries with no delay.
    pub fn immediate(retries: u32) -> Self {
        Self::interval(retries, Duration::ZERO)
    }

    /// `retries` retries, each after `delay`.
    pub fn interval(retries: u32, delay: Duration) -> Self {
        Self::intervals(vec![delay; retries as usize])
    }

    /// One retry per listed delay.
    pub fn intervals(delays: impl IntoIterator<Item = Duration>) -> Self {
        Self::with(Schedule::Intervals(delays.into_iter().collect()))
    }

    /// `retries` retries; retry `k` (0-based) waits `initial + k * increment`.
    pub fn incremental(retries: u32, initial: Duration, increment: Duration) -> Self {
        Self::with(Schedule::Incremental {
            limit: retries,
            initial,
            increment,
        })
    }

    /// `retries` retries with exponential back-off: retry `k` waits about
    /// `min + 2^k * delta` (randomized by ±20%, then jittered by 0.75–1.25), capped at `max`.
    pub fn exponential(retries: u32, min: Duration, max: Duration, delta: Duration) -> Self {
        Self::with(Schedule::Exponential {
            limit: retries,
            min,
            max,
            delta,
        })
    }

    /// Retries only errors for which `filter` returns true (MassTransit's `Handle<T>`; negate
    /// for `Ignore<T>`).
    pub fn retry_if(
        mut self,
        filter: impl Fn(&ConsumeError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }

    /// How many retries the policy allows.
    pub fn retry_limit(&self) -> u32 {
        match &self.schedule {
            Schedule::Never => 0,
            Schedule::Intervals(d) => d.len() as u32,
            Schedule::Incremental { limit, .. } | Schedule::Exponential { limit, .. } => *limit,
        }
    }

    /// The delay before retry `index` (0-based), or `None` when retries are used up.
    pub fn delay(&self, index: u32) -> Option<Duration> {
        if index >= self.retry_limit() {
            return None;
        }
        Some(match &self.schedule {
            Schedule::Never => return None,
            Schedule::Intervals(delays) => delays[index as usize],
            Schedule::Incremental {
                initial, increment, ..
            } => *initial + increment.saturating_mul(index),
            Schedule::Exponential {
                min, max, delta, ..
            } => exponential_delay(index, *min, *max, *delta),
        })
    }

    /// The longest the retries can wait in all: the sum of each retry's longest delay (an
    /// exponential delay's jitter at its highest). A delivery stays unacknowledged that long
    /// besides its attempts' own time, which the broker's acknowledgement timeout (RabbitMQ's
    /// `consumer_timeout`) must allow for.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrybus_core::RetryPolicy;
    /// let policy = RetryPolicy::intervals([Duration::from_secs(1), Duration::from_secs(5)]);
    /// assert_eq!(policy.max_total_delay(), Duration::from_secs(6));
    /// let minute = Duration::from_secs(60);
    /// // Each delay is at most 5 minutes.
    /// let exponential = RetryPolicy::exponential(3, minute, 5 * minute, 5 * minute);
    /// assert_eq!(exponential.max_total_delay(), 15 * minute);
    /// ```
    pub fn max_total_delay(&self) -> Duration {
        (0..self.retry_limit())
            .map(|index| match &self.schedule {
                Schedule::Exponential {
                    min, max, delta, ..
                } => {
                    let factor = 2f64.powi(index.min(30) as i32) * 1.2;
                    let base = min.as_secs_f64() + factor * delta.as_secs_f64();
                    Duration::from_secs_f64((base * 1.25).min(max.as_secs_f64()))
                }
                _ => self.delay(index).unwrap_or_default(),
            })
            .sum()
    }

    /// Whether the policy would retry `error` at all.
    pub fn handles(&self, error: &ConsumeError) -> bool {
        !error.is_permanent() && self.filter.as_ref().is_none_or(|f| f(error))
    }
}

fn exponential_delay(index: u32, min: Duration, max: Duration, delta: Duration) -> Duration {
    let factor = 2f64.powi(index.min(30) as i32) * (0.8 + 0.4 * fastrand::f64());
    let base = (min.as_secs_f64() + factor * delta.as_secs_f64()).min(max.as_secs_f64());
    let jittered = base * (0.75 + 0.5 * fastrand::f64());
    Duration::from_secs_f64(jittered.min(max.as_secs_f64()))
}

type RetryFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Policy<ConsumeRequest, ConsumeOutcome, ConsumeError> for RetryPolicy {
    type Future = RetryFuture;

    fn retry(
        &mut self,
        request: &mut ConsumeRequest,
        result: &mut Result<ConsumeOutcome, ConsumeError>,
    ) -> Option<Self::Future> {
        let Err(error) = result else { return None };
        let delay = self
            .delay(self.retries)
            .filter(|_| self.handles(error) && !request.cancellation().is_cancelled());
        let Some(delay) = delay else {
            error.set_retry_count(self.retries);
            return None;
        };
        self.retries += 1;
        tracing::debug!(
            target: "ferrybus::retry",
            attempt = self.retries,
            ?delay,
            error = %error,
            "retrying message"
        );
        *request = request.next_attempt();
        let cancellation = request.cancellation().clone();
        Some(Box::pin(async move {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = cancellation.cancelled() => {}
            }
        }))
    }

    fn clone_request(&mut self, request: &ConsumeRequest) -> Option<ConsumeRequest> {
        Some(request.clone())
    }
}

/// The retry layer: `RetryLayer::new(RetryPolicy::immediate(2))`.
pub type RetryLayer = tower::retry::RetryLayer<RetryPolicy>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        let p = RetryPolicy::incremental(3, Duration::from_millis(10), Duration::from_millis(5));
        let delays: Vec<_> = (0..4).map(|i| p.delay(i)).collect();
        assert_eq!(
            delays,
            [
                Some(Duration::from_millis(10)),
                Some(Duration::from_millis(15)),
                Some(Duration::from_millis(20)),
                None
            ]
        );
        assert_eq!(RetryPolicy::none().delay(0), None);
        assert_eq!(RetryPolicy::immediate(2).delay(1), Some(Duration::ZERO));
        let e = RetryPolicy::exponential(
            5,
            Duration::from_millis(10),
            Duration::from_millis(200),
            Duration::from_millis(10),
        );
        for i in 0..5 {
            let d = e.delay(i).unwrap();
            assert!(d <= Duration::from_millis(200), "{d:?}");
        }
        assert!(e.delay(0).unwrap() < Duration::from_millis(40));
    }

    #[test]
    fn the_longest_total_delay_bounds_every_schedule() {
        let ms = Duration::from_millis;
        assert_eq!(RetryPolicy::none().max_total_delay(), Duration::ZERO);
        assert_eq!(RetryPolicy::interval(3, ms(100)).max_total_delay(), ms(300));
        assert_eq!(
            RetryPolicy::incremental(3, ms(10), ms(5)).max_total_delay(),
            ms(45)
        );
        let e = RetryPolicy::exponential(6, ms(10), ms(400), ms(10));
        let longest = e.max_total_delay();
        for _ in 0..200 {
            let total: Duration = (0..6).map(|i| e.delay(i).unwrap()).sum();
            assert!(total <= longest, "{total:?} > {longest:?}");
        }
        assert!(longest <= ms(2400));
    }

    #[test]
    fn filters_and_permanent_errors() {
        let p = RetryPolicy::immediate(1).retry_if(|e| e.to_string().contains("transient"));
        assert!(p.handles(&ConsumeError::handler("transient glitch")));
        assert!(!p.handles(&ConsumeError::handler("bad input")));
        assert!(!RetryPolicy::immediate(1).handles(&ConsumeError::permanent("invalid")));
    }
}
