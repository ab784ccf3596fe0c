//! Background loop helpers.

use tokio_util::sync::CancellationToken;

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
