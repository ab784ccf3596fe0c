//! [`Storage`]: what a bus keeps in a database — the inbox and outbox tables and the services
//! that keep them — and the [`Background`] work it runs while the bus runs.

use std::any::{Any, TypeId};

use async_trait::async_trait;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::consume::BoxConsumeLayer;
use crate::error::BoxError;
use crate::outgoing::SharedSink;
use crate::pause::Dependency;

/// The storage of a bus: the inbox and outbox tables and the services that keep them (outbox
/// delivery, sweeper, inbox cleanup). `ferrybus-sea-orm`'s `PostgresStorage` implements it.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Gets the storage ready before anything consumes: migrations when asked, the shape of
    /// existing tables. Called once, when the bus starts.
    async fn prepare(&self) -> Result<(), BoxError>;

    /// The layer that runs a consumer behind the inbox and consumer outbox, for endpoints that
    /// ask for it (`EndpointConfig::inbox`).
    fn inbox_layer(&self) -> BoxConsumeLayer;

    /// A part of the storage an add-on crate looks up by its type: `ferrybus-batch` asks for its
    /// batch inbox here. `None` (the default) for every type the storage does not provide; see
    /// [`add_on`] for the typed form.
    fn add_on(&self, type_id: TypeId) -> Option<Box<dyn Any + Send + Sync>> {
        let _ = type_id;
        None
    }

    /// Starts the background services, which send stored messages through `sink` (the bus's
    /// transport). Called once the storage is prepared; stopped after the endpoints.
    fn start(&self, sink: SharedSink) -> Background;

    /// Whether `error` (one error of a failure's chain) is a transient failure of this storage:
    /// a connection refused or reset, a pool timeout, the server shutting down or starting up.
    /// On one, the endpoint pauses until [`probe`](Self::probe) answers, instead of spending its
    /// retries (see [`pause`](crate::pause)). `None` by default.
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

/// The part of type `T` that `storage` provides to add-ons ([`Storage::add_on`]), if any.
///
/// ```
/// # use ferrybus_core::storage::{add_on, Background, Storage};
/// # use ferrybus_core::consume::BoxConsumeLayer;
/// # struct Plain;
/// # #[async_trait::async_trait]
/// # impl Storage for Plain {
/// #     async fn prepare(&self) -> Result<(), ferrybus_core::error::BoxError> { Ok(()) }
/// #     fn inbox_layer(&self) -> BoxConsumeLayer { BoxConsumeLayer::new(tower::layer::util::Identity::new()) }
/// #     fn start(&self, _: ferrybus_core::outgoing::SharedSink) -> Background { Background::default() }
/// # }
/// #[derive(Clone)]
/// struct BatchInbox;
/// assert!(add_on::<BatchInbox>(&Plain).is_none());
/// ```
pub fn add_on<T: Any + Send + Sync>(storage: &dyn Storage) -> Option<T> {
    storage
        .add_on(TypeId::of::<T>())
        .and_then(|part| part.downcast::<T>().ok())
        .map(|part| *part)
}
