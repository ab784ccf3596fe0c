//! [`Health`]: the bus's health as a value, like MassTransit's `BusHealthResult`
//! (`src/MassTransit/Monitoring/BusHealthCheck.cs`, `Transports/BaseHost.cs`): `Healthy`,
//! `Degraded` or `Unhealthy`, with a reason per part.
//!
//! | part | unhealthy when | degraded when |
//! |---|---|---|
//! | `broker` | the bus has no open connection, or is stopped | |
//! | `endpoint:<queue>` | | it is paused (for a dependency's outage, or by hand) |
//! | `database` | the storage's probe gets no answer ([`Storage::probe`](ferrybus_core::storage::Storage::probe)) | |
//! | `outbox` | | more messages wait than the threshold, or the oldest waits longer |
//!
//! The whole is the worst of its parts.

use std::future::Future;
use std::sync::Arc;

use futures::future::{join_all, BoxFuture};
use serde::Serialize;

/// A health status, ordered from best to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum HealthStatus {
    /// Everything works.
    Healthy,
    /// Works, with a part impaired (an endpoint paused, a backlog).
    Degraded,
    /// Does not work (no broker, no database).
    Unhealthy,
}

/// One part's health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartHealth {
    /// The part (`broker`, `endpoint:billing-invoice`, `database`, `outbox`).
    pub name: String,
    /// Its status.
    pub status: HealthStatus,
    /// Why, in a few words.
    pub reason: String,
}

impl PartHealth {
    /// A part in `status` for `reason`.
    ///
    /// ```
    /// use ferrybus_telemetry::{HealthStatus, PartHealth};
    /// let part = PartHealth::new("broker", HealthStatus::Healthy, "connected to 127.0.0.1:5672");
    /// assert_eq!(part.status, HealthStatus::Healthy);
    /// ```
    pub fn new(name: impl Into<String>, status: HealthStatus, reason: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            status,
            reason: reason.into(),
        }
    }
}

/// The health of the whole: the worst part's status, and every part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    /// The worst of the parts' statuses (`Healthy` with no parts).
    pub status: HealthStatus,
    /// Every part.
    pub parts: Vec<PartHealth>,
}

type CheckFn = Arc<dyn Fn() -> BoxFuture<'static, Vec<PartHealth>> + Send + Sync>;

/// The checks that make up the service's health; cheap to clone.
///
/// ```
/// use ferrybus_telemetry::{Health, HealthStatus, PartHealth};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let health = Health::new()
///     .check(|| async { vec![PartHealth::new("cache", HealthStatus::Degraded, "slow")] });
/// let report = health.report().await;
/// assert_eq!(report.status, HealthStatus::Degraded);
/// assert_eq!(report.parts[0].reason, "slow");
/// # });
/// ```
#[derive(Clone, Default)]
pub struct Health {
    checks: Vec<CheckFn>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("checks", &self.checks.len())
            .finish()
    }
}

impl Health {
    /// No checks (always healthy).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a check answering one or more parts.
    pub fn check<F, Fut>(mut self, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<PartHealth>> + Send + 'static,
    {
        self.checks.push(Arc::new(move || Box::pin(check())));
        self
    }

    /// Runs every check (together) and reports.
    pub async fn report(&self) -> HealthReport {
        let parts: Vec<PartHealth> = join_all(self.checks.iter().map(|check| check()))
            .await
            .into_iter()
            .flatten()
            .collect();
        let status = parts
            .iter()
            .map(|p| p.status)
            .max()
            .unwrap_or(HealthStatus::Healthy);
        HealthReport { status, parts }
    }

    /// The broker connection and each receive endpoint of `bus`.
    ///
    /// ```no_run
    /// # fn run(bus: ferrybus_rabbitmq::RabbitMqBus) {
    /// let health = ferrybus_telemetry::Health::new().rabbitmq(&bus);
    /// # }
    /// ```
    #[cfg(feature = "rabbitmq")]
    pub fn rabbitmq(self, bus: &ferrybus_rabbitmq::RabbitMqBus) -> Self {
        let bus = bus.clone();
        self.check(move || {
            let bus = bus.clone();
            async move { rabbitmq_parts(&bus) }
        })
    }

    /// The database behind `storage` ([`Storage::probe`](ferrybus_core::storage::Storage::probe)) and
    /// its outbox backlog against `backlog`; the backlog is also recorded as the
    /// `ferrybus.outbox.pending` and `ferrybus.outbox.oldest_age` gauges.
    ///
    /// The backlog is read with bounded work whatever the size of the tables
    /// ([`status::backlog`](ferrybus_sea_orm::status::backlog): the waiting messages counted up
    /// to the threshold, never the inbox, each statement stopped after 2 s), at most once per
    /// [`BACKLOG_CACHE`](crate::BACKLOG_CACHE) (5 s): readiness probes, and anyone calling the
    /// route, cannot load the database. `ferrybus outbox status` has the exact figures.
    ///
    /// ```no_run
    /// # fn run(storage: ferrybus_sea_orm::PostgresStorage) {
    /// use ferrybus_telemetry::{BacklogThreshold, Health};
    /// let health = Health::new().postgres(&storage, BacklogThreshold::default());
    /// # }
    /// ```
    #[cfg(feature = "sea-orm")]
    pub fn postgres(
        self,
        storage: &ferrybus_sea_orm::PostgresStorage,
        backlog: BacklogThreshold,
    ) -> Self {
        let storage = storage.clone();
        let cached = Arc::new(crate::backlog::Cached::default());
        self.check(move || {
            let (storage, cached) = (storage.clone(), cached.clone());
            async move { crate::backlog::postgres_parts(&storage, backlog, &cached).await }
        })
    }
}

/// When the outbox backlog makes the service [`Degraded`](HealthStatus::Degraded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BacklogThreshold {
    /// More messages waiting (bus outbox + consumer outbox) than this.
    pub pending: i64,
    /// The oldest waiting longer than this.
    pub oldest_age: std::time::Duration,
}

impl Default for BacklogThreshold {
    /// 10 000 messages, or the oldest waiting 5 minutes.
    fn default() -> Self {
        Self {
            pending: 10_000,
            oldest_age: std::time::Duration::from_secs(300),
        }
    }
}

#[cfg(feature = "rabbitmq")]
fn rabbitmq_parts(bus: &ferrybus_rabbitmq::RabbitMqBus) -> Vec<PartHealth> {
    let broker = if bus.is_stopped() {
        PartHealth::new("broker", HealthStatus::Unhealthy, "the bus is stopped")
    } else if bus.is_connected() {
        let host = bus.connected_host().unwrap_or_default();
        PartHealth::new(
            "broker",
            HealthStatus::Healthy,
            format!("connected to {host}"),
        )
    } else {
        PartHealth::new(
            "broker",
            HealthStatus::Unhealthy,
            "not connected to the broker (reconnecting)",
        )
    };
    let mut parts = vec![broker];
    let connected = parts[0].status == HealthStatus::Healthy;
    for (queue, state) in bus.endpoint_states() {
        let name = format!("endpoint:{queue}");
        parts.push(match state {
            ferrybus_core::pause::EndpointState::Paused(paused) => PartHealth::new(
                name,
                HealthStatus::Degraded,
                format!("paused ({:?}): {}", paused.cause, paused.reason),
            ),
            _ if !connected => PartHealth::new(
                name,
                HealthStatus::Unhealthy,
                "not consuming: no broker connection",
            ),
            _ => PartHealth::new(name, HealthStatus::Healthy, "consuming"),
        });
    }
    parts
}
