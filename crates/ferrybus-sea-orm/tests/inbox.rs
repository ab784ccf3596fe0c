//! Inbox + consumer outbox against a real PostgreSQL, on every table shape: endpoints with
//! `.inbox()` on an in-memory bus whose storage is a `PostgresStorage`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{InvoiceCreated, OrderPlaced, TestDb};
use ferrybus_core::consume::BoxConsumeLayer;
use ferrybus_core::consume::ConsumeRequest;
use ferrybus_core::error::BoxError;
use ferrybus_core::error::PublishErrorKind;
use ferrybus_core::memory::TestHarness;
use ferrybus_core::outgoing::MessageSink;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::outgoing::SharedSink;
use ferrybus_core::storage::Background;
use ferrybus_core::storage::Storage;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, EndpointConfig, Publish, PublishError, RetryPolicy,
    SendOptions, SettlementKind,
};
use ferrybus_sea_orm::{PostgresStorage, TransactionExt};
use ferrybus_testing::{settlements, wait_settled};
use ferrybus_testing::{Shape, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tower::ServiceBuilder;
use uuid::Uuid;

const QUEUE: &str = "billing-invoice";

#[derive(Clone, Copy)]
enum Behaviour {
    /// Insert the invoice, publish two events.
    Ok,
    /// Insert the invoice, publish, then fail.
    FailAfterWork,
}

/// The inbox tests' storage: the schema's tables; no outbox delivery or cleanup running (the
/// inbox sends a consumer's messages itself, after commit).
async fn storage(tdb: &TestDb) -> PostgresStorage {
    tdb.storage()
        .await
        .outbox_delivery(false)
        .inbox_cleanup(false)
}

/// An in-memory bus with one endpoint `QUEUE`, configured by `configure`, on `storage`.
async fn harness(
    storage: impl Storage,
    configure: impl FnOnce(EndpointConfig) -> EndpointConfig,
) -> TestHarness {
    TestHarness::builder()
        .storage(storage)
        .timeout(WAIT)
        .receive_endpoint(QUEUE, configure)
        .start()
        .await
        .expect("the harness starts")
}

/// The billing consumer of scenario 3: a "charge" (side effect, counted), a slow payment call,
/// an invoice row and two published events, all inside the inbox transaction.
fn endpoint(
    tdb: &TestDb,
    charges: Arc<AtomicUsize>,
    behaviour: Behaviour,
) -> impl FnOnce(EndpointConfig) -> EndpointConfig {
    let table = tdb.invoices_table();
    move |e| {
        e.concurrency(4)
            .retry(RetryPolicy::immediate(2))
            .inbox()
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
                            .execute_raw(Statement::from_sql_and_values(
                                DbBackend::Postgres,
                                format!("INSERT INTO {table} (order_id) VALUES ($1)"),
                                [order_id.into()],
                            ))
                            .await?;
                        ctx.publish(&InvoiceCreated { order_id, seq: 1 }).await?;
                        ctx.publish(&InvoiceCreated { order_id, seq: 2 }).await?;
                        match behaviour {
                            Behaviour::Ok => Ok(()),
                            Behaviour::FailAfterWork => {
                                Err(ConsumeError::permanent("card declined"))
                            }
                        }
                    }
                },
            ))
    }
}

fn sent(harness: &TestHarness, order_id: Uuid) -> Vec<u32> {
    harness
        .sent_now::<InvoiceCreated>()
        .into_iter()
        .filter(|e| e.message["orderId"] == order_id.to_string())
        .map(|e| e.message["seq"].as_u64().unwrap() as u32)
        .collect()
}

fn error_queue(harness: &TestHarness) -> usize {
    harness.broker().messages(&format!("{QUEUE}_error")).len()
}

async fn consumes_once_and_acks_duplicates(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let harness = harness(
        storage(&tdb).await,
        endpoint(&tdb, charges.clone(), Behaviour::Ok),
    )
    .await;
    let order = OrderPlaced {
        order_id: Uuid::new_v4(),
    };
    let id = harness.publish(&order).await.unwrap();
    wait_settled(&harness, id, 1).await;
    assert_eq!(settlements(&harness, id), [SettlementKind::Ack]);
    assert_eq!(tdb.invoices().await, 1);
    assert_eq!(tdb.inbox_row(id).await, Some((true, true, 0)));
    assert_eq!(tdb.rows("message").await, 0, "sent rows are deleted");
    assert_eq!(
        sent(&harness, order.order_id),
        [1, 2],
        "published in order after commit"
    );

    // The same message again (a redelivery): acknowledged as a duplicate, consumer not run.
    harness
        .publish_with(&order, SendOptions::new().message_id(id))
        .await
        .unwrap();
    wait_settled(&harness, id, 2).await;
    assert_eq!(
        settlements(&harness, id),
        [SettlementKind::Ack, SettlementKind::Duplicate]
    );
    assert_eq!(charges.load(Ordering::SeqCst), 1);
    assert_eq!(tdb.invoices().await, 1);
    assert_eq!(sent(&harness, order.order_id).len(), 2);
    assert_eq!(tdb.inbox_row(id).await, Some((true, true, 1)));
    assert_eq!(error_queue(&harness), 0);
    harness.stop().await;
}

/// Scenario 3: two copies at the same moment (concurrency 4), many times.
async fn concurrent_copies_run_once(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let harness = harness(
        storage(&tdb).await,
        endpoint(&tdb, charges.clone(), Behaviour::Ok),
    )
    .await;
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
        let mut kinds = settlements(&harness, id);
        kinds.sort_by_key(|k| k.as_str());
        assert_eq!(
            kinds,
            [SettlementKind::Ack, SettlementKind::Duplicate],
            "one copy consumed, the other a duplicate"
        );
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
    assert_eq!(error_queue(&harness), 0);
    harness.stop().await;
}

/// Two instances (buses) on one database get the same message at the same moment.
async fn two_instances_run_once(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let first = harness(
        storage(&tdb).await,
        endpoint(&tdb, charges.clone(), Behaviour::Ok),
    )
    .await;
    let second = harness(
        storage(&tdb).await,
        endpoint(&tdb, charges.clone(), Behaviour::Ok),
    )
    .await;
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
    let harness = harness(
        storage(&tdb).await,
        endpoint(&tdb, charges.clone(), Behaviour::FailAfterWork),
    )
    .await;
    let order = OrderPlaced {
        order_id: Uuid::new_v4(),
    };
    let id = harness.publish(&order).await.unwrap();
    harness.faulted(id).await.unwrap();
    assert_eq!(charges.load(Ordering::SeqCst), 1, "permanent: not retried");
    assert_eq!(tdb.invoices().await, 0);
    assert_eq!(tdb.inbox_row(id).await, None);
    assert_eq!(tdb.rows("message").await, 0);
    assert!(sent(&harness, order.order_id).is_empty());
    assert_eq!(error_queue(&harness), 1);
    harness.stop().await;
}

/// The broker fails the first send after commit: the delivery tries again itself (no sweeper
/// runs here, so it is not acknowledged before they are sent); the consumer runs once.
async fn crash_after_commit_recovers(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let storage = FlakyTransport {
        storage: storage(&tdb).await,
        failures: Arc::new(AtomicUsize::new(1)),
    };
    let harness = harness(storage, |e| {
        e.retry(RetryPolicy::immediate(2))
            .inbox()
            .consumer(invoice_consumer(&tdb, charges.clone()))
    })
    .await;
    let order = OrderPlaced {
        order_id: Uuid::new_v4(),
    };
    let id = harness.publish(&order).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(settlements(&harness, id), [SettlementKind::Ack]);
    assert_eq!(charges.load(Ordering::SeqCst), 1, "the consumer ran once");
    assert_eq!(sent(&harness, order.order_id), [1, 2]);
    assert_eq!(tdb.invoices().await, 1);
    let (consumed, delivered, receive_count) = tdb.inbox_row(id).await.unwrap();
    assert!(consumed && delivered);
    assert_eq!(receive_count, 0, "one delivery");
    assert_eq!(tdb.rows("message").await, 0);
    harness.stop().await;
}

/// Texts that could end a quoted literal early: the messages written with the commit (their
/// values written into the statement's text) read back from the table exactly as published.
async fn tricky_texts_survive_the_outbox(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let note = "it's \"quoted\", back\\slashed, $fb$ dollar-tagged $1 and ends with $fb";
    let storage = FlakyTransport {
        storage: storage(&tdb).await,
        failures: Arc::new(AtomicUsize::new(1)),
    };
    let harness = harness(storage, |e| {
        e.retry(RetryPolicy::immediate(2))
            .inbox()
            .consumer(consumer_fn(
                "NoteConsumer",
                move |ctx: ConsumeContext<OrderPlaced>| async move {
                    let order_id = ctx.message().order_id;
                    let options = SendOptions::new().header("Note", note);
                    ctx.publish_with(&InvoiceCreated { order_id, seq: 7 }, options)
                        .await?;
                    Ok::<_, ConsumeError>(())
                },
            ))
    })
    .await;
    let order = OrderPlaced {
        order_id: Uuid::new_v4(),
    };
    let id = harness.publish(&order).await.unwrap();
    harness.consumed(id).await.unwrap();
    // The first send failed: the retry read the row back from the table and sent that.
    let sent = harness.sent_now::<InvoiceCreated>();
    let [envelope] = &sent[..] else {
        panic!("one InvoiceCreated, got {}", sent.len());
    };
    assert_eq!(envelope.headers.get_str("Note"), Some(note));
    assert_eq!(envelope.message["seq"], 7);
    assert_eq!(envelope.message["orderId"], order.order_id.to_string());
    harness.stop().await;
}

/// Inserts an invoice and publishes two events.
fn invoice_consumer(
    tdb: &TestDb,
    charges: Arc<AtomicUsize>,
) -> impl ferrybus_core::Consumer<OrderPlaced> {
    let table = tdb.invoices_table();
    consumer_fn(
        "InvoiceConsumer",
        move |ctx: ConsumeContext<OrderPlaced>| {
            let charges = charges.clone();
            let table = table.clone();
            async move {
                let order_id = ctx.message().order_id;
                charges.fetch_add(1, Ordering::SeqCst);
                ctx.db()
                    .execute_raw(Statement::from_sql_and_values(
                        DbBackend::Postgres,
                        format!("INSERT INTO {table} (order_id) VALUES ($1)"),
                        [order_id.into()],
                    ))
                    .await?;
                ctx.publish(&InvoiceCreated { order_id, seq: 1 }).await?;
                ctx.publish(&InvoiceCreated { order_id, seq: 2 }).await?;
                Ok::<_, ConsumeError>(())
            }
        },
    )
}

/// A `PostgresStorage` whose inbox sees a transport that fails its first `failures` sends: the
/// inbox layer's requests get a sink that fails, then forwards to the bus's transport.
struct FlakyTransport {
    storage: PostgresStorage,
    failures: Arc<AtomicUsize>,
}

#[async_trait]
impl Storage for FlakyTransport {
    async fn prepare(&self) -> Result<(), BoxError> {
        self.storage.prepare().await
    }

    fn inbox_layer(&self) -> BoxConsumeLayer {
        let failures = self.failures.clone();
        let layer = ServiceBuilder::new()
            .map_request(move |mut request: ConsumeRequest| {
                let sink: SharedSink = Arc::new(Flaky {
                    inner: request.sink().clone(),
                    failures: failures.clone(),
                });
                request.set_sink(sink);
                request
            })
            .layer(self.storage.inbox_layer())
            .into_inner();
        BoxConsumeLayer::new(layer)
    }

    fn start(&self, sink: SharedSink) -> Background {
        self.storage.start(sink)
    }
}

/// Forwards to the transport but fails the first `failures` sends.
struct Flaky {
    inner: SharedSink,
    failures: Arc<AtomicUsize>,
}

#[async_trait]
impl MessageSink for Flaky {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        if self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(PublishError::new(
                PublishErrorKind::Transport,
                "channel closed before the confirm",
            ));
        }
        self.inner.deliver(message).await
    }
}

/// A unique violation on a business table is an error (retried, then the error queue), not a
/// duplicate.
async fn business_unique_violation_is_an_error(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let charges = Arc::new(AtomicUsize::new(0));
    let harness = harness(
        storage(&tdb).await,
        endpoint(&tdb, charges.clone(), Behaviour::Ok),
    )
    .await;
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
    assert_eq!(error_queue(&harness), 1);
    harness.stop().await;
}

/// The inbox row is inserted "delivered" or "not delivered" by a guess from the last delivery
/// (did it publish?); every combination of guess and outcome must leave the row right. A
/// consumer that publishes for some orders only, one delivery at a time: publish, nothing,
/// nothing, publish, publish (its first send fails after commit: the retry must find the row
/// consumed and not delivered, and only send), nothing.
async fn the_inbox_row_follows_what_each_delivery_published(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let failures = Arc::new(AtomicUsize::new(0));
    let storage = FlakyTransport {
        storage: storage(&tdb).await,
        failures: failures.clone(),
    };
    let publishing: Arc<std::sync::Mutex<Vec<Uuid>>> = Arc::default();
    let runs = Arc::new(AtomicUsize::new(0));
    let (p, r) = (publishing.clone(), runs.clone());
    let harness = harness(storage, move |e| {
        e.concurrency(1)
            .retry(RetryPolicy::immediate(2))
            .inbox()
            .consumer(consumer_fn(
                "SometimesPublishes",
                move |ctx: ConsumeContext<OrderPlaced>| {
                    let (publishing, runs) = (p.clone(), r.clone());
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        let order_id = ctx.message().order_id;
                        if publishing.lock().unwrap().contains(&order_id) {
                            ctx.publish(&InvoiceCreated { order_id, seq: 1 }).await?;
                        }
                        Ok(())
                    }
                },
            ))
    })
    .await;
    let pattern = [true, false, false, true, true, false];
    for (i, publishes) in pattern.into_iter().enumerate() {
        let order_id = Uuid::new_v4();
        if publishes {
            publishing.lock().unwrap().push(order_id);
        }
        let fails = i == 4;
        if fails {
            failures.store(1, Ordering::SeqCst);
        }
        let id = harness.publish(&OrderPlaced { order_id }).await.unwrap();
        harness.consumed(id).await.unwrap();
        // A failed send after commit is tried again by the delivery itself.
        assert_eq!(
            settlements(&harness, id),
            [SettlementKind::Ack],
            "delivery {i}"
        );
        let (consumed, delivered, _) = tdb.inbox_row(id).await.expect("an inbox row");
        assert!(
            consumed && delivered,
            "delivery {i}: consumed and delivered"
        );
        assert_eq!(
            tdb.rows("message").await,
            0,
            "delivery {i}: rows sent and deleted"
        );
        assert_eq!(
            sent(&harness, order_id),
            if publishes { vec![1] } else { vec![] },
            "delivery {i}"
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        pattern.len(),
        "each consumer ran once"
    );
    harness.stop().await;
}

ferrybus_testing::on_every_shape!(
    consumes_once_and_acks_duplicates,
    the_inbox_row_follows_what_each_delivery_published,
    concurrent_copies_run_once,
    two_instances_run_once,
    failure_rolls_back_everything,
    crash_after_commit_recovers,
    tricky_texts_survive_the_outbox,
    business_unique_violation_is_an_error
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotnet_consumer_id_is_used() {
    let tdb = TestDb::new(Shape::CanonicalFixture).await;
    let storage = storage(&tdb)
        .await
        .dotnet_consumer("InvoiceConsumer", "Billing.Consumers.InvoiceConsumer");
    let harness = harness(storage, |e| {
        e.inbox().consumer(invoice_consumer(&tdb, Arc::default()))
    })
    .await;
    let id = harness
        .publish(&OrderPlaced {
            order_id: Uuid::new_v4(),
        })
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    let expected = ferrybus_core::message::consumer_id(
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
}
