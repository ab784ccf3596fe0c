//! Consumers and their pipeline: the [`Consumer`] trait and the [`ConsumeContext`] it receives,
//! and one tower [`Service`](tower::Service) per consumer, taking a
//! [`ConsumeRequest`] and answering a [`ConsumeOutcome`].
//!
//! Every consumer on an endpoint gets its own stack, drawn with the rest of the pipeline in
//! [`endpoint`](crate::endpoint): retry outermost, so each attempt runs the whole stack again (a
//! new database transaction for the inbox), [`ConsumerService`] innermost (bind the payload,
//! consume, turn a panic into an error). The endpoint routes a delivery to the stacks of the
//! consumers of its message types and turns their outcomes into one settlement.

mod consumer;
mod outbox;
mod panic;
mod request;
mod retry;
mod service;

pub use consumer::{consumer_fn, ConsumeContext, Consumer, ConsumerFn};
pub use outbox::{InMemoryOutboxLayer, InMemoryOutboxService};
pub use panic::{catch_panic, panic_message};
pub use request::{ConsumeOutcome, ConsumeRequest, ConsumerInfo, ReceivedMessage};
pub use retry::{RetryLayer, RetryPolicy};
pub use service::{BoxConsumeLayer, BoxConsumeService, ConsumerService};
