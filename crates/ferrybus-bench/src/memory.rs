//! Resident memory: reading `/proc/<pid>/status` and sampling it while a consumer drains a backlog.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// A `kB` field of a `/proc` file (`VmRSS:`, `VmHWM:`, `MemTotal:`).
pub(crate) fn field_kib(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l[name.len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The current and peak resident set size of this process, in KiB.
pub(crate) fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (
        field_kib(&status, "VmRSS:").unwrap_or(0),
        field_kib(&status, "VmHWM:").unwrap_or(0),
    )
}

/// One memory sample.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Sample {
    /// Seconds since the consumer started.
    pub(crate) t_s: f64,
    /// Messages still in the queue (backlog minus consumed).
    pub(crate) backlog: usize,
    /// VmRSS, MiB.
    pub(crate) rss_mib: f64,
    /// VmHWM so far, MiB.
    pub(crate) hwm_mib: f64,
}

/// What a memory probe reports.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub(crate) struct ProbeResult {
    /// Which consumer ran.
    pub(crate) consumer: String,
    /// The backlog when it started.
    pub(crate) backlog: usize,
    /// How many it consumed.
    pub(crate) consumed: usize,
    /// RSS before connecting, MiB.
    pub(crate) idle_rss_mib: f64,
    /// Peak RSS (VmHWM) at the end, MiB.
    pub(crate) peak_rss_mib: f64,
    /// Throughput while draining, msg/s.
    pub(crate) rate: f64,
    /// Samples every 100 ms: (seconds, backlog left, RSS MiB).
    pub(crate) samples: Vec<(f64, usize, f64)>,
}

/// Samples this process's RSS every `every` until `done` reaches `total` or `stop` is cancelled.
pub(crate) async fn sample_until(
    done: Arc<AtomicUsize>,
    total: usize,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<Sample> {
    let start = Instant::now();
    let mut samples = Vec::new();
    loop {
        let consumed = done.load(Ordering::Relaxed);
        let (rss, hwm) = rss_kib();
        samples.push(Sample {
            t_s: start.elapsed().as_secs_f64(),
            backlog: total.saturating_sub(consumed),
            rss_mib: rss as f64 / 1024.0,
            hwm_mib: hwm as f64 / 1024.0,
        });
        if consumed >= total || stop.is_cancelled() {
            return samples;
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => {}
        }
    }
}
