//! An interrupted bench run removes the queues, exchanges and schemas it created: SIGTERM while
//! a ferrybus inbox consumer is draining its queue, then the broker and the database are asked
//! whether the run's names still exist.

use std::process::Stdio;
use std::time::Duration;

use ferrybus_testing::{amqp_url, database_url, Probe};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStderr, Command};
use tokio::time::timeout;

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
    let broker = Probe::connect(&amqp_url()).await;
    let db = sqlx::PgPool::connect(&database_url()).await.expect("db");
    assert!(broker.queue_count(&queue).await.is_some(), "{queue} before");
    assert!(broker.queue_count(&baseline_queue).await.is_some());
    assert!(broker.exchange_exists(&queue).await, "endpoint exchange");
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

    assert_eq!(broker.queue_count(&queue).await, None, "{queue} after");
    assert_eq!(broker.queue_count(&baseline_queue).await, None);
    assert!(!broker.exchange_exists(&queue).await);
    assert_eq!(schemas_like(&db, &like).await, 0);
    assert!(!output.exists(), "an interrupted run writes no report");
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

async fn schemas_like(db: &sqlx::PgPool, like: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE $1")
        .bind(like)
        .fetch_one(db)
        .await
        .expect("count schemas")
}
