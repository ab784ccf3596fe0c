//! The [`Consumer`] trait, [`consumer_fn`] and the [`ConsumeContext`] a consumer receives.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::OnceLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::request::{ConsumeRequest, ConsumerInfo};
use crate::envelope::{Envelope, Headers};
use crate::error::ConsumeError;
use crate::error::PublishError;
use crate::message::{dotted_type_name, Message};
use crate::outgoing::Publish;
use crate::outgoing::{
    MessageFactory, MessageOrigin, OutgoingMessage, ScheduledMessage, SendOptions,
    SCHEDULING_TOKEN_ID,
};

/// Handles messages of type `M`, like MassTransit's `IConsumer<T>`.
///
/// ```
/// use ferrybus_core::{ConsumeContext, ConsumeError, Consumer, Message};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Serialize, Deserialize, Message)]
/// # #[message(namespace = "Bookstore.Contracts")]
/// # struct OrderPlaced { total: String }
///
/// struct InvoiceConsumer;
///
/// impl Consumer<OrderPlaced> for InvoiceConsumer {
///     async fn consume(&self, ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
///         println!("order {:?} for {}", ctx.message_id(), ctx.message().total);
///         Ok(())
///     }
/// }
/// ```
pub trait Consumer<M: Message>: Send + Sync + 'static {
    /// Consumes one message. An `Err` faults the message (after the retry policy).
    fn consume(
        &self,
        ctx: ConsumeContext<M>,
    ) -> impl Future<Output = Result<(), ConsumeError>> + Send;

    /// The consumer's name, used in `MT-Fault-ConsumerType`, the consume metrics and the inbox
    /// consumer id. By default the Rust type's full path, generics included, with `.` between
    /// its segments (`billing.InvoiceConsumer`, `relay.Forward<shop.OrderPlaced>`), as .NET names
    /// a consumer by namespace and type: two consumers of one message on one endpoint need
    /// different names ([`EndpointConfig::validate`](crate::EndpointConfig::validate) refuses
    /// two that would share an inbox consumer id). The path is the compiler's
    /// (`std::any::type_name`), which a compiler upgrade may spell differently: return a fixed
    /// name for a consumer whose inbox rows must outlive that, and the .NET consumer's full type
    /// name to share an inbox with a .NET instance of the same consumer.
    fn name(&self) -> Cow<'static, str> {
        Cow::Owned(dotted_type_name::<Self>())
    }
}

/// A consumer made from an async function or closure.
///
/// ```
/// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Ns")]
/// # struct Ping {}
/// let consumer = consumer_fn("PingConsumer", |ctx: ConsumeContext<Ping>| async move {
///     tracing::info!(message_id = ?ctx.message_id(), "ping");
///     Ok::<_, ConsumeError>(())
/// });
/// ```
pub fn consumer_fn<M, F, Fut>(name: &'static str, f: F) -> ConsumerFn<M, F>
where
    M: Message,
    F: Fn(ConsumeContext<M>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ConsumeError>> + Send + 'static,
{
    ConsumerFn {
        name,
        f,
        _message: PhantomData,
    }
}

/// The consumer [`consumer_fn`] returns.
pub struct ConsumerFn<M, F> {
    name: &'static str,
    f: F,
    _message: PhantomData<fn(M)>,
}

impl<M, F, Fut> Consumer<M> for ConsumerFn<M, F>
where
    M: Message,
    F: Fn(ConsumeContext<M>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ConsumeError>> + Send + 'static,
{
    fn consume(
        &self,
        ctx: ConsumeContext<M>,
    ) -> impl Future<Output = Result<(), ConsumeError>> + Send {
        (self.f)(ctx)
    }

    fn name(&self) -> Cow<'static, str> {
        Cow::Borrowed(self.name)
    }
}

/// What a consumer gets: the message, its envelope metadata, cancellation, and publish / send /
/// respond that follow MassTransit's rules (conversation kept, initiator set, non-`MT-` headers
/// copied, `requestId` on responses).
///
/// It implements [`Publish`], so code written against `impl Publish` runs inside consumers too;
/// [`publish`](Self::publish), [`send`](Self::send) and their `_with` forms are also inherent
/// methods, callable without importing the trait. Behind the inbox, what a consumer publishes
/// goes to the consumer outbox and leaves after the commit.
///
/// Middleware shares state with consumers through [`ConsumeContext::extensions`] (the storage
/// crate puts the open database transaction there).
pub struct ConsumeContext<M> {
    message: M,
    request: ConsumeRequest,
    origin: OnceLock<MessageOrigin>,
}

impl<M: Message> ConsumeContext<M> {
    /// A context for `message`, received as `request` describes.
    pub fn new(message: M, request: ConsumeRequest) -> Self {
        Self {
            message,
            request,
            origin: OnceLock::new(),
        }
    }

    /// The message.
    pub fn message(&self) -> &M {
        &self.message
    }

    /// Takes the message out of the context.
    pub fn into_message(self) -> M {
        self.message
    }

    /// The received envelope (metadata and raw payload).
    pub fn envelope(&self) -> &Envelope {
        &self.request.received().envelope
    }

    /// The message id.
    pub fn message_id(&self) -> Option<Uuid> {
        self.envelope().message_id
    }

    /// The correlation id.
    pub fn correlation_id(&self) -> Option<Uuid> {
        self.envelope().correlation_id
    }

    /// The conversation id.
    pub fn conversation_id(&self) -> Option<Uuid> {
        self.envelope().conversation_id
    }

    /// The request id (requests only).
    pub fn request_id(&self) -> Option<Uuid> {
        self.envelope().request_id
    }

    /// The initiator id.
    pub fn initiator_id(&self) -> Option<Uuid> {
        self.envelope().initiator_id
    }

    /// When the message was sent.
    pub fn sent_time(&self) -> Option<DateTime<Utc>> {
        self.envelope().sent_time
    }

    /// The envelope headers (what a .NET consumer sees as `ConsumeContext.Headers`).
    pub fn headers(&self) -> &Headers {
        &self.envelope().headers
    }

    /// The address of the endpoint consuming the message.
    pub fn input_address(&self) -> &str {
        &self.request.received().input_address
    }

    /// Which consumer is running.
    pub fn consumer(&self) -> &ConsumerInfo {
        self.request.consumer()
    }

    /// How many delayed redeliveries this message went through (`MT-Redelivery-Count`).
    pub fn redelivery_count(&self) -> u32 {
        self.request.received().redelivery_count()
    }

    /// Which attempt this is within the retry policy: 0 for the first.
    pub fn retry_attempt(&self) -> u32 {
        self.request.attempt()
    }

    /// Cancelled when the endpoint stops; long work should watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        self.request.cancellation()
    }

    /// Values middleware shares with the consumer.
    pub fn extensions(&self) -> &http::Extensions {
        self.request.extensions()
    }

    /// Mutable access to the shared values.
    pub fn extensions_mut(&mut self) -> &mut http::Extensions {
        self.request.extensions_mut()
    }

    /// The underlying pipeline request.
    pub fn request(&self) -> &ConsumeRequest {
        &self.request
    }

    /// Publishes `message` to every subscriber of its type; returns its message id.
    pub async fn publish<T: Message>(&self, message: &T) -> Result<Uuid, PublishError> {
        Publish::publish(self, message).await
    }

    /// Publishes with options (headers, TTL, correlation id …).
    pub async fn publish_with<T: Message>(
        &self,
        message: &T,
        options: SendOptions,
    ) -> Result<Uuid, PublishError> {
        Publish::publish_with(self, message, options).await
    }

    /// Sends `message` to `address` (`queue:name`, `exchange:name` or a full address).
    pub async fn send<T: Message>(&self, address: &str, message: &T) -> Result<Uuid, PublishError> {
        Publish::send(self, address, message).await
    }

    /// Sends with options.
    pub async fn send_with<T: Message>(
        &self,
        address: &str,
        message: &T,
        options: SendOptions,
    ) -> Result<Uuid, PublishError> {
        Publish::send_with(self, address, message, options).await
    }

    /// Responds to a request: sent to its `responseAddress` (published when there is none), with
    /// its `requestId`, and a TTL of the request's remaining lifetime.
    pub async fn respond<T: Message>(&self, message: &T) -> Result<Uuid, PublishError> {
        let envelope = self.envelope();
        let mut options = SendOptions::new();
        if let Some(id) = envelope.request_id {
            options = options.request_id(id);
        }
        if let Some(expires) = envelope.expiration_time {
            let remaining = (expires - Utc::now()).num_milliseconds().max(1000);
            options = options.time_to_live(Duration::from_millis(remaining as u64));
        }
        match envelope.response_address.clone() {
            Some(address) => self.send_with(&address, message, options).await,
            None => self.publish_with(message, options).await,
        }
    }
}

impl<M: Message> ConsumeContext<M> {
    /// Sends `message` to `address` after `delay` ([`Publish::schedule_send`]; behind the inbox,
    /// through the consumer outbox).
    pub async fn schedule_send<T: Message>(
        &self,
        address: &str,
        delay: Duration,
        message: &T,
    ) -> Result<ScheduledMessage, PublishError> {
        Publish::schedule_send(self, address, delay, message).await
    }

    /// Publishes `message` after `delay` ([`Publish::schedule_publish`]).
    pub async fn schedule_publish<T: Message>(
        &self,
        delay: Duration,
        message: &T,
    ) -> Result<ScheduledMessage, PublishError> {
        Publish::schedule_publish(self, delay, message).await
    }

    /// Cancels a scheduled message ([`Publish::cancel_scheduled_send`]).
    pub fn cancel_scheduled_send(&self, token_id: Uuid) {
        Publish::cancel_scheduled_send(self, token_id);
    }

    /// Delivers this message to this endpoint again after `delay`, as MassTransit's
    /// `context.Redeliver(delay)` (`src/MassTransit/RedeliverExtensions.cs`,
    /// `ScheduleMessageRedeliveryContext.cs`, `CopyContextPipe.cs`): a scheduled send of the
    /// received envelope (ids, addresses and headers copied) to the input address, with a new
    /// message id, `MT-OriginalMessageId` (the first id) and `MT-Redelivery-Count` one more than
    /// [`redelivery_count`](Self::redelivery_count). Return `Ok` afterwards: this delivery is
    /// consumed. The copy goes where this context's sends go (behind the inbox, the consumer
    /// outbox, where the inbox, keyed by the original id, takes it for a duplicate once this
    /// delivery is consumed).
    pub async fn redeliver(&self, delay: Duration) -> Result<ScheduledMessage, PublishError> {
        let received = self.request.received();
        let mut envelope = received.envelope.clone();
        let token = Uuid::now_v7();
        let original = received.original_message_id();
        let headers = &mut envelope.headers;
        headers.remove("MT-Redelivery-Count");
        headers.remove(SCHEDULING_TOKEN_ID);
        if let Some(original) = original {
            headers.insert("MT-OriginalMessageId", original.to_string());
        }
        headers.insert("MT-Redelivery-Count", received.redelivery_count() + 1);
        headers.insert(SCHEDULING_TOKEN_ID, token.to_string());
        envelope.message_id = Some(Uuid::now_v7());
        envelope.destination_address = Some(received.input_address.clone());
        envelope.sent_time = Some(Utc::now());
        let mut message = MessageFactory::from_envelope(envelope, Vec::new());
        let scheduled = ScheduledMessage::delay(&mut message, token, delay);
        self.deliver(message).await?;
        Ok(scheduled)
    }
}

impl<M: Message> Publish for ConsumeContext<M> {
    fn message_factory(&self) -> &MessageFactory {
        self.request.factory()
    }

    fn message_origin(&self) -> &MessageOrigin {
        self.origin.get_or_init(|| self.request.received().origin())
    }

    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        self.request.sink().deliver(message).await
    }
}
