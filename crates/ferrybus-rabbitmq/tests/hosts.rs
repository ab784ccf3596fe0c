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
