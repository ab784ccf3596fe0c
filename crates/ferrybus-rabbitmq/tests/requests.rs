//! Requests on the real broker: answered with either of two response types (or a fault), made
//! from inside a consumer (carrying its consume context), and bounded by their timeout while
//! the send itself cannot go out.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Envelope, Publish, SendOptions};
use ferrybus_rabbitmq::{ConsumeContextRequestExt, EitherResponse, ErrorKind, RabbitMqBus};
use ferrybus_testing::{amqp_url, broker_socket, eventually, unique, Probe, TcpProxy, WAIT};
use uuid::Uuid;

test_message!(CheckOrder, "FerrybusTests.Requests:CheckOrder");
test_message!(OrderFound, "FerrybusTests.Requests:OrderFound");
test_message!(OrderNotFound, "FerrybusTests.Requests:OrderNotFound");
test_message!(ShipOrder, "FerrybusTests.Requests:ShipOrder");

/// Answers even numbers with `OrderFound`, odd ones with `OrderNotFound`, and faults `fail`.
fn responder(seen: Arc<Mutex<Vec<Envelope>>>) -> impl ferrybus_core::Consumer<CheckOrder> {
    consumer_fn(
        "CheckOrderConsumer",
        move |ctx: ConsumeContext<CheckOrder>| {
            seen.lock().unwrap().push(ctx.envelope().clone());
            async move {
                let CheckOrder { n, fail } = *ctx.message();
                if fail {
                    return Err(ConsumeError::handler("the order book is closed"));
                }
                if n % 2 == 0 {
                    ctx.respond(&OrderFound { n, fail }).await?;
                } else {
                    ctx.respond(&OrderNotFound { n, fail }).await?;
                }
                Ok(())
            }
        },
    )
}

fn track(probe: &Probe, queues: &[&str]) {
    for queue in queues {
        probe.track_endpoint(queue);
    }
    probe.track(
        &[],
        &[
            "FerrybusTests.Requests:CheckOrder",
            "FerrybusTests.Requests:ShipOrder",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_answered_with_either_of_two_response_types() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("check-order");
    track(&probe, &[&queue]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&queue, |e| e.consumer(responder(seen.clone()))),
    )
    .await;
    let client = bus
        .request_client::<CheckOrder>(&format!("queue:{queue}"))
        .timeout(Duration::from_secs(20));

    let found = client
        .get_either_response::<OrderFound, OrderNotFound>(&CheckOrder { n: 2, fail: false })
        .await
        .unwrap();
    let EitherResponse::First(found) = found else {
        panic!("OrderFound expected, got {found:?}");
    };
    assert_eq!(found.message.n, 2);

    let missing = client
        .get_either_response::<OrderFound, OrderNotFound>(&CheckOrder { n: 3, fail: false })
        .await
        .unwrap();
    let EitherResponse::Second(missing) = missing else {
        panic!("OrderNotFound expected, got {missing:?}");
    };
    assert_eq!(missing.message.n, 3);

    let request = seen.lock().unwrap()[0].clone();
    assert_eq!(
        request.headers.get("MT-Request-AcceptType"),
        Some(&serde_json::json!([
            "urn:message:FerrybusTests.Requests:OrderFound",
            "urn:message:FerrybusTests.Requests:OrderNotFound"
        ])),
        "both accepted, in order"
    );
    assert_eq!(found.envelope.request_id, request.request_id);

    let fault = client
        .get_either_response::<OrderFound, OrderNotFound>(&CheckOrder { n: 4, fail: true })
        .await
        .unwrap_err();
    assert_eq!(fault.kind(), ErrorKind::Fault);
    assert!(
        fault.to_string().contains("the order book is closed"),
        "{fault}"
    );
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_made_inside_a_consumer_carries_its_consume_context() {
    let probe = Probe::connect(&amqp_url()).await;
    let (shipping, orders) = (unique("ship-order"), unique("check-order"));
    track(&probe, &[&shipping, &orders]);
    let requests = Arc::new(Mutex::new(Vec::new()));
    let answers = Arc::new(Mutex::new(Vec::new()));
    let a = answers.clone();
    let address = format!("queue:{orders}");
    let shipper = consumer_fn(
        "ShipOrderConsumer",
        move |ctx: ConsumeContext<ShipOrder>| {
            let (a, address) = (a.clone(), address.clone());
            async move {
                let client = ctx
                    .request_client::<CheckOrder>(&address)?
                    .timeout(Duration::from_secs(20));
                let check = CheckOrder {
                    n: ctx.message().n,
                    fail: false,
                };
                let answer = client.get_response::<OrderFound>(&check).await?;
                a.lock().unwrap().push(answer.message.n);
                Ok(())
            }
        },
    );
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&shipping, |e| e.consumer(shipper))
            .receive_endpoint(&orders, |e| e.consumer(responder(requests.clone()))),
    )
    .await;
    let (conversation, correlation) = (Uuid::now_v7(), Uuid::now_v7());
    let options = SendOptions::new()
        .conversation_id(conversation)
        .correlation_id(correlation)
        .header("Tenant", "acme");
    bus.send_with(
        &format!("queue:{shipping}"),
        &ShipOrder { n: 6, fail: false },
        options,
    )
    .await
    .unwrap();
    eventually("the answer inside the consumer", WAIT, || async {
        (!answers.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert_eq!(*answers.lock().unwrap(), [6]);
    let request = requests.lock().unwrap()[0].clone();
    assert_eq!(
        request.conversation_id,
        Some(conversation),
        "same conversation"
    );
    assert_eq!(
        request.initiator_id,
        Some(correlation),
        "initiated by the consumed message"
    );
    assert!(
        request
            .source_address
            .as_deref()
            .is_some_and(|a| a.ends_with(&shipping)),
        "sent from the consumer's endpoint: {:?}",
        request.source_address
    );
    assert_eq!(request.headers.get_str("Tenant"), Some("acme"));
    assert_eq!(
        request.response_address.as_deref(),
        Some(bus.address()),
        "answered on the bus's own queue"
    );
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_made_outside_a_rabbitmq_bus_is_refused() {
    let errors = Arc::new(Mutex::new(Vec::new()));
    let e = errors.clone();
    let shipper = consumer_fn("Shipper", move |ctx: ConsumeContext<ShipOrder>| {
        let refused = ctx
            .request_client::<CheckOrder>("queue:orders")
            .unwrap_err();
        e.lock()
            .unwrap()
            .push((refused.kind(), refused.to_string()));
        async { Ok::<_, ConsumeError>(()) }
    });
    let harness = ferrybus_core::memory::TestHarness::builder()
        .receive_endpoint("ship", |e| e.consumer(shipper))
        .start()
        .await
        .unwrap();
    let id = harness
        .publish(&ShipOrder { n: 1, fail: false })
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    let (kind, text) = errors.lock().unwrap()[0].clone();
    assert_eq!(kind, ErrorKind::Config);
    assert!(text.contains("does not run on a RabbitMQ bus"), "{text}");
    harness.stop().await;
}

/// The broker is cut off after the bus started (through a proxy only this test uses): a send
/// waits for the connection up to the publish timeout (a minute here); the request gives up at
/// its own, far shorter, timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_timeout_bounds_a_send_that_cannot_go_out() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("check-order");
    track(&probe, &[&queue]);
    let proxy = TcpProxy::start(&broker_socket(), true).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let bus = start(
        RabbitMqBus::builder(&proxy.amqp_url())
            .publish_timeout(Duration::from_secs(60))
            .receive_endpoint(&queue, |e| e.consumer(responder(seen.clone()))),
    )
    .await;
    let client = bus
        .request_client::<CheckOrder>(&format!("queue:{queue}"))
        .timeout(Duration::from_secs(2));
    // Answered while the broker is reachable (the bus's response queue exists from then on).
    client
        .get_response::<OrderFound>(&CheckOrder { n: 2, fail: false })
        .await
        .unwrap();
    proxy.cut();
    eventually("the bus sees the connection lost", WAIT, || async {
        (!bus.is_connected()).then_some(())
    })
    .await;
    let error = client
        .get_response::<OrderFound>(&CheckOrder { n: 4, fail: false })
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    assert!(error.to_string().contains("not sent"), "{error}");
    assert_eq!(bus.pending_requests(), 0, "the request is forgotten");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the second request never left"
    );
    proxy.restore();
    bus.stop().await;
    probe.cleanup().await;
}
