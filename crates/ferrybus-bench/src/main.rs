//! `ferrybus-bench`: throughput, latency and memory of ferrybus, each figure beside a hand-rolled
//! baseline measured in the same run.
//!
//! ```text
//! cargo run --release -p ferrybus-bench -- [--smoke] [--messages N] [--concurrency N] ...
//! ```
//!
//! Scenarios (`--scenarios`, comma-separated, all by default):
//!
//! * `micro`: envelope parse + dispatch in process (receive pipeline, `TestHarness`) against
//!   `serde_json::from_slice` of the same bodies.
//! * `plain`: RabbitMQ consumer with no storage, ferrybus against raw lapin consume + ack.
//! * `inbox`: consume → inbox row + one business insert → ack, ferrybus's inbox layer against a
//!   hand-rolled lapin + sqlx consumer doing the same SQL in one transaction per message.
//! * `outbox`: the inbox consumer that also publishes one message per input (consumer outbox).
//! * `relay`: the bus outbox: rows committed per second, messages delivered per second and
//!   commit-to-broker latency (NOTIFY wake-up and polling fallback; one and two delivery
//!   instances).
//! * `memory`: peak RSS of a consumer process draining a backlog, at two backlog sizes.
//! * `billing`: `examples/billing` as shipped against its hand-written lapin + tokio-postgres
//!   twin, orders invoiced and captured per second.
//! * `billing-growth`, `relay-growth`, `cleanup` (not in the default list; `--smoke` runs them
//!   small): billing with many delivered inbox rows, the relay with a large pending backlog,
//!   the inbox cleanup keeping up with 2,000 expired rows per second.
//!
//! The table is printed and written as JSON (`--output`, by default
//! `<target dir>/bench-results/latest.json`). The process exits non-zero when a scenario lost
//! messages; timings are never asserted. Ctrl-C or SIGTERM stops the run and removes the
//! queues, exchanges and schemas it created (exit code 128 + the signal's number).

mod baseline;
mod billing;
mod broker;
mod cleanup;
mod cpu;
mod db;
mod ferry;
mod growth;
mod memory;
mod messages;
mod micro;
mod relay;
mod report;
mod scenarios;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

/// The scenarios run when `--scenarios` is not given.
const DEFAULT_SCENARIOS: &str = "micro,plain,inbox,outbox,relay,memory,billing";

/// Errors of the harness itself.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Benchmarks ferrybus against hand-rolled lapin / sqlx baselines.
#[derive(Clone, Debug, Parser, serde::Serialize)]
#[command(name = "ferrybus-bench", version, about)]
struct Args {
    /// RabbitMQ URI.
    #[arg(
        long,
        env = "AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp_url: String,
    /// PostgreSQL URL; without an `sslmode`, every side connects with `sslmode=disable`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    database_url: String,
    /// Which scenarios to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = DEFAULT_SCENARIOS
    )]
    scenarios: Vec<Scenario>,
    /// Orders per billing run (billing, billing-growth).
    #[arg(long, default_value_t = 4000)]
    billing_orders: usize,
    /// Which sides of billing run (one alone, to profile it; the ratio then needs both).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "twin,ferrybus"
    )]
    billing_sides: Vec<billing::Side>,
    /// Delivered rows put in `InboxState` before billing-growth's second run.
    #[arg(long, default_value_t = 5_000_000)]
    growth_inbox_rows: u64,
    /// Pending bus-outbox rows of relay-growth's large run.
    #[arg(long, default_value_t = 1_000_000)]
    growth_relay_rows: u64,
    /// Messages per consumer run in the storage scenarios (inbox, outbox).
    #[arg(long, default_value_t = 4000)]
    messages: usize,
    /// Messages per consumer run in the plain scenario.
    #[arg(long, default_value_t = 20_000)]
    plain_messages: usize,
    /// How many messages each consumer handles at once (both ferrybus and the baselines).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// AMQP prefetch (default: max(2 × concurrency, 16)).
    #[arg(long)]
    prefetch: Option<u16>,
    /// Rounds of every consumer comparison; the best round of each side is reported.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Messages the relay writers commit per run (at 4 000 the delivery instances' start-up,
    /// 30–60 ms, was a fifth of a drain and decided the two-instance ratio).
    #[arg(long, default_value_t = 20_000)]
    relay_messages: usize,
    /// Concurrent relay writers (each commits one message per transaction).
    #[arg(long, default_value_t = 4)]
    relay_writers: usize,
    /// The large backlog of the memory scenario (it also runs one tenth of it).
    #[arg(long, default_value_t = 100_000)]
    memory_backlog: usize,
    /// Messages in the in-process micro-benchmark.
    #[arg(long, default_value_t = 20_000)]
    micro_messages: usize,
    /// ferrybus consumer outbox: `InboxConfig::async_delivered_commit(true)` (the transaction
    /// that records "sent" after commit does not wait for the WAL flush).
    #[arg(long)]
    async_delivered_commit: bool,
    /// Relay: `DeliveryConfig::outboxes_per_claim` (default: the crate's default).
    #[arg(long)]
    relay_outboxes_per_claim: Option<u64>,
    /// Relay: delivery workers per instance (default: the crate's default).
    #[arg(long)]
    relay_workers: Option<usize>,
    /// Tiny counts of every scenario, for CI: checks that every message was processed.
    #[arg(long)]
    smoke: bool,
    /// Where the JSON report goes.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Internal: run as a memory probe child consuming `--probe-queue` with this consumer.
    #[arg(long, hide = true, value_enum)]
    memory_probe: Option<ProbeKind>,
    /// Internal: the probe's queue.
    #[arg(long, hide = true)]
    probe_queue: Option<String>,
    /// Internal: the probe's backlog.
    #[arg(long, hide = true, default_value_t = 0)]
    probe_backlog: usize,
}

impl Args {
    /// Applies `--smoke`: tiny counts, one round.
    fn effective(mut self) -> Self {
        if self.smoke {
            self.messages = 200;
            self.plain_messages = 200;
            self.relay_messages = 200;
            self.memory_backlog = 2000;
            self.micro_messages = 200;
            self.billing_orders = 100;
            self.growth_inbox_rows = 2000;
            self.growth_relay_rows = 2000;
            self.rounds = 1;
            let defaults: Vec<Scenario> = DEFAULT_SCENARIOS
                .split(',')
                .filter_map(|s| Scenario::from_str(s, false).ok())
                .collect();
            if self.scenarios == defaults {
                self.scenarios.extend([
                    Scenario::BillingGrowth,
                    Scenario::RelayGrowth,
                    Scenario::Cleanup,
                ]);
            }
        }
        self.concurrency = self.concurrency.max(1);
        self.rounds = self.rounds.max(1);
        self.database_url = db::plain_url(&self.database_url);
        self
    }

    /// The prefetch both sides use.
    fn prefetch_count(&self) -> u16 {
        self.prefetch
            .unwrap_or_else(|| u16::try_from((2 * self.concurrency).max(16)).unwrap_or(u16::MAX))
    }

    fn output_path(&self) -> PathBuf {
        if let Some(path) = &self.output {
            return path.clone();
        }
        // <target>/release/ferrybus-bench → <target>/bench-results/latest.json
        let target = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent()?.parent().map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("target"));
        target.join("bench-results").join("latest.json")
    }
}

/// A scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Scenario {
    /// In-process parse + dispatch.
    Micro,
    /// Consumer without storage.
    Plain,
    /// Inbox consumer.
    Inbox,
    /// Inbox consumer that publishes (consumer outbox).
    Outbox,
    /// Bus outbox relay.
    Relay,
    /// Peak RSS under a backlog.
    Memory,
    /// examples/billing against its hand-written twin.
    Billing,
    /// Billing with many delivered inbox rows.
    BillingGrowth,
    /// The relay draining a large backlog.
    RelayGrowth,
    /// The inbox cleanup keeping up with expired rows.
    Cleanup,
}

/// Which consumer a memory probe runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum ProbeKind {
    /// Raw lapin consume + ack.
    Lapin,
    /// A ferrybus endpoint.
    Ferrybus,
}

fn main() -> ExitCode {
    let args = Args::parse().effective();
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(kind) = args.memory_probe {
        let code = runtime.block_on(scenarios::memory_probe_child(args, kind));
        runtime.shutdown_timeout(std::time::Duration::from_millis(500));
        return code;
    }
    let created = cleanup::Created::default();
    let outcome = runtime.block_on(async {
        tokio::select! {
            code = scenarios::run_all(args.clone(), created.clone()) => Ok(code),
            signal = cleanup::interrupted() => Err(signal),
        }
    });
    // Stops every task of the run (consumers, relays, memory probes) and, with them, their
    // connections; connection I/O threads would keep a plain drop waiting.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match outcome {
        Ok(code) => code,
        Err(signal) => remove_after_interrupt(&args, &created, signal),
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Removes what an interrupted run created, on a runtime of its own (the run's is shut down);
/// exits with 128 + `signal`.
fn remove_after_interrupt(args: &Args, created: &cleanup::Created, signal: u8) -> ExitCode {
    eprintln!("interrupted (signal {signal}): removing this run's queues, exchanges and schemas");
    match runtime() {
        Ok(rt) => {
            let removed = rt.block_on(created.remove(&args.amqp_url, &args.database_url));
            eprintln!(
                "removed {} queues, {} exchanges, {} schemas",
                removed.queues, removed.exchanges, removed.schemas
            );
            rt.shutdown_timeout(std::time::Duration::from_millis(500));
        }
        Err(e) => eprintln!("error: cannot start a runtime to clean up: {e}"),
    }
    ExitCode::from(128 + signal)
}
