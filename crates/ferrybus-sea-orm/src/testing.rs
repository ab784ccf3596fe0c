//! Helpers for tests of applications that use the bus outbox.

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::error::{StoreError, StoreErrorKind};
use crate::sql::Pending;
use crate::storage::PostgresStorage;

/// How many bus-outbox rows (states and messages) are waiting.
pub async fn pending_bus_outbox(storage: &PostgresStorage) -> Result<i64, StoreError> {
    let row = storage
        .db()
        .query_one_raw(storage.settings().sql().pending_bus_outbox())
        .await?
        .ok_or_else(|| StoreError::new(StoreErrorKind::Database, "count returned no row"))?;
    Ok(Pending::from_query_result(&row, "")?.pending)
}

/// Waits until the bus outbox is empty (every committed message delivered), polling every
/// 20 ms; fails with [`StoreErrorKind::Timeout`] after `timeout`. Replaces sleeps in tests.
///
/// ```no_run
/// # async fn run(storage: ferrybus_sea_orm::PostgresStorage) -> Result<(), ferrybus_sea_orm::StoreError> {
/// use std::time::Duration;
/// use ferrybus_sea_orm::testing::wait_until_outbox_drained;
/// wait_until_outbox_drained(&storage, Duration::from_secs(5)).await?;
/// # Ok(()) }
/// ```
pub async fn wait_until_outbox_drained(
    storage: &PostgresStorage,
    timeout: Duration,
) -> Result<(), StoreError> {
    let deadline = Instant::now() + timeout;
    loop {
        let pending = pending_bus_outbox(storage).await?;
        if pending == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(StoreError::new(
                StoreErrorKind::Timeout,
                format!("{pending} outbox rows still pending after {timeout:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
