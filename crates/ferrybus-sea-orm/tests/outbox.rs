//! Bus outbox, delivery service and sweeper against a real PostgreSQL.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{eventually, InvoiceCreated, OrderPlaced, RecordingSink, Shape, TestDb};
use ferrybus_core::{Envelope, HostAddress, MessageFactory, SharedSink};
use ferrybus_sea_orm::testing::{pending_bus_outbox, wait_until_outbox_drained};
use ferrybus_sea_orm::{BusOutbox, DeliveryConfig, OutboxDeliveryService};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use uuid::Uuid;

fn outbox(tdb: &TestDb) -> BusOutbox {
    let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
    BusOutbox::new(factory, tdb.storage.clone())
}

fn service(tdb: &TestDb, sink: &RecordingSink, poll: Duration) -> OutboxDeliveryService {
    let config = DeliveryConfig::new(tdb.storage.clone())
        .poll_interval(poll)
        .workers(2)
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(400))
        .sweep_after(None);
    let sink: SharedSink = Arc::new(sink.clone());
    OutboxDeliveryService::new(tdb.db.clone(), sink, config)
}

/// Rows reach the sink only after commit, quickly (NOTIFY; the poll interval is 60 s), in order.
async fn delivered_after_commit_through_notify(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = RecordingSink::default();
    let handle = service(&tdb, &sink, Duration::from_secs(60)).spawn();
    tokio::time::sleep(Duration::from_millis(200)).await; // let the listener start
    let outbox = outbox(&tdb);
    let order_id = Uuid::new_v4();
    let txn = tdb.db.begin().await.unwrap();
    let mut ids = Vec::new();
    for seq in 1..=5 {
        ids.push(
            outbox
                .publish(&txn, &InvoiceCreated { order_id, seq })
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(sink.messages().is_empty(), "nothing leaves before commit");
    assert_eq!(tdb.rows("state").await, 0, "uncommitted rows are invisible");
    let committed = Instant::now();
    txn.commit().await.unwrap();
    eventually("delivery", Duration::from_secs(5), || async {
        sink.messages().len() == 5
    })
    .await;
    assert!(
        committed.elapsed() < Duration::from_secs(2),
        "woken by NOTIFY, not the 60 s poll"
    );
    let delivered: Vec<Uuid> = sink.messages().iter().map(|m| m.message_id).collect();
    assert_eq!(delivered, ids, "one outbox, delivered in order");
    let first = &sink.messages()[0];
    assert_eq!(
        first.destination_address,
        "rabbitmq://localhost/Billing.Contracts:InvoiceCreated"
    );
    assert_eq!(first.publish_bindings, ["Billing.Contracts:IBillingEvent"]);
    let envelope = Envelope::from_slice(&first.body).unwrap();
    assert_eq!(envelope.message["seq"], 1);
    wait_until_outbox_drained(&tdb.db, &tdb.storage, Duration::from_secs(5))
        .await
        .unwrap();
    handle.stop().await;
}

/// A rolled-back transaction sends nothing, ever.
async fn rollback_sends_nothing(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = RecordingSink::default();
    let handle = service(&tdb, &sink, Duration::from_millis(50)).spawn();
    let txn = tdb.db.begin().await.unwrap();
    outbox(&tdb)
        .publish(
            &txn,
            &OrderPlaced {
                order_id: Uuid::new_v4(),
            },
        )
        .await
        .unwrap();
    txn.rollback().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(sink.messages().is_empty());
    assert_eq!(sink.attempts(), 0);
    assert_eq!(pending_bus_outbox(&tdb.db, &tdb.storage).await.unwrap(), 0);
    handle.stop().await;
}

/// A failing sink: rows stay, attempts back off (no spinning), and go out on recovery.
async fn failing_sink_backs_off_then_delivers(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = RecordingSink::default();
    sink.set_failing(true);
    let outbox = outbox(&tdb);
    for _ in 0..3 {
        let txn = tdb.db.begin().await.unwrap();
        outbox
            .publish(
                &txn,
                &OrderPlaced {
                    order_id: Uuid::new_v4(),
                },
            )
            .await
            .unwrap();
        outbox
            .publish(
                &txn,
                &OrderPlaced {
                    order_id: Uuid::new_v4(),
                },
            )
            .await
            .unwrap();
        txn.commit().await.unwrap();
    }
    let handle = service(&tdb, &sink, Duration::from_millis(20)).spawn();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let attempts = sink.attempts();
    // Per outbox: first message only, at 0, 50, 100, 200, 400, 400… ms → at most ~7 in 1.5 s.
    assert!(attempts >= 3, "every outbox was tried ({attempts})");
    assert!(
        attempts <= 3 * 8,
        "backed off instead of spinning ({attempts} attempts)"
    );
    assert_eq!(tdb.rows("message").await, 6, "nothing lost");
    sink.set_failing(false);
    wait_until_outbox_drained(&tdb.db, &tdb.storage, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(sink.messages().len(), 6);
    handle.stop().await;
}

/// A send failure in the middle of an outbox keeps the sent part sent and the order intact.
async fn partial_failure_resumes_in_order(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let sink = RecordingSink::default();
    let outbox = outbox(&tdb);
    let txn = tdb.db.begin().await.unwrap();
    let order_id = Uuid::new_v4();
    let mut ids = Vec::new();
    for seq in 1..=4 {
        ids.push(
            outbox
                .publish(&txn, &InvoiceCreated { order_id, seq })
                .await
                .unwrap(),
        );
    }
    txn.commit().await.unwrap();
    let service = service(&tdb, &sink, Duration::from_millis(20));
    sink.fail_next.store(0, std::sync::atomic::Ordering::SeqCst);
    // Fail the third send: make the sink fail after two deliveries.
    let failing_after_two = FailAfter::new(sink.clone(), 2);
    let config = DeliveryConfig::new(tdb.storage.clone()).sweep_after(None);
    let partial = OutboxDeliveryService::new(tdb.db.clone(), Arc::new(failing_after_two), config);
    assert_eq!(partial.deliver_once().await.unwrap(), 2);
    assert_eq!(tdb.rows("message").await, 2, "sent rows deleted");
    assert_eq!(tdb.rows("state").await, 1, "outbox kept with its progress");
    assert_eq!(service.deliver_once().await.unwrap(), 2);
    let delivered: Vec<Uuid> = sink.messages().iter().map(|m| m.message_id).collect();
    assert_eq!(delivered, ids);
    assert_eq!(pending_bus_outbox(&tdb.db, &tdb.storage).await.unwrap(), 0);
}

struct FailAfter {
    sink: RecordingSink,
    remaining: std::sync::atomic::AtomicUsize,
}

impl FailAfter {
    fn new(sink: RecordingSink, successes: usize) -> Self {
        Self {
            sink,
            remaining: successes.into(),
        }
    }
}

#[async_trait::async_trait]
impl ferrybus_core::MessageSink for FailAfter {
    async fn deliver(
        &self,
        message: ferrybus_core::OutgoingMessage,
    ) -> Result<(), ferrybus_core::BoxError> {
        use std::sync::atomic::Ordering;
        if self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            return Err("nack".into());
        }
        ferrybus_core::MessageSink::deliver(&self.sink, message).await
    }
}

/// Rows a .NET service wrote (its column formats, an envelope from a real MassTransit
/// producer) are delivered too.
async fn delivers_dotnet_rows(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let body = include_str!("../../../fixtures/envelopes/04-v8.0.7-stj-publish-rabbitmq.json");
    let outbox_id = Uuid::new_v4();
    let message_id = Uuid::parse_str("7c740000-a5be-c025-8e9a-08dabc788911").unwrap();
    let c = |n: &str| tdb.c(n);
    let now = chrono::Utc::now();
    let ts = |v: chrono::DateTime<chrono::Utc>| -> sea_orm::Value {
        match tdb.storage.tables().timestamp_type() {
            ferrybus_sea_orm::TimestampType::WithTimeZone => v.into(),
            ferrybus_sea_orm::TimestampType::WithoutTimeZone => v.naive_utc().into(),
        }
    };
    let insert_state = format!(
        "INSERT INTO {} ({}, {}, {}) VALUES ($1, '00000000-0000-0000-0000-000000000000', $2)",
        tdb.t("state"),
        c("OutboxId"),
        c("LockId"),
        c("Created")
    );
    tdb.db
        .execute(Statement::from_sql_and_values(
            DbBackend::Postgres,
            insert_state,
            [outbox_id.into(), ts(now)],
        ))
        .await
        .unwrap();
    let insert_message = format!(
        "INSERT INTO {} ({}, {}, {}, {}, {}, {}, {}, {}, {}, {}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        tdb.t("message"), c("OutboxId"), c("SentTime"), c("Headers"), c("Properties"), c("MessageId"),
        c("ContentType"), c("MessageType"), c("Body"), c("ConversationId"), c("DestinationAddress")
    );
    let values = [
        outbox_id.into(),
        ts(now),
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
        .execute(Statement::from_sql_and_values(
            DbBackend::Postgres,
            insert_message,
            values,
        ))
        .await
        .unwrap();
    let sink = RecordingSink::default();
    assert_eq!(
        service(&tdb, &sink, Duration::from_secs(1))
            .deliver_once()
            .await
            .unwrap(),
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
    assert_eq!(pending_bus_outbox(&tdb.db, &tdb.storage).await.unwrap(), 0);
}

/// Our rows have .NET's column formats: Properties with RMQ-Exchange, Headers object or NULL,
/// URNs joined with ';', a v8 envelope body, LockId all-zero, inbox ids NULL.
async fn rows_are_valid_for_dotnet(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let txn = tdb.db.begin().await.unwrap();
    let options = ferrybus_core::SendOptions::new().header("Tenant", "acme");
    let id = outbox(&tdb)
        .publish_with(
            &txn,
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
        .query_one(Statement::from_sql_and_values(
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

/// The sweeper delivers consumer-outbox rows whose inbound message went to the error queue.
async fn sweeper_delivers_stranded_rows(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let (message_id, consumer_id) = (Uuid::new_v4(), Uuid::new_v4());
    let c = |n: &str| tdb.c(n);
    let old = chrono::Utc::now() - chrono::Duration::minutes(10);
    let ts: sea_orm::Value = match tdb.storage.tables().timestamp_type() {
        ferrybus_sea_orm::TimestampType::WithTimeZone => old.into(),
        ferrybus_sea_orm::TimestampType::WithoutTimeZone => old.naive_utc().into(),
    };
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
        ts,
    ];
    tdb.db
        .execute(Statement::from_sql_and_values(
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
            .execute(Statement::from_sql_and_values(
                DbBackend::Postgres,
                insert,
                values,
            ))
            .await
            .unwrap();
    }
    let sink = RecordingSink::default();
    let service = service(&tdb, &sink, Duration::from_secs(1));
    assert_eq!(
        service
            .sweep_once(Some(Duration::from_secs(3600)))
            .await
            .unwrap(),
        0,
        "too young"
    );
    assert_eq!(
        service
            .sweep_once(Some(Duration::from_secs(60)))
            .await
            .unwrap(),
        1
    );
    let bodies: Vec<String> = sink
        .messages()
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    assert!(bodies[0].contains("\"seq\": 1") && bodies[1].contains("\"seq\": 2"));
    assert_eq!(tdb.rows("message").await, 0);
    assert_eq!(tdb.inbox_row(message_id).await, Some((true, true, 0)));
}

macro_rules! on_shapes {
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
            async fn canonical_legacy() { super::$test(Shape::CanonicalLegacy).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn bookworm_legacy() { super::$test(Shape::BookwormLegacy).await }
        }
    )*};
}

/// Opt-in pipelining keeps the order within an outbox, across several outboxes at once.
#[tokio::test]
async fn pipelined_delivery_keeps_each_outbox_in_order() {
    let tdb = TestDb::new(Shape::Snake).await;
    let sink = RecordingSink::default();
    let outbox = outbox(&tdb);
    let mut expected = Vec::new();
    for _ in 0..4 {
        let txn = tdb.db.begin().await.unwrap();
        let order_id = Uuid::new_v4();
        let mut ids = Vec::new();
        for seq in 1..=10 {
            ids.push(
                outbox
                    .publish(&txn, &InvoiceCreated { order_id, seq })
                    .await
                    .unwrap(),
            );
        }
        txn.commit().await.unwrap();
        expected.push(ids);
    }
    let config = DeliveryConfig::new(tdb.storage.clone())
        .poll_interval(Duration::from_millis(50))
        .pipelined(true);
    let sink_arc: SharedSink = Arc::new(sink.clone());
    let handle = OutboxDeliveryService::new(tdb.db.clone(), sink_arc, config).spawn();
    wait_until_outbox_drained(&tdb.db, &tdb.storage, Duration::from_secs(10))
        .await
        .unwrap();
    handle.stop().await;
    let delivered: Vec<Uuid> = sink.messages().iter().map(|m| m.message_id).collect();
    assert_eq!(delivered.len(), 40);
    for ids in expected {
        let positions: Vec<usize> = ids
            .iter()
            .map(|id| delivered.iter().position(|d| d == id).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    }
}

on_shapes!(
    delivered_after_commit_through_notify,
    rollback_sends_nothing,
    failing_sink_backs_off_then_delivers,
    partial_failure_resumes_in_order,
    delivers_dotnet_rows,
    rows_are_valid_for_dotnet,
    sweeper_delivers_stranded_rows
);
