//! [`InboxCleanup`]: removes delivered inbox rows older than the duplicate-detection window.

use std::sync::Arc;

use chrono::Utc;
use sea_orm::{ConnectionTrait, DatabaseConnection};
use tokio_util::sync::CancellationToken;

use ferrybus_core::storage::Background;

use crate::background::sleep_or_cancel;
use crate::error::StoreError;
use crate::settings::{CleanupSettings, Settings};
use crate::telemetry::count_cleaned_up;

/// Deletes delivered inbox rows older than the window, in small batches, oldest first. Rows
/// still referenced by an outbox message (a .NET pass that has not deleted them yet) and rows
/// locked by a delivery are skipped, so one row never blocks the rest; several instances may
/// run it at once.
#[derive(Clone, Debug)]
pub(crate) struct InboxCleanup {
    db: DatabaseConnection,
    settings: Arc<Settings>,
}

impl InboxCleanup {
    /// A cleanup over `db`, with the cleanup settings of `settings`.
    pub(crate) fn new(db: DatabaseConnection, settings: Arc<Settings>) -> Self {
        Self { db, settings }
    }

    fn config(&self) -> &CleanupSettings {
        &self.settings.cleanup
    }

    /// Deletes one batch; returns how many rows were removed.
    pub(crate) async fn delete_batch(&self) -> Result<u64, StoreError> {
        let window =
            chrono::Duration::from_std(self.config().window).unwrap_or(chrono::Duration::MAX);
        let before = Utc::now()
            .checked_sub_signed(window)
            .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC);
        let result = self
            .db
            .execute_raw(
                self.settings
                    .sql()
                    .cleanup(before, self.config().batch_size),
            )
            .await?;
        count_cleaned_up(result.rows_affected());
        Ok(result.rows_affected())
    }

    /// Deletes batches until one comes back short; returns the total removed.
    pub(crate) async fn run_once(&self) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let removed = self.delete_batch().await?;
            total += removed;
            if removed < self.config().batch_size {
                return Ok(total);
            }
        }
    }

    /// Runs [`InboxCleanup::run_once`] every interval until stopped.
    pub(crate) fn spawn(self) -> Background {
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let task = tokio::spawn(async move {
            loop {
                match self.run_once().await {
                    Ok(0) => {}
                    Ok(removed) => {
                        tracing::debug!(target: "ferrybus::inbox", removed, "inbox cleanup")
                    }
                    Err(error) => {
                        tracing::warn!(target: "ferrybus::inbox", %error, "inbox cleanup failed")
                    }
                }
                if !sleep_or_cancel(self.config().interval, &token).await {
                    return;
                }
            }
        });
        Background::new(cancel, vec![task])
    }
}
