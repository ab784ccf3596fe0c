//! The order saga service. Run with `cargo run -p example-order-saga --bin order-saga`.

use std::io::IsTerminal;
use std::process::ExitCode;

use example_order_saga::{Config, OrderSaga};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(%error, "bad configuration");
            return ExitCode::FAILURE;
        }
    };
    let saga = match OrderSaga::start(&config).await {
        Ok(saga) => saga,
        Err(error) => {
            tracing::error!(%error, "order-saga could not start");
            return ExitCode::FAILURE;
        }
    };
    shutdown_signal().await;
    tracing::info!("shutting down");
    saga.stop().await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
