//! [`ConsumerService`]: the innermost service, which deserializes the payload and runs a consumer.

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::util::BoxCloneSyncService;
use tower::Service;

use crate::consumer::{ConsumeContext, Consumer};
use crate::error::{ConsumeError, ConsumeErrorKind};
use crate::message::Message;
use crate::pipeline::ConsumeRequest;

/// A type-erased consumer pipeline: what every layer wraps and returns.
pub type BoxConsumeService = BoxCloneSyncService<ConsumeRequest, (), ConsumeError>;

/// Runs consumer `C` for message `M`: deserializes the payload into `M` (a failure is a permanent
/// [`ConsumeErrorKind::Deserialize`] error) and calls [`Consumer::consume`].
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
    type Response = ();
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<(), ConsumeError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ConsumeRequest) -> Self::Future {
        let consumer = self.consumer.clone();
        Box::pin(async move {
            let message = M::deserialize(&request.received().envelope.message).map_err(|e| {
                ConsumeError::new(ConsumeErrorKind::Deserialize, e).into_permanent()
            })?;
            consumer
                .consume(ConsumeContext::new(message, request))
                .await
        })
    }
}
