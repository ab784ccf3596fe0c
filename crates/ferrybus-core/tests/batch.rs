//! Batch consumers on the in-memory transport: batches by message limit and by time limit,
//! every message settled with its batch, a failed batch retried whole and then each message
//! faulted with its own `Fault<T>`, copies of a message within a batch kept once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrybus_core::memory::TestHarness;
use ferrybus_core::{
    consumer_fn, Batch, BatchCompletionMode, BatchOptions, ConsumeContext, ConsumeError, Fault,
    Message, Publish, RetryPolicy, SendOptions, SettlementKind,
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
    let mut batched: Vec<Uuid> = seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(i, _)| i.clone())
        .collect();
    batched.sort();
    ids.sort();
    assert_eq!(batched, ids);
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
