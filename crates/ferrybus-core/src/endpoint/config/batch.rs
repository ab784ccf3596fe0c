//! Batch consumers on an endpoint: registering them ([`EndpointConfig::batch_consumer`]), the
//! prefetch and concurrency they need, and their pipeline (retry ▶ transient guard ▶ batch inbox ▶
//! consumer), built behind a [`BatchCollector`].

use std::sync::Arc;

use tower::util::BoxCloneSyncService;
use tower::Layer;

use super::EndpointConfig;
use crate::bus::Storage;
use crate::consume::batch::{Batch, BatchCollector, BatchConsumerService, BatchOptions};
use crate::consume::{
    BoxBatchLayer, BoxBatchService, BoxConsumeService, ConsumeOutcome, ConsumeRequest,
    ConsumerInfo, RetryLayer,
};
use crate::consumer::Consumer;
use crate::error::{ConsumeError, ConsumeErrorKind};
use crate::message::Message;
use crate::resilience::TransientGuardLayer;
use tokio_util::sync::CancellationToken;

impl EndpointConfig {
    /// Adds a consumer of batches of `M` (MassTransit's `IConsumer<Batch<T>>` with
    /// `BatchOptions`): messages of `M` are gathered until `options`' message limit or time
    /// limit, the consumer gets them at once, and every message of the batch settles with it —
    /// all acknowledged, or (failed after the endpoint's retry policy, which retries the whole
    /// batch) each redelivered or moved to `<queue>_error` with its own `Fault<M>`. Behind
    /// [`inbox`](Self::inbox), the batch runs in one transaction: each message is recorded once
    /// and those seen before are dropped from the batch. The endpoint's prefetch count and
    /// concurrency are raised to at least `message_limit × concurrency_limit`. See
    /// [`consume::batch`](crate::consume::batch).
    ///
    /// ```
    /// use ferrybus_core::{consumer_fn, Batch, BatchOptions, ConsumeContext, ConsumeError, EndpointConfig};
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
    pub fn batch_consumer<M, C>(mut self, consumer: C, options: BatchOptions) -> Self
    where
        M: Message,
        C: Consumer<Batch<M>>,
    {
        let info = ConsumerInfo::of::<M>(consumer.name(), self.name.clone());
        let service =
            BoxCloneSyncService::new(BatchConsumerService::<C, M>::new(Arc::new(consumer)));
        self.batches.push(BatchRegistration {
            info,
            options,
            service,
            validate: binds::<M>,
        });
        self
    }

    /// The largest `message_limit × concurrency_limit` of the batch consumers (0 without any).
    pub(super) fn batch_capacity(&self) -> usize {
        self.batches
            .iter()
            .map(|b| b.options.message_capacity())
            .max()
            .unwrap_or(0)
    }

    /// The storage's batch inbox, when the endpoint uses the inbox; a layer that fails every
    /// batch (permanently, so to the error queue) when the storage has none, rather than
    /// consuming without the inbox the endpoint asked for.
    fn batch_inbox(&self, storage: Option<&Arc<dyn Storage>>) -> Option<BoxBatchLayer> {
        if !self.inbox {
            return None;
        }
        if let Some(layer) = storage.and_then(|s| s.batch_inbox_layer()) {
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

    /// retry (the whole batch) ─▶ transient guard ─▶ batch inbox ─▶ batch consumer.
    fn compose_batch(
        &self,
        consumer: BoxBatchService,
        inbox: Option<&BoxBatchLayer>,
        guard: Option<&TransientGuardLayer>,
    ) -> BoxBatchService {
        let layered = match inbox {
            Some(inbox) => inbox.layer(consumer),
            None => consumer,
        };
        let layered = match guard {
            Some(guard) => BoxCloneSyncService::new(guard.layer(layered)),
            None => layered,
        };
        match &self.retry {
            Some(policy) => {
                BoxCloneSyncService::new(RetryLayer::new(policy.clone()).layer(layered))
            }
            None => layered,
        }
    }

    /// The registered batch consumers as the endpoint runs them: each behind its collector.
    pub(super) fn batch_services(
        &self,
        storage: Option<&Arc<dyn Storage>>,
        guard: Option<&TransientGuardLayer>,
        cancellation: &CancellationToken,
    ) -> Vec<(ConsumerInfo, BoxConsumeService)> {
        if self.batches.is_empty() {
            return Vec::new();
        }
        let inbox = self.batch_inbox(storage);
        self.batches
            .iter()
            .map(|batch| {
                let pipeline = self.compose_batch(batch.service.clone(), inbox.as_ref(), guard);
                let collector = BatchCollector::new(
                    batch.options.clone(),
                    batch.validate,
                    pipeline,
                    cancellation.clone(),
                );
                (batch.info.clone(), BoxCloneSyncService::new(collector))
            })
            .collect()
    }
}

/// A batch consumer registered on an endpoint, before the endpoint is built.
#[derive(Clone)]
pub(super) struct BatchRegistration {
    pub(super) info: ConsumerInfo,
    options: BatchOptions,
    service: BoxBatchService,
    validate: fn(&ConsumeRequest) -> Result<(), ConsumeError>,
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
