//! [`BatchRequest`]: what flows through a batch consumer's pipeline (retry ▶ inbox ▶ consumer).

use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tower::retry::Policy;
use tower::util::{BoxCloneSyncService, BoxCloneSyncServiceLayer};

use ferrybus_core::integration::{
    ConsumeOutcome, ConsumeRequest, ConsumerInfo, Guarded, SharedSink,
};
use ferrybus_core::{ConsumeError, RetryPolicy};

use crate::options::BatchCompletionMode;

/// A type-erased batch pipeline. Its answer has one [`ConsumeOutcome`] per item of the request,
/// in order (`Duplicate` for the items the inbox dropped).
pub type BoxBatchService = BoxCloneSyncService<BatchRequest, Vec<ConsumeOutcome>, ConsumeError>;

/// A type-erased batch-level layer (the storage's [`BatchInbox`]).
pub type BoxBatchLayer =
    BoxCloneSyncServiceLayer<BoxBatchService, BatchRequest, Vec<ConsumeOutcome>, ConsumeError>;

/// The inbox and consumer outbox of a storage for batch consumers: one transaction per batch,
/// each message recorded once, those seen before dropped from the batch. A storage provides it as
/// an add-on part ([`Storage::add_on`](ferrybus_core::integration::Storage::add_on);
/// `ferrybus-sea-orm` with its `batch` feature); a batch consumer on an endpoint with `.inbox()`
/// finds it there.
#[derive(Clone)]
pub struct BatchInbox(pub BoxBatchLayer);

impl std::fmt::Debug for BatchInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchInbox").finish_non_exhaustive()
    }
}

/// The messages of one batch, each as the [`ConsumeRequest`] it would be on its own, plus the
/// request of the batch's own context (a copy of the last message's, as MassTransit's
/// `BatchConsumeContext` wraps the last message's context).
///
/// Layers see every item: the inbox claims each message, drops duplicates
/// ([`BatchRequest::retain`]) and puts its transaction and sink on every request
/// ([`BatchRequest::requests_mut`]).
pub struct BatchRequest {
    items: Vec<ConsumeRequest>,
    context: ConsumeRequest,
    mode: BatchCompletionMode,
    first_received: DateTime<Utc>,
    last_received: DateTime<Utc>,
    attempt: u32,
}

impl BatchRequest {
    /// A first-attempt batch of `items` (at least one).
    pub(crate) fn new(
        items: Vec<ConsumeRequest>,
        mode: BatchCompletionMode,
        first_received: DateTime<Utc>,
        last_received: DateTime<Utc>,
    ) -> Option<Self> {
        let context = items.last()?.clone();
        Some(Self {
            items,
            context,
            mode,
            first_received,
            last_received,
            attempt: 0,
        })
    }

    /// The messages, in order.
    pub fn items(&self) -> &[ConsumeRequest] {
        &self.items
    }

    /// The request of the batch's own context (the last message's envelope).
    pub fn context(&self) -> &ConsumeRequest {
        &self.context
    }

    /// The batch consumer.
    pub fn consumer(&self) -> &ConsumerInfo {
        self.context.consumer()
    }

    /// Keeps the items for which `keep` (given each item's index) is true.
    pub fn retain(&mut self, mut keep: impl FnMut(usize) -> bool) {
        let mut index = 0;
        self.items.retain(|_| {
            let kept = keep(index);
            index += 1;
            kept
        });
    }

    /// Every request: each item's and the batch context's (to set a sink or an extension on all).
    pub fn requests_mut(&mut self) -> impl Iterator<Item = &mut ConsumeRequest> {
        self.items
            .iter_mut()
            .chain(std::iter::once(&mut self.context))
    }

    /// Sets `sink` on every request (the consumer outbox captures what the batch publishes).
    pub fn set_sink(&mut self, sink: SharedSink) {
        for request in self.requests_mut() {
            request.set_sink(sink.clone());
        }
    }

    /// Why the batch was delivered.
    pub fn mode(&self) -> BatchCompletionMode {
        self.mode
    }

    /// The retry attempt, 0 for the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Cancelled when the endpoint stops.
    pub fn cancellation(&self) -> &CancellationToken {
        self.context.cancellation()
    }

    pub(crate) fn into_parts(
        self,
    ) -> (
        Vec<ConsumeRequest>,
        ConsumeRequest,
        BatchCompletionMode,
        DateTime<Utc>,
        DateTime<Utc>,
    ) {
        (
            self.items,
            self.context,
            self.mode,
            self.first_received,
            self.last_received,
        )
    }

    /// A copy for the next retry attempt: the same messages, fresh extensions and sinks.
    pub fn next_attempt(&self) -> Self {
        let mut next = self.clone();
        next.attempt += 1;
        next.items = next
            .items
            .iter()
            .map(ConsumeRequest::next_attempt)
            .collect();
        next.context = next.context.next_attempt();
        next
    }
}

impl Clone for BatchRequest {
    fn clone(&self) -> Self {
        Self {
            items: self.items.clone(),
            context: self.context.clone(),
            mode: self.mode,
            first_received: self.first_received,
            last_received: self.last_received,
            attempt: self.attempt,
        }
    }
}

impl std::fmt::Debug for BatchRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchRequest")
            .field("len", &self.items.len())
            .field("consumer", &self.consumer().name())
            .field("mode", &self.mode)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// A batch stands for several messages: the transient guard strikes none of them.
impl Guarded for BatchRequest {
    fn message_id(&self) -> Option<uuid::Uuid> {
        None
    }
}

type RetryFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Retries a whole batch, as MassTransit's retry filter on a `Batch<T>` consumer's pipe does:
/// the same messages (less those the inbox finds handled) go to the consumer again.
impl Policy<BatchRequest, Vec<ConsumeOutcome>, ConsumeError> for RetryPolicy {
    type Future = RetryFuture;

    fn retry(
        &mut self,
        request: &mut BatchRequest,
        result: &mut Result<Vec<ConsumeOutcome>, ConsumeError>,
    ) -> Option<Self::Future> {
        let Err(error) = result else { return None };
        let attempt = request.attempt();
        let delay = self
            .delay(attempt)
            .filter(|_| self.handles(error) && !request.cancellation().is_cancelled());
        let Some(delay) = delay else {
            error.set_retry_count(attempt);
            return None;
        };
        tracing::debug!(
            target: "ferrybus::retry",
            attempt = attempt + 1,
            messages = request.items().len(),
            ?delay,
            error = %error,
            "retrying batch"
        );
        *request = request.next_attempt();
        let cancellation = request.cancellation().clone();
        Some(Box::pin(async move {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = cancellation.cancelled() => {}
            }
        }))
    }

    fn clone_request(&mut self, request: &BatchRequest) -> Option<BatchRequest> {
        Some(request.clone())
    }
}
