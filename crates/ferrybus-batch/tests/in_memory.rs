//! Batch consumers on the in-memory transport: batches by message limit and by time limit,
//! every message settled with its batch, a failed batch retried whole and then each message
//! faulted with its own `Fault<T>`, copies of a message within a batch kept once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrybus_batch::Batch;
use ferrybus_batch::BatchCompletionMode;
use ferrybus_batch::BatchEndpointExt;
use ferrybus_batch::BatchOptions;
use ferrybus_core::memory::TestHarness;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Fault, Message, Publish, RetryPolicy, SendOptions,
    SettlementKind,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderPlaced {
    order_id: Uuid,
}

fn order() -> OrderPlaced {
    OrderPlaced {
        order_id: Uuid::now_v7(),
    }
}

/// What the consumer saw: each batch's message ids and completion mode.
type Seen = Arc<Mutex<Vec<(Vec<Uuid>, BatchCompletionMode)>>>;

async fn harness(
    options: BatchOptions,
    retry: Option<RetryPolicy>,
    fail: bool,
) -> (TestHarness, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let harness = TestHarness::builder()
        .receive_endpoint("order-audit", move |e| {
            let e = match retry {
                Some(policy) => e.retry(policy),
                None => e,
            };
            e.batch_consumer(
                consumer_fn(
                    "AuditConsumer",
                    move |ctx: ConsumeContext<Batch<OrderPlaced>>| {
                        let record = record.clone();
                        async move {
                            let ids = ctx
                                .message()
                                .iter()
                                .filter_map(|m| m.message_id())
                                .collect();
                            record.lock().unwrap().push((ids, ctx.message().mode()));
                            if fail {
                                return Err(ConsumeError::handler("audit store down"));
                            }
                            Ok(())
                        }
                    },
                ),
                options,
            )
        })
        .timeout(Duration::from_secs(20))
        .start()
        .await
        .unwrap();
    (harness, seen)
}

fn sizes(seen: &Seen) -> Vec<usize> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|(ids, _)| ids.len())
        .collect()
}

#[tokio::test]
async fn batches_by_message_limit() {
    // A time limit far beyond the test: only the message limit completes batches.
    let options = BatchOptions::new()
        .message_limit(5)
        .time_limit(Duration::from_secs(600));
    let (harness, seen) = harness(options, None, false).await;
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(harness.publish(&order()).await.unwrap());
    }
    for id in &ids {
        harness.consumed(*id).await.unwrap();
    }
    assert_eq!(sizes(&seen), [5, 5]);
    let modes: Vec<_> = seen.lock().unwrap().iter().map(|(_, m)| *m).collect();
    assert_eq!(modes, [BatchCompletionMode::Size; 2]);
    let batched: Vec<Uuid> = seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(i, _)| i.clone())
        .collect();
    assert_eq!(batched, ids, "each batch in delivery order");
    assert!(harness.broker().messages("order-audit").is_empty());
    harness.stop().await;
}

#[tokio::test]
async fn partial_batch_by_time_limit() {
    let options = BatchOptions::new()
        .message_limit(100)
        .time_limit(Duration::from_millis(300));
    let (harness, seen) = harness(options, None, false).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(harness.publish(&order()).await.unwrap());
    }
    for id in &ids {
        harness.consumed(*id).await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    // Every batch was cut by the time limit, none by the limit of 100; all three were consumed.
    assert!(seen
        .iter()
        .all(|(_, mode)| *mode == BatchCompletionMode::Time));
    assert_eq!(seen.iter().map(|(i, _)| i.len()).sum::<usize>(), 3);
    harness.stop().await;
}

#[tokio::test]
async fn failed_batch_is_retried_whole_then_each_message_faults() {
    let options = BatchOptions::new()
        .message_limit(3)
        .time_limit(Duration::from_secs(600));
    let (harness, seen) = harness(options, Some(RetryPolicy::immediate(2)), true).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(harness.publish(&order()).await.unwrap());
    }
    for id in &ids {
        assert_eq!(harness.faulted(*id).await.unwrap(), "order-audit");
    }
    // One batch, tried three times (two retries), the same three messages each time.
    assert_eq!(sizes(&seen), [3, 3, 3]);
    let errors = harness.broker().messages("order-audit_error");
    assert_eq!(errors.len(), 3);
    for moved in &errors {
        let h = &moved.headers;
        assert_eq!(h.get_str("MT-Reason"), Some("fault"));
        assert_eq!(h.get_str("MT-Fault-Message"), Some("audit store down"));
        assert_eq!(h.get_str("MT-Fault-ConsumerType"), Some("AuditConsumer"));
        assert_eq!(h.get_i64("MT-Fault-RetryCount"), Some(2));
    }
    let mut faulted: Vec<Uuid> = harness
        .sent_now::<Fault<OrderPlaced>>()
        .iter()
        .map(|f| {
            f.message
                .bind::<Fault<OrderPlaced>>()
                .unwrap()
                .faulted_message_id
                .unwrap()
        })
        .collect();
    faulted.sort();
    ids.sort();
    assert_eq!(
        faulted, ids,
        "one Fault<OrderPlaced> per message of the batch"
    );
    harness.stop().await;
}

#[tokio::test]
async fn a_copy_of_a_message_in_the_same_batch_is_kept_once() {
    let options = BatchOptions::new()
        .message_limit(2)
        .time_limit(Duration::from_secs(600));
    let (harness, seen) = harness(options, None, false).await;
    let id = Uuid::now_v7();
    let message = order();
    harness
        .publish_with(&message, SendOptions::new().message_id(id))
        .await
        .unwrap();
    harness
        .publish_with(&message, SendOptions::new().message_id(id))
        .await
        .unwrap();
    let other = harness.publish(&order()).await.unwrap();
    harness.consumed(other).await.unwrap();
    // Both copies settle with the batch: one consumed, the other acknowledged as its copy.
    let settled = harness.settled(id).await.unwrap();
    assert!(matches!(
        settled,
        SettlementKind::Ack | SettlementKind::Duplicate
    ));
    assert!(harness.broker().messages("order-audit").is_empty());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, [id, other]);
    harness.stop().await;
}

/// A consumer that records each batch's size and how many batches ran at once at most.
fn counting_consumer(
    sizes: Arc<Mutex<Vec<usize>>>,
    running: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
    barrier: Option<Arc<tokio::sync::Barrier>>,
) -> impl ferrybus_core::Consumer<Batch<OrderPlaced>> {
    consumer_fn(
        "CountingConsumer",
        move |ctx: ConsumeContext<Batch<OrderPlaced>>| {
            let (sizes, running, max, barrier) =
                (sizes.clone(), running.clone(), max.clone(), barrier.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(now, Ordering::SeqCst);
                sizes.lock().unwrap().push(ctx.message().len());
                if let Some(barrier) = barrier {
                    // Passes only when two batches are in the consumer at once.
                    barrier.wait().await;
                }
                tokio::task::yield_now().await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, ConsumeError>(())
            }
        },
    )
}

#[tokio::test]
async fn concurrency_limit_bounds_the_batches_running_at_once() {
    for (limit, barrier) in [(1, None), (2, Some(Arc::new(tokio::sync::Barrier::new(2))))] {
        let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
        let (running, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let consumer = counting_consumer(sizes.clone(), running, max.clone(), barrier);
        let harness = TestHarness::builder()
            .receive_endpoint("order-audit", move |e| {
                e.batch_consumer(
                    consumer,
                    BatchOptions::new()
                        .message_limit(2)
                        .time_limit(Duration::from_secs(600))
                        .concurrency_limit(limit),
                )
            })
            .timeout(Duration::from_secs(20))
            .start()
            .await
            .unwrap();
        let mut ids = Vec::new();
        for _ in 0..8 {
            ids.push(harness.publish(&order()).await.unwrap());
        }
        for id in &ids {
            harness.consumed(*id).await.unwrap();
        }
        assert_eq!(*sizes.lock().unwrap(), [2, 2, 2, 2]);
        assert_eq!(
            max.load(Ordering::SeqCst),
            limit,
            "concurrency limit {limit}"
        );
        harness.stop().await;
    }
}

#[tokio::test]
async fn a_failed_batch_is_redelivered_message_by_message_then_faulted() {
    // Each batch's size and its messages' redelivery counts.
    type Redelivered = Arc<Mutex<Vec<(usize, Vec<u32>)>>>;
    let seen: Redelivered = Arc::default();
    let record = seen.clone();
    let harness = TestHarness::builder()
        .receive_endpoint("order-audit", move |e| {
            e.redelivery(RetryPolicy::intervals([Duration::from_millis(10)]))
                .batch_consumer(
                    consumer_fn(
                        "AuditConsumer",
                        move |ctx: ConsumeContext<Batch<OrderPlaced>>| {
                            let record = record.clone();
                            async move {
                                let counts =
                                    ctx.message().iter().map(|m| m.redelivery_count()).collect();
                                record.lock().unwrap().push((ctx.message().len(), counts));
                                Err::<(), _>(ConsumeError::handler("audit store down"))
                            }
                        },
                    ),
                    BatchOptions::new()
                        .message_limit(3)
                        .time_limit(Duration::from_secs(600)),
                )
        })
        .timeout(Duration::from_secs(20))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(harness.publish(&order()).await.unwrap());
    }
    for id in &ids {
        harness.faulted(*id).await.unwrap();
    }
    // The first batch failed: each message was redelivered once; the three came back as a
    // batch, failed again, and each went to the error queue.
    assert_eq!(
        *seen.lock().unwrap(),
        [(3, vec![0, 0, 0]), (3, vec![1, 1, 1])]
    );
    let errors = harness.broker().messages("order-audit_error");
    assert_eq!(errors.len(), 3);
    assert!(errors
        .iter()
        .all(|m| m.headers.get_i64("MT-Fault-RedeliveryCount") == Some(1)));
    assert_eq!(harness.sent_now::<Fault<OrderPlaced>>().len(), 3);
    harness.stop().await;
}

struct NullSink;

#[ferrybus_core::async_trait]
impl ferrybus_core::outgoing::MessageSink for NullSink {
    async fn deliver(
        &self,
        _message: ferrybus_core::outgoing::OutgoingMessage,
    ) -> Result<(), ferrybus_core::PublishError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_transient_failure_of_a_batch_pauses_the_endpoint_without_spending_a_retry() {
    use ferrybus_core::address::HostAddress;
    use ferrybus_core::outgoing::MessageFactory;
    use ferrybus_core::outgoing::MessageOrigin;
    use ferrybus_core::pause::{Dependency, EndpointState, PauseCause};
    use ferrybus_core::EndpointConfig;
    use tower::ServiceExt;

    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
    let config = EndpointConfig::new("order-audit")
        .retry(RetryPolicy::immediate(3))
        .batch_consumer(
            consumer_fn(
                "AuditConsumer",
                move |_ctx: ConsumeContext<Batch<OrderPlaced>>| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async {
                        Err::<(), ConsumeError>(
                            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
                        )
                    }
                },
            ),
            BatchOptions::new()
                .message_limit(2)
                .time_limit(Duration::from_secs(600)),
        );
    let context = ferrybus_core::BusConfig::default().endpoint_context(
        &config,
        factory.host().entity_address("order-audit"),
        Arc::new(NullSink),
        Arc::new(factory.clone()),
        tokio_util::sync::CancellationToken::new(),
    );
    let endpoint = config.build(context);
    let delivery = || {
        let message = factory
            .send(
                "queue:order-audit",
                &order(),
                &MessageOrigin::default(),
                SendOptions::new(),
            )
            .unwrap();
        ferrybus_core::Delivery::new(message.body).content_type(message.content_type)
    };
    let (a, b) = tokio::join!(
        endpoint.clone().oneshot(delivery()),
        endpoint.clone().oneshot(delivery())
    );
    let (Ok(a), Ok(b)) = (a, b);
    assert_eq!(a.kind(), SettlementKind::Abandon);
    assert_eq!(b.kind(), SettlementKind::Abandon);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no retry was spent on it");
    let EndpointState::Paused(paused) = endpoint.control().state() else {
        panic!("the endpoint pauses");
    };
    assert_eq!(paused.cause, PauseCause::Transient(Dependency::Other));
}
