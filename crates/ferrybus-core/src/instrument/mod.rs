//! Traces and metrics at the endpoint, the consumer and the send, through the OpenTelemetry API
//! (`opentelemetry`): what a service exports is up to the SDK it installs (`ferrybus-telemetry`
//! does it from `OTEL_*`); with none installed, the spans are non-recording but the trace context
//! still passes from `MT-Activity-Id` on a delivery to `MT-Activity-Id` on what its consumer
//! sends.
//!
//! | span | kind | where | MassTransit's |
//! |---|---|---|---|
//! | `<endpoint> receive` | consumer | the whole delivery, its settlement (`ferrybus.settlement`) | `ReceivePipeDispatcher` |
//! | `<endpoint> process` | consumer | one consumer attempt, inside retry and the inbox | `StartConsumerActivity` |
//! | `<destination> send` | producer | one message put on the broker (outbox rows too) | `StartSendActivity` |
//!
//! The receive span is the child of the span in the delivery's `MT-Activity-Id` (a link for
//! `MT-Activity-Propagation: Link`, unrelated for `New`); the process span is the receive span's
//! child; a message built inside a consumer carries the process span's context in its
//! `MT-Activity-Id` (so an outbox row stores it in its headers, as MassTransit's outbox does), and
//! the send span, a child of the current span or else of the message's `MT-Activity-Id`, writes
//! its own context into the transport header, so a .NET consumer continues the trace.
//!
//! ```
//! use ferrybus_core::instrument::{parse_traceparent, ACTIVITY_ID_HEADER};
//! assert_eq!(ACTIVITY_ID_HEADER, "MT-Activity-Id");
//! assert!(parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").is_some());
//! ```

mod consume;
mod context;
mod metrics;

use std::future::Future;
use std::time::Instant;

use futures::FutureExt;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{Link, Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{global, Context, KeyValue, StringValue};

pub use consume::{ConsumeInstrument, ConsumeInstrumentLayer};
pub(crate) use context::baggage_header;
pub use context::{
    baggage_pairs, format_traceparent, parse_traceparent, propagation, remote_parent, Propagation,
    ACTIVITY_CORRELATION_CONTEXT_HEADER, ACTIVITY_ID_HEADER, ACTIVITY_PROPAGATION_HEADER,
    TRACEPARENT_HEADER,
};
pub use metrics::*;

use crate::endpoint::{Delivery, Settlement};
use crate::outgoing::OutgoingMessage;

/// Span attribute: what the transport did with the delivery (`ack`, `duplicate`, `redeliver`,
/// `fault`, `skip`, `abandon`).
pub const SETTLEMENT_ATTRIBUTE: &str = "ferrybus.settlement";
/// Span attribute: the inbox's decision for one consumer (`run`, `recover`, `duplicate`).
pub const INBOX_DECISION_ATTRIBUTE: &str = "ferrybus.inbox.decision";

/// The messaging system of an address's scheme (`rabbitmq://…` → `rabbitmq`).
fn system_of(address: &str) -> String {
    address
        .split_once("://")
        .map_or("ferrybus", |(scheme, _)| scheme)
        .trim_end_matches('s')
        .to_owned()
}

/// What every delivery of one endpoint labels its span and instruments with, computed once when
/// the endpoint is built.
impl std::fmt::Debug for EndpointLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointLabels")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

pub(crate) struct EndpointLabels {
    /// The tracer, taken from the global provider when the endpoint is built (after
    /// `Telemetry::init`, as the instruments are), not once per delivery.
    tracer: global::BoxedTracer,
    endpoint: opentelemetry::StringValue,
    system: opentelemetry::StringValue,
    input_address: opentelemetry::StringValue,
}

impl EndpointLabels {
    /// The labels of the endpoint at `input_address`.
    pub(crate) fn new(input_address: &str) -> Self {
        Self {
            tracer: global::tracer(SCOPE),
            endpoint: shared_string(endpoint_label(input_address)),
            system: shared_string(system_of(input_address)),
            input_address: shared_string(input_address.to_owned()),
        }
    }
}

fn receive_attributes(labels: &EndpointLabels, delivery: &Delivery) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("messaging.system", labels.system.clone()),
        KeyValue::new("messaging.operation", "receive"),
        KeyValue::new("messaging.destination.name", labels.endpoint.clone()),
        KeyValue::new(
            "messaging.masstransit.input_address",
            labels.input_address.clone(),
        ),
        KeyValue::new("messaging.message.body.size", delivery.body.len() as i64),
    ];
    if let Some(id) = &delivery.message_id {
        attributes.push(KeyValue::new("messaging.message.id", id.clone()));
    }
    if !delivery.routing_key.is_empty() {
        attributes.push(KeyValue::new(
            "messaging.rabbitmq.destination.routing_key",
            delivery.routing_key.clone(),
        ));
    }
    attributes
}

/// The receive span and instruments of one delivery, started before the endpoint runs.
pub(crate) struct Receive {
    cx: Context,
    started: Instant,
    labels: [KeyValue; 2],
    finished: bool,
}

impl Receive {
    /// Starts the `<endpoint> receive` span (child of the delivery's `MT-Activity-Id`) and
    /// counts the delivery.
    pub(crate) fn start(labels: &EndpointLabels, delivery: &Delivery) -> Self {
        let tracer = &labels.tracer;
        let mut builder = tracer
            .span_builder(format!("{} receive", labels.endpoint))
            .with_kind(SpanKind::Consumer);
        let current = Context::current();
        let parent = match (
            remote_parent(&delivery.headers),
            propagation(&delivery.headers),
        ) {
            (Some(remote), Propagation::Child) => current.with_remote_span_context(remote),
            (Some(remote), Propagation::Link) => {
                builder = builder.with_links(vec![Link::with_context(remote)]);
                Context::new()
            }
            (Some(_), Propagation::New) => Context::new(),
            (None, _) => current,
        };
        let mut span = builder.start_with_context(tracer, &parent);
        if span.is_recording() {
            // Attributes only for a span that records them: without an SDK (or unsampled)
            // building them is all cost.
            span.set_attributes(receive_attributes(labels, delivery));
        }
        let cx = parent.with_span(span);
        let labels = [
            service_label(),
            KeyValue::new(ENDPOINT_LABEL, labels.endpoint.clone()),
        ];
        let instruments = metrics::instruments();
        instruments.receive_total.add(1, &labels);
        instruments.receive_in_progress.add(1, &labels);
        Self {
            cx,
            started: Instant::now(),
            labels,
            finished: false,
        }
    }

    /// Runs the endpoint inside the span and records how it settled. (A combinator, not an
    /// `async fn`, which would hold the endpoint's future twice.)
    pub(crate) fn run<F, E>(mut self, fut: F) -> impl Future<Output = Result<Settlement, E>>
    where
        F: Future<Output = Result<Settlement, E>>,
    {
        let cx = self.cx.clone();
        fut.with_context(cx).map(move |result| {
            if let Ok(settlement) = &result {
                self.finish(settlement);
            }
            result
        })
    }

    fn finish(&mut self, settlement: &Settlement) {
        self.finished = true;
        let instruments = metrics::instruments();
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(
            SETTLEMENT_ATTRIBUTE,
            settlement.kind().as_str(),
        ));
        match settlement {
            Settlement::Fault(faulted) => {
                let exception = exception_type_label(&faulted.exception.exception_type);
                span.add_event(
                    "exception",
                    vec![
                        KeyValue::new("exception.type", faulted.exception.exception_type.clone()),
                        KeyValue::new(
                            "exception.message",
                            faulted.exception.message.clone().unwrap_or_default(),
                        ),
                    ],
                );
                span.set_status(Status::error(
                    faulted.exception.message.clone().unwrap_or_default(),
                ));
                let mut labels = self.labels.to_vec();
                labels.push(KeyValue::new(EXCEPTION_TYPE_LABEL, exception));
                instruments.receive_fault_total.add(1, &labels);
            }
            Settlement::Redeliver(_) => instruments.redelivery_total.add(1, &self.labels),
            _ => {}
        }
        instruments.receive_in_progress.add(-1, &self.labels);
        instruments
            .receive_duration
            .record(self.started.elapsed().as_secs_f64() * 1000.0, &self.labels);
        span.end();
    }
}

impl Drop for Receive {
    /// A delivery dropped before it settled (the transport gave up on it at shutdown): the
    /// span ends as abandoned and the delivery no longer counts as in progress.
    fn drop(&mut self) {
        if !self.finished {
            let span = self.cx.span();
            span.set_attribute(KeyValue::new(SETTLEMENT_ATTRIBUTE, "abandon"));
            metrics::instruments()
                .receive_in_progress
                .add(-1, &self.labels);
            span.end();
        }
    }
}

/// Records the inbox's decision for one consumer on the current span
/// ([`INBOX_DECISION_ATTRIBUTE`]); the storage's inbox calls it.
///
/// ```
/// ferrybus_core::instrument::record_inbox_decision("duplicate");
/// ```
pub fn record_inbox_decision(decision: &'static str) {
    Context::current()
        .span()
        .set_attribute(KeyValue::new(INBOX_DECISION_ATTRIBUTE, decision));
}

/// The `MT-Activity-Id` a message built now carries: the current span's context, when there is
/// one (inside a consumer, the process span).
pub(crate) fn current_activity_id() -> Option<String> {
    let cx = Context::current();
    let span = cx.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| format_traceparent(span_context))
}

fn send_attributes(message: &OutgoingMessage, destination: &str, system: &str) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("messaging.system", system.to_owned()),
        KeyValue::new("messaging.operation", "send"),
        KeyValue::new("messaging.destination.name", destination.to_owned()),
        KeyValue::new(
            "messaging.masstransit.message_id",
            message.message_id.to_string(),
        ),
        KeyValue::new("messaging.message.body.size", message.body.len() as i64),
        KeyValue::new(
            "messaging.masstransit.message_types",
            message.message_type.join(","),
        ),
    ];
    if let Some(id) = message.conversation_id {
        attributes.push(KeyValue::new(
            "messaging.message.conversation_id",
            id.to_string(),
        ));
    }
    if let Some(id) = message.correlation_id {
        attributes.push(KeyValue::new(
            "messaging.masstransit.correlation_id",
            id.to_string(),
        ));
    }
    attributes
}

/// The `<destination> send` span and instruments of one message a transport puts on the broker.
///
/// ```
/// use ferrybus_core::{instrument::SendInstrument, HostAddress, MessageFactory, MessageOrigin, SendOptions};
/// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Shop")]
/// # struct OrderPlaced {}
/// let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
/// let message = factory.publish(&OrderPlaced {}, &MessageOrigin::default(), SendOptions::new()).unwrap();
/// let send = SendInstrument::start(&message, "Shop:OrderPlaced", "rabbitmq");
/// let _header = send.activity_id(); // written into the transport's `MT-Activity-Id`
/// send.finish(None);
/// ```
pub struct SendInstrument {
    cx: Context,
    labels: [KeyValue; 3],
}

impl SendInstrument {
    /// Starts the span, a child of the current span or else of the message's `MT-Activity-Id`
    /// (an outbox row delivered later), and counts the send.
    pub fn start(message: &OutgoingMessage, destination: &str, system: &str) -> Self {
        let tracer = global::tracer(SCOPE);
        let current = Context::current();
        let parent = if current.span().span_context().is_valid() {
            current
        } else {
            match remote_parent(&message.headers) {
                Some(remote) => current.with_remote_span_context(remote),
                None => current,
            }
        };
        let label = metrics::shared_endpoint_label(destination);
        let message_type = message
            .message_type
            .first()
            .map(|urn| metrics::shared_message_type_label(urn))
            .unwrap_or_else(|| StringValue::from(""));
        let mut span = tracer
            .span_builder(format!("{label} send"))
            .with_kind(SpanKind::Producer)
            .start_with_context(&tracer, &parent);
        if span.is_recording() {
            span.set_attributes(send_attributes(message, destination, system));
        }
        let cx = parent.with_span(span);
        let labels = [
            service_label(),
            KeyValue::new(ENDPOINT_LABEL, label),
            KeyValue::new(MESSAGE_TYPE_LABEL, message_type),
        ];
        metrics::instruments().send_total.add(1, &labels);
        Self { cx, labels }
    }

    /// The send span's context as `MT-Activity-Id` (`None` when there is no trace at all).
    pub fn activity_id(&self) -> Option<String> {
        let span = self.cx.span();
        let span_context = span.span_context();
        span_context
            .is_valid()
            .then(|| format_traceparent(span_context))
    }

    /// The context to run the send in.
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// Ends the span; `error` is the failure's type name and message, counted in `send.errors`.
    pub fn finish(self, error: Option<(&str, &str)>) {
        let span = self.cx.span();
        if let Some((type_name, message)) = error {
            span.set_status(Status::error(message.to_owned()));
            let mut labels = self.labels.to_vec();
            labels.push(KeyValue::new(
                EXCEPTION_TYPE_LABEL,
                exception_type_label(type_name),
            ));
            metrics::instruments().send_fault_total.add(1, &labels);
        }
        span.end();
    }
}

impl std::fmt::Debug for SendInstrument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendInstrument")
            .field("activity_id", &self.activity_id())
            .finish_non_exhaustive()
    }
}
