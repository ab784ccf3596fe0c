//! [`ReceivePipeline`]: what an endpoint does with one delivery, transport-independent.
//!
//! ```text
//! delivery ─▶ read body (envelope or raw JSON) ──bad──▶ Disposition::Faulted (+ ReceiveFault)
//!                │
//!                ├─ no consumer for any messageType ─▶ Disposition::Skipped
//!                ▼
//!          every matching consumer's tower stack  [retry] ▶ [layers…] ▶ [consumer]
//!                │
//!                ├─ all Ok ─────────────────────────▶ Disposition::Consumed   (ack)
//!                ├─ failed, redelivery left ─────────▶ Disposition::Redeliver (delay, then ack)
//!                └─ failed ─▶ Fault<T> sent/published ▶ Disposition::Faulted  (move to _error, ack)
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use uuid::Uuid;

use crate::envelope::{
    is_mt_header, parse_dotnet_guid, parse_json, Envelope, EnvelopeError, Headers, HostInfo,
    ENVELOPE_CONTENT_TYPE, RAW_JSON_CONTENT_TYPE,
};
use crate::error::{ConsumeError, ConsumeErrorKind};
use crate::fault::{fault_headers, fault_payload, skipped_headers, ExceptionInfo, ReceiveFault};
use crate::outgoing::{MessageFactory, MessageOrigin, SendOptions, SharedSink};
use crate::pipeline::{
    BoxConsumeService, ConsumeRequest, ConsumerInfo, ReceivedMessage, RetryPolicy,
};

/// One message as a transport received it.
#[derive(Clone, Debug, Default)]
pub struct InboundDelivery {
    /// The body bytes.
    pub body: Vec<u8>,
    /// The content type property.
    pub content_type: Option<String>,
    /// The transport headers.
    pub headers: Headers,
    /// The transport's message id property.
    pub message_id: Option<String>,
    /// The transport's correlation id property.
    pub correlation_id: Option<String>,
    /// Whether the broker redelivered it.
    pub redelivered: bool,
}

impl InboundDelivery {
    /// The content type: the property, else the `Content-Type` header, else MassTransit's
    /// envelope type (the default deserializer).
    pub fn effective_content_type(&self) -> &str {
        self.content_type
            .as_deref()
            .filter(|c| !c.is_empty())
            .or_else(|| self.headers.get_str("Content-Type"))
            .or_else(|| self.headers.get_str("ContentType"))
            .unwrap_or(ENVELOPE_CONTENT_TYPE)
    }
}

/// What the transport must do with a delivery. Every variant ends with the delivery settled:
/// nothing is dropped.
#[derive(Clone, Debug, PartialEq)]
pub enum Disposition {
    /// Every consumer succeeded (or saw a duplicate): acknowledge.
    Consumed,
    /// Move the original body and properties to `<queue>_error` with these headers added and the
    /// expiration cleared, then acknowledge.
    Faulted {
        /// `MT-Reason`, `MT-Fault-*`, `MT-Host-*`.
        headers: Headers,
    },
    /// Move to `<queue>_skipped` with these headers added, then acknowledge.
    Skipped {
        /// `MT-Reason=dead-letter`, `MT-Host-*`.
        headers: Headers,
    },
    /// Send this body back to the endpoint after `delay`, then acknowledge the original.
    Redeliver {
        /// How long to wait.
        delay: Duration,
        /// The rewritten envelope (with `MT-Redelivery-Count` in its headers).
        body: Vec<u8>,
        /// Headers to set on the transport message (`MT-Redelivery-Count`).
        headers: Headers,
    },
    /// The endpoint is stopping: give the delivery back to the broker unacknowledged.
    Abandoned,
}

/// One consumer registered on an endpoint: who it is and its composed pipeline.
#[derive(Clone)]
pub struct ConsumerRegistration {
    /// Which consumer.
    pub info: Arc<ConsumerInfo>,
    /// Its tower stack.
    pub service: BoxConsumeService,
}

/// The receive logic of one endpoint, shared by every transport.
#[derive(Clone)]
pub struct ReceivePipeline {
    input_address: String,
    consumers: Arc<[ConsumerRegistration]>,
    sink: SharedSink,
    factory: Arc<MessageFactory>,
    redelivery: Option<RetryPolicy>,
    raw_json: bool,
    publish_faults: bool,
    max_body_size: usize,
    cancellation: CancellationToken,
}

/// Settings of a [`ReceivePipeline`].
pub struct PipelineSettings {
    /// The endpoint's input address.
    pub input_address: String,
    /// The registered consumers.
    pub consumers: Vec<ConsumerRegistration>,
    /// Where outgoing messages (faults, publishes) go.
    pub sink: SharedSink,
    /// Builds outgoing messages.
    pub factory: Arc<MessageFactory>,
    /// Delayed redelivery policy.
    pub redelivery: Option<RetryPolicy>,
    /// Whether `application/json` bodies are read as raw JSON.
    pub raw_json: bool,
    /// Whether `Fault<T>` is published when a consumer fails.
    pub publish_faults: bool,
    /// Bodies larger than this are not read (moved to the error queue).
    pub max_body_size: usize,
    /// Cancelled when the endpoint stops.
    pub cancellation: CancellationToken,
}

impl ReceivePipeline {
    /// A pipeline from its settings.
    pub fn new(settings: PipelineSettings) -> Self {
        Self {
            input_address: settings.input_address,
            consumers: settings.consumers.into(),
            sink: settings.sink,
            factory: settings.factory,
            redelivery: settings.redelivery,
            raw_json: settings.raw_json,
            publish_faults: settings.publish_faults,
            max_body_size: settings.max_body_size,
            cancellation: settings.cancellation,
        }
    }

    /// The endpoint's input address.
    pub fn input_address(&self) -> &str {
        &self.input_address
    }

    /// Handles one delivery and says what to do with it. Never panics on bad input.
    pub async fn handle(&self, delivery: &InboundDelivery) -> Disposition {
        let received = match self.read(delivery) {
            Ok(received) => Arc::new(received),
            Err(error) => return self.receive_fault(delivery, error).await,
        };
        let matching: Vec<&ConsumerRegistration> = self
            .consumers
            .iter()
            .filter(|c| self.matches(&received, c))
            .collect();
        if matching.is_empty() {
            tracing::warn!(
                target: "ferrybus::receive",
                message_id = ?received.envelope.message_id,
                message_type = ?received.envelope.message_type,
                "no consumer for the message type; moving it to the skipped queue"
            );
            return Disposition::Skipped {
                headers: skipped_headers(),
            };
        }
        let results = join_all(matching.iter().map(|c| self.run(c, &received))).await;
        let failure = matching
            .iter()
            .zip(results)
            .find_map(|(c, result)| result.err().map(|e| (c.info.clone(), e)));
        match failure {
            None => Disposition::Consumed,
            Some((consumer, error)) => self.consumer_failed(&received, &consumer, error).await,
        }
    }

    fn matches(&self, received: &ReceivedMessage, consumer: &ConsumerRegistration) -> bool {
        let no_types = received.envelope.message_type.is_empty();
        (no_types && received.content_type == RAW_JSON_CONTENT_TYPE)
            || received
                .envelope
                .has_message_type(consumer.info.message_type().urn())
    }

    async fn run(
        &self,
        consumer: &ConsumerRegistration,
        received: &Arc<ReceivedMessage>,
    ) -> Result<(), ConsumeError> {
        let request = ConsumeRequest::new(
            received.clone(),
            consumer.info.clone(),
            self.sink.clone(),
            self.factory.clone(),
            self.cancellation.clone(),
        );
        consumer.service.clone().oneshot(request).await
    }

    fn read(&self, delivery: &InboundDelivery) -> Result<ReceivedMessage, EnvelopeError> {
        if delivery.body.len() > self.max_body_size {
            return Err(EnvelopeError::TooLarge {
                size: delivery.body.len(),
                limit: self.max_body_size,
            });
        }
        let content_type = delivery.effective_content_type();
        let raw = self.raw_json && content_type.starts_with(RAW_JSON_CONTENT_TYPE);
        let envelope = if raw {
            read_raw(delivery)?
        } else {
            Envelope::from_slice(&delivery.body)?
        };
        Ok(ReceivedMessage {
            envelope,
            input_address: self.input_address.clone(),
            redelivered: delivery.redelivered,
            transport_headers: delivery.headers.clone(),
            content_type: if raw {
                RAW_JSON_CONTENT_TYPE
            } else {
                ENVELOPE_CONTENT_TYPE
            }
            .to_owned(),
        })
    }

    async fn consumer_failed(
        &self,
        received: &ReceivedMessage,
        consumer: &ConsumerInfo,
        error: ConsumeError,
    ) -> Disposition {
        if error.kind() == ConsumeErrorKind::Cancelled || self.cancellation.is_cancelled() {
            return Disposition::Abandoned;
        }
        if let Some(redeliver) = self.redeliver(received, &error) {
            return redeliver;
        }
        tracing::error!(
            target: "ferrybus::receive",
            message_id = ?received.envelope.message_id,
            consumer = consumer.name(),
            retries = error.retry_count(),
            error = %error,
            "consumer faulted; moving the message to the error queue"
        );
        if self.publish_faults || received.envelope.fault_address.is_some() {
            self.send_fault(received, consumer, &error).await;
        }
        let mut headers = fault_headers(&error, &self.input_address, Some(consumer));
        let redeliveries = received.redelivery_count();
        if redeliveries > 0 {
            headers.insert("MT-Fault-RedeliveryCount", i64::from(redeliveries));
        }
        Disposition::Faulted { headers }
    }

    fn redeliver(&self, received: &ReceivedMessage, error: &ConsumeError) -> Option<Disposition> {
        let policy = self.redelivery.as_ref().filter(|p| p.handles(error))?;
        let count = received.redelivery_count();
        let delay = policy.delay(count)?;
        let mut envelope = received.envelope.clone();
        envelope
            .headers
            .insert("MT-Redelivery-Count", i64::from(count + 1));
        let mut headers = Headers::new();
        headers.insert("MT-Redelivery-Count", i64::from(count + 1));
        tracing::info!(
            target: "ferrybus::receive",
            message_id = ?envelope.message_id,
            redelivery = count + 1,
            ?delay,
            "scheduling delayed redelivery"
        );
        Some(Disposition::Redeliver {
            delay,
            body: envelope.to_vec(),
            headers,
        })
    }

    async fn send_fault(
        &self,
        received: &ReceivedMessage,
        consumer: &ConsumerInfo,
        error: &ConsumeError,
    ) {
        let envelope = &received.envelope;
        let payload = fault_payload(
            error,
            consumer,
            envelope.message_id,
            &envelope.message_type,
            &consumer.fault_payload(&envelope.message),
        );
        let fault_type = consumer.message_type().fault();
        let mut options = SendOptions::new();
        if let Some(id) = envelope.request_id {
            options = options.request_id(id);
        }
        if let Some(id) = envelope.correlation_id {
            options = options.correlation_id(id);
        }
        if error.retry_count() > 0 {
            options = options.header("MT-Fault-RetryCount", i64::from(error.retry_count()));
        }
        let origin = MessageOrigin::consumed(envelope, &self.input_address);
        let target = envelope
            .fault_address
            .as_ref()
            .or(envelope.response_address.as_ref());
        let (destination, publish) = match target {
            Some(address) => (self.factory.host().resolve(address), false),
            None => (
                Ok(self.factory.host().entity_address(fault_type.entity_name())),
                true,
            ),
        };
        let message = destination.map_err(Into::into).and_then(|d| {
            self.factory
                .build(&fault_type, payload, d, &origin, options, publish)
        });
        self.deliver_fault(message).await;
    }

    async fn receive_fault(&self, delivery: &InboundDelivery, error: EnvelopeError) -> Disposition {
        tracing::error!(
            target: "ferrybus::receive",
            error = %error,
            "message body is not a valid envelope; moving it to the error queue"
        );
        let consume_error = ConsumeError::new(ConsumeErrorKind::Deserialize, error);
        let faulted_message_id = delivery.message_id.as_deref().and_then(parse_dotnet_guid);
        if self.publish_faults {
            let fault = ReceiveFault {
                fault_id: Some(Uuid::now_v7()),
                timestamp: Some(chrono::Utc::now()),
                faulted_message_id,
                exceptions: vec![ExceptionInfo::from_error(&consume_error, "ferrybus")],
                host: Some(HostInfo::current().clone()),
                fault_message_types: Vec::new(),
                content_type: Some(delivery.effective_content_type().to_owned()),
            };
            let origin = MessageOrigin {
                source_address: Some(self.input_address.clone()),
                ..MessageOrigin::default()
            };
            let message = self.factory.publish(&fault, &origin, SendOptions::new());
            self.deliver_fault(message).await;
        }
        Disposition::Faulted {
            headers: fault_headers(&consume_error, &self.input_address, None),
        }
    }

    async fn deliver_fault(&self, message: Result<crate::OutgoingMessage, crate::BoxError>) {
        let result = match message {
            Ok(message) => self.sink.deliver(message).await,
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            tracing::warn!(target: "ferrybus::receive", %error, "could not send the fault message");
        }
    }
}

/// Reads a raw JSON body (masstransit-wire §3.2): the body is the message, metadata comes from
/// transport headers and properties.
fn read_raw(delivery: &InboundDelivery) -> Result<Envelope, EnvelopeError> {
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
        message,
        expiration_time: None,
        sent_time: None,
        host: h
            .get_str("MT-Host-Info")
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .and_then(|v| Envelope::from_value(serde_json::json!({"message": {}, "host": v})).ok())
            .and_then(|e| e.host),
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
