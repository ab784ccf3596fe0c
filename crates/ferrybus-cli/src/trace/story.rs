//! The trace for people: what each store says about the message, as sentences.

use std::io::Write;

use ferrybus_core::message::URN_PREFIX;

use super::queues::Copy;
use super::tables::{InboxEntry, OutboxEntry, SagaEntry};
use super::Trace;
use crate::error::CliError;

/// How many lines of a stack trace the story shows.
const STACK_LINES: usize = 3;

/// How much of a stack trace line the story shows.
const LINE_WIDTH: usize = 120;

/// `text` cut to `max` characters, `…` marking the cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// `n thing` or `n things`.
fn count(n: impl Into<u64>, thing: &str) -> String {
    let n = n.into();
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// Writes the story of `trace`.
pub(crate) fn write(out: &mut impl Write, trace: &Trace) -> Result<(), CliError> {
    writeln!(out, "message {}", trace.message_id)?;
    let faulted = trace.queues.copies.iter().any(|c| c.kind == "error");
    inbox(out, &trace.inbox, faulted)?;
    outbox(out, &trace.outbox, &trace.produced)?;
    sagas(out, &trace.sagas)?;
    queues(out, trace)?;
    Ok(())
}

fn dash(value: Option<&str>) -> &str {
    value.unwrap_or("-")
}

fn short_type(types: &str) -> String {
    let first = types.split(';').next().unwrap_or(types);
    first.strip_prefix(URN_PREFIX).unwrap_or(first).to_owned()
}

fn inbox(out: &mut impl Write, rows: &[InboxEntry], faulted: bool) -> Result<(), CliError> {
    writeln!(out)?;
    if rows.is_empty() {
        let why = if faulted {
            " (a ferrybus consumer's row rolls back with its failed work)"
        } else {
            ""
        };
        writeln!(out, "inbox: no consumer has a row for it{why}")?;
        return Ok(());
    }
    writeln!(out, "inbox: {}", count(rows.len() as u64, "consumer row"))?;
    for row in rows {
        let consumer = row
            .consumer
            .as_deref()
            .unwrap_or("(consumer not named; see --consumer)");
        writeln!(
            out,
            "  {consumer}, consumer id {} (schema {})",
            row.consumer_id, row.schema
        )?;
        let copies = match row.receive_count {
            0 => "once".to_owned(),
            n => format!("{} times", n + 1),
        };
        writeln!(
            out,
            "    received  {} ({copies})",
            dash(row.received.as_deref())
        )?;
        match (&row.consumed, &row.delivered) {
            (None, _) => writeln!(
                out,
                "    not consumed: the consumer did not commit (it failed, or is still running)"
            )?,
            (Some(consumed), delivered) => {
                writeln!(out, "    consumed  {consumed}")?;
                match delivered {
                    Some(delivered) => writeln!(
                        out,
                        "    delivered {delivered}: every message it produced was sent"
                    )?,
                    None => writeln!(
                        out,
                        "    not delivered: messages it produced wait to be sent (last sent: #{})",
                        row.last_sequence_number
                            .map_or_else(|| "none".to_owned(), |n| n.to_string())
                    )?,
                }
            }
        }
    }
    Ok(())
}

fn outbox(
    out: &mut impl Write,
    own: &[OutboxEntry],
    produced: &[OutboxEntry],
) -> Result<(), CliError> {
    writeln!(out)?;
    if own.is_empty() && produced.is_empty() {
        writeln!(
            out,
            "outbox: nothing of it waits to be sent, nothing it produced either"
        )?;
        return Ok(());
    }
    for row in own {
        match (row.outbox_id, row.inbox_message_id) {
            (Some(outbox), _) => writeln!(
                out,
                "outbox: it waits in bus outbox {outbox} (schema {}) as #{}, to {}",
                row.schema,
                row.sequence_number,
                dash(row.destination_address.as_deref())
            )?,
            (None, Some(parent)) => writeln!(
                out,
                "outbox: it waits to be sent as #{} of the messages produced by message {parent} in {} (schema {}), to {}",
                row.sequence_number,
                row.inbox_consumer
                    .as_deref()
                    .map_or_else(|| format!("consumer {}", dash(row.inbox_consumer_id.map(|c| c.to_string()).as_deref())), str::to_owned),
                row.schema,
                dash(row.destination_address.as_deref())
            )?,
            (None, None) => writeln!(out, "outbox: it has a row #{} (schema {})", row.sequence_number, row.schema)?,
        }
    }
    if !produced.is_empty() {
        let n = produced.len() as u64;
        writeln!(
            out,
            "outbox: {} it produced {} to be sent",
            count(n, "message"),
            if n == 1 { "waits" } else { "wait" }
        )?;
        for row in produced {
            let consumer = row.inbox_consumer.clone().unwrap_or_else(|| {
                format!(
                    "consumer {}",
                    dash(row.inbox_consumer_id.map(|c| c.to_string()).as_deref())
                )
            });
            let due = row
                .enqueue_time
                .as_deref()
                .map(|t| format!(", due {t}"))
                .unwrap_or_default();
            writeln!(
                out,
                "  #{} {} {} to {} (by {consumer}, written {}{due})",
                row.sequence_number,
                short_type(&row.message_type),
                row.message_id,
                dash(row.destination_address.as_deref()),
                dash(row.sent_time.as_deref()),
            )?;
        }
    }
    Ok(())
}

fn sagas(out: &mut impl Write, rows: &[SagaEntry]) -> Result<(), CliError> {
    for row in rows {
        let state = row
            .current_state
            .as_ref()
            .map(|s| match s {
                serde_json::Value::String(s) => format!(" in state {s}"),
                other => format!(" in state {other}"),
            })
            .unwrap_or_default();
        writeln!(out)?;
        writeln!(
            out,
            "saga: instance {} of {}{state} (linked by {})",
            row.correlation_id,
            row.table,
            row.linked_by.join(", ")
        )?;
        writeln!(out, "  {}", row.row)?;
    }
    Ok(())
}

fn queues(out: &mut impl Write, trace: &Trace) -> Result<(), CliError> {
    let search = &trace.queues;
    writeln!(out)?;
    for note in &search.notes {
        writeln!(out, "queues: {note}")?;
    }
    for copy in &search.copies {
        write_copy(out, copy)?;
    }
    let elsewhere: Vec<String> = search
        .searched
        .iter()
        .filter(|s| !search.copies.iter().any(|c| c.queue == s.queue))
        .map(|s| format!("{} ({})", s.queue, count(s.messages, "message")))
        .collect();
    if !elsewhere.is_empty() {
        writeln!(out, "queues: not in {}", elsewhere.join(", "))?;
    }
    if !search.searched.is_empty() {
        writeln!(out, "queues: every message peeked is still in its queue")?;
    }
    Ok(())
}

fn write_copy(out: &mut impl Write, copy: &Copy) -> Result<(), CliError> {
    let s = &copy.summary;
    writeln!(
        out,
        "queues: in {} (position {} of {})",
        copy.queue, s.position, copy.queue_messages
    )?;
    let input = s
        .input_address
        .as_deref()
        .map(|a| format!(" on {a}"))
        .unwrap_or_default();
    if copy.kind == "skipped" {
        writeln!(
            out,
            "  skipped{input}{}: no consumer of that endpoint takes {} (reason {})",
            s.host
                .as_deref()
                .map(|h| format!(" by {h}"))
                .unwrap_or_default(),
            dash(s.message_type.as_deref()),
            dash(s.reason.as_deref())
        )?;
        return Ok(());
    }
    let retries = s
        .retry_count
        .map(|n| format!(" after {n} retries"))
        .unwrap_or_default();
    writeln!(
        out,
        "  faulted {} in {}{input}{retries}",
        dash(s.faulted_at.as_deref()),
        dash(s.consumer_type.as_deref())
    )?;
    writeln!(
        out,
        "  {}: {}",
        dash(s.exception_type.as_deref()),
        dash(s.exception_message.as_deref())
    )?;
    if let Some(stack) = &copy.stack_trace {
        for line in stack.lines().take(STACK_LINES) {
            writeln!(out, "    {}", cut(line.trim(), LINE_WIDTH))?;
        }
    }
    Ok(())
}
