//! The consumer pipeline: a tower [`Service`](tower::Service) per consumer, built from layers.
//!
//! Every consumer on an endpoint gets its own stack; [`ReceivePipeline`] routes a delivery to
//! the stacks of every consumer whose message type it carries and turns the outcome into a
//! [`Disposition`] the transport carries out.

mod endpoint;
mod receive;
mod request;
mod retry;
mod service;

pub use endpoint::{EndpointConfig, DEFAULT_MAX_BODY_SIZE};
pub use receive::{
    ConsumerRegistration, Disposition, InboundDelivery, PipelineSettings, ReceivePipeline,
};
pub use request::{ConsumeRequest, ConsumerInfo, ReceivedMessage};
pub use retry::{RetryLayer, RetryPolicy};
pub use service::{BoxConsumeService, ConsumerService};
