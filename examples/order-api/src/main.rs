//! The order API. Run with `cargo run --release --bin order-api`; see the crate docs.

use std::io::IsTerminal;
use std::process::ExitCode;

use example_order_api::{Config, OrderApi};
use ferrybus_telemetry::{Telemetry, TelemetryConfig};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    // Traces and metrics over OTLP when OTEL_* is set; /metrics always (docs/operations.md).
    let telemetry = TelemetryConfig::from_env("order-api").and_then(Telemetry::init);
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
    let api = match OrderApi::start_with(&config, Some(&telemetry)).await {
        Ok(api) => api,
        Err(error) => {
            tracing::error!(%error, "the order API could not start");
            return ExitCode::FAILURE;
        }
    };
    shutdown_signal().await;
    tracing::info!("shutting down");
    api.stop().await;
    telemetry.shutdown();
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = ctrl_c.await;
}
