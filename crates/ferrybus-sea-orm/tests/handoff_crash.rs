//! Acknowledging before the post-commit send is safe: a service process is killed (SIGKILL)
//! after its consumers committed and their deliveries were acknowledged, before any of their
//! messages went out; the delivery service of another instance then sends every one of them,
//! each inbound message's messages in order. Real RabbitMQ and PostgreSQL; the child is this
//! test binary again, running the ignored `child` entry point.

use std::process::Stdio;
use std::sync::Arc;

use async_trait::async_trait;
use ferrybus_core::consume::BoxConsumeLayer;
use ferrybus_core::error::BoxError;
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::outgoing::MessageOrigin;
use ferrybus_core::outgoing::MessageSink;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::outgoing::SharedSink;
use ferrybus_core::storage::Background;
use ferrybus_core::storage::Storage;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Message, MessageType, PublishError, SendOptions,
};
use ferrybus_rabbitmq::{Event, RabbitMqBus};
use ferrybus_sea_orm::PostgresStorage;
use ferrybus_testing::{
    amqp_url, eventually, mt_properties, unique, Probe, Shape, TestSchema, WAIT,
};
use lapin::types::FieldTable;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    n: u32,
}

impl Message for Order {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusCrash.Contracts:Order").unwrap()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Step {
    n: u32,
    k: u32,
}

impl Message for Step {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusCrash.Contracts:Step").unwrap()
    }
}

/// Orders consumed by the child; each sends `STEPS` messages, in order.
const ORDERS: u32 = 20;
const STEPS: u32 = 3;

/// A sink that never completes a send: the child's messages stay in the tables.
struct Stalled;

#[async_trait]
impl MessageSink for Stalled {
    async fn deliver(&self, _message: OutgoingMessage) -> Result<(), PublishError> {
        std::future::pending().await
    }
}

/// The child's storage: a `PostgresStorage` whose background services (the after-commit sender,
/// the outbox delivery) send through [`Stalled`].
struct StalledStorage(PostgresStorage);

#[async_trait]
impl Storage for StalledStorage {
    async fn prepare(&self) -> Result<(), BoxError> {
        self.0.prepare().await
    }

    fn inbox_layer(&self) -> BoxConsumeLayer {
        self.0.inbox_layer()
    }

    fn start(&self, _sink: SharedSink) -> Background {
        self.0.start(Arc::new(Stalled))
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The child process: consumes `ORDERS` orders behind the inbox, prints `ACKED` once every one
/// was acknowledged, then waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the crash test's child process; run by `a_killed_service_leaves_nothing_undelivered`"]
async fn child() {
    let (Some(schema), Some(queue), Some(sink)) = (
        env("FB_CRASH_SCHEMA"),
        env("FB_CRASH_QUEUE"),
        env("FB_CRASH_SINK"),
    ) else {
        panic!("run by the crash test only");
    };
    let db = sea_orm::Database::connect(ferrybus_testing::database_url())
        .await
        .unwrap();
    let storage = PostgresStorage::new(db)
        .tables(Shape::Snake.tables(&schema))
        .inbox_cleanup(false);
    let sink = format!("queue:{sink}");
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(StalledStorage(storage))
        .receive_endpoint(&queue, |e| {
            e.concurrency(4)
                .bind_message_types(false)
                .inbox()
                .consumer(consumer_fn(
                    "CrashConsumer",
                    move |ctx: ConsumeContext<Order>| {
                        let sink = sink.clone();
                        async move {
                            for k in 0..STEPS {
                                let n = ctx.message().n;
                                ctx.send(&sink, &Step { n, k }).await?;
                            }
                            Ok::<_, ConsumeError>(())
                        }
                    },
                ))
        })
        .start()
        .await
        .unwrap();
    let mut events = bus.events();
    let mut acked = 0;
    while acked < ORDERS {
        if let Ok(Event::Consumed { .. }) = events.recv().await {
            acked += 1;
        }
    }
    println!("ACKED");
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_service_leaves_nothing_undelivered() {
    let schema = TestSchema::new(Shape::Snake).await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("crash-in");
    let sink = unique("crash-sink");
    probe
        .declare_queue(&queue, true, FieldTable::default())
        .await
        .unwrap();
    probe
        .declare_queue(&sink, true, FieldTable::default())
        .await
        .unwrap();
    // Sending to `queue:<sink>` declares the sink's exchange too.
    probe.track(&[], &[&queue, &sink]);
    let factory = MessageFactory::new(ferrybus_core::address::HostAddress::new(
        "rabbitmq",
        "localhost",
        None,
        "/",
    ));
    for n in 0..ORDERS {
        let out = factory
            .send(
                &format!("queue:{queue}"),
                &Order { n },
                &MessageOrigin::default(),
                SendOptions::new(),
            )
            .unwrap();
        probe
            .publish(
                "",
                &queue,
                &out.body,
                mt_properties(&out.message_id.to_string()),
            )
            .await;
    }

    // The child consumes everything, acknowledges, and is killed before anything is sent.
    let exe = std::env::current_exe().unwrap();
    let mut child = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FB_CRASH_SCHEMA", &schema.schema)
        .env("FB_CRASH_QUEUE", &queue)
        .env("FB_CRASH_SINK", &sink)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let acked = tokio::time::timeout(WAIT * 4, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("ACKED") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(acked, "the child acknowledged every order");
    child.start_kill().unwrap(); // SIGKILL
    child.wait().await.unwrap();

    // Acknowledged: nothing comes back to the input queue. A delivery that was the only one
    // of its endpoint in flight sent its own messages before its ack (sequential order); every
    // other one was acknowledged before anything was sent, and its messages wait.
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    let sent_before = probe.queue_count(&sink).await.unwrap_or(0);
    assert_eq!(sent_before % STEPS, 0, "whole deliveries only");
    assert!(
        sent_before < ORDERS * STEPS,
        "most were left to the sweeper"
    );
    let pending: i64 = schema
        .count(
            &format!(
                "SELECT count(*) FROM \"{}\".outbox_message WHERE inbox_message_id IS NOT NULL",
                schema.schema
            ),
            vec![],
        )
        .await;
    assert_eq!(
        pending,
        i64::from(ORDERS * STEPS - sent_before),
        "the committed messages wait in the table"
    );

    // Another instance's delivery service finds and sends them.
    let storage = PostgresStorage::new(schema.db.clone())
        .tables(schema.tables())
        .inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .start()
        .await
        .unwrap();
    eventually("every message delivered", WAIT * 2, || async {
        (probe.queue_count(&sink).await == Some(ORDERS * STEPS)).then_some(())
    })
    .await;
    bus.stop().await;
    let mut seen: Vec<Vec<u32>> = vec![Vec::new(); ORDERS as usize];
    while let Some(message) = probe.get(&sink).await {
        let envelope = ferrybus_core::Envelope::from_slice(&message.delivery.data).unwrap();
        let step: Step = envelope.message.bind().unwrap();
        seen[step.n as usize].push(step.k);
    }
    for (n, steps) in seen.iter().enumerate() {
        assert_eq!(
            steps,
            &(0..STEPS).collect::<Vec<_>>(),
            "order {n}: once each, in order"
        );
    }
    let left: i64 = schema
        .count(
            &format!(
                "SELECT count(*) FROM \"{}\".inbox_state WHERE delivered IS NULL",
                schema.schema
            ),
            vec![],
        )
        .await;
    assert_eq!(left, 0, "every inbox row marked delivered");
    probe.cleanup().await;
}
