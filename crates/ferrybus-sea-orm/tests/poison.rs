//! A poison entry — one the broker always refuses — neither stops the sweeper nor the relay for
//! the entries behind it (real RabbitMQ and PostgreSQL). The broker refuses for real: the
//! destination's exchange is declared beforehand as `topic`, and the publisher's `fanout`
//! declare fails with `PRECONDITION_FAILED`.
//!
//! This binary owns the global meter provider (the set-aside counter and the delivery errors are
//! read from it), so it holds this one test.

mod common;

use std::time::Duration;

use common::TestDb;
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_sea_orm::status::{self, Windows};
use ferrybus_testing::{amqp_url, eventually, unique, Probe, Shape, WAIT};
use lapin::options::ExchangeDeclareOptions;
use lapin::types::FieldTable;
use lapin::{ConnectionProperties, ExchangeKind};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use uuid::Uuid;

/// A consumer-outbox entry nobody is sending: an inbox row consumed `minutes_ago`, not
/// delivered, and one message of it for exchange `exchange`. Returns its message id.
async fn strand(tdb: &TestDb, minutes_ago: i64, exchange: &str) -> Uuid {
    let (message_id, consumer_id) = (Uuid::new_v4(), Uuid::new_v4());
    let consumed = Some(chrono::Utc::now() - chrono::Duration::minutes(minutes_ago));
    let inbox = format!(
        "INSERT INTO {} (message_id, consumer_id, lock_id, received, receive_count, consumed) \
         VALUES ($1, $2, $3, $4, 0, $4)",
        tdb.t("inbox")
    );
    tdb.db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            inbox,
            [
                message_id.into(),
                consumer_id.into(),
                Uuid::new_v4().into(),
                tdb.ts(consumed),
            ],
        ))
        .await
        .unwrap();
    let message = format!(
        "INSERT INTO {} (sent_time, inbox_message_id, inbox_consumer_id, message_id, content_type, \
         message_type, body, destination_address) VALUES (now(), $1, $2, $3, \
         'application/vnd.masstransit+json', 'urn:message:Poison.Contracts:Step', $4, $5)",
        tdb.t("message")
    );
    let body = format!(
        "{{\"messageId\": \"{message_id}\", \"messageType\": [\"urn:message:Poison.Contracts:Step\"], \"message\": {{}}}}"
    );
    tdb.db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            message,
            [
                message_id.into(),
                consumer_id.into(),
                Uuid::new_v4().into(),
                body.into(),
                format!("rabbitmq://localhost/{exchange}").into(),
            ],
        ))
        .await
        .unwrap();
    message_id
}

/// The sum of counter `name` over the data points whose labels include `label` (if given).
fn counted(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
    name: &str,
    label: Option<(&str, &str)>,
) -> u64 {
    provider.force_flush().unwrap();
    let mut total = 0;
    let Some(last) = exporter.get_finished_metrics().unwrap().pop() else {
        return 0;
    };
    for scope in last.scope_metrics() {
        for metric in scope.metrics().filter(|m| m.name() == name) {
            if let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() {
                for point in sum.data_points() {
                    let matches = label.is_none_or(|(key, value)| {
                        point
                            .attributes()
                            .any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
                    });
                    if matches {
                        total += point.value();
                    }
                }
            }
        }
    }
    total
}

/// The oldest stranded entry is refused by the broker for good; five younger ones are fine. The
/// good ones go out; the bad one is tried `send_attempts` times with back-off, then set aside
/// (counted, listed by `outbox status`) and left alone; an entry stranded after that is swept
/// too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_entry_does_not_stop_the_sweeper() {
    ferrybus_testing::init_tracing();
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    opentelemetry::global::set_meter_provider(provider.clone());

    let tdb = TestDb::new(Shape::Snake).await;
    let probe = Probe::connect(&amqp_url()).await;
    let bad = unique("poison-bad");
    let good = unique("poison-good");
    probe.track(&[], &[&bad, &good]);
    let connection = lapin::Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .exchange_declare(
            bad.as_str().into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "".into()).await;
    let collected = probe.bind_probe(&good).await;

    let poison = strand(&tdb, 10, &bad).await;
    for _ in 0..5 {
        strand(&tdb, 9, &good).await;
    }
    let storage = tdb
        .storage()
        .await
        .sweep_after(Some(Duration::from_millis(100)))
        .delivery_backoff(Duration::from_millis(100), Duration::from_millis(200))
        .send_attempts(3)
        .inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .start()
        .await
        .unwrap();

    eventually("the good entries are swept", WAIT, || async {
        (probe.queue_count(&collected).await == Some(5)).then_some(())
    })
    .await;
    eventually("the poison entry is set aside", WAIT, || async {
        let set_aside = counted(
            &provider,
            &exporter,
            "ferrybus.outbox.set_aside",
            Some(("ferrybus.outbox", "consumer")),
        );
        (set_aside == 1).then_some(())
    })
    .await;
    let errors = || {
        counted(
            &provider,
            &exporter,
            "messaging.masstransit.outbox.delivery.errors",
            None,
        )
    };
    assert_eq!(errors(), 3, "tried send_attempts times");

    // Set aside, it blocks nothing: an entry stranded now is swept, the poison is not tried.
    strand(&tdb, 8, &good).await;
    eventually("a later entry is swept too", WAIT, || async {
        (probe.queue_count(&collected).await == Some(6)).then_some(())
    })
    .await;
    assert_eq!(errors(), 3, "not tried again while set aside");

    // The operator sees it: stranded, listed first.
    let windows = Windows::default().stranded_after(Duration::from_secs(60));
    let seen = status::outbox_status_with(&tdb.db, &tdb.tables(), windows)
        .await
        .unwrap();
    assert_eq!(seen.consumer_outbox.stranded, 1);
    let listed = &seen.consumer_outbox.stranded_entries;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].message_id, listed[0].messages), (poison, 1));
    bus.stop().await;
    assert_eq!(tdb.inbox_row(poison).await, Some((true, false, 0)), "kept");
    probe.cleanup().await;
}
