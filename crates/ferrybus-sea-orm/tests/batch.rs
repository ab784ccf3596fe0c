//! Batch consumers on real RabbitMQ and PostgreSQL: batches cut by the message limit and by the
//! time limit, the messages of a batch acknowledged together (none before the batch completes),
//! a failing batch retried whole and then every message moved to `<queue>_error` with its fault
//! headers and its own `Fault<T>`, and the inbox recording each message once, dropping
//! duplicates from later batches, in one transaction with the consumer's writes and outbox.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestDb;
use ferrybus_batch::Batch;
use ferrybus_batch::BatchCompletionMode;
use ferrybus_batch::BatchEndpointExt;
use ferrybus_batch::BatchOptions;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Message, MessageType, Publish, RetryPolicy,
    SendOptions,
};
use ferrybus_rabbitmq::{Event, RabbitMqBus, RabbitMqBusBuilder};
use ferrybus_sea_orm::TransactionExt;
use ferrybus_testing::{amqp_url, eventually, unique, wait_event, Probe, Shape, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// This binary's own message type, so that no other test's endpoint or probe shares its
/// exchanges (the endpoints here are not bound to it: messages are sent to their queues).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct AuditOrder {
    order_id: Uuid,
}

impl Message for AuditOrder {
    fn message_type() -> MessageType {
        MessageType::parse("Ferrybus.Tests.Batching:AuditOrder").unwrap()
    }
}

/// What a batch consumer sends after each batch (through the consumer outbox).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct AuditDone {
    count: usize,
}

impl Message for AuditDone {
    fn message_type() -> MessageType {
        MessageType::parse("Ferrybus.Tests.Batching:AuditDone").unwrap()
    }
}

const FAULT_EXCHANGE: &str = "MassTransit:Fault--Ferrybus.Tests.Batching:AuditOrder--";

/// What the consumer saw: each batch's message ids and completion mode.
type Seen = Arc<Mutex<Vec<(Vec<Uuid>, BatchCompletionMode)>>>;

fn record(seen: &Seen, ctx: &ConsumeContext<Batch<AuditOrder>>) {
    let ids = ctx
        .message()
        .iter()
        .filter_map(|m| m.message_id())
        .collect();
    seen.lock().unwrap().push((ids, ctx.message().mode()));
}

fn sizes(seen: &Seen) -> Vec<usize> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|(ids, _)| ids.len())
        .collect()
}

/// An endpoint on `queue`, not bound to the message type, with a recording batch consumer.
fn recording_bus(
    builder: RabbitMqBusBuilder,
    queue: &str,
    options: BatchOptions,
    seen: &Seen,
) -> RabbitMqBusBuilder {
    let seen = seen.clone();
    builder.receive_endpoint(queue, move |e| {
        e.bind_message_types(false).batch_consumer(
            consumer_fn(
                "AuditConsumer",
                move |ctx: ConsumeContext<Batch<AuditOrder>>| {
                    let seen = seen.clone();
                    async move {
                        record(&seen, &ctx);
                        Ok::<_, ConsumeError>(())
                    }
                },
            ),
            options,
        )
    })
}

async fn send(bus: &RabbitMqBus, queue: &str, id: Uuid) {
    let message = AuditOrder {
        order_id: Uuid::now_v7(),
    };
    bus.send_with(
        &format!("queue:{queue}"),
        &message,
        SendOptions::new().message_id(id),
    )
    .await
    .unwrap();
}

async fn consumed_count(seen: &Seen, n: usize) {
    eventually(&format!("{n} messages consumed"), WAIT, || async {
        (sizes(seen).iter().sum::<usize>() >= n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_by_message_limit_are_acknowledged_together() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("batch-size");
    probe.track_endpoint(&queue);
    let seen = Seen::default();
    // A time limit far beyond the test: only the message limit cuts batches.
    let options = BatchOptions::new()
        .message_limit(10)
        .time_limit(Duration::from_secs(600));
    let bus = recording_bus(RabbitMqBus::builder(&amqp_url()), &queue, options, &seen)
        .start()
        .await
        .unwrap();
    let ids: Vec<Uuid> = (0..20).map(|_| Uuid::now_v7()).collect();
    for id in &ids {
        send(&bus, &queue, *id).await;
    }
    consumed_count(&seen, 20).await;
    // Every message settled: nothing ready, and nothing comes back when the channel closes.
    bus.stop().await;
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    assert_eq!(sizes(&seen), [10, 10]);
    let modes: Vec<_> = seen.lock().unwrap().iter().map(|(_, m)| *m).collect();
    assert_eq!(modes, [BatchCompletionMode::Size; 2]);
    let batched: Vec<Uuid> = seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(b, _)| b.clone())
        .collect();
    assert_eq!(batched, ids, "each batch in delivery order");
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partial_batch_is_not_acknowledged_before_it_completes() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("batch-partial");
    probe.track_endpoint(&queue);
    let seen = Seen::default();
    let options = BatchOptions::new()
        .message_limit(10)
        .time_limit(Duration::from_secs(600));
    let builder = RabbitMqBus::builder(&amqp_url()).shutdown_timeout(Duration::from_millis(200));
    let bus = recording_bus(builder, &queue, options, &seen)
        .start()
        .await
        .unwrap();
    for _ in 0..9 {
        send(&bus, &queue, Uuid::now_v7()).await;
    }
    // All nine were delivered to the endpoint (none ready): they wait for a tenth.
    eventually("the nine messages delivered", WAIT, || async {
        (probe.queue_count(&queue).await == Some(0)).then_some(())
    })
    .await;
    bus.stop().await;
    // Stopped before the batch completed: its messages are given back, unacknowledged.
    eventually("the nine messages back in the queue", WAIT, || async {
        (probe.queue_count(&queue).await == Some(9)).then_some(())
    })
    .await;
    assert!(seen.lock().unwrap().is_empty(), "no batch ran");
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partial_batch_is_delivered_at_the_time_limit() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("batch-time");
    probe.track_endpoint(&queue);
    let seen = Seen::default();
    let options = BatchOptions::new()
        .message_limit(100)
        .time_limit(Duration::from_millis(500));
    let bus = recording_bus(RabbitMqBus::builder(&amqp_url()), &queue, options, &seen)
        .start()
        .await
        .unwrap();
    for _ in 0..5 {
        send(&bus, &queue, Uuid::now_v7()).await;
    }
    consumed_count(&seen, 5).await;
    bus.stop().await;
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    let seen = seen.lock().unwrap().clone();
    assert!(seen
        .iter()
        .all(|(_, mode)| *mode == BatchCompletionMode::Time));
    assert_eq!(seen.iter().map(|(b, _)| b.len()).sum::<usize>(), 5);
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_batch_is_retried_then_every_message_goes_to_the_error_queue_with_its_fault() {
    let db = TestDb::new(Shape::Snake).await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("batch-fail");
    probe.track_endpoint(&queue);
    probe.track(&[], &[FAULT_EXCHANGE]);
    let faults = probe.bind_probe(FAULT_EXCHANGE).await;
    let seen = Seen::default();
    let record_seen = seen.clone();
    let invoices = db.invoices_table();
    let storage = db.storage().await.inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .receive_endpoint(&queue, move |e| {
            e.bind_message_types(false)
                .retry(RetryPolicy::immediate(2))
                .inbox()
                .batch_consumer(
                    consumer_fn(
                        "AuditConsumer",
                        move |ctx: ConsumeContext<Batch<AuditOrder>>| {
                            let (seen, invoices) = (record_seen.clone(), invoices.clone());
                            async move {
                                record(&seen, &ctx);
                                // Writes that must roll back with the failed batch.
                                for message in ctx.message() {
                                    insert_invoice(&ctx, &invoices, message.message().order_id)
                                        .await?;
                                }
                                Err(ConsumeError::handler("audit store down"))
                            }
                        },
                    ),
                    BatchOptions::new()
                        .message_limit(4)
                        .time_limit(Duration::from_secs(600)),
                )
        })
        .start()
        .await
        .unwrap();
    let mut ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
    for id in &ids {
        send(&bus, &queue, *id).await;
    }
    let error_queue = format!("{queue}_error");
    let mut moved = Vec::new();
    while moved.len() < 4 {
        moved.push(probe.wait_get(&error_queue).await);
    }
    let mut faulted = Vec::new();
    while faulted.len() < 4 {
        let fault = probe
            .wait_for(&faults, |r| {
                r.body["message"]["faultedMessageId"]
                    .as_str()
                    .and_then(|s| s.parse::<Uuid>().ok())
                    .is_some_and(|id| ids.contains(&id))
            })
            .await;
        faulted.push(
            fault.body["message"]["faultedMessageId"]
                .as_str()
                .unwrap()
                .parse::<Uuid>()
                .unwrap(),
        );
        assert_eq!(
            fault.body["message"]["exceptions"][0]["message"],
            "audit store down"
        );
    }
    bus.stop().await;

    // One batch of four, tried three times (two retries).
    assert_eq!(sizes(&seen), [4, 4, 4]);
    let mut moved_ids: Vec<Uuid> = moved
        .iter()
        .map(|m| {
            assert_eq!(
                ferrybus_testing::header_str(m, "MT-Reason").as_deref(),
                Some("fault")
            );
            assert_eq!(
                ferrybus_testing::header_str(m, "MT-Fault-Message").as_deref(),
                Some("audit store down")
            );
            assert_eq!(
                ferrybus_testing::header_str(m, "MT-Fault-ConsumerType").as_deref(),
                Some("AuditConsumer")
            );
            assert_eq!(
                ferrybus_testing::header_int(m, "MT-Fault-RetryCount"),
                Some(2)
            );
            m.delivery
                .properties
                .message_id()
                .as_ref()
                .unwrap()
                .to_string()
                .parse()
                .unwrap()
        })
        .collect();
    moved_ids.sort();
    faulted.sort();
    ids.sort();
    assert_eq!(
        moved_ids, ids,
        "every message of the batch is in the error queue"
    );
    assert_eq!(faulted, ids, "one Fault<AuditOrder> per message");
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    // The failed batch left nothing behind: no inbox rows, no consumer writes.
    assert_eq!(db.rows("inbox").await, 0);
    assert_eq!(db.invoices().await, 0);
    probe.cleanup().await;
}

async fn insert_invoice(
    ctx: &ConsumeContext<Batch<AuditOrder>>,
    invoices: &str,
    order_id: Uuid,
) -> Result<(), ConsumeError> {
    ctx.db()
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("INSERT INTO {invoices} (order_id) VALUES ($1)"),
            [order_id.into()],
        ))
        .await?;
    Ok(())
}

/// On every table shape (snake_case, PascalCase, the .NET-created fixtures).
async fn the_inbox_records_each_message_once_and_drops_duplicates_from_batches(shape: Shape) {
    let db = TestDb::new(shape).await;
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("batch-inbox");
    let done = unique("batch-done");
    probe.track_endpoint(&queue);
    // Sending to `queue:<done>` declares its exchange too.
    probe.track(&[], &[&done]);
    probe
        .declare_queue(&done, true, Default::default())
        .await
        .unwrap();
    let seen = Seen::default();
    let record_seen = seen.clone();
    let invoices = db.invoices_table();
    let done_address = format!("queue:{done}");
    let storage = db.storage().await.inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .receive_endpoint(&queue, move |e| {
            // Room for a batch and the copy that follows a message within it.
            e.bind_message_types(false)
                .prefetch(20)
                .concurrency(20)
                .inbox()
                .batch_consumer(
                    consumer_fn(
                        "AuditConsumer",
                        move |ctx: ConsumeContext<Batch<AuditOrder>>| {
                            let (seen, invoices) = (record_seen.clone(), invoices.clone());
                            let done = done_address.clone();
                            async move {
                                record(&seen, &ctx);
                                for message in ctx.message() {
                                    insert_invoice(&ctx, &invoices, message.message().order_id)
                                        .await?;
                                }
                                let count = ctx.message().len();
                                ctx.send(&done, &AuditDone { count }).await?;
                                Ok::<_, ConsumeError>(())
                            }
                        },
                    ),
                    // The message limit cuts these batches; the time limit only a late copy's.
                    BatchOptions::new()
                        .message_limit(5)
                        .time_limit(Duration::from_secs(3)),
                )
        })
        .start()
        .await
        .unwrap();
    let ids: Vec<Uuid> = (0..13).map(|_| Uuid::now_v7()).collect();
    let mut events = bus.events();
    // Batch 1: five new messages.
    for id in &ids[0..5] {
        send(&bus, &queue, *id).await;
    }
    consumed_count(&seen, 5).await;
    // Batch 2: two of batch 1 again (dropped by the inbox), three new.
    for id in [ids[0], ids[1], ids[5], ids[6], ids[7]] {
        send(&bus, &queue, id).await;
    }
    consumed_count(&seen, 8).await;
    // Batch 3: five new messages, one of them twice. The copy either joins the batch (kept once,
    // settled with it) or, reaching the endpoint after the batch closed, is a batch of its own
    // at the time limit that the inbox drops whole (the consumer does not run).
    for id in [ids[8], ids[8], ids[9], ids[10], ids[11], ids[12]] {
        send(&bus, &queue, id).await;
    }
    consumed_count(&seen, 13).await;
    let mut settled = 0;
    while settled < 16 {
        wait_event(
            &mut events,
            WAIT,
            |e| matches!(e, Event::Consumed { queue: q, .. } if *q == queue),
        )
        .await;
        settled += 1;
    }
    let mut sent = Vec::new();
    while sent.len() < 3 {
        let got = probe.wait_get(&done).await;
        let body: serde_json::Value = serde_json::from_slice(&got.delivery.data).unwrap();
        sent.push(body["message"]["count"].as_u64().unwrap());
    }
    eventually("the outbox emptied", WAIT, || async {
        (db.rows("message").await == 0).then_some(())
    })
    .await;
    bus.stop().await;

    let seen_batches = seen.lock().unwrap().clone();
    assert_eq!(
        sizes(&seen),
        [5, 3, 5],
        "duplicates dropped from the batches"
    );
    assert_eq!(seen_batches[1].0, [ids[5], ids[6], ids[7]]);
    assert_eq!(seen_batches[2].0, ids[8..13]);
    assert_eq!(
        sent,
        [5, 3, 5],
        "what each batch sent left after its commit"
    );
    assert_eq!(db.invoices().await, 13, "each message's write once");
    assert_eq!(db.rows("inbox").await, 13, "one inbox row per message");
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    probe.cleanup().await;
}

ferrybus_testing::on_every_shape!(
    the_inbox_records_each_message_once_and_drops_duplicates_from_batches
);
