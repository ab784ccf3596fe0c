//! Failure paths against the real broker: `_error`, `_skipped`, faults, retry, delayed
//! redelivery, quorum queues, request/response.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, EndpointConfig, Envelope, RetryPolicy,
};
use ferrybus_rabbitmq::{DelayMode, ErrorKind, Event, RabbitMqBus, ReceiveEndpoint};
use lapin::types::{AMQPValue, FieldTable};

fn failing<M: ferrybus_core::Message>(attempts: Arc<AtomicU32>) -> impl ferrybus_core::Consumer<M> {
    consumer_fn("FailingConsumer", move |_ctx: ConsumeContext<M>| {
        attempts.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(ConsumeError::handler("card declined")) }
    })
}

fn envelope_body(id: &uuid::Uuid, urn: &str, extra: serde_json::Value) -> Vec<u8> {
    let mut body = serde_json::json!({
        "messageId": id.to_string(),
        "conversationId": uuid::Uuid::now_v7().to_string(),
        "messageType": [urn],
        "message": {"n": 1},
        "headers": {"Tenant": "acme"},
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::to_vec_pretty(&body).unwrap()
}

test_message!(Charge, "FerrybusTests.Fault:Charge");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_moves_the_original_to_error_and_publishes_fault() {
    let probe = Probe::new().await;
    let queue = unique("fault");
    probe.track_endpoint(&queue);
    let fault_exchange = "MassTransit:Fault--FerrybusTests.Fault:Charge--";
    probe.track(&[], &["FerrybusTests.Fault:Charge", fault_exchange]);
    let attempts = Arc::new(AtomicU32::new(0));
    let bus = start(RabbitMqBus::builder(URI).receive_endpoint(
        EndpointConfig::new(&queue).consumer(failing::<Charge>(attempts.clone())),
    ))
    .await;
    // The fault exchange exists once a fault was published; create it first so a probe can bind.
    bus.publish(&ferrybus_core::Fault {
        fault_id: None,
        faulted_message_id: None,
        timestamp: None,
        exceptions: vec![],
        host: None,
        fault_message_types: vec![],
        message: Charge { n: 0, fail: false },
    })
    .await
    .unwrap();
    let faults = probe.bind_probe(fault_exchange).await;

    let id = uuid::Uuid::now_v7();
    let body = envelope_body(
        &id,
        "urn:message:FerrybusTests.Fault:Charge",
        serde_json::json!({}),
    );
    let mut headers = FieldTable::default();
    headers.insert("Tenant".into(), AMQPValue::LongString("acme".into()));
    let properties = mt_properties(&id.to_string())
        .with_expiration("600000".into())
        .with_correlation_id("corr-1".into())
        .with_headers(headers);
    probe.publish("", &queue, &body, properties).await;

    let moved = probe.wait_get(&format!("{queue}_error")).await;
    assert_eq!(
        moved.delivery.data, body,
        "the body is byte-for-byte the original"
    );
    let p = &moved.delivery.properties;
    assert_eq!(p.message_id().as_ref().unwrap().as_str(), id.to_string());
    assert_eq!(p.correlation_id().as_ref().unwrap().as_str(), "corr-1");
    assert_eq!(
        p.content_type().as_ref().unwrap().as_str(),
        "application/vnd.masstransit+json"
    );
    assert_eq!(*p.delivery_mode(), Some(2));
    assert_eq!(p.expiration(), &None, "expiration cleared");
    assert_eq!(
        moved.delivery.routing_key.as_str(),
        queue,
        "original routing key"
    );
    assert_eq!(header_str(&moved, "MT-Reason").as_deref(), Some("fault"));
    assert_eq!(
        header_str(&moved, "MT-Fault-Message").as_deref(),
        Some("card declined")
    );
    assert_eq!(
        header_str(&moved, "MT-Fault-InputAddress"),
        Some(format!("rabbitmq://127.0.0.1/{queue}"))
    );
    assert_eq!(
        header_str(&moved, "MT-Fault-ConsumerType").as_deref(),
        Some("FailingConsumer")
    );
    assert_eq!(
        header_str(&moved, "MT-Fault-MessageType").as_deref(),
        Some("FerrybusTests.Fault.Charge")
    );
    assert!(header_str(&moved, "MT-Fault-ExceptionType").is_some());
    assert!(header_str(&moved, "MT-Fault-Timestamp").is_some());
    assert!(header_str(&moved, "MT-Host-MachineName").is_some());
    assert!(
        header_str(&moved, "MT-Host-ProcessId").is_some(),
        "process id is a string"
    );
    assert_eq!(
        header_str(&moved, "Tenant").as_deref(),
        Some("acme"),
        "original headers kept"
    );
    assert!(header(&moved, "MT-Fault-RetryCount").is_none());
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "no retry by default");

    let fault = probe.wait_get(&faults).await;
    let fault = Envelope::from_slice(&fault.delivery.data).unwrap();
    let fault = if fault.message["faultedMessageId"].is_null() {
        Envelope::from_slice(&probe.wait_get(&faults).await.delivery.data).unwrap()
    } else {
        fault
    };
    assert_eq!(
        fault.message_type[0],
        "urn:message:MassTransit:Fault[[FerrybusTests.Fault:Charge]]"
    );
    assert_eq!(fault.message["faultedMessageId"], id.to_string());
    assert_eq!(fault.message["exceptions"][0]["message"], "card declined");
    assert_eq!(
        fault.source_address,
        Some(format!("rabbitmq://127.0.0.1/{queue}"))
    );
    assert_eq!(fault.headers.get_str("Tenant"), Some("acme"));
    eventually("source queue empty", WAIT, || async {
        (probe.queue_count(&queue).await == Some(0)).then_some(())
    })
    .await;
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(Reserve, "FerrybusTests.FaultAddress:Reserve");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_goes_to_fault_address_then_response_address() {
    let probe = Probe::new().await;
    let queue = unique("faultaddr");
    let (fault_q, response_q) = (unique("faults-here"), unique("responses-here"));
    probe.track_endpoint(&queue);
    probe.track(
        &[&fault_q, &response_q],
        &[&fault_q, &response_q, "FerrybusTests.FaultAddress:Reserve"],
    );
    let bus = start(RabbitMqBus::builder(URI).receive_endpoint(
        EndpointConfig::new(&queue).consumer(failing::<Reserve>(Arc::default())),
    ))
    .await;
    let urn = "urn:message:FerrybusTests.FaultAddress:Reserve";
    let id = uuid::Uuid::now_v7();
    let to_fault = serde_json::json!({"faultAddress": format!("rabbitmq://127.0.0.1/{fault_q}?bind=true"), "responseAddress": format!("rabbitmq://127.0.0.1/{response_q}?bind=true")});
    probe
        .publish(
            "",
            &queue,
            &envelope_body(&id, urn, to_fault),
            mt_properties(&id.to_string()),
        )
        .await;
    let got = Envelope::from_slice(&probe.wait_get(&fault_q).await.delivery.data).unwrap();
    assert_eq!(got.message["faultedMessageId"], id.to_string());

    let id2 = uuid::Uuid::now_v7();
    let request_id = uuid::Uuid::now_v7();
    let to_response = serde_json::json!({"requestId": request_id.to_string(), "responseAddress": format!("rabbitmq://127.0.0.1/{response_q}?bind=true")});
    probe
        .publish(
            "",
            &queue,
            &envelope_body(&id2, urn, to_response),
            mt_properties(&id2.to_string()),
        )
        .await;
    let got = Envelope::from_slice(&probe.wait_get(&response_q).await.delivery.data).unwrap();
    assert_eq!(got.message["faultedMessageId"], id2.to_string());
    assert_eq!(got.request_id, Some(request_id));
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(Parse, "FerrybusTests.Bad:Parse");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_messages_go_to_error_with_a_receive_fault() {
    let probe = Probe::new().await;
    let queue = unique("bad");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Bad:Parse"]);
    let seen: Seen<Parse> = Arc::default();
    let bus = start(RabbitMqBus::builder(URI).receive_endpoint(
        EndpointConfig::new(&queue).consumer(consumer_fn("ParseConsumer", recorder(seen.clone()))),
    ))
    .await;
    let mut events = bus.events();
    let urn = "urn:message:FerrybusTests.Bad:Parse";
    let cases: [(&str, Vec<u8>); 3] = [
        ("not json", b"{ this is not json".to_vec()),
        ("non-GUID id", br#"{"messageId": "order-17", "messageType": ["urn:message:FerrybusTests.Bad:Parse"], "message": {"n": 1}}"#.to_vec()),
        ("missing message", serde_json::to_vec(&serde_json::json!({"messageId": uuid::Uuid::now_v7().to_string(), "messageType": [urn]})).unwrap()),
    ];
    for (i, (_, body)) in cases.iter().enumerate() {
        let id = format!("bad-{i}");
        probe.publish("", &queue, body, mt_properties(&id)).await;
        wait_event(
            &mut events,
            WAIT,
            |e| matches!(e, Event::Faulted { message_id: Some(m), .. } if *m == id),
        )
        .await;
    }
    for (what, body) in &cases {
        let moved = probe.wait_get(&format!("{queue}_error")).await;
        assert_eq!(&moved.delivery.data, body, "{what}");
        assert_eq!(
            header_str(&moved, "MT-Reason").as_deref(),
            Some("fault"),
            "{what}"
        );
        assert!(header(&moved, "MT-Fault-ConsumerType").is_none(), "{what}");
    }
    assert!(seen.lock().unwrap().is_empty());
    assert!(
        probe.exchange_exists("MassTransit:ReceiveFault").await,
        "ReceiveFault was published"
    );
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_types_go_to_skipped_keeping_expiration() {
    test_message!(Known, "FerrybusTests.Skip:Known");
    let probe = Probe::new().await;
    let queue = unique("skip");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Skip:Known"]);
    let bus = start(RabbitMqBus::builder(URI).receive_endpoint(
        EndpointConfig::new(&queue).consumer(consumer_fn(
            "KnownConsumer",
            recorder::<Known>(Arc::default()),
        )),
    ))
    .await;
    let id = uuid::Uuid::now_v7();
    let body = envelope_body(
        &id,
        "urn:message:Somebody.Else:Unknown",
        serde_json::json!({}),
    );
    probe
        .publish(
            "",
            &queue,
            &body,
            mt_properties(&id.to_string()).with_expiration("600000".into()),
        )
        .await;
    let moved = probe.wait_get(&format!("{queue}_skipped")).await;
    assert_eq!(moved.delivery.data, body);
    assert_eq!(
        header_str(&moved, "MT-Reason").as_deref(),
        Some("dead-letter")
    );
    assert!(header_str(&moved, "MT-Host-MachineName").is_some());
    assert_eq!(
        moved
            .delivery
            .properties
            .expiration()
            .as_ref()
            .map(|e| e.as_str()),
        Some("600000")
    );
    assert_eq!(probe.queue_count(&format!("{queue}_error")).await, None);
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_policy_runs_then_faults_with_retry_count() {
    test_message!(Flaky, "FerrybusTests.Retry:Flaky");
    let probe = Probe::new().await;
    let queue = unique("retry");
    probe.track_endpoint(&queue);
    probe.track(
        &[],
        &[
            "FerrybusTests.Retry:Flaky",
            "MassTransit:Fault--FerrybusTests.Retry:Flaky--",
        ],
    );
    let attempts = Arc::new(AtomicU32::new(0));
    let endpoint = EndpointConfig::new(&queue)
        .retry(RetryPolicy::immediate(2))
        .consumer(failing::<Flaky>(attempts.clone()));
    let bus = start(RabbitMqBus::builder(URI).receive_endpoint(endpoint)).await;
    bus.publish(&Flaky { n: 1, fail: true }).await.unwrap();
    let moved = probe.wait_get(&format!("{queue}_error")).await;
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(header_int(&moved, "MT-Fault-RetryCount"), Some(2));
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_redelivery_uses_ttl_queues_then_faults() {
    test_message!(Later, "FerrybusTests.Redeliver:Later");
    let probe = Probe::new().await;
    let queue = unique("redeliver");
    let delay_queue = format!("{queue}_delay_200");
    probe.track_endpoint(&queue);
    probe.track(
        &[&delay_queue],
        &[
            "FerrybusTests.Redeliver:Later",
            "MassTransit:Fault--FerrybusTests.Redeliver:Later--",
        ],
    );
    let counts = Arc::new(Mutex::new(Vec::new()));
    let c = counts.clone();
    let consumer = consumer_fn("LaterConsumer", move |ctx: ConsumeContext<Later>| {
        c.lock().unwrap().push(ctx.redelivery_count());
        async { Err::<(), _>(ConsumeError::handler("still failing")) }
    });
    let endpoint = EndpointConfig::new(&queue)
        .redelivery(RetryPolicy::intervals([
            Duration::from_millis(200),
            Duration::from_millis(200),
        ]))
        .consumer(consumer);
    let bus = start(
        RabbitMqBus::builder(URI)
            .delay_mode(DelayMode::Auto)
            .receive_endpoint(endpoint),
    )
    .await;
    let mut events = bus.events();
    let id = bus.publish(&Later { n: 1, fail: true }).await.unwrap();
    for expected in [1, 2] {
        let event = wait_event(&mut events, WAIT, |e| {
            matches!(e, Event::Redelivered { .. })
        })
        .await;
        assert_eq!(
            event,
            Event::Redelivered {
                queue: queue.clone(),
                message_id: Some(id.to_string()),
                count: expected
            }
        );
    }
    let moved = probe.wait_get(&format!("{queue}_error")).await;
    assert_eq!(*counts.lock().unwrap(), [0, 1, 2]);
    assert_eq!(header_int(&moved, "MT-Redelivery-Count"), Some(2));
    assert_eq!(
        moved
            .delivery
            .properties
            .message_id()
            .as_ref()
            .unwrap()
            .as_str(),
        id.to_string(),
        "message id kept"
    );
    let envelope = Envelope::from_slice(&moved.delivery.data).unwrap();
    assert_eq!(envelope.headers.get_i64("MT-Redelivery-Count"), Some(2));
    assert!(
        probe.queue_count(&delay_queue).await.is_some(),
        "the TTL delay queue is used (no plugin here)"
    );
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_endpoints_get_quorum_error_queues() {
    test_message!(Vote, "FerrybusTests.Quorum:Vote");
    let probe = Probe::new().await;
    let queue = unique("quorum");
    probe.track_endpoint(&queue);
    probe.track(
        &[],
        &[
            "FerrybusTests.Quorum:Vote",
            "MassTransit:Fault--FerrybusTests.Quorum:Vote--",
        ],
    );
    let endpoint =
        ReceiveEndpoint::new(EndpointConfig::new(&queue).consumer(failing::<Vote>(Arc::default())))
            .quorum()
            .argument("x-delivery-limit", 5);
    let bus = start(RabbitMqBus::builder(URI).receive_endpoint(endpoint)).await;
    bus.publish(&Vote { n: 1, fail: true }).await.unwrap();
    probe.wait_get(&format!("{queue}_error")).await;
    let mut quorum = FieldTable::default();
    quorum.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    quorum.insert("x-delivery-limit".into(), AMQPValue::LongLongInt(5));
    assert!(probe.queue_flags_match(&queue, true, quorum.clone()).await);
    assert!(
        probe
            .queue_flags_match(&format!("{queue}_error"), true, quorum)
            .await,
        "error queue copies the arguments"
    );
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(CheckStatus, "FerrybusTests.Request:CheckStatus");
test_message!(StatusResult, "FerrybusTests.Request:StatusResult");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_response_and_faulted_requests() {
    let probe = Probe::new().await;
    let queue = unique("status");
    probe.track_endpoint(&queue);
    probe.track(
        &[],
        &[
            "FerrybusTests.Request:CheckStatus",
            "FerrybusTests.Request:StatusResult",
        ],
    );
    let seen_headers = Arc::new(Mutex::new(None));
    let s = seen_headers.clone();
    let responder = consumer_fn("StatusConsumer", move |ctx: ConsumeContext<CheckStatus>| {
        *s.lock().unwrap() = Some(ctx.envelope().clone());
        async move {
            if ctx.message().fail {
                return Err(ConsumeError::handler("no such order"));
            }
            ctx.respond(&StatusResult {
                n: ctx.message().n * 10,
                fail: false,
            })
            .await
        }
    });
    let bus = start(
        RabbitMqBus::builder(URI).receive_endpoint(EndpointConfig::new(&queue).consumer(responder)),
    )
    .await;
    let client = bus
        .request_client::<CheckStatus>(&format!("queue:{queue}"))
        .timeout(Duration::from_secs(10));
    let response = client
        .get_response::<StatusResult>(&CheckStatus { n: 4, fail: false })
        .await
        .unwrap();
    assert_eq!(response.message.n, 40);
    let request = seen_headers.lock().unwrap().clone().unwrap();
    assert_eq!(request.response_address.as_deref(), Some(bus.address()));
    assert_eq!(response.envelope.request_id, request.request_id);
    assert!(request.expiration_time.is_some());
    assert_eq!(
        request.headers.get("MT-Request-AcceptType"),
        Some(&serde_json::json!([
            "urn:message:FerrybusTests.Request:StatusResult"
        ]))
    );

    let fault = client
        .get_response::<StatusResult>(&CheckStatus { n: 1, fail: true })
        .await
        .unwrap_err();
    assert_eq!(fault.kind(), ErrorKind::Fault);
    assert!(fault.to_string().contains("no such order"), "{fault}");

    let quick = bus
        .request_client::<CheckStatus>("exchange:nobody-listens-here")
        .timeout(Duration::from_millis(300));
    probe.track(&[], &["nobody-listens-here"]);
    let timeout = quick
        .get_response::<StatusResult>(&CheckStatus { n: 1, fail: false })
        .await
        .unwrap_err();
    assert_eq!(timeout.kind(), ErrorKind::Timeout);
    bus.stop().await;
    probe.cleanup().await;
}
