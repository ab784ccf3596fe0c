//! Reading a delivery's body: a MassTransit envelope, or raw JSON where the endpoint enables it.

use serde_json::Value;

use super::delivery::Delivery;
use crate::envelope::{
    is_mt_header, parse_dotnet_guid, parse_json, read_host, Envelope, EnvelopeError, Headers,
    ENVELOPE_CONTENT_TYPE, RAW_JSON_CONTENT_TYPE,
};

/// The media type of a content type: `application/json; charset=utf-8` → `application/json`.
pub(crate) fn media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or_default().trim()
}

/// A body read into an envelope, and how it was read.
pub(crate) struct ReadBody {
    pub(crate) envelope: Envelope,
    pub(crate) content_type: &'static str,
}

/// Reads `delivery`'s body: refuses bodies over `max_body_size` unread, reads raw JSON when
/// `raw_json` is on and the content type is `application/json`, else a MassTransit envelope.
pub(crate) fn read(
    delivery: &Delivery,
    raw_json: bool,
    max_body_size: usize,
) -> Result<ReadBody, EnvelopeError> {
    if delivery.body.len() > max_body_size {
        return Err(EnvelopeError::TooLarge {
            size: delivery.body.len(),
            limit: max_body_size,
        });
    }
    // MassTransit picks the deserializer registered for the media type and falls back to the
    // endpoint's default one — the envelope's — for a missing or unknown content type
    // (`src/MassTransit/Serialization/Serialization.cs`, `GetMessageDeserializer`). Raw JSON is
    // registered only where the endpoint enables it.
    let raw = raw_json
        && media_type(delivery.effective_content_type())
            .eq_ignore_ascii_case(RAW_JSON_CONTENT_TYPE);
    Ok(if raw {
        ReadBody {
            envelope: read_raw(delivery)?,
            content_type: RAW_JSON_CONTENT_TYPE,
        }
    } else {
        ReadBody {
            envelope: Envelope::from_slice(&delivery.body)?,
            content_type: ENVELOPE_CONTENT_TYPE,
        }
    })
}

/// Reads a raw JSON body (masstransit-wire §3.2): the body is the message, metadata comes from
/// transport headers and properties.
fn read_raw(delivery: &Delivery) -> Result<Envelope, EnvelopeError> {
    let message = parse_json(&delivery.body)?;
    if message.is_null() {
        return Err(EnvelopeError::MissingMessage);
    }
    let h = &delivery.headers;
    let guid = |field: &'static str, name: &str, fallback: Option<&String>| match h
        .get_str(name)
        .or(fallback.map(String::as_str))
    {
        None | Some("") => Ok(None),
        Some(s) => parse_dotnet_guid(s)
            .map(Some)
            .ok_or_else(|| EnvelopeError::InvalidField {
                field,
                reason: format!("{s:?} is not a GUID"),
            }),
    };
    let text = |name: &str| h.get_str(name).map(str::to_owned);
    let headers: Headers = h
        .iter()
        .filter(|(k, _)| {
            !is_mt_header(k) && !RAW_ID_HEADERS.iter().any(|n| n.eq_ignore_ascii_case(k))
        })
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    Ok(Envelope {
        message_id: guid("messageId", "MessageId", delivery.message_id.as_ref())?,
        correlation_id: guid(
            "correlationId",
            "CorrelationId",
            delivery.correlation_id.as_ref(),
        )?,
        conversation_id: guid("conversationId", "ConversationId", None)?,
        request_id: guid("requestId", "RequestId", None)?,
        initiator_id: guid("initiatorId", "MT-InitiatorId", None)?,
        source_address: text("MT-Source-Address"),
        response_address: text("MT-Response-Address"),
        fault_address: text("MT-Fault-Address"),
        destination_address: None,
        message_type: text("MT-MessageType")
            .map(|t| {
                t.split(';')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        message: message.into(),
        expiration_time: None,
        sent_time: None,
        host: h
            .get_str("MT-Host-Info")
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .and_then(|v| read_host(v).ok().flatten())
            .map(std::sync::Arc::new),
        headers,
    })
}

const RAW_ID_HEADERS: [&str; 5] = [
    "MessageId",
    "CorrelationId",
    "ConversationId",
    "RequestId",
    "Content-Type",
];
