//! The billing service. Run with `cargo run --release --bin billing`; see the crate docs.

use std::io::IsTerminal;
use std::process::ExitCode;

use example_billing::{app::shutdown_signal, Billing, Config};
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
    let billing = match Billing::start(&config).await {
        Ok(billing) => billing,
        Err(error) => {
            // Whatever the drivers put in their errors, no password is printed.
            let error = config.redact(&error.to_string());
            tracing::error!(%error, "billing could not start");
            return ExitCode::FAILURE;
        }
    };
    shutdown_signal().await;
    tracing::info!("shutting down");
    billing.stop().await;
    ExitCode::SUCCESS
}
