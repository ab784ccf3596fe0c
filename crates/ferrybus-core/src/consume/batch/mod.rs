//! Batch consumers: a [`Consumer`](crate::Consumer) of [`Batch<M>`] gets up to
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
//! | [`EndpointConfig::batch_consumer`](crate::EndpointConfig::batch_consumer) | `e.Consumer<C>(c => c.Options<BatchOptions>(…))` |
//!
//! As in MassTransit, the endpoint's prefetch count and concurrency are raised to at least
//! `message_limit × concurrency_limit` (`BatchOptions.DefaultConfigurationCallback`), so that a
//! full batch can be in flight at once.
//!
//! ```
//! use std::time::Duration;
//! use ferrybus_core::{consumer_fn, Batch, BatchOptions, ConsumeContext, ConsumeError, EndpointConfig};
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
mod request;
mod service;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::consumer::ConsumeContext;
use crate::message::{Message, MessageType};

pub(crate) use collector::BatchCollector;
pub use request::{BatchRequest, BoxBatchLayer, BoxBatchService};
pub use service::BatchConsumerService;

/// Why a batch was handed to its consumer (MassTransit's `BatchCompletionMode`; its `Forced`
/// completes a batch when a retried message arrives, and ferrybus retries whole batches instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchCompletionMode {
    /// The time limit passed (`Time`).
    Time,
    /// The message limit was reached (`Size`).
    Size,
}

/// Where the time limit of a batch counts from (MassTransit's `BatchTimeLimitStart`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TimeLimitStart {
    /// From the batch's first message (`FromFirst`, the default).
    #[default]
    FromFirst,
    /// From its latest message: every message restarts the timer (`FromLast`).
    FromLast,
}

/// How messages are gathered into batches (MassTransit's `BatchOptions`).
///
/// ```
/// use std::time::Duration;
/// use ferrybus_core::{BatchOptions, TimeLimitStart};
/// let options = BatchOptions::new()
///     .message_limit(50)
///     .time_limit(Duration::from_secs(2))
///     .concurrency_limit(2)
///     .time_limit_start(TimeLimitStart::FromLast);
/// assert_eq!(options.message_capacity(), 100);
/// assert_eq!(BatchOptions::default().message_limit_value(), 10);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    message_limit: usize,
    time_limit: Duration,
    concurrency_limit: usize,
    time_limit_start: TimeLimitStart,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchOptions {
    /// MassTransit's defaults: 10 messages, 1 second, one batch at a time, from the first message.
    pub fn new() -> Self {
        Self {
            message_limit: 10,
            time_limit: Duration::from_secs(1),
            concurrency_limit: 1,
            time_limit_start: TimeLimitStart::FromFirst,
        }
    }

    /// The most messages in one batch (`MessageLimit`); 0 is taken as 1.
    pub fn message_limit(mut self, limit: usize) -> Self {
        self.message_limit = limit.max(1);
        self
    }

    /// How long a partial batch waits for more messages (`TimeLimit`); zero is taken as 1 ms.
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = limit.max(Duration::from_millis(1));
        self
    }

    /// How many batches run at once (`ConcurrencyLimit`); 0 is taken as 1.
    pub fn concurrency_limit(mut self, limit: usize) -> Self {
        self.concurrency_limit = limit.max(1);
        self
    }

    /// Where the time limit counts from (`TimeLimitStart`).
    pub fn time_limit_start(mut self, start: TimeLimitStart) -> Self {
        self.time_limit_start = start;
        self
    }

    /// The message limit.
    pub fn message_limit_value(&self) -> usize {
        self.message_limit
    }

    /// The time limit.
    pub fn time_limit_value(&self) -> Duration {
        self.time_limit
    }

    /// The concurrency limit.
    pub fn concurrency_limit_value(&self) -> usize {
        self.concurrency_limit
    }

    /// Where the time limit counts from.
    pub fn time_limit_start_value(&self) -> TimeLimitStart {
        self.time_limit_start
    }

    /// `message_limit × concurrency_limit`: the prefetch count and concurrency the endpoint gets
    /// at least (MassTransit's `messageCapacity`).
    pub fn message_capacity(&self) -> usize {
        self.message_limit.saturating_mul(self.concurrency_limit)
    }
}

/// A batch of messages handed to a consumer at once (MassTransit's `Batch<T>`): each with its
/// own [`ConsumeContext`], in the order they were received.
///
/// A consumer of batches implements [`Consumer<Batch<M>>`](crate::Consumer) and is added with
/// [`EndpointConfig::batch_consumer`](crate::EndpointConfig::batch_consumer). Its own context
/// (`ConsumeContext<Batch<M>>`) carries the last message's envelope, as MassTransit's
/// `BatchConsumeContext` does; what it publishes goes out as from that message (behind the
/// inbox: in the batch's transaction).
///
/// `Batch<M>` is a [`Message`] only so that it can be a consumer's message type: it serializes
/// as the list of its messages and never deserializes (the endpoint builds it).
///
/// ```
/// use ferrybus_core::{Batch, ConsumeContext, ConsumeError, Consumer};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Bookstore.Contracts")]
/// # struct OrderPlaced { order_id: u32 }
///
/// struct AuditConsumer;
///
/// impl Consumer<Batch<OrderPlaced>> for AuditConsumer {
///     async fn consume(&self, ctx: ConsumeContext<Batch<OrderPlaced>>) -> Result<(), ConsumeError> {
///         let batch = ctx.message();
///         println!("{} orders ({:?})", batch.len(), batch.mode());
///         for message in batch.iter() {
///             println!("{:?}: {}", message.message_id(), message.message().order_id);
///         }
///         Ok(())
///     }
/// }
/// ```
pub struct Batch<M> {
    messages: Vec<ConsumeContext<M>>,
    mode: BatchCompletionMode,
    first_received: DateTime<Utc>,
    last_received: DateTime<Utc>,
}

impl<M: Message> Batch<M> {
    pub(crate) fn new(
        messages: Vec<ConsumeContext<M>>,
        mode: BatchCompletionMode,
        first_received: DateTime<Utc>,
        last_received: DateTime<Utc>,
    ) -> Self {
        Self {
            messages,
            mode,
            first_received,
            last_received,
        }
    }

    /// How many messages the batch holds (`Length`).
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it holds none (never, for a batch a consumer gets).
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The context of message `index` (`this[int]`).
    pub fn get(&self, index: usize) -> Option<&ConsumeContext<M>> {
        self.messages.get(index)
    }

    /// The contexts of its messages, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConsumeContext<M>> {
        self.messages.iter()
    }

    /// Its messages, in order.
    pub fn messages(&self) -> impl Iterator<Item = &M> + '_ {
        self.messages.iter().map(ConsumeContext::message)
    }

    /// Why the batch was delivered (`Mode`).
    pub fn mode(&self) -> BatchCompletionMode {
        self.mode
    }

    /// When its first message was received (`FirstMessageReceived`).
    pub fn first_message_received(&self) -> DateTime<Utc> {
        self.first_received
    }

    /// When its last message was received (`LastMessageReceived`).
    pub fn last_message_received(&self) -> DateTime<Utc> {
        self.last_received
    }
}

impl<M> IntoIterator for Batch<M> {
    type Item = ConsumeContext<M>;
    type IntoIter = std::vec::IntoIter<ConsumeContext<M>>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.into_iter()
    }
}

impl<'a, M> IntoIterator for &'a Batch<M> {
    type Item = &'a ConsumeContext<M>;
    type IntoIter = std::slice::Iter<'a, ConsumeContext<M>>;

    fn into_iter(self) -> Self::IntoIter {
        self.messages.iter()
    }
}

impl<M> std::fmt::Debug for Batch<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.messages.len())
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<M: Message> Serialize for Batch<M> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.messages())
    }
}

impl<'de, M> Deserialize<'de> for Batch<M> {
    fn deserialize<D: Deserializer<'de>>(_deserializer: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "a Batch<T> is gathered by the endpoint, never read from a message: add its consumer \
             with EndpointConfig::batch_consumer, not EndpointConfig::consumer",
        ))
    }
}

impl<M: Message> Message for Batch<M> {
    /// The type of the batched messages: a batch consumer is routed, bound and faulted as a
    /// consumer of `M`.
    fn message_type() -> MessageType {
        M::message_type()
    }
}
