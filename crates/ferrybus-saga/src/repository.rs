//! Where instances live: the [`SagaRepository`] trait and the [`InMemorySagaRepository`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value as Json;
use uuid::Uuid;

use ferrybus_core::consume::ConsumeRequest;
use ferrybus_core::error::ConsumeError;

use crate::{SagaError, SagaErrorKind};

/// The `CurrentState` column's value: the state's name (MassTransit's default string state) or
/// its number (`InstanceState(x => x.CurrentState, …)` on an `int` property; see
/// [`StateMachine::current_state_as_int`](crate::StateMachine::current_state_as_int)).
///
/// ```
/// use ferrybus_saga::CurrentState;
/// assert_eq!(CurrentState::from("Submitted"), "Submitted");
/// assert_eq!(CurrentState::Index(3).to_string(), "3");
/// assert_eq!(CurrentState::Index(3), "3");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CurrentState {
    /// The state's name (text column).
    Name(String),
    /// The state's number (integer column): `Initial` is 1, `Final` 2, the machine's states 3….
    Index(i32),
}

impl std::fmt::Display for CurrentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CurrentState::Name(name) => f.write_str(name),
            CurrentState::Index(index) => write!(f, "{index}"),
        }
    }
}

impl From<&str> for CurrentState {
    fn from(name: &str) -> Self {
        CurrentState::Name(name.to_owned())
    }
}

impl From<String> for CurrentState {
    fn from(name: String) -> Self {
        CurrentState::Name(name)
    }
}

impl From<i32> for CurrentState {
    fn from(index: i32) -> Self {
        CurrentState::Index(index)
    }
}

/// A name equals its text, a number its decimal text (`"3"`).
impl PartialEq<&str> for CurrentState {
    fn eq(&self, other: &&str) -> bool {
        match self {
            CurrentState::Name(name) => name == other,
            CurrentState::Index(index) => other.parse::<i32>() == Ok(*index),
        }
    }
}

/// An instance as a repository stores it (a row of the instance table).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredSaga<T> {
    /// The instance id (`CorrelationId`).
    pub correlation_id: Uuid,
    /// The state (`CurrentState`).
    pub current_state: CurrentState,
    /// The user's data (the other columns).
    pub instance: T,
    /// The concurrency token read with it (PostgreSQL `xmin` or a version column); passed back to
    /// [`SagaChange::Update`] and [`SagaChange::Delete`].
    pub version: i64,
}

/// What a step does to the repository.
#[derive(Clone, Debug, PartialEq)]
pub enum SagaChange<T> {
    /// A new instance (`INSERT`; a concurrent insert of the same id is a conflict).
    Insert {
        /// The id.
        correlation_id: Uuid,
        /// The state.
        current_state: CurrentState,
        /// The data.
        instance: T,
    },
    /// A changed instance, written only if still at `version` (optimistic concurrency).
    Update {
        /// The id.
        correlation_id: Uuid,
        /// The state.
        current_state: CurrentState,
        /// The data.
        instance: T,
        /// The token it was read with.
        version: i64,
    },
    /// A completed instance is removed (MassTransit's `SetCompletedWhenFinalized`).
    Delete {
        /// The id.
        correlation_id: Uuid,
        /// The token it was read with.
        version: i64,
    },
}

/// Whether a [`SagaChange`] was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveOutcome {
    /// Written.
    Saved,
    /// Someone else changed (or inserted) the instance first: the event is applied again to the
    /// fresh instance.
    Conflict,
}

/// Loads and saves instances of `T` (MassTransit's `ISagaRepository<T>`). Implementations take
/// the transaction they work in from the [`ConsumeRequest`]'s extensions (the storage crate's
/// inbox puts it there), so a step commits with the inbox row and the messages it published.
///
/// ```
/// use ferrybus_saga::{InMemorySagaRepository, SagaRepository};
/// fn uses(_: &impl SagaRepository<u32>) {}
/// uses(&InMemorySagaRepository::<u32>::new());
/// ```
#[ferrybus_core::async_trait]
pub trait SagaRepository<T>: Send + Sync + 'static {
    /// The instance `correlation_id`, if it exists. A pessimistic repository locks it here
    /// (`SELECT … FOR UPDATE`) until the transaction ends.
    async fn load(
        &self,
        request: &ConsumeRequest,
        correlation_id: Uuid,
    ) -> Result<Option<StoredSaga<T>>, ConsumeError>;

    /// Writes `change`; [`SaveOutcome::Conflict`] when the instance changed since it was
    /// loaded (or was inserted concurrently).
    async fn save(
        &self,
        request: &ConsumeRequest,
        change: SagaChange<T>,
    ) -> Result<SaveOutcome, ConsumeError>;

    /// The ids of the instances whose field `field` (its serde name) equals `value`, for events
    /// correlated by a property ([`Event::correlated_by_property`](crate::Event::correlated_by_property),
    /// MassTransit's `CorrelateBy(x => x.OrderNumber, …)`). Repositories that cannot query
    /// answer with a [`SagaErrorKind::Mapping`] error (the default).
    async fn find(
        &self,
        request: &ConsumeRequest,
        field: &str,
        value: &Json,
    ) -> Result<Vec<Uuid>, ConsumeError> {
        let _ = (request, value);
        Err(SagaError::new(
            SagaErrorKind::Mapping,
            format!("this saga repository cannot find instances by the field {field:?}"),
        )
        .into())
    }
}

#[ferrybus_core::async_trait]
impl<T, R> SagaRepository<T> for Arc<R>
where
    T: Send + 'static,
    R: SagaRepository<T> + ?Sized,
{
    async fn load(
        &self,
        request: &ConsumeRequest,
        correlation_id: Uuid,
    ) -> Result<Option<StoredSaga<T>>, ConsumeError> {
        (**self).load(request, correlation_id).await
    }

    async fn save(
        &self,
        request: &ConsumeRequest,
        change: SagaChange<T>,
    ) -> Result<SaveOutcome, ConsumeError> {
        (**self).save(request, change).await
    }

    async fn find(
        &self,
        request: &ConsumeRequest,
        field: &str,
        value: &Json,
    ) -> Result<Vec<Uuid>, ConsumeError> {
        (**self).find(request, field, value).await
    }
}

/// Instances in memory, for tests and the [`TestHarness`](ferrybus_core::memory::TestHarness):
/// optimistic concurrency by a version counter, per process, lost on exit. Clones share the
/// instances, so a test keeps one to assert on.
///
/// ```
/// use ferrybus_saga::InMemorySagaRepository;
/// let repository = InMemorySagaRepository::<u32>::new();
/// assert!(repository.get(uuid::Uuid::nil()).is_none());
/// assert_eq!(repository.len(), 0);
/// ```
#[derive(Debug)]
pub struct InMemorySagaRepository<T> {
    rows: Arc<Mutex<HashMap<Uuid, StoredSaga<T>>>>,
    changed: Arc<tokio::sync::Notify>,
}

impl<T> Clone for InMemorySagaRepository<T> {
    fn clone(&self) -> Self {
        Self {
            rows: self.rows.clone(),
            changed: self.changed.clone(),
        }
    }
}

impl<T> Default for InMemorySagaRepository<T> {
    fn default() -> Self {
        Self {
            rows: Arc::default(),
            changed: Arc::default(),
        }
    }
}

impl<T: Clone> InMemorySagaRepository<T> {
    /// An empty repository.
    pub fn new() -> Self {
        Self::default()
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, StoredSaga<T>>> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The instance `correlation_id` as stored now.
    pub fn get(&self, correlation_id: Uuid) -> Option<StoredSaga<T>> {
        self.rows().get(&correlation_id).cloned()
    }

    /// The state of instance `correlation_id` as stored: its name, or its number for a machine
    /// that stores it as an int.
    pub fn state(&self, correlation_id: Uuid) -> Option<String> {
        self.get(correlation_id)
            .map(|s| s.current_state.to_string())
    }

    /// How many instances there are.
    pub fn len(&self) -> usize {
        self.rows().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until instance `correlation_id` is in state `state` (for events another consumer
    /// publishes, whose message ids a test does not know); `None` after `timeout`. Woken by
    /// every save, no polling.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::time::Duration;
    /// let repository = ferrybus_saga::InMemorySagaRepository::<u32>::new();
    /// let id = uuid::Uuid::now_v7();
    /// repository.insert(id, "Submitted", 1);
    /// let stored = repository.wait_state(id, "Submitted", Duration::from_secs(1)).await;
    /// assert_eq!(stored.map(|s| s.instance), Some(1));
    /// # });
    /// ```
    pub async fn wait_state(
        &self,
        correlation_id: Uuid,
        state: &str,
        timeout: std::time::Duration,
    ) -> Option<StoredSaga<T>> {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if let Some(stored) = self
                    .get(correlation_id)
                    .filter(|s| s.current_state == state)
                {
                    return stored;
                }
                changed.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.ok()
    }

    /// Puts an instance in `state` (a test's starting point, or one a .NET service left): a
    /// name, or a number for a machine that stores it as an int.
    pub fn insert(&self, correlation_id: Uuid, state: impl Into<CurrentState>, instance: T) {
        self.rows().insert(
            correlation_id,
            StoredSaga {
                correlation_id,
                current_state: state.into(),
                instance,
                version: 1,
            },
        );
        self.changed.notify_waiters();
    }
}

#[ferrybus_core::async_trait]
impl<T: Clone + Serialize + Send + Sync + 'static> SagaRepository<T> for InMemorySagaRepository<T> {
    async fn load(
        &self,
        _request: &ConsumeRequest,
        correlation_id: Uuid,
    ) -> Result<Option<StoredSaga<T>>, ConsumeError> {
        Ok(self.get(correlation_id))
    }

    async fn save(
        &self,
        _request: &ConsumeRequest,
        change: SagaChange<T>,
    ) -> Result<SaveOutcome, ConsumeError> {
        let mut rows = self.rows();
        let outcome = match change {
            SagaChange::Insert {
                correlation_id,
                current_state,
                instance,
            } => {
                if rows.contains_key(&correlation_id) {
                    return Ok(SaveOutcome::Conflict);
                }
                let row = StoredSaga {
                    correlation_id,
                    current_state,
                    instance,
                    version: 1,
                };
                rows.insert(correlation_id, row);
                SaveOutcome::Saved
            }
            SagaChange::Update {
                correlation_id,
                current_state,
                instance,
                version,
            } => match rows.get_mut(&correlation_id) {
                Some(row) if row.version == version => {
                    row.current_state = current_state;
                    row.instance = instance;
                    row.version += 1;
                    SaveOutcome::Saved
                }
                _ => SaveOutcome::Conflict,
            },
            SagaChange::Delete {
                correlation_id,
                version,
            } => match rows.get(&correlation_id) {
                Some(row) if row.version == version => {
                    rows.remove(&correlation_id);
                    SaveOutcome::Saved
                }
                _ => SaveOutcome::Conflict,
            },
        };
        drop(rows);
        if outcome == SaveOutcome::Saved {
            self.changed.notify_waiters();
        }
        Ok(outcome)
    }

    async fn find(
        &self,
        _request: &ConsumeRequest,
        field: &str,
        value: &Json,
    ) -> Result<Vec<Uuid>, ConsumeError> {
        let mut found = Vec::new();
        for (id, row) in self.rows().iter() {
            let fields = serde_json::to_value(&row.instance)
                .map_err(|e| SagaError::new(SagaErrorKind::Mapping, e.to_string()))?;
            if fields.get(field) == Some(value) {
                found.push(*id);
            }
        }
        Ok(found)
    }
}
