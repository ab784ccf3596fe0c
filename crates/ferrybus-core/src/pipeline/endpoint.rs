//! [`EndpointConfig`]: a receive endpoint described in code — queue, prefetch, concurrency,
//! retry, redelivery, middleware and consumers — shared by every transport.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service};

use crate::consumer::Consumer;
use crate::error::ConsumeError;
use crate::message::{Message, MessageType};
use crate::outgoing::{MessageFactory, SharedSink};
use crate::pipeline::{
    BoxConsumeService, ConsumeRequest, ConsumerInfo, ConsumerRegistration, ConsumerService,
    PipelineSettings, ReceivePipeline, RetryLayer, RetryPolicy,
};

/// The default [`EndpointConfig::max_body_size`]: 32 MiB.
pub const DEFAULT_MAX_BODY_SIZE: usize = 32 * 1024 * 1024;

type LayerFn = Arc<dyn Fn(BoxConsumeService) -> BoxConsumeService + Send + Sync>;

/// A receive endpoint, transport-independent: the transport crates take one of these (or wrap it
/// with their own queue options).
///
/// The pipeline of every consumer is, from the outside in:
///
/// ```text
/// retry ─▶ layers in the order added ─▶ consumer
/// ```
///
/// so each retry attempt runs the whole stack again (a new transaction for the storage layer).
///
/// ```
/// use std::time::Duration;
/// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig, RetryPolicy};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Bookstore.Contracts")]
/// # struct OrderPlaced {}
///
/// let endpoint = EndpointConfig::new("billing-invoice")
///     .prefetch(16)
///     .concurrency(4)
///     .retry(RetryPolicy::intervals([Duration::from_millis(100), Duration::from_millis(200)]))
///     .consumer(consumer_fn("InvoiceConsumer", |_ctx: ConsumeContext<OrderPlaced>| async {
///         Ok::<_, ConsumeError>(())
///     }));
/// assert_eq!(endpoint.queue(), "billing-invoice");
/// assert_eq!(endpoint.concurrency_limit(), 4);
/// ```
#[derive(Clone)]
pub struct EndpointConfig {
    queue: String,
    prefetch: Option<u16>,
    concurrency: Option<usize>,
    retry: Option<RetryPolicy>,
    redelivery: Option<RetryPolicy>,
    layers: Vec<LayerFn>,
    consumers: Vec<(ConsumerInfo, BoxConsumeService)>,
    raw_json: bool,
    publish_faults: bool,
    max_body_size: usize,
}

impl EndpointConfig {
    /// An endpoint reading queue `queue`.
    pub fn new(queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            prefetch: None,
            concurrency: None,
            retry: None,
            redelivery: None,
            layers: Vec::new(),
            consumers: Vec::new(),
            raw_json: false,
            publish_faults: true,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
        }
    }

    /// Adds a consumer of `M`. Several consumers may share an endpoint and a message type.
    pub fn consumer<M, C>(mut self, consumer: C) -> Self
    where
        M: Message,
        C: Consumer<M>,
    {
        let info = ConsumerInfo::of::<M>(consumer.name(), self.queue.clone());
        let service = BoxCloneSyncService::new(ConsumerService::<C, M>::new(Arc::new(consumer)));
        self.consumers.push((info, service));
        self
    }

    /// How many unacknowledged deliveries the broker may push (AMQP prefetch).
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// How many messages are consumed at once (MassTransit's `ConcurrentMessageLimit`).
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.concurrency = Some(limit.max(1));
        self
    }

    /// The in-memory retry policy (MassTransit's `UseMessageRetry`); none by default.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// The delayed redelivery policy (MassTransit's `UseDelayedRedelivery`): after retries are
    /// used up, the message is sent back to the queue after a delay with `MT-Redelivery-Count`.
    pub fn redelivery(mut self, policy: RetryPolicy) -> Self {
        self.redelivery = Some(policy);
        self
    }

    /// Adds a tower layer to every consumer's pipeline, inside retry and inside earlier layers.
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<BoxConsumeService> + Send + Sync + 'static,
        L::Service: Service<ConsumeRequest, Response = (), Error = ConsumeError>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as Service<ConsumeRequest>>::Future: Send + 'static,
    {
        self.layers.push(Arc::new(move |inner| {
            BoxCloneSyncService::new(layer.layer(inner))
        }));
        self
    }

    /// Reads `application/json` bodies as raw JSON (metadata in transport headers) besides
    /// envelopes (MassTransit's `UseRawJsonDeserializer`).
    pub fn raw_json(mut self, enabled: bool) -> Self {
        self.raw_json = enabled;
        self
    }

    /// The largest body the endpoint reads (32 MiB by default); a larger one is moved to
    /// `<queue>_error` with the reason, unread.
    pub fn max_body_size(mut self, bytes: usize) -> Self {
        self.max_body_size = bytes;
        self
    }

    /// Whether `Fault<T>` is published when a consumer fails for good (on by default).
    pub fn publish_faults(mut self, enabled: bool) -> Self {
        self.publish_faults = enabled;
        self
    }

    /// The queue name.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The prefetch count: as set; else the concurrency limit × 1.2; else max(2 × cores, 16).
    pub fn prefetch_count(&self) -> u16 {
        if let Some(p) = self.prefetch {
            return p;
        }
        if let Some(c) = self.concurrency {
            return u16::try_from((c * 6).div_ceil(5)).unwrap_or(u16::MAX);
        }
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        u16::try_from((2 * cores).max(16)).unwrap_or(u16::MAX)
    }

    /// How many messages run at once: as set, else the prefetch count.
    pub fn concurrency_limit(&self) -> usize {
        self.concurrency
            .unwrap_or_else(|| usize::from(self.prefetch_count()))
    }

    /// The message types the endpoint's consumers handle (their exchanges are bound to it).
    pub fn message_types(&self) -> Vec<MessageType> {
        let mut types: Vec<MessageType> = Vec::new();
        for (info, _) in &self.consumers {
            if !types.iter().any(|t| t.urn() == info.message_type().urn()) {
                types.push(info.message_type().clone());
            }
        }
        types
    }

    /// The consumers registered so far.
    pub fn consumers(&self) -> impl Iterator<Item = &ConsumerInfo> {
        self.consumers.iter().map(|(info, _)| info)
    }

    /// Builds the receive pipeline for this endpoint at `input_address`.
    pub fn build(
        self,
        input_address: String,
        sink: SharedSink,
        factory: Arc<MessageFactory>,
        cancellation: CancellationToken,
    ) -> ReceivePipeline {
        let consumers = self
            .consumers
            .iter()
            .map(|(info, service)| ConsumerRegistration {
                info: Arc::new(info.clone()),
                service: self.compose(service.clone()),
            })
            .collect();
        ReceivePipeline::new(PipelineSettings {
            input_address,
            consumers,
            sink,
            factory,
            redelivery: self.redelivery,
            raw_json: self.raw_json,
            max_body_size: self.max_body_size,
            publish_faults: self.publish_faults,
            cancellation,
        })
    }

    fn compose(&self, consumer: BoxConsumeService) -> BoxConsumeService {
        let layered = self
            .layers
            .iter()
            .rev()
            .fold(consumer, |inner, layer| layer(inner));
        match &self.retry {
            Some(policy) => {
                BoxCloneSyncService::new(RetryLayer::new(policy.clone()).layer(layered))
            }
            None => layered,
        }
    }
}

impl std::fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("queue", &self.queue)
            .field("prefetch", &self.prefetch_count())
            .field("concurrency", &self.concurrency_limit())
            .field("consumers", &self.consumers.len())
            .finish_non_exhaustive()
    }
}
