//! Publishing: the [`Publish`] trait every publisher implements (the bus, the test harness, a
//! consume context, the bus outbox in a caller's transaction), the [`MessageSink`] transports
//! implement, and [`PublishError`].
//!
//! Code that publishes is written once, against `impl Publish`:
//!
//! ```
//! use ferrybus_core::{Message, Publish, PublishError};
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize, ferrybus_core::Message)]
//! # #[message(namespace = "Shop")]
//! # struct OrderPlaced { id: u32 }
//!
//! /// Works with a `RabbitMqBus`, a `TestHarness`, a `ConsumeContext` or a bus outbox.
//! async fn place(publisher: &impl Publish, id: u32) -> Result<uuid::Uuid, PublishError> {
//!     publisher.publish(&OrderPlaced { id }).await
//! }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::factory::MessageFactory;
use super::message::OutgoingMessage;
use super::options::{MessageOrigin, SendOptions};
use super::schedule::{ScheduledMessage, SCHEDULING_TOKEN_ID};
use crate::error::PublishError;
use crate::message::Message;

/// Somewhere built messages go: a broker connection (with publisher confirms), an outbox table,
/// the consumer outbox's buffer, a test recorder. Transports and storage implement it; code that
/// publishes uses [`Publish`].
#[async_trait]
pub trait MessageSink: Send + Sync + 'static {
    /// Delivers one message. Returns once the destination has accepted it.
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError>;
}

/// A shared [`MessageSink`].
pub type SharedSink = Arc<dyn MessageSink>;

/// Publishes and sends messages in MassTransit's shape. Implemented by the bus of every transport,
/// the test harness, [`ConsumeContext`](crate::ConsumeContext) (following MassTransit's rules
/// for messages sent from a consumer) and the bus outbox in a caller's transaction.
///
/// Implementors give the [`MessageFactory`] and [`MessageOrigin`] messages are built with, and
/// deliver a built message; the provided methods do the rest.
///
/// ```
/// use ferrybus_core::memory::TestHarness;
/// use ferrybus_core::Publish;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Shop")]
/// # struct OrderPlaced { id: u32 }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let harness = TestHarness::builder().start().await.unwrap();
/// let id = harness.publish(&OrderPlaced { id: 7 }).await.unwrap();
/// let sent = harness.sent::<OrderPlaced>().await.unwrap();
/// assert_eq!(sent.message_id, Some(id));
/// # harness.stop().await;
/// # });
/// ```
pub trait Publish: Send + Sync {
    /// Builds messages for the host this publisher sends to.
    fn message_factory(&self) -> &MessageFactory;

    /// What messages from here inherit (source address, conversation, initiator, headers).
    fn message_origin(&self) -> &MessageOrigin;

    /// Delivers a built message; returns once the destination accepted it.
    fn deliver(
        &self,
        message: OutgoingMessage,
    ) -> impl Future<Output = Result<(), PublishError>> + Send;

    /// Publishes `message` to every subscriber of its type; returns its message id.
    fn publish<M: Message>(
        &self,
        message: &M,
    ) -> impl Future<Output = Result<Uuid, PublishError>> + Send {
        self.publish_with(message, SendOptions::new())
    }

    /// Publishes with options (headers, TTL, ids).
    fn publish_with<M: Message>(
        &self,
        message: &M,
        options: SendOptions,
    ) -> impl Future<Output = Result<Uuid, PublishError>> + Send {
        let built = self
            .message_factory()
            .publish(message, self.message_origin(), options);
        deliver_built(self, built)
    }

    /// Sends `message` to `address` (`queue:name`, `exchange:name` or a full address); returns
    /// its message id.
    fn send<M: Message>(
        &self,
        address: &str,
        message: &M,
    ) -> impl Future<Output = Result<Uuid, PublishError>> + Send {
        self.send_with(address, message, SendOptions::new())
    }

    /// Sends with options.
    fn send_with<M: Message>(
        &self,
        address: &str,
        message: &M,
        options: SendOptions,
    ) -> impl Future<Output = Result<Uuid, PublishError>> + Send {
        let built = self
            .message_factory()
            .send(address, message, self.message_origin(), options);
        deliver_built(self, built)
    }

    /// Sends `message` to `address` after `delay` (MassTransit's `ScheduleSend` with the delayed
    /// scheduler): a send with a `Delay` transport property and a new `MT-Scheduling-TokenId`
    /// header, held back by the broker (see [`ScheduledMessage`]). From a consumer behind the
    /// inbox it goes through the consumer outbox like any send.
    fn schedule_send<M: Message>(
        &self,
        address: &str,
        delay: Duration,
        message: &M,
    ) -> impl Future<Output = Result<ScheduledMessage, PublishError>> + Send {
        self.schedule_send_with(address, delay, message, SendOptions::new())
    }

    /// [`schedule_send`](Self::schedule_send) with options.
    fn schedule_send_with<M: Message>(
        &self,
        address: &str,
        delay: Duration,
        message: &M,
        options: SendOptions,
    ) -> impl Future<Output = Result<ScheduledMessage, PublishError>> + Send {
        let token = Uuid::now_v7();
        let options = options.header(SCHEDULING_TOKEN_ID, token.to_string());
        let built = self
            .message_factory()
            .send(address, message, self.message_origin(), options);
        deliver_scheduled(self, built, token, delay)
    }

    /// Publishes `message` after `delay` (MassTransit's `SchedulePublish`: a scheduled send to
    /// the exchange of its type).
    fn schedule_publish<M: Message>(
        &self,
        delay: Duration,
        message: &M,
    ) -> impl Future<Output = Result<ScheduledMessage, PublishError>> + Send {
        let token = Uuid::now_v7();
        let options = SendOptions::new().header(SCHEDULING_TOKEN_ID, token.to_string());
        let built = self
            .message_factory()
            .publish(message, self.message_origin(), options);
        deliver_scheduled(self, built, token, delay)
    }

    /// Cancels the message scheduled with `token_id` (MassTransit's `CancelScheduledSend`): when
    /// it arrives at an endpoint of this bus, it is acknowledged without running a consumer.
    /// The message still waits in the broker until then (see [`CancelledSchedules`](super::CancelledSchedules)).
    fn cancel_scheduled_send(&self, token_id: Uuid) {
        self.message_factory()
            .cancelled_schedules()
            .cancel(token_id);
    }
}

/// Delays a message one of [`Publish`]'s schedule methods built and delivers it.
async fn deliver_scheduled<P: Publish + ?Sized>(
    publisher: &P,
    built: Result<OutgoingMessage, PublishError>,
    token: Uuid,
    delay: Duration,
) -> Result<ScheduledMessage, PublishError> {
    let mut message = built?;
    let scheduled = ScheduledMessage::delay(&mut message, token, delay);
    publisher.deliver(message).await?;
    Ok(scheduled)
}

/// Delivers a message one of [`Publish`]'s methods built; returns its id.
async fn deliver_built<P: Publish + ?Sized>(
    publisher: &P,
    built: Result<OutgoingMessage, PublishError>,
) -> Result<Uuid, PublishError> {
    let message = built?;
    let id = message.message_id;
    publisher.deliver(message).await?;
    Ok(id)
}
