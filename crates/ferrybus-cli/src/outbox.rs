//! `ferrybus outbox status`: the storage crate's status of a table set
//! ([`ferrybus_sea_orm::status::outbox_status_with`]: what waits in the bus outbox, who is
//! delivering it, the consumer outbox and its stranded rows, the inbox and the rows past the
//! cleanup window, from one read-only snapshot), as a table for people and JSON for scripts.

use std::io::Write;
use std::time::Duration;

use chrono::TimeDelta;
use ferrybus_sea_orm::status::{self, OutboxStatus, Windows};
use ferrybus_sea_orm::Tables;
use sea_orm::DatabaseConnection;
use serde::Serialize;

use crate::error::CliError;
use crate::storage::Naming;

/// The status of one table set (one line of `--json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Status {
    /// The schema.
    pub(crate) schema: String,
    /// The naming (`snake`, `pascal`).
    pub(crate) naming: &'static str,
    /// The three tables: inbox state, outbox state, outbox message.
    pub(crate) tables: [String; 3],
    /// The bus outbox.
    pub(crate) bus_outbox: BusOutbox,
    /// The consumer outbox.
    pub(crate) consumer_outbox: ConsumerOutbox,
    /// The inbox.
    pub(crate) inbox: Inbox,
}

/// Bus-outbox figures.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BusOutbox {
    /// Outbox states not delivered.
    pub(crate) outboxes: i64,
    /// Messages waiting in them.
    pub(crate) messages: i64,
    /// Age of the oldest waiting message (its `SentTime`), in seconds.
    pub(crate) oldest_message_age_seconds: Option<f64>,
    /// Sessions holding locks on outbox states now.
    pub(crate) being_delivered: Vec<Deliverer>,
}

/// A session delivering outboxes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Deliverer {
    /// The backend's process id.
    pub(crate) pid: i32,
    /// Its `application_name`.
    pub(crate) application: Option<String>,
    /// Its client address.
    pub(crate) client: Option<String>,
    /// Its database user.
    pub(crate) user: Option<String>,
    /// How many outbox states it has locked.
    pub(crate) outboxes: i64,
    /// How long its transaction has been open, in seconds.
    pub(crate) transaction_age_seconds: Option<f64>,
}

/// Consumer-outbox figures.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConsumerOutbox {
    /// Messages of consumed inbox rows, not sent yet.
    pub(crate) messages: i64,
    /// Age of the oldest of them, in seconds.
    pub(crate) oldest_message_age_seconds: Option<f64>,
    /// Inbox rows consumed but not delivered.
    pub(crate) pending_inbox_rows: i64,
    /// Of those, how many are older than `strandedAfterSeconds`: the sweeper, which takes such
    /// rows after a second, has not delivered them.
    pub(crate) stranded: i64,
    /// The stranded threshold, in seconds.
    pub(crate) stranded_after_seconds: u64,
    /// The oldest stranded entries (at most 20), oldest first: those the sweeper keeps failing
    /// on, and has set aside, are among them.
    pub(crate) stranded_entries: Vec<StrandedEntry>,
}

/// A stranded consumer-outbox entry.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StrandedEntry {
    /// The inbox row's message id.
    pub(crate) message_id: String,
    /// Its consumer id.
    pub(crate) consumer_id: String,
    /// How long ago it was consumed, in seconds.
    pub(crate) consumed_age_seconds: Option<f64>,
    /// Its messages waiting.
    pub(crate) messages: i64,
}

/// Inbox figures.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Inbox {
    /// All rows.
    pub(crate) rows: i64,
    /// Rows delivered.
    pub(crate) delivered: i64,
    /// Rows never consumed (a delivery that failed before its consumer finished, written by .NET).
    pub(crate) not_consumed: i64,
    /// Delivered rows older than the cleanup window.
    pub(crate) past_cleanup_window: i64,
    /// The cleanup window, in seconds.
    pub(crate) cleanup_window_seconds: u64,
    /// Age of the oldest delivered row, in seconds.
    pub(crate) oldest_delivered_age_seconds: Option<f64>,
}

/// Reads the status of `tables` (found by the schema check) with `windows`.
pub(crate) async fn status(
    db: &DatabaseConnection,
    tables: &Tables,
    windows: Windows,
) -> Result<Status, CliError> {
    let status = status::outbox_status_with(db, tables, windows)
        .await
        .map_err(|e| {
            CliError::database(
                format!(
                    "reading the outbox tables of schema {}",
                    tables.schema_name()
                ),
                e,
            )
        })?;
    Ok(present(tables, &status))
}

fn seconds(age: Option<TimeDelta>) -> Option<f64> {
    age.map(TimeDelta::as_seconds_f64)
}

/// The storage crate's figures as the tool reports them: ages in seconds from the snapshot's
/// time.
fn present(tables: &Tables, s: &OutboxStatus) -> Status {
    let (b, c, i) = (&s.bus_outbox, &s.consumer_outbox, &s.inbox);
    Status {
        schema: tables.schema_name().to_owned(),
        naming: Naming::name_of(tables.naming_style()),
        tables: [
            tables.inbox_state().to_owned(),
            tables.outbox_state().to_owned(),
            tables.outbox_message().to_owned(),
        ],
        bus_outbox: BusOutbox {
            outboxes: b.outboxes,
            messages: b.messages,
            oldest_message_age_seconds: seconds(s.age(b.oldest_message)),
            being_delivered: b
                .being_delivered
                .iter()
                .map(|d| Deliverer {
                    pid: d.pid,
                    application: d.application.clone(),
                    client: d.client.clone(),
                    user: d.user.clone(),
                    outboxes: d.outboxes,
                    transaction_age_seconds: seconds(s.age(d.transaction_start)),
                })
                .collect(),
        },
        consumer_outbox: ConsumerOutbox {
            messages: c.messages,
            oldest_message_age_seconds: seconds(s.age(c.oldest_message)),
            pending_inbox_rows: c.pending_inbox_rows,
            stranded: c.stranded,
            stranded_after_seconds: s.windows.stranded_after.as_secs(),
            stranded_entries: c
                .stranded_entries
                .iter()
                .map(|e| StrandedEntry {
                    message_id: e.message_id.to_string(),
                    consumer_id: e.consumer_id.to_string(),
                    consumed_age_seconds: seconds(s.age(e.consumed)),
                    messages: e.messages,
                })
                .collect(),
        },
        inbox: Inbox {
            rows: i.rows,
            delivered: i.delivered,
            not_consumed: i.not_consumed,
            past_cleanup_window: i.past_cleanup_window,
            cleanup_window_seconds: s.windows.cleanup_window.as_secs(),
            oldest_delivered_age_seconds: seconds(s.age(i.oldest_delivered)),
        },
    }
}

fn age(seconds: Option<f64>) -> String {
    match seconds {
        None => "-".to_owned(),
        Some(s) => {
            let whole = Duration::from_secs(s.max(0.0).round() as u64);
            humantime::format_duration(whole).to_string()
        }
    }
}

/// Prints `s` for people.
pub(crate) fn print(out: &mut impl Write, s: &Status) -> Result<(), CliError> {
    use comfy_table::{presets, Table};
    writeln!(
        out,
        "schema {} ({} naming: {}, {}, {})",
        s.schema, s.naming, s.tables[0], s.tables[1], s.tables[2]
    )?;
    let mut table = Table::new();
    table.load_preset(presets::UTF8_FULL_CONDENSED);
    table.set_header(["", "now", "oldest"]);
    let b = &s.bus_outbox;
    table.add_row([
        "bus outbox: pending messages".to_owned(),
        format!("{} in {} outboxes", b.messages, b.outboxes),
        age(b.oldest_message_age_seconds),
    ]);
    let delivering = if b.being_delivered.is_empty() {
        "nobody".to_owned()
    } else {
        b.being_delivered
            .iter()
            .map(|d| {
                format!(
                    "pid {} {}{}{} ({} outboxes)",
                    d.pid,
                    d.application.as_deref().unwrap_or("(no application name)"),
                    d.user
                        .as_deref()
                        .map(|u| format!(" as {u}"))
                        .unwrap_or_default(),
                    d.client
                        .as_deref()
                        .map(|c| format!(" from {c}"))
                        .unwrap_or_default(),
                    d.outboxes
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    table.add_row([
        "bus outbox: being delivered by".to_owned(),
        delivering,
        "-".to_owned(),
    ]);
    let c = &s.consumer_outbox;
    table.add_row([
        "consumer outbox: messages to send".to_owned(),
        c.messages.to_string(),
        age(c.oldest_message_age_seconds),
    ]);
    table.add_row([
        "consumer outbox: consumed, not delivered".to_owned(),
        format!(
            "{} ({} stranded, older than {})",
            c.pending_inbox_rows,
            c.stranded,
            age(Some(c.stranded_after_seconds as f64))
        ),
        "-".to_owned(),
    ]);
    for e in &c.stranded_entries {
        table.add_row([
            "consumer outbox: stranded".to_owned(),
            format!(
                "message {} consumer {} ({} messages)",
                e.message_id, e.consumer_id, e.messages
            ),
            age(e.consumed_age_seconds),
        ]);
    }
    let i = &s.inbox;
    table.add_row([
        "inbox: rows".to_owned(),
        format!(
            "{} ({} delivered, {} not consumed)",
            i.rows, i.delivered, i.not_consumed
        ),
        age(i.oldest_delivered_age_seconds),
    ]);
    table.add_row([
        "inbox: past the cleanup window".to_owned(),
        format!(
            "{} (older than {})",
            i.past_cleanup_window,
            age(Some(i.cleanup_window_seconds as f64))
        ),
        "-".to_owned(),
    ]);
    writeln!(out, "{table}")?;
    Ok(())
}
