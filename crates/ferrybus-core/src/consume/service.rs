//! [`ConsumerService`]: the innermost service, which deserializes the payload and runs a consumer.

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::util::{BoxCloneSyncService, BoxCloneSyncServiceLayer};
use tower::Service;

use super::consumer::{ConsumeContext, Consumer};
use super::panic::catch_panic;
use super::request::{ConsumeOutcome, ConsumeRequest};
use crate::error::{ConsumeError, ConsumeErrorKind};
use crate::message::Message;

/// A type-erased consumer pipeline: what every consumer-level layer wraps and returns.
pub type BoxConsumeService = BoxCloneSyncService<ConsumeRequest, ConsumeOutcome, ConsumeError>;

/// A type-erased consumer-level layer (the inbox, a user's
/// [`consumer_layer`](crate::EndpointConfig::consumer_layer)).
pub type BoxConsumeLayer =
    BoxCloneSyncServiceLayer<BoxConsumeService, ConsumeRequest, ConsumeOutcome, ConsumeError>;

/// Runs consumer `C` for message `M`: binds the payload to `M` (a failure is a
/// [`ConsumeErrorKind::Deserialize`] error, which the endpoint turns into a `ReceiveFault`, as
/// MassTransit does when `TryGetMessage<T>` throws), calls [`Consumer::consume`], and turns a
/// panic into a [`ConsumeError::panic`] so the retry policy and the error queue treat it like any
/// failure.
pub struct ConsumerService<C, M> {
    consumer: Arc<C>,
    _message: PhantomData<fn(M)>,
}

impl<C, M> ConsumerService<C, M> {
    /// Wraps `consumer`.
    pub fn new(consumer: Arc<C>) -> Self {
        Self {
            consumer,
            _message: PhantomData,
        }
    }
}

impl<C, M> Clone for ConsumerService<C, M> {
    fn clone(&self) -> Self {
        Self::new(self.consumer.clone())
    }
}

impl<C, M> Service<ConsumeRequest> for ConsumerService<C, M>
where
    C: Consumer<M>,
    M: Message,
{
    type Response = ConsumeOutcome;
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<ConsumeOutcome, ConsumeError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ConsumeRequest) -> Self::Future {
        let consumer = self.consumer.clone();
        Box::pin(catch_panic(async move {
            // One parse: straight from the envelope's `message` text, property names matched
            // case-insensitively as MassTransit's System.Text.Json options do.
            let message = request
                .received()
                .envelope
                .message
                .bind::<M>()
                .map_err(|e| ConsumeError::new(ConsumeErrorKind::Deserialize, e))?;
            consumer
                .consume(ConsumeContext::new(message, request))
                .await?;
            Ok(ConsumeOutcome::Consumed)
        }))
    }
}
