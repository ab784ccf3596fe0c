//! [`ConsumeRequest`]: what flows through a consumer's tower pipeline, and the
//! [`ConsumeOutcome`] that comes back.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::envelope::{parse_dotnet_guid, Envelope, Headers, Payload};
use crate::message::{consumer_id, MessageType};
use crate::outgoing::{MessageFactory, MessageOrigin, SharedSink};

/// How a consumer's pipeline handled a message (its `Ok` answer; failures are a
/// [`ConsumeError`](crate::ConsumeError)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConsumeOutcome {
    /// The consumer ran and succeeded.
    Consumed,
    /// The consumer did not run: this consumer had handled the message already (the inbox).
    Duplicate,
}

/// A received message after its body was read: the envelope and where it came from.
#[derive(Clone, Debug)]
pub struct ReceivedMessage {
    /// The envelope, with the payload still as JSON.
    pub envelope: Envelope,
    /// The receiving endpoint's address.
    pub input_address: String,
    /// Whether the broker redelivered it (after a nack or a lost channel).
    pub redelivered: bool,
    /// The transport headers (AMQP headers), as received.
    pub transport_headers: Headers,
    /// The body's content type.
    pub content_type: String,
    /// The transport's message priority, if it had one.
    pub priority: Option<u8>,
    /// The transport's reply-to property, if it had one.
    pub reply_to: Option<String>,
    /// The transport's delivery sequence number, when it has one ([`Delivery::sequence_number`](crate::Delivery::sequence_number)).
    pub sequence_number: Option<u64>,
}

impl ReceivedMessage {
    /// `MT-Redelivery-Count` from the envelope (or transport) headers; 0 when absent.
    pub fn redelivery_count(&self) -> u32 {
        self.envelope
            .headers
            .get_i64("MT-Redelivery-Count")
            .or_else(|| self.transport_headers.get_i64("MT-Redelivery-Count"))
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    }

    /// The origin of a message sent while consuming this one: the conversation and initiator
    /// ([`MessageOrigin::consumed`]), the transport priority and reply-to.
    pub fn origin(&self) -> MessageOrigin {
        MessageOrigin {
            priority: self.priority,
            reply_to: self.reply_to.clone(),
            ..MessageOrigin::consumed(&self.envelope, &self.input_address)
        }
    }

    /// The inbox key: `MT-OriginalMessageId` when a redelivery replaced the id, else the
    /// message id.
    pub fn original_message_id(&self) -> Option<Uuid> {
        self.envelope
            .headers
            .get_str("MT-OriginalMessageId")
            .and_then(parse_dotnet_guid)
            .or(self.envelope.message_id)
    }
}

/// Which consumer a pipeline runs: its name, message type and endpoint.
#[derive(Clone, Debug)]
pub struct ConsumerInfo {
    name: String,
    message_type: MessageType,
    queue: String,
    /// Derived once here: every delivery's inbox key uses it.
    consumer_id: Uuid,
    reserialize: Option<fn(&Payload) -> Option<serde_json::Value>>,
}

impl ConsumerInfo {
    /// Describes consumer `name` of `message_type` on endpoint `queue`.
    pub fn new(
        name: impl Into<String>,
        message_type: MessageType,
        queue: impl Into<String>,
    ) -> Self {
        let (name, queue) = (name.into(), queue.into());
        Self {
            consumer_id: consumer_id(&name, &message_type.dotnet_name(), &queue),
            name,
            message_type,
            queue,
            reserialize: None,
        }
    }

    /// Describes a consumer of `M`, which can re-serialize payloads as `M` for its faults.
    pub fn of<M: crate::message::Message>(
        name: impl Into<String>,
        queue: impl Into<String>,
    ) -> Self {
        let mut info = Self::new(name, M::message_type(), queue);
        info.reserialize = Some(|payload| {
            let message = payload.bind::<M>().ok()?;
            serde_json::to_value(message).ok()
        });
        info
    }

    /// The payload as the consumer's message type writes it (what MassTransit puts in a
    /// `Fault<T>`: the message as a `T`, unknown fields dropped, defaults filled in, property
    /// names as `T` spells them); `None` when it does not bind to the type (or the consumer was
    /// described without one, [`ConsumerInfo::new`]), so that no `Fault<T>` carries a message
    /// that is not a `T`.
    pub fn fault_payload(&self, payload: &Payload) -> Option<serde_json::Value> {
        self.reserialize.and_then(|f| f(payload))
    }

    /// The consumer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The message type it consumes.
    pub fn message_type(&self) -> &MessageType {
        &self.message_type
    }

    /// The endpoint (queue) name.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The inbox consumer id, derived as MassTransit derives it from
    /// `"<consumer>:<message .NET type>:<queue>"`.
    pub fn consumer_id(&self) -> Uuid {
        self.consumer_id
    }
}

/// The request every consumer pipeline service takes: the received message, the consumer it is
/// for, the sink outgoing messages go to, shared extensions and the retry attempt.
///
/// Cloning gives a fresh request for a new attempt: the same message, empty extensions.
pub struct ConsumeRequest {
    received: Arc<ReceivedMessage>,
    consumer: Arc<ConsumerInfo>,
    sink: SharedSink,
    factory: Arc<MessageFactory>,
    extensions: http::Extensions,
    cancellation: CancellationToken,
    attempt: u32,
}

impl ConsumeRequest {
    /// A first-attempt request.
    pub fn new(
        received: Arc<ReceivedMessage>,
        consumer: Arc<ConsumerInfo>,
        sink: SharedSink,
        factory: Arc<MessageFactory>,
        cancellation: CancellationToken,
    ) -> Self {
        Self {
            received,
            consumer,
            sink,
            factory,
            extensions: http::Extensions::new(),
            cancellation,
            attempt: 0,
        }
    }

    /// The received message.
    pub fn received(&self) -> &ReceivedMessage {
        &self.received
    }

    /// The consumer this request is for.
    pub fn consumer(&self) -> &ConsumerInfo {
        &self.consumer
    }

    /// Where outgoing messages go.
    pub fn sink(&self) -> &SharedSink {
        &self.sink
    }

    /// Replaces the sink (the consumer outbox does, to capture what the consumer sends).
    pub fn set_sink(&mut self, sink: SharedSink) {
        self.sink = sink;
    }

    /// The message factory (host address) used for publish and send.
    pub fn factory(&self) -> &MessageFactory {
        &self.factory
    }

    /// Values shared between middleware and the consumer.
    pub fn extensions(&self) -> &http::Extensions {
        &self.extensions
    }

    /// Mutable shared values.
    pub fn extensions_mut(&mut self) -> &mut http::Extensions {
        &mut self.extensions
    }

    /// Cancelled when the endpoint stops.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancellation
    }

    /// The retry attempt, 0 for the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A copy for the next retry attempt: same message, empty extensions, attempt + 1.
    pub fn next_attempt(&self) -> Self {
        let mut next = self.clone();
        next.attempt += 1;
        next
    }
}

impl Clone for ConsumeRequest {
    fn clone(&self) -> Self {
        Self {
            received: self.received.clone(),
            consumer: self.consumer.clone(),
            sink: self.sink.clone(),
            factory: self.factory.clone(),
            extensions: http::Extensions::new(),
            cancellation: self.cancellation.clone(),
            attempt: self.attempt,
        }
    }
}

impl std::fmt::Debug for ConsumeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeRequest")
            .field("message_id", &self.received.envelope.message_id)
            .field("consumer", &self.consumer.name)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}
