//! [`Shutdown`]: when a stop must be done by, shared by the bus, its endpoints and its connection,
//! so that no wait of a stop outlasts the shutdown timeout by more than a fixed grace, whatever
//! the broker does (during a memory or disk alarm it reads nothing from a connection that
//! published: no `basic.cancel`, no `channel.close`, no publisher confirm gets an answer).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

/// How long in-flight deliveries get after the shutdown deadline, once cancelled.
pub(crate) const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// How long one goodbye to the broker (`basic.cancel`, closing the channels, closing the
/// connection) waits for its answer.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The shutdown timeout and, once a stop began, when.
///
/// A stop lets deliveries in flight finish until [`deadline`](Self::deadline) (the shutdown
/// timeout after it began), cancels them and gives them [`CANCEL_GRACE`], then says goodbye to the
/// broker; everything (the endpoints, the storage's background services, outstanding confirms,
/// closing the connection) is over by [`end`](Self::end), a [`CLOSE_TIMEOUT`] later.
#[derive(Clone, Debug)]
pub(crate) struct Shutdown {
    timeout: Duration,
    began: Arc<OnceLock<Instant>>,
}

impl Shutdown {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            began: Arc::default(),
        }
    }

    /// The shutdown timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// When the stop began (now, for the first caller).
    pub(crate) fn begin(&self) -> Instant {
        *self.began.get_or_init(Instant::now)
    }

    /// Until when deliveries in flight may finish.
    pub(crate) fn deadline(&self) -> Instant {
        self.begin() + self.timeout
    }

    /// When the stop is over, however far it got.
    pub(crate) fn end(&self) -> Instant {
        self.deadline() + CANCEL_GRACE + CLOSE_TIMEOUT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_clock_starts_with_the_first_caller() {
        let shutdown = Shutdown::new(Duration::from_secs(5));
        let began = shutdown.clone().begin();
        tokio::task::yield_now().await;
        assert_eq!(shutdown.begin(), began);
        assert_eq!(shutdown.deadline(), began + Duration::from_secs(5));
        assert_eq!(shutdown.end(), began + Duration::from_secs(7));
    }
}
