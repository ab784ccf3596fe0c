//! [`BackgroundHandle`]: stops a background service cleanly.

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running background service (delivery, cleanup). [`BackgroundHandle::stop`] lets work in
/// flight finish (a batch being sent is sent and recorded) and waits for every task.
///
/// Dropping the handle also signals the tasks to stop, without waiting.
#[derive(Debug)]
pub struct BackgroundHandle {
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl BackgroundHandle {
    pub(crate) fn new(cancel: CancellationToken, tasks: Vec<JoinHandle<()>>) -> Self {
        Self { cancel, tasks }
    }

    /// Whether every task has ended.
    pub fn is_finished(&self) -> bool {
        self.tasks.iter().all(JoinHandle::is_finished)
    }

    /// Signals the tasks to stop and waits until they have.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        for task in self.tasks.drain(..) {
            if let Err(error) = task.await {
                tracing::warn!(target: "ferrybus::outbox", %error, "background task ended abnormally");
            }
        }
    }
}

impl Drop for BackgroundHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Sleeps for `duration`; false when cancelled first.
pub(crate) async fn sleep_or_cancel(
    duration: std::time::Duration,
    cancel: &CancellationToken,
) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(duration) => true,
        _ = cancel.cancelled() => false,
    }
}
