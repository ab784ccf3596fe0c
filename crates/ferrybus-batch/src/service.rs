//! [`BatchConsumerService`]: the innermost batch service, which binds each message and runs a
//! consumer of [`Batch<M>`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::Service;

use ferrybus_core::error::ConsumeErrorKind;
use ferrybus_core::integration::{catch_panic, ConsumeOutcome};
use ferrybus_core::{ConsumeContext, ConsumeError, Consumer, Message};

use crate::message::Batch;
use crate::request::BatchRequest;

/// Runs consumer `C` of [`Batch<M>`]: binds every item's payload to `M`, builds the batch and
/// its context, calls [`Consumer::consume`] (a panic becomes an error), and answers `Consumed`
/// for every item.
pub struct BatchConsumerService<C, M> {
    consumer: Arc<C>,
    _message: PhantomData<fn(M)>,
}

impl<C, M> BatchConsumerService<C, M> {
    /// Wraps `consumer`.
    pub fn new(consumer: Arc<C>) -> Self {
        Self {
            consumer,
            _message: PhantomData,
        }
    }
}

impl<C, M> Clone for BatchConsumerService<C, M> {
    fn clone(&self) -> Self {
        Self::new(self.consumer.clone())
    }
}

impl<C, M> Service<BatchRequest> for BatchConsumerService<C, M>
where
    C: Consumer<Batch<M>>,
    M: Message,
{
    type Response = Vec<ConsumeOutcome>;
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<Vec<ConsumeOutcome>, ConsumeError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: BatchRequest) -> Self::Future {
        let consumer = self.consumer.clone();
        Box::pin(catch_panic(async move {
            let (items, context, mode, first, last) = request.into_parts();
            let count = items.len();
            let mut messages = Vec::with_capacity(count);
            for item in items {
                let message = item
                    .received()
                    .envelope
                    .message
                    .bind::<M>()
                    .map_err(|e| ConsumeError::new(ConsumeErrorKind::Deserialize, e))?;
                messages.push(ConsumeContext::new(message, item));
            }
            let batch = Batch::new(messages, mode, first, last);
            consumer
                .consume(ConsumeContext::new(batch, context))
                .await?;
            Ok(vec![ConsumeOutcome::Consumed; count])
        }))
    }
}
