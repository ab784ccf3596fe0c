//! `OutboxMessage` rows ↔ [`OutgoingMessage`], in the column formats .NET writes and reads.

use base64::Engine as _;
use ferrybus_core::envelope::ENVELOPE_CONTENT_TYPE;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::{Envelope, Headers};
use sea_orm::sea_query::{DynIden, Expr, ExprTrait, Func, SimpleExpr};

use crate::sql::names::iden;
use sea_orm::{FromQueryResult, IdenStatic, Iterable, QueryResult, Value};
use serde_json::Value as Json;

use super::names::Names;
use crate::entity::outbox_message::{Column, Model};
use crate::error::StoreError;

/// The columns ferrybus writes for one message and their values, in one list (so the column
/// list and the values cannot drift apart): `SentTime`, `Headers`, `Properties`, `MessageId`,
/// `ContentType`, `MessageType`, `Body`, the four ids, the four addresses, `ExpirationTime`.
pub(crate) fn message_values(
    names: &Names,
    message: &OutgoingMessage,
) -> Result<Vec<(Column, Value)>, StoreError> {
    let body = if is_binary(&message.content_type) {
        base64::engine::general_purpose::STANDARD.encode(&message.body)
    } else {
        std::str::from_utf8(&message.body)
            .map_err(|e| {
                StoreError::encode(format!(
                    "message body of content type {:?} is not UTF-8 text: {e}",
                    message.content_type
                ))
            })?
            .to_owned()
    };
    Ok(vec![
        (Column::SentTime, names.ts_value(Some(message.sent_time))),
        (Column::Headers, headers_json(&message.headers)?.into()),
        (Column::Properties, properties_json(message)?.into()),
        (Column::MessageId, message.message_id.into()),
        (Column::ContentType, message.content_type.clone().into()),
        (Column::MessageType, message.message_type.join(";").into()),
        (Column::Body, body.into()),
        (Column::ConversationId, message.conversation_id.into()),
        (Column::CorrelationId, message.correlation_id.into()),
        (Column::InitiatorId, message.initiator_id.into()),
        (Column::RequestId, message.request_id.into()),
        (Column::SourceAddress, message.source_address.clone().into()),
        (
            Column::DestinationAddress,
            Some(message.destination_address.clone()).into(),
        ),
        (
            Column::ResponseAddress,
            message.response_address.clone().into(),
        ),
        (Column::FaultAddress, message.fault_address.clone().into()),
        (
            Column::ExpirationTime,
            names.ts_value(message.expiration_time),
        ),
    ])
}

/// The `Headers` column: a JSON object without null values, or NULL when empty.
fn headers_json(headers: &Headers) -> Result<Option<String>, StoreError> {
    let map: serde_json::Map<String, Json> = headers
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    if map.is_empty() {
        return Ok(None);
    }
    serde_json::to_string_pretty(&map)
        .map(Some)
        .map_err(|e| StoreError::encode(e.to_string()))
}

/// The content types whose serializers write binary bodies, which MassTransit's outbox stores
/// as Base64 text (`MessageBody.GetString()` of MessagePack, BSON and the encrypted
/// serializers) and decodes before sending (their deserializers' `GetMessageBody(string)`
/// returns a `Base64MessageBody`): `MassTransit.MessagePack/Serialization/
/// MessagePackMessageSerializer.cs`, `MassTransit.Newtonsoft/Serialization/
/// NewtonsoftBsonMessageDeserializer.cs`, `EncryptedMessageDeserializer{,V2}.cs`.
const BINARY_CONTENT_TYPES: [&str; 4] = [
    "application/vnd.masstransit+msgpack",
    "application/vnd.masstransit+bson",
    "application/vnd.masstransit+aes",
    "application/vnd.masstransit.v2+aes",
];

/// Whether bodies of `content_type` are stored as Base64 (media type compared without
/// parameters, case-insensitively).
pub(crate) fn is_binary(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    BINARY_CONTENT_TYPES
        .iter()
        .any(|t| t.eq_ignore_ascii_case(media))
}

/// The `Properties` column: the message's transport properties, as its transport's factory wrote
/// them (RabbitMQ's `{"RMQ-Exchange": …}`) or as they were read back from a row; NULL when empty.
fn properties_json(message: &OutgoingMessage) -> Result<Option<String>, StoreError> {
    if message.properties.is_empty() {
        return Ok(None);
    }
    serde_json::to_string_pretty(&message.properties)
        .map(Some)
        .map_err(|e| StoreError::encode(e.to_string()))
}

/// Reads the `Properties` column (a JSON object, as MassTransit's `SerializeDictionary`
/// writes it); anything else is ignored with a warning.
fn read_properties(text: Option<&str>) -> serde_json::Map<String, Json> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return serde_json::Map::new();
    };
    match serde_json::from_str::<Json>(text) {
        Ok(Json::Object(map)) => map,
        _ => {
            tracing::warn!(target: "ferrybus::outbox", "ignoring unreadable Properties column: {text}");
            serde_json::Map::new()
        }
    }
}

/// An `OutboxMessage` row read back.
#[derive(Debug)]
pub(crate) struct StoredRow {
    /// `SequenceNumber`.
    pub(crate) seq: i64,
    /// The message; `None` when the row has no destination (it cannot be sent), or could not
    /// be read at all (`unreadable` says why).
    pub(crate) message: Option<OutgoingMessage>,
    /// Why the row cannot be sent as it is (a binary body that is not Base64, a value that does
    /// not decode): sending it fails, so the row stays and its outbox backs off, as
    /// MassTransit's delivery would.
    pub(crate) unreadable: Option<String>,
}

/// Every column of the message table under alias `a`, named as the entity's columns (so the row
/// decodes into [`Model`]): sequence numbers as `bigint` (legacy tables have `integer`
/// identities), time columns as `timestamptz`.
pub(crate) fn message_columns(names: &Names, a: &'static str) -> Vec<(SimpleExpr, DynIden)> {
    Column::iter()
        .map(|col| {
            let expr = names.ac(a, col);
            let expr = match col {
                Column::SequenceNumber => expr.cast_as(iden("bigint")),
                // `infinity` would not decode (sqlx panics on it): read as NULL, which makes
                // the row unreadable (`SentTime`) or the time absent.
                Column::EnqueueTime | Column::SentTime | Column::ExpirationTime => {
                    let finite =
                        SimpleExpr::from(Func::cust(iden("isfinite")).arg(expr.clone())).eq(true);
                    names.ts_read(Expr::case(finite, expr).into())
                }
                _ => expr,
            };
            (expr, iden(col.as_str()))
        })
        .collect()
}

/// Turns a row selected with [`message_columns`] into a message to send.
///
/// A row that does not decode (a value out of chrono's range, say) is read as unreadable: its
/// send fails, and its outbox backs off like one with a bad body, without failing the pass
/// that read it. Only a row whose sequence number cannot be read is an error.
pub(crate) fn read_message(row: &QueryResult) -> Result<StoredRow, StoreError> {
    let model = match Model::from_query_result(row, "") {
        Ok(model) => model,
        Err(error) => {
            let seq: i64 = row
                .try_get("", Column::SequenceNumber.as_str())
                .map_err(|e| StoreError::decode(e.to_string()))?;
            return Ok(StoredRow {
                seq,
                message: None,
                unreadable: Some(format!("outbox message {seq} cannot be read: {error}")),
            });
        }
    };
    let seq = model.sequence_number;
    let Some(destination) = model.destination_address.filter(|d| !d.is_empty()) else {
        return Ok(StoredRow {
            seq,
            message: None,
            unreadable: None,
        });
    };
    let mut unreadable = None;
    let content_type = if model.content_type.is_empty() {
        ENVELOPE_CONTENT_TYPE.to_owned()
    } else {
        model.content_type
    };
    let body: bytes::Bytes = if is_binary(&content_type) {
        match base64::engine::general_purpose::STANDARD.decode(model.body.trim()) {
            Ok(bytes) => bytes.into(),
            Err(e) => {
                unreadable = Some(format!(
                    "outbox message {seq}: the {content_type} body is not Base64: {e}"
                ));
                model.body.into_bytes().into()
            }
        }
    } else {
        model.body.into_bytes().into()
    };
    let mut message_type: Vec<String> = model
        .message_type
        .split(';')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    if message_type.is_empty() && content_type == ENVELOPE_CONTENT_TYPE {
        // Rows written before MassTransit 8.1 have no MessageType column value: read the body.
        if let Ok(envelope) = Envelope::from_slice(&body) {
            message_type = envelope.message_type;
        }
    }
    let mut message = OutgoingMessage {
        message_id: model.message_id,
        conversation_id: model.conversation_id,
        correlation_id: model.correlation_id,
        initiator_id: model.initiator_id,
        request_id: model.request_id,
        source_address: model.source_address,
        destination_address: destination,
        response_address: model.response_address,
        fault_address: model.fault_address,
        message_type,
        content_type,
        body,
        headers: read_headers(model.headers.as_deref()),
        sent_time: model.sent_time,
        expiration_time: model.expiration_time,
        publish_bindings: Vec::new(),
        properties: read_properties(model.properties.as_deref()),
        timestamp_headers: Vec::new(),
    };
    message.derive_publish_bindings();
    Ok(StoredRow {
        seq,
        message: Some(message),
        unreadable,
    })
}

/// Reads the `Headers` column (any JSON whitespace; Newtonsoft or System.Text.Json).
fn read_headers(text: Option<&str>) -> Headers {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Headers::new();
    };
    match serde_json::from_str::<Json>(text).map(Headers::from_json) {
        Ok(Ok(headers)) => headers,
        _ => {
            tracing::warn!(target: "ferrybus::outbox", "ignoring unreadable Headers column: {text}");
            Headers::new()
        }
    }
}
