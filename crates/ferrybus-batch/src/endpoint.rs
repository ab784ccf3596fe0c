//! [`BatchEndpointExt::batch_consumer`]: a batch consumer on an endpoint, its pipeline (retry ▶
//! transient guard ▶ batch inbox ▶ consumer) behind a batch collector.

use std::sync::Arc;

use ferrybus_core::error::ConsumeErrorKind;
use ferrybus_core::integration::{
    add_on, BoxConsumeService, ConsumeOutcome, ConsumeRequest, ConsumerBuild, ConsumerInfo,
    ConsumerRegistration,
};
use ferrybus_core::{ConsumeError, Consumer, EndpointConfig, Message};
use tower::util::BoxCloneSyncService;
use tower::Layer;

use crate::collector::BatchCollector;
use crate::message::Batch;
use crate::options::BatchOptions;
use crate::request::{BatchInbox, BoxBatchLayer, BoxBatchService};
use crate::service::BatchConsumerService;

/// Adds batch consumers to an endpoint.
pub trait BatchEndpointExt {
    /// Adds a consumer of batches of `M` (MassTransit's `IConsumer<Batch<T>>` with
    /// `BatchOptions`): messages of `M` are gathered until `options`' message limit or time
    /// limit, the consumer gets them at once, and every message of the batch settles with it —
    /// all acknowledged, or (failed after the endpoint's retry policy, which retries the whole
    /// batch) each redelivered or moved to `<queue>_error` with its own `Fault<M>`. Behind
    /// `.inbox()`, the batch runs in one transaction of the storage's [`BatchInbox`]: each
    /// message is recorded once and those seen before are dropped from the batch. The
    /// endpoint's prefetch count and concurrency are raised to at least `message_limit ×
    /// concurrency_limit`.
    ///
    /// ```
    /// use ferrybus_batch::{Batch, BatchEndpointExt, BatchOptions};
    /// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
    /// # #[message(namespace = "Bookstore.Contracts")]
    /// # struct OrderPlaced {}
    /// let endpoint = EndpointConfig::new("order-audit").prefetch(8).batch_consumer(
    ///     consumer_fn("AuditConsumer", |ctx: ConsumeContext<Batch<OrderPlaced>>| async move {
    ///         println!("{} orders", ctx.message().len());
    ///         Ok::<_, ConsumeError>(())
    ///     }),
    ///     BatchOptions::new().message_limit(20).concurrency_limit(2),
    /// );
    /// assert_eq!(endpoint.prefetch_count(), 40);
    /// assert_eq!(endpoint.concurrency_limit(), 40);
    /// ```
    fn batch_consumer<M, C>(self, consumer: C, options: BatchOptions) -> Self
    where
        M: Message,
        C: Consumer<Batch<M>>;
}

impl BatchEndpointExt for EndpointConfig {
    fn batch_consumer<M, C>(self, consumer: C, options: BatchOptions) -> Self
    where
        M: Message,
        C: Consumer<Batch<M>>,
    {
        let info = ConsumerInfo::of::<M>(consumer.name(), self.name());
        let service: BoxBatchService =
            BoxCloneSyncService::new(BatchConsumerService::<C, M>::new(Arc::new(consumer)));
        let in_flight = options.message_capacity();
        self.register(ConsumerRegistration::custom(
            info,
            in_flight,
            move |build| collect(build, service.clone(), options.clone(), binds::<M>),
        ))
    }
}

/// The batch consumer as its endpoint runs it: behind its collector, retry (the whole batch) ▶
/// transient guard ▶ batch inbox ▶ the consumer.
fn collect(
    build: &ConsumerBuild<'_>,
    consumer: BoxBatchService,
    options: BatchOptions,
    validate: fn(&ConsumeRequest) -> Result<(), ConsumeError>,
) -> BoxConsumeService {
    let layered = match batch_inbox(build) {
        Some(inbox) => inbox.layer(consumer),
        None => consumer,
    };
    let pipeline = build.guarded_retry(layered);
    let collector = BatchCollector::new(options, validate, pipeline, build.cancellation().clone());
    BoxCloneSyncService::new(collector)
}

/// The storage's batch inbox, when the endpoint uses the inbox; a layer that fails every batch
/// (permanently, so to the error queue) when the storage has none, rather than consuming
/// without the inbox the endpoint asked for.
fn batch_inbox(build: &ConsumerBuild<'_>) -> Option<BoxBatchLayer> {
    if !build.uses_inbox() {
        return None;
    }
    if let Some(BatchInbox(layer)) = build.storage().and_then(|s| add_on::<BatchInbox>(&**s)) {
        return Some(layer);
    }
    Some(BoxBatchLayer::new(tower::layer::layer_fn(
        |_inner: BoxBatchService| {
            BoxBatchService::new(tower::service_fn(|_request| async {
                Err::<Vec<ConsumeOutcome>, _>(
                    ConsumeError::new(
                        ConsumeErrorKind::Storage,
                        "the endpoint uses the inbox, but the bus's storage has no batch inbox",
                    )
                    .into_permanent(),
                )
            }))
        },
    )))
}

/// Whether a message binds to `M`: checked before it joins a batch, so that a message that does
/// not is faulted alone (a `ReceiveFault`), not with its batch.
fn binds<M: Message>(request: &ConsumeRequest) -> Result<(), ConsumeError> {
    request
        .received()
        .envelope
        .message
        .bind::<M>()
        .map(drop)
        .map_err(|e| ConsumeError::new(ConsumeErrorKind::Deserialize, e))
}
