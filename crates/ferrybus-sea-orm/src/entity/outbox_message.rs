//! `outbox_message`: the messages of the consumer outbox (`inbox_message_id`,
//! `inbox_consumer_id` set) and of the bus outbox (`outbox_id` set), MassTransit's
//! `OutboxMessage`, snake_case, in schema `messaging`. See [`super::dotnet::outbox_message`]
//! for the PascalCase columns and [`Retarget`](super::Retarget) for other schemas and names.

use sea_orm::entity::prelude::*;

/// One outbox message.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(schema_name = "messaging", table_name = "outbox_message")]
pub struct Model {
    /// `SequenceNumber`: the primary key (identity), the send order.
    #[sea_orm(primary_key)]
    pub sequence_number: i64,
    /// `EnqueueTime`: a scheduled send time (MassTransit's delayed sends).
    pub enqueue_time: Option<DateTimeUtc>,
    /// `SentTime`: when the message was written.
    pub sent_time: DateTimeUtc,
    /// `Headers`: a JSON object of the transport headers.
    #[sea_orm(column_type = "Text", nullable)]
    pub headers: Option<String>,
    /// `Properties`: a JSON object of transport properties (`RMQ-Exchange`, …).
    #[sea_orm(column_type = "Text", nullable)]
    pub properties: Option<String>,
    /// `InboxMessageId`: the inbox row of a consumer-outbox message.
    pub inbox_message_id: Option<Uuid>,
    /// `InboxConsumerId`: the inbox row of a consumer-outbox message.
    pub inbox_consumer_id: Option<Uuid>,
    /// `OutboxId`: the bus outbox of a bus-outbox message.
    pub outbox_id: Option<Uuid>,
    /// `MessageId`.
    pub message_id: Uuid,
    /// `ContentType`: the body's MIME type.
    #[sea_orm(column_type = "String(StringLen::N(256))")]
    pub content_type: String,
    /// `MessageType`: the message type URNs, `;`-separated.
    #[sea_orm(column_type = "Text")]
    pub message_type: String,
    /// `Body`: the serialized envelope.
    #[sea_orm(column_type = "Text")]
    pub body: String,
    /// `ConversationId`.
    pub conversation_id: Option<Uuid>,
    /// `CorrelationId`.
    pub correlation_id: Option<Uuid>,
    /// `InitiatorId`.
    pub initiator_id: Option<Uuid>,
    /// `RequestId`.
    pub request_id: Option<Uuid>,
    /// `SourceAddress`.
    #[sea_orm(column_type = "String(StringLen::N(256))", nullable)]
    pub source_address: Option<String>,
    /// `DestinationAddress`: where the message goes.
    #[sea_orm(column_type = "String(StringLen::N(256))", nullable)]
    pub destination_address: Option<String>,
    /// `ResponseAddress`.
    #[sea_orm(column_type = "String(StringLen::N(256))", nullable)]
    pub response_address: Option<String>,
    /// `FaultAddress`.
    #[sea_orm(column_type = "String(StringLen::N(256))", nullable)]
    pub fault_address: Option<String>,
    /// `ExpirationTime`.
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

super::outbox_entity!(Entity, OutboxMessage, SnakeCase);
