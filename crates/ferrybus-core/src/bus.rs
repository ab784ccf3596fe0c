//! What every bus holds whatever its transport — its receive endpoints and its [`Storage`] — and
//! the [`Background`] work the storage runs while the bus runs.
//!
//! A transport's bus builder (`RabbitMqBus::builder`, `InMemoryBus::builder`) wraps a
//! [`BusConfig`]; starting the bus prepares the storage (migrations when asked), builds every
//! endpoint (with the storage's inbox where asked), starts the storage's background services and
//! then consumes. Stopping it stops consuming, lets in-flight deliveries finish, then stops the
//! background services.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::consume::{BoxBatchLayer, BoxConsumeLayer};
use crate::endpoint::{EndpointConfig, EndpointContext};
use crate::error::BoxError;
use crate::outgoing::MessageFactory;
use crate::publish::SharedSink;
use crate::resilience::Dependency;

/// The storage of a bus: the inbox and outbox tables and the services that keep them (outbox
/// delivery, sweeper, inbox cleanup). `ferrybus-sea-orm`'s `PostgresStorage` implements it.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Gets the storage ready before anything consumes: migrations when asked, the shape of
    /// existing tables. Called once, when the bus starts.
    async fn prepare(&self) -> Result<(), BoxError>;

    /// The layer that runs a consumer behind the inbox and consumer outbox, for endpoints that
    /// ask for it ([`EndpointConfig::inbox`]).
    fn inbox_layer(&self) -> BoxConsumeLayer;

    /// The inbox + consumer outbox for batch consumers
    /// ([`EndpointConfig::batch_consumer`] on an endpoint with [`EndpointConfig::inbox`]): one
    /// transaction per batch, each message recorded once, those seen before dropped from the
    /// batch. `None` (the default) when the storage has none; such endpoints then fault their
    /// batches.
    fn batch_inbox_layer(&self) -> Option<BoxBatchLayer> {
        None
    }

    /// Starts the background services, which send stored messages through `sink` (the bus's
    /// transport). Called once the storage is prepared; stopped after the endpoints.
    fn start(&self, sink: SharedSink) -> Background;

    /// Whether `error` (one error of a failure's chain) is a transient failure of this storage:
    /// a connection refused or reset, a pool timeout, the server shutting down or starting up.
    /// On one, the endpoint pauses until [`probe`](Self::probe) answers, instead of spending its
    /// retries (see [`resilience`](crate::resilience)). `None` by default.
    fn classify(&self, error: &(dyn std::error::Error + 'static)) -> Option<Dependency> {
        let _ = error;
        None
    }

    /// Whether the storage answers (e.g. `SELECT 1`), asked while an endpoint is paused for it.
    /// `true` by default.
    async fn probe(&self) -> bool {
        true
    }
}

/// Running background tasks (outbox delivery, cleanup). [`Background::stop`] lets work in flight
/// finish (a batch being sent is sent and recorded) and waits for every task. Dropping it also
/// signals the tasks to stop, without waiting.
#[derive(Debug, Default)]
pub struct Background {
    cancel: Vec<CancellationToken>,
    tasks: Vec<JoinHandle<()>>,
}

impl Background {
    /// Tasks that stop when `cancel` fires.
    pub fn new(cancel: CancellationToken, tasks: Vec<JoinHandle<()>>) -> Self {
        Self {
            cancel: vec![cancel],
            tasks,
        }
    }

    /// These tasks and those of `other`, stopped together.
    pub fn join(mut self, mut other: Background) -> Self {
        self.cancel.append(&mut other.cancel);
        self.tasks.append(&mut other.tasks);
        self
    }

    /// Whether every task has ended.
    pub fn is_finished(&self) -> bool {
        self.tasks.iter().all(JoinHandle::is_finished)
    }

    /// Signals the tasks to stop and waits until they have.
    pub async fn stop(mut self) {
        self.cancel.iter().for_each(CancellationToken::cancel);
        for task in std::mem::take(&mut self.tasks) {
            if let Err(error) = task.await {
                tracing::warn!(target: "ferrybus::bus", %error, "background task ended abnormally");
            }
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.cancel.iter().for_each(CancellationToken::cancel);
    }
}

/// A bus configuration that cannot run: the reason in one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ConfigError {
    /// A configuration error with this reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

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

    /// The endpoints.
    pub fn endpoints(&self) -> &[EndpointConfig] {
        &self.endpoints
    }

    /// The storage, if any.
    pub fn storage_ref(&self) -> Option<&Arc<dyn Storage>> {
        self.storage.as_ref()
    }

    /// Checks what can be checked before connecting: endpoint names unique and non-empty, a
    /// storage for every endpoint that uses the inbox.
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
            input_address,
            sink,
            factory,
            cancellation,
            inbox,
            storage: self.storage.clone(),
        }
    }
}

impl std::fmt::Debug for BusConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusConfig")
            .field("endpoints", &self.endpoints)
            .field("storage", &self.storage.is_some())
            .finish()
    }
}
