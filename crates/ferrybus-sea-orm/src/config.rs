//! Where the three MassTransit tables live and how their columns are named.

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
