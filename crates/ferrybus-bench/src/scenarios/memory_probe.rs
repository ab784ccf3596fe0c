//! The memory scenario (5): the parent side, which runs a probe child process per consumer and
//! backlog, and the child side.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::Bench;
use crate::baseline;
use crate::broker;
use crate::ferry::{self, FerryError};
use crate::memory::{self, ProbeResult};
use crate::messages::{self, OrderSubmitted};
use crate::report::{Measure, Row, Target};
use crate::{Args, BoxError, ProbeKind};

/// The memory scenario: a child process per (consumer, backlog) drains a pre-filled queue while
/// sampling its own RSS; its VmHWM is the peak.
pub(super) async fn memory_rows(b: &Bench) -> Result<Vec<Row>, BoxError> {
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
