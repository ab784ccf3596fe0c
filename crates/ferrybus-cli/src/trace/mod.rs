//! `ferrybus trace MESSAGE_ID`: what happened to one message, from every store that keeps a
//! trace of it.
//!
//! * **The inbox** (`inbox_state`): one row per consumer that received it, keyed by
//!   (`MessageId`, `ConsumerId`): when it arrived, how many more copies came, when the consumer
//!   committed (`Consumed`) and when its outgoing messages were all sent (`Delivered`).
//! * **The outbox** (`outbox_message`): the messages its consumers produced that are still in
//!   the table (`InboxMessageId` = the message; sent ones are deleted), and the message's own row
//!   when it waits in the bus outbox or a consumer outbox itself.
//! * **Saga instances** (`--saga-table`): rows whose `CorrelationId` is one the message carries
//!   (see [`tables::saga_links`]).
//! * **The broker**: copies in `_error` and `_skipped` queues, found by peeking: every message
//!   read is returned to its place ([`crate::queues`]'s snapshot), nothing is taken.
//!
//! Consumer ids are MD5 hashes of `"<consumer>:<message type>:<queue>"`
//! ([`ferrybus_core::message::consumer_id`]); the trace names a row's consumer when one of the
//! `--consumer` keys, or a fault header of a copy found in an error queue, hashes to its id.

mod consumers;
mod queues;
mod story;
mod tables;

use std::io::{self, Write};

use clap::Args;
use serde::Serialize;
use uuid::Uuid;

use crate::error::CliError;
use crate::storage;
use crate::StorageArgs;

pub(crate) use consumers::ConsumerKey;

/// `ferrybus trace`.
#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// The message id (a UUID).
    #[arg(value_parser = parse_id, value_name = "MESSAGE_ID")]
    message_id: Uuid,
    #[command(flatten)]
    storage: StorageArgs,
    /// An endpoint (`billing-invoice`: look in `billing-invoice_error` and `_skipped`) or an
    /// error or skipped queue; repeat for several [default: every `_error` and `_skipped` queue
    /// the management API lists]
    #[arg(long = "queue", value_name = "QUEUE")]
    queues: Vec<String>,
    /// Names a consumer: `CONSUMER:MESSAGE_TYPE:QUEUE`, the names MassTransit hashes into the
    /// consumer id (`Billing.InvoiceConsumer:Bookstore.Contracts.OrderPlaced:billing-invoice`),
    /// or `NAME=UUID` for a fixed id; repeat for several.
    #[arg(long = "consumer", value_name = "KEY", value_parser = ConsumerKey::parse)]
    consumers: Vec<ConsumerKey>,
    /// A saga instance table, `TABLE` (in the first --schema) or `SCHEMA.TABLE`; repeat for
    /// several.
    #[arg(long = "saga-table", value_name = "TABLE")]
    saga_tables: Vec<String>,
    /// Also a correlation id of the message (its envelope's `correlationId`, when the trace
    /// finds no copy of it to read it from); repeat for several.
    #[arg(long = "correlation-id", value_name = "UUID", value_parser = parse_id)]
    correlation_ids: Vec<Uuid>,
    /// The management API, to find the `_error` and `_skipped` queues when no --queue is given
    /// [default: http(s)://<broker host>:15672/ with the broker's credentials]
    #[arg(
        long,
        env = "RABBITMQ_MANAGEMENT_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    management_url: Option<String>,
    /// One JSON document instead of the story.
    #[arg(long)]
    json: bool,
}

/// A message id or correlation id from the command line.
fn parse_id(text: &str) -> Result<Uuid, String> {
    Uuid::parse_str(text.trim()).map_err(|_| format!("{text:?} is not a message id (a UUID)"))
}

/// Everything the trace found (the `--json` document).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Trace {
    /// The message id traced.
    pub(crate) message_id: Uuid,
    /// Inbox rows, per schema and consumer.
    pub(crate) inbox: Vec<tables::InboxEntry>,
    /// Outbox rows its consumers produced, not sent yet.
    pub(crate) produced: Vec<tables::OutboxEntry>,
    /// The message's own outbox rows (waiting in the bus outbox or a consumer outbox).
    pub(crate) outbox: Vec<tables::OutboxEntry>,
    /// Saga instances linked to it.
    pub(crate) sagas: Vec<tables::SagaEntry>,
    /// The queues peeked and the copies found in them.
    pub(crate) queues: queues::QueueSearch,
}

impl Trace {
    /// Whether any store knows the message.
    fn found(&self) -> bool {
        !(self.inbox.is_empty()
            && self.produced.is_empty()
            && self.outbox.is_empty()
            && self.sagas.is_empty()
            && self.queues.copies.is_empty())
    }
}

/// Runs `ferrybus trace`.
pub(crate) async fn run(
    amqp_url: &str,
    database_url: &str,
    args: TraceArgs,
) -> Result<(), CliError> {
    let saga_tables = args
        .saga_tables
        .iter()
        .map(|t| tables::SagaTableName::parse(t, first_schema(&args.storage)))
        .collect::<Result<Vec<_>, _>>()?;
    // The database first: a missing database or table fails before any queue is read.
    let db = storage::connect(database_url).await?;
    let gathered = gather(&db, amqp_url, &args, &saga_tables).await;
    let _ = db.close().await;
    let trace = gathered?;
    let id = trace.message_id;
    let mut out = io::stdout().lock();
    if args.json {
        let text = serde_json::to_string_pretty(&trace).map_err(CliError::output)?;
        writeln!(out, "{text}")?;
    } else {
        story::write(&mut out, &trace)?;
    }
    out.flush()?;
    if trace.found() {
        Ok(())
    } else {
        Err(CliError::check(format!(
            "message {id} is in none of the tables and queues searched"
        )))
    }
}

/// Reads every store.
async fn gather(
    db: &sea_orm::DatabaseConnection,
    amqp_url: &str,
    args: &TraceArgs,
    saga_tables: &[tables::SagaTableName],
) -> Result<Trace, CliError> {
    let id = args.message_id;
    let read = tables::read(db, &args.storage, id).await?;
    let saga_tables = tables::resolve_sagas(db, saga_tables).await?;
    let queues = queues::search(amqp_url, args.management_url.as_deref(), &args.queues, id).await?;
    let ids = tables::saga_links(id, &args.correlation_ids, &queues, &read);
    let sagas = tables::sagas(db, &saga_tables, &ids).await?;
    let names = consumers::Names::new(&args.consumers, &queues.copies);
    Ok(Trace {
        message_id: id,
        inbox: names.name_inbox(read.inbox),
        produced: names.name_outbox(read.produced),
        outbox: names.name_outbox(read.outbox),
        sagas,
        queues,
    })
}

/// The first `--schema` (where a saga table without a schema is).
fn first_schema(storage: &StorageArgs) -> &str {
    storage.schemas().next().unwrap_or("public")
}
