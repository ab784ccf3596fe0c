//! An interrupted bench run removes the queues, exchanges and schemas it created: SIGTERM while
//! a ferrybus inbox consumer is draining its queue, then the broker and the database are asked
//! whether the run's names still exist.

use std::process::Stdio;
use std::time::Duration;

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStderr, Command};
use tokio::time::timeout;

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

#[tokio::test]
async fn sigterm_removes_the_runs_queues_exchanges_and_schemas() {
    let output = std::env::temp_dir().join(format!(
        "ferrybus-bench-interrupt-{}.json",
        uuid::Uuid::new_v4().simple()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrybus-bench"))
        .args([
            "--scenarios",
            "inbox",
            "--messages",
            "8000",
            "--rounds",
            "2",
        ])
        .arg("--output")
        .arg(&output)
        .env("AMQP_URL", amqp_url())
        .env("DATABASE_URL", database_url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the bench starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped")).lines();

    let run_id = read_until(&mut stderr, "ferrybus-bench run ")
        .await
        .split_whitespace()
        .nth(2)
        .expect("the first line names the run")
        .to_owned();
    // The ferrybus side of the first round: its queue is filled and its service starts.
    read_until(&mut stderr, "inbox-ferrybus-0: pre-filled").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let queue = format!("ferrybus-bench-{run_id}-inbox-ferrybus-0");
    let baseline_queue = format!("ferrybus-bench-{run_id}-inbox-baseline-0");
    let like = format!("ferrybus\\_bench\\_{run_id}\\_%");
    let broker = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("broker");
    let db = sqlx::PgPool::connect(&database_url()).await.expect("db");
    assert!(queue_exists(&broker, &queue).await, "{queue} before");
    assert!(queue_exists(&broker, &baseline_queue).await);
    assert!(exchange_exists(&broker, &queue).await, "endpoint exchange");
    assert_eq!(schemas_like(&db, &like).await, 2, "both sides' schemas");

    let pid = child.id().expect("running").to_string();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(kill.success());
    let rest = tokio::spawn(async move {
        let mut lines = Vec::new();
        while let Ok(Some(line)) = stderr.next_line().await {
            lines.push(line);
        }
        lines
    });
    let status = timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the bench exits within a minute of SIGTERM")
        .expect("wait");
    let lines = rest.await.expect("stderr");
    assert_eq!(status.code(), Some(128 + 15), "stderr: {lines:#?}");
    assert!(
        lines.iter().any(|l| l.starts_with("removed ")),
        "stderr: {lines:#?}"
    );

    assert!(!queue_exists(&broker, &queue).await, "{queue} after");
    assert!(!queue_exists(&broker, &baseline_queue).await);
    assert!(!exchange_exists(&broker, &queue).await);
    assert_eq!(schemas_like(&db, &like).await, 0);
    assert!(!output.exists(), "an interrupted run writes no report");
    let _ = broker.close(200, "done".into()).await;
}

/// Reads stderr lines until one contains `needle` (two minutes at most); returns it.
async fn read_until(lines: &mut tokio::io::Lines<BufReader<ChildStderr>>, needle: &str) -> String {
    let found = timeout(Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.expect("stderr") {
            if line.contains(needle) {
                return line;
            }
        }
        panic!("the bench ended before printing {needle:?}");
    });
    found.await.expect("the bench got there within two minutes")
}

async fn queue_exists(conn: &Connection, queue: &str) -> bool {
    let ch = conn.create_channel().await.expect("channel");
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let exists = ch
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .is_ok();
    let _ = ch.close(200, "done".into()).await;
    exists
}

async fn exchange_exists(conn: &Connection, exchange: &str) -> bool {
    let ch = conn.create_channel().await.expect("channel");
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..ExchangeDeclareOptions::default()
    };
    let exists = ch
        .exchange_declare(
            exchange.into(),
            ExchangeKind::Fanout,
            passive,
            FieldTable::default(),
        )
        .await
        .is_ok();
    let _ = ch.close(200, "done".into()).await;
    exists
}

async fn schemas_like(db: &sqlx::PgPool, like: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE $1")
        .bind(like)
        .fetch_one(db)
        .await
        .expect("count schemas")
}
