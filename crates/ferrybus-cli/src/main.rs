//! `ferrybus`: the ferrybus operator tool.
//!
//! `ferrybus envelope inspect [FILE|-]` reads a MassTransit message body (a file, or standard
//! input when FILE is `-` or absent) and prints it as one normalized, pretty-printed JSON object.
//! On invalid input it prints one line, `error: <reason>`, to standard error and exits with
//! status 1; usage errors exit with status 2.

mod inspect;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ferrybus_core::EnvelopeError;

/// The ferrybus operator tool.
#[derive(Debug, Parser)]
#[command(name = "ferrybus", version, about)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The top-level commands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Work with MassTransit envelopes.
    #[command(subcommand)]
    Envelope(EnvelopeCommand),
}

/// The `ferrybus envelope` commands.
#[derive(Debug, Subcommand)]
enum EnvelopeCommand {
    /// Parse a MassTransit message body and print it as normalized JSON.
    Inspect {
        /// The message body file; `-` or absent reads standard input.
        file: Option<PathBuf>,
    },
}

/// Why a command failed. `Display` is the reason printed after `error: `.
#[derive(Debug, thiserror::Error)]
enum CliError {
    /// The input could not be read.
    #[error("cannot read {input}: {error}")]
    Read {
        /// The file name, or `standard input`.
        input: String,
        /// The I/O error.
        error: io::Error,
    },
    /// The input is not a usable MassTransit envelope.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The output could not be produced or written.
    #[error("cannot write output: {0}")]
    Write(String),
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            report(&error);
            ExitCode::FAILURE
        }
    }
}

/// Runs the command the user asked for.
fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Envelope(EnvelopeCommand::Inspect { file }) => inspect_command(file.as_deref()),
    }
}

/// `ferrybus envelope inspect`: read, normalize, print.
fn inspect_command(file: Option<&Path>) -> Result<(), CliError> {
    let body = read_input(file)?;
    let inspection = inspect::inspect(&body)?;
    let text =
        serde_json::to_string_pretty(&inspection).map_err(|e| CliError::Write(e.to_string()))?;
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::Write(e.to_string()))
}

/// Reads the whole body from `file`, or from standard input when it is `-` or absent.
fn read_input(file: Option<&Path>) -> Result<Vec<u8>, CliError> {
    match file {
        Some(path) if path != Path::new("-") => {
            std::fs::read(path).map_err(|error| CliError::Read {
                input: path.display().to_string(),
                error,
            })
        }
        _ => {
            let mut body = Vec::new();
            io::stdin()
                .lock()
                .read_to_end(&mut body)
                .map_err(|error| CliError::Read {
                    input: "standard input".to_owned(),
                    error,
                })?;
            Ok(body)
        }
    }
}

/// Prints `error: <reason>` as a single line to standard error.
fn report(error: &CliError) {
    let reason = error.to_string();
    let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    // Nothing sensible is left to do if standard error itself cannot be written.
    let _ = writeln!(io::stderr().lock(), "error: {reason}");
}
