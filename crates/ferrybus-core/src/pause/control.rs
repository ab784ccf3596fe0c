//! [`EndpointControl`]: the pause switch of one receive endpoint, shared by the transport (which
//! stops taking deliveries while it is paused) and whatever pauses it (the transient-failure
//! guard, a kill switch, a circuit breaker, the transport itself after a failed move).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::watch;

/// What a transient failure is a failure of: what the endpoint waits for before it resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dependency {
    /// The bus's storage (PostgreSQL): connection refused or reset, pool timeout, server
    /// shutting down or starting up (SQLSTATE `57P01`, `57P03`, class `08`).
    Storage,
    /// The message broker: not connected, no publisher confirm in time.
    Broker,
    /// Something else the consumer talks to (a connection refused, reset or timed out).
    Other,
}

/// Why an endpoint is paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PauseCause {
    /// A dependency (the database, the broker …) failed in a way that is not the message's
    /// fault; the endpoint resumes once it answers again.
    Transient(Dependency),
    /// A kill switch tripped (`ferrybus-resilience`'s `KillSwitchLayer`).
    KillSwitch,
    /// A circuit breaker opened (`ferrybus-resilience`'s `CircuitBreakerLayer`).
    CircuitBreaker,
    /// Paused by hand ([`EndpointControl::pause`] with this cause).
    Manual,
}

impl PauseCause {
    /// A lowercase name: `transient:<dependency>`, `kill-switch`, `circuit-breaker`, `manual`.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseCause::Transient(Dependency::Storage) => "transient:storage",
            PauseCause::Transient(Dependency::Broker) => "transient:broker",
            PauseCause::Transient(Dependency::Other) => "transient:other",
            PauseCause::KillSwitch => "kill-switch",
            PauseCause::CircuitBreaker => "circuit-breaker",
            PauseCause::Manual => "manual",
        }
    }
}

/// When a paused endpoint resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resume {
    /// After this long (a kill switch's restart timeout, a circuit breaker's reset timeout).
    After(Duration),
    /// Once the dependency's probe answers (probed with a growing back-off, see
    /// [`EndpointControl::set_probe`]); without a probe, after the back-off alone, and the next
    /// delivery is the probe.
    WhenAvailable(Dependency),
}

/// A paused endpoint: why, since when, until what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paused {
    /// Why.
    pub cause: PauseCause,
    /// What failed, in one line (never a password: errors of URLs are redacted upstream).
    pub reason: String,
    /// When it paused.
    pub since: SystemTime,
    /// What resumes it.
    pub resume: Resume,
}

/// The state of a receive endpoint, for health checks and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointState {
    /// Taking deliveries.
    #[default]
    Running,
    /// Not taking deliveries (those not yet settled were given back to the broker).
    Paused(Paused),
}

impl EndpointState {
    /// Whether the endpoint is paused.
    pub fn is_paused(&self) -> bool {
        matches!(self, EndpointState::Paused(_))
    }
}

/// Answers whether a dependency is reachable again.
pub type ProbeFn = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

/// The pause switch of one receive endpoint. Cheap to clone; every clone is the same switch.
///
/// The transport watches it: while [paused](EndpointState::Paused) it takes no deliveries
/// (RabbitMQ: `basic.cancel`, in-flight deliveries finish, the prefetched rest goes back to the
/// queue), it runs [`until_resumed`](Self::until_resumed) and then consumes again. Endpoint
/// layers find it in every delivery's extensions
/// (`delivery.extensions.get::<EndpointControl>()`).
///
/// ```
/// use std::time::Duration;
/// use ferrybus_core::pause::{EndpointControl, PauseCause, Resume};
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// let control = EndpointControl::new("billing-invoice");
/// assert!(control.pause(PauseCause::Manual, "maintenance", Resume::After(Duration::from_secs(5))));
/// assert!(control.state().is_paused());
/// // A second pause while paused changes nothing.
/// assert!(!control.pause(PauseCause::KillSwitch, "tripped", Resume::After(Duration::from_secs(1))));
/// control.until_resumed().await; // what the transport runs
/// assert!(!control.state().is_paused());
/// # });
/// ```
#[derive(Clone)]
pub struct EndpointControl {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    state: watch::Sender<EndpointState>,
    probes: Mutex<HashMap<Dependency, ProbeFn>>,
    /// Consecutive pauses for transient failures without a delivery settled in between: the
    /// back-off grows with them.
    streak: Mutex<u32>,
}

/// The first probe waits this long; each later one twice as long, up to [`MAX_PROBE_DELAY`].
const MIN_PROBE_DELAY: Duration = Duration::from_millis(500);
/// The longest wait between two probes.
const MAX_PROBE_DELAY: Duration = Duration::from_secs(15);

impl EndpointControl {
    /// A running endpoint named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: name.into(),
                state: watch::channel(EndpointState::Running).0,
                probes: Mutex::new(HashMap::new()),
                streak: Mutex::new(0),
            }),
        }
    }

    /// The endpoint's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The state now.
    pub fn state(&self) -> EndpointState {
        self.inner.state.borrow().clone()
    }

    /// Whether the endpoint is paused now.
    pub fn is_paused(&self) -> bool {
        self.inner.state.borrow().is_paused()
    }

    /// Every change of state from now on.
    pub fn subscribe(&self) -> watch::Receiver<EndpointState> {
        self.inner.state.subscribe()
    }

    /// Registers how to tell that `dependency` answers again (the storage: `SELECT 1`; the
    /// broker: an open connection).
    pub fn set_probe<F, Fut>(&self, dependency: Dependency, probe: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        let probe: ProbeFn = Arc::new(move || Box::pin(probe()));
        self.inner
            .probes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dependency, probe);
    }

    /// Pauses the endpoint unless it is paused already; returns whether this call paused it.
    pub fn pause(&self, cause: PauseCause, reason: impl Into<String>, resume: Resume) -> bool {
        let reason = reason.into();
        let paused = self.inner.state.send_if_modified(|state| {
            if state.is_paused() {
                return false;
            }
            *state = EndpointState::Paused(Paused {
                cause,
                reason: reason.clone(),
                since: SystemTime::now(),
                resume,
            });
            true
        });
        if paused {
            if matches!(resume, Resume::WhenAvailable(_)) {
                *self.inner.streak.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            }
            tracing::warn!(target: "ferrybus::resilience", endpoint = %self.inner.name, cause = cause.as_str(), %reason, "endpoint paused");
        }
        paused
    }

    /// Resumes the endpoint now (the transport consumes again).
    pub fn resume(&self) {
        let resumed = self.inner.state.send_if_modified(|state| {
            let was = state.is_paused();
            *state = EndpointState::Running;
            was
        });
        if resumed {
            tracing::info!(target: "ferrybus::resilience", endpoint = %self.inner.name, "endpoint resumed");
        }
    }

    /// A delivery was settled for good (acknowledged, faulted …): transient failures are over,
    /// the next pause starts the back-off from the beginning.
    pub fn settled(&self) {
        let mut streak = self.inner.streak.lock().unwrap_or_else(|e| e.into_inner());
        if *streak != 0 {
            *streak = 0;
        }
    }

    /// Resolves once the endpoint is paused (at once if it is).
    pub async fn paused(&self) {
        let mut rx = self.inner.state.subscribe();
        let _ = rx.wait_for(EndpointState::is_paused).await;
    }

    /// What the transport runs while the endpoint is paused: waits until the resume condition
    /// holds (the delay has passed; the dependency's probe answers, probed with a growing
    /// back-off), resumes and returns how long the endpoint was paused. Returns at once if it is
    /// running; also returns when someone else resumes it.
    pub async fn until_resumed(&self) -> Duration {
        let EndpointState::Paused(paused) = self.state() else {
            return Duration::ZERO;
        };
        let mut rx = self.inner.state.subscribe();
        let resumed_elsewhere = async move {
            let _ = rx.wait_for(|s| !s.is_paused()).await;
        };
        tokio::select! {
            () = self.wait_condition(paused.resume) => self.resume(),
            () = resumed_elsewhere => {}
        }
        paused.since.elapsed().unwrap_or_default()
    }

    async fn wait_condition(&self, resume: Resume) {
        match resume {
            Resume::After(delay) => tokio::time::sleep(delay).await,
            Resume::WhenAvailable(dependency) => {
                let probe = self
                    .inner
                    .probes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&dependency)
                    .cloned();
                let streak = *self.inner.streak.lock().unwrap_or_else(|e| e.into_inner());
                let mut delay = probe_delay(streak);
                loop {
                    tokio::time::sleep(jitter(delay)).await;
                    let Some(probe) = &probe else { return };
                    if probe().await {
                        return;
                    }
                    tracing::debug!(target: "ferrybus::resilience", endpoint = %self.inner.name, ?dependency, "dependency still unavailable");
                    delay = (delay * 2).min(MAX_PROBE_DELAY);
                }
            }
        }
    }
}

/// The first wait of the `streak`-th pause in a row: 0.5 s, 1 s, 2 s … up to 15 s.
fn probe_delay(streak: u32) -> Duration {
    let doublings = streak.saturating_sub(1).min(8);
    (MIN_PROBE_DELAY * 2u32.pow(doublings)).min(MAX_PROBE_DELAY)
}

/// ±20 %, so endpoints (and processes) paused together do not probe together.
fn jitter(delay: Duration) -> Duration {
    delay.mul_f64(0.8 + fastrand::f64() * 0.4)
}

impl std::fmt::Debug for EndpointControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointControl")
            .field("name", &self.inner.name)
            .field("state", &*self.inner.state.borrow())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn probe_delays_grow_to_the_cap() {
        assert_eq!(probe_delay(0), MIN_PROBE_DELAY);
        assert_eq!(probe_delay(1), MIN_PROBE_DELAY);
        assert_eq!(probe_delay(2), Duration::from_secs(1));
        assert_eq!(probe_delay(30), MAX_PROBE_DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn resumes_once_the_probe_answers() {
        let control = EndpointControl::new("e");
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        control.set_probe(Dependency::Storage, move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move { n >= 2 }
        });
        assert!(control.pause(
            PauseCause::Transient(Dependency::Storage),
            "connection refused",
            Resume::WhenAvailable(Dependency::Storage)
        ));
        control.until_resumed().await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(control.state(), EndpointState::Running);
    }

    #[tokio::test(start_paused = true)]
    async fn a_manual_resume_ends_the_wait() {
        let control = EndpointControl::new("e");
        control.pause(
            PauseCause::Manual,
            "x",
            Resume::After(Duration::from_secs(3600)),
        );
        let waiter = tokio::spawn({
            let control = control.clone();
            async move { control.until_resumed().await }
        });
        tokio::task::yield_now().await;
        control.resume();
        waiter.await.unwrap();
        assert!(!control.is_paused());
    }
}
