//! Where the inbox, the after-commit send, the sweeper and the broker meet ("Reliability,
//! round 3"), against real RabbitMQ and PostgreSQL: a send the broker refuses after commit, a
//! storage without a sweeper, the order of a sequential endpoint, a failed `COMMIT`.
//!
//! The broker refuses a send for real: the destination's exchange is declared beforehand with
//! another type (`topic` where MassTransit declares `fanout`), so the publisher's declare fails
//! with `PRECONDITION_FAILED`; deleting that exchange lets the next send declare it right.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TestDb;
use ferrybus_core::outgoing::{MessageFactory, MessageOrigin};
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Message, MessageType, RetryPolicy, SendOptions,
};
use ferrybus_rabbitmq::{Event, RabbitMqBus};
use ferrybus_sea_orm::TransactionExt;
use ferrybus_testing::{amqp_url, eventually, mt_properties, unique, Probe, Shape, WAIT};
use lapin::options::{ExchangeDeclareOptions, ExchangeDeleteOptions};
use lapin::types::FieldTable;
use lapin::{ConnectionProperties, ExchangeKind};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use uuid::Uuid;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    n: u32,
}

impl Message for Order {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusSeams.Contracts:Order").unwrap()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Step {
    n: u32,
}

impl Message for Step {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusSeams.Contracts:Step").unwrap()
    }
}

/// One test's schema (with `invoices`), broker probe and input queue.
struct Rig {
    tdb: TestDb,
    probe: Probe,
    input: String,
}

impl Rig {
    async fn new() -> Rig {
        let tdb = TestDb::new(Shape::Snake).await;
        let probe = Probe::connect(&amqp_url()).await;
        let input = unique("seam-in");
        probe.track_endpoint(&input);
        Rig { tdb, probe, input }
    }

    /// A queue name tracked for cleanup (with its exchange).
    fn destination(&self, prefix: &str) -> String {
        let name = unique(prefix);
        self.probe.track(&[&name], &[&name]);
        name
    }

    /// Publishes `Order { n }` for each `n` to the input queue, as another service would;
    /// returns their message ids in order.
    async fn publish(&self, ns: impl IntoIterator<Item = u32>) -> Vec<Uuid> {
        let factory = MessageFactory::new(ferrybus_core::address::HostAddress::new(
            "rabbitmq",
            "localhost",
            None,
            "/",
        ));
        let mut ids = Vec::new();
        for n in ns {
            let out = factory
                .send(
                    &format!("queue:{}", self.input),
                    &Order { n },
                    &MessageOrigin::default(),
                    SendOptions::new(),
                )
                .unwrap();
            self.probe
                .publish(
                    "",
                    &self.input,
                    &out.body,
                    mt_properties(&out.message_id.to_string()),
                )
                .await;
            ids.push(out.message_id);
        }
        ids
    }

    /// Inserts an invoice for `order` in the delivery's transaction.
    async fn invoice(&self, ctx: &ConsumeContext<Order>, order: Uuid) -> Result<(), ConsumeError> {
        ctx.db()
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "INSERT INTO {} (order_id) VALUES ($1)",
                    self.tdb.invoices_table()
                ),
                [order.into()],
            ))
            .await?;
        Ok(())
    }

    /// The steps in `queue`, in the order the broker holds them (taken off the queue).
    async fn steps(&self, queue: &str) -> Vec<u32> {
        let mut steps = Vec::new();
        while let Some(message) = self.probe.get(queue).await {
            let envelope = ferrybus_core::Envelope::from_slice(&message.delivery.data).unwrap();
            let step: Step = envelope.message.bind().unwrap();
            steps.push(step.n);
        }
        steps
    }

    /// Consumer-outbox rows waiting in the table.
    async fn waiting(&self) -> i64 {
        self.tdb
            .count(
                &format!(
                    "SELECT count(*) FROM {} WHERE inbox_message_id IS NOT NULL",
                    self.tdb.t("message")
                ),
                vec![],
            )
            .await
    }
}

/// Declares exchange `name` as `topic` (MassTransit's send declares it `fanout`): every send to
/// `queue:<name>` is refused with `PRECONDITION_FAILED` until [`delete_exchange`].
async fn declare_wrong_type(name: &str) {
    let connection = lapin::Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .exchange_declare(
            name.into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "".into()).await;
}

async fn delete_exchange(name: &str) {
    let connection = lapin::Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .exchange_delete(name.into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    let _ = connection.close(200, "".into()).await;
}

/// How each of `ids` was settled (`true`: consumed and acknowledged, `false`: faulted), waiting
/// until all were.
async fn settled(events: &mut broadcast::Receiver<Event>, ids: &[Uuid]) -> Vec<bool> {
    let mut outcome: Vec<Option<bool>> = vec![None; ids.len()];
    let wanted: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    tokio::time::timeout(WAIT, async {
        while outcome.iter().any(Option::is_none) {
            let (id, consumed) = match events.recv().await {
                Ok(Event::Consumed { message_id, .. }) => (message_id, true),
                Ok(Event::Faulted { message_id, .. }) => (message_id, false),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => panic!("the bus stopped"),
            };
            if let Some(i) = id.and_then(|id| wanted.iter().position(|w| *w == id)) {
                outcome[i] = Some(consumed);
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("settled: {outcome:?}"));
    outcome.into_iter().map(Option::unwrap).collect()
}

/// A consumer that writes its invoice and sends `Step { n }` to `queue:<dest>`; for order 0 it
/// first sends to `queue:<first>` when given.
fn stepper(
    rig: &Arc<Rig>,
    dest: &str,
    first: Option<String>,
    runs: Arc<AtomicUsize>,
) -> impl ferrybus_core::Consumer<Order> {
    let rig = rig.clone();
    let dest = format!("queue:{dest}");
    consumer_fn("SeamConsumer", move |ctx: ConsumeContext<Order>| {
        let (rig, dest, first, runs) = (rig.clone(), dest.clone(), first.clone(), runs.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let n = ctx.message().n;
            rig.invoice(&ctx, Uuid::new_v4()).await?;
            if let (0, Some(first)) = (n, first) {
                ctx.send(&format!("queue:{first}"), &Step { n }).await?;
            }
            ctx.send(&dest, &Step { n }).await?;
            Ok::<_, ConsumeError>(())
        }
    })
}

/// Item 3: a consumer whose transaction committed is not faulted when the broker refuses its
/// send after commit (here with `deliver_before_ack`): the delivery is acknowledged, nothing
/// goes to `_error`, the rows stay, and a sweeper delivers them once the broker accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_send_after_commit_is_acknowledged_and_left_to_the_sweeper() {
    ferrybus_testing::init_tracing();
    let rig = Arc::new(Rig::new().await);
    let dest = rig.destination("seam-dest");
    declare_wrong_type(&dest).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let storage = rig
        .tdb
        .storage()
        .await
        .deliver_before_ack(true)
        .delivery_backoff(Duration::from_millis(20), Duration::from_millis(40))
        .sweep_after(Some(Duration::from_secs(3600)))
        .inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .receive_endpoint(&rig.input, |e| {
            e.concurrency(2)
                .bind_message_types(false)
                .inbox()
                .consumer(stepper(&rig, &dest, None, runs.clone()))
        })
        .start()
        .await
        .unwrap();
    let mut events = bus.events();
    let ids = rig.publish([7]).await;
    assert_eq!(
        settled(&mut events, &ids).await,
        [true],
        "acknowledged, not faulted"
    );
    bus.stop().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the consumer ran once");
    let error_queue = format!("{}_error", rig.input);
    assert!(matches!(
        rig.probe.queue_count(&error_queue).await,
        None | Some(0)
    ));
    assert_eq!(rig.probe.queue_count(&rig.input).await, Some(0));
    assert_eq!(rig.tdb.invoices().await, 1, "the consumer's work committed");
    assert_eq!(rig.waiting().await, 1, "its message waits in the outbox");
    assert_eq!(rig.tdb.inbox_row(ids[0]).await, Some((true, false, 0)));

    // Once the broker accepts, a sweeper sends it.
    delete_exchange(&dest).await;
    let storage = rig.tdb.storage().await.inbox_cleanup(false);
    let sweeping = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .start()
        .await
        .unwrap();
    eventually("the sweeper sends the step", WAIT, || async {
        (rig.probe.queue_count(&dest).await == Some(1)).then_some(())
    })
    .await;
    sweeping.stop().await;
    assert_eq!(rig.steps(&dest).await, [7]);
    assert_eq!(rig.waiting().await, 0);
    rig.probe.cleanup().await;
}

/// Item 2: with the sweeper off (`sweep_after(None)`), nothing would send what a failed
/// after-commit send left behind, so the delivery is not acknowledged before its messages are
/// sent: the retry sends them once the broker accepts (the consumer does not run again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_sweeper_a_failed_send_is_not_acknowledged_away() {
    ferrybus_testing::init_tracing();
    let rig = Arc::new(Rig::new().await);
    let dest = rig.destination("seam-nosweep");
    declare_wrong_type(&dest).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let storage = rig
        .tdb
        .storage()
        .await
        .sweep_after(None)
        .delivery_backoff(Duration::from_millis(20), Duration::from_millis(40))
        .inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .receive_endpoint(&rig.input, |e| {
            e.concurrency(2)
                .bind_message_types(false)
                .retry(RetryPolicy::intervals(vec![
                    Duration::from_millis(300);
                    100
                ]))
                .inbox()
                .consumer(stepper(&rig, &dest, None, runs.clone()))
        })
        .start()
        .await
        .unwrap();
    let mut events = bus.events();
    let ids = rig.publish([3]).await;
    eventually("the consumer committed", WAIT, || async {
        (rig.waiting().await == 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await; // sends are refused meanwhile
    delete_exchange(&dest).await;
    eventually("the step arrives", Duration::from_secs(30), || async {
        (rig.probe.queue_count(&dest).await == Some(1)).then_some(())
    })
    .await;
    assert_eq!(settled(&mut events, &ids).await, [true]);
    bus.stop().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the consumer ran once");
    assert_eq!(rig.steps(&dest).await, [3]);
    assert_eq!(rig.waiting().await, 0);
    assert_eq!(rig.tdb.inbox_row(ids[0]).await.map(|r| r.1), Some(true));
    rig.probe.cleanup().await;
}

/// Item 4: a sequential endpoint (concurrency 1) sends in the order it committed, also when
/// one delivery's send fails for a while: order 0's first send is refused for about a second,
/// and orders 1–5 must not overtake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_endpoint_sends_in_the_order_it_committed() {
    ferrybus_testing::init_tracing();
    let rig = Arc::new(Rig::new().await);
    let side = rig.destination("seam-side");
    let dest = rig.destination("seam-order");
    declare_wrong_type(&side).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let storage = rig
        .tdb
        .storage()
        .await
        .delivery_backoff(Duration::from_millis(200), Duration::from_millis(800))
        // Tries for about 7 s: a slow machine still fixes the exchange within them.
        .send_attempts(10)
        .sweep_after(Some(Duration::from_secs(2)))
        .inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .receive_endpoint(&rig.input, |e| {
            e.concurrency(1)
                .bind_message_types(false)
                .inbox()
                .consumer(stepper(&rig, &dest, Some(side.clone()), runs.clone()))
        })
        .start()
        .await
        .unwrap();
    let ids = rig.publish(0..6).await;
    eventually("order 0 committed", WAIT, || async {
        rig.tdb.inbox_row(ids[0]).await.map(|_| ())
    })
    .await;
    // The broker refuses order 0's first destination for a second, then accepts it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    delete_exchange(&side).await;
    eventually("every step arrives", WAIT, || async {
        (rig.probe.queue_count(&dest).await == Some(6)).then_some(())
    })
    .await;
    bus.stop().await;
    assert_eq!(rig.steps(&dest).await, [0, 1, 2, 3, 4, 5], "commit order");
    assert_eq!(runs.load(Ordering::SeqCst), 6);
    rig.probe.cleanup().await;
}

/// Item 5: a `COMMIT` that fails leaves no connection in an aborted transaction behind. Order 0's
/// consumer drops a statement future mid-flight (its error waits on the connection for the
/// `COMMIT`), order 2's violates a deferred constraint at `COMMIT`; the others must still run
/// and commit on the same endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_does_not_poison_later_deliveries() {
    ferrybus_testing::init_tracing();
    let rig = Arc::new(Rig::new().await);
    let deferred = format!("\"{}\".deferred", rig.tdb.schema);
    rig.tdb
        .exec(&format!(
            "CREATE TABLE {deferred} (k int, CONSTRAINT deferred_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)"
        ))
        .await;
    let orders: Arc<std::sync::Mutex<Vec<(u32, Uuid)>>> = Arc::default();
    let consumer = {
        let (rig, orders, deferred) = (rig.clone(), orders.clone(), deferred.clone());
        consumer_fn("CommitConsumer", move |ctx: ConsumeContext<Order>| {
            let (rig, orders, deferred) = (rig.clone(), orders.clone(), deferred.clone());
            async move {
                let n = ctx.message().n;
                let order = Uuid::new_v4();
                rig.invoice(&ctx, order).await?;
                match n {
                    0 => {
                        // Given up on before the server answers: the error comes later.
                        let slow = ctx
                            .db()
                            .execute_unprepared("SELECT pg_sleep(0.4); SELECT 1/0");
                        let _ = tokio::time::timeout(Duration::from_millis(100), slow).await;
                    }
                    2 => {
                        let insert = format!("INSERT INTO {deferred} VALUES (1), (1)");
                        ctx.db().execute_unprepared(&insert).await?;
                    }
                    _ => {}
                }
                orders.lock().unwrap().push((n, order));
                Ok::<_, ConsumeError>(())
            }
        })
    };
    let storage = rig.tdb.storage().await.inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .receive_endpoint(&rig.input, |e| {
            e.concurrency(1)
                .bind_message_types(false)
                .inbox()
                .consumer(consumer)
        })
        .start()
        .await
        .unwrap();
    let mut events = bus.events();
    let ids = rig.publish(0..6).await;
    let outcome = settled(&mut events, &ids).await;
    bus.stop().await;
    assert_eq!(
        (outcome[1], outcome[3], outcome[4], outcome[5]),
        (true, true, true, true),
        "the deliveries after a failed COMMIT: {outcome:?}"
    );
    assert!(!outcome[2], "order 2's COMMIT failed: {outcome:?}");
    let committed = |order: Uuid| {
        let rig = rig.clone();
        async move {
            rig.tdb
                .count(
                    &format!(
                        "SELECT count(*) FROM {} WHERE order_id = $1",
                        rig.tdb.invoices_table()
                    ),
                    vec![order.into()],
                )
                .await
        }
    };
    let seen = orders.lock().unwrap().clone();
    for n in [1, 3, 4, 5] {
        let (_, order) = seen.iter().rev().find(|(m, _)| *m == n).copied().unwrap();
        assert_eq!(committed(order).await, 1, "order {n}'s invoice committed");
    }
    // Whatever order 0's delivery reported, acknowledged means committed.
    if outcome[0] {
        let (_, order) = seen.iter().rev().find(|(m, _)| *m == 0).copied().unwrap();
        assert_eq!(
            committed(order).await,
            1,
            "order 0 acknowledged without its invoice"
        );
    }
    rig.probe.cleanup().await;
}

/// Item 1, the relay's form: a bus-outbox row that cannot be read (its `SentTime` is
/// `infinity`, out of chrono's range) fails its own outbox, not the relay's pass: the outbox
/// written after it is delivered, the unreadable one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_bus_outbox_row_does_not_stop_the_relay() {
    ferrybus_testing::init_tracing();
    let rig = Arc::new(Rig::new().await);
    let dest = rig.destination("seam-relay");
    let factory = MessageFactory::new(ferrybus_core::address::HostAddress::new(
        "rabbitmq",
        "localhost",
        None,
        "/",
    ));
    let storage = rig.tdb.storage().await.inbox_cleanup(false);
    let outbox = ferrybus_sea_orm::BusOutbox::new(&storage, &factory);
    for n in 0..2 {
        let txn = sea_orm::TransactionTrait::begin(&rig.tdb.db).await.unwrap();
        ferrybus_core::Publish::send(&outbox.on(&txn), &format!("queue:{dest}"), &Step { n })
            .await
            .unwrap();
        txn.commit().await.unwrap();
    }
    // The first outbox's message becomes unreadable.
    rig.tdb
        .exec(&format!(
            "UPDATE {} SET sent_time = 'infinity' WHERE sequence_number = (SELECT min(sequence_number) FROM {})",
            rig.tdb.t("message"),
            rig.tdb.t("message")
        ))
        .await;
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage.delivery_backoff(Duration::from_millis(50), Duration::from_millis(100)))
        .start()
        .await
        .unwrap();
    eventually(
        "the readable outbox is delivered",
        Duration::from_secs(30),
        || async { (rig.probe.queue_count(&dest).await == Some(1)).then_some(()) },
    )
    .await;
    bus.stop().await;
    assert_eq!(rig.steps(&dest).await, [1]);
    assert_eq!(rig.tdb.rows("message").await, 1, "the unreadable row stays");
    rig.probe.cleanup().await;
}
