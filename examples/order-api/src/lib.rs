//! Run with `cargo run --release --bin order-api`, then
//! `curl -i -X POST localhost:8080/orders -H 'content-type: application/json' -d '{"total": "12.00", "currency": "TRY"}'`.
//!
//! A small HTTP service that takes orders and announces them with `OrderPlaced`, the
//! transactional-outbox way (scenario 7, "the dual-write problem"): the order row and the message
//! are written in **one** PostgreSQL transaction (`BusOutbox::publish` writes MassTransit's
//! `outbox_state`/`outbox_message` rows), and the outbox delivery service sends the message to
//! RabbitMQ after the commit. RabbitMQ being down does not stop it from taking orders: the
//! messages wait in the outbox and go out when the broker is back, and billing invoices them.
//!
//! * `POST /orders` `{"total": "12.00", "currency": "TRY"}` → `201 {"orderId", "messageId"}`
//!   (`422` for a non-positive total or a bad currency, `400`/`415` for a malformed body);
//! * `GET /orders/{id}` → `200` with the order, `404` if there is none, `400` for a bad id;
//! * `GET /health/live`, `GET /health/ready` (`200`/`503` with a JSON report: broker, database,
//!   outbox backlog) and `GET /metrics` (Prometheus text), on the same address.
//!
//! Each request runs in a server span (the child of the caller's `traceparent`); the orders it
//! writes carry that trace in their outbox rows, and with `OTEL_EXPORTER_OTLP_ENDPOINT` set the
//! spans are exported over OTLP (docs/operations.md).

pub mod app;
pub mod config;
pub mod orders;
pub mod tracing_layer;

pub use app::OrderApi;
pub use config::Config;
