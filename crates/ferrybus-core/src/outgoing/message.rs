//! [`OutgoingMessage`]: one message ready to leave the process.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::address::{AddressError, EndpointAddress};
use crate::envelope::Headers;
use crate::message::TypeName;

/// One message ready to leave the process: a serialized body and the metadata a transport or an
/// outbox row needs. Its fields map one to one to MassTransit's `OutboxMessage` columns.
#[derive(Clone, Debug, PartialEq)]
pub struct OutgoingMessage {
    /// The message id.
    pub message_id: Uuid,
    /// The conversation id.
    pub conversation_id: Option<Uuid>,
    /// The correlation id.
    pub correlation_id: Option<Uuid>,
    /// The initiator id.
    pub initiator_id: Option<Uuid>,
    /// The request id.
    pub request_id: Option<Uuid>,
    /// The sender's address.
    pub source_address: Option<String>,
    /// Where the message goes: an exchange address (`rabbitmq://host/vhost/name?options`).
    pub destination_address: String,
    /// Where responses go.
    pub response_address: Option<String>,
    /// Where faults go.
    pub fault_address: Option<String>,
    /// The message type URNs.
    pub message_type: Vec<String>,
    /// The body's content type.
    pub content_type: String,
    /// The serialized body (the envelope, for MassTransit's content type).
    pub body: Bytes,
    /// The headers, mirrored to transport headers.
    pub headers: Headers,
    /// When the message was sent.
    pub sent_time: DateTime<Utc>,
    /// When the message expires.
    pub expiration_time: Option<DateTime<Utc>>,
    /// Exchanges of base types to bind from the destination exchange (publishes only).
    pub publish_bindings: Vec<String>,
    /// Transport properties (MassTransit's `OutboxMessage.Properties`), for the transport to
    /// apply when it sends, as MassTransit's `TransportSendContext.ReadPropertiesFrom` does:
    /// those its factory wrote when it built the message ([`TransportProperties`](super::TransportProperties)),
    /// or those read back from an outbox row another service wrote. Stored in the outbox row's
    /// `Properties`, as MassTransit stores them.
    pub properties: Map<String, Value>,
    /// Names of headers whose values are times, sent as AMQP timestamps when the message goes
    /// straight to the broker (MassTransit's RabbitMQ transport does so for `DateTime` header
    /// values); the envelope and an outbox row keep them as round-trip strings. Not stored.
    pub timestamp_headers: Vec<String>,
}

impl OutgoingMessage {
    /// The remaining time to live, if the message expires (never less than one second, as
    /// MassTransit turns a zero or negative TTL into one second).
    pub fn time_to_live(&self) -> Option<Duration> {
        self.expiration_time.map(|t| {
            let ms = (t - Utc::now()).num_milliseconds().max(1000);
            Duration::from_millis(ms as u64)
        })
    }

    /// The destination address, parsed (once per distinct address:
    /// [`EndpointAddress::parse_shared`]); its `name` is the exchange.
    pub fn destination(&self) -> Result<Arc<EndpointAddress>, AddressError> {
        EndpointAddress::parse_shared(&self.destination_address)
    }

    /// The base-type exchanges to bind for this message when it was published to its type's
    /// exchange, derived from the URN list (used for messages read back from an outbox table).
    pub fn derive_publish_bindings(&mut self) {
        let Ok(destination) = self.destination() else {
            return;
        };
        let names: Vec<String> = self
            .message_type
            .iter()
            .filter_map(|urn| TypeName::parse(urn).ok())
            .map(|t| t.entity_name())
            .collect();
        if names.first() == Some(&destination.name) {
            self.publish_bindings = names[1..].to_vec();
        }
    }
}
