//! Inbox + consumer outbox against a real PostgreSQL, on every table shape.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{wait_settled, InvoiceCreated, OrderPlaced, RecordingSink, Shape, TestDb};
use ferrybus_core::memory::TestHarness;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, ConsumeRequest, EndpointConfig, RetryPolicy,
    SendOptions,
};
use ferrybus_sea_orm::{InboxConfig, InboxLayer, TransactionExt};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tower::util::MapRequestLayer;
use uuid::Uuid;

const QUEUE: &str = "billing-invoice";

#[derive(Clone, Copy)]
enum Behaviour {
    /// Insert the invoice, publish two events.
    Ok,
    /// Insert the invoice, publish, then fail.
    FailAfterWork,
}

/// The billing consumer of scenario 3: a "charge" (side effect, counted), a slow payment call,
/// an invoice row and two published events, all inside the inbox transaction.
fn endpoint(tdb: &TestDb, charges: Arc<AtomicUsize>, behaviour: Behaviour) -> EndpointConfig {
    let table = format!("\"{}\".invoices", tdb.schema);
    EndpointConfig::new(QUEUE)
        .concurrency(4)
        .retry(RetryPolicy::immediate(2))
        .layer(InboxLayer::new(
            tdb.db.clone(),
            InboxConfig::new(tdb.storage.clone()),
        ))
        .consumer(consumer_fn(
            "InvoiceConsumer",
            move |ctx: ConsumeContext<OrderPlaced>| {
                let charges = charges.clone();
                let table = table.clone();
                async move {
                    let order_id = ctx.message().order_id;
                    charges.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(30)).await; // the payment gateway
                    ctx.db()
                        .execute(Statement::from_sql_and_values(
                            DbBackend::Postgres,
                            format!("INSERT INTO {table} (order_id) VALUES ($1)"),
                            [order_id.into()],
                        ))
                        .await?;
                    ctx.publish(&InvoiceCreated { order_id, seq: 1 }).await?;
                    ctx.publish(&InvoiceCreated { order_id, seq: 2 }).await?;
                    match behaviour {
                        Behaviour::Ok => Ok(()),
                        Behaviour::FailAfterWork => Err(ConsumeError::permanent("card declined")),
                    }
                }
            },
        ))
}

fn sent(harness: &TestHarness, order_id: Uuid) -> Vec<u32> {
    harness
        .sent_now::<InvoiceCreated>()
        .into_iter()
        .filter(|e| e.message["orderId"] == order_id.to_string())
        .map(|e| e.message["seq"].as_u64().unwrap() as u32)
        .collect()
}

async fn consumes_once_and_acks_duplicates(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let harness = TestHarness::start([endpoint(&tdb, charges.clone(), Behaviour::Ok)]);
    let order = OrderPlaced {
        order_id: Uuid::new_v4(),
    };
    let id = harness.publish(&order).await.unwrap();
    wait_settled(&harness, id, 1).await;
    assert_eq!(tdb.invoices().await, 1);
    assert_eq!(tdb.inbox_row(id).await, Some((true, true, 0)));
    assert_eq!(tdb.rows("message").await, 0, "sent rows are deleted");
    assert_eq!(
        sent(&harness, order.order_id),
        [1, 2],
        "published in order after commit"
    );

    // The same message again (a redelivery): acknowledged, consumer not run.
    harness
        .publish_with(&order, SendOptions::new().message_id(id))
        .await
        .unwrap();
    wait_settled(&harness, id, 2).await;
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    assert_eq!(tdb.invoices().await, 1);
    assert_eq!(sent(&harness, order.order_id).len(), 2);
    assert_eq!(tdb.inbox_row(id).await, Some((true, true, 1)));
    assert!(harness
        .broker()
        .messages(&format!("{QUEUE}_error"))
        .is_empty());
    harness.stop().await;
}

/// Scenario 3: two copies at the same moment (concurrency 4), many times.
async fn concurrent_copies_run_once(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let harness = TestHarness::start([endpoint(&tdb, charges.clone(), Behaviour::Ok)]);
    for round in 0..20 {
        let order = OrderPlaced {
            order_id: Uuid::new_v4(),
        };
        let id = Uuid::new_v4();
        for _ in 0..2 {
            harness
                .publish_with(&order, SendOptions::new().message_id(id))
                .await
                .unwrap();
        }
        wait_settled(&harness, id, 2).await;
        assert_eq!(
            charges.load(Ordering::SeqCst),
            round + 1,
            "one charge per order"
        );
        assert_eq!(
            sent(&harness, order.order_id),
            [1, 2],
            "one set of events per order"
        );
    }
    assert_eq!(tdb.invoices().await, 20);
    assert!(harness
        .broker()
        .messages(&format!("{QUEUE}_error"))
        .is_empty());
    harness.stop().await;
}

/// Two instances (pipelines) on one database get the same message at the same moment.
async fn two_instances_run_once(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let first = TestHarness::start([endpoint(&tdb, charges.clone(), Behaviour::Ok)]);
    let second = TestHarness::start([endpoint(&tdb, charges.clone(), Behaviour::Ok)]);
    for round in 0..20 {
        let order = OrderPlaced {
            order_id: Uuid::new_v4(),
        };
        let id = Uuid::new_v4();
        let options = || SendOptions::new().message_id(id);
        let (a, b) = tokio::join!(
            first.publish_with(&order, options()),
            second.publish_with(&order, options())
        );
        a.unwrap();
        b.unwrap();
        wait_settled(&first, id, 1).await;
        wait_settled(&second, id, 1).await;
        assert_eq!(charges.load(Ordering::SeqCst), round + 1);
        let events = sent(&first, order.order_id).len() + sent(&second, order.order_id).len();
        assert_eq!(events, 2, "each event sent once across both instances");
    }
    assert_eq!(tdb.invoices().await, 20);
    first.stop().await;
    second.stop().await;
}

/// The consumer's writes and its messages commit or roll back together.
async fn failure_rolls_back_everything(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let harness = TestHarness::start([endpoint(&tdb, charges.clone(), Behaviour::FailAfterWork)]);
    let order = OrderPlaced {
        order_id: Uuid::new_v4(),
    };
    let id = harness.publish(&order).await.unwrap();
    harness.faulted(id).await.unwrap();
    assert_eq!(tdb.invoices().await, 0);
    assert_eq!(tdb.inbox_row(id).await, None);
    assert_eq!(tdb.rows("message").await, 0);
    assert!(sent(&harness, order.order_id).is_empty());
    assert_eq!(
        harness.broker().messages(&format!("{QUEUE}_error")).len(),
        1
    );
    harness.stop().await;
}

/// The broker fails the first send after commit: the retry delivers without consuming again.
async fn crash_after_commit_recovers(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(1));
    let flaky = {
        let failures = failures.clone();
        MapRequestLayer::new(move |mut request: ConsumeRequest| {
            let sink = RecordingSinkForward::wrap(request.sink().clone(), failures.clone());
            request.set_sink(sink);
            request
        })
    };
    let endpoint = EndpointConfig::new(QUEUE)
        .retry(RetryPolicy::immediate(2))
        .layer(flaky)
        .layer(InboxLayer::new(
            tdb.db.clone(),
            InboxConfig::new(tdb.storage.clone()),
        ));
    let endpoint = merge_consumer(endpoint, &tdb, charges.clone());
    let harness = TestHarness::start([endpoint]);
    let order = OrderPlaced {
        order_id: Uuid::new_v4(),
    };
    let id = harness.publish(&order).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(charges.load(Ordering::SeqCst), 1, "the consumer ran once");
    assert_eq!(sent(&harness, order.order_id), [1, 2]);
    assert_eq!(tdb.invoices().await, 1);
    let (consumed, delivered, receive_count) = tdb.inbox_row(id).await.unwrap();
    assert!(consumed && delivered);
    assert_eq!(receive_count, 1, "second pass recorded");
    assert_eq!(tdb.rows("message").await, 0);
    harness.stop().await;
}

fn merge_consumer(
    endpoint: EndpointConfig,
    tdb: &TestDb,
    charges: Arc<AtomicUsize>,
) -> EndpointConfig {
    let table = format!("\"{}\".invoices", tdb.schema);
    endpoint.consumer(consumer_fn(
        "InvoiceConsumer",
        move |ctx: ConsumeContext<OrderPlaced>| {
            let charges = charges.clone();
            let table = table.clone();
            async move {
                let order_id = ctx.message().order_id;
                charges.fetch_add(1, Ordering::SeqCst);
                ctx.db()
                    .execute(Statement::from_sql_and_values(
                        DbBackend::Postgres,
                        format!("INSERT INTO {table} (order_id) VALUES ($1)"),
                        [order_id.into()],
                    ))
                    .await?;
                ctx.publish(&InvoiceCreated { order_id, seq: 1 }).await?;
                ctx.publish(&InvoiceCreated { order_id, seq: 2 }).await
            }
        },
    ))
}

/// Forwards to the transport but fails the first `failures` sends.
struct RecordingSinkForward;

impl RecordingSinkForward {
    fn wrap(
        inner: ferrybus_core::SharedSink,
        failures: Arc<AtomicUsize>,
    ) -> ferrybus_core::SharedSink {
        Arc::new(Flaky { inner, failures })
    }
}

struct Flaky {
    inner: ferrybus_core::SharedSink,
    failures: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl ferrybus_core::MessageSink for Flaky {
    async fn deliver(
        &self,
        message: ferrybus_core::OutgoingMessage,
    ) -> Result<(), ferrybus_core::BoxError> {
        if self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err("channel closed before the confirm".into());
        }
        self.inner.deliver(message).await
    }
}

/// A unique violation on a business table is an error (retried, then the error queue), not a
/// duplicate.
async fn business_unique_violation_is_an_error(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let harness = TestHarness::start([endpoint(&tdb, charges.clone(), Behaviour::Ok)]);
    let order = OrderPlaced {
        order_id: Uuid::new_v4(),
    };
    let first = harness.publish(&order).await.unwrap();
    harness.consumed(first).await.unwrap();
    let second = harness.publish(&order).await.unwrap(); // same order, new message id
    harness.faulted(second).await.unwrap();
    assert_eq!(tdb.invoices().await, 1);
    assert_eq!(
        tdb.inbox_row(second).await,
        None,
        "the failed attempt left no inbox row"
    );
    assert_eq!(
        charges.load(Ordering::SeqCst),
        4,
        "1 + three attempts of the second message"
    );
    assert_eq!(
        harness.broker().messages(&format!("{QUEUE}_error")).len(),
        1
    );
    harness.stop().await;
}

macro_rules! on_every_shape {
    ($($test:ident),*) => {$(
        mod $test {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn snake_case() { super::$test(Shape::Snake).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn pascal_case() { super::$test(Shape::Pascal).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn bookworm_fixture() { super::$test(Shape::BookwormFixture).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn canonical_fixture() { super::$test(Shape::CanonicalFixture).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn bookworm_legacy() { super::$test(Shape::BookwormLegacy).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn canonical_legacy() { super::$test(Shape::CanonicalLegacy).await }
        }
    )*};
}

on_every_shape!(
    consumes_once_and_acks_duplicates,
    concurrent_copies_run_once,
    two_instances_run_once,
    failure_rolls_back_everything,
    crash_after_commit_recovers,
    business_unique_violation_is_an_error
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotnet_consumer_id_is_used() {
    let tdb = TestDb::new(Shape::CanonicalFixture).await;
    let config = InboxConfig::new(tdb.storage.clone())
        .dotnet_consumer("InvoiceConsumer", "Billing.Consumers.InvoiceConsumer");
    let endpoint = EndpointConfig::new(QUEUE).layer(InboxLayer::new(tdb.db.clone(), config));
    let harness = TestHarness::start([merge_consumer(endpoint, &tdb, Arc::default())]);
    let id = harness
        .publish(&OrderPlaced {
            order_id: Uuid::new_v4(),
        })
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    let expected = ferrybus_core::consumer_id(
        "Billing.Consumers.InvoiceConsumer",
        "Billing.Contracts.OrderPlaced",
        QUEUE,
    );
    let found = tdb
        .count(
            &format!(
                "SELECT count(*) FROM {} WHERE \"ConsumerId\" = $1",
                tdb.t("inbox")
            ),
            vec![expected.into()],
        )
        .await;
    assert_eq!(found, 1);
    harness.stop().await;
    let _ = RecordingSink::default();
}
