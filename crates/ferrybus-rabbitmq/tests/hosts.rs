//! Host lists on the real broker, without a cluster: two `TcpProxy`s in front of the same
//! broker stand for two nodes. The bus connects to the first host that answers, fails over to
//! the other when its connection is cut, and keeps consuming. (`tests/tests/cluster.rs` does it
//! on a real three-node cluster.)
#![allow(missing_docs, unreachable_pub)]

mod common;

use common::*;
use ferrybus_core::{consumer_fn, Publish};
use ferrybus_rabbitmq::{Event, RabbitMqBus};
use ferrybus_testing::{
    amqp_url, broker_socket, eventually, unique, wait_event, Probe, TcpProxy, WAIT,
};

test_message!(Ping, "FerrybusTests.Hosts:Ping");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_to_the_first_host_that_answers_and_fails_over_to_the_next() {
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("hosts");
    probe.track_endpoint(&queue);
    let dead = TcpProxy::start(&broker_socket(), false).await;
    let a = TcpProxy::start(&broker_socket(), true).await;
    let b = TcpProxy::start(&broker_socket(), true).await;
    let seen = Seen::<Ping>::default();
    let record = recorder(seen.clone());
    // A host that refuses, then two that answer.
    let bus = start(
        RabbitMqBus::cluster([dead.amqp_url(), a.amqp_url(), b.amqp_url()]).receive_endpoint(
            &queue,
            |e| {
                e.bind_message_types(false)
                    .consumer(consumer_fn("Pings", record))
            },
        ),
    )
    .await;
    assert_eq!(bus.connected_host(), Some(a.addr().to_string()));
    assert_eq!(
        bus.host().to_string(),
        format!("rabbitmq://{}/", dead.addr()),
        "addressed with the first host's name, as MassTransit does"
    );
    let mut events = bus.events();
    let sender = start(RabbitMqBus::builder(&amqp_url())).await;
    sender
        .send(&format!("queue:{queue}"), &Ping { n: 1, fail: false })
        .await
        .unwrap();
    eventually("the first ping", WAIT, || async {
        (seen.lock().unwrap().len() == 1).then_some(())
    })
    .await;

    // The node it is on goes away: it fails over to the next one and carries on.
    a.cut();
    wait_event(&mut events, WAIT, |e| {
        matches!(e, Event::Reconnected { .. })
    })
    .await;
    assert_eq!(bus.connected_host(), Some(b.addr().to_string()));
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::EndpointReady { queue: q, .. } if *q == queue),
    )
    .await;
    sender
        .send(&format!("queue:{queue}"), &Ping { n: 2, fail: false })
        .await
        .unwrap();
    // The first ping may come again (its ack can be cut with the connection): wait for the
    // second one itself.
    eventually("the second ping, through the other host", WAIT, || async {
        seen.lock().unwrap().iter().any(|p| p.n == 2).then_some(())
    })
    .await;
    sender.stop().await;
    bus.stop().await;
    probe.cleanup().await;
}

/// A password with RFC 3986 sub-delimiters is masked whole wherever the transport shows a URI:
/// the builder's `Debug`, a configuration error, a connection error.
#[tokio::test]
async fn passwords_with_sub_delimiters_never_appear() {
    for password in ["pa;ss(w)rd", "pa!ss$w&rd", "pa'ss*w+rd", "pa,ss=word"] {
        let unreachable = format!("amqp://app:{password}@127.0.0.1:1/%2f");
        let builder = RabbitMqBus::builder(&unreachable)
            .connect_timeout(std::time::Duration::from_millis(200));
        let shown = format!("{builder:?}");
        assert!(!shown.contains(password), "{shown}");
        assert!(shown.contains("app:***@"), "{shown}");
        let error = builder.start().await.unwrap_err().to_string();
        assert!(!error.contains(password), "{error}");

        let malformed = format!("amqp://app:{password}@,:bad port/%2f");
        let error = RabbitMqBus::builder(&malformed)
            .start()
            .await
            .unwrap_err()
            .to_string();
        assert!(!error.contains(password), "{error}");
    }
}

/// A prefetch count of 0 (AMQP: no limit) with no delivery running is refused before the bus
/// connects, with the reason.
#[tokio::test]
async fn a_prefetch_of_zero_is_refused() {
    let error = RabbitMqBus::builder(&amqp_url())
        .receive_endpoint(unique("prefetch-zero"), |e| {
            e.prefetch(0).consumer(consumer_fn(
                "Zero",
                |_: ferrybus_core::ConsumeContext<Ping>| async {
                    Ok::<_, ferrybus_core::ConsumeError>(())
                },
            ))
        })
        .start()
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("prefetch count of 0"), "{error}");
}
