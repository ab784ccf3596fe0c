//! Migration 1: MassTransit 8.5's `InboxState`, `OutboxState` and `OutboxMessage` with their
//! indexes and the two foreign keys of MassTransit 8.3+, as EF Core's model creates them
//! (MassTransit: `src/Persistence/MassTransit.EntityFrameworkCoreIntegration/EntityFrameworkCoreIntegration/InboxStateEntityConfiguration.cs`,
//! `OutboxStateEntityConfiguration.cs`, `OutboxMessageEntityConfiguration.cs`).

use sea_orm::sea_query::{
    Alias, ColumnDef, ForeignKey, ForeignKeyCreateStatement, Func, Index, IndexCreateStatement,
    Query, TableCreateStatement,
};
use sea_orm::{ConnectionTrait, DbErr};
use sea_orm_migration::{MigrationName, MigrationTrait, SchemaManager};

use crate::config::Tables;
use crate::entity::OutboxTable::{self, InboxState, OutboxMessage, OutboxState};
use crate::entity::{inbox_state as inbox, outbox_message as msg, outbox_state as state};
use crate::sql::build;
use crate::sql::names::{column_name, constraint_name, Names};

use super::{Step, ADVISORY_LOCK_KEY};

/// The migration's name without the schema suffix.
pub(super) const NAME: &str = "m0001_ferrybus_outbox_tables";

/// Creates the three tables, their indexes and foreign keys when missing; see
/// [`migrations`](super::migrations).
#[derive(Clone, Debug)]
pub struct CreateOutboxTables {
    tables: Tables,
    foreign_keys: bool,
    name: String,
}

impl CreateOutboxTables {
    /// The migration for `tables` (with foreign keys unless `foreign_keys` is false).
    pub fn new(tables: Tables, foreign_keys: bool) -> Self {
        let name = super::migration_name(NAME, &tables);
        Self {
            tables,
            foreign_keys,
            name,
        }
    }

    /// The statements of a fresh install, in order: schema, tables (foreign keys inline),
    /// indexes. Each is idempotent (`IF NOT EXISTS`).
    pub(super) fn steps(&self) -> Vec<Step> {
        let t = &self.tables;
        let n = Names::new(t);
        let mut steps = vec![Step::Schema(t.schema_name().to_owned())];
        steps.push(Step::Table(Box::new(inbox_table(&n, t))));
        steps.push(Step::Table(Box::new(state_table(&n, t))));
        steps.push(Step::Table(Box::new(message_table(
            &n,
            t,
            self.foreign_keys,
        ))));
        for index in indexes(&n, t) {
            steps.push(Step::Index(Box::new(index)));
        }
        steps
    }
}

impl MigrationName for CreateOutboxTables {
    fn name(&self) -> &str {
        &self.name
    }
}

#[allow(elided_lifetimes_in_paths)] // the trait is written so (sea-orm-migration)
#[async_trait::async_trait]
impl MigrationTrait for CreateOutboxTables {
    /// Takes the advisory lock (until the migration's transaction ends; sea-orm-migration runs
    /// PostgreSQL migrations in one), runs `steps`, then adds a foreign key
    /// only when `OutboxMessage` has none to that table yet (tables .NET created before 8.3).
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        let lock = Query::select()
            .expr(Func::cust(Alias::new("pg_advisory_xact_lock")).arg(ADVISORY_LOCK_KEY))
            .to_owned();
        db.execute_raw(build(&lock)).await?;
        for step in self.steps() {
            db.execute_unprepared(&step.to_sql()).await?;
        }
        if self.foreign_keys {
            let n = Names::new(&self.tables);
            for (to, fk) in foreign_keys(&n, &self.tables) {
                if !has_foreign_key(db, &self.tables, OutboxMessage, to).await? {
                    db.execute_raw(build(&fk)).await?;
                }
            }
        }
        Ok(())
    }

    /// Drops the three tables (messages first); the schema stays.
    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let n = Names::new(&self.tables);
        for table in [OutboxMessage, OutboxState, InboxState] {
            manager
                .drop_table(
                    sea_orm::sea_query::Table::drop()
                        .table(n.table(table))
                        .if_exists()
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

/// `CONSTRAINT name` of an EF-style constraint on `table` over `cols`.
fn cname(t: &Tables, prefix: &str, table: OutboxTable, cols: &[String]) -> String {
    let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
    constraint_name(prefix, table.name(t), &cols, t.naming_style())
}

fn cn(t: &Tables, c: impl sea_orm::ColumnTrait) -> String {
    column_name(c, t.naming_style())
}

fn inbox_table(n: &Names, t: &Tables) -> TableCreateStatement {
    use inbox::Column as C;
    sea_orm::sea_query::Table::create()
        .table(n.table(InboxState))
        .if_not_exists()
        .col(identity(n.c(C::Id)))
        .col(ColumnDef::new(n.c(C::MessageId)).uuid().not_null())
        .col(ColumnDef::new(n.c(C::ConsumerId)).uuid().not_null())
        .col(ColumnDef::new(n.c(C::LockId)).uuid().not_null())
        .col(ColumnDef::new(n.c(C::RowVersion)).binary())
        .col(timestamp(n.c(C::Received)).not_null())
        .col(ColumnDef::new(n.c(C::ReceiveCount)).integer().not_null())
        .col(timestamp(n.c(C::ExpirationTime)))
        .col(timestamp(n.c(C::Consumed)))
        .col(timestamp(n.c(C::Delivered)))
        .col(ColumnDef::new(n.c(C::LastSequenceNumber)).big_integer())
        .primary_key(
            Index::create()
                .name(cname(t, "PK", InboxState, &[]))
                .col(n.c(C::Id)),
        )
        .index(
            Index::create()
                .unique()
                .name(cname(
                    t,
                    "AK",
                    InboxState,
                    &[cn(t, C::MessageId), cn(t, C::ConsumerId)],
                ))
                .col(n.c(C::MessageId))
                .col(n.c(C::ConsumerId)),
        )
        .to_owned()
}

fn state_table(n: &Names, t: &Tables) -> TableCreateStatement {
    use state::Column as C;
    sea_orm::sea_query::Table::create()
        .table(n.table(OutboxState))
        .if_not_exists()
        .col(ColumnDef::new(n.c(C::OutboxId)).uuid().not_null())
        .col(ColumnDef::new(n.c(C::LockId)).uuid().not_null())
        .col(ColumnDef::new(n.c(C::RowVersion)).binary())
        .col(timestamp(n.c(C::Created)).not_null())
        .col(timestamp(n.c(C::Delivered)))
        .col(ColumnDef::new(n.c(C::LastSequenceNumber)).big_integer())
        .primary_key(
            Index::create()
                .name(cname(t, "PK", OutboxState, &[]))
                .col(n.c(C::OutboxId)),
        )
        .to_owned()
}

fn message_table(n: &Names, t: &Tables, foreign_keys: bool) -> TableCreateStatement {
    use msg::Column as C;
    let address = |c: C| ColumnDef::new(n.c(c)).string_len(256).to_owned();
    let mut table = sea_orm::sea_query::Table::create();
    table
        .table(n.table(OutboxMessage))
        .if_not_exists()
        .col(identity(n.c(C::SequenceNumber)))
        .col(timestamp(n.c(C::EnqueueTime)))
        .col(timestamp(n.c(C::SentTime)).not_null())
        .col(ColumnDef::new(n.c(C::Headers)).text())
        .col(ColumnDef::new(n.c(C::Properties)).text())
        .col(ColumnDef::new(n.c(C::InboxMessageId)).uuid())
        .col(ColumnDef::new(n.c(C::InboxConsumerId)).uuid())
        .col(ColumnDef::new(n.c(C::OutboxId)).uuid())
        .col(ColumnDef::new(n.c(C::MessageId)).uuid().not_null())
        .col(
            ColumnDef::new(n.c(C::ContentType))
                .string_len(256)
                .not_null(),
        )
        .col(ColumnDef::new(n.c(C::MessageType)).text().not_null())
        .col(ColumnDef::new(n.c(C::Body)).text().not_null())
        .col(ColumnDef::new(n.c(C::ConversationId)).uuid())
        .col(ColumnDef::new(n.c(C::CorrelationId)).uuid())
        .col(ColumnDef::new(n.c(C::InitiatorId)).uuid())
        .col(ColumnDef::new(n.c(C::RequestId)).uuid())
        .col(address(C::SourceAddress))
        .col(address(C::DestinationAddress))
        .col(address(C::ResponseAddress))
        .col(address(C::FaultAddress))
        .col(timestamp(n.c(C::ExpirationTime)))
        .primary_key(
            Index::create()
                .name(cname(t, "PK", OutboxMessage, &[]))
                .col(n.c(C::SequenceNumber)),
        );
    if foreign_keys {
        for (_, mut fk) in foreign_keys_inline(n, t) {
            table.foreign_key(&mut fk);
        }
    }
    table.to_owned()
}

/// `bigint GENERATED BY DEFAULT AS IDENTITY` (EF's identity column; sea-query 0.32 has no
/// builder for identities, so the clause is the column's fixed `extra` text).
fn identity(name: sea_orm::sea_query::DynIden) -> ColumnDef {
    ColumnDef::new(name)
        .big_integer()
        .not_null()
        .extra("GENERATED BY DEFAULT AS IDENTITY")
        .to_owned()
}

fn timestamp(name: sea_orm::sea_query::DynIden) -> ColumnDef {
    ColumnDef::new(name).timestamp_with_time_zone().to_owned()
}

fn indexes(n: &Names, t: &Tables) -> Vec<IndexCreateStatement> {
    let index =
        |table: OutboxTable, cols: Vec<(sea_orm::sea_query::DynIden, String)>, unique: bool| {
            let names: Vec<String> = cols.iter().map(|(_, name)| name.clone()).collect();
            let mut index = Index::create();
            index
                .if_not_exists()
                .name(cname(t, "IX", table, &names))
                .table(n.table(table));
            for (col, _) in cols {
                index.col(col);
            }
            if unique {
                index.unique();
            }
            index.to_owned()
        };
    macro_rules! cols {
        ($($col:expr),+) => { vec![$((n.c($col), cn(t, $col))),+] };
    }
    vec![
        index(InboxState, cols![inbox::Column::Delivered], false),
        index(OutboxMessage, cols![msg::Column::EnqueueTime], false),
        index(OutboxMessage, cols![msg::Column::ExpirationTime], false),
        index(
            OutboxMessage,
            cols![
                msg::Column::InboxMessageId,
                msg::Column::InboxConsumerId,
                msg::Column::SequenceNumber
            ],
            true,
        ),
        index(
            OutboxMessage,
            cols![msg::Column::OutboxId, msg::Column::SequenceNumber],
            true,
        ),
        index(OutboxState, cols![state::Column::Created], false),
    ]
}

/// The two foreign keys (NO ACTION, as MassTransit's model), by referenced table, for
/// `ALTER TABLE … ADD CONSTRAINT`.
fn foreign_keys(n: &Names, t: &Tables) -> Vec<(OutboxTable, ForeignKeyCreateStatement)> {
    foreign_keys_inline(n, t)
        .into_iter()
        .map(|(to, mut fk)| {
            fk.from_tbl(n.table(OutboxMessage));
            (to, fk)
        })
        .collect()
}

/// The two foreign keys, without the referencing table (inside `CREATE TABLE`).
fn foreign_keys_inline(n: &Names, t: &Tables) -> Vec<(OutboxTable, ForeignKeyCreateStatement)> {
    let inbox_fk = ForeignKey::create()
        .name(cname(
            t,
            "FK",
            OutboxMessage,
            &[
                t.inbox_state().to_owned(),
                cn(t, msg::Column::InboxMessageId),
                cn(t, msg::Column::InboxConsumerId),
            ],
        ))
        .from_col(n.c(msg::Column::InboxMessageId))
        .from_col(n.c(msg::Column::InboxConsumerId))
        .to_tbl(n.table(InboxState))
        .to_col(n.c(inbox::Column::MessageId))
        .to_col(n.c(inbox::Column::ConsumerId))
        .to_owned();
    let state_fk = ForeignKey::create()
        .name(cname(
            t,
            "FK",
            OutboxMessage,
            &[t.outbox_state().to_owned(), cn(t, msg::Column::OutboxId)],
        ))
        .from_col(n.c(msg::Column::OutboxId))
        .to_tbl(n.table(OutboxState))
        .to_col(n.c(state::Column::OutboxId))
        .to_owned();
    vec![(InboxState, inbox_fk), (OutboxState, state_fk)]
}

/// Whether `from` has a foreign key (whatever its name) to `to`.
async fn has_foreign_key(
    db: &impl ConnectionTrait,
    t: &Tables,
    from: OutboxTable,
    to: OutboxTable,
) -> Result<bool, DbErr> {
    let keys = super::catalog::foreign_keys(db, t.schema_name(), from.name(t)).await?;
    Ok(keys.iter().any(|key| key.points_to(t, to)))
}
