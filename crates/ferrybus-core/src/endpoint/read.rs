//! Reading a delivery's body: a MassTransit envelope, or raw JSON where the endpoint enables it.

use serde_json::Value;

use super::delivery::Delivery;
use crate::envelope::{
    is_mt_header, parse_dotnet_guid, parse_json, read_host, Envelope, EnvelopeError, Headers,
    ENVELOPE_CONTENT_TYPE, RAW_JSON_CONTENT_TYPE,
};
use crate::outgoing::{RawSerializerOptions, Serializer};

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
/// the serializer is raw JSON and the content type is `application/json`, else a MassTransit
/// envelope.
pub(crate) fn read(
    delivery: &Delivery,
    serializer: Serializer,
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
    // registered only where the bus or the endpoint uses it.
    let raw = match serializer {
        Serializer::RawJson(options) => media_type(delivery.effective_content_type())
            .eq_ignore_ascii_case(RAW_JSON_CONTENT_TYPE)
            .then_some(options),
        Serializer::Envelope => None,
    };
    Ok(if let Some(options) = raw {
        ReadBody {
            envelope: read_raw(delivery, options)?,
            content_type: RAW_JSON_CONTENT_TYPE,
        }
    } else {
        ReadBody {
            envelope: Envelope::from_slice(&delivery.body)?,
            content_type: ENVELOPE_CONTENT_TYPE,
        }
    })
}

impl Delivery {
    /// Reads the body as an endpoint with `serializer` reads it, by its content type: raw JSON
    /// when `serializer` is raw JSON and the content type `application/json`, else a MassTransit
    /// envelope. How a transport reads responses to its bus's requests.
    ///
    /// ```
    /// use ferrybus_core::{outgoing::Serializer, Delivery};
    /// let raw = Delivery::new(br#"{"id":7}"#.to_vec())
    ///     .content_type("application/json")
    ///     .message_id("5e1a0000-0000-0000-0000-000000000001");
    /// let envelope = raw.read_envelope(Serializer::raw_json()).unwrap();
    /// assert_eq!(envelope.message["id"], 7);
    /// assert!(raw.read_envelope(Serializer::Envelope).is_err());
    /// ```
    pub fn read_envelope(&self, serializer: Serializer) -> Result<Envelope, EnvelopeError> {
        read(self, serializer, usize::MAX).map(|read| read.envelope)
    }
}

/// Reads a raw JSON body (masstransit-wire §3.2): the body is the message, metadata comes from
/// transport headers and properties.
fn read_raw(delivery: &Delivery, options: RawSerializerOptions) -> Result<Envelope, EnvelopeError> {
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
    // `RawMessageContext.TransportHeaderFilter`: the headers only with `CopyHeaders`.
    let headers: Headers = h
        .iter()
        .filter(|_| options.copy_headers)
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
