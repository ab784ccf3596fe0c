//! The storage's settings, shared by every part.

use std::sync::Arc;

use sea_orm::ConnectionTrait;

use crate::config::Tables;
use crate::error::StoreError;
use crate::sql::{read_timestamp_type, Sql};

/// Storage settings shared by every component: the [`Tables`] and the `NOTIFY` channel of the
/// bus outbox. Cheap to clone (the rendered SQL is shared).
///
#[derive(Clone, Debug)]
pub(crate) struct StorageConfig {
    tables: Tables,
    channel: String,
    notify_on_write: bool,
    sql: Arc<Sql>,
}

fn default_channel(tables: &Tables) -> String {
    let mut channel = format!(
        "ferrybus_outbox.{}.{}",
        tables.schema_name(),
        tables.outbox_state()
    );
    while channel.len() > 63 {
        channel.pop();
    }
    channel
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self::new(Tables::new())
    }
}

impl StorageConfig {
    /// Settings for `tables`, notifying channel `ferrybus_outbox.<schema>.<outbox_state>` (cut
    /// to PostgreSQL's 63-byte identifier limit), so delivery services of different schemas do
    /// not wake each other.
    pub(crate) fn new(tables: Tables) -> Self {
        let sql = Arc::new(Sql::new(&tables));
        Self {
            channel: default_channel(&tables),
            notify_on_write: true,
            tables,
            sql,
        }
    }

    /// Whether each bus-outbox write sends a `NOTIFY` (see `PostgresStorage::notify_on_write`).
    pub(crate) fn notify_on_write(mut self, enabled: bool) -> Self {
        self.notify_on_write = enabled;
        self
    }

    /// The channel a bus-outbox write notifies, `None` when writes do not notify.
    pub(crate) fn write_notify(&self) -> Option<&str> {
        self.notify_on_write.then_some(self.channel.as_str())
    }

    /// Sets the `LISTEN`/`NOTIFY` channel the bus outbox signals new rows on.
    pub(crate) fn notify_channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = channel.into();
        self
    }

    /// The `NOTIFY` channel.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    pub(crate) fn sql(&self) -> &Sql {
        &self.sql
    }

    /// Reads the type of the inbox `Received` column and returns the settings with the matching
    /// [`TimestampType`], for tables a .NET service created with Npgsql's legacy timestamps.
    ///
    pub(crate) async fn detect(self, db: &impl ConnectionTrait) -> Result<Self, StoreError> {
        let timestamps = read_timestamp_type(db, &self.tables).await?;
        Ok(Self::new(self.tables.timestamps(timestamps))
            .notify_channel(self.channel)
            .notify_on_write(self.notify_on_write))
    }
}
