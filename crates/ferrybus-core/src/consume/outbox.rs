//! [`InMemoryOutboxLayer`]: what a consumer publishes and sends is held until it returns, for
//! consumers without a database (MassTransit's `UseInMemoryOutbox`).

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures::future::BoxFuture;
use tower::{Layer, Service};

use super::request::{ConsumeOutcome, ConsumeRequest};
use crate::error::{ConsumeError, PublishError, PublishErrorKind};
use crate::outgoing::{MessageSink, OutgoingMessage};

/// Holds what a consumer publishes, sends and responds until it returns: delivered, in order,
/// once it succeeds; dropped when it fails — so a failed attempt's messages never leave, and a
/// retry (outside this layer, so every attempt gets an empty outbox) does not send them twice.
/// MassTransit's `UseInMemoryOutbox` (`src/MassTransit/Middleware/InMemoryOutboxFilter.cs`):
/// messages leave after the consumer, one at a time, and a failure to deliver them fails the
/// message (which is then retried: what was already delivered may be sent again). Nothing is
/// kept across a crash; for that, use the inbox and outbox on a database.
///
/// Add it with [`EndpointConfig::consumer_layer`](crate::EndpointConfig::consumer_layer). A
/// request made from inside the consumer would wait for a response its held request never gets:
/// make requests outside it, as with MassTransit's.
///
/// ```
/// use ferrybus_core::consume::InMemoryOutboxLayer;
/// use ferrybus_core::memory::TestHarness;
/// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError};
/// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Shop")]
/// # struct OrderPlaced { fail: bool }
/// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Shop")]
/// # struct InvoiceCreated {}
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let invoicing = consumer_fn("Invoicing", |ctx: ConsumeContext<OrderPlaced>| async move {
///     ctx.publish(&InvoiceCreated {}).await?; // held until the consumer returns
///     if ctx.message().fail {
///         return Err(ConsumeError::handler("declined")); // InvoiceCreated is dropped
///     }
///     Ok(())
/// });
/// let harness = TestHarness::builder()
///     .receive_endpoint("billing", |e| e.consumer_layer(InMemoryOutboxLayer).consumer(invoicing))
///     .start()
///     .await
///     .unwrap();
/// # harness.stop().await;
/// # });
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct InMemoryOutboxLayer;

impl<S> Layer<S> for InMemoryOutboxLayer {
    type Service = InMemoryOutboxService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        InMemoryOutboxService { inner }
    }
}

/// The service [`InMemoryOutboxLayer`] wraps a consumer in.
#[derive(Clone, Debug)]
pub struct InMemoryOutboxService<S> {
    inner: S,
}

impl<S> Service<ConsumeRequest> for InMemoryOutboxService<S>
where
    S: Service<ConsumeRequest, Response = ConsumeOutcome, Error = ConsumeError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = ConsumeOutcome;
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<ConsumeOutcome, ConsumeError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ConsumeRequest) -> Self::Future {
        let target = request.sink().clone();
        let held = Arc::new(Held(Mutex::new(Some(Vec::new()))));
        request.set_sink(held.clone());
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        Box::pin(async move {
            let outcome = inner.call(request).await;
            let messages = held.close();
            let outcome = outcome?;
            for message in messages {
                target.deliver(message).await?;
            }
            Ok(outcome)
        })
    }
}

/// The held messages; closed once the consumer returned, so a message sent from a task that
/// outlived it fails instead of being lost.
struct Held(Mutex<Option<Vec<OutgoingMessage>>>);

impl Held {
    fn close(&self) -> Vec<OutgoingMessage> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.take().unwrap_or_default()
    }
}

#[async_trait]
impl MessageSink for Held {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match held.as_mut() {
            Some(messages) => {
                messages.push(message);
                Ok(())
            }
            None => Err(PublishError::new(
                PublishErrorKind::Closed,
                "the in-memory outbox is closed: the consumer already returned",
            )),
        }
    }
}
