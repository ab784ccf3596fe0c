//! [`Config`]: everything billing reads from its environment, with working defaults.

use ferrybus::address::{redact, url_passwords};
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

/// The billing service's settings.
///
/// | variable | default | meaning |
/// |---|---|---|
/// | `DATABASE_URL` | `postgres://postgres@127.0.0.1:5432/test` | PostgreSQL |
/// | `AMQP_URL` | `amqp://guest:guest@127.0.0.1:5672/%2f` | RabbitMQ: one URI, or a comma-separated list of a cluster's nodes (`amqp://u:p@n1/%2f,amqp://u:p@n2/%2f`, or `amqp://u:p@n1,n2,n3/%2f`) |
/// | `AMQP_TLS_CA_FILE` | — | a PEM file of CA certificates trusted for `amqps://` (a private CA), besides the system's |
/// | `BILLING_QUORUM` | `0` | `1`: the endpoint queues are quorum queues, with an explicit delivery limit of 20 |
/// | `BILLING_INVOICE_QUEUE` | `billing-invoice` | the invoice endpoint's queue |
/// | `BILLING_PAYMENTS_QUEUE` | `billing-payments` | the payments endpoint's queue |
/// | `BILLING_BIND` | `1` | `0`: the endpoints do not bind their message types' exchanges (only messages sent to their queues arrive) |
/// | `BILLING_SHUTDOWN_TIMEOUT_MS` | `30000` | how long a stop (SIGTERM, Ctrl-C) lets in-flight messages finish |
/// | `BILLING_CONNECT_TIMEOUT_MS` | `30000` | how long start-up keeps trying to reach RabbitMQ |
/// | `BILLING_CONCURRENCY` | `4` | messages consumed at once per endpoint |
/// | `PAYMENT_DELAY_MS` | `200` | how long the fake payment gateway takes |
/// | `BILLING_SCHEMA` | `billing` | schema of the business tables |
/// | `FERRYBUS_SCHEMA` | `messaging` | schema of the inbox/outbox tables |
/// | `FERRYBUS_NAMING` | `snake` | `snake` (`inbox_state`, `message_id`) or `pascal` (.NET's `"InboxState"`, `"MessageId"`) |
/// | `FERRYBUS_INBOX_TABLE` | by naming | inbox table name |
/// | `FERRYBUS_OUTBOX_STATE_TABLE` | by naming | outbox state table name |
/// | `FERRYBUS_OUTBOX_MESSAGE_TABLE` | by naming | outbox message table name |
/// | `BILLING_HTTP_ADDR` | `127.0.0.1:9464` | where `/metrics`, `/health/live` and `/health/ready` are served |
/// | `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, … | — | traces and metrics over OTLP (http/protobuf) when set (docs/operations.md) |
///
/// ```
/// let config = example_billing::Config::default();
/// assert_eq!(config.invoice_queue, "billing-invoice");
/// assert_eq!(config.tables.schema_name(), "messaging");
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    /// PostgreSQL URL.
    pub database_url: String,
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// How many messages each endpoint consumes at once.
    pub concurrency: usize,
    /// How long one call to the fake payment gateway takes.
    pub payment_delay: Duration,
    /// The schema of `invoices`, `charges` and `payments`.
    pub billing_schema: String,
    /// Where the inbox and outbox tables are, and how they are named.
    pub tables: Tables,
    /// The queue of the invoice consumer.
    pub invoice_queue: String,
    /// The queue of the payments consumer.
    pub payments_queue: String,
    /// Whether the endpoints bind their message types' exchanges (as MassTransit does). Tests
    /// that send straight to the queue turn it off to stay isolated from other publishers.
    pub bind_message_types: bool,
    /// The connection name the broker shows.
    pub connection_name: String,
    /// Whether the endpoint queues are quorum queues (with [`QUORUM_DELIVERY_LIMIT`]).
    pub quorum: bool,
    /// How long a stop lets in-flight messages finish.
    pub shutdown_timeout: Duration,
    /// How long start-up keeps trying to reach RabbitMQ.
    pub connect_timeout: Duration,
    /// A PEM file of CA certificates trusted for `amqps://`.
    pub amqp_tls_ca_file: Option<std::path::PathBuf>,
    /// Where `/metrics`, `/health/live` and `/health/ready` are served.
    pub http_addr: std::net::SocketAddr,
}

/// The default [`Config::http_addr`], Prometheus's port for exporters.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:9464";

/// The delivery limit of billing's quorum queues, set explicitly (RabbitMQ 4.x's default; 3.x
/// has none): a message delivered this often without being settled goes to `_error` with its
/// fault instead of being dropped by the broker.
pub const QUORUM_DELIVERY_LIMIT: u32 = 20;

/// The default PostgreSQL URL.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The default RabbitMQ URL.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

impl Default for Config {
    fn default() -> Self {
        Self {
            database_url: DEFAULT_DATABASE_URL.to_owned(),
            amqp_url: DEFAULT_AMQP_URL.to_owned(),
            concurrency: 4,
            payment_delay: Duration::from_millis(200),
            billing_schema: "billing".to_owned(),
            tables: Tables::new(),
            invoice_queue: "billing-invoice".to_owned(),
            payments_queue: "billing-payments".to_owned(),
            bind_message_types: true,
            connection_name: "billing".to_owned(),
            quorum: false,
            shutdown_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
            amqp_tls_ca_file: None,
            http_addr: DEFAULT_HTTP_ADDR.parse().expect("a socket address"),
        }
    }
}

impl Config {
    /// Reads the environment (see the table above); unset variables keep their defaults.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        if let Some(url) = lookup("DATABASE_URL") {
            config.database_url = url;
        }
        if let Some(url) = lookup("AMQP_URL") {
            config.amqp_url = url;
        }
        if let Some(value) = lookup("BILLING_CONCURRENCY") {
            config.concurrency =
                value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        invalid("BILLING_CONCURRENCY", &value, "expected a positive number")
                    })?;
        }
        if let Some(value) = lookup("PAYMENT_DELAY_MS") {
            let ms = value
                .parse::<u64>()
                .map_err(|_| invalid("PAYMENT_DELAY_MS", &value, "expected milliseconds"))?;
            config.payment_delay = Duration::from_millis(ms);
        }
        if let Some(schema) = lookup("BILLING_SCHEMA") {
            config.billing_schema = schema;
        }
        if let Some(value) = lookup("BILLING_QUORUM") {
            config.quorum = flag("BILLING_QUORUM", &value)?;
        }
        if let Some(value) = lookup("BILLING_BIND") {
            config.bind_message_types = flag("BILLING_BIND", &value)?;
        }
        if let Some(queue) = lookup("BILLING_INVOICE_QUEUE") {
            config.invoice_queue = queue;
        }
        if let Some(queue) = lookup("BILLING_PAYMENTS_QUEUE") {
            config.payments_queue = queue;
        }
        if let Some(value) = lookup("BILLING_SHUTDOWN_TIMEOUT_MS") {
            let ms = value.parse::<u64>().map_err(|_| {
                invalid(
                    "BILLING_SHUTDOWN_TIMEOUT_MS",
                    &value,
                    "expected milliseconds",
                )
            })?;
            config.shutdown_timeout = Duration::from_millis(ms);
        }
        if let Some(value) = lookup("BILLING_HTTP_ADDR") {
            config.http_addr = value
                .parse()
                .map_err(|_| invalid("BILLING_HTTP_ADDR", &value, "expected host:port"))?;
        }
        if let Some(path) = lookup("AMQP_TLS_CA_FILE") {
            config.amqp_tls_ca_file = Some(path.into());
        }
        if let Some(value) = lookup("BILLING_CONNECT_TIMEOUT_MS") {
            let ms = value.parse::<u64>().map_err(|_| {
                invalid(
                    "BILLING_CONNECT_TIMEOUT_MS",
                    &value,
                    "expected milliseconds",
                )
            })?;
            config.connect_timeout = Duration::from_millis(ms);
        }
        config.tables = tables_from_lookup(&lookup)?;
        Ok(config)
    }

    /// `text` (an error message, a log line) with every password of this configuration's URLs
    /// replaced by `***`: URLs written out in full (`scheme://user:password@…`) and passwords
    /// quoted alone, as some drivers do.
    ///
    /// ```
    /// let config = example_billing::Config::from_lookup(|name| {
    ///     (name == "AMQP_URL").then(|| "amqp://app:s3cret@node1/%2f,amqp://app:s3cret@node2/%2f".to_owned())
    /// })
    /// .unwrap();
    /// let shown = config.redact("cannot connect to amqp://app:s3cret@node2/%2f: refused (s3cret)");
    /// assert!(!shown.contains("s3cret"), "{shown}");
    /// ```
    pub fn redact(&self, text: &str) -> String {
        let mut shown = redact(text);
        for url in [&self.amqp_url, &self.database_url] {
            // A short password would mask unrelated text: those go only where a URL shows them.
            for password in url_passwords(url).into_iter().filter(|p| p.len() >= 3) {
                shown = shown.replace(&password, "***");
            }
        }
        shown
    }
}

fn flag(name: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" | "" => Ok(false),
        other => Err(invalid(name, other, "expected 1 or 0")),
    }
}

/// The inbox/outbox tables described by `FERRYBUS_SCHEMA`, `FERRYBUS_NAMING` and the three
/// `FERRYBUS_*_TABLE` variables.
///
/// ```
/// use example_billing::config::tables_from_lookup;
/// let tables = tables_from_lookup(&|name: &str| (name == "FERRYBUS_NAMING").then(|| "pascal".to_owned())).unwrap();
/// assert_eq!(tables.inbox_state(), "InboxState");
/// assert_eq!(tables.schema_name(), "messaging");
/// ```
pub fn tables_from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Tables, ConfigError> {
    let naming = match lookup("FERRYBUS_NAMING").as_deref() {
        None | Some("snake") | Some("snake_case") => NamingStyle::SnakeCase,
        Some("pascal") | Some("PascalCase") => NamingStyle::PascalCase,
        Some(other) => {
            return Err(invalid(
                "FERRYBUS_NAMING",
                other,
                "expected snake or pascal",
            ))
        }
    };
    let (inbox, state, message) = match naming {
        NamingStyle::SnakeCase => ("inbox_state", "outbox_state", "outbox_message"),
        NamingStyle::PascalCase => ("InboxState", "OutboxState", "OutboxMessage"),
    };
    let name = |var: &str, default: &str| lookup(var).unwrap_or_else(|| default.to_owned());
    Ok(Tables::new()
        .schema(name("FERRYBUS_SCHEMA", "messaging"))
        .names(
            name("FERRYBUS_INBOX_TABLE", inbox),
            name("FERRYBUS_OUTBOX_STATE_TABLE", state),
            name("FERRYBUS_OUTBOX_MESSAGE_TABLE", message),
        )
        .naming(naming))
}

fn invalid(name: &'static str, value: &str, reason: &'static str) -> ConfigError {
    ConfigError {
        name,
        value: redact(value),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_environment() {
        let config = Config::from_lookup(|name| match name {
            "BILLING_CONCURRENCY" => Some("8".into()),
            "PAYMENT_DELAY_MS" => Some("50".into()),
            "FERRYBUS_SCHEMA" => Some("communication".into()),
            "FERRYBUS_INBOX_TABLE" => Some("InboxStates".into()),
            "FERRYBUS_NAMING" => Some("pascal".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(config.concurrency, 8);
        assert_eq!(config.payment_delay, Duration::from_millis(50));
        let tables = &config.tables;
        assert_eq!(tables.schema_name(), "communication");
        assert_eq!(tables.inbox_state(), "InboxStates");
        assert_eq!(tables.outbox_state(), "OutboxState");
        assert_eq!(tables.naming_style(), NamingStyle::PascalCase);
        assert!(!config.quorum);
    }

    #[test]
    fn reads_the_cluster_settings() {
        let config = Config::from_lookup(|name| match name {
            "BILLING_QUORUM" => Some("1".into()),
            "BILLING_INVOICE_QUEUE" => Some("inv".into()),
            "BILLING_BIND" => Some("0".into()),
            "BILLING_SHUTDOWN_TIMEOUT_MS" => Some("1500".into()),
            _ => None,
        })
        .unwrap();
        assert!(config.quorum && !config.bind_message_types);
        assert_eq!(config.invoice_queue, "inv");
        assert_eq!(config.shutdown_timeout, Duration::from_millis(1500));
        assert!(
            Config::from_lookup(|name| (name == "BILLING_QUORUM").then(|| "maybe".into())).is_err()
        );
    }

    #[test]
    fn redacts_every_password() {
        let config = Config::from_lookup(|name| match name {
            "AMQP_URL" => Some("amqp://a:first1@n1/%2f,amqp://b:p%40ss2@n2/%2f".into()),
            "DATABASE_URL" => Some("postgres://billing:dbsecret@db/app".into()),
            _ => None,
        })
        .unwrap();
        let text = "first1 p%40ss2 p@ss2 dbsecret postgres://x:other@db amqp://b:p%40ss2@n2/%2f";
        let shown = config.redact(text);
        for secret in ["first1", "p%40ss2", "p@ss2", "dbsecret", "other"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn redacts_passwords_with_sub_delimiters() {
        for password in [
            "pa!ss", "pa$s&s", "pa'ss", "p(a)ss", "p*a+ss", "pa,ss", "pa;ss", "pa=ss",
        ] {
            let config = Config::from_lookup(|name| match name {
                "AMQP_URL" => Some(format!("amqp://app:{password}@n1/%2f")),
                "DATABASE_URL" => Some(format!("postgres://billing:{password}@db/app")),
                _ => None,
            })
            .unwrap();
            let text = format!(
                "cannot connect to amqp://app:{password}@n1/%2f nor postgres://billing:{password}@db/app ({password})"
            );
            let shown = config.redact(&text);
            assert!(!shown.contains(password), "{shown}");
        }
    }

    #[test]
    fn rejects_nonsense() {
        let err = Config::from_lookup(|name| (name == "BILLING_CONCURRENCY").then(|| "0".into()))
            .unwrap_err();
        assert!(err.to_string().contains("BILLING_CONCURRENCY"));
        assert!(
            Config::from_lookup(|name| (name == "FERRYBUS_NAMING").then(|| "kebab".into()))
                .is_err()
        );
    }
}
