//! Outages longer than the retry policy (issue 16): with billing running and 2,000 orders
//! arriving, PostgreSQL — or RabbitMQ — goes away for longer than billing's retries (100 ms,
//! 500 ms) and the pool's acquire timeout, then comes back. The process lives, every order is
//! invoiced exactly once, and nothing is in `_error`: the endpoints pause on the transient
//! failures instead of faulting good messages.
//!
//! The outage is a [`TcpProxy`] between billing and the service, cut for
//! `FERRYBUS_OUTAGE_SECS` seconds (15 by default, to keep CI short; the 60 s with
//! `FERRYBUS_OUTAGE_SECS=60`). The shared services stay up for every other test. The sleep of
//! the outage is the outage itself, not a synchronization.

use std::collections::HashSet;
use std::time::Duration;

use example_billing::Billing;
use example_contracts::OrderPlaced;
use ferrybus::rabbitmq::Event;
use ferrybus::{Publish, SendOptions};
use ferrybus_e2e::{
    broker_socket, database_socket, database_url, eventually, order, start_bus, TcpProxy, TestEnv,
};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tokio::sync::broadcast;
use uuid::Uuid;

const ORDERS: usize = 2_000;
/// Generous: after the outage, pools, the transport and the outbox reconnect with back-off, and
/// 2,000 orders are worked through on a shared 2-core machine.
const RECOVERY: Duration = Duration::from_secs(300);

fn outage() -> Duration {
    let secs = std::env::var("FERRYBUS_OUTAGE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    Duration::from_secs(secs)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cut {
    Database,
    Broker,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_outage_longer_than_the_retries_loses_and_doubles_nothing() {
    outage_test(Cut::Database).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_outage_longer_than_the_retries_loses_and_doubles_nothing() {
    outage_test(Cut::Broker).await;
}

async fn outage_test(cut: Cut) {
    TestEnv::new(match cut {
        Cut::Database => "db_outage",
        Cut::Broker => "mq_outage",
    })
    .await
    .run(|env| async move {
        let upstream = match cut {
            Cut::Database => database_socket(),
            Cut::Broker => broker_socket(),
        };
        let proxy = TcpProxy::start(&upstream, true).await;
        let direct = env.billing_config(false);
        let mut config = direct.clone();
        config.concurrency = 8;
        config.payment_delay = Duration::from_millis(5);
        match cut {
            Cut::Database => config.database_url = proxy.url(&database_url()),
            Cut::Broker => config.amqp_url = proxy.amqp_url(),
        }
        let billing = Billing::start(&config).await.expect("billing starts");
        let mut events = billing.bus().events();
        let watcher = tokio::spawn(watch(billing.bus().events()));

        // The orders arrive over several seconds, through a bus of the test's own (not through
        // the proxy): before, during and after the outage.
        let sender = start_bus(&direct, |b| b).await;
        let queue = config.invoice_queue.clone();
        let orders: Vec<OrderPlaced> = (0..ORDERS).map(|_| order("12.00", "TRY")).collect();
        let ids: Vec<Uuid> = orders.iter().map(|o| o.order_id).collect();
        let sending = tokio::spawn(async move {
            for batch in orders.chunks(50) {
                for order in batch {
                    sender
                        .send_with(&format!("queue:{queue}"), order, SendOptions::new())
                        .await
                        .expect("sent");
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            sender.stop().await;
        });

        let schema = config.billing_schema.clone();
        eventually("the first invoices", RECOVERY, || async {
            (invoices(&env, &schema).await >= 100).then_some(())
        })
        .await;
        proxy.cut();
        eprintln!("{cut:?} cut for {:?}", outage());
        tokio::time::sleep(outage()).await;
        assert!(
            invoices(&env, &schema).await < ORDERS as i64,
            "the outage began before the orders were all invoiced"
        );
        proxy.restore();
        eprintln!("{cut:?} restored");
        sending.await.expect("every order was sent");

        eventually("every order to be invoiced", RECOVERY, || async {
            (invoices(&env, &schema).await >= ORDERS as i64).then_some(())
        })
        .await;
        // Exactly once: one invoice per order, no stray ones; nothing in the error queues.
        let (rows, distinct) = invoice_counts(&env, &schema, &ids).await;
        assert_eq!(rows, ORDERS as i64, "one invoice row per order");
        assert_eq!(distinct, ORDERS as i64, "every order invoiced");
        assert_eq!(invoices(&env, &schema).await, ORDERS as i64, "no other invoices");
        for queue in [&config.invoice_queue, &config.payments_queue] {
            let errors = env.probe.queue_count(&format!("{queue}_error")).await.unwrap_or(0);
            assert_eq!(errors, 0, "nothing in {queue}_error");
        }
        // The process lived through it and still consumes.
        assert!(!billing.bus().is_stopped());
        assert!(billing.bus().is_connected());
        let seen = {
            watcher.abort();
            watcher.await.err();
            drain(&mut events)
        };
        if cut == Cut::Database {
            assert!(
                seen.iter().any(|e| matches!(e, Event::EndpointPaused { cause, .. } if cause == "transient:storage")),
                "the invoice endpoint paused for the database: {:?}",
                seen.iter().filter(|e| !matches!(e, Event::Consumed { .. })).collect::<Vec<_>>()
            );
        }
        billing.stop().await;
    })
    .await;
}

/// Logs pauses and resumptions as they happen (for the by-hand run).
async fn watch(mut events: broadcast::Receiver<Event>) {
    while let Ok(event) = events.recv().await {
        if matches!(
            event,
            Event::EndpointPaused { .. }
                | Event::EndpointResumed { .. }
                | Event::Disconnected { .. }
                | Event::Reconnected { .. }
        ) {
            eprintln!("{event:?}");
        }
    }
}

fn drain(events: &mut broadcast::Receiver<Event>) -> Vec<Event> {
    let mut seen = Vec::new();
    loop {
        match events.try_recv() {
            Ok(event) => seen.push(event),
            Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => return seen,
        }
    }
}

async fn invoices(env: &TestEnv, schema: &str) -> i64 {
    let row = env
        .db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT count(*) AS n FROM \"{schema}\".invoices"),
        ))
        .await
        .expect("count")
        .expect("a row");
    row.try_get("", "n").expect("n")
}

async fn invoice_counts(env: &TestEnv, schema: &str, ids: &[Uuid]) -> (i64, i64) {
    let ids: HashSet<Uuid> = ids.iter().copied().collect();
    let rows = env
        .db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT order_id FROM \"{schema}\".invoices"),
        ))
        .await
        .expect("invoices");
    let mut distinct = HashSet::new();
    let mut matching = 0;
    for row in rows {
        let id: Uuid = row.try_get("", "order_id").expect("order_id");
        if ids.contains(&id) {
            matching += 1;
            distinct.insert(id);
        }
    }
    (matching, distinct.len() as i64)
}
