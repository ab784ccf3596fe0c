//! Two `order-saga` processes on one database and one queue: many `OrderItemAdded` for one
//! order at once, some sent twice with the same MessageId, end with the exact count and one
//! `OrderCompleted` per order.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use example_contracts::{InvoiceCreated, OrderItemAdded, OrderShipped, OrderSubmitted};
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::{Publish, SendOptions};
use ferrybus_testing::{amqp_url, database_url, eventually, unique, Probe, WAIT};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use uuid::Uuid;

const ORDER_SAGA: &str = env!("CARGO_BIN_EXE_order-saga");
const ORDERS: usize = 3;
const ITEMS: usize = 40;
const DUPLICATES: usize = 10;

struct Process {
    child: Child,
    log: Arc<Mutex<String>>,
}

async fn spawn(env: &[(&str, &str)]) -> Process {
    let mut command = Command::new(ORDER_SAGA);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info,sqlx=warn,ferrybus::saga=debug")
        .env("DATABASE_URL", database_url())
        .env("AMQP_URL", amqp_url())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("order-saga runs");
    let log = Arc::new(Mutex::new(String::new()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let sink = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let running = log.clone();
    eventually("order-saga to run", WAIT, || {
        let log = running.lock().unwrap().clone();
        async move { log.contains("order-saga is running").then_some(()) }
    })
    .await;
    Process { child, log }
}

impl Process {
    async fn stop(mut self) -> String {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let status = tokio::time::timeout(Duration::from_secs(40), self.child.wait())
            .await
            .expect("order-saga exits")
            .expect("exit status");
        let log = self.log.lock().unwrap().clone();
        assert!(status.success(), "exit {status}:\n{log}");
        log
    }
}

async fn instance(db: &DatabaseConnection, schema: &str, id: Uuid) -> Option<(String, i32)> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "SELECT current_state, item_count FROM \"{schema}\".order_state WHERE correlation_id = $1"
            ),
            [id.into()],
        ))
        .await
        .ok()??;
    Some((
        row.try_get("", "current_state").ok()?,
        row.try_get::<Option<i32>>("", "item_count")
            .ok()?
            .unwrap_or(0),
    ))
}

async fn wait_state(db: &DatabaseConnection, schema: &str, id: Uuid, state: &str, items: i32) {
    eventually(
        &format!("order {id} in {state} with {items} items"),
        WAIT,
        || async {
            instance(db, schema, id)
                .await
                .filter(|(s, n)| s == state && *n == items)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_count_every_item_once_and_complete_each_order_once() {
    two_processes("optimistic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pessimistic_processes_count_every_item_once_and_complete_each_order_once() {
    two_processes("pessimistic").await;
}

async fn two_processes(locking: &str) {
    let id = unique("saga").replace('-', "_");
    let saga_schema = format!("{id}_orders");
    let messaging_schema = format!("{id}_messaging");
    let queue = unique("order-state");
    let probe = Probe::connect(&amqp_url()).await;
    probe.track_endpoint(&queue);
    let completed_queue = probe.bind_probe("Bookstore.Contracts:OrderCompleted").await;
    let db = Database::connect(database_url()).await.expect("database");

    let env = [
        ("ORDER_SAGA_QUEUE", queue.as_str()),
        ("ORDER_SAGA_SCHEMA", saga_schema.as_str()),
        ("FERRYBUS_SCHEMA", messaging_schema.as_str()),
        ("ORDER_SAGA_BIND", "0"),
        ("SAGA_CONCURRENCY", "8"),
        ("SAGA_LOCKING", locking),
    ];
    let (first, second) = tokio::join!(spawn(&env), spawn(&env));

    let sender = RabbitMqBus::builder(&amqp_url())
        .start()
        .await
        .expect("sender");
    let address = format!("queue:{queue}");
    let orders: Vec<Uuid> = (0..ORDERS).map(|_| Uuid::now_v7()).collect();
    for order_id in &orders {
        let submitted = OrderSubmitted {
            order_id: *order_id,
            total: "30.00".parse().unwrap(),
            currency: "EUR".into(),
        };
        sender.send(&address, &submitted).await.expect("sent");
    }
    for order_id in &orders {
        wait_state(&db, &saga_schema, *order_id, "Submitted", 0).await;
    }

    // Every item of every order at once; the first DUPLICATES of each order sent twice.
    let sends = orders.iter().flat_map(|order_id| {
        (0..ITEMS).map(|n| {
            let sender = &sender;
            let address = &address;
            let item = OrderItemAdded {
                order_id: *order_id,
                sku: format!("SKU-{n}"),
            };
            async move {
                let message_id = Uuid::now_v7();
                let copies = if n < DUPLICATES { 2 } else { 1 };
                for _ in 0..copies {
                    sender
                        .send_with(address, &item, SendOptions::new().message_id(message_id))
                        .await
                        .expect("sent");
                }
            }
        })
    });
    futures::future::join_all(sends).await;
    for order_id in &orders {
        wait_state(&db, &saga_schema, *order_id, "Submitted", ITEMS as i32).await;
    }

    let mut invoices = HashMap::new();
    for order_id in &orders {
        let invoice_id = Uuid::now_v7();
        invoices.insert(*order_id, invoice_id);
        let invoice = InvoiceCreated {
            invoice_id,
            order_id: *order_id,
            amount: "30.00".parse().unwrap(),
            currency: "EUR".into(),
        };
        sender.send(&address, &invoice).await.expect("sent");
    }
    for order_id in &orders {
        wait_state(&db, &saga_schema, *order_id, "Invoiced", ITEMS as i32).await;
        sender
            .send(
                &address,
                &OrderShipped {
                    order_id: *order_id,
                },
            )
            .await
            .expect("sent");
    }
    for order_id in &orders {
        wait_state(&db, &saga_schema, *order_id, "Completed", ITEMS as i32).await;
    }
    sender.stop().await;

    // Stop both: in-flight events finish; whatever they had is consumed or still queued.
    let (first, second) = tokio::join!(first.stop(), second.stop());
    let mode = if locking == "pessimistic" {
        "locking=Pessimistic"
    } else {
        "locking=Optimistic"
    };
    for (name, log) in [("first", &first), ("second", &second)] {
        assert!(log.contains(mode), "the {name} process runs {mode}:\n{log}");
        assert!(
            log.contains("event applied"),
            "the {name} process applied events too:\n{log}"
        );
    }
    assert!(
        format!("{first}{second}").contains("duplicate message acknowledged"),
        "the duplicates reached the inbox"
    );
    assert_eq!(
        probe.queue_count(&queue).await,
        Some(0),
        "everything consumed"
    );
    assert_eq!(
        probe
            .queue_count(&format!("{queue}_error"))
            .await
            .unwrap_or(0),
        0,
        "nothing faulted"
    );
    for order_id in &orders {
        assert_eq!(
            instance(&db, &saga_schema, *order_id).await,
            Some(("Completed".to_owned(), ITEMS as i32)),
            "exact count for {order_id}"
        );
    }

    // One OrderCompleted per order, with its invoice and count.
    let seen: Arc<Mutex<HashMap<Uuid, usize>>> = Arc::default();
    eventually("an OrderCompleted for every order", WAIT, || {
        let probe = &probe;
        let completed_queue = &completed_queue;
        let orders = &orders;
        let invoices = &invoices;
        let seen = seen.clone();
        async move {
            while let Some(message) = probe.get(completed_queue).await {
                let envelope: serde_json::Value =
                    serde_json::from_slice(&message.delivery.data).unwrap();
                let body = &envelope["message"];
                let Some(order_id) = body["orderId"]
                    .as_str()
                    .and_then(|s| Uuid::parse_str(s).ok())
                else {
                    continue;
                };
                if !orders.contains(&order_id) {
                    continue; // another test's order
                }
                assert_eq!(body["itemCount"], ITEMS as u64);
                assert_eq!(body["invoiceId"], invoices[&order_id].to_string());
                *seen.lock().unwrap().entry(order_id).or_default() += 1;
            }
            let len = seen.lock().unwrap().len();
            (len == orders.len()).then_some(())
        }
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.values().all(|n| *n == 1),
        "one OrderCompleted per order: {seen:?}"
    );

    for schema in [&saga_schema, &messaging_schema] {
        let _ = db
            .execute_unprepared(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await;
    }
    probe.cleanup().await;
}
