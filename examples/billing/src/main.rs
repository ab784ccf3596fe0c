//! The billing service. Run with `cargo run --release --bin billing`; see the crate docs.

use std::io::IsTerminal;
use std::process::ExitCode;

use example_billing::{app::shutdown_signal, Billing, Config};
use ferrybus_telemetry::{Telemetry, TelemetryConfig};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    // Traces and metrics over OTLP when OTEL_* is set; /metrics always (docs/operations.md).
    let telemetry = TelemetryConfig::from_env("billing").and_then(Telemetry::init);
    let layer = telemetry.as_ref().ok().and_then(Telemetry::tracing_layer);
    tracing_subscriber::registry()
        .with(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .with(tracing_subscriber::fmt::layer().with_ansi(std::io::stdout().is_terminal()))
        .with(layer)
        .init();
    let telemetry = match telemetry {
        Ok(telemetry) => telemetry,
        Err(error) => {
            tracing::error!(%error, "bad telemetry configuration");
            return ExitCode::FAILURE;
        }
    };
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(%error, "bad configuration");
            return ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(config.http_addr).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, addr = %config.http_addr, "billing could not start: the HTTP address is not free");
            return ExitCode::FAILURE;
        }
    };
    let billing = match Billing::start(&config).await {
        Ok(billing) => billing,
        Err(error) => {
            // Whatever the drivers put in their errors, no password is printed.
            let error = config.redact(&error.to_string());
            tracing::error!(%error, "billing could not start");
            return ExitCode::FAILURE;
        }
    };
    let (stop_http, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = ferrybus_telemetry::router(&telemetry, billing.health());
    let addr = listener.local_addr().unwrap_or(config.http_addr);
    tracing::info!(%addr, "serving /metrics, /health/live and /health/ready");
    let http = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(%error, "the HTTP server failed");
        }
    });
    shutdown_signal().await;
    tracing::info!("shutting down");
    billing.stop().await;
    let _ = stop_http.send(());
    let _ = http.await;
    telemetry.shutdown();
    ExitCode::SUCCESS
}
