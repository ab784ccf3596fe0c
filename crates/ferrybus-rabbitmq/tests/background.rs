//! Starting without a broker (`RabbitMqBusBuilder::start_background`): the bus comes up at once,
//! connects when the broker becomes reachable, and publishes wait for the connection up to the
//! publish timeout.
//!
//! "The broker is down" is a [`TcpProxy`] in this test that refuses connections until it is
//! restored: the real broker stays up for every other test running at the same time.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use ferrybus_core::error::PublishErrorKind;
use ferrybus_core::outgoing::MessageOrigin;
use ferrybus_core::{consumer_fn, Publish, SendOptions};
use ferrybus_rabbitmq::{ErrorKind, Event, RabbitMqBus, RabbitMqError};
use ferrybus_testing::{
    amqp_url, broker_socket, init_tracing, unique, wait_event, Probe, TcpProxy, WAIT,
};
use tokio::time::Instant;

test_message!(Ping, "FerrybusTests.Background:Ping");

/// A proxy to the broker that refuses connections until it is restored: "the broker is down"
/// for this test only.
async fn broker_down() -> TcpProxy {
    TcpProxy::start(&broker_socket(), false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_without_a_broker_and_catches_up_when_it_is_reachable() {
    init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("background");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Background:Ping"]);
    let proxy = broker_down().await;
    let publish_timeout = Duration::from_secs(15);
    let seen: Seen<Ping> = Arc::default();
    let bus = RabbitMqBus::builder(&proxy.amqp_url())
        .connection_name("ferrybus-tests-background")
        .connect_timeout(Duration::from_secs(2))
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(250))
        .publish_timeout(publish_timeout)
        .receive_endpoint(&queue, |e| {
            e.consumer(consumer_fn("PingConsumer", recorder(seen.clone())))
        })
        .start_background()
        .await
        .expect("the bus starts without a broker");
    let mut events = bus.events();
    assert!(!bus.is_connected());
    wait_event(&mut events, WAIT, |e| {
        matches!(e, Event::ConnectFailed { .. })
    })
    .await;

    // A send issued while the broker is down waits for it ...
    let sender = bus.clone();
    let address = format!("queue:{queue}");
    let mut sending = tokio::spawn(async move {
        sender
            .send_with(
                &address,
                &Ping { n: 1, fail: false },
                SendOptions::new().header("Tenant", "acme"),
            )
            .await
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut sending)
            .await
            .is_err(),
        "the send waits while there is no connection"
    );
    assert!(!bus.is_connected());

    // ... and completes once it is reachable, within the publish timeout.
    proxy.restore();
    let message_id = tokio::time::timeout(publish_timeout, sending)
        .await
        .expect("the send completes within the publish timeout")
        .expect("the send task")
        .expect("the send is confirmed");

    // The bus reports the connection, the endpoint declares and consumes.
    let id = message_id.to_string();
    let (mut connected, mut ready, mut consumed) = (false, false, false);
    while !(connected && ready && consumed) {
        match wait_event(&mut events, WAIT, |e| {
            matches!(
                e,
                Event::Connected { .. } | Event::EndpointReady { .. } | Event::Consumed { .. }
            )
        })
        .await
        {
            Event::Connected { generation } => {
                assert_eq!(generation, 1);
                connected = true;
            }
            Event::EndpointReady { queue: q, .. } => ready |= q == queue,
            Event::Consumed { message_id, .. } => consumed |= message_id.as_ref() == Some(&id),
            _ => {}
        }
    }
    assert!(bus.is_connected());
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [Ping { n: 1, fail: false }]
    );

    // Publishing works as after `start()`.
    let next = bus
        .send(&format!("queue:{queue}"), &Ping { n: 2, fail: false })
        .await
        .expect("sent")
        .to_string();
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Consumed { message_id: Some(m), .. } if *m == next),
    )
    .await;

    bus.stop().await;
    assert!(!bus.is_connected());
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_without_a_broker_fails_after_the_publish_timeout() {
    init_tracing();
    let proxy = broker_down().await;
    let publish_timeout = Duration::from_millis(700);
    let bus = RabbitMqBus::builder(&proxy.amqp_url())
        .connect_timeout(Duration::from_secs(1))
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(200))
        .publish_timeout(publish_timeout)
        .receive_endpoint(unique("never-declared"), |e| e)
        .start_background()
        .await
        .expect("the bus starts without a broker");

    let started = Instant::now();
    let error = bus
        .publish(&Ping { n: 1, fail: false })
        .await
        .expect_err("no broker");
    let waited = started.elapsed();
    assert_eq!(error.kind(), PublishErrorKind::NotConnected, "{error}");
    assert!(waited >= publish_timeout, "failed after {waited:?}");
    assert!(waited < Duration::from_secs(10), "failed after {waited:?}");
    let transport = error.find::<RabbitMqError>().expect("a RabbitMqError");
    assert_eq!(transport.kind(), ErrorKind::NotConnected, "{transport}");
    let text = transport.to_string();
    assert!(
        text.starts_with("not connected to the broker: no connection within 700ms")
            && text.contains("; last attempt failed: "),
        "a clear message: {text}"
    );

    let error = bus
        .send("queue:anywhere", &Ping { n: 2, fail: false })
        .await
        .expect_err("no broker");
    assert_eq!(error.kind(), PublishErrorKind::NotConnected, "{error}");

    let message = bus
        .message_factory()
        .publish(
            &Ping { n: 3, fail: false },
            &MessageOrigin::default(),
            SendOptions::new(),
        )
        .unwrap();
    let error = bus.deliver(message).await.expect_err("no broker");
    assert_eq!(error.kind(), PublishErrorKind::NotConnected, "{error}");
    let error = error.find::<RabbitMqError>().expect("a RabbitMqError");
    assert_eq!(error.kind(), ErrorKind::NotConnected, "{error}");
    assert!(!bus.is_connected());

    // Stopping does not wait for a broker.
    tokio::time::timeout(Duration::from_secs(10), bus.stop())
        .await
        .expect("stop returns without a broker");
    let error = bus
        .publish(&Ping { n: 4, fail: false })
        .await
        .expect_err("stopped");
    assert_eq!(error.kind(), PublishErrorKind::Closed, "{error}");
    let error = error.find::<RabbitMqError>().expect("a RabbitMqError");
    assert_eq!(error.kind(), ErrorKind::Stopped, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_still_fails_fast_without_a_broker() {
    let proxy = broker_down().await;
    let started = Instant::now();
    let error = RabbitMqBus::builder(&proxy.amqp_url())
        .connect_timeout(Duration::from_millis(500))
        .start()
        .await
        .expect_err("no broker");
    assert!(
        matches!(error.kind(), ErrorKind::NotConnected | ErrorKind::Timeout),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn start_background_checks_the_configuration() {
    let error = RabbitMqBus::builder("http://localhost")
        .start_background()
        .await
        .expect_err("bad scheme");
    assert_eq!(error.kind(), ErrorKind::Config);
    let error = RabbitMqBus::builder(&amqp_url())
        .receive_endpoint("twice", |e| e)
        .receive_endpoint("twice", |e| e)
        .start_background()
        .await
        .expect_err("duplicate endpoint");
    assert_eq!(error.kind(), ErrorKind::Config);
}

#[test]
fn start_background_outside_a_runtime_is_an_error_not_a_panic() {
    // Polled by an executor that is not Tokio's.
    let error = futures::executor::block_on(RabbitMqBus::builder(&amqp_url()).start_background())
        .expect_err("no runtime");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
}
