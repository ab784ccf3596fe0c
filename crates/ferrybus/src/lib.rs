//! ferrybus: MassTransit-compatible message consumers for Rust.
//!
//! A Rust service built with ferrybus reads and writes MassTransit's envelopes, uses its RabbitMQ
//! topology, error and skipped queues and `Fault<T>` messages, and shares its EF Core inbox and
//! outbox tables on PostgreSQL, so the .NET services around it cannot tell it from one of their own.
//!
//! This crate is the facade: it re-exports [`ferrybus_core`] at its root, and the transport, the
//! storage and each add-on as a module behind a feature:
//!
//! | feature | module | crate |
//! |---|---|---|
//! | `rabbitmq` (default) | `rabbitmq` | `ferrybus-rabbitmq`: the lapin transport |
//! | `sea-orm` (default) | `sea_orm` | `ferrybus-sea-orm`: inbox, consumer outbox, bus outbox on PostgreSQL |
//! | `derive` (default) | `#[derive(Message)]` | `ferrybus-derive` |
//! | `otel` (default) | `otel` | `ferrybus-otel`: MassTransit's spans and metrics on every endpoint, consumer and send |
//! | `saga` | `saga` | `ferrybus-saga`: state machine sagas (on PostgreSQL with `sea-orm`) |
//! | `batch` | `batch` | `ferrybus-batch`: batch consumers (their inbox on PostgreSQL with `sea-orm`) |
//! | `resilience` | `resilience` | `ferrybus-resilience`: kill switch, circuit breaker, rate limit |
//! | `telemetry` | `telemetry` | `ferrybus-telemetry`: OTLP export from `OTEL_*`, `/metrics`, `/health/*` |
//!
//! A consumer-only service compiles only what it asks for: with `default-features = false,
//! features = ["rabbitmq", "derive"]` there is no saga, batch, resilience or OpenTelemetry code in
//! its build.
//!
//! ```
//! use ferrybus::memory::TestHarness;
//! use ferrybus::{ConsumeContext, ConsumeError, Consumer, Message, Publish};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Serialize, Deserialize, Message)]
//! #[serde(rename_all = "camelCase")]
//! #[message(namespace = "Bookstore.Contracts")]
//! struct OrderPlaced {
//!     order_id: uuid::Uuid,
//! }
//!
//! struct InvoiceConsumer;
//!
//! impl Consumer<OrderPlaced> for InvoiceConsumer {
//!     async fn consume(&self, ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
//!         println!("invoicing order {}", ctx.message().order_id);
//!         Ok(())
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let harness = TestHarness::builder()
//!     .receive_endpoint("billing-invoice", |e| e.consumer(InvoiceConsumer))
//!     .start()
//!     .await
//!     .unwrap();
//! let id = harness.publish(&OrderPlaced { order_id: uuid::Uuid::now_v7() }).await.unwrap();
//! harness.consumed(id).await.unwrap();
//! # harness.stop().await;
//! # });
//! ```
//!
//! The same configuration tree runs on RabbitMQ with PostgreSQL storage:
//! `RabbitMqBus::builder(url).storage(PostgresStorage::new(db)).receive_endpoint("billing-invoice",
//! |e| e.inbox().consumer(InvoiceConsumer)).start()` (see the README).

pub use ferrybus_core::*;

#[cfg(feature = "rabbitmq")]
pub use ferrybus_rabbitmq as rabbitmq;

#[cfg(feature = "sea-orm")]
pub use ferrybus_sea_orm as sea_orm;

/// State machine sagas (feature `saga`).
#[cfg(feature = "saga")]
pub use ferrybus_saga as saga;

/// Batch consumers (feature `batch`).
#[cfg(feature = "batch")]
pub use ferrybus_batch as batch;

/// Kill switch, circuit breaker and rate limit endpoint layers (feature `resilience`).
#[cfg(feature = "resilience")]
pub use ferrybus_resilience as resilience;

/// MassTransit's spans and metrics (feature `otel`).
#[cfg(feature = "otel")]
pub use ferrybus_otel as otel;

/// OpenTelemetry setup from `OTEL_*`, `/metrics` and `/health/*` (feature `telemetry`).
#[cfg(feature = "telemetry")]
pub use ferrybus_telemetry as telemetry;

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// The quick start's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/quickstart.md")]
struct QuickstartDoctests;

/// The messages guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/messages-and-envelopes.md")]
struct MessagesGuideDoctests;

/// The consumers guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/consumers-and-pipeline.md")]
struct ConsumersGuideDoctests;

/// The RabbitMQ guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/endpoints-topology-errors.md")]
struct EndpointsGuideDoctests;

/// The inbox and outbox guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/inbox-outbox.md")]
struct InboxOutboxGuideDoctests;

/// The sagas guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/sagas.md")]
struct SagasGuideDoctests;

/// The reliability guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/reliability.md")]
struct ReliabilityGuideDoctests;

/// The examples guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/examples.md")]
struct ExamplesGuideDoctests;

/// The operations guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/operations.md")]
struct OperationsGuideDoctests;
