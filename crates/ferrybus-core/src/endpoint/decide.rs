//! The one place an endpoint decides what becomes of a delivery, from what its consumers
//! answered, and builds the fault to publish — the same way for every fault.
//!
//! ```text
//! body not readable ───────────────────────────────────────────────▶ Fault (ReceiveFault)
//! delivered more often than the queue's delivery limit ────────────▶ Fault (ReceiveFault)
//! every consumer answered:
//!   ├─ all consumed (or some duplicates) ───────────────────────────▶ Ack
//!   ├─ all duplicates ──────────────────────────────────────────────▶ Duplicate
//!   └─ one failed:
//!        ├─ cancelled, or the endpoint is stopping ─────────────────▶ Abandon
//!        ├─ the redelivery policy has a delay left ─────────────────▶ Redeliver
//!        ├─ the payload does not bind to the consumer's type ───────▶ Fault (ReceiveFault)
//!        └─ otherwise ──────────────────────────────────────────────▶ Fault (Fault<T>)
//! ```
//!
//! Deciding has no side effects: the fault travels in the [`Settlement`], and the transport
//! publishes it once, after the move to the error queue.
//!
//! Which message a fault names follows MassTransit's `GenerateFaultFilter`
//! (`src/MassTransit/Middleware/GenerateFaultFilter.cs`) and `ConsumeContext.NotifyFaulted`: when
//! the body was read, the envelope's message id and message types; when it was not, the transport
//! message id and no types. A fault goes to the envelope's fault address, else its response
//! address (with its request id), else it is published; it is built when the endpoint publishes
//! faults or the message names one of those addresses.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::delivery::Delivery;
use super::error::DeliveryLimitReached;
use super::read::media_type;
use super::settlement::{Faulted, Redelivery, Settlement};
use crate::consume::{ConsumeOutcome, ConsumerInfo, ReceivedMessage, RetryPolicy};
use crate::envelope::{parse_dotnet_guid, Envelope, EnvelopeError, Headers, HostInfo};
use crate::error::PublishError;
use crate::error::{ConsumeError, ConsumeErrorKind};
use crate::fault::{fault_headers, fault_payload, skipped_headers, ExceptionInfo, ReceiveFault};
use crate::message::{Message, MessageType};
use crate::outgoing::{MessageFactory, MessageOrigin, OutgoingMessage, SendOptions};

/// What decides the settlement of every delivery of one endpoint.
pub(crate) struct Decider {
    pub(crate) input_address: String,
    pub(crate) factory: Arc<MessageFactory>,
    pub(crate) redelivery: Option<RetryPolicy>,
    pub(crate) publish_faults: bool,
    pub(crate) cancellation: CancellationToken,
}

/// The message a fault names: what was read of it.
struct FaultedMessage<'a> {
    envelope: Option<&'a Envelope>,
    transport_message_id: Option<&'a str>,
    content_type: &'a str,
}

impl FaultedMessage<'_> {
    fn message_id(&self) -> Option<Uuid> {
        match self.envelope {
            Some(envelope) => envelope.message_id,
            None => self.transport_message_id.and_then(parse_dotnet_guid),
        }
    }

    fn message_types(&self) -> &[String] {
        self.envelope.map_or(&[], |e| e.message_type.as_slice())
    }
}

impl Decider {
    /// A body that is not an envelope (or raw JSON where enabled), or is too large to read.
    pub(crate) fn unreadable(&self, delivery: &Delivery, error: EnvelopeError) -> Settlement {
        tracing::error!(target: "ferrybus::receive", error = %error, "message body is not a valid envelope; moving it to the error queue");
        let faulted = FaultedMessage {
            envelope: None,
            transport_message_id: delivery.message_id.as_deref(),
            content_type: delivery.effective_content_type(),
        };
        self.receive_fault(
            &faulted,
            ConsumeError::new(ConsumeErrorKind::Deserialize, error),
        )
    }

    /// A delivery the broker delivered `count` times without it being settled, past `limit`
    /// (`None` below the limit): faulted without running any consumer again.
    pub(crate) fn over_limit(
        &self,
        received: &ReceivedMessage,
        count: u32,
        limit: u32,
    ) -> Option<Settlement> {
        if count < limit {
            return None;
        }
        tracing::error!(target: "ferrybus::receive", message_id = ?received.envelope.message_id, count, limit, "delivery limit reached; moving the message to the error queue");
        let error = ConsumeError::permanent(DeliveryLimitReached { count, limit });
        Some(self.receive_fault(&read(received), error))
    }

    /// The settlement of a delivery no consumer handles.
    pub(crate) fn unhandled(&self, received: &ReceivedMessage) -> Settlement {
        tracing::warn!(target: "ferrybus::receive", message_id = ?received.envelope.message_id, message_type = ?received.envelope.message_type, "no consumer for the message type; moving it to the skipped queue");
        Settlement::Skip {
            headers: skipped_headers(),
        }
    }

    /// The settlement of a delivery whose consumers answered `outcomes`: the first failure
    /// decides; else duplicates everywhere, or an acknowledgement.
    pub(crate) fn settle<'a>(
        &self,
        received: &ReceivedMessage,
        outcomes: impl IntoIterator<Item = (&'a ConsumerInfo, Result<ConsumeOutcome, ConsumeError>)>,
    ) -> Settlement {
        let mut all_duplicates = true;
        for (consumer, outcome) in outcomes {
            match outcome {
                Ok(ConsumeOutcome::Duplicate) => {}
                Ok(_) => all_duplicates = false,
                Err(error) => return self.consumer_failed(received, consumer, error),
            }
        }
        if all_duplicates {
            Settlement::Duplicate
        } else {
            Settlement::Ack
        }
    }

    fn consumer_failed(
        &self,
        received: &ReceivedMessage,
        consumer: &ConsumerInfo,
        error: ConsumeError,
    ) -> Settlement {
        if error.kind() == ConsumeErrorKind::Cancelled || self.cancellation.is_cancelled() {
            return Settlement::Abandon;
        }
        if let Some(redelivery) = self.redelivery(received, &error) {
            return Settlement::Redeliver(redelivery);
        }
        if error.kind() == ConsumeErrorKind::Deserialize {
            // The payload does not bind to the consumer's type. In MassTransit that is
            // `TryGetMessage<T>` throwing in the message-type filter
            // (`src/MassTransit/Middleware/ConsumeContextOutputMessageTypeFilter.cs`), before any
            // consumer ran: the error pipe's `GenerateFaultFilter` publishes a `ReceiveFault` —
            // never a `Fault<T>`, whose `message` would not be a `T` — and the move to
            // `<queue>_error` carries no consumer-type headers.
            tracing::error!(target: "ferrybus::receive", message_id = ?received.envelope.message_id, message_type = %consumer.message_type().urn(), retries = error.retry_count(), error = %error, "the payload does not bind to the consumer's message type; moving the message to the error queue");
            return self.receive_fault(&read(received), error);
        }
        tracing::error!(target: "ferrybus::receive", message_id = ?received.envelope.message_id, consumer = consumer.name(), retries = error.retry_count(), error = %error, "consumer faulted; moving the message to the error queue");
        let mut headers = fault_headers(&error, &self.input_address, Some(consumer));
        let redeliveries = received.redelivery_count();
        if redeliveries > 0 {
            headers.insert("MT-Fault-RedeliveryCount", i64::from(redeliveries));
        }
        let fault = self
            .consume_fault(received, consumer, &error)
            .and_then(log_unbuilt);
        Settlement::Fault(Box::new(Faulted {
            headers,
            fault,
            exception: ExceptionInfo::from_error(&error, consumer.name()),
            receive_fault: false,
        }))
    }

    fn redelivery(&self, received: &ReceivedMessage, error: &ConsumeError) -> Option<Redelivery> {
        let policy = self.redelivery.as_ref().filter(|p| p.handles(error))?;
        let count = received.redelivery_count();
        let delay = policy.delay(count)?;
        let mut envelope = received.envelope.clone();
        envelope
            .headers
            .insert("MT-Redelivery-Count", i64::from(count + 1));
        let mut headers = Headers::new();
        headers.insert("MT-Redelivery-Count", i64::from(count + 1));
        tracing::info!(target: "ferrybus::receive", message_id = ?envelope.message_id, redelivery = count + 1, ?delay, "scheduling delayed redelivery");
        Some(Redelivery {
            delay,
            body: envelope.to_vec().into(),
            headers,
            count: count + 1,
        })
    }

    /// The `Fault<T>` of a consumer failure; `None` (logged) when faults are not built for this
    /// message, or when the message does not bind to `T` again, so that no `Fault<T>` carries a
    /// message that is not a `T`.
    fn consume_fault(
        &self,
        received: &ReceivedMessage,
        consumer: &ConsumerInfo,
        error: &ConsumeError,
    ) -> Option<Result<OutgoingMessage, PublishError>> {
        let envelope = &received.envelope;
        if !self.builds_fault(Some(envelope)) {
            return None;
        }
        let Some(message) = consumer.fault_payload(&envelope.message) else {
            tracing::warn!(target: "ferrybus::receive", message_id = ?envelope.message_id, consumer = consumer.name(), "the message does not bind to the consumer's type; no Fault<T> is published");
            return None;
        };
        let payload = fault_payload(
            error,
            consumer,
            envelope.message_id,
            &envelope.message_type,
            &message,
        );
        let mut options = SendOptions::new();
        if let Some(id) = envelope.correlation_id {
            options = options.correlation_id(id);
        }
        if error.retry_count() > 0 {
            options = options.header("MT-Fault-RetryCount", i64::from(error.retry_count()));
        }
        let fault_type = consumer.message_type().fault();
        Some(self.fault_message(
            Some(envelope),
            &fault_type,
            payload,
            &received.origin(),
            options,
        ))
    }

    /// A message that could not be received as a message of a consumer's type (a body that is
    /// not an envelope, a payload that does not bind, a delivery past the delivery limit): moved
    /// to `<queue>_error` with the `MT-Fault-*` headers (no consumer type), with a `ReceiveFault`.
    fn receive_fault(&self, faulted: &FaultedMessage<'_>, error: ConsumeError) -> Settlement {
        let exception = ExceptionInfo::from_error(&error, "ferrybus");
        let fault = self
            .builds_fault(faulted.envelope)
            .then(|| {
                let fault = ReceiveFault {
                    fault_id: Some(Uuid::now_v7()),
                    timestamp: Some(chrono::Utc::now()),
                    faulted_message_id: faulted.message_id(),
                    exceptions: vec![exception.clone()],
                    host: Some(HostInfo::current().clone()),
                    fault_message_types: faulted.message_types().to_vec(),
                    content_type: Some(media_type(faulted.content_type).to_owned()),
                };
                let payload = serde_json::to_value(fault).expect("a fault always serializes");
                let origin = match faulted.envelope {
                    Some(envelope) => MessageOrigin::consumed(envelope, &self.input_address),
                    None => MessageOrigin {
                        source_address: Some(self.input_address.clone()),
                        ..MessageOrigin::default()
                    },
                };
                self.fault_message(
                    faulted.envelope,
                    &ReceiveFault::message_type(),
                    payload,
                    &origin,
                    SendOptions::new(),
                )
            })
            .and_then(log_unbuilt);
        Settlement::Fault(Box::new(Faulted {
            headers: fault_headers(&error, &self.input_address, None),
            fault,
            exception,
            receive_fault: true,
        }))
    }

    /// Whether a fault is built for `envelope`'s failure: the endpoint publishes faults, or the
    /// message names a fault or response address.
    fn builds_fault(&self, envelope: Option<&Envelope>) -> bool {
        self.publish_faults
            || envelope.is_some_and(|e| e.fault_address.is_some() || e.response_address.is_some())
    }

    /// A fault of `fault_type`: sent to the envelope's fault address, else its response address
    /// (with its request id), else published.
    fn fault_message(
        &self,
        envelope: Option<&Envelope>,
        fault_type: &MessageType,
        payload: serde_json::Value,
        origin: &MessageOrigin,
        mut options: SendOptions,
    ) -> Result<OutgoingMessage, PublishError> {
        let target =
            envelope.and_then(|e| e.fault_address.as_ref().or(e.response_address.as_ref()));
        if let Some(id) = envelope.and_then(|e| e.request_id) {
            options = options.request_id(id);
        }
        let host = self.factory.host();
        let (destination, publish) = match target {
            Some(address) => (host.resolve(address)?, false),
            None => (host.entity_address(fault_type.entity_name()), true),
        };
        self.factory
            .build(fault_type, payload, destination, origin, options, publish)
    }
}

/// The message a fault names when its body was read.
fn read(received: &ReceivedMessage) -> FaultedMessage<'_> {
    FaultedMessage {
        envelope: Some(&received.envelope),
        transport_message_id: None,
        content_type: &received.content_type,
    }
}

/// A fault message that could not even be built (an unparsable fault address) is logged and
/// left out; the delivery still moves to the error queue.
fn log_unbuilt(built: Result<OutgoingMessage, PublishError>) -> Option<OutgoingMessage> {
    built
        .map_err(|error| {
            tracing::warn!(target: "ferrybus::receive", %error, "could not build the fault message");
        })
        .ok()
}
