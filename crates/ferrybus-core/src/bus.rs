//! [`BusConfig`]: what every bus holds whatever its transport — its receive endpoints, its
//! [`Storage`] and the layers add-ons put on every endpoint.
//!
//! A transport's bus builder (`RabbitMqBus::builder`, `InMemoryBus::builder`) wraps a
//! [`BusConfig`]; starting the bus prepares the storage (migrations when asked), builds every
//! endpoint (with the storage's inbox where asked), starts the storage's background services and
//! then consumes. Stopping it stops consuming, lets in-flight deliveries finish, then stops the
//! background services.

use std::collections::HashSet;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::consume::BoxConsumeLayer;
use crate::endpoint::{BoxEndpointLayer, EndpointConfig, EndpointContext};
use crate::error::{BoxError, ConfigError};
use crate::outgoing::SharedSink;
use crate::outgoing::{MessageFactory, Serializer};
use crate::storage::{Background, Storage};

/// Makes the layer an add-on puts on one endpoint, from the endpoint's input address.
pub type EndpointLayerFn = Arc<dyn Fn(&str) -> BoxEndpointLayer + Send + Sync>;

/// The transport-independent part of a bus configuration: receive endpoints and storage.
///
/// ```
/// use ferrybus_core::{BusConfig, consumer_fn, ConsumeContext, ConsumeError};
/// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Shop")]
/// # struct OrderPlaced {}
/// let bus = BusConfig::default()
///     .receive_endpoint("order-audit", |e| {
///         e.concurrency(4).consumer(consumer_fn("Audit", |_: ConsumeContext<OrderPlaced>| async {
///             Ok::<_, ConsumeError>(())
///         }))
///     });
/// assert_eq!(bus.endpoints()[0].name(), "order-audit");
/// assert!(bus.validate().is_ok());
/// ```
#[derive(Clone, Default)]
pub struct BusConfig {
    endpoints: Vec<EndpointConfig>,
    storage: Option<Arc<dyn Storage>>,
    endpoint_layers: Vec<EndpointLayerFn>,
    consumer_layers: Vec<BoxConsumeLayer>,
    serializer: Serializer,
}

impl BusConfig {
    /// Adds a receive endpoint named `name`, configured by `configure` (MassTransit's
    /// `cfg.ReceiveEndpoint("name", e => …)`).
    pub fn receive_endpoint(
        mut self,
        name: impl Into<String>,
        configure: impl FnOnce(EndpointConfig) -> EndpointConfig,
    ) -> Self {
        self.endpoints.push(configure(EndpointConfig::new(name)));
        self
    }

    /// Sets the storage (inbox, outboxes and their background services).
    pub fn storage(mut self, storage: impl Storage) -> Self {
        self.storage = Some(Arc::new(storage));
        self
    }

    /// Puts a layer on every endpoint of the bus, outside the endpoint's own layers (the first
    /// added outermost): `make` is called once per endpoint with its input address. How add-ons
    /// such as `ferrybus-otel`'s receive instruments see every delivery of a bus.
    ///
    /// ```
    /// use ferrybus_core::endpoint::BoxEndpointLayer;
    /// use ferrybus_core::BusConfig;
    /// let bus = BusConfig::default().endpoint_layer(|_input_address: &str| {
    ///     BoxEndpointLayer::new(tower::layer::util::Identity::new())
    /// });
    /// # let _ = bus;
    /// ```
    pub fn endpoint_layer(
        mut self,
        make: impl Fn(&str) -> BoxEndpointLayer + Send + Sync + 'static,
    ) -> Self {
        self.endpoint_layers.push(Arc::new(make));
        self
    }

    /// Puts a layer around every consumer of the bus, inside the endpoint's own consumer layers
    /// (right around the consumer; the first added outermost): how `ferrybus-otel`'s process span
    /// and consume instruments see every attempt.
    pub fn consumer_layer(mut self, layer: BoxConsumeLayer) -> Self {
        self.consumer_layers.push(layer);
        self
    }

    /// Writes every message of the bus — published, sent, responses, faults, scheduled, from
    /// sagas and through outboxes — with `serializer`, and lets its endpoints read that form
    /// besides envelopes, unless an endpoint sets its own
    /// ([`EndpointConfig::serializer`]). MassTransit's `cfg.UseRawJsonSerializer()` is
    /// `serializer(Serializer::raw_json())`.
    ///
    /// ```
    /// use ferrybus_core::outgoing::Serializer;
    /// use ferrybus_core::BusConfig;
    /// let bus = BusConfig::default().serializer(Serializer::raw_json());
    /// assert_eq!(bus.serializer_ref(), Serializer::raw_json());
    /// ```
    pub fn serializer(mut self, serializer: Serializer) -> Self {
        self.serializer = serializer;
        self
    }

    /// The bus's serializer, for the transport's [`MessageFactory`].
    pub fn serializer_ref(&self) -> Serializer {
        self.serializer
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[EndpointConfig] {
        &self.endpoints
    }

    /// The storage, if any.
    pub fn storage_ref(&self) -> Option<&Arc<dyn Storage>> {
        self.storage.as_ref()
    }

    /// Checks what can be checked before connecting: endpoint names unique and non-empty, a
    /// storage for every endpoint that uses the inbox, and each endpoint's own settings
    /// ([`EndpointConfig::validate`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = HashSet::new();
        for endpoint in &self.endpoints {
            if endpoint.name().is_empty() || !seen.insert(endpoint.name()) {
                return Err(ConfigError::new(format!(
                    "endpoint names must be unique and non-empty: {:?}",
                    endpoint.name()
                )));
            }
            if endpoint.uses_inbox() && self.storage.is_none() {
                return Err(ConfigError::new(format!(
                    "endpoint {:?} uses the inbox, but the bus has no storage (add .storage(..))",
                    endpoint.name()
                )));
            }
            endpoint.validate()?;
        }
        Ok(())
    }

    /// Prepares the storage, if any (see [`Storage::prepare`]).
    pub async fn prepare_storage(&self) -> Result<(), BoxError> {
        match &self.storage {
            Some(storage) => storage.prepare().await,
            None => Ok(()),
        }
    }

    /// Starts the storage's background services, if any.
    pub fn start_storage(&self, sink: SharedSink) -> Background {
        match &self.storage {
            Some(storage) => storage.start(sink),
            None => Background::default(),
        }
    }

    /// What `endpoint` is built with on this bus: the given transport parts and the storage's
    /// inbox layer when the endpoint uses it.
    pub fn endpoint_context(
        &self,
        endpoint: &EndpointConfig,
        input_address: String,
        sink: SharedSink,
        factory: Arc<MessageFactory>,
        cancellation: CancellationToken,
    ) -> EndpointContext {
        let inbox = self
            .storage
            .as_ref()
            .filter(|_| endpoint.uses_inbox())
            .map(|s| s.inbox_layer());
        EndpointContext {
            layers: self
                .endpoint_layers
                .iter()
                .map(|make| make(&input_address))
                .collect(),
            consumer_layers: self.consumer_layers.clone(),
            input_address,
            sink,
            factory,
            cancellation,
            inbox,
            storage: self.storage.clone(),
            delivery_limit: None,
        }
    }
}

impl std::fmt::Debug for BusConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusConfig")
            .field("endpoints", &self.endpoints)
            .field("storage", &self.storage.is_some())
            .field("endpoint_layers", &self.endpoint_layers.len())
            .field("consumer_layers", &self.consumer_layers.len())
            .field("serializer", &self.serializer)
            .finish()
    }
}
