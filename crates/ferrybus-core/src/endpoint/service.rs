//! [`EndpointService`]: what an endpoint does with one delivery, as a tower service.
//!
//! ```text
//! Delivery ─▶ read the body (envelope, or raw JSON where enabled) ──bad──▶ Fault (ReceiveFault)
//!                │
//!                ├─ no consumer for any messageType ────────────────▶ Skip
//!                ▼
//!          every matching consumer's stack: [retry] ▶ [inbox] ▶ [layers…] ▶ [consumer]
//!                │
//!                ├─ all consumed (or some duplicates) ───────────────▶ Ack
//!                ├─ all duplicates ──────────────────────────────────▶ Duplicate
//!                ├─ failed, redelivery left ─────────────────────────▶ Redeliver
//!                ├─ failed while stopping ───────────────────────────▶ Abandon
//!                └─ failed ──────────────────────────────────────────▶ Fault (Fault<T>)
//! ```
//!
//! Deciding has no side effects: a fault to publish travels in the [`Settlement`], and the
//! transport publishes it once, after the move to the error queue.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::panic::AssertUnwindSafe;

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};
use uuid::Uuid;

use crate::consume::panic::catch_panic;
use crate::consume::{
    BoxConsumeService, ConsumeOutcome, ConsumeRequest, ConsumerInfo, ReceivedMessage, RetryPolicy,
};
use crate::endpoint::read::read;
use crate::endpoint::run::panicked;
use crate::endpoint::{Delivery, EndpointConfig, Faulted, Redelivery, Settlement};
use crate::envelope::{parse_dotnet_guid, Headers, HostInfo, RAW_JSON_CONTENT_TYPE};
use crate::error::{ConsumeError, ConsumeErrorKind};
use crate::fault::{fault_headers, fault_payload, skipped_headers, ExceptionInfo, ReceiveFault};
use crate::outgoing::{MessageFactory, MessageOrigin, OutgoingMessage, SendOptions};
use crate::publish::{PublishError, SharedSink};

/// One consumer registered on an endpoint: who it is and its composed stack.
#[derive(Clone)]
pub(crate) struct Registration {
    pub(crate) info: Arc<ConsumerInfo>,
    pub(crate) service: BoxConsumeService,
}

/// The innermost endpoint service: reads, routes, runs the consumers and decides the
/// [`Settlement`]. [`EndpointConfig::build`] wraps it in the endpoint's layers.
#[derive(Clone)]
pub(crate) struct EndpointService {
    inner: Arc<Inner>,
}

struct Inner {
    input_address: String,
    consumers: Box<[Registration]>,
    sink: SharedSink,
    factory: Arc<MessageFactory>,
    redelivery: Option<RetryPolicy>,
    raw_json: bool,
    publish_faults: bool,
    max_body_size: usize,
    cancellation: CancellationToken,
}

impl EndpointService {
    pub(crate) fn new(
        input_address: String,
        consumers: Vec<Registration>,
        sink: SharedSink,
        factory: Arc<MessageFactory>,
        config: &EndpointConfig,
        cancellation: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                input_address,
                consumers: consumers.into(),
                sink,
                factory,
                redelivery: config.redelivery_policy().cloned(),
                raw_json: config.reads_raw_json(),
                publish_faults: config.publishes_faults(),
                max_body_size: config.body_limit(),
                cancellation,
            }),
        }
    }
}

impl Service<Delivery> for EndpointService {
    type Response = Settlement;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Settlement, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        self.call_guarded(delivery)
    }
}

impl EndpointService {
    /// Handles `delivery`; a panic outside the consumers (whose panics are caught already)
    /// becomes a fault, in the same single allocation.
    pub(crate) fn call_guarded(
        &self,
        delivery: Delivery,
    ) -> BoxFuture<'static, Result<Settlement, Infallible>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let settled = AssertUnwindSafe(inner.handle(delivery))
                .catch_unwind()
                .await;
            Ok(settled.unwrap_or_else(|payload| panicked(&*payload, &inner.input_address)))
        })
    }
}

impl Inner {
    async fn handle(&self, mut delivery: Delivery) -> Settlement {
        let read = match read(&delivery, self.raw_json, self.max_body_size) {
            Ok(read) => read,
            Err(error) => {
                tracing::error!(
                    target: "ferrybus::receive",
                    error = %error,
                    "message body is not a valid envelope; moving it to the error queue"
                );
                let error = ConsumeError::new(ConsumeErrorKind::Deserialize, error);
                return self.receive_fault(
                    delivery.message_id.as_deref(),
                    delivery.effective_content_type(),
                    error,
                );
            }
        };
        let transport_message_id = delivery.message_id.take();
        let received = Arc::new(ReceivedMessage {
            envelope: read.envelope,
            input_address: self.input_address.clone(),
            redelivered: delivery.redelivered,
            transport_headers: std::mem::take(&mut delivery.headers),
            content_type: read.content_type.to_owned(),
            priority: delivery.priority,
            reply_to: delivery.reply_to.take(),
            sequence_number: delivery.sequence_number,
        });
        let matching: Vec<&Registration> = self
            .consumers
            .iter()
            .filter(|c| matches(&received, c))
            .collect();
        if matching.is_empty() {
            tracing::warn!(
                target: "ferrybus::receive",
                message_id = ?received.envelope.message_id,
                message_type = ?received.envelope.message_type,
                "no consumer for the message type; moving it to the skipped queue"
            );
            return Settlement::Skip {
                headers: skipped_headers(),
            };
        }
        let outcomes = join_all(matching.iter().map(|c| self.run(c, &received))).await;
        let mut all_duplicates = true;
        for (consumer, outcome) in matching.iter().zip(outcomes) {
            match outcome {
                Ok(ConsumeOutcome::Duplicate) => {}
                Ok(_) => all_duplicates = false,
                Err(error) => {
                    return self.consumer_failed(
                        &received,
                        &consumer.info,
                        error,
                        transport_message_id.as_deref(),
                    )
                }
            }
        }
        if all_duplicates {
            Settlement::Duplicate
        } else {
            Settlement::Ack
        }
    }

    async fn run(
        &self,
        consumer: &Registration,
        received: &Arc<ReceivedMessage>,
    ) -> Result<ConsumeOutcome, ConsumeError> {
        let request = ConsumeRequest::new(
            received.clone(),
            consumer.info.clone(),
            self.sink.clone(),
            self.factory.clone(),
            self.cancellation.clone(),
        );
        catch_panic(consumer.service.clone().oneshot(request)).await
    }

    fn consumer_failed(
        &self,
        received: &ReceivedMessage,
        consumer: &ConsumerInfo,
        error: ConsumeError,
        transport_message_id: Option<&str>,
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
            // (`src/MassTransit/Middleware/ConsumeContextOutputMessageTypeFilter.cs`), before
            // any consumer ran: no consumer marked the receive as faulted, so the error pipe's
            // `GenerateFaultFilter` (`src/MassTransit/Middleware/GenerateFaultFilter.cs`)
            // publishes a `ReceiveFault` — never a `Fault<T>`, whose `message` would not be a
            // `T` — and `ErrorTransportFilter` moves the message to `<queue>_error` without the
            // consumer-type headers. Endpoint retry and redelivery wrap that filter, so they
            // applied above.
            tracing::error!(
                target: "ferrybus::receive",
                message_id = ?received.envelope.message_id,
                message_type = %consumer.message_type().urn(),
                retries = error.retry_count(),
                error = %error,
                "the payload does not bind to the consumer's message type; moving the message to the error queue"
            );
            return self.receive_fault(transport_message_id, &received.content_type, error);
        }
        tracing::error!(
            target: "ferrybus::receive",
            message_id = ?received.envelope.message_id,
            consumer = consumer.name(),
            retries = error.retry_count(),
            error = %error,
            "consumer faulted; moving the message to the error queue"
        );
        let mut headers = fault_headers(&error, &self.input_address, Some(consumer));
        let redeliveries = received.redelivery_count();
        if redeliveries > 0 {
            headers.insert("MT-Fault-RedeliveryCount", i64::from(redeliveries));
        }
        let fault = (self.publish_faults || received.envelope.fault_address.is_some())
            .then(|| self.consume_fault(received, consumer, &error))
            .flatten()
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
        tracing::info!(
            target: "ferrybus::receive",
            message_id = ?envelope.message_id,
            redelivery = count + 1,
            ?delay,
            "scheduling delayed redelivery"
        );
        Some(Redelivery {
            delay,
            body: envelope.to_vec().into(),
            headers,
            count: count + 1,
        })
    }

    /// The `Fault<T>` of a consumer failure: sent to the fault address, else the response
    /// address, else published. `None` (logged) when the message does not bind to `T` again, so
    /// that no `Fault<T>` carries a message that is not a `T`.
    fn consume_fault(
        &self,
        received: &ReceivedMessage,
        consumer: &ConsumerInfo,
        error: &ConsumeError,
    ) -> Option<Result<OutgoingMessage, PublishError>> {
        let envelope = &received.envelope;
        let Some(message) = consumer.fault_payload(&envelope.message) else {
            tracing::warn!(
                target: "ferrybus::receive",
                message_id = ?envelope.message_id,
                consumer = consumer.name(),
                "the message does not bind to the consumer's type; no Fault<T> is published"
            );
            return None;
        };
        let payload = fault_payload(
            error,
            consumer,
            envelope.message_id,
            &envelope.message_type,
            &message,
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
        let origin = MessageOrigin::received(received);
        let target = envelope
            .fault_address
            .as_ref()
            .or(envelope.response_address.as_ref());
        let (destination, publish) = match target {
            Some(address) => match self.factory.host().resolve(address) {
                Ok(destination) => (destination, false),
                Err(error) => return Some(Err(error.into())),
            },
            None => (
                self.factory.host().entity_address(fault_type.entity_name()),
                true,
            ),
        };
        Some(
            self.factory
                .build(&fault_type, payload, destination, &origin, options, publish),
        )
    }

    /// A message that could not be received as a message of a consumer's type (a body that is
    /// not an envelope, a payload that does not bind): moved to `<queue>_error` with the
    /// `MT-Fault-*` headers (no consumer type), and a `ReceiveFault` published when the endpoint
    /// publishes faults, as MassTransit's `GenerateFaultFilter` does on RabbitMQ, where the
    /// receive context carries no consume context: `faultedMessageId` is the transport's message
    /// id, no message types, the body's content type.
    fn receive_fault(
        &self,
        transport_message_id: Option<&str>,
        content_type: &str,
        error: ConsumeError,
    ) -> Settlement {
        let exception = ExceptionInfo::from_error(&error, "ferrybus");
        let fault = self
            .publish_faults
            .then(|| {
                let fault = ReceiveFault {
                    fault_id: Some(Uuid::now_v7()),
                    timestamp: Some(chrono::Utc::now()),
                    faulted_message_id: transport_message_id.and_then(parse_dotnet_guid),
                    exceptions: vec![exception.clone()],
                    host: Some(HostInfo::current().clone()),
                    fault_message_types: Vec::new(),
                    content_type: Some(media_type(content_type).to_owned()),
                };
                let origin = MessageOrigin {
                    source_address: Some(self.input_address.clone()),
                    ..MessageOrigin::default()
                };
                self.factory.publish(&fault, &origin, SendOptions::new())
            })
            .and_then(log_unbuilt);
        Settlement::Fault(Box::new(Faulted {
            headers: fault_headers(&error, &self.input_address, None),
            fault,
            exception,
            receive_fault: true,
        }))
    }
}

/// The media type of a content type: `application/json; charset=utf-8` → `application/json`.
pub(crate) fn media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or_default().trim()
}

fn matches(received: &ReceivedMessage, consumer: &Registration) -> bool {
    let no_types = received.envelope.message_type.is_empty();
    (no_types && received.content_type == RAW_JSON_CONTENT_TYPE)
        || received
            .envelope
            .has_message_type(consumer.info.message_type().urn())
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
