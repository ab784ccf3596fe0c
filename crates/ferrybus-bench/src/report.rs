//! Results: one row per figure, each beside its baseline; printed as a table and written as JSON.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use serde::Serialize;
use serde_json::{json, Value};

/// Every round's figure in run order, e.g. `1915 / 1351 / 1489` (`-` for a round that produced
/// none): the table reports each side's best round, and on a shared host the rounds of one side can
/// differ by a fifth, so the notes show them all.
pub(crate) fn rounds_label(rates: impl IntoIterator<Item = Option<f64>>) -> String {
    let rounds: Vec<String> = rates
        .into_iter()
        .map(|rate| rate.map_or_else(|| "-".to_owned(), |r| format!("{r:.0}")))
        .collect();
    if rounds.is_empty() {
        "-".to_owned()
    } else {
        rounds.join(" / ")
    }
}

/// A measured figure, or why there is none.
#[derive(Clone, Debug)]
pub(crate) enum Measure {
    /// A number in the row's unit.
    Value(f64),
    /// Not measured, and why.
    Na(String),
}

impl Measure {
    /// Not measured because of `reason`.
    pub(crate) fn na(reason: impl Into<String>) -> Self {
        Measure::Na(reason.into())
    }

    /// The number, if measured.
    pub(crate) fn value(&self) -> Option<f64> {
        match self {
            Measure::Value(v) => Some(*v),
            Measure::Na(_) => None,
        }
    }

    fn display(&self, unit: &str) -> String {
        match self {
            Measure::Value(v) => format_value(*v, unit),
            Measure::Na(reason) => format!("n/a ({reason})"),
        }
    }
}

impl Serialize for Measure {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Measure::Value(v) => s.serialize_f64((v * 1000.0).round() / 1000.0),
            Measure::Na(reason) => json!({ "na": reason }).serialize(s),
        }
    }
}

impl<E: std::fmt::Display> From<Result<f64, E>> for Measure {
    fn from(result: Result<f64, E>) -> Self {
        match result {
            Ok(v) => Measure::Value(v),
            Err(e) => Measure::Na(format!("failed: {e}")),
        }
    }
}

fn format_value(v: f64, unit: &str) -> String {
    match unit {
        "msg/s" | "rows/s" => format!("{v:.0} {unit}"),
        "ms" => format!("{v:.2} ms"),
        "MiB" => format!("{v:.1} MiB"),
        _ => format!("{v:.3} {unit}"),
    }
}

/// How a ratio or figure is judged against its target.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// The target is met.
    Meets,
    /// The target is missed.
    Misses,
    /// Nothing to judge (a figure is missing, or the row has no target).
    NotJudged,
}

/// A target: what the row's ratio (or figure) must reach.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Target {
    /// What is printed.
    pub(crate) text: String,
    /// The ratio must be at least this.
    pub(crate) min_ratio: Option<f64>,
    /// The ferrybus figure must be at least this.
    pub(crate) min_value: Option<f64>,
    /// The ferrybus figure must be below this.
    pub(crate) max_value: Option<f64>,
}

impl Target {
    /// No target.
    pub(crate) fn none() -> Self {
        Self::text("")
    }

    /// A target described only in words.
    pub(crate) fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            min_ratio: None,
            min_value: None,
            max_value: None,
        }
    }

    /// The ratio must reach `min`.
    pub(crate) fn ratio(min: f64) -> Self {
        Self {
            min_ratio: Some(min),
            ..Self::text(format!(">= {min:.1}x"))
        }
    }

    /// The ferrybus figure must reach `min`.
    pub(crate) fn at_least(min: f64, text: impl Into<String>) -> Self {
        Self {
            min_value: Some(min),
            ..Self::text(text)
        }
    }

    /// The ferrybus figure must stay below `max`.
    pub(crate) fn below(max: f64, text: impl Into<String>) -> Self {
        Self {
            max_value: Some(max),
            ..Self::text(text)
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Row {
    /// The scenario, e.g. `1 inbox consumer`.
    pub(crate) scenario: String,
    /// The metric, e.g. `throughput`.
    pub(crate) metric: String,
    /// The unit of both figures.
    pub(crate) unit: String,
    /// The ferrybus figure.
    pub(crate) ferrybus: Measure,
    /// What the baseline is.
    pub(crate) baseline_name: String,
    /// The baseline figure, measured in the same run.
    pub(crate) baseline: Measure,
    /// ferrybus / baseline (for latencies: baseline / ferrybus, so higher is better).
    pub(crate) ratio: Option<f64>,
    /// The target.
    pub(crate) target: Target,
    /// Whether the target is met.
    pub(crate) verdict: Verdict,
    /// Anything worth knowing about the figures.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) note: String,
}

impl Row {
    /// A row; the ratio and verdict are computed (`higher_is_better` says which way).
    pub(crate) fn new(
        scenario: &str,
        metric: &str,
        unit: &str,
        ferrybus: Measure,
        baseline_name: &str,
        baseline: Measure,
        target: Target,
    ) -> Self {
        let higher_is_better = unit != "ms" && unit != "MiB";
        let ratio = match (ferrybus.value(), baseline.value()) {
            (Some(f), Some(b)) if f > 0.0 && b > 0.0 => {
                Some(if higher_is_better { f / b } else { b / f })
            }
            _ => None,
        };
        let mut row = Self {
            scenario: scenario.to_owned(),
            metric: metric.to_owned(),
            unit: unit.to_owned(),
            ferrybus,
            baseline_name: baseline_name.to_owned(),
            baseline,
            ratio,
            target,
            verdict: Verdict::NotJudged,
            note: String::new(),
        };
        row.verdict = row.judge();
        row
    }

    /// Drops the ratio (figures whose quotient means nothing, like a growth near zero).
    pub(crate) fn no_ratio(mut self) -> Self {
        self.ratio = None;
        self
    }

    /// Adds a note.
    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    fn judge(&self) -> Verdict {
        let t = &self.target;
        if t.min_ratio.is_none() && t.min_value.is_none() && t.max_value.is_none() {
            return Verdict::NotJudged;
        }
        let mut ok = true;
        if let Some(min) = t.min_ratio {
            match self.ratio {
                Some(r) => ok &= r >= min,
                None => return Verdict::NotJudged,
            }
        }
        let value = self.ferrybus.value();
        if let Some(min) = t.min_value {
            match value {
                Some(v) => ok &= v >= min,
                None => return Verdict::NotJudged,
            }
        }
        if let Some(max) = t.max_value {
            match value {
                Some(v) => ok &= v < max,
                None => return Verdict::NotJudged,
            }
        }
        if ok {
            Verdict::Meets
        } else {
            Verdict::Misses
        }
    }
}

/// The machine and build the figures come from.
pub(crate) fn machine_info() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let mem_total_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| crate::memory::field_kib(&m, "MemTotal:"));
    json!({
        "nproc": command_output("nproc", &[]).and_then(|s| s.parse::<u64>().ok()),
        "cpu_model": cpu_model,
        "mem_total_gib": mem_total_kib.map(|k| ((k as f64 / 1024.0 / 1024.0) * 10.0).round() / 10.0),
        "kernel": command_output("uname", &["-r"]),
        "rustc": command_output("rustc", &["--version"]),
        "git_commit": command_output("git", &["rev-parse", "--short", "HEAD"]),
        "git_dirty": command_output("git", &["status", "--porcelain"]).map(|s| !s.is_empty()),
        "postgres": Value::Null,
        "rabbitmq": command_output("rabbitmqctl", &["version"]),
    })
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The whole report.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// When the run started (RFC 3339).
    pub(crate) started: String,
    /// How long the run took, in seconds.
    pub(crate) duration_s: f64,
    /// The machine.
    pub(crate) machine: Value,
    /// The settings (command-line flags).
    pub(crate) settings: Value,
    /// The figures.
    pub(crate) rows: Vec<Row>,
    /// Extra series (memory samples, latency histograms).
    pub(crate) details: Value,
    /// Messages that went missing or errors, per scenario.
    pub(crate) failures: Vec<String>,
}

impl Report {
    /// The table as text (Markdown, readable in a terminal too).
    pub(crate) fn table(&self) -> String {
        let header = [
            "scenario",
            "metric",
            "ferrybus",
            "baseline",
            "baseline figure",
            "ratio",
            "target",
            "verdict",
        ];
        let mut lines: Vec<[String; 8]> = Vec::new();
        for r in &self.rows {
            lines.push([
                r.scenario.clone(),
                r.metric.clone(),
                r.ferrybus.display(&r.unit),
                r.baseline_name.clone(),
                r.baseline.display(&r.unit),
                r.ratio
                    .map(|x| format!("{x:.2}x"))
                    .unwrap_or_else(|| "-".into()),
                r.target.text.clone(),
                match r.verdict {
                    Verdict::Meets => "meets".into(),
                    Verdict::Misses => "MISSES".into(),
                    Verdict::NotJudged => "-".into(),
                },
            ]);
        }
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for l in &lines {
            for (w, c) in widths.iter_mut().zip(l.iter()) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let row = |out: &mut String, cells: &[String]| {
            out.push('|');
            for (c, w) in cells.iter().zip(&widths) {
                let _ = write!(out, " {c:<w$} |");
            }
            out.push('\n');
        };
        row(&mut out, &header.map(String::from));
        out.push('|');
        for w in &widths {
            let _ = write!(out, "{}|", "-".repeat(w + 2));
        }
        out.push('\n');
        for l in &lines {
            row(&mut out, l);
        }
        let notes: Vec<String> = self
            .rows
            .iter()
            .filter(|r| !r.note.is_empty())
            .map(|r| format!("- {} / {}: {}", r.scenario, r.metric, r.note))
            .collect();
        if !notes.is_empty() {
            out.push('\n');
            out.push_str(&notes.join("\n"));
            out.push('\n');
        }
        out
    }

    /// Writes the report as pretty JSON to `path`, creating its folder.
    pub(crate) fn write_json(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

#[cfg(test)]
mod tests {
    use super::rounds_label;

    #[test]
    fn rounds_are_listed_in_run_order_with_gaps_marked() {
        assert_eq!(
            rounds_label([Some(1915.4), None, Some(1489.6)]),
            "1915 / - / 1490"
        );
        assert_eq!(rounds_label([]), "-");
    }
}
