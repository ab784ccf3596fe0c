//! `OutboxMessage` rows ↔ [`OutgoingMessage`], in the column formats .NET writes and reads.

use chrono::{DateTime, Utc};
use ferrybus_core::envelope::ENVELOPE_CONTENT_TYPE;
use ferrybus_core::{Envelope, Headers, OutgoingMessage};
use sea_orm::{QueryResult, Value};
use serde_json::Value as Json;
use uuid::Uuid;

use crate::error::StoreError;

/// How many values [`message_values`] produces per message.
pub(crate) const MESSAGE_VALUE_COUNT: usize = 16;

/// The values of one outbox row, in the order of the rendered column list: `SentTime`,
/// `Headers`, `Properties`, `MessageId`, `ContentType`, `MessageType`, `Body`, the four ids, the
/// four addresses, `ExpirationTime`.
pub(crate) fn message_values(message: &OutgoingMessage) -> Result<Vec<Value>, StoreError> {
    let body = std::str::from_utf8(&message.body)
        .map_err(|e| StoreError::encode(format!("message body is not UTF-8 text: {e}")))?;
    Ok(vec![
        Value::ChronoDateTimeUtc(Some(Box::new(message.sent_time))),
        headers_json(&message.headers)?.into(),
        properties_json(message)?.into(),
        message.message_id.into(),
        message.content_type.clone().into(),
        message.message_type.join(";").into(),
        body.to_owned().into(),
        message.conversation_id.into(),
        message.correlation_id.into(),
        message.initiator_id.into(),
        message.request_id.into(),
        message.source_address.clone().into(),
        Some(message.destination_address.clone()).into(),
        message.response_address.clone().into(),
        message.fault_address.clone().into(),
        Value::ChronoDateTimeUtc(message.expiration_time.map(Box::new)),
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

/// The `Properties` column: `{"RMQ-Exchange": …}` for RabbitMQ destinations, else NULL.
fn properties_json(message: &OutgoingMessage) -> Result<Option<String>, StoreError> {
    match message.transport_properties() {
        Some(map) if !map.is_empty() => serde_json::to_string_pretty(&map)
            .map(Some)
            .map_err(|e| StoreError::encode(e.to_string())),
        _ => Ok(None),
    }
}

/// An `OutboxMessage` row read back.
#[derive(Debug)]
pub(crate) struct StoredRow {
    /// `SequenceNumber`.
    pub(crate) seq: i64,
    /// `OutboxId` (bus outbox rows).
    pub(crate) outbox_id: Option<Uuid>,
    /// The message; `None` when the row has no destination (it cannot be sent).
    pub(crate) message: Option<OutgoingMessage>,
}

/// Reads a row selected with the rendered message column list.
pub(crate) fn read_message(row: &QueryResult) -> Result<StoredRow, StoreError> {
    let text = |name: &str| -> Result<Option<String>, StoreError> {
        row.try_get::<Option<String>>("", name)
            .map_err(StoreError::database)
    };
    let guid = |name: &str| -> Result<Option<Uuid>, StoreError> {
        text(name)?
            .map(|s| Uuid::parse_str(&s).map_err(|e| StoreError::decode(format!("{name}: {e}"))))
            .transpose()
    };
    let seq: i64 = row.try_get("", "seq").map_err(StoreError::database)?;
    let outbox_id = guid("outbox_id")?;
    let Some(destination) = text("destination_address")?.filter(|d| !d.is_empty()) else {
        return Ok(StoredRow {
            seq,
            outbox_id,
            message: None,
        });
    };
    let sent_time: Option<DateTime<Utc>> =
        row.try_get("", "sent_time").map_err(StoreError::database)?;
    let expiration_time: Option<DateTime<Utc>> = row
        .try_get("", "expiration_time")
        .map_err(StoreError::database)?;
    let body = text("body")?.unwrap_or_default();
    let content_type = text("content_type")?.unwrap_or_else(|| ENVELOPE_CONTENT_TYPE.to_owned());
    let mut message_type: Vec<String> = text("message_type")?
        .unwrap_or_default()
        .split(';')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    if message_type.is_empty() && content_type == ENVELOPE_CONTENT_TYPE {
        // Rows written before MassTransit 8.1 have no MessageType column value: read the body.
        if let Ok(envelope) = Envelope::from_slice(body.as_bytes()) {
            message_type = envelope.message_type;
        }
    }
    let mut message = OutgoingMessage {
        message_id: guid("message_id")?.ok_or_else(|| StoreError::decode("MessageId is NULL"))?,
        conversation_id: guid("conversation_id")?,
        correlation_id: guid("correlation_id")?,
        initiator_id: guid("initiator_id")?,
        request_id: guid("request_id")?,
        source_address: text("source_address")?,
        destination_address: destination,
        response_address: text("response_address")?,
        fault_address: text("fault_address")?,
        message_type,
        content_type,
        body: body.into_bytes().into(),
        headers: read_headers(text("headers")?.as_deref()),
        sent_time: sent_time.unwrap_or_else(Utc::now),
        expiration_time,
        publish_bindings: Vec::new(),
    };
    message.derive_publish_bindings();
    Ok(StoredRow {
        seq,
        outbox_id,
        message: Some(message),
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

/// A PostgreSQL array literal of uuids (`{a,b}`), bound as text and cast in SQL.
pub(crate) fn uuid_array(ids: &[Uuid]) -> String {
    let inner: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    format!("{{{}}}", inner.join(","))
}

/// A PostgreSQL array literal of integers.
pub(crate) fn int_array(values: &[i64]) -> String {
    let inner: Vec<String> = values.iter().map(i64::to_string).collect();
    format!("{{{}}}", inner.join(","))
}
