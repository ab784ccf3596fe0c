//! Failure paths against the real broker: `_error`, `_skipped`, faults, retry, panics, delayed
//! redelivery, quorum queues, request/response.
#![allow(missing_docs, unreachable_pub)]

mod common;

use ferrybus_rabbitmq::QueueEndpointExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Envelope, Fault, Message, Publish, RetryPolicy,
};
use ferrybus_rabbitmq::{DelayMode, ErrorKind, Event, RabbitMqBus};
use ferrybus_testing::{
    amqp_url, eventually, has_header, header_int, header_str, mt_properties, unique, wait_event,
    Probe, WAIT,
};
use lapin::types::{AMQPValue, FieldTable};

fn failing<M: Message>(attempts: Arc<AtomicU32>) -> impl ferrybus_core::Consumer<M> {
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

/// Watches `queue` for `window` and fails if it ever holds more than `max` messages: what must
/// not happen (a second fault, a second copy) has had that long to show up.
async fn never_more_than(probe: &Probe, queue: &str, max: u32, window: Duration) {
    let more = tokio::time::timeout(
        window,
        eventually(&format!("more than {max} in {queue}"), WAIT, || async {
            probe.queue_count(queue).await.filter(|n| *n > max)
        }),
    )
    .await;
    if let Ok(count) = more {
        panic!("{queue} holds {count} messages, at most {max} expected");
    }
}

test_message!(Charge, "FerrybusTests.Fault:Charge");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_moves_the_original_to_error_and_publishes_fault() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("fault");
    probe.track_endpoint(&queue);
    let fault_exchange = Fault::<Charge>::message_type().entity_name().to_owned();
    assert_eq!(
        fault_exchange,
        "MassTransit:Fault--FerrybusTests.Fault:Charge--"
    );
    probe.track(&[], &["FerrybusTests.Fault:Charge", &fault_exchange]);
    // The probe declares the fault exchange (with MassTransit's flags) before anything faults.
    let faults = probe.bind_probe(&fault_exchange).await;
    let attempts = Arc::new(AtomicU32::new(0));
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&queue, |e| e.consumer(failing::<Charge>(attempts.clone()))),
    )
    .await;
    let input_address = bus.host().entity_address(&queue);

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
        Some(input_address.clone())
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
    assert!(!has_header(&moved, "MT-Fault-RetryCount"));
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "no retry by default");

    let fault = Envelope::from_slice(&probe.wait_get(&faults).await.delivery.data).unwrap();
    assert_eq!(
        fault.message_type[0],
        "urn:message:MassTransit:Fault[[FerrybusTests.Fault:Charge]]"
    );
    assert_eq!(fault.message["faultedMessageId"], id.to_string());
    assert_eq!(fault.message["exceptions"][0]["message"], "card declined");
    assert_eq!(fault.source_address, Some(input_address));
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
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("faultaddr");
    let (fault_q, response_q) = (unique("faults-here"), unique("responses-here"));
    probe.track_endpoint(&queue);
    probe.track(
        &[&fault_q, &response_q],
        &[&fault_q, &response_q, "FerrybusTests.FaultAddress:Reserve"],
    );
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&queue, |e| e.consumer(failing::<Reserve>(Arc::default()))),
    )
    .await;
    let bound = |name: &str| format!("{}?bind=true", bus.host().entity_address(name));
    let urn = "urn:message:FerrybusTests.FaultAddress:Reserve";
    let id = uuid::Uuid::now_v7();
    let to_fault =
        serde_json::json!({"faultAddress": bound(&fault_q), "responseAddress": bound(&response_q)});
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
    let to_response = serde_json::json!({"requestId": request_id.to_string(), "responseAddress": bound(&response_q)});
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
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("bad");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Bad:Parse"]);
    let seen: Seen<Parse> = Arc::default();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.consumer(consumer_fn("ParseConsumer", recorder(seen.clone())))
        }),
    )
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
        assert!(!has_header(&moved, "MT-Fault-ConsumerType"), "{what}");
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
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("skip");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Skip:Known"]);
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.consumer(consumer_fn(
                "KnownConsumer",
                recorder::<Known>(Arc::default()),
            ))
        }),
    )
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
    let probe = Probe::connect(&amqp_url()).await;
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
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.retry(RetryPolicy::immediate(2))
                .consumer(failing::<Flaky>(attempts.clone()))
        }),
    )
    .await;
    bus.publish(&Flaky { n: 1, fail: true }).await.unwrap();
    let moved = probe.wait_get(&format!("{queue}_error")).await;
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(header_int(&moved, "MT-Fault-RetryCount"), Some(2));
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(Explode, "FerrybusTests.Panic:Explode");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_consumer_is_retried_then_faulted_once_and_the_endpoint_keeps_consuming() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("panic");
    probe.track_endpoint(&queue);
    let fault_exchange = Fault::<Explode>::message_type().entity_name().to_owned();
    assert_eq!(
        fault_exchange,
        "MassTransit:Fault--FerrybusTests.Panic:Explode--"
    );
    probe.track(&[], &["FerrybusTests.Panic:Explode", &fault_exchange]);
    let faults = probe.bind_probe(&fault_exchange).await;

    let attempts = Arc::new(AtomicU32::new(0));
    let good: Seen<u32> = Arc::default();
    let (a, g) = (attempts.clone(), good.clone());
    let consumer = consumer_fn("PanickingConsumer", move |ctx: ConsumeContext<Explode>| {
        let (a, g) = (a.clone(), g.clone());
        async move {
            let message = ctx.message();
            if message.fail {
                a.fetch_add(1, Ordering::SeqCst);
                panic!("exploded on message {}", message.n);
            }
            g.lock().unwrap().push(message.n);
            Ok::<_, ConsumeError>(())
        }
    });
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.retry(RetryPolicy::immediate(2)).consumer(consumer)
        }),
    )
    .await;
    let mut events = bus.events();

    let id = bus
        .publish(&Explode { n: 1, fail: true })
        .await
        .unwrap()
        .to_string();
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Faulted { message_id: Some(m), .. } if *m == id),
    )
    .await;
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "the first attempt and two retries"
    );

    let moved = probe.wait_get(&format!("{queue}_error")).await;
    assert_eq!(
        moved
            .delivery
            .properties
            .message_id()
            .as_ref()
            .unwrap()
            .as_str(),
        id
    );
    assert_eq!(header_str(&moved, "MT-Reason").as_deref(), Some("fault"));
    assert_eq!(
        header_str(&moved, "MT-Fault-ExceptionType").as_deref(),
        Some("Panic")
    );
    assert_eq!(
        header_str(&moved, "MT-Fault-Message").as_deref(),
        Some("exploded on message 1")
    );
    assert_eq!(header_int(&moved, "MT-Fault-RetryCount"), Some(2));
    assert_eq!(
        header_str(&moved, "MT-Fault-ConsumerType").as_deref(),
        Some("PanickingConsumer")
    );

    // The endpoint survived the panics: a good message is consumed.
    let next = bus
        .publish(&Explode { n: 2, fail: false })
        .await
        .unwrap()
        .to_string();
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Consumed { message_id: Some(m), duplicate: false, .. } if *m == next),
    )
    .await;
    assert_eq!(good.lock().unwrap().as_slice(), [2]);
    assert_eq!(attempts.load(Ordering::SeqCst), 3, "no more attempts");

    // Exactly one Fault<Explode>, for the message that panicked.
    never_more_than(&probe, &faults, 1, Duration::from_secs(2)).await;
    assert_eq!(probe.queue_count(&faults).await, Some(1));
    let fault = Envelope::from_slice(&probe.wait_get(&faults).await.delivery.data).unwrap();
    assert_eq!(fault.message["faultedMessageId"], id);
    assert_eq!(fault.message["exceptions"][0]["exceptionType"], "Panic");
    assert_eq!(
        fault.message["exceptions"][0]["message"],
        "exploded on message 1"
    );
    assert_eq!(probe.queue_count(&format!("{queue}_error")).await, Some(0));
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(Flop, "FerrybusTests.FaultOnce:Flop");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_is_published_exactly_once_even_when_the_move_to_error_fails_and_the_message_comes_back(
) {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("faultonce");
    let error_queue = format!("{queue}_error");
    probe.track_endpoint(&queue);
    let fault_exchange = Fault::<Flop>::message_type().entity_name().to_owned();
    probe.track(&[], &["FerrybusTests.FaultOnce:Flop", &fault_exchange]);
    let faults = probe.bind_probe(&fault_exchange).await;

    // `<queue>_error` exists already with an argument ferrybus does not declare: its
    // `queue.declare` gets PRECONDITION_FAILED, so the move fails.
    let mut conflicting = FieldTable::default();
    conflicting.insert("x-max-length".into(), AMQPValue::LongLongInt(1000));
    probe
        .declare_queue(&error_queue, true, conflicting)
        .await
        .expect("the conflicting error queue is declared");

    let attempts = Arc::new(AtomicU32::new(0));
    let (a, consumed) = (attempts.clone(), Seen::<u32>::default());
    let c = consumed.clone();
    let consumer = consumer_fn("FlopConsumer", move |ctx: ConsumeContext<Flop>| {
        let (a, c) = (a.clone(), c.clone());
        async move {
            if ctx.message().fail {
                a.fetch_add(1, Ordering::SeqCst);
                return Err(ConsumeError::handler("flopped"));
            }
            c.lock().unwrap().push(ctx.message().n);
            Ok(())
        }
    });
    let bus =
        start(RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| e.consumer(consumer)))
            .await;
    let mut events = bus.events();
    let id = bus
        .publish(&Flop { n: 1, fail: true })
        .await
        .unwrap()
        .to_string();

    // The move failed: the delivery is given back, and no fault went out.
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Returned { queue: q, message_id: Some(m) } if *q == queue && *m == id),
    )
    .await;
    assert!(attempts.load(Ordering::SeqCst) >= 1);
    assert_eq!(
        probe.queue_count(&faults).await,
        Some(0),
        "no fault while the move fails"
    );
    assert_eq!(
        probe.queue_count(&error_queue).await,
        Some(0),
        "nothing moved"
    );

    // Remove the conflict: the next attempt declares `<queue>_error` itself and moves.
    let mut after = bus.events();
    probe.delete_queue(&error_queue).await;
    wait_event(
        &mut after,
        WAIT,
        |e| matches!(e, Event::Faulted { queue: q, message_id: Some(m) } if *q == queue && *m == id),
    )
    .await;
    let tries = attempts.load(Ordering::SeqCst);
    assert!(tries >= 2, "the message came back at least once: {tries}");

    // A later message goes through the same endpoint: anything still in flight for the first
    // one has been settled or would come first.
    let next = bus
        .publish(&Flop { n: 2, fail: false })
        .await
        .unwrap()
        .to_string();
    wait_event(
        &mut after,
        WAIT,
        |e| matches!(e, Event::Consumed { message_id: Some(m), .. } if *m == next),
    )
    .await;
    assert_eq!(consumed.lock().unwrap().as_slice(), [2]);

    // One copy in the error queue, one Fault<Flop>, and no stragglers.
    never_more_than(&probe, &error_queue, 1, Duration::from_secs(2)).await;
    never_more_than(&probe, &faults, 1, Duration::from_secs(1)).await;
    assert_eq!(probe.queue_count(&error_queue).await, Some(1));
    assert_eq!(probe.queue_count(&faults).await, Some(1));
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        tries,
        "no attempt after the fault"
    );
    let moved = probe.wait_get(&error_queue).await;
    assert_eq!(
        moved
            .delivery
            .properties
            .message_id()
            .as_ref()
            .unwrap()
            .as_str(),
        id
    );
    assert_eq!(
        header_str(&moved, "MT-Fault-Message").as_deref(),
        Some("flopped")
    );
    let fault = Envelope::from_slice(&probe.wait_get(&faults).await.delivery.data).unwrap();
    assert_eq!(fault.message["faultedMessageId"], id);
    assert_eq!(fault.message["exceptions"][0]["message"], "flopped");
    assert!(
        probe
            .queue_flags_match(&error_queue, true, FieldTable::default())
            .await,
        "ferrybus declared the error queue with the source queue's flags"
    );
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_redelivery_uses_ttl_queues_then_faults() {
    test_message!(Later, "FerrybusTests.Redeliver:Later");
    let probe = Probe::connect(&amqp_url()).await;
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
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .delay_mode(DelayMode::Auto)
            .receive_endpoint(&queue, |e| {
                e.redelivery(RetryPolicy::intervals([
                    Duration::from_millis(200),
                    Duration::from_millis(200),
                ]))
                .consumer(consumer)
            }),
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
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("quorum");
    probe.track_endpoint(&queue);
    probe.track(
        &[],
        &[
            "FerrybusTests.Quorum:Vote",
            "MassTransit:Fault--FerrybusTests.Quorum:Vote--",
        ],
    );
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.quorum()
                .queue_argument("x-delivery-limit", 5)
                .consumer(failing::<Vote>(Arc::default()))
        }),
    )
    .await;
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
    let probe = Probe::connect(&amqp_url()).await;
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
            .await?;
            Ok(())
        }
    });
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| e.consumer(responder)),
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

/// RabbitMQ's direct reply-to, as MassTransit's `CreateReplyToClientFactory` uses it: the
/// response address is `…/amq.rabbitmq.reply-to`, the request carries the AMQP `reply_to` the
/// broker rewrites, and the responder routes the response (and a `Fault<T>`) by it. The second
/// half is a requester written against the raw client, as a .NET one sends it: ferrybus's
/// responder answers it the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reply_to_requests_both_ways() {
    use futures::StreamExt;
    use lapin::options::{BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions};
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("status-direct");
    probe.track_endpoint(&queue);
    probe.track(
        &[],
        &[
            "FerrybusTests.Request:CheckStatus",
            "FerrybusTests.Request:StatusResult",
        ],
    );
    let responder = consumer_fn(
        "StatusConsumer",
        |ctx: ConsumeContext<CheckStatus>| async move {
            if ctx.message().fail {
                return Err(ConsumeError::handler("no such order"));
            }
            let result = StatusResult {
                n: ctx.message().n * 10,
                fail: false,
            };
            ctx.respond(&result).await?;
            Ok(())
        },
    );
    let server = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| e.consumer(responder)),
    )
    .await;
    let client_bus = start(RabbitMqBus::builder(&amqp_url())).await;
    let client = client_bus
        .request_client::<CheckStatus>(&format!("queue:{queue}"))
        .timeout(Duration::from_secs(10))
        .direct_reply_to();
    for n in 1..=3 {
        let response = client
            .get_response::<StatusResult>(&CheckStatus { n, fail: false })
            .await
            .unwrap();
        assert_eq!(response.message.n, n * 10);
        let to = response.envelope.destination_address.unwrap_or_default();
        assert!(to.ends_with("/amq.rabbitmq.reply-to"), "{to}");
    }
    let fault = client
        .get_response::<StatusResult>(&CheckStatus { n: 1, fail: true })
        .await
        .unwrap_err();
    assert_eq!(fault.kind(), ErrorKind::Fault);
    assert!(fault.to_string().contains("no such order"), "{fault}");

    // A requester on the raw client, publishing on the channel that consumes the replies.
    let connection = lapin::Connection::connect(&amqp_url(), Default::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let no_ack = BasicConsumeOptions {
        no_ack: true,
        ..Default::default()
    };
    let mut replies = channel
        .basic_consume(
            "amq.rabbitmq.reply-to".into(),
            "".into(),
            no_ack,
            FieldTable::default(),
        )
        .await
        .unwrap();
    let (id, request_id) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let request = serde_json::json!({
        "messageId": id,
        "requestId": request_id,
        "responseAddress": "rabbitmq://localhost/amq.rabbitmq.reply-to",
        "messageType": ["urn:message:FerrybusTests.Request:CheckStatus"],
        "message": {"n": 7, "fail": false}
    });
    channel
        .basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            &serde_json::to_vec(&request).unwrap(),
            mt_properties(&id.to_string()).with_reply_to("amq.rabbitmq.reply-to".into()),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let reply = tokio::time::timeout(WAIT, replies.next())
        .await
        .expect("a reply within the wait")
        .unwrap()
        .unwrap();
    let envelope = Envelope::from_slice(&reply.data).unwrap();
    assert_eq!(envelope.request_id, Some(request_id));
    assert_eq!(envelope.message["n"], 70);
    let _ = connection.close(200, "".into()).await;
    client_bus.stop().await;
    server.stop().await;
    probe.cleanup().await;
}

test_message!(Innocent, "FerrybusTests.Isolation:Innocent");

/// A raw connection, as another service or an operator has: declares and deletes entities
/// behind the bus's back.
async fn raw_channel() -> (lapin::Connection, lapin::Channel) {
    let connection =
        lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
            .await
            .expect("raw connection");
    let channel = connection.create_channel().await.expect("raw channel");
    (connection, channel)
}

/// Takes every message from `queue` until `n` of them came, and returns their `n` fields.
async fn collect_n(probe: &Probe, queue: &str, n: usize) -> Vec<u32> {
    let got = Mutex::new(Vec::new());
    eventually(&format!("{n} messages in {queue}"), WAIT, || async {
        while let Some(message) = probe.get(queue).await {
            let envelope = Envelope::from_slice(&message.delivery.data).unwrap();
            let value = envelope.message["n"].as_u64().unwrap() as u32;
            got.lock().unwrap().push(value);
        }
        (got.lock().unwrap().len() >= n).then_some(())
    })
    .await;
    let mut got = got.into_inner().unwrap();
    got.sort_unstable();
    got
}

/// One send the broker refuses (its exchange exists with another type: `exchange.declare` gets
/// PRECONDITION_FAILED, which closes the channel it ran on) among many good ones, each to an
/// exchange of its own declared on first use: only the refused send fails; every good one is
/// confirmed and arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_declaration_fails_only_its_own_send() {
    let probe = Probe::connect(&amqp_url()).await;
    let prefix = unique("isolation");
    let (collector, refused) = (format!("{prefix}-all"), format!("{prefix}-direct"));
    probe.track(&[], &[&collector, &refused]);
    let sink = probe.bind_probe(&collector).await;
    let (_raw, channel) = raw_channel().await;
    channel
        .exchange_declare(
            refused.as_str().into(),
            lapin::ExchangeKind::Direct,
            lapin::options::ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;

    const ROUNDS: u32 = 4;
    const PER_ROUND: u32 = 40;
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        let mut sends = tokio::task::JoinSet::new();
        for i in 0..PER_ROUND {
            let n = round * PER_ROUND + i;
            let exchange = format!("{prefix}-{n}");
            probe.track(&[], &[&exchange]);
            let address = format!(
                "{}?bindexchange={collector}",
                bus.host().entity_address(&exchange)
            );
            let sender = bus.clone();
            sends.spawn(
                async move { (n, sender.send(&address, &Innocent { n, fail: false }).await) },
            );
            if i == PER_ROUND / 2 {
                let (bus, refused) = (bus.clone(), refused.clone());
                sends.spawn(async move {
                    let message = Innocent {
                        n: u32::MAX,
                        fail: true,
                    };
                    (
                        u32::MAX,
                        bus.send(&format!("exchange:{refused}"), &message).await,
                    )
                });
            }
        }
        while let Some(joined) = sends.join_next().await {
            let (n, sent) = joined.unwrap();
            if n == u32::MAX {
                assert!(sent.is_err(), "the refused send fails");
            } else if let Err(error) = sent {
                failed.push((n, error.to_string()));
            }
        }
    }
    assert!(failed.is_empty(), "good sends failed: {failed:?}");
    let total = (ROUNDS * PER_ROUND) as usize;
    let arrived = collect_n(&probe, &sink, total).await;
    assert_eq!(arrived, (0..ROUNDS * PER_ROUND).collect::<Vec<_>>());
    never_more_than(&probe, &sink, 0, Duration::from_millis(500)).await;
    bus.stop().await;
    probe.cleanup().await;
}

/// One publish the broker refuses on the shared publishing channel itself (its exchange was
/// deleted after the bus declared it: `basic.publish` gets NOT_FOUND, which closes the channel
/// and fails the confirms pending there) among many good ones: only the refused publish fails;
/// every good one is confirmed and arrives. (Those that reached the queue before the channel
/// closed lost their confirm and are sent again: they may arrive twice, at least once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_publish_fails_only_itself() {
    let probe = Probe::connect(&amqp_url()).await;
    let gone = unique("isolation-gone");
    let innocent = Innocent::message_type().entity_name().to_owned();
    probe.track(&[], &[&innocent, &gone]);
    let sink = probe.bind_probe(&innocent).await;
    let (_raw, channel) = raw_channel().await;
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;

    const ROUNDS: u32 = 4;
    const PER_ROUND: u32 = 60;
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        // Declared (and remembered) by the bus, then deleted behind its back.
        let gone_address = format!("exchange:{gone}");
        bus.send(&gone_address, &Innocent { n: 0, fail: true })
            .await
            .unwrap();
        channel
            .exchange_delete(gone.as_str().into(), Default::default())
            .await
            .unwrap();
        bus.publish(&Innocent {
            n: u32::MAX - 1,
            fail: true,
        })
        .await
        .map(drop)
        .unwrap_or_else(|e| panic!("warming up: {e}"));
        let mut sends = tokio::task::JoinSet::new();
        for i in 0..PER_ROUND {
            let n = round * PER_ROUND + i;
            let sender = bus.clone();
            sends.spawn(async move {
                let published = sender.publish(&Innocent { n, fail: false }).await;
                (n, published.map(drop))
            });
            if i == PER_ROUND / 2 {
                let (bus, address) = (bus.clone(), gone_address.clone());
                sends.spawn(async move {
                    let message = Innocent {
                        n: u32::MAX,
                        fail: true,
                    };
                    (u32::MAX, bus.send(&address, &message).await.map(drop))
                });
            }
        }
        while let Some(joined) = sends.join_next().await {
            let (n, sent) = joined.unwrap();
            // The publish to the deleted exchange fails, or succeeds when its resend declared
            // the exchange again first: either way it is the only one affected.
            if n == u32::MAX {
                continue;
            }
            if let Err(error) = sent {
                failed.push((n, error.to_string()));
            }
        }
    }
    assert!(failed.is_empty(), "good publishes failed: {failed:?}");
    let mut arrived: Vec<u32> = collect_n(&probe, &sink, (ROUNDS * (PER_ROUND + 1)) as usize)
        .await
        .into_iter()
        .filter(|n| *n != u32::MAX - 1)
        .collect();
    arrived.dedup();
    assert_eq!(arrived, (0..ROUNDS * PER_ROUND).collect::<Vec<_>>());
    bus.stop().await;
    probe.cleanup().await;
}

/// A relay pass sending a .NET outbox row whose `RMQ-UserId` is not the connection's user (the
/// broker refuses it with PRECONDITION_FAILED, closing the channel it came on) while good
/// publishes are in flight: only that row fails; every good publish is confirmed and arrives
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_with_another_user_id_fails_only_itself() {
    let probe = Probe::connect(&amqp_url()).await;
    let innocent = Innocent::message_type().entity_name().to_owned();
    probe.track(&[], &[&innocent]);
    let sink = probe.bind_probe(&innocent).await;
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;
    bus.publish(&Innocent {
        n: u32::MAX - 1,
        fail: true,
    })
    .await
    .unwrap();

    const ROUNDS: u32 = 4;
    const PER_ROUND: u32 = 60;
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        let mut sends = tokio::task::JoinSet::new();
        for i in 0..PER_ROUND {
            let n = round * PER_ROUND + i;
            let sender = bus.clone();
            sends.spawn(async move {
                let published = sender.publish(&Innocent { n, fail: false }).await;
                (n, published.map(drop))
            });
            if i == PER_ROUND / 2 {
                let sender = bus.clone();
                sends.spawn(async move {
                    let message = Innocent {
                        n: u32::MAX,
                        fail: true,
                    };
                    let mut row = sender
                        .message_factory()
                        .publish(&message, sender.message_origin(), Default::default())
                        .unwrap();
                    row.properties
                        .insert("RMQ-UserId".into(), "someone-else".into());
                    (u32::MAX, sender.deliver(row).await)
                });
            }
        }
        while let Some(joined) = sends.join_next().await {
            let (n, sent) = joined.unwrap();
            if n == u32::MAX {
                assert!(sent.is_err(), "the row with another user id fails");
            } else if let Err(error) = sent {
                failed.push((n, error.to_string()));
            }
        }
    }
    assert!(failed.is_empty(), "good publishes failed: {failed:?}");
    let arrived: Vec<u32> = collect_n(&probe, &sink, (ROUNDS * PER_ROUND + 1) as usize)
        .await
        .into_iter()
        .filter(|n| *n != u32::MAX - 1)
        .collect();
    assert_eq!(arrived, (0..ROUNDS * PER_ROUND).collect::<Vec<_>>());
    never_more_than(&probe, &sink, 0, Duration::from_millis(500)).await;
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(Refused, "FerrybusTests.Isolation:Refused");

/// What the transport logged (target `ferrybus::rabbitmq`) since this test binary started:
/// one global subscriber writing to a buffer; tests running beside each other log into it too,
/// so a test looks for the lines naming its own entities.
fn transport_log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "ferrybus::rabbitmq=info",
            ))
            .with_ansi(false)
            .with_writer(move || LogWriter(writer.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
        buffer
    })
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines of [`transport_log`] containing `text`.
fn logged(text: &str) -> Vec<String> {
    let log = transport_log().lock().unwrap();
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|line| line.contains(text))
        .map(str::to_owned)
        .collect()
}

/// A send the broker refuses with ACCESS_REFUSED (403: its exchange's name has the reserved
/// `amq.` prefix), a channel-level error: the broker closes the channel it came on, not the
/// connection. The transport logs that channel's closing with the broker's reply code and text,
/// says the connection is kept, does not reconnect (no `Disconnected`, no `Reconnected`, the same
/// connection), and the sends before and after it arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_refused_send_closes_its_channel_not_the_connection() {
    transport_log();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("refused-kept");
    let refused = format!("amq.{}", unique("refused"));
    probe.track(&[&queue], &[&queue, &refused]);
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;
    let mut events = bus.events();
    let address = format!("queue:{queue}");
    bus.send(&address, &Refused { n: 1, fail: false })
        .await
        .unwrap();

    let sent = bus
        .send(
            &format!("exchange:{refused}"),
            &Refused { n: 0, fail: true },
        )
        .await;
    let error = sent.expect_err("the broker refuses the amq. exchange");
    assert!(error.to_string().contains("ACCESS_REFUSED"), "{error}");
    let line = eventually("the channel's closing logged", WAIT, || async {
        logged(&refused).into_iter().next()
    })
    .await;
    assert!(
        line.contains("WARN")
            && line.contains("channel closed by the broker; the connection is kept")
            && line.contains("reply_code=403")
            && line.contains("ACCESS_REFUSED"),
        "{line}"
    );
    assert!(!line.contains("connection lost"), "{line}");

    bus.send(&address, &Refused { n: 2, fail: false })
        .await
        .unwrap();
    assert_eq!(collect_n(&probe, &queue, 2).await, vec![1, 2]);
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(
                event,
                Event::Disconnected { .. } | Event::Reconnected { .. }
            ),
            "the connection was torn down: {event:?}"
        );
    }
    bus.stop().await;
    probe.cleanup().await;
}

/// Requests abandoned by their caller (the future dropped: a `select!` that took another
/// branch, an outer timeout, a cancelled task) and requests that timed out leave nothing behind
/// in the bus's table of pending requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_and_timed_out_requests_leave_nothing_pending() {
    let probe = Probe::connect(&amqp_url()).await;
    let nobody = unique("nobody-answers");
    probe.track(&[], &[&nobody]);
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;
    let patient = bus
        .request_client::<CheckStatus>(&format!("exchange:{nobody}"))
        .timeout(Duration::from_secs(60));
    for n in 0..50 {
        let message = CheckStatus { n, fail: false };
        let request = patient.get_response::<StatusResult>(&message);
        // Long enough for the request to be sent and registered, far shorter than its timeout.
        let cancelled = tokio::time::timeout(Duration::from_millis(100), request).await;
        assert!(cancelled.is_err(), "nobody answers");
    }
    assert_eq!(
        bus.pending_requests(),
        0,
        "cancelled requests are forgotten"
    );

    let mut requests = tokio::task::JoinSet::new();
    for n in 0..20 {
        let client = bus
            .request_client::<CheckStatus>(&format!("exchange:{nobody}"))
            .timeout(Duration::from_millis(50));
        requests.spawn(async move {
            let message = CheckStatus { n, fail: false };
            client
                .get_response::<StatusResult>(&message)
                .await
                .map(drop)
        });
    }
    while let Some(outcome) = requests.join_next().await {
        assert_eq!(outcome.unwrap().unwrap_err().kind(), ErrorKind::Timeout);
    }
    assert_eq!(
        bus.pending_requests(),
        0,
        "timed-out requests are forgotten"
    );
    bus.stop().await;
    probe.cleanup().await;
}

/// The broker's `x-delivery-count` (how often a quorum queue delivered a message) stays out of
/// `<queue>_error`: the moved copy is a new message, counted by the queue it lands in. Here the
/// message carries the count as one replayed from a quorum `_error` queue does (RabbitMQ 3.x
/// adds the header on every delivery from a quorum queue, replay tools copy it); the endpoint
/// and its error queue are classic, so the broker leaves the header as it is and it can be seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_delivery_count_stays_out_of_the_error_queue() {
    test_message!(Tally, "FerrybusTests.DeliveryCount:Tally");
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("delivery-count");
    probe.track_endpoint(&queue);
    probe.track(
        &[],
        &["MassTransit:Fault--FerrybusTests.DeliveryCount:Tally--"],
    );
    let attempts = Arc::new(AtomicU32::new(0));
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.bind_message_types(false)
                .consumer(failing::<Tally>(attempts.clone()))
        }),
    )
    .await;
    let id = uuid::Uuid::now_v7();
    let body = envelope_body(
        &id,
        "urn:message:FerrybusTests.DeliveryCount:Tally",
        serde_json::json!({}),
    );
    let mut headers = FieldTable::default();
    headers.insert("x-delivery-count".into(), AMQPValue::LongLongInt(3));
    headers.insert("Tenant".into(), AMQPValue::LongString("acme".into()));
    let properties = mt_properties(&id.to_string()).with_headers(headers);
    probe.publish("", &queue, &body, properties).await;

    let moved = probe.wait_get(&format!("{queue}_error")).await;
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(
        header_str(&moved, "MT-Fault-Message").as_deref(),
        Some("card declined")
    );
    assert_eq!(header_str(&moved, "Tenant").as_deref(), Some("acme"));
    assert!(
        !has_header(&moved, "x-delivery-count"),
        "x-delivery-count copied into the error queue: {:?}",
        header_int(&moved, "x-delivery-count")
    );
    bus.stop().await;
    probe.cleanup().await;
}
