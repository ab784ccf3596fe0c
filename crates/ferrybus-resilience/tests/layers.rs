//! The resilience layers on a built endpoint, driven as a transport drives it: the transient
//! guard, the kill switch, the circuit breaker, the rate and concurrency limits. Time is
//! tokio's paused clock, so waits are exact and instant.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrybus_core::address::HostAddress;
use ferrybus_core::endpoint::Endpoint;
use ferrybus_core::error::PublishErrorKind;
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::outgoing::MessageOrigin;
use ferrybus_core::outgoing::MessageSink;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::pause::{Dependency, EndpointState, PauseCause, Resume};
use ferrybus_core::BusConfig;
use ferrybus_core::{
    async_trait, consumer_fn, ConsumeContext, ConsumeError, Delivery, EndpointConfig, Message,
    PublishError, RetryPolicy, SendOptions, Settlement, SettlementKind,
};
use ferrybus_resilience::{
    CircuitBreakerLayer, CircuitBreakerOptions, KillSwitchLayer, KillSwitchOptions, RateLimitLayer,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Tests")]
struct Work {
    /// `ok`, `fail`, `refused` (an io error), `broker` (a publish that found no connection),
    /// `block` (waits on the gate).
    what: String,
}

struct NullSink;

#[async_trait]
impl MessageSink for NullSink {
    async fn deliver(&self, _message: OutgoingMessage) -> Result<(), PublishError> {
        Ok(())
    }
}

fn factory() -> MessageFactory {
    MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"))
}

fn delivery(what: &str) -> Delivery {
    let message = factory()
        .send(
            "queue:work",
            &Work { what: what.into() },
            &MessageOrigin::default(),
            SendOptions::new(),
        )
        .unwrap();
    Delivery::new(message.body).content_type(message.content_type)
}

#[derive(Clone, Default)]
struct Calls(Arc<AtomicU32>);

impl Calls {
    fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

fn build(config: EndpointConfig, calls: &Calls, gate: Arc<tokio::sync::Semaphore>) -> Endpoint {
    let calls = calls.clone();
    let config = config.consumer(consumer_fn("Worker", move |ctx: ConsumeContext<Work>| {
        let calls = calls.clone();
        let gate = gate.clone();
        async move {
            calls.0.fetch_add(1, Ordering::SeqCst);
            match ctx.message().what.as_str() {
                "fail" => Err(ConsumeError::handler("boom")),
                "refused" => {
                    Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
                }
                "broker" => Err(PublishError::new(
                    PublishErrorKind::NotConnected,
                    "no connection within 30s",
                )
                .into()),
                "block" => {
                    let _permit = gate.acquire().await.unwrap();
                    Ok(())
                }
                _ => Ok(()),
            }
        }
    }));
    let factory = factory();
    let context = BusConfig::default().endpoint_context(
        &config,
        factory.host().entity_address("work"),
        Arc::new(NullSink),
        Arc::new(factory),
        CancellationToken::new(),
    );
    config.build(context)
}

async fn run(endpoint: &Endpoint, what: &str) -> SettlementKind {
    let Ok(settlement) = endpoint.clone().oneshot(delivery(what)).await;
    settlement.kind()
}

fn open_gate() -> Arc<tokio::sync::Semaphore> {
    Arc::new(tokio::sync::Semaphore::new(1000))
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_pauses_the_endpoint_without_spending_a_retry() {
    let calls = Calls::default();
    let endpoint = build(
        EndpointConfig::new("work").retry(RetryPolicy::immediate(3)),
        &calls,
        open_gate(),
    );
    assert_eq!(run(&endpoint, "refused").await, SettlementKind::Abandon);
    assert_eq!(calls.get(), 1, "no retry was spent on it");
    let EndpointState::Paused(paused) = endpoint.control().state() else {
        panic!("the endpoint pauses");
    };
    assert_eq!(paused.cause, PauseCause::Transient(Dependency::Other));
    assert_eq!(paused.resume, Resume::WhenAvailable(Dependency::Other));

    // A delivery taken before the pause took effect goes back without running.
    assert_eq!(run(&endpoint, "ok").await, SettlementKind::Abandon);
    assert_eq!(calls.get(), 1);

    // What the transport does: wait, resume, consume again.
    endpoint.control().until_resumed().await;
    assert_eq!(run(&endpoint, "ok").await, SettlementKind::Ack);

    // The broker's failures pause it too; the consumer's own errors are retried and faulted.
    assert_eq!(run(&endpoint, "broker").await, SettlementKind::Abandon);
    let EndpointState::Paused(paused) = endpoint.control().state() else {
        panic!("the endpoint pauses");
    };
    assert_eq!(paused.cause, PauseCause::Transient(Dependency::Broker));
    endpoint.control().until_resumed().await;
    let before = calls.get();
    assert_eq!(run(&endpoint, "fail").await, SettlementKind::Fault);
    assert_eq!(calls.get() - before, 4, "one attempt and three retries");
    assert!(!endpoint.control().is_paused());
}

#[tokio::test(start_paused = true)]
async fn without_the_guard_transient_failures_are_retried_and_faulted() {
    let calls = Calls::default();
    let endpoint = build(
        EndpointConfig::new("work")
            .retry(RetryPolicy::immediate(1))
            .pause_on_transient(false),
        &calls,
        open_gate(),
    );
    assert_eq!(run(&endpoint, "refused").await, SettlementKind::Fault);
    assert_eq!(calls.get(), 2);
    assert!(!endpoint.control().is_paused());
}

#[tokio::test(start_paused = true)]
async fn a_user_rule_makes_an_error_transient() {
    let calls = Calls::default();
    let endpoint = build(
        EndpointConfig::new("work")
            .transient_if(|e| (e.to_string() == "boom").then_some(Dependency::Other)),
        &calls,
        open_gate(),
    );
    assert_eq!(run(&endpoint, "fail").await, SettlementKind::Abandon);
    assert!(endpoint.control().is_paused());
}

#[tokio::test(start_paused = true)]
async fn the_kill_switch_stops_the_endpoint_then_restarts_it() {
    let calls = Calls::default();
    let restart = Duration::from_secs(60);
    let endpoint = build(
        EndpointConfig::new("work").layer(KillSwitchLayer::new(
            KillSwitchOptions::default()
                .activation_threshold(4)
                .trip_threshold(50)
                .restart_timeout(restart),
        )),
        &calls,
        open_gate(),
    );
    for what in ["ok", "ok", "fail", "ok"] {
        run(&endpoint, what).await;
    }
    assert!(
        !endpoint.control().is_paused(),
        "4 attempts: not active yet"
    );
    assert_eq!(run(&endpoint, "fail").await, SettlementKind::Fault);
    assert!(!endpoint.control().is_paused(), "2 of 5 failed: under 50 %");
    assert_eq!(run(&endpoint, "fail").await, SettlementKind::Fault);
    let EndpointState::Paused(paused) = endpoint.control().state() else {
        panic!("3 of 6 failed: tripped");
    };
    assert_eq!(paused.cause, PauseCause::KillSwitch);
    assert_eq!(paused.resume, Resume::After(restart));

    // Stopped: deliveries taken already go back without running.
    let before = calls.get();
    assert_eq!(run(&endpoint, "ok").await, SettlementKind::Abandon);
    assert_eq!(calls.get(), before);

    // Restarting: a failure stops it again at once.
    endpoint.control().until_resumed().await;
    assert_eq!(run(&endpoint, "fail").await, SettlementKind::Fault);
    assert!(endpoint.control().is_paused(), "a failure while restarting");
    endpoint.control().until_resumed().await;

    // More than the activation threshold of successes: watching again, from zero.
    for _ in 0..5 {
        assert_eq!(run(&endpoint, "ok").await, SettlementKind::Ack);
    }
    assert_eq!(run(&endpoint, "fail").await, SettlementKind::Fault);
    assert!(!endpoint.control().is_paused(), "started again: 1 attempt");
}

#[tokio::test(start_paused = true)]
async fn the_circuit_breaker_opens_half_opens_and_closes() {
    let calls = Calls::default();
    let endpoint = build(
        EndpointConfig::new("work").layer(CircuitBreakerLayer::new(
            CircuitBreakerOptions::default()
                .active_threshold(2)
                .trip_threshold(50)
                .reset_timeouts([Duration::from_secs(1), Duration::from_secs(10)]),
        )),
        &calls,
        open_gate(),
    );
    run(&endpoint, "ok").await;
    run(&endpoint, "fail").await;
    assert!(!endpoint.control().is_paused());
    run(&endpoint, "fail").await;
    let EndpointState::Paused(paused) = endpoint.control().state() else {
        panic!("2 of 3 failed: open");
    };
    assert_eq!(paused.cause, PauseCause::CircuitBreaker);
    assert_eq!(paused.resume, Resume::After(Duration::from_secs(1)));
    endpoint.control().until_resumed().await;

    // Half-open: a failure opens it again, with the next reset timeout.
    run(&endpoint, "fail").await;
    let EndpointState::Paused(paused) = endpoint.control().state() else {
        panic!("open again");
    };
    assert_eq!(paused.resume, Resume::After(Duration::from_secs(10)));
    endpoint.control().until_resumed().await;

    // Half-open: more than the active threshold of successes close it.
    for _ in 0..3 {
        assert_eq!(run(&endpoint, "ok").await, SettlementKind::Ack);
    }
    run(&endpoint, "fail").await;
    assert!(
        !endpoint.control().is_paused(),
        "closed: counting from zero"
    );
}

#[tokio::test(start_paused = true)]
async fn the_rate_limit_lets_so_many_start_per_interval() {
    let calls = Calls::default();
    let endpoint = build(
        EndpointConfig::new("work").layer(RateLimitLayer::new(2, Duration::from_secs(1))),
        &calls,
        open_gate(),
    );
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let endpoint = endpoint.clone();
            tokio::spawn(async move { run(&endpoint, "ok").await })
        })
        .collect();
    settle_tasks().await;
    assert_eq!(calls.get(), 2, "two in the first interval");
    tokio::time::advance(Duration::from_secs(1)).await;
    settle_tasks().await;
    assert_eq!(calls.get(), 4, "two more in the second");
    tokio::time::advance(Duration::from_secs(1)).await;
    for task in tasks {
        assert_eq!(task.await.unwrap(), SettlementKind::Ack);
    }
    assert_eq!(calls.get(), 5);
}

#[tokio::test(start_paused = true)]
async fn towers_concurrency_limit_works_as_an_endpoint_layer() {
    let calls = Calls::default();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let endpoint = build(
        EndpointConfig::new("work").layer(tower::limit::ConcurrencyLimitLayer::new(2)),
        &calls,
        gate.clone(),
    );
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let endpoint = endpoint.clone();
            tokio::spawn(async move { run(&endpoint, "block").await })
        })
        .collect();
    settle_tasks().await;
    assert_eq!(calls.get(), 2, "two at once");
    gate.add_permits(1000);
    for task in tasks {
        assert_eq!(task.await.unwrap(), SettlementKind::Ack);
    }
    assert_eq!(calls.get(), 5);
}

#[tokio::test(start_paused = true)]
async fn layers_find_the_control_in_the_delivery() {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let record = seen.clone();
    let calls = Calls::default();
    let endpoint = build(
        EndpointConfig::new("work").layer(tower::layer::layer_fn(
            move |inner: ferrybus_core::endpoint::BoxEndpointService| {
                let record = record.clone();
                ferrybus_core::endpoint::BoxEndpointService::new(tower::service_fn(
                    move |delivery: Delivery| {
                        let control = delivery
                            .extensions
                            .get::<ferrybus_core::pause::EndpointControl>()
                            .map(|c| c.name().to_owned());
                        *record.lock().unwrap() = control;
                        inner.clone().oneshot(delivery)
                    },
                ))
            },
        )),
        &calls,
        open_gate(),
    );
    let _: Settlement = endpoint.clone().oneshot(delivery("ok")).await.unwrap();
    assert_eq!(seen.lock().unwrap().as_deref(), Some("work"));
}

/// Lets spawned tasks run until they wait on something.
async fn settle_tasks() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}
