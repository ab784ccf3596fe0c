//! `ferrybus`: the ferrybus operator tool, for ferrybus and .NET MassTransit services alike
//! (same queues, same headers, same tables).
//!
//! ```text
//! ferrybus errors  list|show|replay|purge <queue> …   the <queue>_error queue
//! ferrybus skipped list|show|replay|purge <queue> …   the <queue>_skipped queue
//! ferrybus outbox status                              pending outbox messages, locks, inbox
//! ferrybus migrate [--print | --check]                the messaging tables
//! ferrybus topology <endpoint>                        declared vs. on the broker
//! ferrybus envelope inspect [FILE|-]                  a MassTransit body as normalized JSON
//! ferrybus trace MESSAGE_ID                           one message in the inbox, outbox, sagas, queues
//! ferrybus contracts import FILE.cs… [--output FILE]  Rust for the .NET message contracts
//! ferrybus contracts check --contracts FILE.cs… --queue QUEUE   payloads vs. contracts
//! ```
//!
//! Every command takes `--amqp-url` / `AMQP_URL` and `--database-url` / `DATABASE_URL`. A
//! failure prints one line, `error: <reason>`, to standard error and exits with status 1;
//! misuse exits with status 2. Passwords in URLs are printed as `***`. See
//! `docs/operations.md`.

mod amqp;
mod check;
mod contracts;
mod error;
mod inspect;
mod management;
mod message;
mod outbox;
mod output;
mod queues;
mod storage;
mod topology;
mod trace;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use ferrybus_sea_orm::migrate::TableSearch;
use ferrybus_sea_orm::status::Windows;
use ferrybus_sea_orm::{defaults, Tables};
use serde_json::Value;

use crate::amqp::Broker;
use crate::error::{CliError, CliErrorKind};
use crate::message::{parse_time_arg, Filter};
use crate::queues::QueueKind;
use crate::storage::Naming;

/// The examples' broker (what `scripts/services.sh` sets up).
const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// The examples' database.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The ferrybus operator tool: error and skipped queues, the outbox, migrations and topology of
/// ferrybus and MassTransit services.
#[derive(Debug, Parser)]
#[command(name = "ferrybus", version, about, propagate_version = true)]
struct Cli {
    /// Where the broker and the database are.
    #[command(flatten)]
    connections: Connections,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// `--amqp-url` and `--database-url`, accepted by every command.
#[derive(Debug, Args)]
struct Connections {
    /// The RabbitMQ URL [default: amqp://guest:***@127.0.0.1:5672/%2f]
    #[arg(long, env = "AMQP_URL", global = true, hide_env_values = true, hide_default_value = true,
          default_value = DEFAULT_AMQP_URL, value_name = "URL")]
    amqp_url: String,
    /// The PostgreSQL URL [default: postgres://postgres@127.0.0.1:5432/test]
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true, hide_default_value = true,
          default_value = DEFAULT_DATABASE_URL, value_name = "URL")]
    database_url: String,
}

/// The top-level commands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Look into, replay or purge an error queue (`<queue>_error`).
    #[command(subcommand)]
    Errors(QueueCommand),
    /// Look into, replay or purge a skipped queue (`<queue>_skipped`).
    #[command(subcommand)]
    Skipped(QueueCommand),
    /// The outbox and inbox tables.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Create the messaging tables (inbox_state, outbox_state, outbox_message), print their
    /// DDL, or check an existing schema.
    Migrate(MigrateArgs),
    /// What ferrybus declares for an endpoint beside what the broker has.
    Topology(TopologyArgs),
    /// Work with MassTransit envelopes.
    #[command(subcommand)]
    Envelope(EnvelopeCommand),
    /// What happened to one message: its inbox rows, the outbox rows it produced, the saga
    /// instances it is linked to, its copies in `_error` and `_skipped` queues.
    Trace(trace::TraceArgs),
    /// Rust for .NET message contracts (C# files), and their drift from live messages.
    #[command(subcommand)]
    Contracts(contracts::ContractsCommand),
}

/// The verbs of `errors` and `skipped`.
#[derive(Debug, Subcommand)]
enum QueueCommand {
    /// List the messages without taking them out of the queue.
    List {
        /// The queue (`billing-invoice_error`) or its endpoint (`billing-invoice`).
        queue: String,
        #[command(flatten)]
        filter: FilterArgs,
        /// Show at most this many messages.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one message's properties, headers and body.
    Show {
        /// The queue (`billing-invoice_error`) or its endpoint (`billing-invoice`).
        queue: String,
        /// The message id.
        message_id: String,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Put messages back on their input queue; each leaves this queue only after the broker
    /// confirmed its copy.
    Replay {
        /// The queue (`billing-invoice_error`) or its endpoint (`billing-invoice`).
        queue: String,
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        filter: FilterArgs,
        /// Send them to this queue instead of their input queue.
        #[arg(long, value_name = "QUEUE")]
        to: Option<String>,
        /// The summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete messages for good (needs --yes).
    Purge {
        /// The queue (`billing-invoice_error`) or its endpoint (`billing-invoice`).
        queue: String,
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        filter: FilterArgs,
        /// Yes, delete them.
        #[arg(long)]
        yes: bool,
        /// The summary as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `--all` or `--message-id ID…`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct Which {
    /// Every message (that passes the filters).
    #[arg(long)]
    all: bool,
    /// These messages.
    #[arg(long = "message-id", value_name = "ID", num_args = 1..)]
    message_ids: Vec<String>,
}

/// Filters of the queue commands.
#[derive(Debug, Args)]
struct FilterArgs {
    /// Only messages whose type contains TEXT (`OrderPlaced`, `urn:message:Bookstore…`).
    #[arg(long = "type", value_name = "TEXT")]
    message_type: Option<String>,
    /// Only messages whose exception type or message contains TEXT.
    #[arg(long, value_name = "TEXT")]
    exception: Option<String>,
    /// Only messages faulted (else sent) at or after TIME (RFC 3339, a date, or `2h` ago).
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Only messages faulted (else sent) before TIME.
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
}

impl FilterArgs {
    fn filter(&self, message_ids: Vec<String>) -> Result<Filter, CliError> {
        let time = |flag: &str, value: &Option<String>| {
            value
                .as_deref()
                .map(|v| parse_time_arg(v).map_err(|e| CliError::usage(format!("{flag}: {e}"))))
                .transpose()
        };
        Ok(Filter {
            message_type: self.message_type.clone(),
            exception: self.exception.clone(),
            since: time("--since", &self.since)?,
            until: time("--until", &self.until)?,
            message_ids,
        })
    }
}

/// Where the messaging tables are: billing's `FERRYBUS_*` settings.
#[derive(Debug, Args)]
struct StorageArgs {
    /// Schema of the messaging tables; repeat (or separate with commas) for several.
    #[arg(
        long,
        env = "FERRYBUS_SCHEMA",
        hide_env_values = true,
        value_delimiter = ',',
        default_value = "messaging",
        value_name = "SCHEMA"
    )]
    schema: Vec<String>,
    /// Column naming: snake (inbox_state, message_id) or pascal (.NET's "InboxState", "MessageId")
    /// [default: snake; --check detects it]
    #[arg(
        long,
        env = "FERRYBUS_NAMING",
        hide_env_values = true,
        value_enum,
        value_name = "NAMING"
    )]
    naming: Option<Naming>,
    /// Inbox state table [default: inbox_state, or InboxState with pascal]
    #[arg(
        long,
        env = "FERRYBUS_INBOX_TABLE",
        hide_env_values = true,
        value_name = "TABLE"
    )]
    inbox_table: Option<String>,
    /// Outbox state table [default: outbox_state, or OutboxState with pascal]
    #[arg(
        long,
        env = "FERRYBUS_OUTBOX_STATE_TABLE",
        hide_env_values = true,
        value_name = "TABLE"
    )]
    outbox_state_table: Option<String>,
    /// Outbox message table [default: outbox_message, or OutboxMessage with pascal]
    #[arg(
        long,
        env = "FERRYBUS_OUTBOX_MESSAGE_TABLE",
        hide_env_values = true,
        value_name = "TABLE"
    )]
    outbox_message_table: Option<String>,
}

impl StorageArgs {
    fn names(&self) -> [Option<&str>; 3] {
        [
            self.inbox_table.as_deref(),
            self.outbox_state_table.as_deref(),
            self.outbox_message_table.as_deref(),
        ]
    }

    /// Where to look for the tables of each schema.
    fn searches(&self) -> Vec<TableSearch> {
        self.schemas()
            .map(|schema| storage::search(schema, self.naming, self.names()))
            .collect()
    }

    /// The tables of each schema as given (snake_case unless `--naming` says otherwise).
    fn sets(&self) -> Vec<Tables> {
        self.searches().iter().map(TableSearch::tables).collect()
    }

    fn schemas(&self) -> impl Iterator<Item = &str> {
        self.schema
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
    }
}

/// The `ferrybus outbox` commands.
#[derive(Debug, Subcommand)]
enum OutboxCommand {
    /// Pending outbox messages, who is delivering them, stranded consumer-outbox rows, the inbox.
    Status {
        #[command(flatten)]
        storage: StorageArgs,
        /// Consumed, undelivered inbox rows older than this are stranded: the sweeper (which
        /// takes such rows after a second) has not delivered them.
        #[arg(long, default_value_t = defaults::STRANDED_AFTER.into(), value_name = "DURATION")]
        stranded_after: humantime::Duration,
        /// The inbox's duplicate-detection window (delivered rows older than this are cleaned up).
        #[arg(long, default_value_t = defaults::DUPLICATE_WINDOW.into(), value_name = "DURATION")]
        cleanup_window: humantime::Duration,
        /// One JSON object per table set per line.
        #[arg(long)]
        json: bool,
    },
}

/// `ferrybus migrate`.
#[derive(Debug, Args)]
struct MigrateArgs {
    #[command(flatten)]
    storage: StorageArgs,
    /// Print the SQL instead of running it (no database needed).
    #[arg(long, conflicts_with = "check")]
    print: bool,
    /// Check the existing tables instead of creating any.
    #[arg(long)]
    check: bool,
    /// Leave out the two foreign keys of MassTransit 8.3+.
    #[arg(long, conflicts_with = "check")]
    no_foreign_keys: bool,
    /// The check's report as JSON (with --check).
    #[arg(long, requires = "check")]
    json: bool,
}

/// `ferrybus topology`.
#[derive(Debug, Args)]
struct TopologyArgs {
    /// The receive endpoint (its queue name, `billing-invoice`).
    endpoint: String,
    /// A message type the endpoint consumes, as its exchange name (`Bookstore.Contracts:OrderPlaced`); repeat for several.
    #[arg(long, value_name = "TYPE")]
    consumes: Vec<String>,
    /// The endpoint uses a quorum queue.
    #[arg(long)]
    quorum: bool,
    /// A queue argument of the endpoint (`x-delivery-limit=20`); repeat for several.
    #[arg(long = "argument", value_name = "KEY=VALUE", value_parser = parse_argument)]
    arguments: Vec<(String, Value)>,
    /// The management API [default: http(s)://<broker host>:15672/ with the broker's credentials]
    #[arg(
        long,
        env = "RABBITMQ_MANAGEMENT_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    management_url: Option<String>,
    /// One JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_argument(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    let value = if let Ok(i) = value.parse::<i64>() {
        Value::from(i)
    } else if let Ok(b) = value.parse::<bool>() {
        Value::from(b)
    } else {
        Value::from(value)
    };
    Ok((key.to_owned(), value))
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

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            report(&CliError::new(
                CliErrorKind::Output,
                format!("cannot start: {e}"),
            ));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if error.is_reported() {
                report(&error);
            }
            ExitCode::from(error.exit_code())
        }
    }
}

/// Help and version go out as clap writes them; a usage error as one line, status 2.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
        }
        _ => {
            let rendered = error.render().to_string();
            // The first paragraph is the reason (clap may spread it over several lines).
            let first = rendered
                .split("\n\n")
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ")
                .to_owned();
            let usage = rendered
                .lines()
                .find_map(|l| l.strip_prefix("Usage: "))
                .map(|u| format!(" (usage: {u})"))
                .unwrap_or_default();
            report(&CliError::usage(format!("{first}{usage}")));
            ExitCode::from(2)
        }
    }
}

/// Runs the command the user asked for.
async fn run(cli: Cli) -> Result<(), CliError> {
    let Connections {
        amqp_url,
        database_url,
    } = cli.connections;
    match cli.command {
        Command::Errors(command) => queue_command(&amqp_url, QueueKind::Error, command).await,
        Command::Skipped(command) => queue_command(&amqp_url, QueueKind::Skipped, command).await,
        Command::Outbox(OutboxCommand::Status {
            storage,
            stranded_after,
            cleanup_window,
            json,
        }) => {
            countable("--stranded-after", stranded_after)?;
            countable("--cleanup-window", cleanup_window)?;
            let windows = Windows::default()
                .stranded_after(stranded_after.into())
                .cleanup_window(cleanup_window.into());
            outbox_status(&database_url, &storage, windows, json).await
        }
        Command::Migrate(args) => migrate(&database_url, &args).await,
        Command::Topology(args) => topology_command(&amqp_url, args).await,
        Command::Envelope(EnvelopeCommand::Inspect { file }) => inspect_command(file.as_deref()),
        Command::Trace(args) => trace::run(&amqp_url, &database_url, args).await,
        Command::Contracts(command) => contracts::run(&amqp_url, command).await,
    }
}

/// Refuses a window that reaches before the earliest date there is: nothing could be counted
/// against it.
fn countable(flag: &str, window: humantime::Duration) -> Result<(), CliError> {
    let fits = chrono::Duration::from_std(window.into())
        .ok()
        .and_then(|window| chrono::Utc::now().checked_sub_signed(window))
        .is_some();
    if fits {
        Ok(())
    } else {
        Err(CliError::new(
            CliErrorKind::Usage,
            format!("{flag} {window} is too long: it reaches before the earliest date there is"),
        ))
    }
}

async fn queue_command(
    amqp_url: &str,
    kind: QueueKind,
    command: QueueCommand,
) -> Result<(), CliError> {
    // Check the arguments before connecting.
    let (queue, run): (String, QueueRun) = match command {
        QueueCommand::List {
            queue,
            filter,
            limit,
            json,
        } => (
            queue,
            QueueRun::List {
                filter: filter.filter(Vec::new())?,
                limit,
                json,
            },
        ),
        QueueCommand::Show {
            queue,
            message_id,
            json,
        } => (queue, QueueRun::Show { message_id, json }),
        QueueCommand::Replay {
            queue,
            which,
            filter,
            to,
            json,
        } => (
            queue,
            QueueRun::Replay {
                filter: filter.filter(which.message_ids)?,
                to,
                json,
            },
        ),
        QueueCommand::Purge {
            queue,
            which,
            filter,
            yes,
            json,
        } => {
            if !yes {
                return Err(CliError::usage(
                    "purge deletes messages for good: add --yes to confirm (list them first with `list`)",
                ));
            }
            (
                queue,
                QueueRun::Purge {
                    filter: filter.filter(which.message_ids)?,
                    json,
                },
            )
        }
    };
    let queue = kind.resolve(&queue);
    let broker = Broker::connect(amqp_url).await?;
    let result = match run {
        QueueRun::List {
            filter,
            limit,
            json,
        } => queues::list(&broker, kind, &queue, &filter, limit, json).await,
        QueueRun::Show { message_id, json } => {
            queues::show(&broker, &queue, &message_id, json).await
        }
        QueueRun::Replay { filter, to, json } => {
            queues::replay(&broker, kind, &queue, &filter, to.as_deref(), json).await
        }
        QueueRun::Purge { filter, json } => queues::purge(&broker, &queue, &filter, json).await,
    };
    broker.close().await;
    result
}

/// A queue command with its arguments checked.
enum QueueRun {
    List {
        filter: Filter,
        limit: Option<usize>,
        json: bool,
    },
    Show {
        message_id: String,
        json: bool,
    },
    Replay {
        filter: Filter,
        to: Option<String>,
        json: bool,
    },
    Purge {
        filter: Filter,
        json: bool,
    },
}

async fn outbox_status(
    database_url: &str,
    storage: &StorageArgs,
    windows: Windows,
    json: bool,
) -> Result<(), CliError> {
    let db = storage::connect(database_url).await?;
    let result = outbox_statuses(&db, storage, windows, json).await;
    let _ = db.close().await;
    result
}

async fn outbox_statuses(
    db: &sea_orm::DatabaseConnection,
    storage: &StorageArgs,
    windows: Windows,
    json: bool,
) -> Result<(), CliError> {
    let mut sets = Vec::new();
    for search in storage.searches() {
        // The tables must exist; without --naming, take the naming they have (a .NET schema).
        let report = check::read(db, &search).await?;
        sets.push(check::status_tables(report)?);
    }
    let mut out = io::stdout().lock();
    for tables in &sets {
        let status = outbox::status(db, tables, windows).await?;
        if json {
            writeln!(
                out,
                "{}",
                serde_json::to_string(&status).map_err(CliError::output)?
            )?;
        } else {
            outbox::print(&mut out, &status)?;
        }
    }
    out.flush()?;
    Ok(())
}

async fn migrate(database_url: &str, args: &MigrateArgs) -> Result<(), CliError> {
    let foreign_keys = !args.no_foreign_keys;
    if args.print {
        let mut out = io::stdout().lock();
        for set in args.storage.sets() {
            writeln!(out, "-- {}", storage::env(&set))?;
            write!(out, "{}", storage::migration_sql(&set, foreign_keys))?;
        }
        out.flush()?;
        return Ok(());
    }
    let db = storage::connect(database_url).await?;
    let result = if args.check {
        check_schemas(&db, &args.storage, args.json).await
    } else {
        let mut out = io::stdout().lock();
        let mut result = Ok(());
        for set in args.storage.sets() {
            if let Err(e) = storage::run_migration(&db, &set, foreign_keys).await {
                result = Err(e);
                break;
            }
            writeln!(
                out,
                "schema {}: {}, {}, {} are in place ({} naming)",
                set.schema_name(),
                set.inbox_state(),
                set.outbox_state(),
                set.outbox_message(),
                Naming::name_of(set.naming_style())
            )?;
        }
        result
    };
    let _ = db.close().await;
    result
}

async fn check_schemas(
    db: &sea_orm::DatabaseConnection,
    storage: &StorageArgs,
    json: bool,
) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    let mut failed = Vec::new();
    for search in storage.searches() {
        let report = check::report(&check::read(db, &search).await?);
        if json {
            writeln!(
                out,
                "{}",
                serde_json::to_string(&report).map_err(CliError::output)?
            )?;
        } else {
            check::print(&mut out, &report)?;
        }
        if !report.ok {
            failed.push(report.schema);
        }
    }
    out.flush()?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::check(format!(
            "ferrybus cannot use the tables of schema {} as they are",
            failed.join(", ")
        )))
    }
}

async fn topology_command(amqp_url: &str, args: TopologyArgs) -> Result<(), CliError> {
    let spec = topology::EndpointSpec {
        name: args.endpoint,
        consumes: args.consumes,
        quorum: args.quorum,
        arguments: args.arguments,
    };
    let broker = Broker::connect(amqp_url).await?;
    let result = topology::compare(&broker, amqp_url, args.management_url.as_deref(), &spec).await;
    broker.close().await;
    let comparison = result?;
    let mut out = io::stdout().lock();
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&topology::to_json(&comparison))
                .map_err(CliError::output)?
        )?;
    } else {
        topology::print(&mut out, &comparison)?;
    }
    out.flush()?;
    if comparison.differences > 0 {
        let n = comparison.differences;
        return Err(CliError::check(format!(
            "the broker's topology for {} differs from what ferrybus declares ({n} difference{})",
            comparison.endpoint,
            if n == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// `ferrybus envelope inspect`: read, normalize, print.
fn inspect_command(file: Option<&Path>) -> Result<(), CliError> {
    let body = read_input(file)?;
    let inspection = inspect::inspect(&body)?;
    let text = serde_json::to_string_pretty(&inspection).map_err(CliError::output)?;
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "{text}").and_then(|()| stdout.flush())?;
    Ok(())
}

/// Reads the whole body from `file`, or from standard input when it is `-` or absent.
fn read_input(file: Option<&Path>) -> Result<Vec<u8>, CliError> {
    let read_error = |input: &str, error: io::Error| {
        CliError::new(CliErrorKind::Input, format!("cannot read {input}: {error}"))
    };
    match file {
        Some(path) if path != Path::new("-") => {
            std::fs::read(path).map_err(|e| read_error(&path.display().to_string(), e))
        }
        _ => {
            let mut body = Vec::new();
            io::stdin()
                .lock()
                .read_to_end(&mut body)
                .map_err(|e| read_error("standard input", e))?;
            Ok(body)
        }
    }
}

/// Prints `error: <reason>` as a single line to standard error.
fn report(error: &CliError) {
    // Nothing sensible is left to do if standard error itself cannot be written.
    let _ = writeln!(io::stderr().lock(), "error: {error}");
}
