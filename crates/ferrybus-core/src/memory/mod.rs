//! The in-memory transport and test harness.
//!
//! [`InMemoryBus`] runs receive endpoints on an in-process broker with RabbitMQ's routing model:
//! publishing goes to the message type's exchange, consumed types' exchanges are bound to the
//! endpoint, failures land in `<queue>_error` with fault headers and a `Fault<T>` is published,
//! unknown types land in `<queue>_skipped`. [`TestHarness`] wraps it for tests. State is per
//! process and per bus: it is a test double, not a durable transport.

mod broker;
mod bus;
mod harness;

pub use broker::{InMemoryBroker, StoredMessage};
pub use bus::{BusEvent, InMemoryBus, InMemoryBusBuilder, InMemorySink};
pub use harness::{HarnessTimeout, TestHarness, TestHarnessBuilder};
