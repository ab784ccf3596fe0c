//! Wire fidelity against the real broker, with bodies shaped as real publishers send them: what
//! a .NET (MassTransit 8.5) consumer reads ferrybus reads, what it refuses ferrybus refuses, and
//! faults look as .NET writes them.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Fault, Message, MessageType, ReceiveFault,
    RetryPolicy,
};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_testing::{
    amqp_url, eventually, has_header, header_int, header_str, mt_properties, unique, Probe, WAIT,
};
use lapin::BasicProperties;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A contract whose wire names are camelCase, as MassTransit's System.Text.Json writes them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OrderPlaced {
    pub order_id: Uuid,
    pub total: String,
    pub lines: Vec<Line>,
    #[serde(default)]
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Line {
    pub sku: String,
    pub quantity: u32,
}

impl Message for OrderPlaced {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusTests.Wire:OrderPlaced").unwrap()
    }
}

const URN: &str = "urn:message:FerrybusTests.Wire:OrderPlaced";

/// The tests of this file share the `FerrybusTests.Wire:OrderPlaced` exchange (and its fault
/// exchange) and each deletes them when it is done: one at a time, so a test's cleanup never
/// removes an exchange another test is binding to.
static SHARED_EXCHANGES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The consumer's own error type.
#[derive(Debug, thiserror::Error)]
#[error("invoice declined for {0}")]
pub struct InvoiceDeclined(Uuid);

/// Starts a bus with one endpoint recording every `OrderPlaced` and its message id.
async fn recording_bus(queue: &str) -> (RabbitMqBus, Seen<(Option<Uuid>, OrderPlaced)>) {
    let seen: Seen<(Option<Uuid>, OrderPlaced)> = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(queue, move |e| {
            e.consumer(consumer_fn(
                "OrderConsumer",
                move |ctx: ConsumeContext<OrderPlaced>| {
                    let record = record.clone();
                    async move {
                        record
                            .lock()
                            .unwrap()
                            .push((ctx.message_id(), ctx.message().clone()));
                        Ok::<_, ConsumeError>(())
                    }
                },
            ))
        }),
    )
    .await;
    (bus, seen)
}

async fn wait_seen<T: Clone>(seen: &Seen<T>, count: usize) -> Vec<T> {
    eventually(&format!("{count} consumed"), WAIT, || async {
        let seen = seen.lock().unwrap();
        (seen.len() >= count).then(|| seen.clone())
    })
    .await
}

fn body(value: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec_pretty(&value).unwrap()
}

/// MassTransit's System.Text.Json options set `PropertyNameCaseInsensitive`; Newtonsoft's
/// default (PascalCase) publishers write `{"OrderId": …}` and a .NET consumer of a camelCase
/// contract reads it. So does ferrybus, nested objects and arrays included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pascal_case_payloads_bind_to_camel_case_contracts() {
    let _one_at_a_time = SHARED_EXCHANGES.lock().await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("wire-pascal");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Wire:OrderPlaced"]);
    let (bus, seen) = recording_bus(&queue).await;

    let id = Uuid::now_v7();
    let order_id = Uuid::now_v7();
    // As MassTransit 7 with Newtonsoft's default contract resolver writes it: PascalCase
    // everywhere, no nulls.
    let newtonsoft = body(serde_json::json!({
        "MessageId": id,
        "ConversationId": Uuid::now_v7(),
        "SourceAddress": "rabbitmq://localhost/dotnet_publisher",
        "DestinationAddress": "rabbitmq://localhost/FerrybusTests.Wire:OrderPlaced",
        "MessageType": [URN],
        "Message": {
            "OrderId": order_id,
            "Total": "12.50",
            "Lines": [{"Sku": "BOOK-1", "Quantity": 2}, {"SKU": "PEN-7", "quantity": 1}],
            "Note": "gift wrap"
        },
        "SentTime": "2025-05-24T18:39:56.3305069Z",
        "Headers": {},
        "Host": {"MachineName": "WIN-BUILD", "ProcessName": "Shop.Api", "ProcessId": 4242}
    }));
    probe
        .publish("", &queue, &newtonsoft, mt_properties(&id.to_string()))
        .await;

    let seen = wait_seen(&seen, 1).await;
    assert_eq!(seen[0].0, Some(id));
    assert_eq!(
        seen[0].1,
        OrderPlaced {
            order_id,
            total: "12.50".into(),
            lines: vec![
                Line {
                    sku: "BOOK-1".into(),
                    quantity: 2
                },
                Line {
                    sku: "PEN-7".into(),
                    quantity: 1
                },
            ],
            note: Some("gift wrap".into()),
        }
    );
    bus.stop().await;
    probe.cleanup().await;
}

/// Hand-written and script publishers: only some keys, `message` first, no AMQP `message_id`
/// (the envelope's id is the message id), a GUID that is not an RFC 4122 version; and an
/// `amqp://` fault address, which MassTransit's RabbitMQ addresses accept like `rabbitmq://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sloppy_producers_keep_working() {
    let _one_at_a_time = SHARED_EXCHANGES.lock().await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("wire-sloppy");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Wire:OrderPlaced"]);
    let (bus, seen) = recording_bus(&queue).await;

    let order_id = Uuid::now_v7();
    let partial = body(serde_json::json!({
        "message": {"orderId": order_id, "total": "3", "lines": []},
        "messageType": [URN],
        "messageId": "00000000-0000-0000-0000-0000000000a1"
    }));
    let no_message_id = BasicProperties::default()
        .with_content_type("application/vnd.masstransit+json".into())
        .with_delivery_mode(2);
    probe.publish("", &queue, &partial, no_message_id).await;

    let seen = wait_seen(&seen, 1).await;
    assert_eq!(
        seen[0].0,
        Some("00000000-0000-0000-0000-0000000000a1".parse().unwrap())
    );
    assert_eq!(seen[0].1.order_id, order_id);
    assert!(seen[0].1.lines.is_empty());
    bus.stop().await;

    // A failing consumer's Fault<T> goes to an `amqp://` fault address.
    let failing_queue = unique("wire-amqp-fault");
    probe.track_endpoint(&failing_queue);
    let faults = unique("wire-amqp-faults");
    probe.track(&[], &[&faults]);
    let listener = probe.bind_probe(&faults).await;
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&failing_queue, |e| {
            e.publish_faults(false).consumer(consumer_fn(
                "DecliningConsumer",
                |ctx: ConsumeContext<OrderPlaced>| async move {
                    Err::<(), _>(InvoiceDeclined(ctx.message().order_id).into())
                },
            ))
        }),
    )
    .await;
    let id = Uuid::now_v7();
    let with_amqp_address = body(serde_json::json!({
        "messageId": id,
        "faultAddress": format!("amqp://localhost/{faults}"),
        "messageType": [URN],
        "message": {"orderId": order_id, "total": "3", "lines": []}
    }));
    probe
        .publish(
            "",
            &failing_queue,
            &with_amqp_address,
            mt_properties(&id.to_string()),
        )
        .await;
    let fault = probe.wait_get(&listener).await;
    let envelope = ferrybus_core::Envelope::from_slice(&fault.delivery.data).unwrap();
    assert!(envelope.has_message_type(Fault::<OrderPlaced>::message_type().urn()));
    let fault: Fault<OrderPlaced> = envelope.message.bind().unwrap();
    assert_eq!(fault.faulted_message_id, Some(id));
    assert_eq!(fault.message.order_id, order_id);
    bus.stop().await;
    probe.cleanup().await;
}

/// MassTransit picks the deserializer registered for the content type and falls back to the
/// endpoint's default — the envelope's — for a missing or unknown one
/// (`src/MassTransit/Serialization/Serialization.cs`). Raw JSON is registered only where the
/// endpoint enables it, so `application/json` is read as an envelope too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_types_pick_the_deserializer_as_masstransit_does() {
    let _one_at_a_time = SHARED_EXCHANGES.lock().await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("wire-content-type");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Wire:OrderPlaced"]);
    let (bus, seen) = recording_bus(&queue).await;

    let content_types = [
        Some("text/plain"),
        None,
        Some("application/json; charset=utf-8"),
    ];
    let mut expected = Vec::new();
    for (i, content_type) in content_types.iter().enumerate() {
        let id = Uuid::now_v7();
        expected.push(id);
        let envelope = body(serde_json::json!({
            "messageId": id,
            "messageType": [URN],
            "message": {"orderId": Uuid::now_v7(), "total": i.to_string(), "lines": []}
        }));
        let mut properties = BasicProperties::default()
            .with_message_id(id.to_string().into())
            .with_delivery_mode(2);
        if let Some(content_type) = content_type {
            properties = properties.with_content_type((*content_type).into());
        }
        probe.publish("", &queue, &envelope, properties).await;
    }
    let seen = wait_seen(&seen, 3).await;
    let mut ids: Vec<Uuid> = seen.iter().filter_map(|(id, _)| *id).collect();
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected);
    // `_error` is declared on the first move: it does not even exist.
    assert_eq!(
        probe
            .queue_count(&format!("{queue}_error"))
            .await
            .unwrap_or(0),
        0
    );
    bus.stop().await;
    probe.cleanup().await;
}

/// `MessageEnvelope.MessageType` is `string[]`: a string there does not deserialize, so
/// MassTransit moves the message to `_error` and publishes a `ReceiveFault`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_type_that_is_a_string_goes_to_error() {
    let _one_at_a_time = SHARED_EXCHANGES.lock().await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("wire-type-string");
    probe.track_endpoint(&queue);
    probe.track(
        &[],
        &["FerrybusTests.Wire:OrderPlaced", "MassTransit:ReceiveFault"],
    );
    let receive_faults = probe.bind_probe("MassTransit:ReceiveFault").await;
    let (bus, seen) = recording_bus(&queue).await;

    let id = Uuid::now_v7();
    let string_type = body(serde_json::json!({
        "messageId": id,
        "messageType": URN,
        "message": {"orderId": Uuid::now_v7(), "total": "1", "lines": []}
    }));
    probe
        .publish("", &queue, &string_type, mt_properties(&id.to_string()))
        .await;
    let moved = probe.wait_get(&format!("{queue}_error")).await;
    assert_eq!(moved.delivery.data, string_type);
    assert_eq!(header_str(&moved, "MT-Reason").as_deref(), Some("fault"));
    let reason = header_str(&moved, "MT-Fault-Message").unwrap();
    assert!(
        reason.starts_with("messageType: expected an array of URN strings, found a string"),
        "{reason}"
    );
    assert_eq!(
        header_str(&moved, "MT-Fault-ExceptionType").as_deref(),
        Some("ferrybus_core::envelope::EnvelopeError")
    );
    let fault = probe
        .wait_for(&receive_faults, |m| {
            m.body["message"]["faultedMessageId"] == id.to_string()
        })
        .await;
    let fault: ReceiveFault = serde_json::from_value(fault.body["message"].clone()).unwrap();
    assert_eq!(
        fault.content_type.as_deref(),
        Some("application/vnd.masstransit+json")
    );
    assert!(seen.lock().unwrap().is_empty());
    bus.stop().await;
    probe.cleanup().await;
}

/// A payload that does not bind to `T`: MassTransit's `TryGetMessage<T>` throws in the
/// message-type filter, inside the endpoint's retry, before any consumer ran. The error pipe's
/// `GenerateFaultFilter` publishes a `ReceiveFault` (no consumer faulted), never a `Fault<T>`
/// whose `message` is not a `T`, naming the message by its envelope's id and types (also when the
/// AMQP `message_id` is not set); `ErrorTransportFilter` moves it to `_error` with the retry
/// count and without consumer headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_does_not_bind_gets_a_receive_fault_not_a_fault_of_t() {
    let _one_at_a_time = SHARED_EXCHANGES.lock().await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("wire-unbound");
    probe.track_endpoint(&queue);
    let fault_exchange = Fault::<OrderPlaced>::message_type()
        .entity_name()
        .to_owned();
    probe.track(
        &[],
        &[
            "FerrybusTests.Wire:OrderPlaced",
            "MassTransit:ReceiveFault",
            &fault_exchange,
        ],
    );
    let receive_faults = probe.bind_probe("MassTransit:ReceiveFault").await;
    let typed_faults = probe.bind_probe(&fault_exchange).await;
    let consumed = Arc::new(Mutex::new(0u32));
    let count = consumed.clone();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, move |e| {
            e.retry(RetryPolicy::immediate(1)).consumer(consumer_fn(
                "OrderConsumer",
                move |_ctx: ConsumeContext<OrderPlaced>| {
                    *count.lock().unwrap() += 1;
                    async { Ok::<_, ConsumeError>(()) }
                },
            ))
        }),
    )
    .await;

    let id = Uuid::now_v7();
    let unbound = body(serde_json::json!({
        "messageId": id,
        "messageType": [URN],
        "message": {"orderId": "order-42", "total": "abc", "lines": []}
    }));
    // Published as a client that sets no AMQP `message_id` does: the fault names the message
    // from its envelope (MassTransit's `GenerateFaultFilter` reads the consume context).
    let no_message_id = BasicProperties::default()
        .with_content_type("application/vnd.masstransit+json".into())
        .with_delivery_mode(2);
    probe.publish("", &queue, &unbound, no_message_id).await;

    let moved = probe.wait_get(&format!("{queue}_error")).await;
    assert_eq!(moved.delivery.data, unbound);
    assert_eq!(
        header_str(&moved, "MT-Fault-ExceptionType").as_deref(),
        Some("serde_json::Error")
    );
    let reason = header_str(&moved, "MT-Fault-Message").unwrap();
    assert!(
        reason.contains("order-42") || reason.contains("UUID"),
        "{reason}"
    );
    assert_eq!(header_int(&moved, "MT-Fault-RetryCount"), Some(1));
    assert!(!has_header(&moved, "MT-Fault-ConsumerType"));
    assert!(!has_header(&moved, "MT-Fault-MessageType"));

    let fault = probe
        .wait_for(&receive_faults, |m| {
            m.body["message"]["faultedMessageId"] == id.to_string()
        })
        .await;
    assert_eq!(
        fault.body["messageType"][0],
        "urn:message:MassTransit:ReceiveFault"
    );
    let fault: ReceiveFault = serde_json::from_value(fault.body["message"].clone()).unwrap();
    assert_eq!(fault.exceptions[0].exception_type, "serde_json::Error");
    assert_eq!(fault.faulted_message_id, Some(id));
    assert_eq!(fault.fault_message_types, [URN]);
    // The one fault of this delivery was the ReceiveFault: no Fault<OrderPlaced> at all.
    assert_eq!(probe.queue_count(&typed_faults).await, Some(0));
    assert_eq!(*consumed.lock().unwrap(), 0);
    bus.stop().await;
    probe.cleanup().await;
}

/// `MT-Fault-*` headers and `Fault<T>` as .NET writes them: the timestamp in the round-trip
/// format (seven fractional digits), the Rust error type, a stack trace of at most 2048
/// characters with paths relative to the crate, and the host with the process name, the Rust
/// version and ferrybus's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_read_as_dotnet_writes_them() {
    let _one_at_a_time = SHARED_EXCHANGES.lock().await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("wire-fault-shape");
    probe.track_endpoint(&queue);
    let fault_exchange = Fault::<OrderPlaced>::message_type()
        .entity_name()
        .to_owned();
    probe.track(&[], &["FerrybusTests.Wire:OrderPlaced", &fault_exchange]);
    let faults = probe.bind_probe(&fault_exchange).await;
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.consumer(consumer_fn(
                "DecliningConsumer",
                |ctx: ConsumeContext<OrderPlaced>| async move { decline(ctx.message()) },
            ))
        }),
    )
    .await;

    let id = Uuid::now_v7();
    let order_id = Uuid::now_v7();
    let order = body(serde_json::json!({
        "messageId": id,
        "messageType": [URN],
        "message": {"OrderId": order_id, "Total": "9.99", "Lines": [], "Extra": true}
    }));
    probe
        .publish("", &queue, &order, mt_properties(&id.to_string()))
        .await;

    let moved = probe.wait_get(&format!("{queue}_error")).await;
    let timestamp = header_str(&moved, "MT-Fault-Timestamp").unwrap();
    let (seconds, fraction) = timestamp.trim_end_matches('Z').split_once('.').unwrap();
    assert!(timestamp.ends_with('Z'), "{timestamp}");
    assert_eq!(fraction.len(), 7, "{timestamp}");
    assert!(chrono::NaiveDateTime::parse_from_str(seconds, "%Y-%m-%dT%H:%M:%S").is_ok());
    assert_eq!(
        header_str(&moved, "MT-Fault-ExceptionType").as_deref(),
        Some("wire::InvoiceDeclined")
    );
    let trace = header_str(&moved, "MT-Fault-StackTrace").unwrap();
    assert!(trace.chars().count() <= 2048);
    assert!(
        trace.contains("at wire::decline in tests/wire.rs:line"),
        "{trace}"
    );
    assert!(
        !trace.contains(" in /") && !trace.contains(env!("CARGO_MANIFEST_DIR")),
        "{trace}"
    );
    let process = std::env::current_exe()
        .unwrap()
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        header_str(&moved, "MT-Host-ProcessName"),
        Some(process.clone())
    );
    assert_eq!(
        header_str(&moved, "MT-Host-MassTransitVersion").as_deref(),
        Some(concat!("ferrybus ", env!("CARGO_PKG_VERSION")))
    );

    let fault = probe.wait_get(&faults).await;
    let envelope = ferrybus_core::Envelope::from_slice(&fault.delivery.data).unwrap();
    let fault: Fault<OrderPlaced> = envelope.message.bind().unwrap();
    // The faulted message is a T, as T writes it: camelCase, the unknown key dropped.
    assert_eq!(
        envelope.message["message"],
        serde_json::json!({"orderId": order_id, "total": "9.99", "lines": [], "note": null})
    );
    let exception = &fault.exceptions[0];
    assert_eq!(exception.exception_type, "wire::InvoiceDeclined");
    assert_eq!(exception.stack_trace.as_deref(), Some(trace.as_str()));
    let host = fault.host.unwrap();
    assert_eq!(host.process_name, Some(process));
    assert!(host.framework_version.unwrap().starts_with("Rust 1."));
    assert!(host.operating_system_version.is_some());
    bus.stop().await;
    probe.cleanup().await;
}

#[inline(never)]
fn decline(order: &OrderPlaced) -> Result<(), ConsumeError> {
    Err(InvoiceDeclined(order.order_id))?
}

/// Address options MassTransit's `RabbitMqEndpointAddress` reads: `alternateexchange=X`
/// declares the destination with `alternate-exchange = X` (what no binding routes goes there),
/// `bindexchange=Y` declares `Y` and binds it from the destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternate_and_bound_exchanges_from_the_address() {
    let _one_at_a_time = SHARED_EXCHANGES.lock().await;
    use ferrybus_core::Publish;
    let probe = Probe::connect(&amqp_url()).await;
    let unrouted = unique("wire-unrouted");
    let alternate = unique("wire-alternate");
    let source = unique("wire-source");
    let copy = unique("wire-copy");
    probe.track(&[], &[&unrouted, &alternate, &source, &copy]);
    let alternate_listener = probe.bind_probe(&alternate).await;
    let copy_listener = probe.bind_probe(&copy).await;
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;

    let order = OrderPlaced {
        order_id: Uuid::now_v7(),
        total: "1".into(),
        lines: vec![],
        note: None,
    };
    let first = bus
        .send(
            &format!("rabbitmq://localhost/{unrouted}?alternateexchange={alternate}"),
            &order,
        )
        .await
        .unwrap();
    let got = probe.wait_get(&alternate_listener).await;
    assert_eq!(
        got.delivery
            .properties
            .message_id()
            .as_ref()
            .unwrap()
            .as_str(),
        first.to_string()
    );
    let second = bus
        .send(
            &format!("rabbitmq://localhost/{source}?bindexchange={copy}"),
            &order,
        )
        .await
        .unwrap();
    let got = probe.wait_get(&copy_listener).await;
    assert_eq!(
        got.delivery
            .properties
            .message_id()
            .as_ref()
            .unwrap()
            .as_str(),
        second.to_string()
    );
    bus.stop().await;
    probe.cleanup().await;
}

/// What a consumer sends takes the AMQP priority of the message it consumes (MassTransit's
/// `RabbitMqSendTransportContext.CopyIncomingPropertiesIfPresent`), unless it sets its own; a
/// header whose value is a time goes out as an AMQP timestamp, as MassTransit sends `DateTime`
/// header values (`RabbitMqSendTransportContext.SetHeaders`, `AmqpTimestampExtensions`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_is_copied_and_time_headers_are_amqp_timestamps() {
    use chrono::TimeZone;
    use ferrybus_core::SendOptions;
    let _one_at_a_time = SHARED_EXCHANGES.lock().await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("wire-priority");
    let copied = unique("wire-priority-copied");
    let own = unique("wire-priority-own");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Wire:OrderPlaced", &copied, &own]);
    let copied_listener = probe.bind_probe(&copied).await;
    let own_listener = probe.bind_probe(&own).await;
    let promised = chrono::Utc
        .with_ymd_and_hms(2025, 5, 24, 18, 39, 56)
        .unwrap();
    let (copied_to, own_to) = (format!("exchange:{copied}"), format!("exchange:{own}"));
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, move |e| {
            e.consumer(consumer_fn(
                "ForwardingConsumer",
                move |ctx: ConsumeContext<OrderPlaced>| {
                    let (copied_to, own_to) = (copied_to.clone(), own_to.clone());
                    async move {
                        let order = ctx.message().clone();
                        let timed = SendOptions::new().header_time("Promised", promised);
                        ctx.send_with(&copied_to, &order, timed).await?;
                        let own = SendOptions::new().priority(9);
                        ctx.send_with(&own_to, &order, own).await?;
                        Ok::<_, ConsumeError>(())
                    }
                },
            ))
        }),
    )
    .await;

    let id = Uuid::now_v7();
    let envelope = body(serde_json::json!({
        "messageId": id,
        "messageType": [URN],
        "message": {"orderId": Uuid::now_v7(), "total": "1", "lines": []}
    }));
    probe
        .publish(
            "",
            &queue,
            &envelope,
            mt_properties(&id.to_string()).with_priority(5),
        )
        .await;

    let got = probe.wait_get(&copied_listener).await;
    assert_eq!(*got.delivery.properties.priority(), Some(5));
    let headers = got.delivery.properties.headers().clone().unwrap();
    assert_eq!(
        headers.inner()["Promised"],
        lapin::types::AMQPValue::Timestamp(promised.timestamp() as u64)
    );
    let sent: serde_json::Value = serde_json::from_slice(&got.delivery.data).unwrap();
    assert_eq!(
        sent["headers"]["Promised"], "2025-05-24T18:39:56.0000000Z",
        "the envelope keeps .NET's round-trip text"
    );
    let got = probe.wait_get(&own_listener).await;
    assert_eq!(*got.delivery.properties.priority(), Some(9));
    bus.stop().await;
    probe.cleanup().await;
}
