//! A Rust service beside its .NET twins on the real broker: raw JSON consumed and sent as
//! MassTransit's raw JSON serializer does, and a `Fault<T>` published the way .NET publishes it
//! consumed by a Rust consumer.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use ferrybus_core::outgoing::Serializer;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Fault, Message, MessageType};
use ferrybus_core::{Publish, SendOptions};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_testing::{amqp_url, eventually, header_str, mt_properties, unique, Probe, WAIT};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StockReserved {
    pub sku: String,
    pub quantity: u32,
}

impl Message for StockReserved {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusTests.MixedFleet:StockReserved").unwrap()
    }
}

/// What the raw JSON endpoint saw: the message and its ids.
type Seen = Arc<Mutex<Vec<(Option<Uuid>, Option<Uuid>, StockReserved)>>>;

async fn raw_json_bus(queue: &str, seen: &Seen) -> RabbitMqBus {
    let record = seen.clone();
    start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(queue, move |e| {
            e.serializer(Serializer::raw_json())
                .bind_message_types(false)
                .consumer(consumer_fn(
                    "StockConsumer",
                    move |ctx: ConsumeContext<StockReserved>| {
                        let record = record.clone();
                        async move {
                            let seen = (
                                ctx.message_id(),
                                ctx.correlation_id(),
                                ctx.message().clone(),
                            );
                            record.lock().unwrap().push(seen);
                            Ok::<_, ConsumeError>(())
                        }
                    },
                ))
        }),
    )
    .await
}

async fn wait_for_id(seen: &Seen, id: Uuid) -> (Option<Uuid>, StockReserved) {
    eventually(&format!("{id} consumed"), WAIT, || async {
        let seen = seen.lock().unwrap();
        seen.iter()
            .find(|(m, _, _)| *m == Some(id))
            .map(|(_, c, s)| (*c, s.clone()))
    })
    .await
}

/// A .NET service with `UseRawJsonSerializer()` sends the message itself as the body with its
/// ids in headers (`RawMessageSerializer.SetRawMessageHeaders`); a ferrybus endpoint with
/// `serializer(Serializer::raw_json())` reads it. A ferrybus service sends one message raw the
/// same way (`SendOptions::serializer`), and that endpoint reads it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_json_is_consumed_and_sent() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("mixed-raw");
    probe.track_endpoint(&queue);
    let seen: Seen = Arc::default();
    let bus = raw_json_bus(&queue, &seen).await;

    // As .NET writes it: no envelope, ids in headers, the AMQP message_id set.
    let (id, correlation) = (Uuid::now_v7(), Uuid::now_v7());
    let mut headers = FieldTable::default();
    for (name, value) in [
        ("MessageId", id.to_string()),
        ("CorrelationId", correlation.to_string()),
        ("ConversationId", Uuid::now_v7().to_string()),
        (
            "MT-MessageType",
            format!("urn:message:{}", "FerrybusTests.MixedFleet:StockReserved"),
        ),
        (
            "MT-Host-Info",
            r#"{"MachineName":"DOTNET-1","ProcessName":"Stock","ProcessId":7}"#.to_owned(),
        ),
    ] {
        headers.insert(name.into(), AMQPValue::LongString(value.into()));
    }
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_message_id(id.to_string().into())
        .with_delivery_mode(2)
        .with_headers(headers);
    probe
        .publish("", &queue, br#"{"sku":"B-42","quantity":3}"#, properties)
        .await;
    let (got_correlation, message) = wait_for_id(&seen, id).await;
    assert_eq!(got_correlation, Some(correlation));
    assert_eq!(
        message,
        StockReserved {
            sku: "B-42".into(),
            quantity: 3
        }
    );

    // Sent raw by ferrybus: the same endpoint reads it, ids from the headers.
    let chosen = Uuid::now_v7();
    let sent = StockReserved {
        sku: "C-7".into(),
        quantity: 1,
    };
    let options = SendOptions::new()
        .serializer(Serializer::raw_json())
        .correlation_id(chosen);
    let id = bus
        .send_with(&format!("queue:{queue}"), &sent, options)
        .await
        .unwrap();
    let (got_correlation, message) = wait_for_id(&seen, id).await;
    assert_eq!(got_correlation, Some(chosen));
    assert_eq!(message, sent);
    bus.stop().await;
    probe.cleanup().await;
}

/// What a raw JSON publish puts on the wire, read by a plain AMQP consumer: the message as the
/// body, `application/json`, and MassTransit's raw headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_json_publish_carries_the_message_as_its_body_and_ids_as_headers() {
    let probe = Probe::connect(&amqp_url()).await;
    let exchange = StockReserved::message_type().entity_name().to_owned();
    probe.track(&[], &[&exchange]);
    let wire = probe.bind_probe(&exchange).await;
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;
    let message = StockReserved {
        sku: "D-1".into(),
        quantity: 2,
    };
    let id = bus
        .publish_with(
            &message,
            SendOptions::new().serializer(Serializer::raw_json()),
        )
        .await
        .unwrap();
    let got = eventually("the raw publish", WAIT, || async {
        while let Some(m) = probe.get(&wire).await {
            if header_str(&m, "MessageId") == Some(id.to_string()) {
                return Some(m);
            }
        }
        None
    })
    .await;
    let body: serde_json::Value = serde_json::from_slice(&got.delivery.data).unwrap();
    assert_eq!(body, serde_json::json!({"sku": "D-1", "quantity": 2}));
    let properties = &got.delivery.properties;
    assert_eq!(
        properties.content_type().as_ref().map(|c| c.as_str()),
        Some("application/json")
    );
    assert_eq!(
        properties.message_id().as_ref().map(|c| c.as_str()),
        Some(id.to_string().as_str())
    );
    assert_eq!(
        header_str(&got, "MT-MessageType").as_deref(),
        Some("urn:message:FerrybusTests.MixedFleet:StockReserved")
    );
    assert!(header_str(&got, "ConversationId").is_some());
    let host: serde_json::Value =
        serde_json::from_str(&header_str(&got, "MT-Host-Info").unwrap()).unwrap();
    assert!(host["MachineName"].is_string(), "{host}");
    assert!(header_str(&got, "MT-Source-Address").is_some());
    bus.stop().await;
    probe.delete_queue(&wire).await;
    probe.cleanup().await;
}

/// The message inside the captured .NET fault (`fixtures/envelopes/01-…`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceptMessage {
    pub id: Uuid,
    pub logical_name: String,
    pub operation: String,
}

impl Message for AcceptMessage {
    fn message_type() -> MessageType {
        MessageType::parse("DOMAIN.Messages:AcceptMessage").unwrap()
    }
}

/// A `Fault<AcceptMessage>` as MassTransit 8 published it (a captured envelope,
/// `fixtures/envelopes/01-v8.0.10-stj-fault-published-asb.json`), published to its fault
/// exchange `MassTransit:Fault--DOMAIN.Messages:AcceptMessage--` as .NET's publish topology does,
/// reaches a Rust consumer of `Fault<AcceptMessage>` with every field read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_consumer_reads_a_fault_published_by_dotnet() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("mixed-fault");
    probe.track_endpoint(&queue);
    let fault_exchange = "MassTransit:Fault--DOMAIN.Messages:AcceptMessage--";
    probe.track(&[], &[fault_exchange]);
    let seen: Arc<Mutex<Vec<Fault<AcceptMessage>>>> = Arc::default();
    let record = seen.clone();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, move |e| {
            e.consumer(consumer_fn(
                "AcceptFaultConsumer",
                move |ctx: ConsumeContext<Fault<AcceptMessage>>| {
                    let record = record.clone();
                    async move {
                        record.lock().unwrap().push(ctx.message().clone());
                        Ok::<_, ConsumeError>(())
                    }
                },
            ))
        }),
    )
    .await;
    assert_eq!(
        Fault::<AcceptMessage>::message_type().entity_name(),
        fault_exchange
    );

    let body =
        include_bytes!("../../../fixtures/envelopes/01-v8.0.10-stj-fault-published-asb.json");
    probe
        .publish(
            fault_exchange,
            "",
            body,
            mt_properties("101b0000-a566-c025-a8fa-08dafb14324e"),
        )
        .await;
    let fault = eventually("the fault consumed", WAIT, || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(
        fault.fault_id,
        Some(Uuid::parse_str("101b0000-a566-c025-9d4d-08dafb14324e").unwrap())
    );
    assert_eq!(
        fault.faulted_message_id,
        Some(Uuid::parse_str("101b0000-a566-c025-a81b-08dafb143207").unwrap())
    );
    assert_eq!(
        fault.timestamp.map(|t| t.to_rfc3339()),
        Some("2023-01-20T18:28:58.827704700+00:00".to_owned())
    );
    let exception = &fault.exceptions[0];
    assert_eq!(
        exception.exception_type,
        "System.ServiceModel.FaultException<Microsoft.Xrm.Sdk.OrganizationServiceFault>"
    );
    assert_eq!(
        exception.message.as_deref(),
        Some("Incorrect attribute value type System.String")
    );
    assert!(exception.inner_exception.is_none());
    assert_eq!(
        fault.host.as_ref().and_then(|h| h.machine_name.as_deref()),
        Some("PC-H38X2B3")
    );
    assert_eq!(
        fault.fault_message_types,
        ["urn:message:DOMAIN.Messages:AcceptMessage"]
    );
    assert_eq!(
        fault.message.id,
        Uuid::parse_str("08dca563-1bcf-4be2-8e26-384e5c86ac28").unwrap()
    );
    assert_eq!(fault.message.logical_name, "contact");
    assert_eq!(fault.message.operation, "Create");
    bus.stop().await;
    probe.cleanup().await;
}

/// An endpoint named by a formatter declares the queue its .NET twin reads: MassTransit's
/// `SnakeCaseEndpointNameFormatter("Dev-", false)` names `SubmitOrderConsumer`
/// `dev-submit_order` (`EndpointName_Specs.Should_include_the_prefix_snake_with_separator`); a
/// message sent to that literal queue name reaches the consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_named_by_a_formatter_declares_the_dotnet_queue() {
    use ferrybus_core::endpoint::EndpointNameFormatter;
    let probe = Probe::connect(&amqp_url()).await;
    let suffix = ferrybus_testing::unique_suffix();
    let expected = format!("ft{suffix}-submit_order");
    probe.track_endpoint(&expected);
    let formatter = EndpointNameFormatter::snake_case().prefix(format!("Ft{suffix}-"));
    let queue = formatter
        .consumer("Sample.Components.SubmitOrderConsumer")
        .unwrap();
    assert_eq!(queue, expected);
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(queue, move |e| {
            e.bind_message_types(false).consumer(consumer_fn(
                "SubmitOrderConsumer",
                move |ctx: ConsumeContext<StockReserved>| {
                    let record = record.clone();
                    async move {
                        let seen = (
                            ctx.message_id(),
                            ctx.correlation_id(),
                            ctx.message().clone(),
                        );
                        record.lock().unwrap().push(seen);
                        Ok::<_, ConsumeError>(())
                    }
                },
            ))
        }),
    )
    .await;
    assert_eq!(
        probe.queue_count(&expected).await,
        Some(0),
        "the queue exists"
    );
    let message = StockReserved {
        sku: "E-5".into(),
        quantity: 4,
    };
    let id = bus
        .send(&format!("queue:{expected}"), &message)
        .await
        .unwrap();
    assert_eq!(wait_for_id(&seen, id).await.1, message);
    bus.stop().await;
    probe.cleanup().await;
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InvoiceRequested {
    pub order: String,
    /// How many attempts fail before one succeeds (`u32::MAX`: all).
    pub failing_attempts: u32,
}

impl Message for InvoiceRequested {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusTests.MixedFleet:InvoiceRequested").unwrap()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InvoiceCreated {
    pub order: String,
    pub attempt: u32,
}

impl Message for InvoiceCreated {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusTests.MixedFleet:InvoiceCreated").unwrap()
    }
}

/// A consumer without a database behind MassTransit's in-memory outbox (`UseInMemoryOutbox`):
/// what it publishes leaves only when it succeeds. A consumer that always fails publishes
/// nothing (its message goes to `_error`), and one that fails once and then succeeds publishes
/// only the successful attempt's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_less_consumer_publishes_only_when_it_succeeds() {
    use ferrybus_core::consume::InMemoryOutboxLayer;
    use ferrybus_core::RetryPolicy;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("mixed-outbox");
    probe.track_endpoint(&queue);
    let created = InvoiceCreated::message_type().entity_name().to_owned();
    probe.track(&[], &[&created]);
    let published = probe.bind_probe(&created).await;
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.bind_message_types(false)
                .retry(RetryPolicy::immediate(2))
                .consumer_layer(InMemoryOutboxLayer)
                .consumer(consumer_fn(
                    "InvoiceConsumer",
                    |ctx: ConsumeContext<InvoiceRequested>| async move {
                        let attempt = ctx.retry_attempt();
                        let order = ctx.message().order.clone();
                        ctx.publish(&InvoiceCreated { order, attempt }).await?;
                        if attempt < ctx.message().failing_attempts {
                            return Err(ConsumeError::handler("the invoice service is down"));
                        }
                        Ok(())
                    },
                ))
        }),
    )
    .await;
    let address = format!("queue:{queue}");
    let request = |order: &str, failing_attempts| InvoiceRequested {
        order: order.into(),
        failing_attempts,
    };
    bus.send(&address, &request("always-fails", u32::MAX))
        .await
        .unwrap();
    bus.send(&address, &request("fails-once", 1)).await.unwrap();
    bus.send(&address, &request("succeeds", 0)).await.unwrap();

    // The failed message reached `_error` (after its three attempts) …
    let error_queue = format!("{queue}_error");
    eventually("the failed message in _error", WAIT, || async {
        (probe.queue_count(&error_queue).await == Some(1)).then_some(())
    })
    .await;
    // … and the other two consumers returned: two invoices, one per success.
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = probe.wait_for(&published, |_| true).await;
        got.push((
            m.body["message"]["order"].as_str().unwrap().to_owned(),
            m.body["message"]["attempt"].as_u64().unwrap(),
        ));
    }
    got.sort();
    assert_eq!(
        got,
        [("fails-once".to_owned(), 1), ("succeeds".to_owned(), 0)]
    );
    bus.stop().await;
    // Stopped: nothing else can arrive; the failed attempts published nothing.
    assert_eq!(probe.queue_count(&published).await, Some(0));
    probe.delete_queue(&published).await;
    probe.cleanup().await;
}
