//! The trace context as MassTransit carries it, on the in-memory transport with an SDK
//! capturing spans: `MT-Activity-Id` on a delivery parents its receive span (or is linked, with
//! `MT-Activity-Propagation: Link`), the process span is the receive span's child, and a message
//! the consumer publishes carries the process span in its `MT-Activity-Id` (and the sender's
//! baggage in `MT-Activity-Correlation-Context`). Its own binary: it
//! installs the global tracer provider.

use std::sync::OnceLock;

use ferrybus_core::address::HostAddress;
use ferrybus_core::memory::{StoredMessage, TestHarness};
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::outgoing::MessageOrigin;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Headers, Message, SendOptions};
use ferrybus_otel::parse_traceparent;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "FerrybusTests.Trace")]
struct Ping {
    id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "FerrybusTests.Trace")]
struct Pong {
    id: Uuid,
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        opentelemetry::global::set_tracer_provider(provider);
        exporter
    })
}

async fn harness(queue: &'static str) -> TestHarness {
    TestHarness::builder()
        .configure(ferrybus_otel::instrument)
        .receive_endpoint(queue, |e| {
            e.consumer(consumer_fn(
                "PingConsumer",
                |ctx: ConsumeContext<Ping>| async move {
                    ctx.publish(&Pong {
                        id: ctx.message().id,
                    })
                    .await?;
                    Ok::<_, ConsumeError>(())
                },
            ))
        })
        .start()
        .await
        .expect("harness")
}

/// Delivers a `Ping` with `headers` to `queue`; returns its id and the `Pong`'s `MT-Activity-Id`.
async fn ping(harness: &TestHarness, queue: &str, headers: Headers) -> (Uuid, String) {
    let factory = MessageFactory::new(HostAddress::loopback());
    let id = Uuid::now_v7();
    let message = factory
        .publish(&Ping { id }, &MessageOrigin::default(), SendOptions::new())
        .unwrap();
    harness.publish_raw(
        queue,
        StoredMessage {
            body: message.body.clone(),
            headers,
            message_id: Some(message.message_id.to_string()),
            ..StoredMessage::default()
        },
    );
    harness
        .consumed(message.message_id)
        .await
        .expect("consumed");
    let pong = harness
        .sent_now::<Pong>()
        .into_iter()
        .find(|e| e.message["id"] == id.to_string())
        .expect("the Pong");
    let activity = pong
        .headers
        .get_str("MT-Activity-Id")
        .expect("the Pong carries MT-Activity-Id")
        .to_owned();
    (id, activity)
}

fn span(name: &str, pred: impl Fn(&SpanData) -> bool) -> SpanData {
    exporter()
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .find(|s| s.name == name && pred(s))
        .unwrap_or_else(|| panic!("a span {name}"))
}

fn headers(pairs: &[(&str, &str)]) -> Headers {
    let mut headers = Headers::new();
    for (name, value) in pairs {
        headers.insert(*name, *value);
    }
    headers
}

#[tokio::test]
async fn a_delivery_continues_the_senders_trace_into_what_its_consumer_publishes() {
    exporter();
    let harness = harness("trace-child").await;
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let (_, activity) = ping(
        &harness,
        "trace-child",
        headers(&[("MT-Activity-Id", &traceparent)]),
    )
    .await;
    let trace = TraceId::from_hex(TRACE).unwrap();
    let receive = span("trace-child receive", |s| {
        s.span_context.trace_id() == trace
    });
    assert_eq!(receive.parent_span_id, SpanId::from_hex(PARENT).unwrap());
    let process = span("trace-child process", |s| {
        s.span_context.trace_id() == trace
    });
    assert_eq!(process.parent_span_id, receive.span_context.span_id());
    let pong = parse_traceparent(&activity).unwrap();
    assert_eq!(pong.trace_id(), trace);
    assert_eq!(pong.span_id(), process.span_context.span_id(), "{activity}");
    harness.stop().await;
}

#[tokio::test]
async fn propagation_link_starts_a_new_trace_linked_to_the_senders() {
    exporter();
    let harness = harness("trace-link").await;
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let (_, activity) = ping(
        &harness,
        "trace-link",
        headers(&[
            ("MT-Activity-Id", &traceparent),
            ("MT-Activity-Propagation", "Link"),
        ]),
    )
    .await;
    let trace = TraceId::from_hex(TRACE).unwrap();
    let pong = parse_traceparent(&activity).unwrap();
    assert_ne!(pong.trace_id(), trace, "a new trace");
    let receive = span("trace-link receive", |s| {
        s.span_context.trace_id() == pong.trace_id()
    });
    assert_eq!(receive.parent_span_id, SpanId::INVALID);
    assert!(receive
        .links
        .iter()
        .any(|l| l.span_context.trace_id() == trace
            && l.span_context.span_id() == SpanId::from_hex(PARENT).unwrap()));
    harness.stop().await;
}

#[tokio::test]
async fn a_delivery_without_trace_context_starts_one() {
    exporter();
    let harness = harness("trace-root").await;
    let (_, activity) = ping(&harness, "trace-root", Headers::new()).await;
    let pong = parse_traceparent(&activity).unwrap();
    let receive = span("trace-root receive", |s| {
        s.span_context.trace_id() == pong.trace_id()
    });
    assert_eq!(receive.parent_span_id, SpanId::INVALID);
    harness.stop().await;
}

#[tokio::test]
async fn the_senders_baggage_goes_on_in_mt_activity_correlation_context() {
    exporter();
    let harness = harness("trace-baggage").await;
    let factory = MessageFactory::new(HostAddress::loopback());
    let id = Uuid::now_v7();
    let baggage = serde_json::json!([
        {"Key": "tenant", "Value": "acme"},
        {"Key": "messaging.message.conversation_id", "Value": "not carried on"}
    ]);
    let options = SendOptions::new().header("MT-Activity-Correlation-Context", baggage);
    let message = factory
        .publish(&Ping { id }, &MessageOrigin::default(), options)
        .unwrap();
    harness.publish_raw(
        "trace-baggage",
        StoredMessage {
            body: message.body.clone(),
            message_id: Some(message.message_id.to_string()),
            ..StoredMessage::default()
        },
    );
    harness
        .consumed(message.message_id)
        .await
        .expect("consumed");
    let pong = harness
        .sent_now::<Pong>()
        .into_iter()
        .find(|e| e.message["id"] == id.to_string())
        .expect("the Pong");
    assert_eq!(
        pong.headers.get("MT-Activity-Correlation-Context"),
        Some(&serde_json::json!([{"Key": "tenant", "Value": "acme"}]))
    );
    harness.stop().await;
}
