//! [`KillSwitchLayer`]: MassTransit's `UseKillSwitch` as an endpoint layer.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use futures::future::BoxFuture;
use tower::{Layer, Service, ServiceExt};

use crate::window::{control_of, outcome, FailureFilter, Outcome, Settled, Window};
use ferrybus_core::endpoint::BoxEndpointService;
use ferrybus_core::pause::{PauseCause, Resume};
use ferrybus_core::{Delivery, Settlement};

/// The kill switch's settings, with MassTransit's names and defaults
/// (`src/MassTransit/Transports/Components/KillSwitch/KillSwitchOptions.cs`).
#[derive(Clone)]
pub struct KillSwitchOptions {
    activation_threshold: u32,
    trip_threshold: u32,
    tracking_period: Duration,
    restart_timeout: Duration,
    filter: Option<FailureFilter>,
}

impl Default for KillSwitchOptions {
    fn default() -> Self {
        Self {
            activation_threshold: 100,
            trip_threshold: 10,
            tracking_period: Duration::from_secs(60),
            restart_timeout: Duration::from_secs(60),
            filter: None,
        }
    }
}

impl KillSwitchOptions {
    /// How many messages must be consumed (within the tracking period) before the switch can
    /// trip (100 by default).
    pub fn activation_threshold(mut self, messages: u32) -> Self {
        self.activation_threshold = messages.max(1);
        self
    }

    /// The share of failed messages that trips the switch, in percent, 0–100 (10 by default;
    /// MassTransit: "should be 0-100, but seriously like 5-10").
    pub fn trip_threshold(mut self, percent: u32) -> Self {
        self.trip_threshold = percent.min(100);
        self
    }

    /// The window the counts are kept for (1 minute by default).
    pub fn tracking_period(mut self, period: Duration) -> Self {
        self.tracking_period = period.max(Duration::from_millis(1));
        self
    }

    /// How long the endpoint stays stopped once tripped (1 minute by default).
    pub fn restart_timeout(mut self, timeout: Duration) -> Self {
        self.restart_timeout = timeout;
        self
    }

    /// Counts only the failures for which `filter` returns true (MassTransit's exception
    /// filter); the rest count as successes. All consumer faults and redeliveries count by
    /// default.
    pub fn failure_if(
        mut self,
        filter: impl Fn(&Settlement) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }
}

impl std::fmt::Debug for KillSwitchOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KillSwitchOptions")
            .field("activation_threshold", &self.activation_threshold)
            .field("trip_threshold", &self.trip_threshold)
            .field("tracking_period", &self.tracking_period)
            .field("restart_timeout", &self.restart_timeout)
            .field("filtered", &self.filter.is_some())
            .finish()
    }
}

/// MassTransit's kill switch (`UseKillSwitch`, `src/MassTransit/Transports/Components/KillSwitch/`)
/// as an endpoint layer: it watches every settlement and, once more than the activation
/// threshold of messages were consumed within the tracking period and at least the trip
/// threshold of them failed (a consumer fault or a delayed redelivery), it **stops the
/// endpoint** for the restart timeout — the transport takes no deliveries, those already taken
/// go back to the queue unprocessed ([`Settlement::Abandon`]). Then it restarts: if a tracked
/// failure comes before more than the activation threshold of messages succeeded, it stops
/// again at once; otherwise it goes back to watching.
///
/// Messages that failed before the switch tripped are settled as usual (the error queue or
/// redelivery). Each endpoint the layer is added to gets a switch of its own.
///
/// ```
/// use std::time::Duration;
/// use ferrybus_resilience::{KillSwitchLayer, KillSwitchOptions};
/// use ferrybus_core::EndpointConfig;
///
/// let endpoint = EndpointConfig::new("billing-invoice").layer(KillSwitchLayer::new(
///     KillSwitchOptions::default()
///         .activation_threshold(10)
///         .trip_threshold(15)
///         .restart_timeout(Duration::from_secs(60)),
/// ));
/// # let _ = endpoint;
/// ```
#[derive(Clone, Debug, Default)]
pub struct KillSwitchLayer {
    options: KillSwitchOptions,
}

impl KillSwitchLayer {
    /// A kill switch with `options`.
    pub fn new(options: KillSwitchOptions) -> Self {
        Self { options }
    }
}

impl Layer<BoxEndpointService> for KillSwitchLayer {
    type Service = KillSwitch;

    fn layer(&self, inner: BoxEndpointService) -> KillSwitch {
        KillSwitch {
            inner,
            options: Arc::new(self.options.clone()),
            state: Arc::new(Mutex::new(State::Started(Window::new(
                self.options.tracking_period,
            )))),
        }
    }
}

/// The service of a [`KillSwitchLayer`].
#[derive(Clone)]
pub struct KillSwitch {
    inner: BoxEndpointService,
    options: Arc<KillSwitchOptions>,
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
enum State {
    /// Watching (MassTransit's `StartedKillSwitchState`).
    Started(Window),
    /// Tripped until the instant (`StoppedKillSwitchState`).
    Stopped(Instant),
    /// Back after a stop, with the successes since (`RestartingKillSwitchState`).
    Restarting(u32),
}

impl KillSwitch {
    /// Whether deliveries pass, else how long the switch stays tripped; moves a stop whose time
    /// is up to restarting.
    fn admits(&self) -> Result<(), Duration> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match *state {
            State::Stopped(until) => match until.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Err(left),
                _ => {
                    *state = State::Restarting(0);
                    Ok(())
                }
            },
            _ => Ok(()),
        }
    }

    /// Records an outcome; returns the reason to stop the endpoint, if it trips now.
    fn record(&self, outcome: Outcome) -> Option<String> {
        let options = &self.options;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let stop = match (&mut *state, outcome) {
            (_, Outcome::Neutral) | (State::Stopped(_), _) => None,
            (State::Started(window), _) => {
                let failed = outcome == Outcome::Failure;
                window
                    .record(failed, options.activation_threshold, options.trip_threshold)
                    .then(|| {
                        format!(
                            "{} of {} messages failed within {:?}",
                            window.failures, window.attempts, options.tracking_period
                        )
                    })
            }
            (State::Restarting(_), Outcome::Failure) => {
                Some("a message failed while restarting".to_owned())
            }
            (State::Restarting(successes), Outcome::Success) => {
                *successes += 1;
                if *successes > options.activation_threshold {
                    *state = State::Started(Window::new(options.tracking_period));
                }
                None
            }
        };
        if stop.is_some() {
            *state = State::Stopped(Instant::now() + options.restart_timeout);
        }
        stop
    }
}

impl Service<Delivery> for KillSwitch {
    type Response = Settlement;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Settled>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        if let Err(left) = self.admits() {
            // Taken before the endpoint stopped (or the endpoint was resumed by something
            // else): back to the queue, and make sure the endpoint stays stopped.
            if let Some(control) = control_of(&delivery) {
                control.pause(
                    PauseCause::KillSwitch,
                    "kill switch tripped",
                    Resume::After(left),
                );
            }
            return Box::pin(async { Ok(Settlement::Abandon) });
        }
        let this = self.clone();
        Box::pin(async move {
            let control = control_of(&delivery);
            let Ok(settlement) = this.inner.clone().oneshot(delivery).await;
            let outcome = outcome(&settlement, this.options.filter.as_ref());
            if let Some(reason) = this.record(outcome) {
                tracing::warn!(target: "ferrybus::resilience", %reason, restart_in = ?this.options.restart_timeout, "kill switch tripped; stopping the endpoint");
                if let Some(control) = control {
                    control.pause(
                        PauseCause::KillSwitch,
                        reason,
                        Resume::After(this.options.restart_timeout),
                    );
                }
            }
            Ok(settlement)
        })
    }
}
