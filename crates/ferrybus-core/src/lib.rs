//! MassTransit-compatible messaging for Rust: the core.
//!
//! `ferrybus-core` holds the parts of ferrybus that do no I/O: message identities and URNs, the
//! MassTransit envelope, the [`Consumer`] trait and its [`ConsumeContext`], the tower pipeline with
//! its retry layer, the fault model, and an in-memory transport with a test harness. Transport and
//! storage crates (`ferrybus-rabbitmq`, `ferrybus-sea-orm`) build on it; integrators should depend
//! on this crate, the stable surface, rather than on the `ferrybus` facade.

// Lets `#[derive(Message)]` refer to `::ferrybus_core` inside this crate too.
#[allow(unused_extern_crates)]
extern crate self as ferrybus_core;

pub mod address;
pub mod consumer;
pub mod dotnet;
pub mod envelope;
pub mod error;
pub mod fault;
pub mod memory;
pub mod message;
pub mod outgoing;
pub mod pipeline;

pub use address::{AddressError, EndpointAddress, HostAddress};
pub use consumer::{consumer_fn, ConsumeContext, Consumer, ConsumerFn};
pub use dotnet::DotNetValueError;
pub use envelope::{Envelope, EnvelopeError, Headers, HostInfo};
pub use error::{BoxError, ConsumeError, ConsumeErrorKind};
pub use fault::{fault_headers, skipped_headers, ExceptionInfo, Fault, ReceiveFault};
pub use message::{consumer_id, kebab_case, short_type_name, Message, MessageType, TypeName};
pub use outgoing::{
    MessageFactory, MessageOrigin, MessageSink, OutgoingMessage, SendOptions, SharedSink,
};
pub use pipeline::{
    BoxConsumeService, ConsumeRequest, ConsumerInfo, Disposition, EndpointConfig, InboundDelivery,
    ReceivePipeline, ReceivedMessage, RetryLayer, RetryPolicy,
};

#[cfg(feature = "derive")]
pub use ferrybus_derive::Message;

/// The attribute macro [`MessageSink`] implementations use.
pub use async_trait::async_trait;

/// Re-exports for macros and integrations.
#[doc(hidden)]
pub mod __private {
    pub use tokio_util::sync::CancellationToken;
}
