//! Test support shared by every ferrybus test suite, against the real services:
//!
//! * **one environment convention**: [`database_url`] reads `DATABASE_URL`, [`amqp_url`] reads
//!   `AMQP_URL`, with the defaults of `scripts/services.sh` (PostgreSQL on `127.0.0.1:5432`,
//!   trust auth, database `test`; RabbitMQ on `127.0.0.1:5672`, `guest`/`guest`);
//! * **waits, never sleeps**: [`eventually`] polls a condition, [`wait_event`] waits for an event
//!   on a broadcast channel, both panicking with what they waited for after a timeout;
//! * **isolation**: [`unique`] names; a [`Probe`] that reads broker state and deletes what a test
//!   declared; [`TestSchema`] creates a PostgreSQL schema in one of MassTransit's table
//!   [`Shape`]s and drops it afterwards, and [`on_every_shape!`] runs a test on all of them;
//! * **outages for one test only**: a [`TcpProxy`] in front of RabbitMQ or PostgreSQL that a
//!   test cuts and restores, while the service stays up for every other test.
//!
//! ```no_run
//! use std::time::Duration;
//! # async fn run() {
//! let probe = ferrybus_testing::Probe::connect(&ferrybus_testing::amqp_url()).await;
//! let queue = ferrybus_testing::unique("orders");
//! probe.track_endpoint(&queue); // deleted (with _error and _skipped) by cleanup
//! ferrybus_testing::eventually("the queue to be declared", Duration::from_secs(5), || async {
//!     probe.queue_count(&queue).await
//! })
//! .await;
//! probe.cleanup().await;
//! # }
//! ```

mod harness;
mod probe;
mod proxy;
mod schema;

use std::future::Future;
use std::sync::Once;
use std::time::Duration;

use tokio::sync::broadcast;

pub use harness::{settlements, wait_settled};
pub use probe::{has_header, header_int, header_str, mt_properties, Probe, Received};
pub use proxy::{broker_socket, database_socket, TcpProxy};
pub use schema::{Shape, TestSchema, SHAPES};

/// The default PostgreSQL URL (what `scripts/services.sh` sets up).
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The default RabbitMQ URL (what `scripts/services.sh` sets up).
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// How long tests wait for something that should happen (generous: the machine is shared).
pub const WAIT: Duration = Duration::from_secs(60);

/// The PostgreSQL URL of the tests: `DATABASE_URL`, else [`DEFAULT_DATABASE_URL`].
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// The RabbitMQ URL of the tests: `AMQP_URL`, else [`DEFAULT_AMQP_URL`].
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

/// A short unique suffix (12 hex digits).
pub fn unique_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// A name unique to this test run: `<prefix>-<12 hex digits>`.
///
/// ```
/// let name = ferrybus_testing::unique("billing");
/// assert!(name.starts_with("billing-") && name.len() == "billing-".len() + 12);
/// ```
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", unique_suffix())
}

/// Polls `f` every 20 ms until it returns `Some`; panics after `timeout`, naming `what`.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::time::Duration;
/// let mut tries = 0;
/// let value = ferrybus_testing::eventually("three tries", Duration::from_secs(1), || {
///     tries += 1;
///     let done = tries >= 3;
///     async move { done.then_some(42) }
/// })
/// .await;
/// assert_eq!(value, 42);
/// # });
/// ```
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
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for the first event on `events` matching `pred` (events sent before the receiver
/// subscribed are not seen); panics after `timeout`.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::time::Duration;
/// let (tx, mut rx) = tokio::sync::broadcast::channel(8);
/// tx.send(1).unwrap();
/// tx.send(2).unwrap();
/// let event = ferrybus_testing::wait_event(&mut rx, Duration::from_secs(1), |n| *n == 2).await;
/// assert_eq!(event, 2);
/// # });
/// ```
pub async fn wait_event<E: Clone>(
    events: &mut broadcast::Receiver<E>,
    timeout: Duration,
    pred: impl Fn(&E) -> bool,
) -> E {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(event) if pred(&event) => return event,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("the event stream closed"),
            }
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out after {timeout:?} waiting for an event"))
}
