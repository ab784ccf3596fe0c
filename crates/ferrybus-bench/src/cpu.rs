//! CPU time spent on a run, read from `/proc`: the whole machine's busy time (every process:
//! the bench, PostgreSQL, RabbitMQ, the kernel), the bench process's own, and the time the
//! hypervisor gave to other guests (steal).
//!
//! On a host where the service, its database and its broker share two saturated cores,
//! throughput is CPU per message; this reads it directly, so two sides can be compared by
//! what they cost even when the machine's speed drifts between them.

/// One reading of the counters, in clock ticks (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuSample {
    /// user + nice + system + irq + softirq of all CPUs.
    busy: u64,
    /// steal of all CPUs.
    steal: u64,
    /// utime + stime of this process.
    own: u64,
}

/// CPU time between two samples, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CpuSpent {
    /// The whole machine.
    pub(crate) busy_ms: f64,
    /// This process (the bench: the consumers, drivers and clients of both sides).
    pub(crate) own_ms: f64,
    /// Time the hypervisor ran someone else on our CPUs.
    pub(crate) steal_ms: f64,
}

/// Clock ticks per second of `/proc/stat` and `/proc/<pid>/stat` (USER_HZ; 100 on every Linux
/// architecture this runs on).
const TICKS_PER_SECOND: f64 = 100.0;

impl CpuSample {
    /// Reads the counters now; zeros where `/proc` cannot be read.
    pub(crate) fn now() -> Self {
        let (busy, steal) = machine().unwrap_or_default();
        Self {
            busy,
            steal,
            own: own().unwrap_or_default(),
        }
    }

    /// What was spent from `earlier` to `self`.
    pub(crate) fn since(&self, earlier: &CpuSample) -> CpuSpent {
        let ms = |a: u64, b: u64| a.saturating_sub(b) as f64 * 1000.0 / TICKS_PER_SECOND;
        CpuSpent {
            busy_ms: ms(self.busy, earlier.busy),
            own_ms: ms(self.own, earlier.own),
            steal_ms: ms(self.steal, earlier.steal),
        }
    }
}

impl CpuSpent {
    /// Per unit of work (`n` orders or messages), in ms.
    pub(crate) fn per(&self, n: usize) -> CpuSpent {
        let n = n.max(1) as f64;
        CpuSpent {
            busy_ms: self.busy_ms / n,
            own_ms: self.own_ms / n,
            steal_ms: self.steal_ms / n,
        }
    }
}

/// The mean of `per` (CPU per message or order of several runs), as "0.520 ms (0.210 ms)":
/// the whole machine, then the bench process; "n/a" when there is none.
pub(crate) fn mean_label(per: &[CpuSpent]) -> String {
    if per.is_empty() {
        return "n/a".to_owned();
    }
    let n = per.len() as f64;
    let busy = per.iter().map(|c| c.busy_ms).sum::<f64>() / n;
    let own = per.iter().map(|c| c.own_ms).sum::<f64>() / n;
    format!("{busy:.3} ms ({own:.3} ms)")
}

/// (busy, steal) ticks of the `cpu` line of `/proc/stat`.
fn machine() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine(stat.lines().next()?)
}

fn parse_machine(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal …
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)?;
    Some((busy, *v.get(7)?))
}

/// utime + stime ticks of this process.
fn own() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_own(&stat)
}

fn parse_own(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces: count from its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_machine_line() {
        let line = "cpu  100 5 50 9000 7 3 2 11 0 0";
        assert_eq!(parse_machine(line), Some((160, 11)));
        assert_eq!(parse_machine("cpu0 1 2 3 4 5 6 7 8"), None);
    }

    #[test]
    fn reads_the_process_line() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 10 0 0 0 250 30 0 0 20 0 1 0";
        assert_eq!(parse_own(stat), Some(280));
    }

    #[test]
    fn spends_per_order() {
        let a = CpuSample {
            busy: 100,
            steal: 0,
            own: 40,
        };
        let b = CpuSample {
            busy: 300,
            steal: 10,
            own: 90,
        };
        let spent = b.since(&a).per(1000);
        assert!((spent.busy_ms - 2.0).abs() < 1e-9);
        assert!((spent.own_ms - 0.5).abs() < 1e-9);
        assert!((spent.steal_ms - 0.1).abs() < 1e-9);
        assert!(CpuSample::now().busy > 0);
    }

    #[test]
    fn labels_the_mean() {
        let spent = |busy_ms, own_ms| CpuSpent {
            busy_ms,
            own_ms,
            steal_ms: 0.0,
        };
        assert_eq!(mean_label(&[]), "n/a");
        assert_eq!(
            mean_label(&[spent(0.5, 0.2), spent(0.7, 0.3)]),
            "0.600 ms (0.250 ms)"
        );
    }
}
