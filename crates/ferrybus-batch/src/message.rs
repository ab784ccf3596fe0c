//! [`Batch<M>`]: the message a batch consumer consumes.

use chrono::{DateTime, Utc};
use ferrybus_core::{ConsumeContext, Message, MessageType};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::options::BatchCompletionMode;

/// A batch of messages handed to a consumer at once (MassTransit's `Batch<T>`): each with its
/// own [`ConsumeContext`], in the order they were received.
///
/// A consumer of batches implements [`Consumer<Batch<M>>`](ferrybus_core::Consumer) and is added with
/// [`BatchEndpointExt::batch_consumer`](crate::BatchEndpointExt::batch_consumer). Its own context
/// (`ConsumeContext<Batch<M>>`) carries the last message's envelope, as MassTransit's
/// `BatchConsumeContext` does; what it publishes goes out as from that message (behind the
/// inbox: in the batch's transaction).
///
/// `Batch<M>` is a [`Message`] only so that it can be a consumer's message type: it serializes
/// as the list of its messages and never deserializes (the endpoint builds it).
///
/// ```
/// use ferrybus_batch::Batch;
/// use ferrybus_core::{ConsumeContext, ConsumeError, Consumer};
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
