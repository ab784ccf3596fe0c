//! Identifiers for one [`Tables`]: sea-query table references and column names in either naming
//! style (from the snake_case entities' columns), typed timestamps, and EF-style constraint
//! names.

use std::collections::HashMap;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{
    Alias, BinOper, DynIden, Expr, ExprTrait, IntoIden, SimpleExpr, TableRef,
};
use sea_orm::{ColumnTrait, IdenStatic, Iterable, Value};

use crate::config::{NamingStyle, Tables, TimestampType};
use crate::entity::{dotnet, inbox_state, outbox_message, outbox_state, schema_table, OutboxTable};

/// `message_id` → `MessageId`.
pub(crate) fn pascal_case(snake: &str) -> String {
    snake
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}

/// A fixed name as an identifier (borrowed: statements built for every delivery allocate none
/// for it).
pub(crate) fn iden(name: &'static str) -> DynIden {
    name.into_iden()
}

/// A snake_case entity column as an identifier in `style`: the PascalCase names are the .NET
/// entities' own, so no column name is built per statement.
fn column_iden(col: impl ColumnTrait, style: NamingStyle) -> DynIden {
    static PASCAL: LazyLock<HashMap<&'static str, &'static str>> = LazyLock::new(|| {
        fn pairs<A: Iterable + IdenStatic, B: Iterable + IdenStatic>(
        ) -> impl Iterator<Item = (&'static str, &'static str)> {
            A::iter()
                .map(|a| a.as_str())
                .zip(B::iter().map(|b| b.as_str()))
        }
        pairs::<inbox_state::Column, dotnet::inbox_state::Column>()
            .chain(pairs::<outbox_state::Column, dotnet::outbox_state::Column>())
            .chain(pairs::<
                outbox_message::Column,
                dotnet::outbox_message::Column,
            >())
            .filter(|(snake, pascal)| pascal_case(snake) == *pascal)
            .collect()
    });
    let snake = col.as_str();
    match style {
        NamingStyle::SnakeCase => iden(snake),
        NamingStyle::PascalCase => match PASCAL.get(snake) {
            Some(pascal) => iden(pascal),
            None => pascal_case(snake).into(),
        },
    }
}

/// The column name of a snake_case entity column in `style`.
pub(crate) fn column_name(col: impl ColumnTrait, style: NamingStyle) -> String {
    column_iden(col, style).to_string()
}

/// An EF-style constraint or index name: `PK_InboxState`, `IX_OutboxMessage_EnqueueTime`
/// (PascalCase) or `pk_inbox_state`, `ix_outbox_message_enqueue_time` (snake_case), shortened
/// to PostgreSQL's 63 bytes as EF (`…~`) and EFCore.NamingConventions (62 characters) do.
pub(crate) fn constraint_name(
    prefix: &str,
    table: &str,
    cols: &[&str],
    style: NamingStyle,
) -> String {
    let mut name = match style {
        NamingStyle::PascalCase => prefix.to_owned(),
        NamingStyle::SnakeCase => prefix.to_ascii_lowercase(),
    };
    name.push('_');
    name.push_str(table);
    for c in cols {
        name.push('_');
        name.push_str(c);
    }
    if name.len() <= 63 {
        return name;
    }
    let mut cut = 62;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name.truncate(cut);
    if style == NamingStyle::PascalCase {
        name.push('~');
    }
    name
}

/// Names resolved for one [`Tables`].
#[derive(Clone, Debug)]
pub(crate) struct Names {
    schema: DynIden,
    inbox: DynIden,
    state: DynIden,
    message: DynIden,
    style: NamingStyle,
    timestamps: TimestampType,
    /// `<schema>.<OutboxState>`, unquoted: names this outbox in advisory-lock keys.
    outbox_key: String,
}

impl Names {
    pub(crate) fn new(tables: &Tables) -> Self {
        let iden = |name: &str| Alias::new(name).into_iden();
        Self {
            schema: iden(tables.schema_name()),
            inbox: iden(tables.inbox_state()),
            state: iden(tables.outbox_state()),
            message: iden(tables.outbox_message()),
            style: tables.naming_style(),
            timestamps: tables.timestamp_type(),
            outbox_key: format!("{}.{}", tables.schema_name(), tables.outbox_state()),
        }
    }

    /// `<schema>.<OutboxState>`, unquoted: what the delivery passes of every instance on this
    /// outbox hash into their advisory-lock key.
    pub(crate) fn outbox_key(&self) -> &str {
        &self.outbox_key
    }

    fn table_iden(&self, table: OutboxTable) -> DynIden {
        match table {
            OutboxTable::InboxState => self.inbox.clone(),
            OutboxTable::OutboxState => self.state.clone(),
            OutboxTable::OutboxMessage => self.message.clone(),
        }
    }

    /// `"schema"."table"`.
    pub(crate) fn table(&self, table: OutboxTable) -> TableRef {
        schema_table(self.schema.clone(), self.table_iden(table), None)
    }

    /// `"schema"."table" AS alias`.
    pub(crate) fn table_as(&self, table: OutboxTable, alias: &'static str) -> TableRef {
        schema_table(
            self.schema.clone(),
            self.table_iden(table),
            Some(iden(alias)),
        )
    }

    /// A column (given by the snake_case entity's column) in this naming.
    pub(crate) fn c(&self, col: impl ColumnTrait) -> DynIden {
        column_iden(col, self.style)
    }

    /// `alias."Column"`.
    pub(crate) fn ac(&self, alias: &'static str, col: impl ColumnTrait) -> SimpleExpr {
        Expr::col((iden(alias), self.c(col)))
    }

    /// `"Column"` as an expression.
    pub(crate) fn e(&self, col: impl ColumnTrait) -> SimpleExpr {
        Expr::col(self.c(col))
    }

    /// A time value as the time columns want it: `timestamptz`, or UTC wall-clock `timestamp`
    /// for Npgsql's legacy timestamps (so comparisons use the columns' indexes).
    pub(crate) fn ts(&self, at: DateTime<Utc>) -> SimpleExpr {
        Expr::val(self.ts_value(Some(at)))
    }

    /// [`Names::ts`] as a [`Value`], also for NULL.
    pub(crate) fn ts_value(&self, at: Option<DateTime<Utc>>) -> Value {
        match self.timestamps {
            TimestampType::WithTimeZone => Value::ChronoDateTimeUtc(at),
            TimestampType::WithoutTimeZone => Value::ChronoDateTime(at.map(|t| t.naive_utc())),
        }
    }

    /// A time column read back as `timestamptz`.
    pub(crate) fn ts_read(&self, expr: SimpleExpr) -> SimpleExpr {
        match self.timestamps {
            TimestampType::WithTimeZone => expr,
            TimestampType::WithoutTimeZone => {
                expr.binary(BinOper::Custom("AT TIME ZONE"), Expr::val("UTC"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::{dotnet, inbox_state, outbox_message, outbox_state};
    use sea_orm::{IdenStatic, Iterable};

    #[test]
    fn names_follow_ef_conventions() {
        assert_eq!(pascal_case("last_sequence_number"), "LastSequenceNumber");
        assert_eq!(pascal_case("id"), "Id");
        let snake = ["inbox_message_id", "inbox_consumer_id", "sequence_number"];
        assert_eq!(
            constraint_name("IX", "outbox_message", &snake, NamingStyle::SnakeCase),
            "ix_outbox_message_inbox_message_id_inbox_consumer_id_sequence_"
        );
        let fk = ["inbox_state", "inbox_message_id", "inbox_consumer_id"];
        assert_eq!(
            constraint_name("FK", "outbox_message", &fk, NamingStyle::SnakeCase),
            "fk_outbox_message_inbox_state_inbox_message_id_inbox_consumer_"
        );
        let pascal = ["InboxMessageId", "InboxConsumerId", "SequenceNumber"];
        assert_eq!(
            constraint_name("IX", "OutboxMessage", &pascal, NamingStyle::PascalCase),
            "IX_OutboxMessage_InboxMessageId_InboxConsumerId_SequenceNumber"
        );
    }

    /// The PascalCase entities name every column as the snake_case ones do, converted.
    #[test]
    fn entity_sets_agree() {
        fn pairs<A: Iterable + IdenStatic, B: Iterable + IdenStatic>() -> Vec<(String, String)> {
            A::iter()
                .map(|a| pascal_case(a.as_str()))
                .zip(B::iter().map(|b| b.as_str().to_owned()))
                .collect()
        }
        for (snake, pascal) in pairs::<inbox_state::Column, dotnet::inbox_state::Column>()
            .into_iter()
            .chain(pairs::<outbox_state::Column, dotnet::outbox_state::Column>())
            .chain(pairs::<
                outbox_message::Column,
                dotnet::outbox_message::Column,
            >())
        {
            assert_eq!(snake, pascal);
        }
        assert_eq!(inbox_state::Column::iter().count(), 11);
        assert_eq!(outbox_state::Column::iter().count(), 6);
        assert_eq!(outbox_message::Column::iter().count(), 21);
    }
}
