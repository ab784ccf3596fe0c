//! Running the scenarios: set-up (unique queue and schema names per run), pre-filling, running
//! both sides, verifying that every message was processed, clean-up, and the report.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrybus_core::{Message, MessageFactory};
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ExchangeKind};
use serde_json::{json, Map, Value};
use sqlx::PgPool;

use crate::baseline::{self, RunResult};
use crate::broker;
use crate::db;
use crate::ferry::{self, FerryError};
use crate::memory::{self, ProbeResult};
use crate::messages::{self, OrderAccepted, OrderSubmitted};
use crate::micro;
use crate::relay;
use crate::report::{machine_info, Measure, Report, Row, Target};
use crate::{Args, BoxError, ProbeKind, Scenario};

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
    queues: Mutex<Vec<String>>,
    exchanges: Mutex<Vec<String>>,
    schemas: Mutex<Vec<String>>,
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
        let ch = self.conn.create_channel().await?;
        broker::declare_queue(&ch, &name).await?;
        let _ = ch.close(200, "done".into()).await;
        lock(&self.queues).push(name.clone());
        // ferrybus declares an endpoint exchange named like the queue, and `_error` / `_skipped`
        // pairs when something fails.
        lock(&self.exchanges).push(name.clone());
        for suffix in ["_error", "_skipped"] {
            lock(&self.queues).push(format!("{name}{suffix}"));
            lock(&self.exchanges).push(format!("{name}{suffix}"));
        }
        Ok(name)
    }

    /// Creates a new schema with the tables and remembers to drop it.
    pub(crate) async fn fresh_schema(&self, what: &str) -> Result<String, BoxError> {
        let name = format!("ferrybus_bench_{}_{}", self.run_id, what.replace('-', "_"));
        db::create_schema(&self.admin, &name).await?;
        lock(&self.schemas).push(name.clone());
        Ok(name)
    }

    /// Remembers to delete exchange `name`.
    pub(crate) fn forget_exchange_later(&self, name: &str) {
        let mut exchanges = lock(&self.exchanges);
        if !exchanges.iter().any(|e| e == name) {
            exchanges.push(name.to_owned());
        }
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

    async fn cleanup(&self) {
        let queues = lock(&self.queues).clone();
        let exchanges = lock(&self.exchanges).clone();
        // A fresh connection: the set-up one may have been closed by a failed scenario.
        match broker::connect(&self.args.amqp_url, "ferrybus-bench cleanup").await {
            Ok(conn) => {
                broker::delete(&conn, &queues, &exchanges).await;
                let _ = conn.close(200, "done".into()).await;
            }
            Err(e) => {
                eprintln!("warning: cleanup connection failed ({e}); using the set-up one");
                broker::delete(&self.conn, &queues, &exchanges).await;
            }
        }
        let schemas = lock(&self.schemas).clone();
        for schema in schemas {
            if let Err(e) = db::drop_schema(&self.admin, &schema).await {
                eprintln!("warning: could not drop schema {schema}: {e}");
            }
        }
    }
}

/// Runs every selected scenario, prints the table, writes the JSON; non-zero exit when messages
/// went missing.
pub(crate) async fn run_all(args: Args) -> ExitCode {
    let started = chrono::Utc::now();
    let clock = Instant::now();
    let bench = match connect(args.clone()).await {
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
    bench.forget_exchange_later(OrderSubmitted::message_type().entity_name());
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
        };
        match result {
            Ok(r) => rows.extend(r),
            Err(e) => bench.fail(format!("{scenario:?}: {e}")),
        }
        eprintln!("   ({:.1} s)", t.elapsed().as_secs_f64());
    }
    bench.cleanup().await;
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

async fn connect(args: Args) -> Result<Bench, BoxError> {
    let conn = broker::connect(&args.amqp_url, "ferrybus-bench setup").await?;
    let admin = db::pool(&args.database_url, None, 2).await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    Ok(Bench {
        args,
        run_id,
        conn,
        admin,
        factory: Arc::new(MessageFactory::new(messages::host())),
        queues: Mutex::default(),
        exchanges: Mutex::default(),
        schemas: Mutex::default(),
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
            "ReceivePipeline::handle on one task: Envelope::from_slice (serde_json::Value, \
               case-insensitive keys), consumer match, typed payload, tower stack",
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

/// A consumer comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// (2) no storage.
    Plain,
    /// (1) inbox.
    Inbox,
    /// (3) inbox + consumer outbox.
    Outbox,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Inbox => "inbox",
            Kind::Outbox => "outbox",
        }
    }

    fn messages(self, args: &Args) -> usize {
        match self {
            Kind::Plain => args.plain_messages,
            Kind::Inbox | Kind::Outbox => args.messages,
        }
    }
}

/// One run of one side: fresh queue (and schema), pre-fill, consume, verify.
async fn consumer_run(
    b: &Bench,
    kind: Kind,
    ferrybus: bool,
    round: usize,
) -> Result<RunResult, FerryError> {
    let side = if ferrybus { "ferrybus" } else { "baseline" };
    let what = format!("{}-{side}-{round}", kind.label());
    let n = kind.messages(&b.args);
    let queue = b.fresh_queue(&what).await?;
    let schema = match kind {
        Kind::Plain => None,
        Kind::Inbox | Kind::Outbox => Some(b.fresh_schema(&what).await?),
    };
    let sink = match kind {
        Kind::Outbox => Some(sink_queue(b, &format!("{what}-sink")).await?),
        _ => None,
    };
    let fill_rate = b.fill(&queue, n).await?;
    eprintln!("   {what}: pre-filled {n} at {fill_rate:.0} msg/s");
    let limit = b.limit(n);
    let concurrency = b.args.concurrency;
    let load = baseline::Load {
        prefetch: b.args.prefetch_count(),
        concurrency,
        expected: n,
        limit,
    };
    let result = if ferrybus {
        match (kind, &schema) {
            (Kind::Plain, _) => ferry::plain(b, &queue, n, limit).await?,
            (Kind::Inbox, Some(s)) => ferry::inbox(b, &queue, s, n, limit).await?,
            (Kind::Outbox, Some(s)) => ferry::outbox(b, &queue, s, n, limit).await?,
            _ => unreachable!("storage scenarios have a schema"),
        }
    } else {
        let pool = match &schema {
            Some(s) => Some(db::pool(&b.args.database_url, Some(s), concurrency as u32).await?),
            None => None,
        };
        match (kind, pool) {
            (Kind::Plain, _) => baseline::plain(&b.conn, &queue, load).await?,
            (Kind::Inbox, Some(pool)) => baseline::inbox(&b.conn, pool, &queue, load).await?,
            (Kind::Outbox, Some(pool)) => {
                baseline::outbox(&b.conn, pool, &queue, load, b.factory.clone()).await?
            }
            _ => unreachable!("storage scenarios have a pool"),
        }
    };
    eprintln!(
        "   {what}: {} of {n} in {:.2} s = {:.0} msg/s",
        result.processed,
        result.elapsed.as_secs_f64(),
        result.rate()
    );
    // Every message must have been processed, and its effects must be there.
    let mut missing = Vec::new();
    if result.processed < n {
        missing.push(format!("acknowledged {} of {n}", result.processed));
    }
    if result.errors > 0 {
        missing.push(format!("{} handler errors", result.errors));
    }
    if let Some(schema) = &schema {
        let rows = db::count(&b.admin, schema, "bench_orders")
            .await
            .map_err(FerryError::Failed)?;
        if rows != n as i64 {
            missing.push(format!("{rows} business rows for {n} messages"));
        }
    }
    if let Some(sink) = &sink {
        let depth = wait_depth(b, sink, n).await;
        if depth != n {
            missing.push(format!("{depth} published messages for {n} inputs"));
        }
        broker::delete(&b.conn, std::slice::from_ref(sink), &[]).await;
    }
    let left = wait_depth(b, &queue, 0).await;
    if left != 0 && result.processed >= n {
        missing.push(format!("{left} messages left in the queue"));
    }
    if !missing.is_empty() {
        b.fail(format!("{what}: {}", missing.join(", ")));
    }
    Ok(result)
}

/// Declares `OrderAccepted`'s exchange (as MassTransit does: durable fanout) and a queue bound to
/// it that collects what the outbox consumers publish.
async fn sink_queue(b: &Bench, what: &str) -> Result<String, BoxError> {
    let exchange = OrderAccepted::message_type().entity_name().to_owned();
    let ch = b.conn.create_channel().await?;
    ch.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await?;
    let queue = b.fresh_queue(what).await?;
    ch.queue_bind(
        queue.as_str().into(),
        exchange.as_str().into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let _ = ch.close(200, "done".into()).await;
    b.forget_exchange_later(&exchange);
    Ok(queue)
}

/// Polls `queue`'s depth for up to 5 s until it equals `n`; returns the last depth.
async fn wait_depth(b: &Bench, queue: &str, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let depth = match b.conn.create_channel().await {
            Ok(ch) => {
                let d = broker::depth(&ch, queue).await.unwrap_or(0) as usize;
                let _ = ch.close(200, "done".into()).await;
                d
            }
            Err(_) => 0,
        };
        if depth == n || Instant::now() > deadline {
            return depth;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn measure(b: &Bench, what: &str, results: Vec<Result<RunResult, FerryError>>) -> Measure {
    let mut best: Option<f64> = None;
    let mut reason = None;
    for r in results {
        match r {
            Ok(run) if run.processed > 0 => best = Some(best.unwrap_or(0.0).max(run.rate())),
            Ok(_) => reason = Some("nothing processed".to_owned()),
            Err(FerryError::Missing(why)) => reason = Some(why),
            Err(FerryError::Failed(e)) => {
                b.fail(format!("{what}: {e}"));
                reason = Some(format!("failed: {e}"));
            }
        }
    }
    match best {
        Some(v) => Measure::Value(v),
        None => Measure::na(reason.unwrap_or_else(|| "not run".into())),
    }
}

async fn consumer_rows(b: &Bench, kind: Kind) -> Result<Vec<Row>, BoxError> {
    let mut base = Vec::new();
    let mut ferry = Vec::new();
    for round in 0..b.args.rounds {
        // Alternate which side goes first, so neither always gets the warmer broker.
        for ferrybus in [round % 2 == 1, round % 2 == 0] {
            let r = consumer_run(b, kind, ferrybus, round).await;
            if ferrybus {
                ferry.push(r);
            } else {
                base.push(r);
            }
        }
    }
    let label = kind.label();
    let ferry = measure(b, &format!("{label} ferrybus"), ferry);
    let base = measure(b, &format!("{label} baseline"), base);
    let c = b.args.concurrency;
    Ok(match kind {
        Kind::Plain => vec![Row::new(
            "2 plain consumer",
            "throughput",
            "msg/s",
            ferry,
            "raw lapin consume + ack",
            base,
            Target::ratio(0.9),
        )
        .note(format!("{} msgs, concurrency {c}", b.args.plain_messages))],
        Kind::Inbox => vec![Row::new(
            "1 inbox consumer",
            "throughput",
            "msg/s",
            ferry,
            "hand-rolled lapin + sqlx",
            base,
            Target::ratio(1.0),
        )
        .note(format!(
            "{} msgs, concurrency {c}, pool {c}",
            b.args.messages
        ))],
        Kind::Outbox => vec![
            Row::new(
                "3 consumer outbox",
                "throughput",
                "msg/s",
                ferry.clone(),
                "hand-rolled inbox + outbox row + publish",
                base,
                Target::none(),
            )
            .note(format!(
                "{} msgs, concurrency {c}; one OrderAccepted published per input",
                b.args.messages
            )),
            Row::new(
                "3 consumer outbox",
                "vs (1) ferrybus inbox",
                "msg/s",
                ferry,
                "(1) ferrybus inbox consumer",
                Measure::na("(1) not run"),
                Target::ratio(0.8),
            ),
        ],
    })
}

/// The memory scenario: a child process per (consumer, backlog) drains a pre-filled queue while
/// sampling its own RSS; its VmHWM is the peak.
async fn memory_rows(b: &Bench) -> Result<Vec<Row>, BoxError> {
    let big = b.args.memory_backlog;
    let small = (big / 10).max(1);
    let mut results: Vec<(ProbeKind, usize, Result<ProbeResult, String>)> = Vec::new();
    for backlog in [small, big] {
        for kind in [ProbeKind::Lapin, ProbeKind::Ferrybus] {
            let label = format!("memory-{kind:?}-{backlog}").to_lowercase();
            let queue = b.fresh_queue(&label).await?;
            let fill = b.fill(&queue, backlog).await?;
            eprintln!("   {label}: pre-filled {backlog} at {fill:.0} msg/s");
            let r = run_probe(b, kind, &queue, backlog).await;
            match &r {
                Ok(p) => {
                    eprintln!(
                        "   {label}: peak {:.1} MiB (idle {:.1}), {} consumed at {:.0} msg/s",
                        p.peak_rss_mib, p.idle_rss_mib, p.consumed, p.rate
                    );
                    if p.consumed < backlog {
                        b.fail(format!("{label}: consumed {} of {backlog}", p.consumed));
                    }
                }
                Err(e) if e.starts_with("n/a: ") => eprintln!("   {label}: {e}"),
                Err(e) => b.fail(format!("{label}: {e}")),
            }
            // Free the broker before the next probe.
            let _ = broker::purge(&b.conn, &queue).await;
            results.push((kind, backlog, r));
        }
    }
    let peak = |kind: ProbeKind, backlog: usize| -> Measure {
        match results.iter().find(|(k, n, _)| *k == kind && *n == backlog) {
            Some((_, _, Ok(p))) => Measure::Value(p.peak_rss_mib),
            Some((_, _, Err(e))) => Measure::na(e.trim_start_matches("n/a: ").to_owned()),
            None => Measure::na("not run"),
        }
    };
    let growth = |kind: ProbeKind| -> Measure {
        match (peak(kind, big).value(), peak(kind, small).value()) {
            (Some(a), Some(c)) => Measure::Value((a - c).max(0.0)),
            _ => Measure::na("a probe has no figure"),
        }
    };
    b.detail(
        "memory",
        json!(results
            .iter()
            .map(|(k, n, r)| json!({
                "consumer": k,
                "backlog": n,
                "result": match r { Ok(p) => json!(p), Err(e) => json!({ "error": e }) },
            }))
            .collect::<Vec<_>>()),
    );
    let base = "raw lapin consumer";
    let prefetch = b.args.prefetch_count();
    Ok(vec![
        Row::new(
            "5 memory",
            &format!("peak RSS, backlog {small}"),
            "MiB",
            peak(ProbeKind::Ferrybus, small),
            base,
            peak(ProbeKind::Lapin, small),
            Target::none(),
        ),
        Row::new(
            "5 memory",
            &format!("peak RSS, backlog {big}"),
            "MiB",
            peak(ProbeKind::Ferrybus, big),
            base,
            peak(ProbeKind::Lapin, big),
            Target::none(),
        )
        .note(format!(
            "peak = VmHWM of a child process that only consumes (prefetch {prefetch}); \
             samples every 100 ms in the JSON"
        )),
        Row::new(
            "5 memory",
            &format!("growth {small} → {big}"),
            "MiB",
            growth(ProbeKind::Ferrybus),
            base,
            growth(ProbeKind::Lapin),
            Target::below(8.0, "flat: < 8 MiB"),
        )
        .no_ratio(),
    ])
}

async fn run_probe(
    b: &Bench,
    kind: ProbeKind,
    queue: &str,
    backlog: usize,
) -> Result<ProbeResult, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let kind_arg = format!("{kind:?}").to_lowercase();
    let output = tokio::process::Command::new(exe)
        .args([
            "--memory-probe",
            &kind_arg,
            "--probe-queue",
            queue,
            "--probe-backlog",
            &backlog.to_string(),
            "--concurrency",
            &b.args.concurrency.to_string(),
            "--prefetch",
            &b.args.prefetch_count().to_string(),
            "--amqp-url",
            &b.args.amqp_url,
            "--database-url",
            &b.args.database_url,
        ])
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("PROBE_NA ")) {
        return Err(format!("n/a: {line}"));
    }
    match stdout.lines().find_map(|l| l.strip_prefix("PROBE_RESULT ")) {
        Some(json) => serde_json::from_str(json).map_err(|e| e.to_string()),
        None => Err(format!(
            "probe exited with {} without a result: {}",
            output.status,
            stderr.lines().last().unwrap_or("")
        )),
    }
}

/// The child side of the memory scenario.
pub(crate) async fn memory_probe_child(args: Args, kind: ProbeKind) -> ExitCode {
    let (idle, _) = memory::rss_kib();
    let Some(queue) = args.probe_queue.clone() else {
        eprintln!("--probe-queue is required");
        return ExitCode::FAILURE;
    };
    let backlog = args.probe_backlog;
    let limit = Duration::from_secs(60 + (backlog / 500) as u64);
    let counter = broker::Counter::new();
    let stop = tokio_util::sync::CancellationToken::new();
    let sampler = tokio::spawn(memory::sample_until(
        counter.atomic(),
        backlog,
        Duration::from_millis(100),
        stop.clone(),
    ));
    let run = match kind {
        ProbeKind::Lapin => {
            async {
                let conn = broker::connect(&args.amqp_url, "ferrybus-bench memory probe").await?;
                let load = baseline::Load {
                    prefetch: args.prefetch_count(),
                    concurrency: args.concurrency,
                    expected: backlog,
                    limit,
                };
                let r = baseline::run_consumer(
                    &conn,
                    &queue,
                    load,
                    |d: Arc<lapin::message::Delivery>| async move {
                        let e: messages::BaselineEnvelope<OrderSubmitted> =
                            serde_json::from_slice(&d.data)?;
                        std::hint::black_box(e.message_id);
                        Ok(())
                    },
                    counter.clone(),
                )
                .await?;
                Ok::<_, FerryError>(r)
            }
            .await
        }
        ProbeKind::Ferrybus => {
            ferry::memory_consumer(&args, &queue, backlog, limit, counter.clone()).await
        }
    };
    stop.cancel();
    let samples = sampler.await.unwrap_or_default();
    let run = match run {
        Ok(r) => r,
        Err(FerryError::Missing(why)) => {
            println!("PROBE_NA {why}");
            return ExitCode::SUCCESS;
        }
        Err(FerryError::Failed(e)) => {
            eprintln!("probe failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (_, hwm) = memory::rss_kib();
    let result = ProbeResult {
        consumer: format!("{kind:?}").to_lowercase(),
        backlog,
        consumed: run.processed,
        idle_rss_mib: idle as f64 / 1024.0,
        peak_rss_mib: hwm as f64 / 1024.0,
        rate: run.rate(),
        samples: samples
            .iter()
            .map(|s| {
                (
                    (s.t_s * 10.0).round() / 10.0,
                    s.backlog,
                    (s.rss_mib * 10.0).round() / 10.0,
                )
            })
            .collect(),
    };
    match serde_json::to_string(&result) {
        Ok(json) => {
            println!("PROBE_RESULT {json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("probe: {e}");
            ExitCode::FAILURE
        }
    }
}
