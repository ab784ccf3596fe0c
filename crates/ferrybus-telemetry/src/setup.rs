//! [`Telemetry`]: the OpenTelemetry SDK set up from the standard `OTEL_*` variables, with a
//! Prometheus registry for `/metrics`.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource;

use crate::TelemetryError;

/// `OTEL_EXPORTER_OTLP_ENDPOINT`: the collector's base URL (`/v1/traces`, `/v1/metrics` added).
pub const OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the traces URL, used as is.
pub const OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`: the metrics URL, used as is.
pub const OTLP_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` (the default, and the one supported).
pub const OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// `OTEL_SERVICE_NAME`: the `service.name` resource attribute.
pub const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// How telemetry is set up: read from `OTEL_*` ([`from_env`](Self::from_env)) or given.
///
/// ```
/// use ferrybus_telemetry::TelemetryConfig;
/// let config = TelemetryConfig::from_lookup("billing", |name| match name {
///     "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:4318".to_owned()),
///     _ => None,
/// })
/// .unwrap();
/// assert_eq!(config.service_name(), "billing");
/// assert_eq!(config.traces_endpoint(), Some("http://127.0.0.1:4318/v1/traces"));
///
/// let quiet = TelemetryConfig::from_lookup("billing", |_| None).unwrap();
/// assert_eq!(quiet.traces_endpoint(), None); // nothing is exported
///
/// let grpc = TelemetryConfig::from_lookup("billing", |name| match name {
///     "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:4317".to_owned()),
///     "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("grpc".to_owned()),
///     _ => None,
/// });
/// assert!(grpc.is_err());
/// ```
pub struct TelemetryConfig {
    service_name: String,
    traces_endpoint: Option<String>,
    metrics_endpoint: Option<String>,
    span_exporters: Vec<Box<dyn FnOnce(TracerBuilder) -> TracerBuilder + Send>>,
    metrics_interval: Duration,
}

type TracerBuilder = opentelemetry_sdk::trace::TracerProviderBuilder;

impl std::fmt::Debug for TelemetryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryConfig")
            .field("service_name", &self.service_name)
            .field("traces_endpoint", &self.traces_endpoint)
            .field("metrics_endpoint", &self.metrics_endpoint)
            .field("span_exporters", &self.span_exporters.len())
            .finish_non_exhaustive()
    }
}

impl TelemetryConfig {
    /// Reads `OTEL_SERVICE_NAME` (else `default_service`), `OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` and
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` from the environment.
    pub fn from_env(default_service: &str) -> Result<Self, TelemetryError> {
        Self::from_lookup(default_service, |name| std::env::var(name).ok())
    }

    /// As [`from_env`](Self::from_env), reading each variable with `lookup`.
    pub fn from_lookup(
        default_service: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, TelemetryError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let base = get(OTLP_ENDPOINT).map(|b| b.trim().trim_end_matches('/').to_owned());
        let traces_endpoint =
            get(OTLP_TRACES_ENDPOINT).or_else(|| base.as_ref().map(|b| format!("{b}/v1/traces")));
        let metrics_endpoint =
            get(OTLP_METRICS_ENDPOINT).or_else(|| base.as_ref().map(|b| format!("{b}/v1/metrics")));
        if traces_endpoint.is_some() || metrics_endpoint.is_some() {
            let protocol = get(OTLP_PROTOCOL).unwrap_or_else(|| "http/protobuf".to_owned());
            if protocol.trim() != "http/protobuf" {
                return Err(TelemetryError::new(format!(
                    "{OTLP_PROTOCOL}={protocol:?} is not supported: ferrybus-telemetry exports OTLP \
                     as http/protobuf only (point {OTLP_ENDPOINT} at the collector's HTTP port, \
                     usually 4318)"
                )));
            }
        }
        Ok(Self {
            service_name: get(SERVICE_NAME).unwrap_or_else(|| default_service.to_owned()),
            traces_endpoint,
            metrics_endpoint,
            span_exporters: Vec::new(),
            metrics_interval: Duration::from_secs(60),
        })
    }

    /// The `service.name`.
    pub fn service_name(&self) -> &str {
        &self.service_name
    }

    /// Where spans go over OTLP, if anywhere.
    pub fn traces_endpoint(&self) -> Option<&str> {
        self.traces_endpoint.as_deref()
    }

    /// Where metrics go over OTLP, if anywhere (Prometheus's `/metrics` is always served).
    pub fn metrics_endpoint(&self) -> Option<&str> {
        self.metrics_endpoint.as_deref()
    }

    /// How often metrics are pushed over OTLP (60 s by default, as `OTEL_METRIC_EXPORT_INTERVAL`).
    pub fn metrics_interval(mut self, interval: Duration) -> Self {
        self.metrics_interval = interval;
        self
    }

    /// Also sends every span to `exporter`, one at a time as it ends (a test's in-memory
    /// exporter, a stdout exporter); a tracer provider is then installed even without OTLP.
    pub fn span_exporter<E: SpanExporter + 'static>(mut self, exporter: E) -> Self {
        self.span_exporters.push(Box::new(move |builder| {
            builder.with_simple_exporter(exporter)
        }));
        self
    }
}

/// The installed OpenTelemetry providers and the Prometheus registry. Install it once, before
/// the bus starts ([`Telemetry::init`]); keep it for `/metrics`
/// ([`metrics_router`](crate::metrics_router)) and [`shutdown`](Self::shutdown) at exit to flush.
#[derive(Clone)]
pub struct Telemetry {
    registry: prometheus::Registry,
    meters: SdkMeterProvider,
    tracers: Option<SdkTracerProvider>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("traces", &self.tracers.is_some())
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Sets up and installs the global meter provider (Prometheus, plus OTLP when configured)
    /// and, when spans are exported anywhere, the global tracer provider. With no `OTEL_*`
    /// set nothing leaves the process: no tracer provider is installed (the trace context in
    /// `MT-Activity-Id` still passes through) and metrics are only served at `/metrics`.
    ///
    /// ```no_run
    /// use ferrybus_telemetry::{Telemetry, TelemetryConfig};
    /// # fn run() -> Result<(), ferrybus_telemetry::TelemetryError> {
    /// let telemetry = Telemetry::init(TelemetryConfig::from_env("billing")?)?;
    /// // … run the bus, serve telemetry.router(health) …
    /// telemetry.shutdown();
    /// # Ok(()) }
    /// ```
    pub fn init(config: TelemetryConfig) -> Result<Self, TelemetryError> {
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let registry = prometheus::Registry::new();
        let prometheus = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .map_err(|e| TelemetryError::with_source("the Prometheus exporter failed", e))?;
        let mut meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(prometheus);
        if let Some(endpoint) = &config.metrics_endpoint {
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|e| TelemetryError::with_source("the OTLP metric exporter failed", e))?;
            let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter)
                .with_interval(config.metrics_interval)
                .build();
            meters = meters.with_reader(reader);
        }
        let meters = meters.build();
        opentelemetry::global::set_meter_provider(meters.clone());
        // Messages built anywhere (a bus outbox in an HTTP handler too) carry their trace.
        ferrybus_otel::install();

        let mut tracers = None;
        if config.traces_endpoint.is_some() || !config.span_exporters.is_empty() {
            let mut builder = SdkTracerProvider::builder().with_resource(resource);
            if let Some(endpoint) = &config.traces_endpoint {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_endpoint(endpoint.clone())
                    .build()
                    .map_err(|e| TelemetryError::with_source("the OTLP span exporter failed", e))?;
                builder = builder.with_batch_exporter(exporter);
            }
            for add in config.span_exporters {
                builder = add(builder);
            }
            let provider = builder.build();
            opentelemetry::global::set_tracer_provider(provider.clone());
            tracers = Some(provider);
        }
        Ok(Self {
            registry,
            meters,
            tracers,
        })
    }

    /// The Prometheus registry the metrics are read into (register your own collectors here to
    /// serve them at the same `/metrics`).
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    /// The metrics in Prometheus's text format, as `/metrics` serves them.
    pub fn prometheus_text(&self) -> String {
        let encoder = prometheus::TextEncoder::new();
        encoder
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|error| format!("# encoding the metrics failed: {error}\n"))
    }

    /// A `tracing` layer that turns the application's `tracing` spans into OpenTelemetry spans
    /// of the same traces (`None` when no spans are exported).
    ///
    /// ```no_run
    /// use tracing_subscriber::layer::SubscriberExt as _;
    /// use tracing_subscriber::util::SubscriberInitExt as _;
    /// # fn run(telemetry: ferrybus_telemetry::Telemetry) {
    /// tracing_subscriber::registry()
    ///     .with(tracing_subscriber::fmt::layer())
    ///     .with(telemetry.tracing_layer())
    ///     .init();
    /// # }
    /// ```
    pub fn tracing_layer<S>(
        &self,
    ) -> Option<tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        self.tracers.as_ref().map(|provider| {
            tracing_opentelemetry::layer().with_tracer(provider.tracer(ferrybus_otel::SCOPE))
        })
    }

    /// Sends the spans and metrics recorded so far (a test waits on this; exiting calls
    /// [`shutdown`](Self::shutdown)).
    pub fn flush(&self) {
        if let Some(tracers) = &self.tracers {
            if let Err(error) = tracers.force_flush() {
                tracing::warn!(target: "ferrybus::telemetry", %error, "flushing spans failed");
            }
        }
        if let Err(error) = self.meters.force_flush() {
            tracing::warn!(target: "ferrybus::telemetry", %error, "flushing metrics failed");
        }
    }

    /// Flushes and shuts the providers down.
    pub fn shutdown(&self) {
        if let Some(tracers) = &self.tracers {
            let _ = tracers.shutdown();
        }
        let _ = self.meters.shutdown();
    }
}
