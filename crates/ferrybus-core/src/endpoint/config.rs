//! [`EndpointConfig`]: a receive endpoint described in code, in one place — name, prefetch,
//! concurrency, retry, redelivery, inbox, consumers and layers — shared by every transport.

use std::convert::Infallible;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tower::util::{BoxCloneSyncService, BoxCloneSyncServiceLayer};
use tower::{Layer, Service};

use super::boundary::Endpoint;
use super::boxed::{BoxEndpointLayer, BoxEndpointService};
use super::decide::Decider;
use super::delivery::Delivery;
use super::registration::{ConsumerBuild, ConsumerRegistration};
use super::service::{EndpointService, Reading, Registered};
use super::settlement::Settlement;
use crate::consume::{
    BoxConsumeLayer, BoxConsumeService, ConsumeOutcome, ConsumeRequest, Consumer, ConsumerInfo,
    ConsumerService, RetryPolicy,
};
use crate::error::{ConfigError, ConsumeError};
use crate::message::{Message, MessageType};
use crate::outgoing::SharedSink;
use crate::outgoing::{MessageFactory, Serializer};
use crate::pause::{Classifier, Dependency, EndpointControl, Transience, TransientGuardLayer};
use crate::storage::Storage;

/// The default [`EndpointConfig::max_body_size`]: 32 MiB.
pub const DEFAULT_MAX_BODY_SIZE: usize = 32 * 1024 * 1024;

/// How many times one message may pause an endpoint while others succeed
/// ([`EndpointConfig::transient_strikes`]).
pub const DEFAULT_TRANSIENT_STRIKES: u32 = 3;

/// A receive endpoint, transport-independent; a bus builder hands one to the closure of its
/// `receive_endpoint(name, |e| …)`.
///
/// A delivery passes the endpoint's layers, then its consumers' stacks (retry ▶ transient guard ▶
/// inbox ▶ consumer layers ▶ consumer), as drawn in the [module docs](crate::endpoint); each retry
/// attempt runs the inbox and the consumer layers again (a new transaction), and the transient
/// guard pauses the endpoint on an infrastructure failure ([`pause`](crate::pause)) instead of
/// spending a retry.
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
/// assert_eq!(endpoint.name(), "billing-invoice");
/// assert_eq!(endpoint.concurrency_limit(), 4);
/// ```
#[derive(Clone)]
pub struct EndpointConfig {
    name: String,
    prefetch: Option<u16>,
    concurrency: Option<usize>,
    bind_message_types: bool,
    retry: Option<RetryPolicy>,
    redelivery: Option<RetryPolicy>,
    inbox: bool,
    layers: Vec<BoxEndpointLayer>,
    consumer_layers: Vec<BoxConsumeLayer>,
    consumers: Vec<ConsumerRegistration>,
    serializer: Option<Serializer>,
    publish_faults: bool,
    max_body_size: usize,
    pause_on_transient: bool,
    transient_strikes: u32,
    classifiers: Vec<Classifier>,
    extensions: http::Extensions,
}

/// What a transport supplies when it builds an endpoint (`BusConfig::endpoint_context` fills in
/// the bus's part): where it listens, where its consumers' messages go, the storage's inbox layer
/// when the endpoint asked for one, the bus's layers, and the delivery limit the transport keeps.
pub struct EndpointContext {
    /// The endpoint's input address (`rabbitmq://host/vhost/queue`).
    pub input_address: String,
    /// Where published, sent and fault messages go.
    pub sink: SharedSink,
    /// Builds outgoing messages for the transport's host.
    pub factory: Arc<MessageFactory>,
    /// Cancelled when the endpoint must abandon in-flight work (shutdown deadline).
    pub cancellation: CancellationToken,
    /// The inbox + consumer outbox layer of the bus's storage, for [`EndpointConfig::inbox`].
    pub inbox: Option<BoxConsumeLayer>,
    /// The bus's storage, whose [`classify`](Storage::classify) and [`probe`](Storage::probe)
    /// tell transient failures of it and when it answers again.
    pub storage: Option<Arc<dyn Storage>>,
    /// The bus's layers for this endpoint, outside the endpoint's own (first outermost).
    pub layers: Vec<BoxEndpointLayer>,
    /// The bus's layers around every consumer, inside the endpoint's own.
    pub consumer_layers: Vec<BoxConsumeLayer>,
    /// How often the transport may deliver a message without a settlement (a consumer that
    /// crashed the process each time) before the endpoint faults it unread: the broker's own
    /// limit (RabbitMQ's quorum queues: `x-delivery-limit`), kept by ferrybus so that the message
    /// ends in the error queue with its fault rather than being dropped. The transport sets the
    /// count on each [`Delivery::delivery_count`].
    pub delivery_limit: Option<u32>,
}

impl EndpointConfig {
    /// An endpoint named `name` (its queue and its exchange, as MassTransit names both).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            prefetch: None,
            concurrency: None,
            bind_message_types: true,
            retry: None,
            redelivery: None,
            inbox: false,
            layers: Vec::new(),
            consumer_layers: Vec::new(),
            consumers: Vec::new(),
            serializer: None,
            publish_faults: true,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
            pause_on_transient: true,
            transient_strikes: DEFAULT_TRANSIENT_STRIKES,
            classifiers: Vec::new(),
            extensions: http::Extensions::new(),
        }
    }

    /// Adds a consumer of `M`. Several consumers may share an endpoint and a message type; a
    /// struct consuming two types is added once per type (`.consumer::<A, _>(c.clone())`).
    pub fn consumer<M, C>(self, consumer: C) -> Self
    where
        M: Message,
        C: Consumer<M>,
    {
        let info = ConsumerInfo::of::<M>(consumer.name(), self.name.clone());
        let service = BoxCloneSyncService::new(ConsumerService::<C, M>::new(Arc::new(consumer)));
        self.register(ConsumerRegistration::new(info, service))
    }

    /// Adds a consumer registered by an add-on (a saga, a batch consumer; see
    /// [`ConsumerRegistration`]).
    pub fn register(mut self, registration: ConsumerRegistration) -> Self {
        self.consumers.push(registration);
        self
    }

    /// Sets a transport's own setting of the endpoint, found by its type (the RabbitMQ
    /// transport's queue options); replaces one of the same type.
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// A transport's own setting of the endpoint, by its type.
    pub fn extension<T: Clone + Send + Sync + 'static>(&self) -> Option<&T> {
        self.extensions.get::<T>()
    }

    /// How many unacknowledged deliveries the broker may push (AMQP prefetch, MassTransit's
    /// `PrefetchCount`); at least 1 ([`validate`](Self::validate) refuses 0, which AMQP reads as
    /// no limit).
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

    /// Runs every consumer of the endpoint behind the bus storage's inbox and consumer outbox
    /// (MassTransit's `UseEntityFrameworkOutbox`): one database transaction per delivery and
    /// consumer, duplicates acknowledged without running the consumer, published messages sent
    /// after commit. The bus must have a storage.
    pub fn inbox(mut self) -> Self {
        self.inbox = true;
        self
    }

    /// Adds a layer around the whole delivery: it sees every [`Delivery`] and the [`Settlement`]
    /// that comes back (metrics, tracing, kill switches, rate limits). The first added is the
    /// outermost.
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<BoxEndpointService> + Send + Sync + 'static,
        L::Service: Service<Delivery, Response = Settlement, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as Service<Delivery>>::Future: Send + 'static,
    {
        self.layers.push(BoxEndpointLayer::new(layer));
        self
    }

    /// Adds a layer around each consumer, inside retry and the inbox; the first added is the
    /// outermost.
    pub fn consumer_layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<BoxConsumeService> + Send + Sync + 'static,
        L::Service: Service<ConsumeRequest, Response = ConsumeOutcome, Error = ConsumeError>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as Service<ConsumeRequest>>::Future: Send + 'static,
    {
        self.consumer_layers
            .push(BoxCloneSyncServiceLayer::new(layer));
        self
    }

    /// Whether each consumed message type's exchange is bound to the endpoint (MassTransit's
    /// `ConfigureConsumeTopology`, on by default).
    pub fn bind_message_types(mut self, bind: bool) -> Self {
        self.bind_message_types = bind;
        self
    }

    /// Writes what the endpoint's consumers send, publish and respond (and its faults) with
    /// `serializer`, and reads the bodies it can read, instead of the bus's
    /// [`BusConfig::serializer`](crate::BusConfig::serializer) (MassTransit's
    /// `e.UseRawJsonSerializer()` on a receive endpoint). With
    /// [`Serializer::RawJson`] the endpoint reads `application/json` bodies as raw JSON (the
    /// metadata in transport headers) and still reads MassTransit envelopes by their content
    /// type.
    ///
    /// ```
    /// use ferrybus_core::outgoing::Serializer;
    /// use ferrybus_core::EndpointConfig;
    /// let endpoint = EndpointConfig::new("legacy-orders").serializer(Serializer::raw_json());
    /// # let _ = endpoint;
    /// ```
    pub fn serializer(mut self, serializer: Serializer) -> Self {
        self.serializer = Some(serializer);
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

    /// Whether a transient infrastructure failure (see [`Transience`]) pauses the endpoint and
    /// gives the delivery back to the queue, without spending a retry, until the dependency
    /// answers (on by default). Off, such failures are retried and faulted like any other.
    pub fn pause_on_transient(mut self, enabled: bool) -> Self {
        self.pause_on_transient = enabled;
        self
    }

    /// How many times one message may pause the endpoint with a transient-looking failure while
    /// other messages of the endpoint succeed in between, before it is handled as an ordinary
    /// failure (retry, redelivery, `_error` with its fault); default 3. Such a message is not
    /// waiting for its dependency (the others get through): it is poison, and would otherwise
    /// pause the endpoint again each time it comes back. During a real outage nothing succeeds,
    /// so no strike is counted.
    ///
    /// ```
    /// use ferrybus_core::EndpointConfig;
    /// let endpoint = EndpointConfig::new("billing-invoice").transient_strikes(5);
    /// # let _ = endpoint;
    /// ```
    pub fn transient_strikes(mut self, strikes: u32) -> Self {
        self.transient_strikes = strikes.max(1);
        self
    }

    /// Adds a rule telling transient failures (of `Dependency::Other`, e.g. an HTTP API the
    /// consumer calls) from the consumer's own errors: `classify` sees each error of a failure's
    /// chain. Asked after the storage's rules, before the built-in ones.
    ///
    /// ```
    /// use ferrybus_core::pause::Dependency;
    /// use ferrybus_core::EndpointConfig;
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("the payment provider answered 503")]
    /// struct Unavailable;
    /// let endpoint = EndpointConfig::new("billing-invoice")
    ///     .transient_if(|e| e.downcast_ref::<Unavailable>().map(|_| Dependency::Other));
    /// # let _ = endpoint;
    /// ```
    pub fn transient_if(
        mut self,
        classify: impl Fn(&(dyn std::error::Error + 'static)) -> Option<Dependency>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.classifiers.push(Arc::new(classify));
        self
    }

    /// The endpoint (queue) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether consumed types' exchanges are bound to the endpoint.
    pub fn binds_message_types(&self) -> bool {
        self.bind_message_types
    }

    /// Whether the endpoint runs its consumers behind the inbox.
    pub fn uses_inbox(&self) -> bool {
        self.inbox
    }

    /// The prefetch count: as set; else the concurrency limit × 1.2; else max(2 × cores, 16);
    /// at least what every consumer needs in flight (a batch consumer's `message_limit ×
    /// concurrency_limit`, as MassTransit's `BatchOptions` raises `PrefetchCount`).
    pub fn prefetch_count(&self) -> u16 {
        let batches = u16::try_from(self.in_flight()).unwrap_or(u16::MAX);
        if let Some(p) = self.prefetch {
            return p.max(batches);
        }
        if let Some(c) = self.concurrency {
            return u16::try_from((c * 6).div_ceil(5))
                .unwrap_or(u16::MAX)
                .max(batches);
        }
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        u16::try_from((2 * cores).max(16))
            .unwrap_or(u16::MAX)
            .max(batches)
    }

    /// How many messages run at once: as set, else the prefetch count; at least what every
    /// consumer needs in flight (MassTransit's `ConcurrentMessageLimit` raised by
    /// `BatchOptions`), so that a whole batch can wait in flight.
    pub fn concurrency_limit(&self) -> usize {
        self.concurrency
            .unwrap_or_else(|| usize::from(self.prefetch_count()))
            .max(self.in_flight())
    }

    /// The most messages one consumer needs in flight at once (0 without such a consumer).
    fn in_flight(&self) -> usize {
        self.consumers
            .iter()
            .map(ConsumerRegistration::in_flight)
            .max()
            .unwrap_or(0)
    }

    /// The message types the endpoint's consumers handle (their exchanges are bound to it).
    pub fn message_types(&self) -> Vec<MessageType> {
        let mut types: Vec<MessageType> = Vec::new();
        for info in self.consumers() {
            if !types.iter().any(|t| t.urn() == info.message_type().urn()) {
                types.push(info.message_type().clone());
            }
        }
        types
    }

    /// The consumers registered so far.
    pub fn consumers(&self) -> impl Iterator<Item = &ConsumerInfo> {
        self.consumers.iter().map(ConsumerRegistration::info)
    }

    /// Builds the endpoint. A transport calls this once per endpoint and then calls the
    /// [`Endpoint`] once per delivery; it never panics (a panicking layer becomes a
    /// [`Settlement::Fault`]).
    pub fn build(&self, context: EndpointContext) -> Endpoint {
        let control = EndpointControl::new(self.name.clone());
        let guard = self
            .pause_on_transient
            .then(|| self.transient_guard(&control, context.storage.as_ref()));
        let parts = ConsumerBuild {
            retry: self.retry.as_ref(),
            guard: guard.as_ref(),
            inbox: context.inbox.as_ref().filter(|_| self.inbox),
            uses_inbox: self.inbox,
            endpoint_layers: &self.consumer_layers,
            bus_layers: &context.consumer_layers,
            storage: context.storage.as_ref(),
            cancellation: &context.cancellation,
        };
        let consumers = self
            .consumers
            .iter()
            .map(|registration| Registered {
                info: Arc::new(registration.info().clone()),
                service: registration.build(&parts),
            })
            .collect();
        let factory = match self.serializer {
            Some(serializer) => Arc::new((*context.factory).clone().with_serializer(serializer)),
            None => context.factory,
        };
        let reading = Reading {
            serializer: factory.serializer(),
            max_body_size: self.max_body_size,
            delivery_limit: context.delivery_limit,
        };
        let decider = Decider {
            input_address: context.input_address.clone(),
            factory,
            redelivery: self.redelivery.clone(),
            publish_faults: self.publish_faults,
            cancellation: context.cancellation,
        };
        let endpoint = EndpointService::new(consumers, reading, decider, context.sink);
        let layers: Vec<&BoxEndpointLayer> = context.layers.iter().chain(&self.layers).collect();
        if layers.is_empty() {
            return Endpoint::bare(endpoint, context.input_address, control);
        }
        let layered = layers
            .into_iter()
            .rev()
            .fold(BoxEndpointService::innermost(endpoint), |inner, layer| {
                layer.layer(inner)
            });
        Endpoint::layered(
            layered,
            context.input_address,
            control,
            !self.layers.is_empty(),
        )
    }

    /// The guard between retry and the inbox: the storage's rules first, then the endpoint's,
    /// then the built-in ones; the storage's probe tells when it answers again.
    fn transient_guard(
        &self,
        control: &EndpointControl,
        storage: Option<&Arc<dyn Storage>>,
    ) -> TransientGuardLayer {
        let mut transience = Transience::default();
        if let Some(storage) = storage {
            let classify = storage.clone();
            transience = transience.with(Arc::new(move |e| classify.classify(e)));
            let probe = storage.clone();
            control.set_probe(Dependency::Storage, move || {
                let probe = probe.clone();
                async move { probe.probe().await }
            });
        }
        for classifier in &self.classifiers {
            transience = transience.with(classifier.clone());
        }
        TransientGuardLayer::new(control.clone(), transience, self.transient_strikes)
    }

    /// Checks the endpoint's settings before anything connects: a prefetch count of at least 1,
    /// and one inbox consumer id per consumer (two consumers with one name and message type would
    /// share their inbox rows, and one of them would never run).
    ///
    /// ```
    /// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig};
    /// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
    /// # #[message(namespace = "Shop")]
    /// # struct OrderPlaced {}
    /// let handler = || consumer_fn("Handler", |_: ConsumeContext<OrderPlaced>| async { Ok::<_, ConsumeError>(()) });
    /// let twice = EndpointConfig::new("orders").consumer(handler()).consumer(handler());
    /// assert!(twice.validate().unwrap_err().to_string().contains("share the inbox consumer id"));
    /// assert!(EndpointConfig::new("orders").prefetch(0).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.prefetch == Some(0) {
            return Err(ConfigError::new(format!(
                "endpoint {:?}: a prefetch count of 0 would let the broker push the whole queue \
                 (AMQP reads 0 as no limit) while no delivery runs; set at least 1, or leave it \
                 unset (the concurrency limit × 1.2, else max(2 × cores, 16))",
                self.name
            )));
        }
        let mut seen: Vec<&ConsumerInfo> = Vec::new();
        for consumer in self.consumers() {
            if let Some(other) = seen
                .iter()
                .find(|c| c.consumer_id() == consumer.consumer_id())
            {
                return Err(ConfigError::new(format!(
                    "endpoint {:?}: consumers {:?} and {:?} of {} share the inbox consumer id {} \
                     (one would never run behind the inbox); give one of them another name \
                     (Consumer::name)",
                    self.name,
                    other.name(),
                    consumer.name(),
                    consumer.message_type().dotnet_name(),
                    consumer.consumer_id()
                )));
            }
            seen.push(consumer);
        }
        Ok(())
    }

    /// The in-memory retry policy, if one is set.
    pub fn retry_policy(&self) -> Option<&RetryPolicy> {
        self.retry.as_ref()
    }

    /// Whether `Fault<T>` is published when a consumer fails for good.
    pub fn publishes_faults(&self) -> bool {
        self.publish_faults
    }
}

impl std::fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("name", &self.name)
            .field("prefetch", &self.prefetch_count())
            .field("concurrency", &self.concurrency_limit())
            .field("inbox", &self.inbox)
            .field("consumers", &self.consumers.len())
            .field("layers", &self.layers.len())
            .finish_non_exhaustive()
    }
}
