//! billing's pools do not ping a connection before lending it (`test_before_acquire(false)`):
//! when the server closes every pooled connection, the next orders are still invoiced (a
//! statement that fails on a closed connection is retried on a fresh one), once each, and none
//! goes to the error queue.

#![allow(missing_docs)]

use std::collections::HashMap;

use example_billing::{Billing, Config};
use example_contracts::OrderPlaced;
use ferrybus::address::HostAddress;
use ferrybus::outgoing::MessageFactory;
use ferrybus::outgoing::MessageOrigin;
use ferrybus::SendOptions;
use ferrybus_testing::{amqp_url, database_url, eventually, mt_properties, unique, Probe, WAIT};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use uuid::Uuid;

/// `url` with `application_name=name` (sqlx reads it from the query string).
fn with_application_name(url: &str, name: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={name}")
}

async fn count(db: &DatabaseConnection, sql: String) -> i64 {
    db.query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .expect("count")
        .expect("a row")
        .try_get::<i64>("", "n")
        .expect("n")
}

async fn publish(probe: &Probe, queue: &str, order: &OrderPlaced) {
    let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
    let message = factory
        .publish(order, &MessageOrigin::default(), SendOptions::new())
        .unwrap();
    let properties = mt_properties(&message.message_id.to_string());
    probe.publish("", queue, &message.body, properties).await;
}

/// Waits until `order` has its invoice and its payment row (both written in the inbox
/// transaction, after the gateway's charge on the gateway's own pool).
async fn completed(admin: &DatabaseConnection, schema: &str, order: &OrderPlaced) {
    let sql = format!(
        "SELECT count(*) AS n FROM \"{schema}\".invoices i JOIN \"{schema}\".payments p \
         ON p.order_id = i.order_id WHERE i.order_id = '{}'",
        order.order_id
    );
    eventually("the order is invoiced", WAIT, || {
        let sql = sql.clone();
        async move { (count(admin, sql).await == 1).then_some(()) }
    })
    .await;
}

fn order() -> OrderPlaced {
    OrderPlaced {
        order_id: Uuid::now_v7(),
        total: "25.00".parse().unwrap(),
        currency: "TRY".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_complete_after_the_server_closed_every_pooled_connection() {
    let id = unique("pool").replace('-', "_");
    let app_name = format!("ferrybus_{id}");
    let env: HashMap<&str, String> = HashMap::from([
        (
            "DATABASE_URL",
            with_application_name(&database_url(), &app_name),
        ),
        ("AMQP_URL", amqp_url()),
        ("BILLING_SCHEMA", format!("{id}_billing")),
        ("FERRYBUS_SCHEMA", format!("{id}_messaging")),
        ("BILLING_INVOICE_QUEUE", unique("pool-invoice")),
        ("BILLING_PAYMENTS_QUEUE", unique("pool-payments")),
        ("BILLING_BIND", "0".to_owned()),
        ("PAYMENT_DELAY_MS", "0".to_owned()),
    ]);
    let config = Config::from_lookup(|name| env.get(name).cloned()).expect("config");
    let admin = Database::connect(database_url()).await.expect("admin");
    let probe = Probe::connect(&amqp_url()).await;
    probe.track_endpoint(&config.invoice_queue);
    probe.track_endpoint(&config.payments_queue);
    let billing = Billing::start(&config).await.expect("billing starts");

    let first = order();
    publish(&probe, &config.invoice_queue, &first).await;
    completed(&admin, &config.billing_schema, &first).await;

    // The server closes every connection of billing's pools (service and gateway).
    let terminated = count(
        &admin,
        format!(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n \
             FROM pg_stat_activity WHERE application_name = '{app_name}'"
        ),
    )
    .await;
    assert!(terminated > 0, "billing had pooled connections to close");

    let next: Vec<OrderPlaced> = (0..5).map(|_| order()).collect();
    for order in &next {
        publish(&probe, &config.invoice_queue, order).await;
    }
    for order in &next {
        completed(&admin, &config.billing_schema, order).await;
    }
    let schema = &config.billing_schema;
    assert_eq!(
        count(
            &admin,
            format!("SELECT count(*) AS n FROM \"{schema}\".invoices")
        )
        .await,
        6,
        "one invoice per order"
    );
    assert_eq!(
        probe
            .queue_count(&format!("{}_error", config.invoice_queue))
            .await
            .unwrap_or(0),
        0,
        "no order went to the error queue"
    );

    billing.stop().await;
    for schema in [&config.billing_schema, config.tables.schema_name()] {
        let _ = admin
            .execute_unprepared(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await;
    }
    probe.cleanup().await;
}
