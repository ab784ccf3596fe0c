//! Support for the end-to-end scenario tests (`tests/tests/*.rs`): per-test isolation (unique
//! PostgreSQL schemas and queue names, cleaned up afterwards), a broker probe, a TCP proxy that
//! simulates a RabbitMQ outage for one test's connections only, a tiny HTTP client, and
//! poll-until helpers.
//!
//! Every test runs against the real services: PostgreSQL at `DATABASE_URL` and RabbitMQ at
//! `AMQP_URL` (the defaults of `scripts/services.sh`).

mod env;
mod http_client;
mod probe;
mod proxy;
mod services;

use std::future::Future;
use std::sync::Once;
use std::time::Duration;

use example_billing::config::{DEFAULT_AMQP_URL, DEFAULT_DATABASE_URL};
use uuid::Uuid;

pub use env::{storage, TestEnv};
pub use http_client::http;
pub use probe::{Probe, Received};
pub use proxy::{broker_socket, TcpProxy};
pub use services::{merged_events, order, send, send_twice, start_bus, wait_consumed, wait_event};

/// How long the tests wait for something that should happen (generous: the machine is shared).
pub const WAIT: Duration = Duration::from_secs(60);

/// The PostgreSQL URL of the tests.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// The RabbitMQ URL of the tests.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned())
}

/// Logs to the test output (`RUST_LOG` to change the level; warnings by default).
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// A short unique suffix.
pub fn unique_suffix() -> String {
    Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// Polls `f` every 50 ms until it returns `Some`; panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
