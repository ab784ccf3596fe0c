//! RabbitMQ transport for ferrybus, indistinguishable on the wire from .NET MassTransit 8.
//!
//! * **Topology as MassTransit declares it**: a fanout exchange per message type (named by
//!   [`MessageType::entity_name`](ferrybus_core::MessageType::entity_name)), an endpoint exchange
//!   `Q` bound to queue `Q`, exchange-to-exchange bindings from every consumed type and from a
//!   published type to its base types, lazily declared `<queue>_error` / `<queue>_skipped`
//!   pairs copying the source queue's flags, all with MassTransit's flags so a .NET service on the
//!   same broker never hits `PRECONDITION_FAILED`. [`topology::EndpointTopology`] describes what
//!   an endpoint declares: the transport declares from it, tools compare the broker with it.
//! * **Properties and headers as MassTransit writes them**: `content_type`, `message_id`,
//!   `correlation_id`, `delivery_mode` 2, `expiration` in ms, headers converted by MassTransit's
//!   rules; publisher confirms on every publish. [`convert`] reads AMQP headers back as JSON
//!   the way the transport does, for tools that read the broker directly.
//! * **Failure paths**: faults move the original message to `<queue>_error` and ack; unknown types
//!   go to `<queue>_skipped`; delayed redelivery through the delayed-message plugin or, without
//!   it, TTL + dead-letter queues; see [`DelayMode`].
//! * **Staying up**: a supervised connection re-opened with back-off; endpoints re-declare and
//!   re-consume by themselves; graceful shutdown; [`Event`]s for every transition;
//!   [`RabbitMqBusBuilder::start_background`] to start while the broker is down; the bus starts
//!   and stops its storage's background services (outbox delivery, sweeper, cleanup).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Message, MessageType, Publish, RetryPolicy};
//! use ferrybus_core::endpoint::EndpointNameFormatter;
//! use ferrybus_rabbitmq::{Event, QueueEndpointExt, RabbitMqBus};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct SubmitOrder { order_id: uuid::Uuid }
//!
//! impl Message for SubmitOrder {
//!     fn message_type() -> MessageType {
//!         MessageType::parse("Shop.Contracts:SubmitOrder").unwrap()
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // MassTransit's SetKebabCaseEndpointNameFormatter(): "submit-order"
//! let queue = EndpointNameFormatter::kebab_case().consumer("Shop.SubmitOrderConsumer")?;
//! let bus = RabbitMqBus::builder("amqp://guest:guest@localhost:5672/%2f")
//!     .connection_name("orders-service")
//!     .receive_endpoint(queue, |e| {
//!         e.concurrency(8)
//!             .quorum()
//!             .retry(RetryPolicy::intervals([Duration::from_millis(100), Duration::from_millis(500)]))
//!             .redelivery(RetryPolicy::intervals([Duration::from_secs(5), Duration::from_secs(30)]))
//!             .consumer(consumer_fn("SubmitOrderConsumer", |ctx: ConsumeContext<SubmitOrder>| async move {
//!                 tracing::info!(order = %ctx.message().order_id, "submitted");
//!                 Ok::<_, ConsumeError>(())
//!             }))
//!     })
//!     .start()
//!     .await?;
//!
//! let mut events = bus.events();
//! tokio::spawn(async move {
//!     while let Ok(event) = events.recv().await {
//!         if let Event::Reconnected { generation } = event {
//!             tracing::info!(generation, "reconnected");
//!         }
//!     }
//! });
//!
//! bus.send("queue:submit-order", &SubmitOrder { order_id: uuid::Uuid::now_v7() }).await?;
//! bus.stop().await;
//! # Ok(()) }
//! ```

mod backoff;
mod bus;
mod channel;
mod connection;
pub mod convert;
mod delay;
mod endpoint;
mod error;
mod event;
pub mod naming;
mod properties;
mod publish;
mod queue;
mod request;
mod settings;
mod settle;
mod shutdown;
pub mod topology;

pub use bus::{RabbitMqBus, RabbitMqBusBuilder};
pub use convert::republish_properties;
pub use delay::DelayMode;
pub use error::{ErrorKind, RabbitMqError, Result};
pub use event::Event;
pub use properties::{RabbitMqProperties, DIRECT_REPLY_TO};
pub use queue::{
    ErrorQueueArguments, QueueEndpointExt, QueueOptions, QueueType, DEFAULT_CONSUMER_TIMEOUT,
    DEFAULT_QUORUM_DELIVERY_LIMIT, MESSAGE_DROPPING_ARGUMENTS,
};
pub use request::{ConsumeContextRequestExt, EitherResponse, RequestClient, Response};
pub use settings::HostSettings;
