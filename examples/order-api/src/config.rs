//! [`Config`]: the order API's environment, with working defaults.

use std::time::Duration;

use ferrybus::sea_orm::{NamingStyle, Tables};

/// Why the environment could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{name}={value:?}: {reason}")]
pub struct ConfigError {
    name: &'static str,
    value: String,
    reason: &'static str,
}

/// The order API's settings.
///
/// | variable | default | meaning |
/// |---|---|---|
/// | `ORDER_API_ADDR` | `127.0.0.1:8080` | where HTTP is served (`127.0.0.1:0` picks a port) |
/// | `DATABASE_URL` | `postgres://postgres@127.0.0.1:5432/test` | PostgreSQL |
/// | `AMQP_URL` | `amqp://guest:guest@127.0.0.1:5672/%2f` | RabbitMQ |
/// | `ORDERS_SCHEMA` | `orders` | schema of the `orders` table |
/// | `FERRYBUS_SCHEMA` | `messaging` | schema of the outbox tables |
/// | `FERRYBUS_NAMING` | `snake` | `snake` or `pascal` (.NET's default names) |
/// | `FERRYBUS_INBOX_TABLE`, `FERRYBUS_OUTBOX_STATE_TABLE`, `FERRYBUS_OUTBOX_MESSAGE_TABLE` | by naming | table names |
///
/// ```
/// let config = example_order_api::Config::default();
/// assert_eq!(config.addr, "127.0.0.1:8080");
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    /// The HTTP listen address.
    pub addr: String,
    /// PostgreSQL URL.
    pub database_url: String,
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// The schema of the `orders` table.
    pub orders_schema: String,
    /// Where the outbox tables are, and how they are named.
    pub tables: Tables,
    /// The connection name the broker shows.
    pub connection_name: String,
    /// The timeout of one attempt to connect to RabbitMQ (the bus keeps trying, with back-off,
    /// until it connects).
    pub connect_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            addr: "127.0.0.1:8080".to_owned(),
            database_url: "postgres://postgres@127.0.0.1:5432/test".to_owned(),
            amqp_url: "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned(),
            orders_schema: "orders".to_owned(),
            tables: Tables::new(),
            connection_name: "order-api".to_owned(),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

impl Config {
    /// Reads the environment; unset variables keep their defaults.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        let set = |target: &mut String, name: &str| {
            if let Some(value) = lookup(name) {
                *target = value;
            }
        };
        set(&mut config.addr, "ORDER_API_ADDR");
        set(&mut config.database_url, "DATABASE_URL");
        set(&mut config.amqp_url, "AMQP_URL");
        set(&mut config.orders_schema, "ORDERS_SCHEMA");
        let naming = match lookup("FERRYBUS_NAMING").as_deref() {
            None | Some("snake") | Some("snake_case") => NamingStyle::SnakeCase,
            Some("pascal") | Some("PascalCase") => NamingStyle::PascalCase,
            Some(other) => {
                return Err(ConfigError {
                    name: "FERRYBUS_NAMING",
                    value: other.to_owned(),
                    reason: "expected snake or pascal",
                })
            }
        };
        let (inbox, state, message) = match naming {
            NamingStyle::SnakeCase => ("inbox_state", "outbox_state", "outbox_message"),
            NamingStyle::PascalCase => ("InboxState", "OutboxState", "OutboxMessage"),
        };
        let name = |var: &str, default: &str| lookup(var).unwrap_or_else(|| default.to_owned());
        config.tables = Tables::new()
            .schema(name("FERRYBUS_SCHEMA", "messaging"))
            .names(
                name("FERRYBUS_INBOX_TABLE", inbox),
                name("FERRYBUS_OUTBOX_STATE_TABLE", state),
                name("FERRYBUS_OUTBOX_MESSAGE_TABLE", message),
            )
            .naming(naming);
        Ok(config)
    }
}
