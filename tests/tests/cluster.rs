//! Billing on a three-node RabbitMQ cluster (issue 16): quorum queues, orders in flight, and the
//! node billing is connected to is stopped mid-burst. Nothing is lost, nothing doubled, billing
//! carries on through another node.
//!
//! The cluster is `scripts/rabbitmq-cluster.sh` (three nodes on 127.0.0.1:5701-5703 beside the
//! shared broker, which is never touched). The test starts it when it is not running and stops
//! it afterwards; it is skipped, saying so, when the script cannot run here (no
//! `rabbitmq-server`) or `FERRYBUS_CLUSTER_TESTS=0`. It takes about two minutes, most of it
//! starting the nodes.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use example_billing::Billing;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::Publish;
use ferrybus_e2e::{eventually, order, Probe, TestEnv};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use uuid::Uuid;

/// Orders sent after the node stopped (the burst goes on through the outage).
const AFTER_STOP: usize = 500;
const RECOVERY: Duration = Duration::from_secs(300);

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/rabbitmq-cluster.sh")
}

fn cluster(args: &[&str]) -> Result<String, String> {
    let output = Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Stops the cluster when dropped, if this test started it.
struct Cluster {
    started_here: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.started_here {
            let _ = cluster(&["stop"]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_the_node_billing_is_connected_to_loses_and_doubles_nothing() {
    if std::env::var("FERRYBUS_CLUSTER_TESTS").as_deref() == Ok("0") {
        eprintln!("SKIPPED: FERRYBUS_CLUSTER_TESTS=0");
        return;
    }
    if let Err(why) = cluster(&["check"]) {
        eprintln!("SKIPPED: scripts/rabbitmq-cluster.sh cannot run here: {why}");
        return;
    }
    let running = cluster(&["status"]).is_ok();
    if !running {
        cluster(&["start"]).expect("the cluster starts");
    }
    let _cluster = Cluster {
        started_here: !running,
    };
    // Whatever a previous run left stopped.
    for n in ["1", "2", "3"] {
        cluster(&["start-node", n]).expect("every node runs");
    }
    let urls = cluster(&["urls"]).expect("urls");
    let nodes: Vec<String> = urls.split(',').map(str::to_owned).collect();
    assert_eq!(nodes.len(), 3);

    TestEnv::new("cluster")
        .await
        .run(|env| async move {
            let mut config = env.billing_config(false);
            config.amqp_url = urls.clone();
            config.quorum = true;
            config.concurrency = 8;
            config.payment_delay = Duration::from_millis(5);
            let probe = Probe::connect(&nodes[1]).await;
            probe.track_endpoint(&config.invoice_queue);
            probe.track_endpoint(&config.payments_queue);

            let billing = Billing::start(&config).await.expect("billing starts");
            let billing_node = billing.bus().connected_host().expect("connected");
            // The orders come from another node (the list the other way round).
            let reversed: Vec<&str> = nodes.iter().rev().map(String::as_str).collect();
            let sender = RabbitMqBus::cluster(reversed)
                .start()
                .await
                .expect("the sender connects");
            let sender_node = sender.connected_host().expect("connected");
            assert_ne!(
                sender_node, billing_node,
                "billing and the sender on different nodes"
            );

            // Orders keep coming until AFTER_STOP more were sent after the node stopped, so the
            // stop is mid-burst however fast billing is.
            let queue = config.invoice_queue.clone();
            let stopped = Arc::new(AtomicBool::new(false));
            let sending = tokio::spawn({
                let stopped = stopped.clone();
                async move {
                    let (mut ids, mut after) = (Vec::new(), 0);
                    while after < AFTER_STOP {
                        let placed = order("12.00", "TRY");
                        sender
                            .send(&format!("exchange:{queue}"), &placed)
                            .await
                            .expect("sent");
                        ids.push(placed.order_id);
                        if stopped.load(Ordering::SeqCst) {
                            after += 1;
                        }
                    }
                    sender.stop().await;
                    ids
                }
            });

            let schema = config.billing_schema.clone();
            eventually("the first invoices", RECOVERY, || async {
                (invoices(&env, &schema).await >= 200).then_some(())
            })
            .await;
            let node = node_number(&billing_node);
            eprintln!("stopping node {node} ({billing_node}), billing's");
            cluster(&["stop-node", node]).expect("the node stops");
            stopped.store(true, Ordering::SeqCst);

            let ids: Vec<Uuid> = sending.await.expect("every order was sent");
            let sent = ids.len() as i64;
            eventually("every order to be invoiced", RECOVERY, || async {
                (invoices(&env, &schema).await >= sent).then_some(())
            })
            .await;
            let now = billing
                .bus()
                .connected_host()
                .expect("billing is connected");
            assert_ne!(now, billing_node, "billing carries on through another node");
            assert_eq!(invoices(&env, &schema).await, sent, "nothing doubled");
            assert_eq!(
                invoiced(&env, &schema, &ids).await,
                ids.len(),
                "nothing lost"
            );
            for queue in [&config.invoice_queue, &config.payments_queue] {
                let errors = probe
                    .queue_count(&format!("{queue}_error"))
                    .await
                    .unwrap_or(0);
                assert_eq!(errors, 0, "nothing in {queue}_error");
            }
            billing.stop().await;
            cluster(&["start-node", node]).expect("the node starts again");
            probe.cleanup().await;
        })
        .await;
}

fn node_number(host: &str) -> &'static str {
    match host.rsplit(':').next() {
        Some("5701") => "1",
        Some("5702") => "2",
        Some("5703") => "3",
        other => panic!("not a cluster node: {other:?}"),
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

async fn invoiced(env: &TestEnv, schema: &str, ids: &[Uuid]) -> usize {
    let rows = env
        .db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT DISTINCT order_id FROM \"{schema}\".invoices"),
        ))
        .await
        .expect("invoices");
    let found: std::collections::HashSet<Uuid> = rows
        .iter()
        .map(|r| r.try_get("", "order_id").expect("order_id"))
        .collect();
    ids.iter().filter(|id| found.contains(id)).count()
}
