//! `"OutboxMessage"`: MassTransit's `OutboxMessage` with EF Core's default (PascalCase) naming, in schema
//! `public`; the same fields as [`crate::entity::outbox_message`]. See [`Retarget`](crate::entity::Retarget) for
//! other schemas and names.

use sea_orm::entity::prelude::*;

/// One outbox message.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(schema_name = "public", table_name = "OutboxMessage")]
pub struct Model {
    /// `SequenceNumber`: the primary key (identity), the send order.
    #[sea_orm(primary_key)]
    #[sea_orm(column_name = "SequenceNumber")]
    pub sequence_number: i64,
    /// `EnqueueTime`: a scheduled send time (MassTransit's delayed sends).
    #[sea_orm(column_name = "EnqueueTime")]
    pub enqueue_time: Option<DateTimeUtc>,
    /// `SentTime`: when the message was written.
    #[sea_orm(column_name = "SentTime")]
    pub sent_time: DateTimeUtc,
    /// `Headers`: a JSON object of the transport headers.
    #[sea_orm(column_type = "Text", nullable)]
    #[sea_orm(column_name = "Headers")]
    pub headers: Option<String>,
    /// `Properties`: a JSON object of transport properties (`RMQ-Exchange`, …).
    #[sea_orm(column_type = "Text", nullable)]
    #[sea_orm(column_name = "Properties")]
    pub properties: Option<String>,
    /// `InboxMessageId`: the inbox row of a consumer-outbox message.
    #[sea_orm(column_name = "InboxMessageId")]
    pub inbox_message_id: Option<Uuid>,
    /// `InboxConsumerId`: the inbox row of a consumer-outbox message.
    #[sea_orm(column_name = "InboxConsumerId")]
    pub inbox_consumer_id: Option<Uuid>,
    /// `OutboxId`: the bus outbox of a bus-outbox message.
    #[sea_orm(column_name = "OutboxId")]
    pub outbox_id: Option<Uuid>,
    /// `MessageId`.
    #[sea_orm(column_name = "MessageId")]
    pub message_id: Uuid,
    /// `ContentType`: the body's MIME type.
    #[sea_orm(column_type = "String(StringLen::N(256))")]
    #[sea_orm(column_name = "ContentType")]
    pub content_type: String,
    /// `MessageType`: the message type URNs, `;`-separated.
    #[sea_orm(column_type = "Text")]
    #[sea_orm(column_name = "MessageType")]
    pub message_type: String,
    /// `Body`: the serialized envelope.
    #[sea_orm(column_type = "Text")]
    #[sea_orm(column_name = "Body")]
    pub body: String,
    /// `ConversationId`.
    #[sea_orm(column_name = "ConversationId")]
    pub conversation_id: Option<Uuid>,
    /// `CorrelationId`.
    #[sea_orm(column_name = "CorrelationId")]
    pub correlation_id: Option<Uuid>,
    /// `InitiatorId`.
    #[sea_orm(column_name = "InitiatorId")]
    pub initiator_id: Option<Uuid>,
    /// `RequestId`.
    #[sea_orm(column_name = "RequestId")]
    pub request_id: Option<Uuid>,
    /// `SourceAddress`.
    #[sea_orm(column_type = "String(StringLen::N(256))", nullable)]
    #[sea_orm(column_name = "SourceAddress")]
    pub source_address: Option<String>,
    /// `DestinationAddress`: where the message goes.
    #[sea_orm(column_type = "String(StringLen::N(256))", nullable)]
    #[sea_orm(column_name = "DestinationAddress")]
    pub destination_address: Option<String>,
    /// `ResponseAddress`.
    #[sea_orm(column_type = "String(StringLen::N(256))", nullable)]
    #[sea_orm(column_name = "ResponseAddress")]
    pub response_address: Option<String>,
    /// `FaultAddress`.
    #[sea_orm(column_type = "String(StringLen::N(256))", nullable)]
    #[sea_orm(column_name = "FaultAddress")]
    pub fault_address: Option<String>,
    /// `ExpirationTime`.
    #[sea_orm(column_name = "ExpirationTime")]
    pub expiration_time: Option<DateTimeUtc>,
}

/// The message's relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    /// The inbox row of a consumer-outbox message.
    #[sea_orm(
        belongs_to = "super::inbox_state::Entity",
        from = "(Column::InboxMessageId, Column::InboxConsumerId)",
        to = "(super::inbox_state::Column::MessageId, super::inbox_state::Column::ConsumerId)"
    )]
    InboxState,
    /// The bus outbox of a bus-outbox message.
    #[sea_orm(
        belongs_to = "super::outbox_state::Entity",
        from = "Column::OutboxId",
        to = "super::outbox_state::Column::OutboxId"
    )]
    OutboxState,
}

impl Related<super::inbox_state::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::InboxState.def()
    }
}

impl Related<super::outbox_state::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::OutboxState.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}

crate::entity::outbox_entity!(Entity, OutboxMessage, PascalCase);
