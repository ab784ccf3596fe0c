//! `ferrybus errors …` and `ferrybus skipped …`: list, show, replay and purge the messages of a
//! `<queue>_error` or `<queue>_skipped` queue.
//!
//! # Reading a queue without taking messages out
//!
//! RabbitMQ 3.x has no non-destructive browse over AMQP 0-9-1 (streams aside), so every command
//! reads a **snapshot**: it counts the ready messages with a passive `queue.declare`, then takes
//! that many with `basic.get` in manual-ack mode on one channel, holding each one unacknowledged
//! (an unacked message is not given to anyone else, so none is seen twice), and at the end
//! returns all it did not remove with one `basic.nack(delivery_tag = 0, multiple, requeue)`.
//! RabbitMQ puts requeued messages back at their original position, so the queue's order is
//! kept; if the tool dies, the broker returns them the same way when the connection closes.
//! Nothing is acknowledged except what `replay` confirmed elsewhere or `purge` was told to
//! delete. `basic.nack` rather than `basic.reject`: on RabbitMQ ≥ 4.3 a nack does not count as
//! a failed delivery towards a quorum queue's `x-delivery-limit`. On quorum queues of RabbitMQ
//! 4.0–4.2 every return counts, so each look at a quorum error queue spends one of its
//! deliveries (default limit 20 on 4.x); classic error queues — MassTransit's and ferrybus's
//! default — have no such limit. Messages show `redelivered` after they were peeked.
//!
//! # Replaying
//!
//! Each selected message is published to its input queue (`MT-Fault-InputAddress`, else the
//! queue name without `_error` / `_skipped`, or `--to`) through the default exchange, mandatory,
//! with publisher confirms: the same body bytes, the same properties (`message_id`,
//! `correlation_id`, `content_type`, `delivery_mode`, …; not `user_id`, which the broker checks
//! against the connection's user) and headers without `MT-Reason` / `MT-Fault-*` / `MT-Host-*`
//! ([`is_fault_header`]). Only once the broker confirmed the copy (and did not return it as
//! unroutable) is the original acknowledged, i.e. removed from the error queue. A crash between
//! the two leaves the original in the error queue: at most one duplicate, which the consumer's
//! inbox absorbs.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use comfy_table::{presets, Table};

use crate::output::arrangement;
use ferrybus_core::address::EndpointAddress;
use ferrybus_core::endpoint::{
    error_queue_name, skipped_queue_name, ERROR_QUEUE_SUFFIX, SKIPPED_QUEUE_SUFFIX,
};
use ferrybus_core::message::URN_PREFIX;
use ferrybus_rabbitmq::convert::amqp_to_json_lossy;
use indicatif::{ProgressBar, ProgressStyle};
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions};
use lapin::Acker;
use lapin::{BasicProperties, Channel, Confirmation};
use serde_json::{json, Value};

use crate::amqp::{self, describe, Broker};
use crate::error::{CliError, CliErrorKind};
use crate::message::{is_fault_header, Filter, QueuedMessage, Summary};

/// How many continuation lines of a header (a stack trace) `show` prints.
const MAX_HEADER_LINES: usize = 12;

/// How long the broker may take to confirm one replayed message.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Which kind of queue a command works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueKind {
    /// `<queue>_error`: faulted messages.
    Error,
    /// `<queue>_skipped`: messages no consumer wanted.
    Skipped,
}

impl QueueKind {
    /// The queue name suffix.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            QueueKind::Error => ERROR_QUEUE_SUFFIX,
            QueueKind::Skipped => SKIPPED_QUEUE_SUFFIX,
        }
    }

    /// The queue a user means: `billing-invoice_error` as given, `billing-invoice` with the
    /// suffix added.
    pub(crate) fn resolve(self, name: &str) -> String {
        match self {
            _ if name.ends_with(self.suffix()) => name.to_owned(),
            QueueKind::Error => error_queue_name(name),
            QueueKind::Skipped => skipped_queue_name(name),
        }
    }
}

/// A snapshot of a queue being read (see the module docs).
pub(crate) struct Snapshot {
    channel: Channel,
    queue: String,
    /// The ready messages counted when the snapshot was opened.
    pub(crate) total: u32,
    read: usize,
}

impl Snapshot {
    /// Counts the ready messages of `queue` (which must exist) and opens a channel to read them.
    pub(crate) async fn open(broker: &Broker, queue: &str) -> Result<Self, CliError> {
        let counts = broker.existing_queue(queue).await?;
        Ok(Self {
            channel: broker.channel().await?,
            queue: queue.to_owned(),
            total: counts.messages,
            read: 0,
        })
    }

    /// How many messages were ready when it was opened.
    pub(crate) fn total(&self) -> u32 {
        self.total
    }

    /// The next message and what acknowledges it, until the count read at the start is reached.
    pub(crate) async fn next(&mut self) -> Result<Option<(QueuedMessage, Acker)>, CliError> {
        if self.read >= self.total as usize {
            return Ok(None);
        }
        let got = self
            .channel
            .basic_get(amqp::short(&self.queue)?, BasicGetOptions { no_ack: false })
            .await
            .map_err(|e| CliError::broker(format!("reading {}", self.queue), describe(&e)))?;
        let Some(got) = got else {
            return Ok(None);
        };
        self.read += 1;
        let message = QueuedMessage::new(self.read, &got.delivery);
        Ok(Some((message, got.delivery.acker)))
    }

    /// Returns every message not removed to its place in the queue.
    pub(crate) async fn finish(self) -> Result<(), CliError> {
        let options = BasicNackOptions {
            multiple: true,
            requeue: true,
        };
        let result = if self.read > 0 {
            self.channel.basic_nack(0, options).await
        } else {
            Ok(())
        };
        amqp::close(&self.channel).await;
        // Should the nack have failed, closing the channel returned them all the same.
        result.map_err(|e| {
            CliError::broker(
                format!("returning messages to {}", self.queue),
                describe(&e),
            )
        })
    }
}

/// `errors list` / `skipped list`.
pub(crate) async fn list(
    broker: &Broker,
    kind: QueueKind,
    queue: &str,
    filter: &Filter,
    limit: Option<usize>,
    json: bool,
) -> Result<(), CliError> {
    let mut snapshot = Snapshot::open(broker, queue).await?;
    let total = snapshot.total;
    let mut stdout = std::io::stdout().lock();
    let mut rows: Vec<Summary> = Vec::new();
    let mut matched = 0usize;
    let result: Result<(), CliError> = async {
        while let Some((message, _acker)) = snapshot.next().await? {
            if !filter.matches(&message) {
                continue;
            }
            matched += 1;
            let summary = message.summary();
            if json {
                let line = serde_json::to_string(&summary).map_err(CliError::output)?;
                writeln!(stdout, "{line}")?;
            } else {
                rows.push(summary);
            }
            if limit.is_some_and(|limit| matched >= limit) {
                break;
            }
        }
        Ok(())
    }
    .await;
    let finished = snapshot.finish().await;
    result?;
    finished?;
    if !json {
        match kind {
            QueueKind::Error => print_table(&mut stdout, &rows)?,
            QueueKind::Skipped => print_skipped_table(&mut stdout, &rows)?,
        }
        if total == 0 {
            writeln!(stdout, "{queue} is empty")?;
        } else if matched == 0 {
            writeln!(stdout, "none of the {total} messages in {queue} matches")?;
        } else {
            let filtered = if filter.is_empty() { "" } else { " matching" };
            writeln!(
                stdout,
                "{matched}{filtered} of {total} messages in {queue} shown; they are still in the queue"
            )?;
        }
    }
    stdout.flush()?;
    Ok(())
}

fn print_table(out: &mut impl Write, rows: &[Summary]) -> Result<(), CliError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(arrangement())
        .set_header([
            "#",
            "message id",
            "message type",
            "exception",
            "faulted at",
            "retries",
            "input",
        ]);
    for row in rows {
        let exception = match (&row.exception_type, &row.exception_message) {
            (Some(t), Some(m)) => format!("{t}: {}", shorten(m, 80)),
            (Some(t), None) => t.clone(),
            (None, Some(m)) => shorten(m, 80),
            (None, None) => row.reason.clone().unwrap_or_default(),
        };
        let input = row
            .input_address
            .as_deref()
            .map(|a| EndpointAddress::parse(a).map_or_else(|_| a.to_owned(), |e| e.name))
            .unwrap_or_default();
        table.add_row([
            row.position.to_string(),
            row.message_id.clone().unwrap_or_else(|| "-".into()),
            row.message_type
                .as_deref()
                .map(|t| t.strip_prefix(URN_PREFIX).unwrap_or(t).to_owned())
                .unwrap_or_else(|| "-".into()),
            exception,
            row.faulted_at.clone().unwrap_or_else(|| "-".into()),
            row.retry_count
                .map_or_else(|| "-".into(), |n| n.to_string()),
            input,
        ]);
    }
    writeln!(out, "{table}")?;
    Ok(())
}

/// The table of a `_skipped` queue: no fault, so the reason, when it was sent and where it was
/// skipped.
fn print_skipped_table(out: &mut impl Write, rows: &[Summary]) -> Result<(), CliError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(arrangement())
        .set_header([
            "#",
            "message id",
            "message type",
            "reason",
            "sent at",
            "skipped by",
        ]);
    let dash = || "-".to_owned();
    for row in rows {
        table.add_row([
            row.position.to_string(),
            row.message_id.clone().unwrap_or_else(dash),
            row.message_type
                .as_deref()
                .map(|t| t.strip_prefix(URN_PREFIX).unwrap_or(t).to_owned())
                .unwrap_or_else(dash),
            row.reason.clone().unwrap_or_else(dash),
            row.sent_time.clone().unwrap_or_else(dash),
            row.host.clone().unwrap_or_else(dash),
        ]);
    }
    writeln!(out, "{table}")?;
    Ok(())
}

fn shorten(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

/// `errors show` / `skipped show`.
pub(crate) async fn show(
    broker: &Broker,
    queue: &str,
    id: &str,
    json: bool,
) -> Result<(), CliError> {
    let mut snapshot = Snapshot::open(broker, queue).await?;
    let total = snapshot.total;
    let found = async {
        while let Some((message, _acker)) = snapshot.next().await? {
            if message.has_id(id) {
                return Ok(Some(message));
            }
        }
        Ok::<_, CliError>(None)
    }
    .await;
    let finished = snapshot.finish().await;
    let message = found?.ok_or_else(|| {
        CliError::new(
            CliErrorKind::Input,
            format!("no message {id} among the {total} messages of {queue}"),
        )
    })?;
    finished?;
    let mut out = std::io::stdout().lock();
    if json {
        let text =
            serde_json::to_string_pretty(&show_json(queue, &message)).map_err(CliError::output)?;
        writeln!(out, "{text}")?;
    } else {
        write_show(&mut out, queue, total, &message)?;
    }
    out.flush()?;
    Ok(())
}

fn properties_json(p: &BasicProperties) -> Value {
    let s = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|s| s.to_string());
    let mut map = serde_json::Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            map.insert(k.to_owned(), v);
        }
    };
    put("content_type", s(p.content_type()).map(Value::from));
    put("content_encoding", s(p.content_encoding()).map(Value::from));
    put("delivery_mode", p.delivery_mode().map(Value::from));
    put("priority", p.priority().map(Value::from));
    put("correlation_id", s(p.correlation_id()).map(Value::from));
    put("reply_to", s(p.reply_to()).map(Value::from));
    put("expiration", s(p.expiration()).map(Value::from));
    put("message_id", s(p.message_id()).map(Value::from));
    put("timestamp", p.timestamp().map(Value::from));
    put("type", s(p.kind()).map(Value::from));
    put("user_id", s(p.user_id()).map(Value::from));
    put("app_id", s(p.app_id()).map(Value::from));
    Value::Object(map)
}

fn show_json(queue: &str, message: &QueuedMessage) -> Value {
    let headers: serde_json::Map<String, Value> = message
        .properties
        .headers()
        .as_ref()
        .map(|t| {
            t.inner()
                .iter()
                .map(|(k, v)| (k.to_string(), amqp_to_json_lossy(v)))
                .collect()
        })
        .unwrap_or_default();
    let (body, encoding) = match serde_json::from_slice::<Value>(&message.body) {
        Ok(value) => (value, "json"),
        Err(_) => match std::str::from_utf8(&message.body) {
            Ok(text) => (Value::String(text.to_owned()), "utf8"),
            Err(_) => (Value::String(hex(&message.body)), "hex"),
        },
    };
    json!({
        "queue": queue,
        "position": message.position,
        "messageId": message.message_id(),
        "redelivered": message.redelivered,
        "properties": properties_json(&message.properties),
        "headers": headers,
        "bodyEncoding": encoding,
        "bodyBytes": message.body.len(),
        "body": body,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_show(
    out: &mut impl Write,
    queue: &str,
    total: u32,
    message: &QueuedMessage,
) -> Result<(), CliError> {
    let id = message
        .message_id()
        .unwrap_or_else(|| "(no message id)".into());
    writeln!(
        out,
        "message {id} in {queue} (position {} of {total}; still in the queue)",
        message.position
    )?;
    writeln!(out)?;
    writeln!(out, "properties:")?;
    if let Value::Object(map) = properties_json(&message.properties) {
        for (k, v) in map {
            writeln!(out, "  {k}: {}", plain(&v))?;
        }
    }
    writeln!(out)?;
    writeln!(out, "headers:")?;
    for (name, value) in message.headers.iter() {
        let text = plain(value);
        let mut lines = text.lines();
        writeln!(out, "  {name}: {}", lines.next().unwrap_or_default())?;
        let rest: Vec<&str> = lines.collect();
        for line in rest.iter().take(MAX_HEADER_LINES) {
            writeln!(out, "      {line}")?;
        }
        if rest.len() > MAX_HEADER_LINES {
            writeln!(
                out,
                "      … {} more lines (--json shows all)",
                rest.len() - MAX_HEADER_LINES
            )?;
        }
    }
    writeln!(out)?;
    let content_type = message
        .properties
        .content_type()
        .as_ref()
        .map_or_else(|| "no content type".to_owned(), |c| c.to_string());
    writeln!(out, "body ({content_type}, {} bytes):", message.body.len())?;
    match serde_json::from_slice::<Value>(&message.body) {
        Ok(value) => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&value).map_err(CliError::output)?
        )?,
        Err(_) => match std::str::from_utf8(&message.body) {
            Ok(text) => writeln!(out, "{text}")?,
            Err(_) => writeln!(out, "(binary) {}", hex(&message.body))?,
        },
    }
    Ok(())
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `errors replay` / `skipped replay`.
pub(crate) async fn replay(
    broker: &Broker,
    kind: QueueKind,
    queue: &str,
    selection: &Filter,
    to: Option<&str>,
    json: bool,
) -> Result<(), CliError> {
    if to == Some(queue) {
        return Err(CliError::usage(format!(
            "--to {queue} is the queue being replayed"
        )));
    }
    let mut snapshot = Snapshot::open(broker, queue).await?;
    let mut publisher = Publisher::new(broker).await?;
    let bar = progress(snapshot.total, "replaying");
    let log = Log { bar: &bar, json };
    let (mut replayed, mut failed) = (0usize, 0usize);
    let run: Result<(), CliError> = async {
        while let Some((message, acker)) = snapshot.next().await? {
            bar.inc(1);
            if !selection.matches(&message) {
                continue;
            }
            let id = message.message_id().unwrap_or_else(|| format!("at position {}", message.position));
            let outcome = match destination(&message, kind, queue, to, broker.vhost()) {
                Ok(target) => publisher.replay(&message, &target).await.map(|()| target),
                Err(reason) => Err(reason),
            };
            match outcome {
                Ok(target) => match remove(&acker).await {
                    Ok(()) => {
                        replayed += 1;
                        log.done(&id, "replayed", json!(target), &format!("to {target}"))?;
                    }
                    Err(reason) => {
                        failed += 1;
                        log.failed(&id, &format!(
                            "its copy is in {target}, but it could not be removed from {queue} ({reason}); replaying it again makes a duplicate the inbox absorbs"
                        ))?;
                    }
                },
                Err(reason) => {
                    failed += 1;
                    log.failed(&id, &format!("{reason}; it stays in {queue}"))?;
                }
            }
        }
        Ok(())
    }
    .await;
    bar.finish_and_clear();
    publisher.close().await;
    let finished = snapshot.finish().await;
    run?;
    finished?;
    summary(json, "replayed", replayed, failed)?;
    if failed > 0 {
        return Err(CliError::check(format!(
            "{failed} of {} messages could not be replayed",
            replayed + failed
        )));
    }
    Ok(())
}

/// `errors purge` / `skipped purge`.
pub(crate) async fn purge(
    broker: &Broker,
    queue: &str,
    selection: &Filter,
    json: bool,
) -> Result<(), CliError> {
    let mut snapshot = Snapshot::open(broker, queue).await?;
    let bar = progress(snapshot.total, "purging");
    let log = Log { bar: &bar, json };
    let (mut purged, mut failed) = (0usize, 0usize);
    let run: Result<(), CliError> = async {
        while let Some((message, acker)) = snapshot.next().await? {
            bar.inc(1);
            if !selection.matches(&message) {
                continue;
            }
            let id = message
                .message_id()
                .unwrap_or_else(|| format!("at position {}", message.position));
            match remove(&acker).await {
                Ok(()) => {
                    purged += 1;
                    log.done(&id, "purged", json!(true), "")?;
                }
                Err(reason) => {
                    failed += 1;
                    log.failed(&id, &reason)?;
                }
            }
        }
        Ok(())
    }
    .await;
    bar.finish_and_clear();
    let finished = snapshot.finish().await;
    run?;
    finished?;
    summary(json, "purged", purged, failed)?;
    if failed > 0 {
        return Err(CliError::check(format!(
            "{failed} of {} messages could not be purged",
            purged + failed
        )));
    }
    Ok(())
}

/// Acknowledges a message taken from the queue, removing it; an error when the ack could not be
/// sent (the channel is gone: the broker will return the message).
async fn remove(acker: &Acker) -> Result<(), String> {
    match acker.ack(BasicAckOptions::default()).await {
        Ok(true) => Ok(()),
        Ok(false) => Err("the channel it came on is gone; the broker returns it".into()),
        Err(e) => Err(describe(&e)),
    }
}

fn summary(json: bool, verb: &str, done: usize, failed: usize) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", json!({ verb: done, "failed": failed }))?;
    } else {
        writeln!(out, "{verb} {done}, failed {failed}")?;
    }
    out.flush()?;
    Ok(())
}

/// One line per message on standard output (a JSON object with `--json`), printed above the
/// progress bar.
struct Log<'a> {
    bar: &'a ProgressBar,
    json: bool,
}

impl Log<'_> {
    fn line(&self, text: String) -> Result<(), CliError> {
        self.bar.suspend(|| {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}").and_then(|()| out.flush())
        })?;
        Ok(())
    }

    fn done(&self, id: &str, verb: &str, value: Value, words: &str) -> Result<(), CliError> {
        if self.json {
            self.line(json!({"messageId": id, verb: value}).to_string())
        } else {
            self.line(format!("{verb} {id} {words}").trim_end().to_owned())
        }
    }

    fn failed(&self, id: &str, reason: &str) -> Result<(), CliError> {
        if self.json {
            self.line(json!({"messageId": id, "failed": reason}).to_string())
        } else {
            self.line(format!("failed {id}: {reason}"))
        }
    }
}

/// A progress bar on standard error when it is a terminal; nothing otherwise.
pub(crate) fn progress(total: u32, verb: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(u64::from(total));
    if let Ok(style) =
        ProgressStyle::with_template(&format!("{verb} {{bar:40}} {{pos}}/{{len}} {{elapsed}}"))
    {
        bar.set_style(style);
    }
    bar
}

/// Where a replayed message goes: `--to`, else the queue of its `MT-Fault-InputAddress` (on
/// this vhost), else the queue name without the suffix.
pub(crate) fn destination(
    message: &QueuedMessage,
    kind: QueueKind,
    queue: &str,
    to: Option<&str>,
    vhost: &str,
) -> Result<String, String> {
    if let Some(to) = to {
        return Ok(to.to_owned());
    }
    if let Some(address) = message.header("MT-Fault-InputAddress") {
        let parsed = EndpointAddress::parse(&address)
            .map_err(|e| format!("its MT-Fault-InputAddress is unusable ({e}); use --to"))?;
        let ours = vhost.trim_matches('/');
        if parsed.vhost.trim_matches('/') != ours {
            return Err(format!(
                "its input address {address} is on vhost {:?}, this connection on {vhost:?}; connect to that vhost or use --to",
                if parsed.vhost.is_empty() { "/" } else { parsed.vhost.as_str() }
            ));
        }
        return Ok(parsed.queue.unwrap_or(parsed.name));
    }
    match queue.strip_suffix(kind.suffix()) {
        Some(input) if !input.is_empty() => Ok(input.to_owned()),
        _ => Err(format!(
            "it has no MT-Fault-InputAddress and {queue} does not end with {}; use --to",
            kind.suffix()
        )),
    }
}

/// The properties of a replayed copy: the original's, `user_id` and the fault headers left out.
pub(crate) fn replay_properties(p: &BasicProperties) -> BasicProperties {
    let mut headers = lapin::types::FieldTable::default();
    if let Some(table) = p.headers() {
        for (k, v) in table.inner() {
            if !is_fault_header(k.as_str()) {
                headers.insert(k.clone(), v.clone());
            }
        }
    }
    ferrybus_rabbitmq::republish_properties(p, headers, true)
}

/// Publishes replayed copies with confirms, checking each destination queue exists once.
struct Publisher<'a> {
    broker: &'a Broker,
    channel: Channel,
    queues: HashMap<String, bool>,
}

impl<'a> Publisher<'a> {
    async fn new(broker: &'a Broker) -> Result<Self, CliError> {
        Ok(Self {
            broker,
            channel: broker.confirm_channel().await?,
            queues: HashMap::new(),
        })
    }

    async fn replay(&mut self, message: &QueuedMessage, queue: &str) -> Result<(), String> {
        let exists = match self.queues.get(queue) {
            Some(exists) => *exists,
            None => {
                let exists = self
                    .broker
                    .queue_counts(queue)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some();
                self.queues.insert(queue.to_owned(), exists);
                exists
            }
        };
        if !exists {
            return Err(format!("queue {queue} does not exist"));
        }
        if !self.channel.status().connected() {
            self.channel = self
                .broker
                .confirm_channel()
                .await
                .map_err(|e| e.to_string())?;
        }
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        let routing_key = amqp::short(queue).map_err(|e| e.to_string())?;
        let publish = async {
            let confirm = self
                .channel
                .basic_publish(
                    "".into(),
                    routing_key,
                    options,
                    &message.body,
                    replay_properties(&message.properties),
                )
                .await?;
            confirm.await
        };
        let confirmation = tokio::time::timeout(CONFIRM_TIMEOUT, publish)
            .await
            .map_err(|_| {
                format!(
                    "no confirm from the broker within {}s",
                    CONFIRM_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("publishing to {queue}: {}", describe(&e)))?;
        match confirmation {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => Err(format!(
                "the broker returned it ({} {})",
                returned.reply_code, returned.reply_text
            )),
            Confirmation::Nack(None) => Err("the broker refused it (nack)".into()),
            Confirmation::NotRequested => Err("the broker did not confirm it".into()),
        }
    }

    async fn close(self) {
        amqp::close(&self.channel).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{AMQPValue, FieldTable};

    fn faulted(input: Option<&str>) -> QueuedMessage {
        let mut table = FieldTable::default();
        table.insert("MT-Reason".into(), AMQPValue::LongString("fault".into()));
        table.insert(
            "MT-Fault-Message".into(),
            AMQPValue::LongString("boom".into()),
        );
        table.insert(
            "MT-Host-MachineName".into(),
            AMQPValue::LongString("box".into()),
        );
        table.insert("MT-Redelivery-Count".into(), AMQPValue::LongLongInt(1));
        table.insert("Tenant".into(), AMQPValue::LongString("acme".into()));
        if let Some(input) = input {
            table.insert(
                "MT-Fault-InputAddress".into(),
                AMQPValue::LongString(input.into()),
            );
        }
        let properties = BasicProperties::default()
            .with_message_id("m-1".into())
            .with_correlation_id("c-1".into())
            .with_content_type("application/vnd.masstransit+json".into())
            .with_delivery_mode(2)
            .with_user_id("someone".into())
            .with_headers(table.clone());
        QueuedMessage {
            position: 1,
            headers: crate::message::headers_from_amqp(&table),
            properties,
            body: b"{}".to_vec(),
            envelope: None,
            redelivered: false,
        }
    }

    #[test]
    fn resolves_queue_names() {
        assert_eq!(
            QueueKind::Error.resolve("billing-invoice"),
            "billing-invoice_error"
        );
        assert_eq!(
            QueueKind::Error.resolve("billing-invoice_error"),
            "billing-invoice_error"
        );
        assert_eq!(
            QueueKind::Skipped.resolve("billing-invoice"),
            "billing-invoice_skipped"
        );
    }

    #[test]
    fn replays_to_the_input_address_on_this_vhost() {
        let m = faulted(Some("rabbitmq://localhost/billing-invoice"));
        let d =
            |m: &QueuedMessage, to, vhost| destination(m, QueueKind::Error, "x_error", to, vhost);
        assert_eq!(d(&m, None, "/").unwrap(), "billing-invoice");
        assert_eq!(d(&m, Some("other"), "/").unwrap(), "other");
        assert!(d(&m, None, "sales").unwrap_err().contains("vhost"));
        let sales = faulted(Some("rabbitmq://broker/sales/orders"));
        assert_eq!(d(&sales, None, "sales").unwrap(), "orders");
        let none = faulted(None);
        assert_eq!(d(&none, None, "/").unwrap(), "x");
        assert_eq!(
            destination(&none, QueueKind::Skipped, "orders_skipped", None, "/").unwrap(),
            "orders"
        );
        assert!(destination(&none, QueueKind::Error, "orders", None, "/").is_err());
    }

    #[test]
    fn replayed_copies_drop_the_fault_headers_and_user_id() {
        let p = replay_properties(&faulted(Some("rabbitmq://localhost/q")).properties);
        let headers = p.headers().as_ref().unwrap().inner();
        let names: Vec<_> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["MT-Redelivery-Count", "Tenant"]);
        assert_eq!(p.message_id().as_ref().unwrap().as_str(), "m-1");
        assert_eq!(p.correlation_id().as_ref().unwrap().as_str(), "c-1");
        assert_eq!(*p.delivery_mode(), Some(2));
        assert_eq!(p.user_id(), &None);
    }
}
