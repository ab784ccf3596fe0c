//! Every SQL statement ferrybus runs, rendered once per [`Tables`] with quoted identifiers and
//! `$n` parameters.

mod message;
pub(crate) mod names;

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, IsolationLevel, Statement,
    TransactionTrait, Value,
};

pub(crate) use message::{
    int_array, message_values, read_message, uuid_array, StoredRow, MESSAGE_VALUE_COUNT,
};
use names::{Col, Names};

use crate::config::Tables;
use crate::error::StoreError;

/// Builds a PostgreSQL statement.
pub(crate) fn stmt(sql: &str, values: impl IntoIterator<Item = Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// Begins READ COMMITTED transactions (whatever the server default is): a waiter on a row lock
/// then sees the committed row instead of failing with a serialization error.
///
/// sea-orm's `begin_with_config` sends `SET TRANSACTION ISOLATION LEVEL …` after `BEGIN`: one
/// more round trip per transaction. So the first use asks the server for
/// `default_transaction_isolation` and, when it is already `read committed` (PostgreSQL's
/// default), later transactions start with a plain `BEGIN`. The answer is kept for the life of
/// this value (one per inbox layer / delivery service); if the check fails, it is asked again
/// next time and this transaction sets the level explicitly.
///
/// The check holds for every connection of the pool as long as the level comes from the server,
/// database or role configuration (`ALTER DATABASE/ROLE … SET default_transaction_isolation`);
/// a session-level `SET default_transaction_isolation` on some pooled connections is not seen.
#[derive(Debug, Default)]
pub(crate) struct Begin {
    plain: tokio::sync::OnceCell<bool>,
}

impl Begin {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Begins a READ COMMITTED transaction on `db`.
    pub(crate) async fn read_committed(
        &self,
        db: &DatabaseConnection,
    ) -> Result<DatabaseTransaction, StoreError> {
        let plain = match self
            .plain
            .get_or_try_init(|| default_is_read_committed(db))
            .await
        {
            Ok(plain) => *plain,
            Err(error) => {
                tracing::debug!(
                    target: "ferrybus::storage",
                    %error,
                    "cannot read default_transaction_isolation; setting the level explicitly"
                );
                false
            }
        };
        if plain {
            Ok(db.begin().await?)
        } else {
            Ok(db
                .begin_with_config(Some(IsolationLevel::ReadCommitted), None)
                .await?)
        }
    }
}

async fn default_is_read_committed(db: &DatabaseConnection) -> Result<bool, StoreError> {
    let row = db
        .query_one(stmt(
            "SELECT current_setting('default_transaction_isolation') AS level",
            [],
        ))
        .await?;
    let level: Option<String> = row.map(|r| r.try_get("", "level")).transpose()?;
    Ok(level.is_some_and(|l| l.eq_ignore_ascii_case("read committed")))
}

/// The all-zero GUID MassTransit writes as a fresh `OutboxState.LockId`.
const NIL_UUID: &str = "'00000000-0000-0000-0000-000000000000'::uuid";

/// The rendered statements for one set of tables.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) names: Names,
    pub(crate) inbox_insert: String,
    pub(crate) inbox_relock: String,
    pub(crate) inbox_lock: String,
    pub(crate) inbox_lock_async_commit: String,
    pub(crate) inbox_consumed_delivered: String,
    pub(crate) inbox_delivered: String,
    pub(crate) inbox_progress: String,
    pub(crate) inbox_messages: String,
    pub(crate) bus_insert: String,
    pub(crate) claim_outboxes: String,
    pub(crate) outbox_messages: String,
    pub(crate) delete_outbox_messages: String,
    pub(crate) delete_outbox_states: String,
    pub(crate) outbox_progress: String,
    pub(crate) sweep_claim: String,
    pub(crate) cleanup: String,
    pub(crate) pending_bus_outbox: String,
}

impl Sql {
    pub(crate) fn new(tables: &Tables) -> Self {
        let n = Names::new(tables);
        let key = format!(
            "{} = $1 AND {} = $2",
            n.c(Col::MessageId),
            n.c(Col::ConsumerId)
        );
        let state_flags = format!(
            "{} IS NOT NULL AS consumed, {} IS NOT NULL AS delivered, {}::bigint AS last_sequence_number",
            n.c(Col::Consumed),
            n.c(Col::Delivered),
            n.c(Col::LastSequenceNumber)
        );
        Self {
            inbox_insert: inbox_insert(&n),
            inbox_relock: format!(
                "UPDATE {} SET {lock} = $3, {rc} = {rc} + 1 WHERE {key} RETURNING {state_flags}",
                n.inbox,
                lock = n.c(Col::LockId),
                rc = n.c(Col::ReceiveCount),
            ),
            inbox_lock: format!("SELECT {state_flags} FROM {} WHERE {key} FOR UPDATE", n.inbox),
            // `set_config(…, true)` is `SET LOCAL`: this transaction only, no extra round trip.
            inbox_lock_async_commit: format!(
                "SELECT {state_flags}, set_config('synchronous_commit', 'off', true) AS sc \
                 FROM {} WHERE {key} FOR UPDATE",
                n.inbox
            ),
            inbox_consumed_delivered: format!(
                "UPDATE {} SET {} = {ts}, {} = {ts} WHERE {key}",
                n.inbox,
                n.c(Col::Consumed),
                n.c(Col::Delivered),
                ts = n.ts_param(3)
            ),
            inbox_delivered: inbox_finish(&n, true),
            inbox_progress: inbox_finish(&n, false),
            inbox_messages: format!(
                "SELECT {} FROM {} m WHERE m.{} = $1 AND m.{} = $2 AND m.{} > $3 ORDER BY m.{}",
                message_columns(&n, "m"),
                n.message,
                n.c(Col::InboxMessageId),
                n.c(Col::InboxConsumerId),
                n.c(Col::SequenceNumber),
                n.c(Col::SequenceNumber)
            ),
            bus_insert: bus_insert(&n),
            claim_outboxes: claim_outboxes(&n),
            outbox_messages: outbox_messages(&n),
            // Two deletes rather than one with `OR`: an `OR` of the two `= ANY(…)` conditions
            // made PostgreSQL scan the whole table, parsing the array parameter for every row
            // (~170 ms per pass at 4 000 rows); each half uses its index. The two sets are
            // disjoint (completed outboxes / sent rows of partly sent ones).
            delete_outbox_messages: format!(
                "WITH complete AS (DELETE FROM {msg} WHERE {} = ANY($1::text::uuid[])) \
                 DELETE FROM {msg} WHERE {} = ANY($2::text::bigint[])",
                n.c(Col::OutboxId),
                n.c(Col::SequenceNumber),
                msg = n.message,
            ),
            delete_outbox_states: format!(
                "DELETE FROM {} WHERE {} = ANY($1::text::uuid[])",
                n.state,
                n.c(Col::OutboxId)
            ),
            outbox_progress: format!(
                "UPDATE {} SET {} = $2 WHERE {} = $1",
                n.state,
                n.c(Col::LastSequenceNumber),
                n.c(Col::OutboxId)
            ),
            sweep_claim: sweep_claim(&n),
            cleanup: cleanup(&n),
            pending_bus_outbox: format!(
                "SELECT ((SELECT count(*) FROM {}) + (SELECT count(*) FROM {} WHERE {} IS NOT NULL))::bigint AS pending",
                n.state,
                n.message,
                n.c(Col::OutboxId)
            ),
            names: n,
        }
    }

    /// A multi-row insert of `count` consumer-outbox messages: `$1` inbox message id, `$2`
    /// consumer id, then [`MESSAGE_VALUE_COUNT`] values per message; returns the sequence numbers
    /// in insertion order. With `mark_pending`, the same statement also sets the inbox row's
    /// `Consumed` to the last parameter (`$3 + count × MESSAGE_VALUE_COUNT`, now) and clears
    /// `Delivered` (a data-modifying CTE): consumed, messages to send.
    pub(crate) fn insert_inbox_messages(&self, count: usize, mark_pending: bool) -> String {
        let n = &self.names;
        let mut rows = Vec::with_capacity(count);
        for i in 0..count {
            let first = 3 + i * MESSAGE_VALUE_COUNT;
            rows.push(format!(
                "($1, $2, NULL, {})",
                message_placeholders(n, first)
            ));
        }
        let cte = if mark_pending {
            format!(
                "WITH pending AS (UPDATE {} SET {} = {}, {} = NULL WHERE {} = $1 AND {} = $2) ",
                n.inbox,
                n.c(Col::Consumed),
                n.ts_param(3 + count * MESSAGE_VALUE_COUNT),
                n.c(Col::Delivered),
                n.c(Col::MessageId),
                n.c(Col::ConsumerId),
            )
        } else {
            String::new()
        };
        format!(
            "{cte}INSERT INTO {} ({}, {}, {}, {}) VALUES {} RETURNING {}::bigint AS seq",
            n.message,
            n.c(Col::InboxMessageId),
            n.c(Col::InboxConsumerId),
            n.c(Col::OutboxId),
            message_column_list(n),
            rows.join(", "),
            n.c(Col::SequenceNumber)
        )
    }
}

/// `$1` message id, `$2` consumer id, `$3` lock id, `$4` now. The row is written already
/// `Consumed` and `Delivered`: it only becomes visible when the consumer's transaction commits
/// (and disappears with a rollback), so "consumed, nothing to send" costs no second write. A
/// consumer that publishes clears `Delivered` in the statement that writes its messages.
fn inbox_insert(n: &Names) -> String {
    format!(
        "INSERT INTO {} ({mid}, {cid}, {}, {}, {}, {}, {}) VALUES ($1, $2, $3, {now}, 0, {now}, {now}) \
         ON CONFLICT ({mid}, {cid}) DO NOTHING",
        n.inbox,
        n.c(Col::LockId),
        n.c(Col::Received),
        n.c(Col::ReceiveCount),
        n.c(Col::Consumed),
        n.c(Col::Delivered),
        now = n.ts_param(4),
        mid = n.c(Col::MessageId),
        cid = n.c(Col::ConsumerId),
    )
}

/// `$1` message id, `$2` consumer id, `$3` now, `$4` last sent sequence number (NULL when
/// nothing was sent), `$5` new lock id. `complete` deletes every row of the key and sets
/// `Delivered`; otherwise only rows up to `$4` are deleted.
fn inbox_finish(n: &Names, complete: bool) -> String {
    let (delete_filter, delivered) = if complete {
        (
            String::new(),
            format!("{} = {}, ", n.c(Col::Delivered), n.ts_param(3)),
        )
    } else {
        (
            format!(" AND {} <= $4", n.c(Col::SequenceNumber)),
            String::new(),
        )
    };
    format!(
        "WITH sent AS (DELETE FROM {msg} WHERE {imid} = $1 AND {icid} = $2{delete_filter}) \
         UPDATE {inbox} SET {delivered}{last} = COALESCE($4, {last}), {lock} = $5 \
         WHERE {mid} = $1 AND {cid} = $2",
        msg = n.message,
        inbox = n.inbox,
        imid = n.c(Col::InboxMessageId),
        icid = n.c(Col::InboxConsumerId),
        last = n.c(Col::LastSequenceNumber),
        lock = n.c(Col::LockId),
        mid = n.c(Col::MessageId),
        cid = n.c(Col::ConsumerId),
    )
}

/// The outbox message columns ferrybus writes, in [`message_values`] order.
const WRITTEN: [Col; 16] = [
    Col::SentTime,
    Col::Headers,
    Col::Properties,
    Col::MessageId,
    Col::ContentType,
    Col::MessageType,
    Col::Body,
    Col::ConversationId,
    Col::CorrelationId,
    Col::InitiatorId,
    Col::RequestId,
    Col::SourceAddress,
    Col::DestinationAddress,
    Col::ResponseAddress,
    Col::FaultAddress,
    Col::ExpirationTime,
];

fn message_column_list(n: &Names) -> String {
    WRITTEN
        .iter()
        .map(|c| n.c(*c))
        .collect::<Vec<_>>()
        .join(", ")
}

fn message_placeholders(n: &Names, first: usize) -> String {
    WRITTEN
        .iter()
        .enumerate()
        .map(|(i, c)| match c {
            Col::SentTime | Col::ExpirationTime => n.ts_param(first + i),
            _ => format!("${}", first + i),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns [`read_message`] reads, from table alias `a`.
fn message_columns(n: &Names, a: &str) -> String {
    let plain = [
        (Col::Headers, "headers"),
        (Col::MessageId, "message_id"),
        (Col::ContentType, "content_type"),
        (Col::MessageType, "message_type"),
        (Col::Body, "body"),
        (Col::ConversationId, "conversation_id"),
        (Col::CorrelationId, "correlation_id"),
        (Col::InitiatorId, "initiator_id"),
        (Col::RequestId, "request_id"),
        (Col::SourceAddress, "source_address"),
        (Col::DestinationAddress, "destination_address"),
        (Col::ResponseAddress, "response_address"),
        (Col::FaultAddress, "fault_address"),
        (Col::OutboxId, "outbox_id"),
    ];
    let mut cols = vec![
        format!("{}::bigint AS seq", n.ac(a, Col::SequenceNumber)),
        format!("{} AS sent_time", n.ts_read(&n.ac(a, Col::SentTime))),
        format!(
            "{} AS expiration_time",
            n.ts_read(&n.ac(a, Col::ExpirationTime))
        ),
    ];
    cols.extend(
        plain
            .iter()
            .map(|(c, alias)| format!("{}::text AS {alias}", n.ac(a, *c))),
    );
    cols.join(", ")
}

/// One bus-outbox message: the state row of the current transaction's outbox (created on the
/// first message), the message row, and a `NOTIFY`, in one statement. `$1` now, `$2` channel,
/// then the message values from `$3`.
fn bus_insert(n: &Names) -> String {
    let outbox_id = "md5('ferrybus-outbox:' || txid_current()::text)::uuid";
    format!(
        "WITH state AS (INSERT INTO {state} ({oid}, {lock}, {created}) VALUES ({outbox_id}, {NIL_UUID}, {now}) \
         ON CONFLICT ({oid}) DO NOTHING) \
         INSERT INTO {msg} ({oid}, {cols}) SELECT {outbox_id}, {values} \
         FROM (SELECT pg_notify($2, '')) AS notified RETURNING {oid} AS outbox_id",
        state = n.state,
        msg = n.message,
        oid = n.c(Col::OutboxId),
        lock = n.c(Col::LockId),
        created = n.c(Col::Created),
        now = n.ts_param(1),
        cols = message_column_list(n),
        values = message_placeholders(n, 3),
    )
}

/// `$1` outbox ids to skip (backed off) as a `{…}` array text, `$2` how many to claim.
fn claim_outboxes(n: &Names) -> String {
    format!(
        "SELECT {oid} AS outbox_id, {} IS NOT NULL AS delivered FROM {} \
         WHERE NOT ({oid} = ANY($1::text::uuid[])) ORDER BY {} LIMIT $2 FOR UPDATE SKIP LOCKED",
        n.c(Col::Delivered),
        n.state,
        n.c(Col::Created),
        oid = n.c(Col::OutboxId),
    )
}

/// `$1` claimed outbox ids, `$2` messages per outbox (one more is loaded to tell whether the
/// outbox is complete).
fn outbox_messages(n: &Names) -> String {
    let seq = n.c(Col::SequenceNumber);
    let oid = n.c(Col::OutboxId);
    format!(
        "SELECT {cols} FROM (SELECT m.*, row_number() OVER (PARTITION BY m.{oid} ORDER BY m.{seq}) AS fb_rn \
         FROM {msg} m JOIN {state} s ON s.{oid} = m.{oid} \
         WHERE m.{oid} = ANY($1::text::uuid[]) AND m.{seq} > COALESCE(s.{last}, 0)) x \
         WHERE x.fb_rn <= $2 + 1 ORDER BY x.{oid}, x.{seq}",
        cols = message_columns(n, "x"),
        msg = n.message,
        state = n.state,
        last = n.c(Col::LastSequenceNumber),
    )
}

/// `$1` consumed before, `$2` limit.
fn sweep_claim(n: &Names) -> String {
    format!(
        "SELECT {}::uuid AS message_id, {}::uuid AS consumer_id, {}::bigint AS last_sequence_number \
         FROM {} WHERE {} IS NULL AND {consumed} IS NOT NULL AND {consumed} < {} \
         ORDER BY {consumed} LIMIT $2 FOR UPDATE SKIP LOCKED",
        n.c(Col::MessageId),
        n.c(Col::ConsumerId),
        n.c(Col::LastSequenceNumber),
        n.inbox,
        n.c(Col::Delivered),
        n.ts_param(1),
        consumed = n.c(Col::Consumed),
    )
}

/// `$1` delivered before, `$2` batch size.
fn cleanup(n: &Names) -> String {
    format!(
        "DELETE FROM {inbox} WHERE {id} IN (SELECT i.{id} FROM {inbox} i WHERE i.{delivered} < {before} \
         AND NOT EXISTS (SELECT 1 FROM {msg} m WHERE m.{imid} = i.{mid} AND m.{icid} = i.{cid}) \
         ORDER BY i.{delivered} LIMIT $2 FOR UPDATE SKIP LOCKED)",
        inbox = n.inbox,
        msg = n.message,
        id = n.c(Col::Id),
        delivered = n.c(Col::Delivered),
        before = n.ts_param(1),
        imid = n.c(Col::InboxMessageId),
        icid = n.c(Col::InboxConsumerId),
        mid = n.c(Col::MessageId),
        cid = n.c(Col::ConsumerId),
    )
}
