//! MassTransit-compatible messaging for Rust: the core.
//!
//! `ferrybus-core` holds the parts of ferrybus that do no I/O: message identities and URNs, the
//! MassTransit envelope, the [`Consumer`] trait and its [`ConsumeContext`], the [`Publish`]
//! trait, the endpoint as a tower service that answers a [`Settlement`] per [`Delivery`]
//! ([`endpoint`]), the consumer pipeline with its retry layer ([`consume`]), the fault model, the
//! [`BusConfig`] and [`Storage`] every transport shares, and an in-memory transport with a test
//! harness. Transport and storage crates (`ferrybus-rabbitmq`, `ferrybus-sea-orm`) build on it;
//! integrators should depend on this crate, the stable surface, rather than on the `ferrybus`
//! facade.

// Lets `#[derive(Message)]` refer to `::ferrybus_core` inside this crate too.
#[allow(unused_extern_crates)]
extern crate self as ferrybus_core;

pub mod address;
pub mod bus;
pub mod consume;
pub mod consumer;
pub mod endpoint;
pub mod envelope;
pub mod error;
pub mod fault;
pub mod instrument;
pub mod memory;
pub mod message;
pub mod outgoing;
pub mod publish;
pub mod resilience;
mod shared_text;

pub use address::{AddressError, EndpointAddress, HostAddress, DIRECT_REPLY_TO};
pub use bus::{Background, BusConfig, ConfigError, Storage};
pub use consume::{
    Batch, BatchCompletionMode, BatchOptions, BatchRequest, BoxBatchLayer, BoxBatchService,
    TimeLimitStart,
};
pub use consume::{
    BoxConsumeLayer, BoxConsumeService, ConsumeOutcome, ConsumeRequest, ConsumerInfo,
    ReceivedMessage, RetryLayer, RetryPolicy,
};
pub use consumer::{consumer_fn, ConsumeContext, Consumer, ConsumerFn};
pub use endpoint::{
    BoxEndpointLayer, BoxEndpointService, Delivery, Endpoint, EndpointConfig, EndpointContext,
    Faulted, QueueOptions, QueueType, Redelivery, Settlement, SettlementKind,
};
pub use envelope::{Envelope, EnvelopeError, Headers, HostInfo, Payload};
pub use error::{BoxError, ConsumeError, ConsumeErrorKind, PublishError, PublishErrorKind};
pub use fault::{fault_headers, skipped_headers, ExceptionInfo, Fault, ReceiveFault};
pub use ferrybus_dotnet as dotnet;
pub use message::{consumer_id, kebab_case, short_type_name, Message, MessageType, TypeName};
pub use outgoing::{MessageFactory, MessageOrigin, OutgoingMessage, SendOptions};
pub use publish::{MessageSink, Publish, SharedSink};

#[cfg(feature = "derive")]
pub use ferrybus_derive::Message;

/// The attribute macro [`MessageSink`] and [`Storage`] implementations use.
pub use async_trait::async_trait;

/// Re-exports for macros and integrations.
#[doc(hidden)]
pub mod __private {
    pub use tokio_util::sync::CancellationToken;
}
