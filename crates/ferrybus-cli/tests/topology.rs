//! `ferrybus topology`: a running ferrybus endpoint compared with the broker, over AMQP (the
//! shared broker has no management plugin) and through the management API of a throwaway
//! RabbitMQ node of its own (`scripts/rabbitmq-management-node.sh`).

mod support;

use ferrybus::rabbitmq::QueueEndpointExt;
use std::path::PathBuf;
use std::process::Command;

use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::{consumer_fn, ConsumeContext, ConsumeError, Message, MessageType};
use ferrybus_testing::{amqp_url, unique, Probe};
use lapin::types::FieldTable;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use support::{failure, run, success};

/// A message type only these tests consume.
#[derive(Debug, Serialize, Deserialize)]
struct TopologyProbe {}

impl Message for TopologyProbe {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusCli.Tests:TopologyProbe").unwrap()
    }
}

const PROBE_EXCHANGE: &str = "FerrybusCli.Tests:TopologyProbe";

async fn start_endpoint(url: &str, queue: &str, quorum: bool) -> RabbitMqBus {
    let queue = queue.to_owned();
    RabbitMqBus::builder(url)
        .receive_endpoint(&queue, move |e| {
            let e = if quorum { e.quorum() } else { e };
            e.consumer(consumer_fn(
                "TopologyConsumer",
                |_ctx: ConsumeContext<TopologyProbe>| async { Ok::<_, ConsumeError>(()) },
            ))
        })
        .start()
        .await
        .expect("the bus starts")
}

fn rows(json: &Value) -> Vec<(String, String, String)> {
    json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_owned(),
                r["name"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn row(kind: &str, name: &str, status: &str) -> (String, String, String) {
    (kind.to_owned(), name.to_owned(), status.to_owned())
}

/// Nothing listens there: the management API is unavailable.
const NO_MANAGEMENT: &str = "http://127.0.0.1:1/";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ferrybus_endpoint_matches_over_amqp() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-topology");
    probe.track_endpoint(&q);
    let bus = start_endpoint(&amqp_url(), &q, false).await;

    let out = run(&[
        "topology",
        &q,
        "--consumes",
        PROBE_EXCHANGE,
        "--management-url",
        NO_MANAGEMENT,
        "--json",
    ])
    .await;
    let json: Value = serde_json::from_str(&success(&out)).unwrap();
    assert_eq!(json["differences"], 0, "{json}");
    assert!(
        json["managementUnavailable"]
            .as_str()
            .unwrap()
            .starts_with("management API not available at http://127.0.0.1:1/"),
        "{json}"
    );
    let error = format!("{q}_error");
    let skipped = format!("{q}_skipped");
    assert_eq!(
        rows(&json),
        [
            row("exchange", &q, "ok"),
            row("queue", &q, "ok"),
            row("exchange", PROBE_EXCHANGE, "ok"),
            row("exchange", &error, "not declared yet"),
            row("queue", &error, "not declared yet"),
            row("exchange", &skipped, "not declared yet"),
            row("queue", &skipped, "not declared yet"),
            row("binding", &format!("{q} → queue {q}"), "unknown"),
            row(
                "binding",
                &format!("{PROBE_EXCHANGE} → exchange {q}"),
                "unknown"
            ),
            row(
                "binding",
                &format!("{error} → queue {error}"),
                "not declared yet"
            ),
            row(
                "binding",
                &format!("{skipped} → queue {skipped}"),
                "not declared yet"
            ),
        ]
    );
    assert!(
        json["rows"][1]["actual"]
            .as_str()
            .unwrap()
            .contains("0 messages, 1 consumers"),
        "{json}"
    );

    // The same endpoint declared as a quorum queue would be refused: the difference is named.
    let out = run(&[
        "topology",
        &q,
        "--quorum",
        "--management-url",
        NO_MANAGEMENT,
    ])
    .await;
    let line = failure(&out, 1);
    assert_eq!(line, format!("error: the broker's topology for {q} differs from what ferrybus declares (1 difference)"));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("inequivalent arg 'x-queue-type'"), "{table}");
    assert!(table.contains("1 difference\n"), "{table}");
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differences_are_named_over_amqp() {
    let probe = Probe::connect(&amqp_url()).await;
    let q = unique("cli-topology-diff");
    probe.track_endpoint(&q);
    // A transient queue where ferrybus declares a durable one, and no endpoint exchange.
    probe
        .declare_queue(&q, false, FieldTable::default())
        .await
        .unwrap();

    let out = run(&["topology", &q, "--management-url", NO_MANAGEMENT, "--json"]).await;
    failure(&out, 1);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["differences"], 2);
    assert_eq!(rows(&json)[0], row("exchange", &q, "missing"));
    assert_eq!(rows(&json)[1], row("queue", &q, "differs"));
    let detail = json["rows"][1]["actual"].as_str().unwrap();
    assert!(detail.contains("inequivalent arg 'durable'"), "{detail}");
    assert_eq!(
        probe.queue_count(&q).await,
        Some(0),
        "the queue is unchanged"
    );
    assert!(
        !probe.exchange_exists(&q).await,
        "comparing declared nothing"
    );
    probe.cleanup().await;
}

/// A RabbitMQ node with the management plugin, stopped (and its data removed) on drop.
struct ManagementNode {
    dir: PathBuf,
    amqp_port: u16,
    http_port: u16,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rabbitmq-management-node.sh")
}

impl ManagementNode {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(unique("ferrybus-mgmt-node"));
        // Held together, so the three are different.
        let listeners: Vec<_> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        drop(listeners);
        let (amqp_port, http_port, dist_port) = (ports[0], ports[1], ports[2]);
        let node = Self {
            dir,
            amqp_port,
            http_port,
        };
        let status = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(&node.dir)
            .arg(amqp_port.to_string())
            .arg(http_port.to_string())
            .arg(dist_port.to_string())
            .status()
            .expect("bash runs");
        assert!(status.success(), "the management node starts");
        node
    }

    fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port)
    }

    fn management_url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.http_port)
    }
}

impl Drop for ManagementNode {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_api_shows_flags_arguments_and_bindings() {
    let node = tokio::task::spawn_blocking(ManagementNode::start)
        .await
        .unwrap();
    let url = node.amqp_url();
    let management = node.management_url();
    let bus = start_endpoint(&url, "billing-invoice", true).await;
    let probe = Probe::connect(&url).await;
    // Someone bound another exchange to the endpoint: the broker has it, ferrybus does not.
    probe
        .declare_exchange("Legacy.Contracts:OrderSubmitted")
        .await;
    let ch_bind = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = ch_bind.create_channel().await.unwrap();
    ch.exchange_bind(
        "billing-invoice".into(),
        "Legacy.Contracts:OrderSubmitted".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();

    let args = [
        "--amqp-url",
        url.as_str(),
        "topology",
        "billing-invoice",
        "--consumes",
        PROBE_EXCHANGE,
        "--quorum",
        "--json",
    ];
    // The default management address is port 15672 of the broker's host; give this node's.
    let with_management = [&args[..], &["--management-url", management.as_str()]].concat();
    let json: Value = serde_json::from_str(&success(&run(&with_management).await)).unwrap();
    assert_eq!(json["source"], format!("management API at {management}"));
    assert_eq!(json["managementUnavailable"], Value::Null);
    assert_eq!(json["differences"], 0, "{json}");
    let found = rows(&json);
    for expected in [
        row("exchange", "billing-invoice", "ok"),
        row("queue", "billing-invoice", "ok"),
        row("exchange", PROBE_EXCHANGE, "ok"),
        row("binding", "billing-invoice → queue billing-invoice", "ok"),
        row(
            "binding",
            &format!("{PROBE_EXCHANGE} → exchange billing-invoice"),
            "ok",
        ),
        row(
            "binding",
            "billing-invoice_error → queue billing-invoice_error",
            "not declared yet",
        ),
        row(
            "binding",
            "Legacy.Contracts:OrderSubmitted → exchange billing-invoice",
            "extra",
        ),
    ] {
        assert!(found.contains(&expected), "{expected:?} in {found:?}");
    }
    let queue = json["rows"][1]["actual"].as_str().unwrap();
    // (The API's message and consumer counts lag a few seconds behind.)
    assert!(
        queue.starts_with("durable, x-queue-type=quorum; "),
        "{queue}"
    );

    // Without --quorum the management API shows the argument that differs.
    let classic: Vec<&str> = with_management
        .iter()
        .copied()
        .filter(|a| *a != "--quorum")
        .collect();
    let out = run(&classic).await;
    failure(&out, 1);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows(&json)[1], row("queue", "billing-invoice", "differs"));
    assert_eq!(json["rows"][1]["expected"], "durable");
    bus.stop().await;
    let _ = ch_bind.close(200, "".into()).await;
    drop(node);
}
