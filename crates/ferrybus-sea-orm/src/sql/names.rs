//! Identifiers: column names in either naming style, quoting, and EF-style constraint names.

use crate::config::{NamingStyle, Tables, TimestampType};

/// Every column of the three tables, by its .NET property name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Col {
    Id,
    MessageId,
    ConsumerId,
    LockId,
    Received,
    ReceiveCount,
    ExpirationTime,
    Consumed,
    Delivered,
    LastSequenceNumber,
    OutboxId,
    Created,
    SequenceNumber,
    EnqueueTime,
    SentTime,
    Headers,
    Properties,
    InboxMessageId,
    InboxConsumerId,
    ContentType,
    MessageType,
    Body,
    ConversationId,
    CorrelationId,
    InitiatorId,
    RequestId,
    SourceAddress,
    DestinationAddress,
    ResponseAddress,
    FaultAddress,
    RowVersion,
}

impl Col {
    /// The .NET (PascalCase) name.
    pub(crate) fn pascal(self) -> &'static str {
        match self {
            Col::Id => "Id",
            Col::MessageId => "MessageId",
            Col::ConsumerId => "ConsumerId",
            Col::LockId => "LockId",
            Col::Received => "Received",
            Col::ReceiveCount => "ReceiveCount",
            Col::ExpirationTime => "ExpirationTime",
            Col::Consumed => "Consumed",
            Col::Delivered => "Delivered",
            Col::LastSequenceNumber => "LastSequenceNumber",
            Col::OutboxId => "OutboxId",
            Col::Created => "Created",
            Col::SequenceNumber => "SequenceNumber",
            Col::EnqueueTime => "EnqueueTime",
            Col::SentTime => "SentTime",
            Col::Headers => "Headers",
            Col::Properties => "Properties",
            Col::InboxMessageId => "InboxMessageId",
            Col::InboxConsumerId => "InboxConsumerId",
            Col::ContentType => "ContentType",
            Col::MessageType => "MessageType",
            Col::Body => "Body",
            Col::ConversationId => "ConversationId",
            Col::CorrelationId => "CorrelationId",
            Col::InitiatorId => "InitiatorId",
            Col::RequestId => "RequestId",
            Col::SourceAddress => "SourceAddress",
            Col::DestinationAddress => "DestinationAddress",
            Col::ResponseAddress => "ResponseAddress",
            Col::FaultAddress => "FaultAddress",
            Col::RowVersion => "RowVersion",
        }
    }

    /// Every column, for template placeholders.
    pub(crate) const ALL: [Col; 31] = [
        Col::Id,
        Col::MessageId,
        Col::ConsumerId,
        Col::LockId,
        Col::Received,
        Col::ReceiveCount,
        Col::ExpirationTime,
        Col::Consumed,
        Col::Delivered,
        Col::LastSequenceNumber,
        Col::OutboxId,
        Col::Created,
        Col::SequenceNumber,
        Col::EnqueueTime,
        Col::SentTime,
        Col::Headers,
        Col::Properties,
        Col::InboxMessageId,
        Col::InboxConsumerId,
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
        Col::RowVersion,
    ];
}

/// `MessageId` → `message_id`.
pub(crate) fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut previous: Option<char> = None;
    for c in name.chars() {
        if c.is_uppercase() && previous.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit()) {
            out.push('_');
        }
        out.extend(c.to_lowercase());
        previous = Some(c);
    }
    out
}

/// The unquoted column name in `style`.
pub(crate) fn column_name(col: Col, style: NamingStyle) -> String {
    match style {
        NamingStyle::PascalCase => col.pascal().to_owned(),
        NamingStyle::SnakeCase => snake_case(col.pascal()),
    }
}

/// Quotes an identifier: `a"b` → `"a""b"`.
pub(crate) fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Quotes a string literal: `it's` → `'it''s'`.
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
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

/// Names resolved for one [`Tables`]: quoted, schema-qualified tables and quoted columns.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    pub(crate) inbox: String,
    pub(crate) state: String,
    pub(crate) message: String,
    style: NamingStyle,
    timestamps: TimestampType,
}

impl Names {
    pub(crate) fn new(tables: &Tables) -> Self {
        let qualify = |t: &str| format!("{}.{}", quote(tables.schema_name()), quote(t));
        Self {
            inbox: qualify(tables.inbox_state()),
            state: qualify(tables.outbox_state()),
            message: qualify(tables.outbox_message()),
            style: tables.naming_style(),
            timestamps: tables.timestamp_type(),
        }
    }

    /// A quoted column.
    pub(crate) fn c(&self, col: Col) -> String {
        quote(&column_name(col, self.style))
    }

    /// A quoted column with a table alias: `m."Body"`.
    pub(crate) fn ac(&self, alias: &str, col: Col) -> String {
        format!("{alias}.{}", self.c(col))
    }

    /// A timestamp parameter as the column type wants it (UTC either way).
    pub(crate) fn ts_param(&self, n: usize) -> String {
        match self.timestamps {
            TimestampType::WithTimeZone => format!("${n}::timestamptz"),
            TimestampType::WithoutTimeZone => format!("(${n}::timestamptz AT TIME ZONE 'UTC')"),
        }
    }

    /// A timestamp column read back as `timestamptz`.
    pub(crate) fn ts_read(&self, expr: &str) -> String {
        match self.timestamps {
            TimestampType::WithTimeZone => expr.to_owned(),
            TimestampType::WithoutTimeZone => format!("({expr} AT TIME ZONE 'UTC')"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_ef_conventions() {
        assert_eq!(snake_case("LastSequenceNumber"), "last_sequence_number");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
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
}
