//! Support for the end-to-end scenario tests (`tests/tests/*.rs`): per-test isolation
//! ([`TestEnv`]: unique PostgreSQL schemas and queue names, cleaned up afterwards), billing's
//! configuration for a test, buses started the way the examples start theirs, and a tiny HTTP
//! client.
//!
//! Everything else — the environment convention (`DATABASE_URL`, `AMQP_URL`), waits, the broker
//! [`Probe`], the [`TcpProxy`] that simulates a RabbitMQ outage for one test's connections — is
//! `ferrybus_testing`'s, re-exported here.
//!
//! Every test runs against the real services: PostgreSQL at `DATABASE_URL` and RabbitMQ at
//! `AMQP_URL` (the defaults of `scripts/services.sh`).

mod env;
mod http_client;
mod services;

pub use env::{tables, TestEnv};
pub use ferrybus_testing::{
    amqp_url, broker_socket, database_socket, database_url, eventually, header_str, init_tracing,
    unique_suffix, wait_event, Probe, Received, TcpProxy, WAIT,
};
pub use http_client::http;
pub use services::{
    merged_events, order, send, send_twice, start_bus, start_invoice_bus, wait_consumed,
};
