//! Every SQL statement ferrybus runs on the three tables, built with sea-query for one
//! [`Tables`]: identifiers quoted by sea-query, every value bound (arrays as native PostgreSQL
//! arrays), column lists taken from the entities, rows decoded with `FromQueryResult`.
//!
//! Which index serves which statement is written in `docs/inbox-outbox.md` ("Statements and
//! indexes").

mod message;
pub(crate) mod names;

use chrono::{DateTime, Utc};
use ferrybus_core::outgoing::OutgoingMessage;
use sea_orm::sea_query::ExprTrait;
use sea_orm::sea_query::{
    Alias, Asterisk, CommonTableExpression, DynIden, Expr, Func, IntoIden, JoinType, LockBehavior,
    LockType, OnConflict, Order, PgFunc, Query, SelectStatement, SimpleExpr, SubQueryStatement,
    TableRef,
};
use sea_orm::{ConnectionTrait, DbBackend, FromQueryResult, Statement, StatementBuilder, Value};
use uuid::Uuid;

pub(crate) use message::{message_values, read_message, StoredRow};
use names::Names;

use crate::config::{Tables, TimestampType};
use crate::entity::OutboxTable;
use crate::entity::{inbox_state as inbox, outbox_message as msg, outbox_state as state};
use crate::error::StoreError;
use crate::fast::templates::{bind, Template};

/// Builds a sea-query statement for PostgreSQL.
pub(crate) fn build(statement: &impl StatementBuilder) -> Statement {
    DbBackend::Postgres.build(statement)
}

/// `expr AS alias`, for `RETURNING` lists: sea-query 0.32's `RETURNING` takes expressions but
/// no aliases. The alias is a fixed lowercase literal (joined at compile time), the expression
/// is built by sea-query.
macro_rules! named {
    ($expr:expr, $alias:literal) => {
        Expr::cust_with_expr(concat!("$1 AS ", $alias), SimpleExpr::from($expr))
    };
}

fn bigint(expr: impl Into<SimpleExpr>) -> SimpleExpr {
    expr.into().cast_as(alias("bigint"))
}

fn alias(name: &'static str) -> DynIden {
    names::iden(name)
}

/// The type of the time columns of `tables`, read from the inbox table's `Received` column
/// (`timestamp without time zone` for tables a .NET service created with Npgsql's legacy
/// timestamps).
pub(crate) async fn read_timestamp_type(
    db: &impl ConnectionTrait,
    tables: &Tables,
) -> Result<TimestampType, StoreError> {
    let column = names::column_name(inbox::Column::Received, tables.naming_style());
    #[derive(FromQueryResult)]
    struct DataType {
        data_type: String,
    }
    let query = Query::select()
        .expr_as(
            Expr::col(Alias::new("data_type")).cast_as(Alias::new("text")),
            Alias::new("data_type"),
        )
        .from((Alias::new("information_schema"), Alias::new("columns")))
        .and_where(Expr::col(Alias::new("table_schema")).eq(tables.schema_name()))
        .and_where(Expr::col(Alias::new("table_name")).eq(tables.inbox_state()))
        .and_where(Expr::col(Alias::new("column_name")).eq(column.as_str()))
        .to_owned();
    let Some(row) = db.query_one_raw(build(&query)).await? else {
        return Err(StoreError::config(format!(
            "column {column} of {}.{} not found",
            tables.schema_name(),
            tables.inbox_state()
        )));
    };
    let data_type = DataType::from_query_result(&row, "")?;
    Ok(if data_type.data_type == "timestamp without time zone" {
        TimestampType::WithoutTimeZone
    } else {
        TimestampType::WithTimeZone
    })
}

/// The statements for one set of tables, built with sea-query. Those that run for every
/// delivery or every pass of the after-commit sender (the inbox insert, the consumer-outbox
/// insert of a few messages, the bus-outbox insert, the sender's lock and finish) are rendered
/// once and then only bound to new values ([`Template`]).
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) names: Names,
    templates: Templates,
}

/// Consumer-outbox inserts of up to this many messages keep their rendered text.
const TEMPLATED_MESSAGES: usize = 8;

/// The texts of the templated statements, one [`Template`] per statement shape (the fast path:
/// see `crate::fast`).
#[derive(Debug, Default)]
struct Templates {
    inbox_insert: Template,
    /// By message count − 1, then with (`[1]`) or without the inbox-row update.
    inbox_messages: [[Template; 2]; TEMPLATED_MESSAGES],
    /// With (`[1]`) or without the `NOTIFY` (its channel is a bound value).
    bus_insert: [Template; 2],
    /// With (`[1]`) or without turning `synchronous_commit` off.
    inbox_lock_many: [Template; 2],
    inbox_finish_many: Template,
}

/// The inbox key: (original message id, consumer id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct InboxKey {
    pub(crate) message_id: Uuid,
    pub(crate) consumer_id: Uuid,
}

/// The message ids and the consumer ids of `keys`, as the arrays the many-row statements bind.
fn key_arrays<'a>(keys: impl Iterator<Item = &'a InboxKey>) -> (Vec<Uuid>, Vec<Uuid>) {
    keys.map(|k| (k.message_id, k.consumer_id)).unzip()
}

/// The state of an inbox row, as the lock and relock statements return it.
#[derive(Clone, Copy, Debug, FromQueryResult)]
pub(crate) struct RowState {
    pub(crate) consumed: bool,
    pub(crate) delivered: bool,
    pub(crate) last_sequence_number: Option<i64>,
}

/// An inbox row locked by [`Sql::inbox_lock_many`].
#[derive(Clone, Copy, Debug, FromQueryResult)]
pub(crate) struct LockedInbox {
    pub(crate) message_id: Uuid,
    pub(crate) consumer_id: Uuid,
    pub(crate) last_sequence_number: Option<i64>,
}

/// A claimed bus outbox, as [`Sql::claim_outboxes`] returns it on each of its rows.
#[derive(Debug, FromQueryResult)]
pub(crate) struct ClaimedOutbox {
    #[sea_orm(from_alias = "fb_outbox_id")]
    pub(crate) outbox_id: Uuid,
    #[sea_orm(from_alias = "fb_delivered")]
    pub(crate) delivered: bool,
}

/// An inbox row the sweeper claimed: consumed, not delivered, held by no delivery.
#[derive(Debug, FromQueryResult)]
pub(crate) struct SweptInbox {
    pub(crate) message_id: Uuid,
    pub(crate) consumer_id: Uuid,
    pub(crate) last_sequence_number: Option<i64>,
}

/// One returned sequence number.
#[derive(Debug, FromQueryResult)]
pub(crate) struct Seq {
    pub(crate) seq: i64,
}

/// One returned outbox id.
#[derive(Debug, FromQueryResult)]
pub(crate) struct WrittenOutbox {
    pub(crate) outbox_id: Uuid,
}

/// One count.
#[derive(Debug, FromQueryResult)]
pub(crate) struct Pending {
    pub(crate) pending: i64,
}

/// How many values one consumer-outbox message binds in [`Sql::insert_inbox_messages`] (the
/// inbox key and the written columns).
pub(crate) const BINDS_PER_MESSAGE: usize = 2 + 16;

use OutboxTable::{InboxState as INBOX, OutboxMessage as MESSAGE, OutboxState as STATE};

/// The id of the current transaction's bus outbox, the same for every statement of the
/// transaction and computed by the server: a UUIDv7 whose 48-bit time is the transaction's start
/// (`now()`, in milliseconds) and whose other bits come from `md5` of the transaction id.
///
/// Time-ordered on purpose. The relay claims outboxes oldest first and deletes them by id: with
/// ids in time order, new and claimed rows sit together at the ends of the `OutboxId` indexes
/// (`PK_OutboxState`, `IX_OutboxMessage_OutboxId_SequenceNumber` and the foreign key's check),
/// so a backlog of a million pending outboxes keeps the pages a pass touches in memory. Random
/// ids (an earlier `md5(txid)::uuid`) spread every pass over the whole index, and the relay
/// drained a million-row backlog at 0.62x its rate over a small one (docs/benchmarks.md).
/// Two transactions never share an id: their transaction ids differ, and a reused transaction
/// id (a database restored into a new cluster) comes with a later start time.
pub(crate) const BUS_OUTBOX_ID: &str =
    "(lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') \
     || '7' || substr(md5('ferrybus-outbox:' || txid_current()::text), 1, 3) \
     || '8' || substr(md5('ferrybus-outbox:' || txid_current()::text), 4, 15))::uuid";

impl Sql {
    pub(crate) fn new(tables: &Tables) -> Self {
        Self {
            names: Names::new(tables),
            templates: Templates::default(),
        }
    }

    /// `MessageId = key AND ConsumerId = key` on the inbox table.
    fn inbox_key(&self, key: InboxKey) -> SimpleExpr {
        let n = &self.names;
        Expr::col(n.c(inbox::Column::MessageId))
            .eq(key.message_id)
            .and(Expr::col(n.c(inbox::Column::ConsumerId)).eq(key.consumer_id))
    }

    /// `InboxMessageId = key AND InboxConsumerId = key` on the message table (alias `a` or none).
    fn message_key(&self, a: Option<&'static str>, key: InboxKey) -> SimpleExpr {
        let n = &self.names;
        let col = |c: msg::Column| match a {
            Some(a) => n.ac(a, c),
            None => n.e(c),
        };
        Expr::expr(col(msg::Column::InboxMessageId))
            .eq(key.message_id)
            .and(Expr::expr(col(msg::Column::InboxConsumerId)).eq(key.consumer_id))
    }

    /// `Consumed IS NOT NULL AS consumed, Delivered IS NOT NULL AS delivered,
    /// LastSequenceNumber::bigint AS last_sequence_number` ([`RowState`]).
    fn state_flags(&self) -> [(SimpleExpr, DynIden); 3] {
        let n = &self.names;
        [
            (
                Expr::col(n.c(inbox::Column::Consumed)).is_not_null(),
                alias("consumed"),
            ),
            (
                Expr::col(n.c(inbox::Column::Delivered)).is_not_null(),
                alias("delivered"),
            ),
            (
                bigint(n.e(inbox::Column::LastSequenceNumber)),
                alias("last_sequence_number"),
            ),
        ]
    }

    /// The inbox row, written already `Consumed`, and `Delivered` unless `pending`: it only
    /// becomes visible when the consumer's transaction commits (and disappears with a
    /// rollback), so the row is written once whatever the consumer does, when the guess is
    /// right: "consumed, nothing to send" (`pending: false`) or "consumed, messages to send"
    /// (`pending: true`, MassTransit's `Delivered` NULL). A wrong guess costs one more
    /// statement (see `flow::write`). Nothing happens when the row exists.
    pub(crate) fn inbox_insert(
        &self,
        key: InboxKey,
        lock_id: Uuid,
        now: DateTime<Utc>,
        pending: bool,
    ) -> Statement {
        let values = self.inbox_insert_values(key, lock_id, now, pending);
        let template = &self.templates.inbox_insert;
        match template.text() {
            Some(text) => bind(text, values),
            None => template.keep(self.render_inbox_insert(key, lock_id, now, values)),
        }
    }

    /// The values [`Sql::inbox_insert`] binds, in order.
    fn inbox_insert_values(
        &self,
        key: InboxKey,
        lock_id: Uuid,
        now: DateTime<Utc>,
        pending: bool,
    ) -> Vec<Value> {
        let n = &self.names;
        vec![
            key.message_id.into(),
            key.consumer_id.into(),
            lock_id.into(),
            n.ts_value(Some(now)),
            0i32.into(),
            n.ts_value(Some(now)),
            n.ts_value((!pending).then_some(now)),
        ]
    }

    fn render_inbox_insert(
        &self,
        key: InboxKey,
        lock_id: Uuid,
        now: DateTime<Utc>,
        values: Vec<Value>,
    ) -> Statement {
        let n = &self.names;
        let delivered = values.last().cloned().unwrap_or(Value::Int(None));
        let query = Query::insert()
            .into_table(n.table(INBOX))
            .columns([
                n.c(inbox::Column::MessageId),
                n.c(inbox::Column::ConsumerId),
                n.c(inbox::Column::LockId),
                n.c(inbox::Column::Received),
                n.c(inbox::Column::ReceiveCount),
                n.c(inbox::Column::Consumed),
                n.c(inbox::Column::Delivered),
            ])
            .values_panic([
                key.message_id.into(),
                key.consumer_id.into(),
                lock_id.into(),
                n.ts(now),
                0i32.into(),
                n.ts(now),
                Expr::val(delivered),
            ])
            .on_conflict(
                OnConflict::columns([
                    n.c(inbox::Column::MessageId),
                    n.c(inbox::Column::ConsumerId),
                ])
                .do_nothing()
                .to_owned(),
            )
            .to_owned();
        build(&query)
    }

    /// Takes an existing inbox row: new `LockId`, `ReceiveCount + 1`; returns its [`RowState`]
    /// (waits for the row lock of a concurrent first copy).
    pub(crate) fn inbox_relock(&self, key: InboxKey, lock_id: Uuid) -> Statement {
        let n = &self.names;
        let rc = n.c(inbox::Column::ReceiveCount);
        let [consumed, delivered, last] = self.state_flags().map(|(e, _)| e);
        let query = Query::update()
            .table(n.table(INBOX))
            .value(n.c(inbox::Column::LockId), lock_id)
            .value(rc.clone(), Expr::col(rc).add(1))
            .and_where(self.inbox_key(key))
            .returning(Query::returning().exprs([
                named!(consumed, "consumed"),
                named!(delivered, "delivered"),
                named!(last, "last_sequence_number"),
            ]))
            .to_owned();
        build(&query)
    }

    /// Locks the inbox row (`FOR UPDATE`) and returns its [`RowState`]; `async_commit` also
    /// turns off `synchronous_commit` for the rest of the transaction, in the same statement
    /// (`set_config(…, true)` is `SET LOCAL`).
    pub(crate) fn inbox_lock(&self, key: InboxKey, async_commit: bool) -> Statement {
        let n = &self.names;
        let mut query = Query::select();
        for (expr, name) in self.state_flags() {
            query.expr_as(expr, name);
        }
        if async_commit {
            query.expr_as(
                Func::cust(alias("set_config")).args([
                    SimpleExpr::from("synchronous_commit"),
                    SimpleExpr::from("off"),
                    SimpleExpr::from(true),
                ]),
                alias("sc"),
            );
        }
        query
            .from(n.table(INBOX))
            .and_where(self.inbox_key(key))
            .lock(LockType::Update);
        build(&query)
    }

    /// `SELECT unnest($1) AS mid, unnest($2) AS cid` over the inbox keys (the arrays unnest in
    /// lockstep), for `(MessageId, ConsumerId) IN (…)`.
    fn keys_subquery(keys: &[InboxKey]) -> SelectStatement {
        let (mids, cids) = key_arrays(keys.iter());
        Query::select()
            .expr(Func::cust(alias("unnest")).arg(Expr::val(mids)))
            .expr(Func::cust(alias("unnest")).arg(Expr::val(cids)))
            .to_owned()
    }

    /// Locks the inbox rows of `keys` that are not delivered yet, skipping rows another
    /// transaction holds (the sweeper, a redelivered copy), and returns their keys and progress
    /// ([`LockedInbox`]); `async_commit` also turns off `synchronous_commit` for the rest of
    /// the transaction, in the same statement.
    ///
    /// The text depends only on `async_commit` (the keys are bound as arrays), so it is
    /// rendered once ([`Templates`]).
    pub(crate) fn inbox_lock_many(&self, keys: &[InboxKey], async_commit: bool) -> Statement {
        let template = &self.templates.inbox_lock_many[usize::from(async_commit)];
        let Some(text) = template.text() else {
            return template.keep(self.render_inbox_lock_many(keys, async_commit));
        };
        let (mids, cids) = key_arrays(keys.iter());
        let mut values: Vec<Value> = Vec::with_capacity(6);
        if async_commit {
            values.extend(["synchronous_commit".into(), "off".into(), true.into()]);
        }
        values.extend([mids.clone().into(), mids.into(), cids.into()]);
        bind(text, values)
    }

    fn render_inbox_lock_many(&self, keys: &[InboxKey], async_commit: bool) -> Statement {
        let n = &self.names;
        let mut query = Query::select();
        query
            .expr_as(n.e(inbox::Column::MessageId), alias("message_id"))
            .expr_as(n.e(inbox::Column::ConsumerId), alias("consumer_id"))
            .expr_as(
                bigint(n.e(inbox::Column::LastSequenceNumber)),
                alias("last_sequence_number"),
            );
        if async_commit {
            query.expr_as(
                Func::cust(alias("set_config")).args([
                    SimpleExpr::from("synchronous_commit"),
                    SimpleExpr::from("off"),
                    SimpleExpr::from(true),
                ]),
                alias("sc"),
            );
        }
        query
            .from(n.table(INBOX))
            .and_where(
                Expr::col(n.c(inbox::Column::MessageId)).eq(PgFunc::any(Expr::val(
                    keys.iter().map(|k| k.message_id).collect::<Vec<_>>(),
                ))),
            )
            .and_where(
                Expr::tuple([
                    n.e(inbox::Column::MessageId),
                    n.e(inbox::Column::ConsumerId),
                ])
                .in_subquery(Self::keys_subquery(keys)),
            )
            .and_where(Expr::col(n.c(inbox::Column::Delivered)).is_null())
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        build(&query)
    }

    /// Records completed consumer-outbox entries in one statement: their messages deleted
    /// (a CTE), `Delivered` set, `LastSequenceNumber` the last sent (where something was
    /// sent), `LockId` set to `lock_id`.
    ///
    /// The text is the same for any number of entries (they are bound as arrays), so it is
    /// rendered once ([`Templates`]).
    pub(crate) fn inbox_finish_many(
        &self,
        done: &[(InboxKey, Option<i64>)],
        now: DateTime<Utc>,
        lock_id: Uuid,
    ) -> Statement {
        let template = &self.templates.inbox_finish_many;
        let Some(text) = template.text() else {
            return template.keep(self.render_inbox_finish_many(done, now, lock_id));
        };
        let (mids, cids) = key_arrays(done.iter().map(|(k, _)| k));
        let lasts: Vec<i64> = done.iter().map(|(_, last)| last.unwrap_or(0)).collect();
        // In the order sea-query binds them: the delete's keys, the update's values, the
        // entries' arrays.
        let values: Vec<Value> = vec![
            mids.clone().into(),
            mids.clone().into(),
            cids.clone().into(),
            self.names.ts_value(Some(now)),
            0i32.into(),
            lock_id.into(),
            mids.into(),
            cids.into(),
            lasts.into(),
        ];
        bind(text, values)
    }

    fn render_inbox_finish_many(
        &self,
        done: &[(InboxKey, Option<i64>)],
        now: DateTime<Utc>,
        lock_id: Uuid,
    ) -> Statement {
        let n = &self.names;
        let keys: Vec<InboxKey> = done.iter().map(|(k, _)| *k).collect();
        let sent = Query::delete()
            .from_table(n.table(MESSAGE))
            .and_where(
                Expr::col(n.c(msg::Column::InboxMessageId)).eq(PgFunc::any(Expr::val(
                    keys.iter().map(|k| k.message_id).collect::<Vec<_>>(),
                ))),
            )
            .and_where(
                Expr::tuple([
                    n.e(msg::Column::InboxMessageId),
                    n.e(msg::Column::InboxConsumerId),
                ])
                .in_subquery(Self::keys_subquery(&keys)),
            )
            .to_owned();
        let (mids, cids) = key_arrays(keys.iter());
        let lasts: Vec<i64> = done.iter().map(|(_, last)| last.unwrap_or(0)).collect();
        let k = alias("fb_k");
        let entries = Query::select()
            .expr_as(
                Func::cust(alias("unnest")).arg(Expr::val(mids)),
                alias("mid"),
            )
            .expr_as(
                Func::cust(alias("unnest")).arg(Expr::val(cids)),
                alias("cid"),
            )
            .expr_as(
                Func::cust(alias("unnest")).arg(Expr::val(lasts)),
                alias("last"),
            )
            .to_owned();
        let lsn = n.c(inbox::Column::LastSequenceNumber);
        let last = Expr::col((k.clone(), alias("last")));
        let query = Query::update()
            .table(n.table(INBOX))
            .from(TableRef::SubQuery(Box::new(entries), k.clone().into_iden()))
            .value(n.c(inbox::Column::Delivered), n.ts(now))
            .value(
                lsn.clone(),
                Expr::case(last.clone().gt(0), last).finally(Expr::col(lsn)),
            )
            .value(n.c(inbox::Column::LockId), lock_id)
            .and_where(Expr::col(n.c(inbox::Column::MessageId)).equals((k.clone(), alias("mid"))))
            .and_where(Expr::col(n.c(inbox::Column::ConsumerId)).equals((k, alias("cid"))))
            .with_cte(
                CommonTableExpression::new()
                    .query(sent)
                    .table_name(alias("sent"))
                    .to_owned(),
            )
            .to_owned();
        build(&query)
    }

    /// Marks an older, unconsumed inbox row consumed and delivered.
    pub(crate) fn inbox_consumed_delivered(&self, key: InboxKey, now: DateTime<Utc>) -> Statement {
        let n = &self.names;
        let query = Query::update()
            .table(n.table(INBOX))
            .value(n.c(inbox::Column::Consumed), n.ts(now))
            .value(n.c(inbox::Column::Delivered), n.ts(now))
            .and_where(self.inbox_key(key))
            .to_owned();
        build(&query)
    }

    /// Records sent consumer-outbox messages on the (locked) inbox row, in one statement: the
    /// sent rows are deleted (all of them when `complete`, else those up to `last`),
    /// `LastSequenceNumber` becomes `last` (when something was sent), `LockId` changes, and
    /// `complete` also sets `Delivered`.
    pub(crate) fn inbox_finish(
        &self,
        key: InboxKey,
        now: DateTime<Utc>,
        last: Option<i64>,
        lock_id: Uuid,
        complete: bool,
    ) -> Statement {
        let n = &self.names;
        let mut sent = Query::delete();
        sent.from_table(n.table(MESSAGE))
            .and_where(self.message_key(None, key));
        if !complete {
            sent.and_where(Expr::col(n.c(msg::Column::SequenceNumber)).lte(last));
        }
        let lsn = n.c(inbox::Column::LastSequenceNumber);
        let mut query = Query::update();
        query.table(n.table(INBOX));
        if complete {
            query.value(n.c(inbox::Column::Delivered), n.ts(now));
        }
        query
            .value(
                lsn.clone(),
                Func::coalesce([Expr::val(last), Expr::col(lsn)]),
            )
            .value(n.c(inbox::Column::LockId), lock_id)
            .and_where(self.inbox_key(key))
            .with_cte(
                CommonTableExpression::new()
                    .query(sent)
                    .table_name(alias("sent"))
                    .to_owned(),
            );
        build(&query)
    }

    /// The consumer-outbox messages of `key` after sequence number `after`, in order.
    pub(crate) fn inbox_messages(&self, key: InboxKey, after: i64) -> Statement {
        let n = &self.names;
        let mut query = Query::select();
        for (expr, name) in message::message_columns(n, "m") {
            query.expr_as(expr, name);
        }
        query
            .from(n.table_as(MESSAGE, "m"))
            .and_where(self.message_key(Some("m"), key))
            .and_where(Expr::expr(n.ac("m", msg::Column::SequenceNumber)).gt(after))
            .order_by_expr(n.ac("m", msg::Column::SequenceNumber), Order::Asc);
        build(&query)
    }

    /// A multi-row insert of consumer-outbox messages of `key` ([`BINDS_PER_MESSAGE`] values
    /// each) returning their sequence numbers in insertion order ([`Seq`]). With `pending_at`
    /// the same statement also sets the inbox row's `Consumed` and clears `Delivered` (a
    /// data-modifying CTE): consumed, messages to send.
    pub(crate) fn insert_inbox_messages(
        &self,
        key: InboxKey,
        messages: &[OutgoingMessage],
        pending_at: Option<DateTime<Utc>>,
    ) -> Result<Statement, StoreError> {
        let n = &self.names;
        let rows = messages
            .iter()
            .map(|m| message_values(n, m))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(template) = messages
            .len()
            .checked_sub(1)
            .and_then(|i| self.templates.inbox_messages.get(i))
            .map(|t| &t[usize::from(pending_at.is_some())])
        else {
            return self.render_inbox_messages(key, rows, pending_at);
        };
        let Some(text) = template.text() else {
            let rendered = self.render_inbox_messages(key, rows, pending_at)?;
            return Ok(template.keep(rendered));
        };
        // The values move into the statement: a message's body is not copied again.
        let mut values = Vec::with_capacity(4 + rows.len() * BINDS_PER_MESSAGE);
        if let Some(now) = pending_at {
            values.extend([
                n.ts_value(Some(now)),
                n.ts_value(None),
                key.message_id.into(),
                key.consumer_id.into(),
            ]);
        }
        for row in rows {
            values.extend([key.message_id.into(), key.consumer_id.into()]);
            values.extend(row.into_iter().map(|(_, v)| v));
        }
        Ok(bind(text, values))
    }

    fn render_inbox_messages(
        &self,
        key: InboxKey,
        rows: Vec<Vec<(msg::Column, Value)>>,
        pending_at: Option<DateTime<Utc>>,
    ) -> Result<Statement, StoreError> {
        let n = &self.names;
        let mut query = Query::insert();
        query.into_table(n.table(MESSAGE));
        for (i, values) in rows.into_iter().enumerate() {
            if i == 0 {
                let mut columns = vec![
                    n.c(msg::Column::InboxMessageId),
                    n.c(msg::Column::InboxConsumerId),
                ];
                columns.extend(values.iter().map(|(c, _)| n.c(*c)));
                query.columns(columns);
            }
            let mut row: Vec<SimpleExpr> = vec![key.message_id.into(), key.consumer_id.into()];
            row.extend(values.into_iter().map(|(_, v)| Expr::val(v)));
            query
                .values(row)
                .map_err(|e| StoreError::encode(e.to_string()))?;
        }
        query.returning(
            Query::returning().expr(named!(bigint(n.e(msg::Column::SequenceNumber)), "seq")),
        );
        if let Some(now) = pending_at {
            let pending = Query::update()
                .table(n.table(INBOX))
                .value(n.c(inbox::Column::Consumed), n.ts(now))
                .value(n.c(inbox::Column::Delivered), Expr::val(n.ts_value(None)))
                .and_where(self.inbox_key(key))
                .to_owned();
            query.with_cte(
                CommonTableExpression::new()
                    .query(pending)
                    .table_name(alias("pending"))
                    .to_owned(),
            );
        }
        Ok(build(&query))
    }

    /// One bus-outbox message: the state row of the current transaction's outbox (created on
    /// the first message; its id is [`BUS_OUTBOX_ID`]), the message row, and a `NOTIFY` on
    /// `notify` when there is one, in one statement; returns the outbox id ([`WrittenOutbox`]).
    pub(crate) fn bus_insert(
        &self,
        now: DateTime<Utc>,
        notify: Option<&str>,
        message: &OutgoingMessage,
    ) -> Result<Statement, StoreError> {
        let n = &self.names;
        let row = message_values(n, message)?;
        let template = &self.templates.bus_insert[usize::from(notify.is_some())];
        let Some(text) = template.text() else {
            let rendered = self.render_bus_insert(now, notify, row)?;
            return Ok(template.keep(rendered));
        };
        // In the order sea-query binds them: the state row's, the message's, the NOTIFY's.
        let mut values = Vec::with_capacity(4 + BINDS_PER_MESSAGE);
        values.extend([Uuid::nil().into(), n.ts_value(Some(now))]);
        values.extend(row.into_iter().map(|(_, v)| v));
        if let Some(channel) = notify {
            values.extend([channel.into(), "".into()]);
        }
        Ok(bind(text, values))
    }

    fn render_bus_insert(
        &self,
        now: DateTime<Utc>,
        notify: Option<&str>,
        values: Vec<(msg::Column, Value)>,
    ) -> Result<Statement, StoreError> {
        let n = &self.names;
        let outbox_id = || Expr::cust(BUS_OUTBOX_ID);
        let oid = n.c(state::Column::OutboxId);
        let state_row = Query::insert()
            .into_table(n.table(STATE))
            .columns([
                oid.clone(),
                n.c(state::Column::LockId),
                n.c(state::Column::Created),
            ])
            .values_panic([outbox_id(), Uuid::nil().into(), n.ts(now)])
            .on_conflict(OnConflict::column(oid.clone()).do_nothing().to_owned())
            .to_owned();
        let mut columns = vec![n.c(msg::Column::OutboxId)];
        columns.extend(values.iter().map(|(c, _)| n.c(*c)));
        let mut select = Query::select();
        select.expr(outbox_id());
        select.exprs(
            values
                .into_iter()
                .map(|(_, v)| SimpleExpr::from(Expr::val(v))),
        );
        if let Some(channel) = notify {
            select.from_subquery(
                Query::select()
                    .expr(
                        Func::cust(alias("pg_notify"))
                            .args([SimpleExpr::from(channel), SimpleExpr::from("")]),
                    )
                    .to_owned(),
                alias("notified"),
            );
        }
        let mut query = Query::insert();
        query
            .into_table(n.table(MESSAGE))
            .columns(columns)
            .select_from(select)
            .map_err(|e| StoreError::encode(e.to_string()))?;
        query
            .returning(
                Query::returning().expr(named!(Expr::col(n.c(msg::Column::OutboxId)), "outbox_id")),
            )
            .with_cte(
                CommonTableExpression::new()
                    .query(state_row)
                    .table_name(alias("state"))
                    .to_owned(),
            );
        Ok(build(&query))
    }

    /// Claims up to `limit` bus outboxes, oldest first, skipping `excluded` (backed off) and
    /// rows other workers hold, and reads their unsent messages in the same statement: at most
    /// `per_outbox + 1` each (one more tells whether the outbox is complete), in sequence order.
    ///
    /// The claim runs only when the pass gets one of `passes` slots of this outbox table (see
    /// [`Sql::delivery_slot`]): at most `passes` claims hold rows at once, whatever the number
    /// of instances, and none walks past more locked rows than they hold.
    ///
    /// One row per message ([`ClaimedOutbox`] plus the message's columns), or one whose message
    /// columns are NULL for a claimed outbox that has none left. The claim is a CTE (`… LIMIT n FOR UPDATE SKIP LOCKED`); each claimed
    /// outbox's messages come from a `LEFT JOIN LATERAL` on the (`OutboxId`, `SequenceNumber`)
    /// index, after the locked state's `LastSequenceNumber`.
    pub(crate) fn claim_outboxes(
        &self,
        excluded: &[Uuid],
        limit: u64,
        per_outbox: u64,
        passes: u32,
    ) -> Statement {
        let n = &self.names;
        let (c, m, x) = (alias("c"), alias("m"), alias("x"));
        let claim = Query::select()
            .expr_as(
                Expr::col(n.c(state::Column::OutboxId)),
                alias("fb_outbox_id"),
            )
            .expr_as(
                Expr::col(n.c(state::Column::Delivered)).is_not_null(),
                alias("fb_delivered"),
            )
            .expr_as(
                Func::coalesce([
                    bigint(Expr::col(n.c(state::Column::LastSequenceNumber))),
                    Expr::val(0i64),
                ]),
                alias("fb_after"),
            )
            .from(n.table(STATE))
            .and_where(
                Expr::col(n.c(state::Column::OutboxId))
                    .eq(PgFunc::any(Expr::val(excluded.to_vec())))
                    .not(),
            )
            .and_where(self.delivery_slot(passes))
            .order_by(n.c(state::Column::Created), Order::Asc)
            .limit(limit)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
            .to_owned();
        let oid = n.c(msg::Column::OutboxId);
        let seq = n.c(msg::Column::SequenceNumber);
        let messages = Query::select()
            .column((m.clone(), Asterisk))
            .from(n.table_as(MESSAGE, "m"))
            .and_where(
                Expr::col((m.clone(), oid.clone())).equals((c.clone(), alias("fb_outbox_id"))),
            )
            .and_where(
                Expr::col((m.clone(), seq.clone())).gt(Expr::col((c.clone(), alias("fb_after")))),
            )
            .order_by((m, seq.clone()), Order::Asc)
            .limit(per_outbox.saturating_add(1))
            .to_owned();
        let mut query = Query::select();
        query
            .expr_as(
                Expr::col((c.clone(), alias("fb_outbox_id"))),
                alias("fb_outbox_id"),
            )
            .expr_as(
                Expr::col((c.clone(), alias("fb_delivered"))),
                alias("fb_delivered"),
            );
        for (expr, name) in message::message_columns(n, "x") {
            query.expr_as(expr, name);
        }
        query
            .from(c.clone())
            .join_lateral(JoinType::LeftJoin, messages, x.clone(), Expr::cust("TRUE"))
            .order_by((c.clone(), alias("fb_outbox_id")), Order::Asc)
            .order_by((x, seq), Order::Asc);
        query.with_cte(
            CommonTableExpression::new()
                .query(claim)
                .table_name(c)
                .to_owned(),
        );
        build(&query)
    }

    /// `EXISTS (SELECT 1 FROM generate_series(0, passes - 1) AS slot WHERE
    /// pg_try_advisory_xact_lock(hashtext('<schema>.<OutboxState>'), slot))`: takes the first free
    /// one of `passes` transaction-scoped advisory locks of this outbox table, or is false when
    /// every one is held. Uncorrelated, so PostgreSQL evaluates it once, before the claim scans.
    fn delivery_slot(&self, passes: u32) -> SimpleExpr {
        let slot = alias("fb_slot");
        let last = i32::try_from(passes.saturating_sub(1)).unwrap_or(i32::MAX);
        let key = self.names.outbox_key().to_owned();
        let free_slot = Query::select()
            .expr(Expr::val(1))
            .from_function(
                Func::cust(alias("generate_series")).args([Expr::val(0), Expr::val(last)]),
                slot.clone(),
            )
            .and_where(
                Func::cust(alias("pg_try_advisory_xact_lock"))
                    .args([
                        SimpleExpr::from(Func::cust(alias("hashtext")).arg(Expr::val(key))),
                        Expr::col(slot),
                    ])
                    .into(),
            )
            .to_owned();
        Expr::exists(free_slot)
    }

    /// Deletes the messages of completed outboxes and the sent messages of partly sent ones.
    ///
    /// Two deletes rather than one with `OR`: an `OR` of the two `= ANY(…)` conditions made
    /// PostgreSQL scan the whole table (~170 ms per pass at 4 000 rows); each half uses its
    /// index. The two sets are disjoint (completed outboxes / sent rows of partly sent ones).
    pub(crate) fn delete_outbox_messages(&self, complete: &[Uuid], sent: &[i64]) -> Statement {
        let n = &self.names;
        let by_outbox = Query::delete()
            .from_table(n.table(MESSAGE))
            .and_where(
                Expr::col(n.c(msg::Column::OutboxId)).eq(PgFunc::any(Expr::val(complete.to_vec()))),
            )
            .to_owned();
        let query = Query::delete()
            .from_table(n.table(MESSAGE))
            .and_where(
                Expr::col(n.c(msg::Column::SequenceNumber))
                    .eq(PgFunc::any(Expr::val(sent.to_vec()))),
            )
            .with_cte(
                CommonTableExpression::new()
                    .query(by_outbox)
                    .table_name(alias("complete"))
                    .to_owned(),
            )
            .to_owned();
        build(&query)
    }

    /// Deletes the state rows of completed outboxes.
    pub(crate) fn delete_outbox_states(&self, complete: &[Uuid]) -> Statement {
        let n = &self.names;
        let query = Query::delete()
            .from_table(n.table(STATE))
            .and_where(
                Expr::col(n.c(state::Column::OutboxId))
                    .eq(PgFunc::any(Expr::val(complete.to_vec()))),
            )
            .to_owned();
        build(&query)
    }

    /// Records the last sent sequence number of a partly sent outbox.
    pub(crate) fn outbox_progress(&self, id: Uuid, seq: i64) -> Statement {
        let n = &self.names;
        let query = Query::update()
            .table(n.table(STATE))
            .value(n.c(state::Column::LastSequenceNumber), seq)
            .and_where(Expr::col(n.c(state::Column::OutboxId)).eq(id))
            .to_owned();
        build(&query)
    }

    /// Claims up to `limit` inbox rows consumed before `before` and not delivered, oldest first,
    /// skipping rows a delivery holds ([`SweptInbox`]).
    /// The inbox rows the sweeper takes: consumed before `before`, not delivered, none of
    /// `excluded` (entries backed off or set aside), oldest first, up to `limit`, skipping
    /// rows a delivery holds.
    pub(crate) fn sweep_claim(
        &self,
        before: DateTime<Utc>,
        excluded: &[InboxKey],
        limit: u64,
    ) -> Statement {
        let n = &self.names;
        let consumed = n.c(inbox::Column::Consumed);
        let mut query = Query::select();
        if !excluded.is_empty() {
            query.and_where(
                Expr::tuple([
                    n.e(inbox::Column::MessageId),
                    n.e(inbox::Column::ConsumerId),
                ])
                .not_in_subquery(Self::keys_subquery(excluded)),
            );
        }
        let query = query
            .expr_as(n.e(inbox::Column::MessageId), alias("message_id"))
            .expr_as(n.e(inbox::Column::ConsumerId), alias("consumer_id"))
            .expr_as(
                bigint(n.e(inbox::Column::LastSequenceNumber)),
                alias("last_sequence_number"),
            )
            .from(n.table(INBOX))
            .and_where(Expr::col(n.c(inbox::Column::Delivered)).is_null())
            .and_where(Expr::col(consumed.clone()).is_not_null())
            .and_where(Expr::col(consumed.clone()).lt(n.ts(before)))
            .order_by(consumed, Order::Asc)
            .limit(limit)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
            .to_owned();
        build(&query)
    }

    /// Deletes up to `limit` inbox rows delivered before `before`, oldest first, skipping rows
    /// still referenced by an outbox message and rows locked by a delivery.
    pub(crate) fn cleanup(&self, before: DateTime<Utc>, limit: u64) -> Statement {
        let n = &self.names;
        let id = n.c(inbox::Column::Id);
        let referenced = Query::select()
            .expr(Expr::val(1))
            .from(n.table_as(MESSAGE, "m"))
            .and_where(
                Expr::expr(n.ac("m", msg::Column::InboxMessageId))
                    .equals((alias("i"), n.c(inbox::Column::MessageId))),
            )
            .and_where(
                Expr::expr(n.ac("m", msg::Column::InboxConsumerId))
                    .equals((alias("i"), n.c(inbox::Column::ConsumerId))),
            )
            .to_owned();
        let expired = Query::select()
            .expr(n.ac("i", inbox::Column::Id))
            .from(n.table_as(INBOX, "i"))
            .and_where(Expr::expr(n.ac("i", inbox::Column::Delivered)).lt(n.ts(before)))
            .and_where(Expr::exists(referenced).not())
            .order_by_expr(n.ac("i", inbox::Column::Delivered), Order::Asc)
            .limit(limit)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
            .to_owned();
        // `id = ANY(ARRAY(…))`, not `id IN (…)`: the batch is an InitPlan evaluated once and
        // the delete an index scan on the primary key, whatever the statistics say; `IN` let
        // the planner pick a hash semi-join over a sequential scan of the whole table.
        let batch = SimpleExpr::FunctionCall(Func::cust(alias("ARRAY")).arg(SimpleExpr::SubQuery(
            None,
            Box::new(SubQueryStatement::SelectStatement(expired)),
        )));
        let query = Query::delete()
            .from_table(n.table(INBOX))
            .and_where(Expr::col(id).eq(PgFunc::any(batch)))
            .to_owned();
        build(&query)
    }

    /// How many bus-outbox rows (states and messages) are waiting ([`Pending`]).
    pub(crate) fn pending_bus_outbox(&self) -> Statement {
        let n = &self.names;
        let count = |table, filter: Option<SimpleExpr>| -> SimpleExpr {
            let mut q = Query::select();
            q.expr(Func::count(Expr::col(Asterisk)))
                .from(n.table(table));
            if let Some(filter) = filter {
                q.and_where(filter);
            }
            SimpleExpr::SubQuery(None, Box::new(SubQueryStatement::SelectStatement(q)))
        };
        let total = count(STATE, None).add(count(
            MESSAGE,
            Some(Expr::col(n.c(msg::Column::OutboxId)).is_not_null()),
        ));
        let query = Query::select()
            .expr_as(bigint(total), alias("pending"))
            .to_owned();
        build(&query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TimestampType;
    use ferrybus_core::outgoing::OutgoingMessage;

    fn message() -> OutgoingMessage {
        OutgoingMessage {
            message_id: Uuid::new_v4(),
            conversation_id: None,
            correlation_id: None,
            initiator_id: None,
            request_id: None,
            source_address: None,
            destination_address: "rabbitmq://localhost/x".into(),
            response_address: None,
            fault_address: None,
            message_type: vec!["urn:message:A:B".into()],
            content_type: "application/vnd.masstransit+json".into(),
            body: b"{}".to_vec().into(),
            headers: ferrybus_core::Headers::new(),
            sent_time: Utc::now(),
            expiration_time: None,
            publish_bindings: Vec::new(),
            properties: Default::default(),
            timestamp_headers: Vec::new(),
        }
    }

    /// Prints every statement (run with `--nocapture` to read them) and checks that values are
    /// bound, never inlined.
    #[test]
    fn statements_bind_every_value() {
        for tables in [
            Tables::new(),
            Tables::dotnet_default().timestamps(TimestampType::WithoutTimeZone),
        ] {
            let sql = Sql::new(&tables);
            let key = InboxKey {
                message_id: Uuid::new_v4(),
                consumer_id: Uuid::new_v4(),
            };
            let now = Utc::now();
            let id = Uuid::new_v4();
            let statements = [
                sql.inbox_insert(key, id, now, false),
                sql.inbox_insert(key, id, now, true),
                sql.inbox_relock(key, id),
                sql.inbox_lock(key, true),
                sql.inbox_consumed_delivered(key, now),
                sql.inbox_finish(key, now, Some(3), id, true),
                sql.inbox_finish(key, now, Some(3), id, false),
                sql.inbox_lock_many(&[key, key], true),
                sql.inbox_finish_many(&[(key, Some(3)), (key, None)], now, id),
                sql.inbox_messages(key, 0),
                sql.insert_inbox_messages(key, &[message(), message()], Some(now))
                    .unwrap(),
                sql.insert_inbox_messages(key, &[message()], None).unwrap(),
                sql.bus_insert(now, Some("chan"), &message()).unwrap(),
                sql.claim_outboxes(&[id], 64, 100, 4),
                sql.delete_outbox_messages(&[id], &[1, 2]),
                sql.delete_outbox_states(&[id]),
                sql.outbox_progress(id, 4),
                sql.sweep_claim(now, &[key], 32),
                sql.cleanup(now, 100),
                sql.pending_bus_outbox(),
            ];
            for statement in statements {
                println!("{}\n", statement.sql);
                assert!(
                    !statement.sql.as_str().contains(&id.to_string()),
                    "{}",
                    statement.sql
                );
                assert!(
                    !statement.sql.as_str().contains("chan"),
                    "{}",
                    statement.sql
                );
            }
        }
    }
}

#[cfg(test)]
mod template_tests {
    use super::*;
    use crate::config::TimestampType;

    fn message(n: u32) -> OutgoingMessage {
        let mut headers = ferrybus_core::Headers::new();
        headers.insert("n", serde_json::json!(n));
        OutgoingMessage {
            message_id: Uuid::new_v4(),
            conversation_id: Some(Uuid::new_v4()),
            correlation_id: None,
            initiator_id: Some(Uuid::new_v4()),
            request_id: None,
            source_address: Some(format!("rabbitmq://localhost/source-{n}")),
            destination_address: format!("rabbitmq://localhost/x-{n}"),
            response_address: None,
            fault_address: Some("rabbitmq://localhost/faults".into()),
            message_type: vec!["urn:message:A:B".into(), "urn:message:A:C".into()],
            content_type: "application/vnd.masstransit+json".into(),
            body: format!("{{\"n\":{n}}}").into_bytes().into(),
            headers,
            sent_time: Utc::now(),
            expiration_time: n.is_multiple_of(2).then(Utc::now),
            publish_bindings: Vec::new(),
            properties: Default::default(),
            timestamp_headers: Vec::new(),
        }
    }

    fn key() -> InboxKey {
        InboxKey {
            message_id: Uuid::new_v4(),
            consumer_id: Uuid::new_v4(),
        }
    }

    /// Every templated statement, on its second use (from the template), equals a fresh
    /// sea-query build: same text, same values in the same order.
    #[test]
    fn templated_statements_equal_a_fresh_build() {
        for tables in [
            Tables::new(),
            Tables::dotnet_default().timestamps(TimestampType::WithoutTimeZone),
        ] {
            let sql = Sql::new(&tables);
            for pending in [false, true, false] {
                let (key, lock_id, now) = (key(), Uuid::new_v4(), Utc::now());
                let values = sql.inbox_insert_values(key, lock_id, now, pending);
                assert_eq!(
                    sql.inbox_insert(key, lock_id, now, pending),
                    sql.render_inbox_insert(key, lock_id, now, values),
                );
            }
            for count in [1, 2, 3, TEMPLATED_MESSAGES, TEMPLATED_MESSAGES + 1] {
                for pending_at in [None, Some(Utc::now()), None, Some(Utc::now())] {
                    let key = key();
                    let messages: Vec<_> = (0..count as u32).map(message).collect();
                    let rows = messages
                        .iter()
                        .map(|m| message_values(&sql.names, m).unwrap())
                        .collect();
                    assert_eq!(
                        sql.insert_inbox_messages(key, &messages, pending_at)
                            .unwrap(),
                        sql.render_inbox_messages(key, rows, pending_at).unwrap(),
                        "{count} messages, pending_at {pending_at:?}"
                    );
                }
            }
            for notify in [None, Some("chan-a"), None, Some("chan-b")] {
                let (now, message) = (Utc::now(), message(7));
                let row = message_values(&sql.names, &message).unwrap();
                assert_eq!(
                    sql.bus_insert(now, notify, &message).unwrap(),
                    sql.render_bus_insert(now, notify, row).unwrap(),
                    "notify {notify:?}"
                );
            }
            for (count, async_commit) in [(1, false), (3, true), (5, false), (2, true)] {
                let keys: Vec<_> = (0..count).map(|_| key()).collect();
                assert_eq!(
                    sql.inbox_lock_many(&keys, async_commit),
                    sql.render_inbox_lock_many(&keys, async_commit),
                    "{count} keys, async_commit {async_commit}"
                );
            }
            for count in [1, 4, 2] {
                let done: Vec<_> = (0..count)
                    .map(|i| (key(), (i % 2 == 0).then_some(i64::from(i) + 1)))
                    .collect();
                let (now, lock_id) = (Utc::now(), Uuid::new_v4());
                assert_eq!(
                    sql.inbox_finish_many(&done, now, lock_id),
                    sql.render_inbox_finish_many(&done, now, lock_id),
                    "{count} entries"
                );
            }
            assert!(sql.templates.inbox_insert.text().is_some());
            assert!(sql.templates.inbox_messages[0][1].text().is_some());
            assert!(sql
                .templates
                .inbox_lock_many
                .iter()
                .all(|t| t.text().is_some()));
            assert!(sql.templates.inbox_finish_many.text().is_some());
            assert!(sql.templates.bus_insert.iter().all(|t| t.text().is_some()));
        }
    }
}
