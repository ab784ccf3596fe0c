//! [`ReceiveInstrumentLayer`]: the `<endpoint> receive` span and the receive instruments, as an
//! endpoint layer every endpoint of an instrumented bus gets outermost.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use ferrybus_core::endpoint::{BoxEndpointLayer, BoxEndpointService};
use ferrybus_core::{Delivery, Settlement};
use futures::future::BoxFuture;
use opentelemetry::context::{FutureExt as _, WithContext};
use opentelemetry::trace::{Link, Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{global, Context, KeyValue};
use tower::{Layer, Service};

use crate::context::{propagation, remote_parent, Propagation};
use crate::metrics::{
    self, endpoint_label, exception_type_label, service_label, shared_string, ENDPOINT_LABEL,
    EXCEPTION_TYPE_LABEL, SCOPE, SETTLEMENT_ATTRIBUTE,
};

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
    /// A delivery dropped before it settled: the transport gave up on it at shutdown (the span
    /// ends as abandoned), or a panic unwinds through it (the endpoint's guard faults the
    /// delivery, so it ends as a fault and counts as one). Either way it no longer counts as in
    /// progress.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let span = self.cx.span();
        let instruments = metrics::instruments();
        if std::thread::panicking() {
            span.set_attribute(KeyValue::new(SETTLEMENT_ATTRIBUTE, "fault"));
            span.set_status(Status::error("handling the delivery panicked"));
            let mut labels = self.labels.to_vec();
            labels.push(KeyValue::new(EXCEPTION_TYPE_LABEL, "Panic"));
            instruments.receive_fault_total.add(1, &labels);
        } else {
            span.set_attribute(KeyValue::new(SETTLEMENT_ATTRIBUTE, "abandon"));
        }
        instruments.receive_in_progress.add(-1, &self.labels);
        span.end();
    }
}

/// The endpoint layer an instrumented bus puts outermost on every endpoint
/// ([`instrument`](crate::instrument)): the `<endpoint> receive` span (the child of the span in
/// the delivery's `MT-Activity-Id`, a link for `MT-Activity-Propagation: Link`, unrelated for
/// `New`) with the delivery's settlement as `ferrybus.settlement`, and MassTransit's receive
/// instruments.
///
/// ```
/// use ferrybus_core::EndpointConfig;
/// use ferrybus_otel::ReceiveInstrumentLayer;
/// let endpoint = EndpointConfig::new("billing-invoice")
///     .layer(ReceiveInstrumentLayer::new("rabbitmq://localhost/billing-invoice"));
/// # let _ = endpoint;
/// ```
#[derive(Clone, Debug)]
pub struct ReceiveInstrumentLayer {
    labels: Arc<EndpointLabels>,
}

impl ReceiveInstrumentLayer {
    /// The layer of the endpoint at `input_address` (its labels are computed once, here).
    pub fn new(input_address: &str) -> Self {
        Self {
            labels: Arc::new(EndpointLabels::new(input_address)),
        }
    }

    /// As a [`BoxEndpointLayer`].
    pub fn boxed(self) -> BoxEndpointLayer {
        BoxEndpointLayer::new(self)
    }
}

impl Layer<BoxEndpointService> for ReceiveInstrumentLayer {
    type Service = ReceiveInstrument;

    fn layer(&self, inner: BoxEndpointService) -> ReceiveInstrument {
        ReceiveInstrument {
            inner,
            labels: self.labels.clone(),
        }
    }
}

/// The service [`ReceiveInstrumentLayer`] makes.
#[derive(Clone)]
pub struct ReceiveInstrument {
    inner: BoxEndpointService,
    labels: Arc<EndpointLabels>,
}

impl std::fmt::Debug for ReceiveInstrument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiveInstrument")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl Service<Delivery> for ReceiveInstrument {
    type Response = Settlement;
    type Error = Infallible;
    type Future = ReceiveFuture;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, delivery: Delivery) -> ReceiveFuture {
        let receive = Receive::start(&self.labels, &delivery);
        let handled = self.inner.call(delivery).with_context(receive.cx.clone());
        ReceiveFuture {
            handled,
            receive: Some(receive),
        }
    }
}

/// The future of one delivery inside its receive span (no allocation of its own): the span ends
/// and the instruments record when the delivery settles, or when the future is dropped unsettled.
pub struct ReceiveFuture {
    handled: WithContext<BoxFuture<'static, Result<Settlement, Infallible>>>,
    receive: Option<Receive>,
}

impl Future for ReceiveFuture {
    type Output = Result<Settlement, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let result = std::task::ready!(Pin::new(&mut self.handled).poll(cx));
        if let (Ok(settlement), Some(mut receive)) = (&result, self.receive.take()) {
            receive.finish(settlement);
        }
        Poll::Ready(result)
    }
}

impl std::fmt::Debug for ReceiveFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiveFuture").finish_non_exhaustive()
    }
}
