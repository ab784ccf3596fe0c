//! The order API. Run with `cargo run --release --bin order-api`; see the crate docs.

use std::io::IsTerminal;
use std::process::ExitCode;

use example_order_api::{Config, OrderApi};
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
    let api = match OrderApi::start(&config).await {
        Ok(api) => api,
        Err(error) => {
            tracing::error!(%error, "the order API could not start");
            return ExitCode::FAILURE;
        }
    };
    shutdown_signal().await;
    tracing::info!("shutting down");
    api.stop().await;
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
