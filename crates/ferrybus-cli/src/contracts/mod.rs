//! `ferrybus contracts import` and `ferrybus contracts check`: Rust for the .NET message
//! contracts of C# files, and the drift between those contracts and the messages in a queue.
//!
//! The C# is read with the tree-sitter C# grammar ([`parse`]), mapped to MassTransit's identity
//! and System.Text.Json's wire form ([`model`]), then either written as Rust ([`render`]) or
//! compared with live payloads ([`drift`]). Whatever cannot be mapped is listed with its file
//! and line on standard error and the command fails without writing anything: generated
//! contracts never silently lack a member.

pub(crate) mod drift;
pub(crate) mod model;
pub(crate) mod parse;
pub(crate) mod render;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::amqp::Broker;
use crate::error::{CliError, CliErrorKind};
use crate::queues::{progress, Snapshot};
use drift::{Finding, Severity};
use model::Model;

/// Reads, parses and maps `files`; what cannot be mapped is printed to standard error, one
/// `FILE:LINE: reason` line each, and fails the command.
pub(crate) fn load(files: &[PathBuf]) -> Result<(Model, Vec<String>), CliError> {
    let mut declarations = Vec::new();
    let mut names = Vec::new();
    for path in files {
        let name = path.display().to_string();
        let source = std::fs::read_to_string(path)
            .map_err(|e| CliError::new(CliErrorKind::Input, format!("cannot read {name}: {e}")))?;
        declarations.extend(parse::parse_file(&name, &source)?);
        names.push(name);
    }
    let (model, mut diagnostics) = model::build(&declarations);
    diagnostics.sort_by_key(|d| {
        let file = names.iter().position(|n| *n == d.location.file);
        (file, d.location.line)
    });
    if !diagnostics.is_empty() {
        let mut stderr = std::io::stderr().lock();
        for diagnostic in &diagnostics {
            writeln!(stderr, "{}: {}", diagnostic.location, diagnostic.message)?;
        }
        let n = diagnostics.len();
        return Err(CliError::new(
            CliErrorKind::Input,
            format!(
                "{n} thing{} in the C# contracts cannot be mapped (listed above); nothing was written",
                if n == 1 { "" } else { "s" }
            ),
        ));
    }
    Ok((model, names))
}

/// `contracts import`: the Rust for `files`, on standard output or in `output`.
pub(crate) fn import(files: &[PathBuf], output: Option<&Path>) -> Result<(), CliError> {
    let (model, names) = load(files)?;
    let text = render::render(&model, &names);
    match output {
        Some(path) => std::fs::write(path, text).map_err(|e| {
            CliError::new(
                CliErrorKind::Output,
                format!("cannot write {}: {e}", path.display()),
            )
        }),
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()?;
            Ok(())
        }
    }
}

/// The report of one message.
#[derive(Debug, Serialize)]
pub(crate) struct MessageReport {
    /// The message id (AMQP property, else the envelope's).
    pub(crate) message_id: Option<String>,
    /// The contract's message type it was bound to, else the envelope's first.
    pub(crate) message_type: Option<String>,
    /// What was found.
    pub(crate) findings: Vec<Finding>,
}

/// `contracts check`: peeks at up to `max` messages of `queue` and compares each with its
/// contract. Fails when an error was found.
pub(crate) async fn check(
    broker: &Broker,
    model: &Model,
    queue: &str,
    max: usize,
    json: bool,
) -> Result<(), CliError> {
    let mut snapshot = Snapshot::open(broker, queue).await?;
    let total = snapshot.total();
    let bar = progress(
        total.min(u32::try_from(max).unwrap_or(u32::MAX)),
        "checking",
    );
    let mut reports = Vec::new();
    let read: Result<(), CliError> = async {
        while reports.len() < max {
            let Some((message, _acker)) = snapshot.next().await? else {
                break;
            };
            let types = message.message_types();
            let payload = message.envelope.as_ref().map(|e| e.message.value());
            let (bound, findings) = drift::check(model, &types, payload);
            reports.push(MessageReport {
                message_id: message.message_id(),
                message_type: bound
                    .and_then(|c| c.message_urn())
                    .or_else(|| types.first().cloned()),
                findings,
            });
            bar.inc(1);
        }
        Ok(())
    }
    .await;
    bar.finish_and_clear();
    let finished = snapshot.finish().await;
    read?;
    finished?;
    let mut out = std::io::stdout().lock();
    if json {
        let text = serde_json::to_string_pretty(&reports).map_err(CliError::output)?;
        writeln!(out, "{text}")?;
    } else {
        print(&mut out, &reports, queue, total)?;
    }
    out.flush()?;
    let errors = count(&reports, Severity::Error);
    if errors > 0 {
        return Err(CliError::check(format!(
            "{errors} error{} in the messages of {queue}: .NET consumers would fail or read defaults",
            if errors == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

fn count(reports: &[MessageReport], severity: Severity) -> usize {
    reports
        .iter()
        .flat_map(|r| &r.findings)
        .filter(|f| f.severity == severity)
        .count()
}

/// `1 error`, `2 errors`.
fn counted(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn print(
    out: &mut impl Write,
    reports: &[MessageReport],
    queue: &str,
    total: u32,
) -> Result<(), CliError> {
    for report in reports {
        writeln!(
            out,
            "{}  {}",
            report.message_id.as_deref().unwrap_or("(no message id)"),
            report
                .message_type
                .as_deref()
                .unwrap_or("(no message type)")
        )?;
        if report.findings.is_empty() {
            writeln!(out, "  matches its contract")?;
        }
        for finding in &report.findings {
            let kind = serde_json::to_value(finding.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let severity = serde_json::to_value(finding.severity)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            writeln!(
                out,
                "  {severity:<7} {kind:<19} {}: {}",
                finding.path, finding.detail
            )?;
        }
    }
    writeln!(
        out,
        "{} of {total} messages in {queue} checked: {}, {}, {}; they are still in the queue",
        reports.len(),
        counted(count(reports, Severity::Error), "error"),
        counted(count(reports, Severity::Warning), "warning"),
        counted(count(reports, Severity::Note), "note"),
    )?;
    Ok(())
}

/// The `ferrybus contracts` commands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ContractsCommand {
    /// Print (or write) Rust for the message contracts of C# files: records, classes,
    /// interfaces and enums, with their MassTransit identity and .NET's JSON form.
    Import {
        /// The C# files.
        #[arg(required = true, value_name = "FILE.cs")]
        files: Vec<PathBuf>,
        /// Write the Rust to this file instead of standard output.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Compare the messages of a queue with the C# contracts, without taking them out of it.
    Check {
        /// The C# files.
        #[arg(long, required = true, num_args = 1.., value_name = "FILE.cs")]
        contracts: Vec<PathBuf>,
        /// The queue to look into.
        #[arg(long, value_name = "QUEUE")]
        queue: String,
        /// Look at no more than this many messages.
        #[arg(long, default_value_t = 100, value_name = "N")]
        max: usize,
        /// The reports as one JSON array.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `contracts` command.
pub(crate) async fn run(amqp_url: &str, command: ContractsCommand) -> Result<(), CliError> {
    match command {
        ContractsCommand::Import { files, output } => import(&files, output.as_deref()),
        ContractsCommand::Check {
            contracts,
            queue,
            max,
            json,
        } => {
            // The contracts first: a bad file needs no broker.
            let (model, _) = load(&contracts)?;
            let broker = Broker::connect(amqp_url).await?;
            let result = check(&broker, &model, &queue, max, json).await;
            broker.close().await;
            result
        }
    }
}
