//! [`ConsumeInstrument`]: the `<endpoint> process` span and MassTransit's consume instruments
//! around one consumer attempt (`StartConsumerActivity` and `StartConsumeInstrument` in
//! MassTransit: inside retry and the inbox, once per attempt, so a retried attempt counts in
//! `consume` and in `consume.retries`, and a copy the inbox stopped counts in neither).

use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{global, Context, KeyValue};
use tower::{Layer, Service};

use crate::context::{baggage_pairs, ACTIVITY_CORRELATION_CONTEXT_HEADER};
use crate::metrics::{
    endpoint_label, exception_type_label, instruments, message_type_label, service_label,
    shared_consumer_type_label, shared_string, CONSUMER_TYPE_LABEL, ENDPOINT_LABEL,
    EXCEPTION_TYPE_LABEL, MESSAGE_TYPE_LABEL, SCOPE,
};
use ferrybus_core::integration::{BoxConsumeService, ConsumeOutcome, ConsumeRequest};
use ferrybus_core::ConsumeError;
use opentelemetry::baggage::BaggageExt as _;

/// The layer every endpoint puts right around each consumer (innermost, inside the consumer
/// layers).
///
/// ```
/// use ferrybus_otel::ConsumeInstrumentLayer;
/// let _layer = ConsumeInstrumentLayer;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ConsumeInstrumentLayer;

impl Layer<BoxConsumeService> for ConsumeInstrumentLayer {
    type Service = ConsumeInstrument;

    fn layer(&self, inner: BoxConsumeService) -> ConsumeInstrument {
        ConsumeInstrument {
            inner,
            labels: Arc::default(),
        }
    }
}

/// The service [`ConsumeInstrumentLayer`] makes.
#[derive(Clone)]
pub struct ConsumeInstrument {
    inner: BoxConsumeService,
    /// The consumer's labels, computed at its first attempt (a service serves one consumer).
    labels: Arc<OnceLock<ConsumerLabels>>,
}

/// What every attempt of one consumer labels its span and instruments with.
struct ConsumerLabels {
    /// Taken from the global provider at the consumer's first attempt, not once per attempt.
    tracer: global::BoxedTracer,
    metric: [KeyValue; 4],
    endpoint: opentelemetry::StringValue,
    /// The consumer's full name, the span's `consumer_type` (MassTransit's
    /// `StartConsumerActivity` sets `TypeCache<TConsumer>.ShortName` there, the namespace kept;
    /// the instruments carry [`consumer_type_label`](crate::consumer_type_label)).
    consumer: opentelemetry::StringValue,
}

impl ConsumerLabels {
    fn of(request: &ConsumeRequest) -> Self {
        let consumer = request.consumer();
        let endpoint = shared_string(endpoint_label(&request.received().input_address));
        let metric = [
            service_label(),
            KeyValue::new(ENDPOINT_LABEL, endpoint.clone()),
            KeyValue::new(
                MESSAGE_TYPE_LABEL,
                shared_string(message_type_label(consumer.message_type().urn())),
            ),
            KeyValue::new(
                CONSUMER_TYPE_LABEL,
                shared_consumer_type_label(consumer.name(), consumer.message_type()),
            ),
        ];
        Self {
            tracer: global::tracer(SCOPE),
            metric,
            endpoint,
            consumer: shared_string(consumer.name().to_owned()),
        }
    }
}

impl std::fmt::Debug for ConsumeInstrument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeInstrument").finish_non_exhaustive()
    }
}

impl Service<ConsumeRequest> for ConsumeInstrument {
    type Response = ConsumeOutcome;
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<ConsumeOutcome, ConsumeError>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), ConsumeError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ConsumeRequest) -> Self::Future {
        let started = Instant::now();
        let cached = self.labels.get_or_init(|| ConsumerLabels::of(&request));
        let labels = cached.metric.clone();
        let envelope = &request.received().envelope;
        let instruments = instruments();
        instruments.consume_total.add(1, &labels);
        instruments.consume_in_progress.add(1, &labels);
        if request.attempt() > 0 {
            instruments.consume_retry_total.add(1, &labels);
        }
        if let Some(sent) = envelope.sent_time {
            let waited = (chrono::Utc::now() - sent).num_microseconds().unwrap_or(0);
            instruments
                .delivery_duration
                .record(waited.max(0) as f64 / 1000.0, &labels);
        }

        let tracer = &cached.tracer;
        // The sender's baggage (`MT-Activity-Correlation-Context`), as MassTransit's
        // `AddConsumeContextTags` sets it, and carried on by what the consumer sends.
        let mut parent = Context::current();
        if let Some(value) = envelope.headers.get(ACTIVITY_CORRELATION_CONTEXT_HEADER) {
            let baggage: Vec<KeyValue> = baggage_pairs(value)
                .into_iter()
                .map(|(k, v)| KeyValue::new(k, v))
                .collect();
            if !baggage.is_empty() {
                parent = parent.with_baggage(baggage);
            }
        }
        let mut span = tracer
            .span_builder(format!("{} process", cached.endpoint))
            .with_kind(SpanKind::Consumer)
            .start_with_context(tracer, &parent);
        if span.is_recording() {
            // Attributes only for a span that records them: without an SDK (or unsampled)
            // building them is all cost.
            span.set_attributes(process_attributes(cached, &request));
        }
        let cx = parent.with_span(span);

        let mut attempt = Attempt {
            cx: cx.clone(),
            labels,
            started,
            finished: false,
        };
        let attempted = self.inner.call(request).with_context(cx);
        Box::pin(async move {
            let result = attempted.await;
            attempt.finish(result.as_ref().err());
            result
        })
    }
}

fn process_attributes(labels: &ConsumerLabels, request: &ConsumeRequest) -> Vec<KeyValue> {
    let envelope = &request.received().envelope;
    let mut attributes = vec![
        KeyValue::new("messaging.operation", "process"),
        KeyValue::new("messaging.destination.name", labels.endpoint.clone()),
        KeyValue::new(
            "messaging.masstransit.consumer_type",
            labels.consumer.clone(),
        ),
        KeyValue::new(
            "messaging.masstransit.message_types",
            envelope.message_type.join(","),
        ),
        KeyValue::new("ferrybus.retry_attempt", i64::from(request.attempt())),
    ];
    let ids = [
        ("messaging.masstransit.message_id", envelope.message_id),
        (
            "messaging.message.conversation_id",
            envelope.conversation_id,
        ),
        (
            "messaging.masstransit.correlation_id",
            envelope.correlation_id,
        ),
        ("messaging.masstransit.request_id", envelope.request_id),
        ("messaging.masstransit.initiator_id", envelope.initiator_id),
    ];
    for (name, id) in ids {
        if let Some(id) = id {
            attributes.push(KeyValue::new(name, id.to_string()));
        }
    }
    if let Some(address) = &envelope.source_address {
        attributes.push(KeyValue::new(
            "messaging.masstransit.source_address",
            address.clone(),
        ));
    }
    attributes
}

/// One consumer attempt's span and instruments, ended once: when the attempt returns, or when
/// its future is dropped unfinished (counted then as an error of type `Cancelled`).
struct Attempt {
    cx: Context,
    labels: [KeyValue; 4],
    started: Instant,
    finished: bool,
}

impl Attempt {
    fn finish(&mut self, error: Option<&ConsumeError>) {
        self.finished = true;
        let span = self.cx.span();
        let instruments = instruments();
        if let Some(error) = error {
            span.add_event(
                "exception",
                vec![
                    KeyValue::new("exception.type", error.exception_type().to_owned()),
                    KeyValue::new("exception.message", error.to_string()),
                ],
            );
            span.set_status(Status::error(error.to_string()));
            self.count_error(&exception_type_label(error.exception_type()));
        }
        instruments.consume_in_progress.add(-1, &self.labels);
        instruments
            .consume_duration
            .record(self.started.elapsed().as_secs_f64() * 1000.0, &self.labels);
        span.end();
    }

    fn count_error(&self, exception_type: &str) {
        let mut labels = self.labels.to_vec();
        labels.push(KeyValue::new(
            EXCEPTION_TYPE_LABEL,
            exception_type.to_owned(),
        ));
        instruments().consume_fault_total.add(1, &labels);
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            let span = self.cx.span();
            span.set_status(Status::error("the attempt was cancelled"));
            self.count_error("Cancelled");
            instruments().consume_in_progress.add(-1, &self.labels);
            span.end();
        }
    }
}
