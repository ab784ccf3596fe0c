//! The billing binary as a child process, observed from outside: SIGTERM in the middle of a
//! burst (in-flight orders finish and are acknowledged, nothing new is taken, it exits within
//! its stop timeout, nothing done is redelivered), and start-up errors that never print a
//! password, whatever the host list; `/metrics` and `/health/*` served on `BILLING_HTTP_ADDR`.
#![allow(missing_docs)]

use std::process::Stdio;
use std::time::Duration;

use example_contracts::OrderPlaced;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::Publish;
use ferrybus_testing::{amqp_url, database_url, eventually, unique, Probe, WAIT};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use uuid::Uuid;

const BILLING: &str = env!("CARGO_BIN_EXE_billing");

fn billing() -> Command {
    let mut command = Command::new(BILLING);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info,sqlx=warn")
        .env("DATABASE_URL", database_url())
        .env("AMQP_URL", amqp_url())
        // Any free port: tests run side by side.
        .env("BILLING_HTTP_ADDR", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs billing with `env` until it exits (it must fail to start); returns everything it printed.
async fn failed_start(env: &[(&str, &str)]) -> String {
    let mut command = billing();
    command.envs(env.iter().copied());
    let output = tokio::time::timeout(WAIT, command.output())
        .await
        .expect("billing exits")
        .expect("billing runs");
    assert!(!output.status.success(), "billing must not start");
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_errors_never_print_passwords() {
    let cases: [&[(&str, &str)]; 4] = [
        // A host list with a bad entry: the rest of the list used to be printed.
        &[(
            "AMQP_URL",
            "amqp://guest:Hunter2-amqp@127.0.0.1:5672/%2f,amqp://guest:Hunter2-amqp@127.0.0.1:99999/%2f",
        )],
        // One URI with several hosts, none of them reachable.
        &[
            ("AMQP_URL", "amqp://guest:Hunter2-amqp@127.0.0.1:1,127.0.0.1:2/%2f"),
            ("BILLING_CONNECT_TIMEOUT_MS", "1500"),
        ],
        // Mixed vhosts.
        &[("AMQP_URL", "amqp://a:Hunter2-amqp@127.0.0.1/one,amqp://b:Hunter2-amqp@127.0.0.1/two")],
        // A database URL that does not parse.
        &[("DATABASE_URL", "postgres://billing:Hunter2-pg@127.0.0.1:notaport/test")],
    ];
    // Billing creates its schemas before it reaches RabbitMQ: unique ones, dropped at the end.
    let id = unique("pw").replace('-', "_");
    let (billing_schema, messaging_schema) = (format!("{id}_billing"), format!("{id}_messaging"));
    let schemas = [
        ("BILLING_SCHEMA", billing_schema.as_str()),
        ("FERRYBUS_SCHEMA", messaging_schema.as_str()),
    ];
    for env in cases {
        let printed = failed_start(&[&schemas[..], env].concat()).await;
        assert!(
            printed.contains("billing could not start"),
            "it says why: {printed}"
        );
        assert!(
            !printed.contains("Hunter2"),
            "no password in the output of {env:?}:\n{printed}"
        );
    }
    let db = Database::connect(database_url()).await.expect("database");
    for schema in [&billing_schema, &messaging_schema] {
        db.execute_unprepared(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .expect("drop the test's schema");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_burst_finishes_in_flight_orders_and_takes_nothing_new() {
    ferrybus_testing::init_tracing();
    let id = unique("proc").replace('-', "_");
    let billing_schema = format!("{id}_billing");
    let messaging_schema = format!("{id}_messaging");
    let invoice_queue = unique("proc-invoice");
    let payments_queue = unique("proc-payments");
    let probe = Probe::connect(&amqp_url()).await;
    probe.track_endpoint(&invoice_queue);
    probe.track_endpoint(&payments_queue);
    let db = Database::connect(database_url()).await.expect("database");

    let mut command = billing();
    command.envs([
        ("BILLING_SCHEMA", billing_schema.as_str()),
        ("FERRYBUS_SCHEMA", messaging_schema.as_str()),
        ("BILLING_INVOICE_QUEUE", invoice_queue.as_str()),
        ("BILLING_PAYMENTS_QUEUE", payments_queue.as_str()),
        ("BILLING_BIND", "0"),
        ("BILLING_CONCURRENCY", "4"),
        ("PAYMENT_DELAY_MS", "300"),
        ("BILLING_SHUTDOWN_TIMEOUT_MS", "20000"),
    ]);
    let mut child = command.spawn().expect("billing runs");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut log = String::new();
    tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = stdout.next_line().await {
            log.push_str(&line);
            log.push('\n');
            if line.contains("billing is running") {
                return;
            }
        }
        panic!("billing ended before it ran:\n{log}");
    })
    .await
    .unwrap_or_else(|_| panic!("billing did not start"));

    // A burst of orders, then SIGTERM while some are in flight.
    const ORDERS: usize = 200;
    let sender = RabbitMqBus::builder(&amqp_url())
        .start()
        .await
        .expect("sender");
    for _ in 0..ORDERS {
        let order = OrderPlaced {
            order_id: Uuid::now_v7(),
            total: "12.00".parse().unwrap(),
            currency: "TRY".into(),
        };
        sender
            .send(&format!("queue:{invoice_queue}"), &order)
            .await
            .expect("sent");
    }
    sender.stop().await;
    let invoices_sql = format!("SELECT count(*) AS n FROM \"{billing_schema}\".invoices");
    eventually("a few invoices", WAIT, || async {
        count(&db, &invoices_sql).await.filter(|n| *n >= 8)
    })
    .await;
    terminate(&child);

    // It exits, successfully, within its stop timeout (plus the time to close).
    let status = tokio::time::timeout(Duration::from_secs(40), child.wait())
        .await
        .expect("billing exits within its stop timeout")
        .expect("exit status");
    let mut rest = String::new();
    while let Ok(Some(line)) = stdout.next_line().await {
        rest.push_str(&line);
        rest.push('\n');
    }
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await;
    assert!(status.success(), "exit {status}:\n{rest}{stderr}");
    assert!(
        rest.contains("shutting down") && rest.contains("billing stopped"),
        "{rest}"
    );

    // Every order is either invoiced (and acknowledged: not in the queue any more) or still in
    // the queue untouched; none invoiced is left to be redelivered, none charged twice.
    let invoiced = count(&db, &invoices_sql).await.unwrap();
    assert!(
        invoiced < ORDERS as i64,
        "stopped mid-burst ({invoiced} invoiced)"
    );
    let ready = eventually("the queue to settle", WAIT, || async {
        probe.queue_count(&invoice_queue).await
    })
    .await;
    assert_eq!(
        i64::from(ready) + invoiced,
        ORDERS as i64,
        "{invoiced} invoiced + {ready} waiting: nothing lost, nothing done left behind"
    );
    let mut waiting = 0;
    while let Some(message) = probe.get(&invoice_queue).await {
        let envelope: serde_json::Value = serde_json::from_slice(&message.delivery.data).unwrap();
        let order_id = Uuid::parse_str(envelope["message"]["orderId"].as_str().unwrap()).unwrap();
        let sql = format!(
            "SELECT count(*) AS n FROM \"{billing_schema}\".invoices WHERE order_id = '{order_id}'"
        );
        assert_eq!(
            count(&db, &sql).await,
            Some(0),
            "order {order_id} was invoiced, yet it waits to be redelivered"
        );
        waiting += 1;
    }
    assert_eq!(waiting, ready);
    let twice =
        format!("SELECT count(*) AS n FROM \"{billing_schema}\".charges WHERE attempts > 1");
    assert_eq!(
        count(&db, &twice).await,
        Some(0),
        "no order was charged twice"
    );
    let errors = probe.queue_count(&format!("{invoice_queue}_error")).await;
    assert_eq!(
        errors.unwrap_or(0),
        0,
        "nothing faulted (the error queue is declared lazily)"
    );

    for schema in [&billing_schema, &messaging_schema] {
        let _ = db
            .execute_unprepared(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await;
    }
    probe.cleanup().await;
}

async fn count(db: &sea_orm::DatabaseConnection, sql: &str) -> Option<i64> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, sql.to_owned()))
        .await
        .ok()??;
    row.try_get::<i64>("", "n").ok()
}

fn terminate(child: &Child) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// `GET path` on `addr`: the status code and the body.
async fn http_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("billing serves HTTP");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {response}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_metrics_and_health_on_billing_http_addr() {
    let id = unique("http").replace('-', "_");
    let billing_schema = format!("{id}_billing");
    let messaging_schema = format!("{id}_messaging");
    let invoice_queue = unique("http-invoice");
    let payments_queue = unique("http-payments");
    let probe = Probe::connect(&amqp_url()).await;
    probe.track_endpoint(&invoice_queue);
    probe.track_endpoint(&payments_queue);

    let mut command = billing();
    command.envs([
        ("BILLING_SCHEMA", billing_schema.as_str()),
        ("FERRYBUS_SCHEMA", messaging_schema.as_str()),
        ("BILLING_INVOICE_QUEUE", invoice_queue.as_str()),
        ("BILLING_PAYMENTS_QUEUE", payments_queue.as_str()),
        ("BILLING_BIND", "0"),
    ]);
    let mut child = command.spawn().expect("billing runs");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = tokio::time::timeout(WAIT, async {
        let mut log = String::new();
        while let Ok(Some(line)) = stdout.next_line().await {
            if line.contains("serving /metrics") {
                let addr = line
                    .split_whitespace()
                    .find_map(|field| field.strip_prefix("addr="))
                    .unwrap_or_else(|| panic!("the address is logged: {line}"));
                return addr.to_owned();
            }
            log.push_str(&line);
            log.push('\n');
        }
        panic!("billing ended before it served HTTP:\n{log}");
    })
    .await
    .expect("billing serves HTTP");

    assert_eq!(http_get(&addr, "/health/live").await.0, 200);
    let report = eventually("billing to be ready", WAIT, || async {
        let (status, body) = http_get(&addr, "/health/ready").await;
        (status == 200).then_some(body)
    })
    .await;
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["status"], "Healthy", "{report}");
    let parts: Vec<&str> = report["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        parts.contains(&"broker") && parts.contains(&"database"),
        "{parts:?}"
    );
    assert!(
        parts.contains(&format!("endpoint:{invoice_queue}").as_str()),
        "{parts:?}"
    );
    let (status, metrics) = http_get(&addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("target_info"), "{metrics}");

    terminate(&child);
    let status = tokio::time::timeout(Duration::from_secs(40), child.wait())
        .await
        .expect("billing exits")
        .expect("exit status");
    assert!(status.success(), "exit {status}");
    let db = Database::connect(database_url()).await.expect("database");
    for schema in [&billing_schema, &messaging_schema] {
        let _ = db
            .execute_unprepared(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await;
    }
    probe.cleanup().await;
}
