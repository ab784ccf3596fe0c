//! Every telemetry call of the storage, in one module: OpenTelemetry instruments (through
//! `ferrybus_otel`, and the `opentelemetry` API for the one of its own) and the
//! `tracing` spans of the stages. No other module of the crate records any.
//!
//! | what | instrument (unit) or span | labels / fields | recorded |
//! |---|---|---|---|
//! | the inbox's decision | span attribute `ferrybus.inbox.decision` | `run`, `recover`, `duplicate` | once per delivery and consumer |
//! | a duplicate | counter `ferrybus.inbox.duplicates` (ea) | service, destination, consumer_type | per copy of a message its consumer had consumed and delivered |
//! | a recovered copy | counter `ferrybus.inbox.recovered` (ea) | as above | per copy that completed an earlier attempt's outbox |
//! | an outbox write | counter `messaging.masstransit.outbox.send` (ea) | service, destination, message_type | per message written to an outbox table |
//! | an outbox row sent | counter `messaging.masstransit.outbox.delivery` (ea); failed: also `….errors` (+ exception_type); by the sweeper: also `ferrybus.sweeper.recovered` | service, destination | per row |
//! | the inbox cleanup | counter [`ferrybus.inbox.cleanup.deleted`](INBOX_CLEANUP_DELETED) (ea) | service | per inbox row deleted |
//! | an entry set aside | counter [`ferrybus.outbox.set_aside`](OUTBOX_SET_ASIDE) (ea) | service, `ferrybus.outbox` (`consumer`, `bus`) | each time the sweeper or the relay gives up on an entry for a while |
//! | a stage | span `stage` on target [`ferrybus::stage`](STAGE_TARGET), DEBUG | `part` (`inbox`, `outbox`), `stage`, [`elapsed_ms`](STAGE_ELAPSED_FIELD) | per step of a delivery or a delivery pass |
//!
//! The stages are timed as span fields, not histograms: a stage span is off unless DEBUG is on
//! for `ferrybus::stage`, and then a delivery pays for its clock reads only; with it off it
//! pays nothing. Exported through `tracing-opentelemetry`, each stage is a span with its
//! duration.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Instant;

use ferrybus_core::consume::ConsumeRequest;
use ferrybus_core::consume::ConsumerInfo;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::PublishError;
use ferrybus_otel as instrument;
use opentelemetry::metrics::Counter;
use tracing::Instrument;

/// Counter (`ea`): inbox rows the cleanup deleted (delivered rows past the duplicate-detection
/// window).
pub const INBOX_CLEANUP_DELETED: &str = "ferrybus.inbox.cleanup.deleted";

/// Counter (`ea`): consumer-outbox entries (the sweeper) and bus outboxes (the relay) set aside
/// after `send_attempts` failed tries, label `ferrybus.outbox` (`consumer`, `bus`); again each
/// time a set-aside entry's later try fails.
pub const OUTBOX_SET_ASIDE: &str = "ferrybus.outbox.set_aside";

/// The `tracing` target of the stage spans.
pub const STAGE_TARGET: &str = "ferrybus::stage";

/// The field of a stage span that holds the stage's duration, in milliseconds.
pub const STAGE_ELAPSED_FIELD: &str = "elapsed_ms";

/// What the inbox does with one delivery for one consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InboxDecision {
    /// Runs the consumer.
    Run,
    /// Sends what an earlier attempt left in the consumer outbox; the consumer does not run.
    Recover,
    /// Acknowledges a copy of a message the consumer had consumed and delivered.
    Duplicate,
}

impl InboxDecision {
    fn as_str(self) -> &'static str {
        match self {
            InboxDecision::Run => "run",
            InboxDecision::Recover => "recover",
            InboxDecision::Duplicate => "duplicate",
        }
    }
}

/// Records the inbox's `decision` for `consumer`, once: the decision on the current span, and
/// a duplicate or a recovered copy in its counter.
pub(crate) fn inbox_decision(consumer: &ConsumerInfo, decision: InboxDecision) {
    instrument::record_inbox_decision(decision.as_str());
    let duplicate = match decision {
        InboxDecision::Run => return,
        InboxDecision::Recover => false,
        InboxDecision::Duplicate => true,
    };
    instrument::record_inbox(consumer, duplicate);
}

/// Records a duplicate of `request` ([`inbox_decision`]).
pub(crate) fn count_duplicate(request: &ConsumeRequest) {
    inbox_decision(request.consumer(), InboxDecision::Duplicate);
}

/// Counts `message` written to an outbox table (MassTransit's `outbox.send`).
pub(crate) fn count_outbox_write(message: &OutgoingMessage) {
    let message_type = message.message_type.first().map_or("", String::as_str);
    instrument::record_outbox_send(&message.destination_address, message_type);
}

/// Where the messages sent from outbox tables come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendSource {
    /// The bus-outbox delivery service.
    Bus,
    /// A consumer's outbox, sent after its inbox transaction committed.
    Consumer,
    /// The sweeper, sending what a crashed or stopped delivery left behind (counted in
    /// `ferrybus.sweeper.recovered` too).
    Sweeper,
}

/// Counts one outbox row sent to `destination`, or not (`result`), by `source` (MassTransit's
/// `outbox.delivery` and `outbox.delivery.errors`; `ferrybus.sweeper.recovered`).
pub(crate) fn count_outbox_delivery(
    destination: &str,
    result: &Result<(), PublishError>,
    source: SendSource,
) {
    let error = result.as_ref().err().map(|e| format!("{:?}", e.kind()));
    let swept = source == SendSource::Sweeper;
    instrument::record_outbox_delivery(destination, error.as_deref(), swept);
}

/// Counts `rows` inbox rows the cleanup deleted ([`INBOX_CLEANUP_DELETED`]).
pub(crate) fn count_cleaned_up(rows: u64) {
    static DELETED: OnceLock<Counter<u64>> = OnceLock::new();
    if rows == 0 {
        return;
    }
    let counter = DELETED.get_or_init(|| {
        opentelemetry::global::meter(instrument::SCOPE)
            .u64_counter(INBOX_CLEANUP_DELETED)
            .with_unit("ea")
            .with_description("Number of delivered inbox rows the cleanup deleted")
            .build()
    });
    counter.add(rows, &[instrument::service_label()]);
}

/// Counts one entry set aside ([`OUTBOX_SET_ASIDE`]) of the outbox `kind` (`consumer`, `bus`).
pub(crate) fn count_set_aside(kind: &'static str) {
    static SET_ASIDE: OnceLock<Counter<u64>> = OnceLock::new();
    let counter = SET_ASIDE.get_or_init(|| {
        opentelemetry::global::meter(instrument::SCOPE)
            .u64_counter(OUTBOX_SET_ASIDE)
            .with_unit("ea")
            .with_description("Number of outbox entries set aside after repeated send failures")
            .build()
    });
    counter.add(
        1,
        &[
            instrument::service_label(),
            opentelemetry::KeyValue::new("ferrybus.outbox", kind),
        ],
    );
}

/// A timed step of the inbox or of a bus-outbox delivery pass: the `part` and `stage` fields
/// of its span.
#[derive(Debug)]
pub(crate) struct Stage {
    part: &'static str,
    name: &'static str,
}

/// The stages of a delivery through the inbox.
pub(crate) mod inbox_stage {
    use super::Stage;

    const fn stage(name: &'static str) -> Stage {
        Stage {
            part: "inbox",
            name,
        }
    }

    /// `BEGIN` and the inbox row(s).
    pub(crate) static CLAIM: Stage = stage("claim");
    /// The consumer.
    pub(crate) static CONSUME: Stage = stage("consume");
    /// The outbox rows and `COMMIT`.
    pub(crate) static COMMIT: Stage = stage("commit");
    /// Sending before the acknowledgement.
    pub(crate) static DELIVER: Stage = stage("deliver");
    /// A pass of the after-commit sender.
    pub(crate) static HANDOFF: Stage = stage("handoff");
}

/// The stages of a bus-outbox delivery pass.
pub(crate) mod outbox_stage {
    use super::Stage;

    const fn stage(name: &'static str) -> Stage {
        Stage {
            part: "outbox",
            name,
        }
    }

    /// `BEGIN`, the claim and reading the messages.
    pub(crate) static CLAIM: Stage = stage("claim");
    /// Sending.
    pub(crate) static SEND: Stage = stage("send");
    /// Deleting what was sent, recording progress.
    pub(crate) static FINISH: Stage = stage("finish");
    /// `COMMIT`.
    pub(crate) static COMMIT: Stage = stage("commit");
}

/// Runs `fut` inside the span of `stage` and, when the span is on, records the stage's
/// duration in it ([`STAGE_ELAPSED_FIELD`]).
///
/// A plain future around `fut` rather than an `async fn`, which would hold `fut` twice (once
/// before its first poll, once while it runs): stage futures are kilobytes.
pub(crate) fn timed<F: Future>(stage: &'static Stage, fut: F) -> Timed<F> {
    let span = tracing::debug_span!(
        target: STAGE_TARGET,
        "stage",
        part = stage.part,
        stage = stage.name,
        elapsed_ms = tracing::field::Empty,
    );
    Timed {
        inner: fut.instrument(span),
        start: None,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`timed`].
    pub(crate) struct Timed<F> {
        #[pin]
        inner: tracing::instrument::Instrumented<F>,
        start: Option<Instant>,
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        if this.start.is_none() && !this.inner.span().is_disabled() {
            *this.start = Some(Instant::now());
        }
        let output = std::task::ready!(this.inner.as_mut().poll(cx));
        if let Some(start) = this.start.take() {
            let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
            this.inner.span().record(STAGE_ELAPSED_FIELD, elapsed_ms);
        }
        Poll::Ready(output)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    use ferrybus_core::MessageType;

    use ferrybus_core::consume::ConsumerInfo;

    use ferrybus_core::error::PublishErrorKind;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use super::*;

    fn run_ready<F: Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(output) => output,
            Poll::Pending => panic!("the future was expected to be ready"),
        }
    }

    /// Keeps the fields of every span: (span id, field, value as text).
    #[derive(Default)]
    struct Spans {
        next: AtomicU64,
        fields: Arc<Mutex<Vec<(u64, String, String)>>>,
    }

    struct Fields<'a>(u64, &'a Mutex<Vec<(u64, String, String)>>);

    impl Visit for Fields<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let entry = (self.0, field.name().to_owned(), format!("{value:?}"));
            self.1.lock().unwrap().push(entry);
        }
    }

    impl Subscriber for Spans {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
            span.record(&mut Fields(id, &self.fields));
            Id::from_u64(id)
        }
        fn record(&self, span: &Id, values: &Record<'_>) {
            values.record(&mut Fields(span.into_u64(), &self.fields));
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_timed_stage_records_its_duration_in_its_span() {
        let spans = Spans::default();
        let fields = spans.fields.clone();
        let outputs = tracing::subscriber::with_default(spans, || {
            (
                run_ready(timed(&inbox_stage::HANDOFF, async { 7 })),
                run_ready(timed(&outbox_stage::FINISH, async { "done" })),
            )
        });
        assert_eq!(outputs, (7, "done"));
        let fields = fields.lock().unwrap();
        let of = |id: u64| -> Vec<(&str, &str)> {
            fields
                .iter()
                .filter(|(span, name, _)| *span == id && name != STAGE_ELAPSED_FIELD)
                .map(|(_, name, value)| (name.as_str(), value.as_str()))
                .collect()
        };
        assert_eq!(of(1), [("part", "\"inbox\""), ("stage", "\"handoff\"")]);
        assert_eq!(of(2), [("part", "\"outbox\""), ("stage", "\"finish\"")]);
        for id in [1, 2] {
            let elapsed: Vec<f64> = fields
                .iter()
                .filter(|(span, name, _)| *span == id && name == STAGE_ELAPSED_FIELD)
                .map(|(_, _, value)| value.parse().unwrap())
                .collect();
            assert_eq!(elapsed.len(), 1, "span {id}: {elapsed:?}");
            assert!((0.0..60_000.0).contains(&elapsed[0]), "{elapsed:?}");
        }
    }

    /// The sums of the counters `exporter` received, by name.
    fn sums(exporter: &InMemoryMetricExporter) -> Vec<(String, u64)> {
        let mut sums = Vec::new();
        for resource in exporter.get_finished_metrics().unwrap() {
            for scope in resource.scope_metrics() {
                for metric in scope.metrics() {
                    if let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() {
                        let total = sum.data_points().map(|p| p.value()).sum();
                        sums.push((metric.name().to_owned(), total));
                    }
                }
            }
        }
        sums.sort();
        sums
    }

    /// The only test of this binary that records metrics: the instruments are created from the
    /// global meter provider at their first recording, which must come after this one is set.
    #[test]
    fn each_decision_and_send_counts_once() {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        opentelemetry::global::set_meter_provider(provider.clone());
        let consumer = ConsumerInfo::new(
            "InvoiceConsumer",
            MessageType::parse("Billing:OrderPlaced").unwrap(),
            "billing-invoice",
        );
        inbox_decision(&consumer, InboxDecision::Run);
        inbox_decision(&consumer, InboxDecision::Recover);
        inbox_decision(&consumer, InboxDecision::Duplicate);
        let destination = "rabbitmq://localhost/billing";
        count_outbox_delivery(destination, &Ok(()), SendSource::Consumer);
        count_outbox_delivery(destination, &Ok(()), SendSource::Sweeper);
        let failed = Err(PublishError::new(PublishErrorKind::Serialize, "not Base64"));
        count_outbox_delivery(destination, &failed, SendSource::Bus);
        count_cleaned_up(0);
        count_cleaned_up(3);
        provider.force_flush().unwrap();
        assert_eq!(
            sums(&exporter),
            [
                ("ferrybus.inbox.cleanup.deleted".to_owned(), 3),
                ("ferrybus.inbox.duplicates".to_owned(), 1),
                ("ferrybus.inbox.recovered".to_owned(), 1),
                ("ferrybus.sweeper.recovered".to_owned(), 1),
                ("messaging.masstransit.outbox.delivery".to_owned(), 3),
                ("messaging.masstransit.outbox.delivery.errors".to_owned(), 1),
            ]
        );
    }
}
