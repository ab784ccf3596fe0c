//! MassTransit-compatible messaging for Rust: the core.
//!
//! `ferrybus-core` holds the parts of ferrybus that do no I/O: message identities and URNs
//! ([`message`]), the MassTransit [`envelope`], [`Consumer`]s and their pipeline with retry
//! ([`consume`]), what leaves the process ([`outgoing`]: [`Publish`], [`SendOptions`]), the
//! endpoint as a tower service that answers a [`Settlement`] per [`Delivery`] ([`endpoint`]),
//! faults ([`fault`]), pausing on outages ([`pause`]), the [`BusConfig`] every transport shares
//! with its [`storage`], and an in-memory transport with a test harness ([`memory`]).
//!
//! Applications use the `ferrybus` facade, which re-exports this crate and adds the transport,
//! the storage and the add-ons (sagas, batch consumers, resilience layers, OpenTelemetry) behind
//! features. Transports, storages and add-ons build on this crate; [`integration`] gathers what
//! they need.
//!
//! ```
//! use ferrybus_core::memory::TestHarness;
//! use ferrybus_core::{ConsumeContext, ConsumeError, Consumer, Message, Publish};
//!
//! #[derive(serde::Serialize, serde::Deserialize, Message)]
//! #[message(namespace = "Bookstore.Contracts")]
//! struct OrderPlaced {
//!     total: String,
//! }
//!
//! struct Invoicing;
//!
//! impl Consumer<OrderPlaced> for Invoicing {
//!     async fn consume(&self, ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
//!         println!("invoicing {}", ctx.message().total);
//!         Ok(())
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let harness = TestHarness::builder()
//!     .receive_endpoint("billing-invoice", |e| e.consumer(Invoicing))
//!     .start()
//!     .await
//!     .unwrap();
//! let id = harness.publish(&OrderPlaced { total: "12.00".into() }).await.unwrap();
//! harness.consumed(id).await.unwrap();
//! # harness.stop().await;
//! # });
//! ```

// Lets `#[derive(Message)]` refer to `::ferrybus_core` inside this crate too.
#[allow(unused_extern_crates)]
extern crate self as ferrybus_core;

pub mod address;
pub mod bus;
pub mod consume;
pub mod endpoint;
pub mod envelope;
pub mod error;
pub mod fault;
pub mod integration;
pub mod memory;
pub mod message;
pub mod outgoing;
pub mod pause;
mod secrets;
mod shared_text;
pub mod storage;

pub use bus::BusConfig;
pub use consume::{consumer_fn, ConsumeContext, Consumer, RetryPolicy};
pub use endpoint::{Delivery, EndpointConfig, Settlement, SettlementKind};
pub use envelope::{Envelope, Headers};
pub use error::{ConsumeError, PublishError};
pub use fault::{Fault, ReceiveFault};
pub use message::{Message, MessageType};
pub use outgoing::{Publish, SendOptions};

/// .NET on the wire: type names, case-insensitive binding, serde helpers for .NET values.
pub use ferrybus_dotnet as dotnet;

#[cfg(feature = "derive")]
pub use ferrybus_derive::Message;

/// The attribute macro [`MessageSink`](outgoing::MessageSink) and [`Storage`](storage::Storage)
/// implementations use.
pub use async_trait::async_trait;
