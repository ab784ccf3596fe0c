//! Running the scenarios: set-up (unique queue and schema names per run), pre-filling, running
//! both sides, verifying that every message was processed, clean-up, and the report.

mod consumers;
mod memory_probe;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrybus_core::endpoint::{error_queue_name, skipped_queue_name};
use ferrybus_core::Message;

use ferrybus_core::outgoing::MessageFactory;
use lapin::Connection;
use serde_json::{json, Map, Value};
use sqlx::PgPool;

use crate::broker;
use crate::cleanup::Created;
use crate::db;
use crate::messages::{self, OrderSubmitted};
use crate::micro;
use crate::relay;
use crate::report::{machine_info, Measure, Report, Row, Target};
use crate::{Args, BoxError, Scenario};

pub(crate) use consumers::wait_depth;
use consumers::{consumer_rows, Kind};
use memory_probe::memory_rows;

pub(crate) use memory_probe::memory_probe_child;

/// What every scenario shares: settings, connections, names to clean up, failures.
pub(crate) struct Bench {
    /// The settings.
    pub(crate) args: Args,
    /// A short id unique to this run, in every queue and schema name.
    pub(crate) run_id: String,
    /// The set-up connection to the broker.
    pub(crate) conn: Connection,
    /// A small pool for DDL and counts.
    pub(crate) admin: PgPool,
    /// Builds envelopes.
    pub(crate) factory: Arc<MessageFactory>,
    /// What this run created, removed when it ends (by `main` when it is interrupted).
    pub(crate) created: Created,
    failures: Mutex<Vec<String>>,
    details: Mutex<Map<String, Value>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Bench {
    /// A queue name unique to this run.
    pub(crate) fn name(&self, what: &str) -> String {
        format!("ferrybus-bench-{}-{what}", self.run_id)
    }

    /// Declares a new queue and remembers to delete it (and its endpoint exchange).
    pub(crate) async fn fresh_queue(&self, what: &str) -> Result<String, BoxError> {
        let name = self.name(what);
        // ferrybus declares an endpoint exchange named like the queue, and `_error` / `_skipped`
        // pairs when something fails.
        for entity in [
            name.clone(),
            error_queue_name(&name),
            skipped_queue_name(&name),
        ] {
            self.created.queue(&entity);
            self.created.exchange(&entity);
        }
        let ch = self.conn.create_channel().await?;
        broker::declare_queue(&ch, &name).await?;
        let _ = ch.close(200, "done".into()).await;
        Ok(name)
    }

    /// Creates a new schema with the tables and remembers to drop it.
    pub(crate) async fn fresh_schema(&self, what: &str) -> Result<String, BoxError> {
        let name = format!("ferrybus_bench_{}_{}", self.run_id, what.replace('-', "_"));
        self.created.schema(&name);
        db::create_schema(&self.admin, &name).await?;
        Ok(name)
    }

    /// Remembers to drop schema `name`.
    pub(crate) fn remember_schema(&self, name: &str) {
        self.created.schema(name);
    }

    /// Remembers to delete exchange `name`.
    pub(crate) fn remember_exchange(&self, name: &str) {
        self.created.exchange(name);
    }

    /// Publishes `n` new orders to `queue` with confirms.
    pub(crate) async fn fill(&self, queue: &str, n: usize) -> Result<f64, BoxError> {
        let bodies: Vec<_> = (0..n)
            .map(|i| messages::envelope(&self.factory, queue, &messages::order(i)))
            .collect::<Result<_, _>>()?;
        broker::prefill(&self.conn, queue, &bodies).await
    }

    /// Records that a scenario lost messages or failed.
    pub(crate) fn fail(&self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("FAILURE: {what}");
        lock(&self.failures).push(what);
    }

    /// Keeps extra data for the JSON report.
    pub(crate) fn detail(&self, key: &str, value: Value) {
        lock(&self.details).insert(key.to_owned(), value);
    }

    /// How long a run of `n` messages may take before it counts as stuck.
    pub(crate) fn limit(&self, n: usize) -> Duration {
        Duration::from_secs(30 + (n / 200) as u64)
    }
}

/// Runs every selected scenario, prints the table, writes the JSON; non-zero exit when messages
/// went missing.
pub(crate) async fn run_all(args: Args, created: Created) -> ExitCode {
    let started = chrono::Utc::now();
    let clock = Instant::now();
    let bench = match connect(args.clone(), created).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: cannot set up: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "ferrybus-bench run {} (smoke: {}, concurrency {}, prefetch {})",
        bench.run_id,
        args.smoke,
        args.concurrency,
        args.prefetch_count()
    );
    // ferrybus endpoints declare the consumed type's exchange.
    bench.remember_exchange(OrderSubmitted::message_type().entity_name());
    let mut rows = Vec::new();
    for scenario in &args.scenarios {
        let t = Instant::now();
        eprintln!("== {scenario:?}");
        let result = match scenario {
            Scenario::Micro => micro_rows(&bench).await,
            Scenario::Plain => consumer_rows(&bench, Kind::Plain).await,
            Scenario::Inbox => consumer_rows(&bench, Kind::Inbox).await,
            Scenario::Outbox => consumer_rows(&bench, Kind::Outbox).await,
            Scenario::Relay => relay::rows(&bench).await,
            Scenario::Memory => memory_rows(&bench).await,
            Scenario::Billing => crate::billing::rows(&bench).await,
            Scenario::BillingGrowth => crate::billing::growth_rows(&bench).await,
            Scenario::RelayGrowth => crate::growth::relay_rows(&bench).await,
            Scenario::Cleanup => crate::growth::cleanup_rows(&bench).await,
        };
        match result {
            Ok(r) => rows.extend(r),
            Err(e) => bench.fail(format!("{scenario:?}: {e}")),
        }
        eprintln!("   ({:.1} s)", t.elapsed().as_secs_f64());
    }
    bench
        .created
        .remove(&args.amqp_url, &args.database_url)
        .await;
    let mut machine = machine_info();
    machine["postgres"] = server_version(&bench.admin).await.into();
    let inbox_rate = rows
        .iter()
        .find(|r| r.scenario.starts_with("1 ") && r.metric == "throughput")
        .and_then(|r| r.ferrybus.value());
    // Target (3) is relative to the ferrybus figure of (1).
    for row in rows.iter_mut().filter(|r| r.scenario.starts_with("3 ")) {
        if row.metric == "vs (1) ferrybus inbox" {
            *row = Row::new(
                &row.scenario,
                &row.metric,
                "msg/s",
                row.ferrybus.clone(),
                "(1) ferrybus inbox consumer",
                inbox_rate.map_or_else(|| Measure::na("no figure for (1)"), Measure::Value),
                Target::ratio(0.8),
            );
        }
    }
    let report = Report {
        started: started.to_rfc3339(),
        duration_s: clock.elapsed().as_secs_f64(),
        machine,
        settings: json!({
            "smoke": args.smoke,
            "scenarios": args.scenarios,
            "messages": args.messages,
            "plain_messages": args.plain_messages,
            "concurrency": args.concurrency,
            "prefetch": args.prefetch_count(),
            "rounds": args.rounds,
            "relay_messages": args.relay_messages,
            "relay_writers": args.relay_writers,
            "memory_backlog": args.memory_backlog,
            "micro_messages": args.micro_messages,
            "async_delivered_commit": args.async_delivered_commit,
            "relay_outboxes_per_claim": args.relay_outboxes_per_claim,
            "billing_orders": args.billing_orders,
            "growth_inbox_rows": args.growth_inbox_rows,
            "growth_relay_rows": args.growth_relay_rows,
        }),
        rows,
        details: Value::Object(lock(&bench.details).clone()),
        failures: lock(&bench.failures).clone(),
    };
    println!("{}", report.table());
    println!(
        "targets are reported, not asserted. machine: {} × {}, commit {}",
        report.machine["nproc"], report.machine["cpu_model"], report.machine["git_commit"]
    );
    let path = args.output_path();
    match report.write_json(&path) {
        Ok(()) => println!("wrote {}", path.display()),
        Err(e) => eprintln!("error: cannot write {}: {e}", path.display()),
    }
    if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("{} failure(s):", report.failures.len());
        for f in &report.failures {
            eprintln!("  - {f}");
        }
        ExitCode::FAILURE
    }
}

async fn server_version(admin: &PgPool) -> Option<String> {
    sqlx::query_scalar::<_, String>("SHOW server_version")
        .fetch_one(admin)
        .await
        .ok()
}

async fn connect(args: Args, created: Created) -> Result<Bench, BoxError> {
    let conn = broker::connect(&args.amqp_url, "ferrybus-bench setup").await?;
    let admin = db::pool(&args.database_url, None, 2).await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    Ok(Bench {
        args,
        run_id,
        conn,
        admin,
        factory: Arc::new(MessageFactory::new(messages::host())),
        created,
        failures: Mutex::default(),
        details: Mutex::default(),
    })
}

async fn micro_rows(b: &Bench) -> Result<Vec<Row>, BoxError> {
    let r = micro::run(b.args.micro_messages).await?;
    if r.harness_consumed != r.messages {
        b.fail(format!(
            "micro: the TestHarness consumed {} of {}",
            r.harness_consumed, r.messages
        ));
    }
    let base = "serde_json::from_slice";
    Ok(vec![
        Row::new(
            "0 core micro",
            "pipeline parse+dispatch",
            "msg/s",
            Measure::Value(r.pipeline),
            base,
            Measure::Value(r.serde),
            Target::none(),
        )
        .note(
            "the endpoint service on one task: Envelope::from_slice (one pass, case-insensitive \
               keys, the payload kept as raw JSON), consumer match, typed payload, tower stack, \
               settlement",
        ),
        Row::new(
            "0 core micro",
            "TestHarness publish+consume",
            "msg/s",
            Measure::Value(r.harness),
            base,
            Measure::Value(r.serde),
            Target::none(),
        )
        .note(
            "includes building and serializing each envelope on publish and the in-memory broker",
        ),
    ])
}
