//! Topology, properties, address forms, fixtures, prefetch/concurrency and graceful shutdown
//! against the real broker.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Envelope, Publish, SendOptions};
use ferrybus_rabbitmq::{Event, RabbitMqBus};
use ferrybus_testing::{
    amqp_url, eventually, has_header, header_int, header_str, mt_properties, unique, wait_event,
    Probe, WAIT,
};
use lapin::types::AMQPValue;
use lapin::BasicProperties;

test_message!(Placed, "FerrybusTests.Consume:Placed");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_and_acks_with_masstransit_topology() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("consume");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Consume:Placed"]);
    let seen: Seen<Placed> = Arc::default();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.consumer(consumer_fn("PlacedConsumer", recorder(seen.clone())))
        }),
    )
    .await;
    assert!(probe.exchange_exists(&queue).await, "endpoint exchange");
    assert!(
        probe.exchange_exists("FerrybusTests.Consume:Placed").await,
        "type exchange"
    );
    assert_eq!(probe.queue_count(&queue).await, Some(0));

    let mut events = bus.events();
    let id = bus.publish(&Placed { n: 1, fail: false }).await.unwrap();
    let id = id.to_string();
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Consumed { message_id: Some(m), duplicate: false, .. } if *m == id),
    )
    .await;
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [Placed { n: 1, fail: false }]
    );
    assert_eq!(probe.queue_count(&queue).await, Some(0), "acked");
    assert_eq!(
        probe.queue_count(&format!("{queue}_error")).await,
        None,
        "error queue is lazy"
    );
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(
    Created,
    "FerrybusTests.Publish:Created",
    ["FerrybusTests.Publish:IEvent"]
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_binds_base_types_and_sets_masstransit_properties() {
    let probe = Probe::connect(&amqp_url()).await;
    probe.track(
        &[],
        &[
            "FerrybusTests.Publish:Created",
            "FerrybusTests.Publish:IEvent",
        ],
    );
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;
    // First publish declares the type exchange, the base exchange and the e2e binding.
    bus.publish(&Created { n: 0, fail: false }).await.unwrap();
    assert!(probe.exchange_exists("FerrybusTests.Publish:IEvent").await);
    let listener = probe.bind_probe("FerrybusTests.Publish:IEvent").await;

    let options = SendOptions::new()
        .header("Tenant", "acme")
        .header("Flag", true)
        .header("Off", false)
        .header("Count", 7)
        .header("List", serde_json::json!(["a"]))
        .time_to_live(Duration::from_secs(60))
        .correlation_id(uuid::Uuid::from_u128(42));
    let id = bus
        .publish_with(&Created { n: 2, fail: false }, options)
        .await
        .unwrap();
    let got = probe.wait_get(&listener).await;
    let p = &got.delivery.properties;
    assert_eq!(
        p.content_type().as_ref().unwrap().as_str(),
        "application/vnd.masstransit+json"
    );
    assert_eq!(p.message_id().as_ref().unwrap().as_str(), id.to_string());
    assert_eq!(
        p.correlation_id().as_ref().unwrap().as_str(),
        uuid::Uuid::from_u128(42).to_string()
    );
    assert_eq!(*p.delivery_mode(), Some(2));
    let expiration: u64 = p.expiration().as_ref().unwrap().as_str().parse().unwrap();
    assert!(expiration > 50_000 && expiration <= 60_000, "{expiration}");
    assert_eq!(header_str(&got, "Tenant").as_deref(), Some("acme"));
    assert_eq!(header_str(&got, "Flag").as_deref(), Some("True"));
    assert_eq!(header_int(&got, "Count"), Some(7));
    assert!(!has_header(&got, "Off") && !has_header(&got, "List"));

    let envelope = Envelope::from_slice(&got.delivery.data).unwrap();
    assert_eq!(envelope.message_id, Some(id));
    assert_eq!(envelope.message["n"], 2);
    assert_eq!(
        envelope.message_type[1],
        "urn:message:FerrybusTests.Publish:IEvent"
    );
    assert_eq!(
        envelope.headers.get("List"),
        Some(&serde_json::json!(["a"]))
    );
    let source = envelope.source_address.unwrap();
    assert_eq!(source, bus.address());
    assert!(
        source.contains("_bus_") && source.ends_with("?temporary=true"),
        "{source}"
    );
    assert_eq!(
        envelope.destination_address,
        Some(bus.host().entity_address("FerrybusTests.Publish:Created"))
    );
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(Sent, "FerrybusTests.Send:Sent");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_to_every_address_form() {
    let probe = Probe::connect(&amqp_url()).await;
    let bus = start(RabbitMqBus::builder(&amqp_url())).await;
    let msg = Sent { n: 1, fail: false };

    // queue:name declares exchange + queue + binding.
    let q = unique("send-queue");
    probe.track(&[&q], &[&q]);
    bus.send(&format!("queue:{q}"), &msg).await.unwrap();
    let got = probe.wait_get(&q).await;
    let envelope = Envelope::from_slice(&got.delivery.data).unwrap();
    assert_eq!(
        envelope.destination_address,
        Some(format!("{}?bind=true", bus.host().entity_address(&q)))
    );

    // ?bind=true&queue=other binds a differently named queue.
    let (x, other) = (unique("send-x"), unique("send-other"));
    probe.track(&[&other], &[&x]);
    bus.send(
        &format!("{}?bind=true&queue={other}", bus.host().entity_address(&x)),
        &msg,
    )
    .await
    .unwrap();
    probe.wait_get(&other).await;

    // exchange:name and a full address declare only the (durable) exchange.
    let full = bus.host().entity_address("{}");
    for (form, durable, auto_delete) in [
        ("exchange:{}".to_owned(), true, false),
        (full.clone(), true, false),
        (format!("{full}?temporary=true"), false, true),
    ] {
        let name = unique("send-e");
        probe.track(&[], &[&name]);
        let address = form.replace("{}", &name);
        bus.send(&address, &msg).await.unwrap();
        assert!(probe.exchange_exists(&name).await, "{address}");
        assert_eq!(
            probe.queue_count(&name).await,
            None,
            "no queue for {address}"
        );
        assert!(
            probe
                .exchange_flags_match(&name, durable, auto_delete)
                .await,
            "flags of {address}"
        );
        let listener = probe.bind_probe_existing(&name).await;
        let id = bus
            .send(&address, &Sent { n: 2, fail: false })
            .await
            .unwrap();
        let got = probe.wait_get(&listener).await;
        assert_eq!(
            got.delivery
                .properties
                .message_id()
                .as_ref()
                .unwrap()
                .as_str(),
            id.to_string()
        );
    }
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_and_concurrency_are_respected() {
    test_message!(Slow, "FerrybusTests.Prefetch:Slow");
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("prefetch");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Prefetch:Slow"]);
    let running = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (r, m, g) = (running.clone(), max.clone(), gate.clone());
    let consumer = consumer_fn("SlowConsumer", move |_ctx: ConsumeContext<Slow>| {
        let (r, m, g) = (r.clone(), m.clone(), g.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            g.acquire().await.unwrap().forget();
            r.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, ConsumeError>(())
        }
    });
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&queue, |e| e.prefetch(3).concurrency(2).consumer(consumer)),
    )
    .await;
    for n in 0..6 {
        bus.publish(&Slow { n, fail: false }).await.unwrap();
    }
    eventually("2 running", WAIT, || async {
        (running.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;
    // 3 unacked deliveries (prefetch), 3 still ready in the queue.
    eventually("3 ready", WAIT, || async {
        (probe.queue_count(&queue).await == Some(3)).then_some(())
    })
    .await;
    assert_eq!(max.load(Ordering::SeqCst), 2);
    let mut events = bus.events();
    gate.add_permits(6);
    for _ in 0..6 {
        wait_event(&mut events, WAIT, |e| matches!(e, Event::Consumed { .. })).await;
    }
    assert_eq!(max.load(Ordering::SeqCst), 2);
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_in_flight_work_and_returns_the_rest() {
    test_message!(Work, "FerrybusTests.Shutdown:Work");
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("shutdown");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Shutdown:Work"]);
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let done = Arc::new(AtomicUsize::new(0));
    let (s, r, d) = (started.clone(), release.clone(), done.clone());
    let consumer = consumer_fn("WorkConsumer", move |_ctx: ConsumeContext<Work>| {
        let (s, r, d) = (s.clone(), r.clone(), d.clone());
        async move {
            s.notify_one();
            r.notified().await;
            d.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ConsumeError>(())
        }
    });
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .shutdown_timeout(Duration::from_secs(30))
            .receive_endpoint(&queue, |e| e.concurrency(1).prefetch(1).consumer(consumer)),
    )
    .await;
    bus.publish(&Work { n: 1, fail: false }).await.unwrap();
    bus.publish(&Work { n: 2, fail: false }).await.unwrap();
    started.notified().await;
    let stopping = tokio::spawn({
        let bus = bus.clone();
        async move { bus.stop().await }
    });
    eventually("stop to begin", WAIT, || async {
        bus.is_stopped().then_some(())
    })
    .await;
    // The in-flight message finishes and is acked; the second one was never taken.
    release.notify_one();
    stopping.await.unwrap();
    assert_eq!(done.load(Ordering::SeqCst), 1);
    eventually("the untaken message in the queue", WAIT, || async {
        (probe.queue_count(&queue).await == Some(1)).then_some(())
    })
    .await;
    let left = probe.get(&queue).await.unwrap();
    assert_eq!(
        Envelope::from_slice(&left.delivery.data).unwrap().message["n"],
        2
    );
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_deadline_leaves_stuck_messages_for_redelivery() {
    test_message!(Stuck, "FerrybusTests.Deadline:Stuck");
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("deadline");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Deadline:Stuck"]);
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let consumer = consumer_fn("StuckConsumer", move |_ctx: ConsumeContext<Stuck>| {
        let s = s.clone();
        async move {
            s.notify_one();
            std::future::pending::<()>().await;
            Ok::<_, ConsumeError>(())
        }
    });
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .shutdown_timeout(Duration::from_millis(200))
            .receive_endpoint(&queue, |e| e.consumer(consumer)),
    )
    .await;
    bus.publish(&Stuck { n: 1, fail: false }).await.unwrap();
    started.notified().await;
    bus.stop().await;
    let back = eventually("the message back in the queue", WAIT, || probe.get(&queue)).await;
    assert!(back.delivery.redelivered);
    probe.cleanup().await;
}

/// Fixture message types: the fields each fixture carries, read as .NET writes them.
mod fixtures {
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    macro_rules! fixture {
        ($name:ident, $urn:expr, { $($field:ident : $ty:ty),* }) => {
            #[derive(Clone, Debug, Serialize, Deserialize)]
            #[serde(rename_all = "camelCase")]
            pub struct $name { $(#[serde(default)] pub $field: $ty),* }
            impl ferrybus_core::Message for $name {
                fn message_type() -> ferrybus_core::MessageType {
                    ferrybus_core::MessageType::parse($urn).unwrap()
                }
            }
        };
    }
    fixture!(AcceptMessage, "DOMAIN.Messages:AcceptMessage", { id: Value });
    fixture!(OrderRequest, "MassTransit.RequestResponseDemo:IOrderRequest", { order_id: Option<uuid::Uuid> });
    fixture!(OrderPlacedEvent, "TrainingContract:OrderPlacedEvent", { order_id: Option<uuid::Uuid>, order_number: String });
    fixture!(SubmitOrder, "DotnetMassTransitApp.Producer.Contracts:SubmitOrder", { order_id: Option<uuid::Uuid> });
    fixture!(OrderCreated, "Contracts.Events:OrderCreated", { id: i64, total_amount: String });
    fixture!(SampleEvent, "MassTransitRepro:SampleEvent", {});
    fixture!(ItemCreated, "Play.Items.Contracts.Events:ItemCreated", { name: String, price: String });
    fixture!(IdpTeam, "PIK.ESB.Messages.Implementation.BOP:IdpTeam", { id: i64, role_id: i64 });
    fixture!(OrderStatusResult, "MassTransit.Sandbox.RequestResponse.Contracts:OrderStatusResult", { order_id: String, status_text: String });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_envelope_reaches_a_rust_consumer() {
    use ferrybus_core::{Fault, Message};
    use fixtures::*;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("fixtures");
    probe.track_endpoint(&queue);
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    fn record<M: Message>(
        seen: &Arc<Mutex<Vec<(String, String)>>>,
        f: fn(&M) -> String,
    ) -> impl ferrybus_core::Consumer<M> {
        let seen = seen.clone();
        consumer_fn("FixtureConsumer", move |ctx: ConsumeContext<M>| {
            let seen = seen.clone();
            let text = f(ctx.message());
            let id = ctx.message_id().map(|i| i.to_string()).unwrap_or_default();
            async move {
                seen.lock().unwrap().push((id, text));
                Ok::<_, ConsumeError>(())
            }
        })
    }
    let endpoint = |e: ferrybus_core::EndpointConfig| {
        e.bind_message_types(false)
            .consumer(record::<Fault<AcceptMessage>>(&seen, |m| {
                m.exceptions[0].exception_type.clone()
            }))
            .consumer(record::<OrderRequest>(&seen, |m| {
                format!("{:?}", m.order_id)
            }))
            .consumer(record::<OrderPlacedEvent>(&seen, |m| {
                m.order_number.clone()
            }))
            .consumer(record::<SubmitOrder>(&seen, |m| {
                format!("{:?}", m.order_id)
            }))
            .consumer(record::<OrderCreated>(&seen, |m| {
                format!("{} {}", m.id, m.total_amount)
            }))
            .consumer(record::<SampleEvent>(&seen, |_| "sample".into()))
            .consumer(record::<ItemCreated>(&seen, |m| {
                format!("{} {}", m.name, m.price)
            }))
            .consumer(record::<IdpTeam>(&seen, |m| {
                format!("{} {}", m.id, m.role_id)
            }))
            .consumer(record::<OrderStatusResult>(&seen, |m| {
                format!("{} {}", m.order_id, m.status_text)
            }))
    };
    let bus = start(RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, endpoint)).await;
    let mut events = bus.events();

    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/envelopes");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for path in &files {
        let body = std::fs::read(path).unwrap();
        let id = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["messageId"]
            .as_str()
            .unwrap()
            .to_owned();
        let properties = if path.to_string_lossy().contains("/12-") {
            // MassTransit v7: no content_type property here, the header form instead, and publishId.
            let mut headers = lapin::types::FieldTable::default();
            headers.insert(
                "Content-Type".into(),
                AMQPValue::LongString("application/vnd.masstransit+json".into()),
            );
            headers.insert("publishId".into(), AMQPValue::LongLongInt(7));
            BasicProperties::default()
                .with_message_id(id.as_str().into())
                .with_correlation_id("00000000-0000-0000-0000-000000000000".into())
                .with_delivery_mode(2)
                .with_headers(headers)
        } else {
            mt_properties(&id)
        };
        probe.publish("", &queue, &body, properties).await;
        wait_event(
            &mut events,
            WAIT,
            |e| matches!(e, Event::Consumed { message_id: Some(m), .. } if *m == id),
        )
        .await;
    }
    let seen = seen.lock().unwrap().clone();
    let text = |id: &str| {
        seen.iter()
            .find(|(i, _)| i == id)
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| panic!("{id} not consumed: {seen:?}"))
    };
    assert_eq!(seen.len(), files.len(), "{seen:?}");
    assert!(text("101b0000-a566-c025-a8fa-08dafb14324e")
        .starts_with("System.ServiceModel.FaultException"));
    assert_eq!(
        text("ec0e0000-873b-00ff-630e-08da71b84291"),
        "Some(5ca13bde-8c17-4753-903a-a445389b98e5)"
    );
    assert!(text("7c740000-a5be-c025-8e9a-08dabc788911").starts_with("Place order at"));
    assert_eq!(text("a88b0000-84d7-1ddb-d46d-08dd9af26165"), "13 0");
    assert_eq!(text("181c0000-6393-3630-36a4-08daf4e7c6da"), "sample");
    assert_eq!(
        text("49d10000-b882-08bf-329b-08dd38df2335"),
        "XXL Potion 66.99"
    );
    assert_eq!(text("41070000-568d-0050-abc9-08d9bf138cfc"), "52935 15");
    assert_eq!(text("00000000-2700-0a00-8b04-08d5b4a2ef65"), "1 Sent");
    assert_eq!(probe.queue_count(&format!("{queue}_error")).await, None);
    assert_eq!(probe.queue_count(&format!("{queue}_skipped")).await, None);
    bus.stop().await;
    probe.cleanup().await;
}

test_message!(Capped, "FerrybusTests.ErrorQueues:Capped");

/// Faults two messages, one after the other, on an endpoint whose queue holds at most one ready
/// message (`x-max-length=1`, the oldest dropped), configured by `configure`; returns how many
/// `<queue>_error` kept, and whether it was declared with the queue's `x-max-length`.
async fn fault_two_on_a_capped_queue(
    configure: impl FnOnce(ferrybus_core::EndpointConfig) -> ferrybus_core::EndpointConfig,
) -> (u32, bool, bool) {
    use ferrybus_rabbitmq::QueueEndpointExt;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("capped");
    let error_queue = format!("{queue}_error");
    probe.track_endpoint(&queue);
    probe.track(
        &[],
        &["MassTransit:Fault--FerrybusTests.ErrorQueues:Capped--"],
    );
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            configure(
                e.bind_message_types(false)
                    .queue_argument("x-max-length", 1)
                    .consumer(consumer_fn("Capped", |_: ConsumeContext<Capped>| async {
                        Err::<(), _>(ConsumeError::handler("declined"))
                    })),
            )
        }),
    )
    .await;
    let mut events = bus.events();
    for n in 1..=2 {
        let id = bus
            .send(&format!("exchange:{queue}"), &Capped { n, fail: true })
            .await
            .unwrap()
            .to_string();
        wait_event(
            &mut events,
            WAIT,
            |e| matches!(e, Event::Faulted { message_id: Some(m), .. } if *m == id),
        )
        .await;
    }
    let kept = probe.queue_count(&error_queue).await.unwrap();
    let mut capped = lapin::types::FieldTable::default();
    capped.insert("x-max-length".into(), AMQPValue::LongLongInt(1));
    let declared_capped = probe.queue_flags_match(&error_queue, true, capped).await;
    let declared_plain = probe
        .queue_flags_match(&error_queue, true, Default::default())
        .await;
    bus.stop().await;
    probe.cleanup().await;
    (kept, declared_capped, declared_plain)
}

/// By default `<queue>_error` is declared as MassTransit declares it, with the queue's arguments
/// (`RabbitMqErrorSettings`), so a .NET service declaring the same endpoint is not refused; an
/// argument that caps or expires messages then applies to faulted messages too: of two, the
/// error queue keeps one. (The bus warns about it at start.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_queues_copy_the_queue_arguments_by_default() {
    let (kept, capped, plain) = fault_two_on_a_capped_queue(|e| e).await;
    assert!(
        capped && !plain,
        "declared with x-max-length, as MassTransit declares it"
    );
    assert_eq!(kept, 1, "the error queue's cap dropped a faulted message");
}

/// With `ErrorQueueArguments::KeepMessages` `<queue>_error` is declared without the arguments
/// that drop messages: it keeps both faulted messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_queues_can_be_declared_to_keep_every_faulted_message() {
    use ferrybus_rabbitmq::{ErrorQueueArguments, QueueEndpointExt};
    let (kept, capped, plain) =
        fault_two_on_a_capped_queue(|e| e.error_queue_arguments(ErrorQueueArguments::KeepMessages))
            .await;
    assert!(plain && !capped, "declared without x-max-length");
    assert_eq!(kept, 2, "both faulted messages are kept");
}
