//! Observability for ferrybus services next to MassTransit ones: the OpenTelemetry SDK set up
//! from the standard `OTEL_*` variables (OTLP over http/protobuf), MassTransit's metric names in
//! Prometheus text at `/metrics`, and health checks at `/health/live` and `/health/ready`, as
//! axum router fragments.
//!
//! The spans and instruments themselves are recorded by `ferrybus-otel`
//! ([`ferrybus_otel`]) through the OpenTelemetry API; this crate installs what
//! exports them.
//!
//! ```no_run
//! use ferrybus_telemetry::{router, Health, Telemetry, TelemetryConfig};
//! # async fn run(bus: ferrybus_rabbitmq::RabbitMqBus) -> Result<(), Box<dyn std::error::Error>> {
//! let telemetry = Telemetry::init(TelemetryConfig::from_env("billing")?)?; // before the bus starts
//! let health = Health::new().rabbitmq(&bus);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
//! axum::serve(listener, router(&telemetry, health)).await?;
//! # Ok(()) }
//! ```

#[cfg(feature = "sea-orm")]
mod backlog;
mod health;
mod http;
mod setup;

#[cfg(feature = "sea-orm")]
pub use backlog::{BACKLOG_CACHE, OUTBOX_OLDEST_AGE, OUTBOX_PENDING};
pub use health::{BacklogThreshold, Health, HealthReport, HealthStatus, PartHealth};
pub use http::{health_router, metrics_router, router};
pub use setup::{
    Telemetry, TelemetryConfig, OTLP_ENDPOINT, OTLP_METRICS_ENDPOINT, OTLP_PROTOCOL,
    OTLP_TRACES_ENDPOINT, SERVICE_NAME,
};

/// Setting telemetry up failed: an unsupported `OTEL_*` value, an exporter that could not be
/// built.
///
/// ```
/// let error = ferrybus_telemetry::TelemetryError::new("bad protocol");
/// assert_eq!(error.to_string(), "telemetry setup failed: bad protocol");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("telemetry setup failed: {message}")]
pub struct TelemetryError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl TelemetryError {
    /// An error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        message: &str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: format!("{message}: {source}"),
            source: Some(Box::new(source)),
        }
    }
}
