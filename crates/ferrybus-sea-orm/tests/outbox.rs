//! Bus outbox, outbox delivery and sweeper against a real PostgreSQL, on every table shape:
//! `PostgresStorage::start` (the background services a bus runs), `deliver_once` and
//! `sweep_once` with a recording sink in place of the broker.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{InvoiceCreated, OrderPlaced, RecordingSink, TestDb};
use ferrybus_core::address::HostAddress;
use ferrybus_core::error::PublishErrorKind;
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::outgoing::MessageSink;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::storage::Storage;
use ferrybus_core::{Envelope, Publish, PublishError, SendOptions};
use ferrybus_sea_orm::testing::{pending_bus_outbox, wait_until_outbox_drained};
use ferrybus_sea_orm::{BusOutbox, PostgresStorage};
use ferrybus_testing::{eventually, Shape, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use uuid::Uuid;

fn outbox(storage: &PostgresStorage) -> BusOutbox {
    let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"))
        .with_transport(std::sync::Arc::new(ferrybus_rabbitmq::RabbitMqProperties));
    BusOutbox::new(storage, &factory)
}

/// Publishes `count` `InvoiceCreated` of one new order through the bus outbox in one
/// transaction and commits it; returns the message ids in sequence order.
async fn publish_committed(tdb: &TestDb, outbox: &BusOutbox, count: u32) -> Vec<Uuid> {
    let txn = tdb.db.begin().await.unwrap();
    let order_id = Uuid::new_v4();
    let mut ids = Vec::new();
    for seq in 1..=count {
        ids.push(
            outbox
                .on(&txn)
                .publish(&InvoiceCreated { order_id, seq })
                .await
                .unwrap(),
        );
    }
    txn.commit().await.unwrap();
    ids
}

/// Inserts an outbox state row as .NET writes it (`LockId` all zeros), created at `created`,
/// delivered at `delivered`.
async fn insert_dotnet_state(
    tdb: &TestDb,
    outbox_id: Uuid,
    created: Option<chrono::DateTime<chrono::Utc>>,
    delivered: Option<chrono::DateTime<chrono::Utc>>,
) {
    let sql = format!(
        "INSERT INTO {} ({}, {}, {}, {}) VALUES ($1, '00000000-0000-0000-0000-000000000000', $2, $3)",
        tdb.t("state"),
        tdb.c("OutboxId"),
        tdb.c("LockId"),
        tdb.c("Created"),
        tdb.c("Delivered")
    );
    tdb.db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            [outbox_id.into(), tdb.ts(created), tdb.ts(delivered)],
        ))
        .await
        .unwrap();
}

/// The schema's storage with a delivery service that polls every `poll`, two workers, a short
/// back-off and no sweeper.
async fn storage(tdb: &TestDb, poll: Duration) -> PostgresStorage {
    tdb.storage()
        .await
        .poll_interval(poll)
        .delivery_workers(2)
        .delivery_backoff(Duration::from_millis(50), Duration::from_millis(400))
        .sweep_after(None)
        .inbox_cleanup(false)
}

/// Waits until the delivery service's listener has run `LISTEN` on this schema's channel.
async fn wait_listening(tdb: &TestDb) {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle' \
               AND query ILIKE 'LISTEN%' AND strpos(query, $1) > 0";
    eventually("the outbox listener to LISTEN", WAIT, || async {
        (tdb.count(sql, vec![tdb.schema.clone().into()]).await > 0).then_some(())
    })
    .await;
}

/// Rows reach the sink only after commit, woken by NOTIFY (the poll interval is an hour), in
/// order.
async fn delivered_after_commit_through_notify(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = RecordingSink::default();
    let storage = storage(&tdb, Duration::from_secs(3600)).await;
    let background = storage.start(Arc::new(sink.clone()));
    wait_listening(&tdb).await;
    let outbox = outbox(&storage);
    let order_id = Uuid::new_v4();
    let txn = tdb.db.begin().await.unwrap();
    let mut ids = Vec::new();
    for seq in 1..=5 {
        ids.push(
            outbox
                .on(&txn)
                .publish(&InvoiceCreated { order_id, seq })
                .await
                .unwrap(),
        );
    }
    // A delivery pass while the transaction is open finds nothing.
    let other = RecordingSink::default();
    assert_eq!(
        storage.deliver_once(Arc::new(other.clone())).await.unwrap(),
        0
    );
    assert_eq!(other.attempts(), 0);
    assert!(sink.messages().is_empty(), "nothing leaves before commit");
    assert_eq!(tdb.rows("state").await, 0, "uncommitted rows are invisible");
    txn.commit().await.unwrap();
    eventually("delivery after the NOTIFY", WAIT, || async {
        (sink.messages().len() == 5).then_some(())
    })
    .await;
    assert_eq!(sink.ids(), ids, "one outbox, delivered in order");
    let first = &sink.messages()[0];
    assert_eq!(
        first.destination_address,
        "rabbitmq://localhost/Billing.Contracts:InvoiceCreated"
    );
    assert_eq!(first.publish_bindings, ["Billing.Contracts:IBillingEvent"]);
    let envelope = Envelope::from_slice(&first.body).unwrap();
    assert_eq!(envelope.message["seq"], 1);
    wait_until_outbox_drained(&storage, WAIT).await.unwrap();
    background.stop().await;
}

/// A rolled-back transaction sends nothing, ever.
async fn rollback_sends_nothing(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = RecordingSink::default();
    let storage = storage(&tdb, Duration::from_millis(50)).await;
    let background = storage.start(Arc::new(sink.clone()));
    let outbox = outbox(&storage);
    let txn = tdb.db.begin().await.unwrap();
    outbox
        .on(&txn)
        .publish(&OrderPlaced {
            order_id: Uuid::new_v4(),
        })
        .await
        .unwrap();
    txn.rollback().await.unwrap();
    // A message committed after the rollback: once it is out, the service has looked since.
    let txn = tdb.db.begin().await.unwrap();
    let marker = outbox
        .on(&txn)
        .publish(&OrderPlaced {
            order_id: Uuid::new_v4(),
        })
        .await
        .unwrap();
    txn.commit().await.unwrap();
    wait_until_outbox_drained(&storage, WAIT).await.unwrap();
    assert_eq!(sink.ids(), [marker], "only the committed message went out");
    assert_eq!(sink.attempts(), 1);
    assert_eq!(pending_bus_outbox(&storage).await.unwrap(), 0);
    assert_eq!(
        storage
            .deliver_once(Arc::new(RecordingSink::default()))
            .await
            .unwrap(),
        0
    );
    background.stop().await;
}

/// A failing sink: rows stay, each outbox is tried again only after its back-off (doubling), its
/// later messages wait behind its first, and everything goes out in order on recovery.
async fn failing_sink_backs_off_then_delivers(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = RecordingSink::default();
    sink.set_failing(true);
    let storage = tdb
        .storage()
        .await
        .poll_interval(Duration::from_millis(20))
        // One worker: with several, one may claim an outbox another has just failed on (its
        // claim excluded the backed-off outboxes it knew of when it began) and retry at once.
        .delivery_workers(1)
        .delivery_backoff(Duration::from_millis(100), Duration::from_secs(1))
        .sweep_after(None)
        .inbox_cleanup(false);
    let outbox = outbox(&storage);
    let mut outboxes = Vec::new();
    for _ in 0..3 {
        let txn = tdb.db.begin().await.unwrap();
        let mut ids = Vec::new();
        for _ in 0..2 {
            let order = OrderPlaced {
                order_id: Uuid::new_v4(),
            };
            ids.push(outbox.on(&txn).publish(&order).await.unwrap());
        }
        txn.commit().await.unwrap();
        outboxes.push(ids);
    }
    let background = storage.start(Arc::new(sink.clone()));
    eventually("four tries of every outbox", WAIT, || async {
        outboxes
            .iter()
            .all(|ids| sink.tries_of(ids[0]).len() >= 4)
            .then_some(())
    })
    .await;
    for ids in &outboxes {
        let tries = sink.tries_of(ids[0]);
        for (n, (pair, backoff)) in tries.windows(2).zip([100, 200, 400]).enumerate() {
            let gap = pair[1] - pair[0];
            assert!(
                gap >= Duration::from_millis(backoff),
                "retry {} of {} after {gap:?}, before its {backoff} ms back-off",
                n + 1,
                ids[0]
            );
        }
    }
    let heads: Vec<Uuid> = outboxes.iter().map(|ids| ids[0]).collect();
    assert!(
        sink.tried_ids().iter().all(|id| heads.contains(id)),
        "an outbox's second message waits behind its first"
    );
    assert!(sink.messages().is_empty());
    assert_eq!(tdb.rows("message").await, 6, "nothing lost");
    sink.set_failing(false);
    wait_until_outbox_drained(&storage, WAIT).await.unwrap();
    let delivered = sink.ids();
    assert_eq!(delivered.len(), 6);
    for ids in &outboxes {
        let first = delivered.iter().position(|d| *d == ids[0]).unwrap();
        let second = delivered.iter().position(|d| *d == ids[1]).unwrap();
        assert!(first < second, "each outbox in order: {delivered:?}");
    }
    background.stop().await;
}

/// A send failure in the middle of an outbox keeps the sent part sent and the order intact.
async fn partial_failure_resumes_in_order(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = RecordingSink::default();
    let storage = storage(&tdb, Duration::from_millis(20)).await;
    let outbox = outbox(&storage);
    let ids = publish_committed(&tdb, &outbox, 4).await;
    // The third send fails: the sink fails after two deliveries.
    let failing_after_two = FailAfter::new(sink.clone(), 2);
    assert_eq!(
        storage
            .deliver_once(Arc::new(failing_after_two))
            .await
            .unwrap(),
        2
    );
    assert_eq!(tdb.rows("message").await, 2, "sent rows deleted");
    assert_eq!(tdb.rows("state").await, 1, "outbox kept with its progress");
    assert_eq!(
        storage.deliver_once(Arc::new(sink.clone())).await.unwrap(),
        2
    );
    assert_eq!(sink.ids(), ids);
    assert_eq!(pending_bus_outbox(&storage).await.unwrap(), 0);
}

/// Delivers through `sink` `successes` times, then nacks.
struct FailAfter {
    sink: RecordingSink,
    remaining: AtomicUsize,
}

impl FailAfter {
    fn new(sink: RecordingSink, successes: usize) -> Self {
        Self {
            sink,
            remaining: successes.into(),
        }
    }
}

#[async_trait]
impl MessageSink for FailAfter {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        if self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            return Err(PublishError::new(PublishErrorKind::Rejected, "nack"));
        }
        self.sink.deliver(message).await
    }
}

/// Holds the send of one message until released; records the others at once.
#[derive(Clone, Default)]
struct HoldOne {
    sink: RecordingSink,
    held: Arc<std::sync::Mutex<Option<Uuid>>>,
    release: Arc<tokio::sync::Notify>,
    holding: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl MessageSink for HoldOne {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        let hold = *self.held.lock().unwrap() == Some(message.message_id);
        if hold {
            let released = self.release.notified();
            self.holding.notify_one();
            released.await;
        }
        self.sink.deliver(message).await
    }
}

/// A commit is sent while another worker is still busy with an earlier pass: the notification
/// wakes an idle worker (the poll interval is an hour, so nothing else would).
async fn a_commit_does_not_wait_for_a_busy_worker(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = HoldOne::default();
    let storage = storage(&tdb, Duration::from_secs(3600)).await;
    let background = storage.start(Arc::new(sink.clone()));
    wait_listening(&tdb).await;
    let outbox = outbox(&storage);
    let publish = |seq: u32| {
        let (db, outbox) = (tdb.db.clone(), outbox.clone());
        async move {
            let txn = db.begin().await.unwrap();
            let id = outbox
                .on(&txn)
                .publish(&InvoiceCreated {
                    order_id: Uuid::new_v4(),
                    seq,
                })
                .await
                .unwrap();
            (txn, id)
        }
    };
    let (txn, first) = publish(1).await;
    *sink.held.lock().unwrap() = Some(first);
    let holding = sink.holding.notified();
    txn.commit().await.unwrap();
    tokio::time::timeout(WAIT, holding)
        .await
        .expect("a worker started sending the first message");
    let (txn, second) = publish(2).await;
    txn.commit().await.unwrap();
    eventually(
        "the second message, while the first is held",
        WAIT,
        || async { (sink.sink.ids() == [second]).then_some(()) },
    )
    .await;
    sink.release.notify_one();
    eventually("the first message, once released", WAIT, || async {
        (sink.sink.ids() == [second, first]).then_some(())
    })
    .await;
    wait_until_outbox_drained(&storage, WAIT).await.unwrap();
    background.stop().await;
}

/// Instances share the passes of one outbox table: with one delivery worker each, a second
/// instance's pass finds no free pass while the first instance's pass is still sending, though
/// another outbox waits; with two workers it takes the second pass and that outbox at once.
async fn instances_share_the_passes_of_one_outbox(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = HoldOne::default();
    let first_instance = storage(&tdb, Duration::from_secs(3600))
        .await
        .delivery_workers(1)
        .outboxes_per_claim(1);
    let second_instance = storage(&tdb, Duration::from_secs(3600))
        .await
        .delivery_workers(1);
    let outbox = outbox(&first_instance);
    let held = publish_committed(&tdb, &outbox, 1).await[0];
    let waiting = publish_committed(&tdb, &outbox, 1).await[0];
    *sink.held.lock().unwrap() = Some(held);
    let holding = sink.holding.notified();
    let pass = tokio::spawn({
        let (storage, sink) = (first_instance.clone(), sink.clone());
        async move { storage.deliver_once(Arc::new(sink)).await }
    });
    tokio::time::timeout(WAIT, holding)
        .await
        .expect("the first instance's pass is sending its outbox");
    // Both outcomes are read before the held pass is released, and asserted after: a failed
    // assertion must not leave that pass (and its locks) open.
    let second = RecordingSink::default();
    let while_held = second_instance.deliver_once(Arc::new(second.clone())).await;
    let attempts_while_held = second.attempts();
    let wider = second_instance.delivery_workers(2);
    let with_two_passes = wider.deliver_once(Arc::new(second.clone())).await;
    sink.release.notify_one();
    assert_eq!(pass.await.unwrap().unwrap(), 1);
    assert_eq!(
        while_held.unwrap(),
        0,
        "no second pass while the only one is taken"
    );
    assert_eq!(attempts_while_held, 0);
    assert_eq!(
        with_two_passes.unwrap(),
        1,
        "a second pass, with two allowed, claims the waiting outbox"
    );
    assert_eq!(second.ids(), [waiting]);
    assert_eq!(sink.sink.ids(), [held]);
    assert_eq!(pending_bus_outbox(&first_instance).await.unwrap(), 0);
    assert_eq!(tdb.rows("message").await, 0);
}

/// Rows a .NET service wrote (its column formats, an envelope from a real MassTransit
/// producer) are delivered too.
async fn delivers_dotnet_rows(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let storage = storage(&tdb, Duration::from_secs(1)).await;
    let body = include_str!("../../../fixtures/envelopes/04-v8.0.7-stj-publish-rabbitmq.json");
    let outbox_id = Uuid::new_v4();
    let message_id = Uuid::parse_str("7c740000-a5be-c025-8e9a-08dabc788911").unwrap();
    let c = |n: &str| tdb.c(n);
    let now = Some(chrono::Utc::now());
    insert_dotnet_state(&tdb, outbox_id, now, None).await;
    let insert_message = format!(
        "INSERT INTO {} ({}, {}, {}, {}, {}, {}, {}, {}, {}, {}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        tdb.t("message"), c("OutboxId"), c("SentTime"), c("Headers"), c("Properties"), c("MessageId"),
        c("ContentType"), c("MessageType"), c("Body"), c("ConversationId"), c("DestinationAddress")
    );
    let values = [
        outbox_id.into(),
        tdb.ts(now),
        "{\n  \"MT-Activity-Id\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\",\n  \"Tenant\": \"acme\"\n}".into(),
        "{\n  \"RMQ-Exchange\": \"TrainingContract:OrderPlacedEvent\"\n}".into(),
        message_id.into(),
        "application/vnd.masstransit+json".into(),
        "urn:message:TrainingContract:OrderPlacedEvent".into(),
        body.into(),
        Uuid::parse_str("7c740000-a5be-c025-8c47-08dabc7888fc").unwrap().into(),
        "rabbitmq://localhost/TrainingContract:OrderPlacedEvent".into(),
    ];
    tdb.db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            insert_message,
            values,
        ))
        .await
        .unwrap();
    let sink = RecordingSink::default();
    assert_eq!(
        storage.deliver_once(Arc::new(sink.clone())).await.unwrap(),
        1
    );
    let sent = sink.messages();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].message_id, message_id);
    assert_eq!(
        sent[0].destination_address,
        "rabbitmq://localhost/TrainingContract:OrderPlacedEvent"
    );
    assert_eq!(sent[0].headers.get_str("tenant"), Some("acme"));
    assert_eq!(&*sent[0].body, body.as_bytes());
    assert_eq!(pending_bus_outbox(&storage).await.unwrap(), 0);
}

/// Our rows have .NET's column formats: Properties with RMQ-Exchange, Headers object or NULL,
/// URNs joined with ';', a v8 envelope body, LockId all-zero, inbox ids NULL.
async fn rows_are_valid_for_dotnet(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let storage = tdb.storage().await;
    let txn = tdb.db.begin().await.unwrap();
    let options = SendOptions::new().header("Tenant", "acme").priority(6);
    let id = outbox(&storage)
        .on(&txn)
        .publish_with(
            &InvoiceCreated {
                order_id: Uuid::nil(),
                seq: 1,
            },
            options,
        )
        .await
        .unwrap();
    txn.commit().await.unwrap();
    let c = |n: &str| tdb.c(n);
    let sql = format!(
        "SELECT m.{}::text AS props, m.{} AS headers, m.{} AS types, m.{} AS body, s.{}::text AS lock, \
         m.{} IS NULL AS no_inbox FROM {} m JOIN {} s ON s.{} = m.{} WHERE m.{} = $1",
        c("Properties"), c("Headers"), c("MessageType"), c("Body"), c("LockId"), c("InboxMessageId"),
        tdb.t("message"), tdb.t("state"), c("OutboxId"), c("OutboxId"), c("MessageId")
    );
    let row = tdb
        .db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            [id.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    let props: serde_json::Value =
        serde_json::from_str(&row.try_get::<String>("", "props").unwrap()).unwrap();
    assert_eq!(props["RMQ-Exchange"], "Billing.Contracts:InvoiceCreated");
    assert_eq!(
        props["RMQ-Priority"], 6,
        "kept as MassTransit's outbox keeps it"
    );
    let headers: serde_json::Value =
        serde_json::from_str(&row.try_get::<String>("", "headers").unwrap()).unwrap();
    assert_eq!(headers["Tenant"], "acme");
    assert_eq!(
        row.try_get::<String>("", "types").unwrap(),
        "urn:message:Billing.Contracts:InvoiceCreated;urn:message:Billing.Contracts:IBillingEvent"
    );
    let envelope =
        Envelope::from_slice(row.try_get::<String>("", "body").unwrap().as_bytes()).unwrap();
    assert_eq!(envelope.message_id, Some(id));
    assert_eq!(
        row.try_get::<String>("", "lock").unwrap(),
        Uuid::nil().to_string()
    );
    assert!(row.try_get::<bool>("", "no_inbox").unwrap());
}

/// One outbox per transaction, its id a UUIDv7 of the transaction's start: every message of a
/// transaction joins one outbox, and a later transaction's outbox sorts after an earlier one's
/// (the relay's indexes stay dense however long the backlog).
async fn outbox_ids_are_time_ordered_per_transaction(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let storage = tdb.storage().await;
    let outbox = outbox(&storage);
    let started = chrono::Utc::now().timestamp_millis();
    let first = publish_committed(&tdb, &outbox, 2).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = publish_committed(&tdb, &outbox, 1).await;
    let sql = format!(
        "SELECT {oid} AS outbox_id FROM {m} WHERE {mid} = ANY($1) ORDER BY {seq}",
        oid = tdb.c("OutboxId"),
        m = tdb.t("message"),
        mid = tdb.c("MessageId"),
        seq = tdb.c("SequenceNumber"),
    );
    let ids: Vec<Uuid> = tdb
        .db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            [[first.clone(), second].concat().into()],
        ))
        .await
        .unwrap()
        .iter()
        .map(|row| row.try_get::<Uuid>("", "outbox_id").unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], ids[1], "one transaction, one outbox");
    assert_ne!(ids[1], ids[2], "a new transaction, a new outbox");
    assert!(ids[1] < ids[2], "a later outbox sorts after: {ids:?}");
    for id in &ids {
        assert_eq!(id.get_version_num(), 7, "{id}");
        let (secs, nanos) = id.get_timestamp().unwrap().to_unix();
        let millis = i64::try_from(secs).unwrap() * 1000 + i64::from(nanos / 1_000_000);
        assert!(
            (started - 1000..started + 60_000).contains(&millis),
            "{id}: {millis} ms, test started at {started}"
        );
    }
    let ordered = format!(
        "SELECT count(*) FROM {s} WHERE {oid} = $1",
        s = tdb.t("state"),
        oid = tdb.c("OutboxId"),
    );
    assert_eq!(tdb.count(&ordered, vec![ids[0].into()]).await, 1);
}

/// With `notify_on_write(false)` a bus-outbox write sends no `NOTIFY` (the next notification a
/// listener receives is a marker committed after it), and the delivery service still finds the
/// row by polling; with the default, the write notifies.
async fn writes_without_notify_are_found_by_polling(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let channel = format!("fbtest_{}", Uuid::new_v4().simple());
    let mut listener =
        sea_orm::sqlx::postgres::PgListener::connect_with(tdb.db.get_postgres_connection_pool())
            .await
            .unwrap();
    listener.listen(&channel).await.unwrap();
    let prepared = |notify: bool| {
        let storage = PostgresStorage::new(tdb.db.clone())
            .tables(tdb.tables())
            .notify_channel(channel.clone())
            .notify_on_write(notify)
            .poll_interval(Duration::from_millis(50))
            .sweep_after(None)
            .inbox_cleanup(false);
        async move {
            storage.prepare().await.unwrap();
            storage
        }
    };
    let (loud, quiet) = (prepared(true).await, prepared(false).await);
    let mark = |payload: &'static str| {
        let sql = format!("SELECT pg_notify('{channel}', '{payload}')");
        let db = tdb.db.clone();
        async move {
            db.execute_unprepared(&sql).await.unwrap();
        }
    };
    let mut expected = publish_committed(&tdb, &outbox(&loud), 1).await;
    mark("after-loud").await;
    assert_eq!(
        listener.recv().await.unwrap().payload(),
        "",
        "the write's own"
    );
    assert_eq!(listener.recv().await.unwrap().payload(), "after-loud");
    expected.extend(publish_committed(&tdb, &outbox(&quiet), 2).await);
    mark("after-quiet").await;
    assert_eq!(
        listener.recv().await.unwrap().payload(),
        "after-quiet",
        "the quiet write sent no NOTIFY"
    );
    let sink = RecordingSink::default();
    let background = quiet.start(Arc::new(sink.clone()));
    eventually("delivery by polling", WAIT, || async {
        (sink.ids().len() == expected.len()).then_some(())
    })
    .await;
    background.stop().await;
    assert_eq!(sink.ids(), expected, "every message once, in order");
    assert_eq!(tdb.rows("message").await, 0);
}

/// The sweeper delivers consumer-outbox rows whose inbound message went to the error queue.
async fn sweeper_delivers_stranded_rows(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let storage = storage(&tdb, Duration::from_secs(1)).await;
    let (message_id, consumer_id) = (Uuid::new_v4(), Uuid::new_v4());
    let c = |n: &str| tdb.c(n);
    let old = Some(chrono::Utc::now() - chrono::Duration::minutes(10));
    let insert_inbox = format!(
        "INSERT INTO {} ({}, {}, {}, {}, {}, {}) VALUES ($1, $2, $3, $4, 0, $4)",
        tdb.t("inbox"),
        c("MessageId"),
        c("ConsumerId"),
        c("LockId"),
        c("Received"),
        c("ReceiveCount"),
        c("Consumed")
    );
    let values = [
        message_id.into(),
        consumer_id.into(),
        Uuid::new_v4().into(),
        tdb.ts(old),
    ];
    tdb.db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            insert_inbox,
            values,
        ))
        .await
        .unwrap();
    for seq in 1..=2u32 {
        let insert = format!(
            "INSERT INTO {} ({}, {}, {}, {}, {}, {}, {}, {}) VALUES (now(), $1, $2, $3, 'application/vnd.masstransit+json', \
             'urn:message:Billing.Contracts:InvoiceCreated', $4, 'rabbitmq://localhost/Billing.Contracts:InvoiceCreated')",
            tdb.t("message"), c("SentTime"), c("InboxMessageId"), c("InboxConsumerId"), c("MessageId"),
            c("ContentType"), c("MessageType"), c("Body"), c("DestinationAddress")
        );
        let body = format!("{{\"message\": {{\"seq\": {seq}}}, \"messageType\": [\"urn:message:Billing.Contracts:InvoiceCreated\"]}}");
        let values = [
            message_id.into(),
            consumer_id.into(),
            Uuid::new_v4().into(),
            body.into(),
        ];
        tdb.db
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                insert,
                values,
            ))
            .await
            .unwrap();
    }
    let sink = RecordingSink::default();
    assert_eq!(
        storage
            .sweep_once(Arc::new(sink.clone()), Duration::from_secs(3600))
            .await
            .unwrap(),
        0,
        "too young"
    );
    assert_eq!(sink.attempts(), 0);
    assert_eq!(
        storage
            .sweep_once(Arc::new(sink.clone()), Duration::from_secs(60))
            .await
            .unwrap(),
        1
    );
    let bodies: Vec<String> = sink
        .messages()
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    assert_eq!(bodies.len(), 2);
    assert!(bodies[0].contains("\"seq\": 1") && bodies[1].contains("\"seq\": 2"));
    assert_eq!(tdb.rows("message").await, 0);
    assert_eq!(tdb.inbox_row(message_id).await, Some((true, true, 0)));
}

/// One pass claims outboxes and reads their messages together: an outbox larger than
/// `messages_per_outbox` goes out over several passes, in order, resuming after the recorded
/// progress; an outbox .NET marked delivered but did not delete (no messages left) is removed
/// without a send.
async fn passes_resume_large_outboxes_and_remove_delivered_states(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let storage = storage(&tdb, Duration::from_secs(3600))
        .await
        .messages_per_outbox(3);
    let outbox = outbox(&storage);
    let ids = publish_committed(&tdb, &outbox, 7).await;
    let delivered_id = Uuid::new_v4();
    let now = Some(chrono::Utc::now());
    insert_dotnet_state(&tdb, delivered_id, now, now).await;
    let sink = Arc::new(RecordingSink::default());
    let mut per_pass = Vec::new();
    for _ in 0..4 {
        per_pass.push(storage.deliver_once(sink.clone()).await.unwrap());
    }
    assert_eq!(
        per_pass,
        [3, 3, 1, 0],
        "three per pass, then the rest, then nothing"
    );
    assert_eq!(sink.ids(), ids, "every message once, in order");
    assert_eq!(tdb.rows("message").await, 0);
    assert_eq!(tdb.rows("state").await, 0, "both states removed");
}

/// Opt-in pipelining keeps the order within an outbox, across several outboxes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_delivery_keeps_each_outbox_in_order() {
    let tdb = TestDb::new(Shape::Snake).await;
    let sink = RecordingSink::default();
    let storage = tdb
        .storage()
        .await
        .poll_interval(Duration::from_millis(50))
        .pipelined_sends(true)
        .sweep_after(None)
        .inbox_cleanup(false);
    let outbox = outbox(&storage);
    let mut expected = Vec::new();
    for _ in 0..4 {
        expected.push(publish_committed(&tdb, &outbox, 10).await);
    }
    let background = storage.start(Arc::new(sink.clone()));
    wait_until_outbox_drained(&storage, WAIT).await.unwrap();
    background.stop().await;
    let delivered = sink.ids();
    assert_eq!(delivered.len(), 40);
    for ids in expected {
        let positions: Vec<usize> = ids
            .iter()
            .map(|id| delivered.iter().position(|d| d == id).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    }
}

ferrybus_testing::on_every_shape!(
    delivered_after_commit_through_notify,
    rollback_sends_nothing,
    failing_sink_backs_off_then_delivers,
    partial_failure_resumes_in_order,
    delivers_dotnet_rows,
    rows_are_valid_for_dotnet,
    outbox_ids_are_time_ordered_per_transaction,
    writes_without_notify_are_found_by_polling,
    sweeper_delivers_stranded_rows,
    passes_resume_large_outboxes_and_remove_delivered_states,
    a_commit_does_not_wait_for_a_busy_worker,
    instances_share_the_passes_of_one_outbox
);
