//! Where the three MassTransit tables live and how their columns are named.

use std::sync::Arc;

use sea_orm::sea_query::ExprTrait;
use sea_orm::sea_query::{Alias, Expr, Query};
use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::error::StoreError;
use crate::sql::{build, Sql};

/// How column (and constraint) names are spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NamingStyle {
    /// `message_id`, `consumer_id` … (EFCore.NamingConventions' `UseSnakeCaseNamingConvention`).
    #[default]
    SnakeCase,
    /// `"MessageId"`, `"ConsumerId"` … (EF Core's default naming).
    PascalCase,
}

/// The PostgreSQL type of the time columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// `timestamp with time zone` (Npgsql ≥ 6, and what the migrator creates).
    #[default]
    WithTimeZone,
    /// `timestamp without time zone` (Npgsql's legacy timestamp behaviour). Values are written
    /// and compared as UTC wall-clock times, whatever the session time zone.
    WithoutTimeZone,
}

/// The schema, the three table names and the naming style of MassTransit's outbox tables.
///
/// ```
/// use ferrybus_sea_orm::{NamingStyle, Tables};
/// // What `AddEntityFrameworkOutbox` creates with EF's default naming:
/// let dotnet = Tables::dotnet_default();
/// assert_eq!(dotnet.inbox_state(), "InboxState");
/// assert_eq!(dotnet.naming_style(), NamingStyle::PascalCase);
/// // A renamed, pluralised shape:
/// let custom = Tables::new()
///     .schema("communication")
///     .names("InboxStates", "OutboxStates", "OutboxMessages")
///     .naming(NamingStyle::PascalCase);
/// assert_eq!(custom.outbox_message(), "OutboxMessages");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tables {
    schema: String,
    inbox_state: String,
    outbox_state: String,
    outbox_message: String,
    naming: NamingStyle,
    timestamps: TimestampType,
}

impl Default for Tables {
    fn default() -> Self {
        Self::new()
    }
}

impl Tables {
    /// ferrybus's default: schema `messaging`, tables `inbox_state`, `outbox_state`,
    /// `outbox_message`, snake_case columns.
    pub fn new() -> Self {
        Self {
            schema: "messaging".into(),
            inbox_state: "inbox_state".into(),
            outbox_state: "outbox_state".into(),
            outbox_message: "outbox_message".into(),
            naming: NamingStyle::SnakeCase,
            timestamps: TimestampType::WithTimeZone,
        }
    }

    /// The shape .NET creates with EF's default naming: schema `public`, tables `"InboxState"`,
    /// `"OutboxState"`, `"OutboxMessage"`, PascalCase columns.
    pub fn dotnet_default() -> Self {
        Self::new()
            .schema("public")
            .names("InboxState", "OutboxState", "OutboxMessage")
            .naming(NamingStyle::PascalCase)
    }

    /// Sets the schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets the three table names: inbox state, outbox state, outbox message.
    pub fn names(
        mut self,
        inbox_state: impl Into<String>,
        outbox_state: impl Into<String>,
        outbox_message: impl Into<String>,
    ) -> Self {
        self.inbox_state = inbox_state.into();
        self.outbox_state = outbox_state.into();
        self.outbox_message = outbox_message.into();
        self
    }

    /// Sets the column naming style.
    pub fn naming(mut self, naming: NamingStyle) -> Self {
        self.naming = naming;
        self
    }

    /// Sets the type of the time columns; a [`PostgresStorage`](crate::PostgresStorage) reads
    /// it from the existing tables when the bus starts.
    pub fn timestamps(mut self, timestamps: TimestampType) -> Self {
        self.timestamps = timestamps;
        self
    }

    /// The schema name.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// The inbox state table name.
    pub fn inbox_state(&self) -> &str {
        &self.inbox_state
    }

    /// The outbox state table name.
    pub fn outbox_state(&self) -> &str {
        &self.outbox_state
    }

    /// The outbox message table name.
    pub fn outbox_message(&self) -> &str {
        &self.outbox_message
    }

    /// The column naming style.
    pub fn naming_style(&self) -> NamingStyle {
        self.naming
    }

    /// The time column type.
    pub fn timestamp_type(&self) -> TimestampType {
        self.timestamps
    }
}

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
        let column = match self.tables.naming {
            NamingStyle::SnakeCase => "received",
            NamingStyle::PascalCase => "Received",
        };
        #[derive(FromQueryResult)]
        struct DataType {
            data_type: String,
        }
        let query = Query::select()
            .expr_as(
                Expr::col(Alias::new("data_type")).cast_as(Alias::new("text")),
                Alias::new("data_type"),
            )
            .from((Alias::new("information_schema"), Alias::new("columns")))
            .and_where(Expr::col(Alias::new("table_schema")).eq(self.tables.schema.as_str()))
            .and_where(Expr::col(Alias::new("table_name")).eq(self.tables.inbox_state.as_str()))
            .and_where(Expr::col(Alias::new("column_name")).eq(column))
            .to_owned();
        let row = db
            .query_one_raw(build(&query))
            .await
            .map_err(StoreError::database)?;
        let Some(row) = row else {
            return Err(StoreError::config(format!(
                "column {column} of {}.{} not found",
                self.tables.schema, self.tables.inbox_state
            )));
        };
        let data_type = DataType::from_query_result(&row, "").map_err(StoreError::database)?;
        let timestamps = if data_type.data_type == "timestamp without time zone" {
            TimestampType::WithoutTimeZone
        } else {
            TimestampType::WithTimeZone
        };
        Ok(Self::new(self.tables.timestamps(timestamps))
            .notify_channel(self.channel)
            .notify_on_write(self.notify_on_write))
    }
}
