//! Raw JSON as a bus-wide and per-endpoint choice on the real broker, as MassTransit's
//! `UseRawJsonSerializer()` makes it: a raw bus publishes, sends, responds and faults raw
//! (`application/json`, the message as the body, the envelope's fields as headers), reads raw
//! responses to its requests, and its endpoints still consume MassTransit envelopes by content
//! type; one raw endpoint on an envelope bus answers raw.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::time::Duration;

use common::*;
use ferrybus_core::outgoing::{MessageFactory, MessageOrigin, Serializer};
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Fault, Message, SendOptions};
use ferrybus_core::{EndpointConfig, Publish};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_testing::{amqp_url, eventually, header_str, mt_properties, unique, Probe, WAIT};
use lapin::message::BasicGetMessage;
use serde_json::{json, Value};
use uuid::Uuid;

test_message!(PriceQuery, "FerrybusTests.RawJson:PriceQuery");
test_message!(PriceQuoted, "FerrybusTests.RawJson:PriceQuoted");
test_message!(PriceChanged, "FerrybusTests.RawJson:PriceChanged");

/// Answers `PriceQuery { n }` with `PriceQuoted { n: n * 10 }`, faults `fail`.
fn quoter(endpoint: EndpointConfig) -> EndpointConfig {
    endpoint.bind_message_types(false).consumer(consumer_fn(
        "PriceQueryConsumer",
        |ctx: ConsumeContext<PriceQuery>| async move {
            let PriceQuery { n, fail } = *ctx.message();
            if fail {
                return Err(ConsumeError::permanent("no price today"));
            }
            ctx.respond(&PriceQuoted { n: n * 10, fail }).await?;
            Ok::<_, ConsumeError>(())
        },
    ))
}

/// Asserts `got` is raw JSON: the content type, `body` as the whole body, `message_type` in
/// `MT-MessageType`, and the ids and host as headers.
fn assert_raw(got: &BasicGetMessage, body: Value, message_type: &str) {
    let properties = &got.delivery.properties;
    assert_eq!(
        properties.content_type().as_ref().map(|c| c.as_str()),
        Some("application/json")
    );
    let wire: Value = serde_json::from_slice(&got.delivery.data).unwrap();
    assert_eq!(wire, body, "the body is the message, no envelope");
    assert_eq!(
        header_str(got, "MT-MessageType").as_deref(),
        Some(message_type)
    );
    let id = header_str(got, "MessageId").expect("MessageId header");
    assert_eq!(
        properties.message_id().as_ref().map(|m| m.to_string()),
        Some(id)
    );
    assert!(header_str(got, "ConversationId").is_some());
    let host: Value = serde_json::from_str(&header_str(got, "MT-Host-Info").unwrap()).unwrap();
    assert!(host["MachineName"].is_string(), "{host}");
}

/// An envelope request as a .NET peer writes it, its responses going to queue `reply`.
async fn request_envelope(bus: &RabbitMqBus, probe: &Probe, queue: &str, reply: &str, n: u32) {
    let factory = MessageFactory::new(bus.host().clone());
    let response_address = bus.host().resolve(&format!("queue:{reply}")).unwrap();
    let options = SendOptions::new()
        .request_id(Uuid::now_v7())
        .response_address(response_address)
        .header("Tenant", "acme");
    let request = factory
        .send(
            &format!("queue:{queue}"),
            &PriceQuery { n, fail: false },
            &MessageOrigin::default(),
            options,
        )
        .unwrap();
    assert_eq!(request.content_type, "application/vnd.masstransit+json");
    let properties = mt_properties(&request.message_id.to_string());
    probe.publish("", queue, &request.body, properties).await;
}

/// `cfg.UseRawJsonSerializer()`: what the bus publishes and sends, what its consumer responds
/// and the fault of a failing consumer are all raw JSON; the endpoint consumes the envelope a
/// .NET peer sends; a request from the raw bus is answered raw and read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_bus_publishes_sends_responds_and_faults_raw() {
    let probe = Probe::connect(&amqp_url()).await;
    let (queue, sent_to, replies) = (unique("raw-quote"), unique("raw-sent"), unique("raw-reply"));
    for name in [&queue, &sent_to, &replies] {
        probe.track_endpoint(name);
    }
    let changed = PriceChanged::message_type().entity_name().to_owned();
    let fault_exchange = Fault::<PriceQuery>::message_type().entity_name().to_owned();
    probe.track(
        &[],
        &[
            &changed,
            &fault_exchange,
            "FerrybusTests.RawJson:PriceQuoted",
        ],
    );
    let published = probe.bind_probe(&changed).await;
    let faults = probe.bind_probe(&fault_exchange).await;
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .serializer(Serializer::raw_json())
            .receive_endpoint(&queue, quoter),
    )
    .await;

    // Publish and send.
    let id = bus
        .publish(&PriceChanged { n: 1, fail: false })
        .await
        .unwrap();
    let got = probe.wait_get(&published).await;
    assert_raw(
        &got,
        json!({"n": 1, "fail": false}),
        "urn:message:FerrybusTests.RawJson:PriceChanged",
    );
    assert_eq!(header_str(&got, "MessageId"), Some(id.to_string()));
    assert_eq!(
        header_str(&got, "MT-Source-Address").as_deref(),
        Some(bus.address())
    );
    bus.send(
        &format!("queue:{sent_to}"),
        &PriceChanged { n: 2, fail: false },
    )
    .await
    .unwrap();
    let got = probe.wait_get(&sent_to).await;
    assert_raw(
        &got,
        json!({"n": 2, "fail": false}),
        "urn:message:FerrybusTests.RawJson:PriceChanged",
    );

    // An envelope request from a .NET peer is consumed; the response is raw, carrying the
    // request id and the peer's header.
    request_envelope(&bus, &probe, &queue, &replies, 4).await;
    let got = probe.wait_get(&replies).await;
    assert_raw(
        &got,
        json!({"n": 40, "fail": false}),
        "urn:message:FerrybusTests.RawJson:PriceQuoted",
    );
    assert!(header_str(&got, "RequestId").is_some());
    assert_eq!(header_str(&got, "Tenant").as_deref(), Some("acme"));

    // A request from the raw bus itself: sent raw, answered raw, read as the response.
    let client = bus
        .request_client::<PriceQuery>(&format!("queue:{queue}"))
        .timeout(Duration::from_secs(20));
    let quoted = client
        .get_response::<PriceQuoted>(&PriceQuery { n: 7, fail: false })
        .await
        .unwrap();
    assert_eq!(quoted.message.n, 70);

    // A failing consumer's Fault<T> is published raw too.
    bus.send(&format!("queue:{queue}"), &PriceQuery { n: 9, fail: true })
        .await
        .unwrap();
    let got = probe.wait_get(&faults).await;
    let properties = &got.delivery.properties;
    assert_eq!(
        properties.content_type().as_ref().map(|c| c.as_str()),
        Some("application/json")
    );
    let fault: Value = serde_json::from_slice(&got.delivery.data).unwrap();
    assert_eq!(fault["message"], json!({"n": 9, "fail": true}), "{fault}");
    assert!(
        fault["exceptions"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no price today")),
        "{fault}"
    );
    let types = header_str(&got, "MT-MessageType").unwrap();
    assert_eq!(
        types.split(';').next(),
        Some(Fault::<PriceQuery>::message_type().urn()),
        "{types}"
    );
    bus.stop().await;
    probe.cleanup().await;
}

/// `e.UseRawJsonSerializer()` on one endpoint of an envelope bus: the endpoint consumes a
/// MassTransit envelope (by its content type) and answers raw; the bus itself still sends
/// envelopes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_endpoint_still_consumes_envelopes_and_answers_raw() {
    let probe = Probe::connect(&amqp_url()).await;
    let (queue, replies) = (unique("raw-endpoint"), unique("raw-endpoint-reply"));
    probe.track_endpoint(&queue);
    probe.track_endpoint(&replies);
    probe.track(&[], &["FerrybusTests.RawJson:PriceQuoted"]);
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&queue, |e| quoter(e.serializer(Serializer::raw_json()))),
    )
    .await;

    request_envelope(&bus, &probe, &queue, &replies, 3).await;
    let got = probe.wait_get(&replies).await;
    assert_raw(
        &got,
        json!({"n": 30, "fail": false}),
        "urn:message:FerrybusTests.RawJson:PriceQuoted",
    );

    // The bus outside the endpoint still writes envelopes.
    let sent = bus
        .send_with(
            &format!("queue:{replies}"),
            &PriceQuoted { n: 1, fail: false },
            SendOptions::new(),
        )
        .await
        .unwrap();
    let got = eventually("the envelope send", WAIT, || async {
        probe.get(&replies).await
    })
    .await;
    assert_eq!(
        got.delivery
            .properties
            .content_type()
            .as_ref()
            .map(|c| c.as_str()),
        Some("application/vnd.masstransit+json")
    );
    let envelope = ferrybus_core::Envelope::from_slice(&got.delivery.data).unwrap();
    assert_eq!(envelope.message_id, Some(sent));
    bus.stop().await;
    probe.cleanup().await;
}

/// A raw bus schedules raw messages: the scheduling token travels as a transport header only,
/// and a cancelled one is still recognised and acknowledged unconsumed when it arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_scheduled_message_arrives_and_a_cancelled_one_does_not() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("raw-schedule");
    let delay = Duration::from_millis(1500);
    probe.track_endpoint(&queue);
    probe.track(&[&format!("{queue}_delay_{}", delay.as_millis())], &[]);
    let seen: Seen<PriceChanged> = Seen::default();
    let record = seen.clone();
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .serializer(Serializer::raw_json())
            .receive_endpoint(&queue, move |e| {
                e.bind_message_types(false)
                    .consumer(consumer_fn("PriceChangedConsumer", recorder(record)))
            }),
    )
    .await;
    let address = format!("queue:{queue}");
    let cancelled = bus
        .schedule_send(&address, delay, &PriceChanged { n: 1, fail: false })
        .await
        .unwrap();
    bus.schedule_send(&address, delay, &PriceChanged { n: 2, fail: false })
        .await
        .unwrap();
    bus.cancel_scheduled_send(cancelled.token_id);
    // One delay queue expires its messages in order: once the second arrived, the first was
    // settled before it.
    eventually("the kept message consumed", WAIT, || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    eventually("the cancelled message acknowledged", WAIT, || async {
        (probe.queue_count(&queue).await == Some(0)).then_some(())
    })
    .await;
    let numbers: Vec<u32> = seen.lock().unwrap().iter().map(|m| m.n).collect();
    assert_eq!(
        numbers,
        [2],
        "the cancelled message never reached the consumer"
    );
    bus.stop().await;
    probe.cleanup().await;
}
