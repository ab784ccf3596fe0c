//! Batch consumers: a [`Consumer`](ferrybus_core::Consumer) of [`Batch<M>`] gets up to
//! [`BatchOptions::message_limit`] messages at once, as MassTransit's `IConsumer<Batch<T>>` does
//! (`src/MassTransit/Consumers/Batching/BatchConsumer.cs`, `BatchCollector.cs`,
//! `src/MassTransit.Abstractions/Configuration/Consumers/BatchOptions.cs`).
//!
//! ```text
//! delivery ─▶ endpoint ─▶ batch collector ──(message limit reached, or time limit)──▶ batch
//!   (each delivery waits here for its batch)      │ at most `concurrency_limit` batches at once
//!                                                 ▼
//!                 [retry] ▶ [transient guard] ▶ [inbox: one transaction, duplicates dropped] ▶ consumer
//!   ◀── every message of the batch settles with the batch's outcome: all acked, or each retried
//!       (redelivery) or moved to `<queue>_error` with its own `Fault<T>`
//! ```
//!
//! | ferrybus | MassTransit |
//! |---|---|
//! | [`Batch<M>`] | `Batch<T>` |
//! | [`Batch::len`], [`Batch::get`], [`Batch::iter`] | `Length`, `this[int]`, `IEnumerable<ConsumeContext<T>>` |
//! | [`Batch::mode`] ([`BatchCompletionMode`]) | `Mode` (`BatchCompletionMode.Time / Size`; MassTransit's `Forced` comes from its message-level retry, which ferrybus does not mix with batches) |
//! | [`Batch::first_message_received`], [`Batch::last_message_received`] | `FirstMessageReceived`, `LastMessageReceived` |
//! | [`BatchOptions::message_limit`] (default 10) | `MessageLimit` / `SetMessageLimit` |
//! | [`BatchOptions::time_limit`] (default 1 s) | `TimeLimit` / `SetTimeLimit` |
//! | [`BatchOptions::concurrency_limit`] (default 1) | `ConcurrencyLimit` / `SetConcurrencyLimit` |
//! | [`BatchOptions::time_limit_start`] ([`TimeLimitStart`]) | `TimeLimitStart` / `SetTimeLimitStart` (`BatchTimeLimitStart`) |
//! | [`BatchEndpointExt::batch_consumer`] | `e.Consumer<C>(c => c.Options<BatchOptions>(…))` |
//!
//! As in MassTransit, the endpoint's prefetch count and concurrency are raised to at least
//! `message_limit × concurrency_limit` (`BatchOptions.DefaultConfigurationCallback`), so that a
//! full batch can be in flight at once.
//!
//! ```
//! use std::time::Duration;
//! use ferrybus_batch::{Batch, BatchEndpointExt, BatchOptions};
//! use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig};
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
//! # #[message(namespace = "Bookstore.Contracts")]
//! # struct OrderPlaced { order_id: u32 }
//!
//! let endpoint = EndpointConfig::new("order-audit").batch_consumer(
//!     consumer_fn("AuditConsumer", |ctx: ConsumeContext<Batch<OrderPlaced>>| async move {
//!         for order in ctx.message().messages() {
//!             println!("order {}", order.order_id);
//!         }
//!         Ok::<_, ConsumeError>(())
//!     }),
//!     BatchOptions::new().message_limit(100).time_limit(Duration::from_millis(500)),
//! );
//! assert_eq!(endpoint.prefetch_count(), 100);
//! assert_eq!(endpoint.concurrency_limit(), 100);
//! ```

mod collector;
mod endpoint;
mod message;
mod options;
mod request;
mod service;

pub use endpoint::BatchEndpointExt;
pub use message::Batch;
pub use options::{BatchCompletionMode, BatchOptions, TimeLimitStart};
pub use request::{BatchInbox, BatchRequest, BoxBatchLayer, BoxBatchService};
pub use service::BatchConsumerService;
