//! The [`Envelope`] type (reading is in `read.rs`).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::headers::Headers;
use super::host::HostInfo;
use super::payload::Payload;

/// The content type of MassTransit's JSON envelope.
pub const ENVELOPE_CONTENT_TYPE: &str = "application/vnd.masstransit+json";
/// The content type of raw (envelope-less) JSON messages.
pub const RAW_JSON_CONTENT_TYPE: &str = "application/json";

/// A MassTransit message envelope: the message payload and its metadata (masstransit-wire §1.1).
///
/// Field order is MassTransit's and is kept when serializing.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// The message id (always set by MassTransit).
    pub message_id: Option<Uuid>,
    /// The request id, on requests, their responses and faults.
    pub request_id: Option<Uuid>,
    /// The correlation id, when the message has one.
    pub correlation_id: Option<Uuid>,
    /// The conversation id, kept through a chain of messages.
    pub conversation_id: Option<Uuid>,
    /// The correlation or request id of the message that caused this one.
    pub initiator_id: Option<Uuid>,
    /// The address of the endpoint (or bus) that sent the message.
    pub source_address: Option<String>,
    /// The address the message was sent or published to.
    pub destination_address: Option<String>,
    /// Where responses go (requests only).
    pub response_address: Option<String>,
    /// Where faults go, when the sender asked for that.
    pub fault_address: Option<String>,
    /// The message type URNs, the most specific first.
    pub message_type: Vec<String>,
    /// The payload, as the JSON text it arrived as (readable as a [`Value`](serde_json::Value) through `Deref`).
    pub message: Payload,
    /// When the message expires.
    #[serde(with = "ferrybus_dotnet::datetime::option")]
    pub expiration_time: Option<DateTime<Utc>>,
    /// When the message was sent.
    #[serde(with = "ferrybus_dotnet::datetime::option")]
    pub sent_time: Option<DateTime<Utc>>,
    /// Application and MassTransit headers.
    pub headers: Headers,
    /// The process that wrote the message (shared: the envelopes a process writes all point at
    /// [`HostInfo::shared`], written from its JSON text made once).
    #[serde(serialize_with = "super::host::serialize")]
    pub host: Option<Arc<HostInfo>>,
}

impl Envelope {
    /// The envelope as JSON bytes in the v8 shape.
    pub fn to_vec(&self) -> Vec<u8> {
        // The payload plus room for the ids, addresses, types, headers and host: one allocation
        // for most envelopes instead of one per doubling.
        let mut out = Vec::with_capacity(self.message.json().len() + 1024);
        serde_json::to_writer(&mut out, self).expect("an envelope always serializes");
        out
    }

    /// Whether any of this envelope's message types is `urn` (case-insensitive).
    pub fn has_message_type(&self, urn: &str) -> bool {
        self.message_type
            .iter()
            .any(|t| t.eq_ignore_ascii_case(urn))
    }
}
