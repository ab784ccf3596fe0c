//! Metric names and per-stage timing (tracing spans + `metrics` histograms).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tracing::Instrument;

/// Histogram of inbox stage durations, label `stage`.
pub const INBOX_STAGE_SECONDS: &str = "ferrybus_inbox_stage_seconds";
/// Counter of copies the inbox kept from the consumer because its row was already consumed
/// (plain duplicates and copies that completed an earlier attempt's outbox), label `consumer`.
pub const INBOX_DUPLICATES_TOTAL: &str = "ferrybus_inbox_duplicates_total";
/// Counter of deliveries that completed an earlier attempt's outbox (crash recovery).
pub const INBOX_RECOVERED_TOTAL: &str = "ferrybus_inbox_recovered_total";
/// Histogram of bus-outbox delivery stage durations, label `stage`.
pub const OUTBOX_STAGE_SECONDS: &str = "ferrybus_outbox_stage_seconds";
/// Counter of messages sent from outbox tables, label `source` (`bus`, `consumer`, `sweeper`).
pub const OUTBOX_SENT_TOTAL: &str = "ferrybus_outbox_sent_total";
/// Counter of failed sends from outbox tables, label `source`.
pub const OUTBOX_SEND_FAILURES_TOTAL: &str = "ferrybus_outbox_send_failures_total";
/// Counter of inbox rows removed by the cleanup.
pub const INBOX_CLEANUP_DELETED_TOTAL: &str = "ferrybus_inbox_cleanup_deleted_total";

/// A timed step of the inbox or the bus-outbox delivery: its name (the span's `stage` field) and
/// the histogram key it records into, built at compile time so that timing a step allocates
/// nothing whether or not a recorder is installed.
pub(crate) struct Stage {
    name: &'static str,
    key: metrics::Key,
}

/// Declares `pub(crate) static`s of type [`Stage`], each recording into `$histogram` with the
/// label `stage = $name`.
macro_rules! stages {
    ($histogram:expr; $($ident:ident = $name:literal),+ $(,)?) => {$(
        pub(crate) static $ident: $crate::telemetry::Stage = {
            static LABELS: [metrics::Label; 1] = [metrics::Label::from_static_parts("stage", $name)];
            $crate::telemetry::Stage {
                name: $name,
                key: metrics::Key::from_static_parts($histogram, &LABELS),
            }
        };
    )+};
}

/// The stages of a delivery through the inbox ([`INBOX_STAGE_SECONDS`]).
pub(crate) mod inbox_stage {
    stages!(super::INBOX_STAGE_SECONDS;
        CLAIM = "claim",
        CONSUME = "consume",
        COMMIT = "commit",
        DELIVER = "deliver",
        HANDOFF = "handoff",
    );
}

/// The stages of a bus-outbox delivery pass ([`OUTBOX_STAGE_SECONDS`]).
pub(crate) mod outbox_stage {
    stages!(super::OUTBOX_STAGE_SECONDS;
        CLAIM = "claim",
        SEND = "send",
        FINISH = "finish",
        COMMIT = "commit",
    );
}

/// Where the messages sent from outbox tables come from: the `source` label of
/// [`OUTBOX_SENT_TOTAL`] and [`OUTBOX_SEND_FAILURES_TOTAL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendSource {
    /// The bus-outbox delivery service (`bus`).
    Bus,
    /// A consumer's outbox, sent after its inbox transaction committed (`consumer`).
    Consumer,
    /// The sweeper, sending what a crashed or stopped service left behind (`sweeper`).
    Sweeper,
}

impl SendSource {
    /// Counts one message sent.
    pub(crate) fn count_sent(self) {
        static KEYS: [metrics::Key; 3] = SendSource::keys(OUTBOX_SENT_TOTAL);
        increment(&KEYS[self as usize]);
    }

    /// Counts one failed send.
    pub(crate) fn count_failure(self) {
        static KEYS: [metrics::Key; 3] = SendSource::keys(OUTBOX_SEND_FAILURES_TOTAL);
        increment(&KEYS[self as usize]);
    }

    /// The keys of counter `name`, one per source, in the variants' order.
    const fn keys(name: &'static str) -> [metrics::Key; 3] {
        static LABELS: [[metrics::Label; 1]; 3] = [
            [metrics::Label::from_static_parts("source", "bus")],
            [metrics::Label::from_static_parts("source", "consumer")],
            [metrics::Label::from_static_parts("source", "sweeper")],
        ];
        [
            metrics::Key::from_static_parts(name, &LABELS[0]),
            metrics::Key::from_static_parts(name, &LABELS[1]),
            metrics::Key::from_static_parts(name, &LABELS[2]),
        ]
    }
}

/// Where this crate's `metrics` instruments say they come from.
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Adds one to the counter `key` of the installed recorder, if any (a static key: nothing
/// allocated).
fn increment(key: &'static metrics::Key) {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
}

/// Runs `fut` inside a span named after the stage and records its duration in the stage's
/// histogram.
///
/// A plain future around `fut` rather than an `async fn`, which would hold `fut` twice (once
/// before its first poll, once while it runs): stage futures are kilobytes.
pub(crate) fn timed<F: Future>(stage: &'static Stage, fut: F) -> Timed<F> {
    let span = tracing::debug_span!(target: "ferrybus::stage", "stage", stage = stage.name);
    Timed {
        inner: fut.instrument(span),
        stage,
        start: None,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`timed`].
    pub(crate) struct Timed<F> {
        #[pin]
        inner: tracing::instrument::Instrumented<F>,
        stage: &'static Stage,
        start: Option<Instant>,
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let start = *this.start.get_or_insert_with(Instant::now);
        let output = std::task::ready!(this.inner.poll(cx));
        metrics::with_recorder(|recorder| recorder.register_histogram(&this.stage.key, &METADATA))
            .record(start.elapsed().as_secs_f64());
        Poll::Ready(output)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
        SharedString, Unit,
    };

    use super::{inbox_stage, outbox_stage, timed, SendSource};

    /// A recorded value: the instrument's name, its labels, the value.
    type Recorded = (String, Vec<(String, String)>, f64);

    /// Keeps every value recorded, with the key it was recorded under.
    #[derive(Default)]
    struct Kept(Arc<Mutex<Vec<Recorded>>>);

    struct KeptInstrument(Key, Arc<Mutex<Vec<Recorded>>>);

    impl KeptInstrument {
        fn keep(&self, value: f64) {
            let labels = self
                .0
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            let name = self.0.name().to_owned();
            self.1.lock().unwrap().push((name, labels, value));
        }
    }

    impl HistogramFn for KeptInstrument {
        fn record(&self, value: f64) {
            self.keep(value);
        }
    }

    impl CounterFn for KeptInstrument {
        fn increment(&self, value: u64) {
            self.keep(value as f64);
        }
        fn absolute(&self, value: u64) {
            self.keep(value as f64);
        }
    }

    impl Recorder for Kept {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(Arc::new(KeptInstrument(key.clone(), self.0.clone())))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(KeptInstrument(key.clone(), self.0.clone())))
        }
    }

    fn run_ready<F: Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(output) => output,
            Poll::Pending => panic!("the future was expected to be ready"),
        }
    }

    fn label(key: &str, value: &str) -> Vec<(String, String)> {
        vec![(key.to_owned(), value.to_owned())]
    }

    #[test]
    fn a_timed_stage_records_its_duration_under_its_histogram_and_stage_label() {
        let recorder = Kept::default();
        let outputs = metrics::with_local_recorder(&recorder, || {
            (
                run_ready(timed(&inbox_stage::HANDOFF, async { 7 })),
                run_ready(timed(&outbox_stage::FINISH, async { "done" })),
            )
        });
        assert_eq!(outputs, (7, "done"));
        let kept = recorder.0.lock().unwrap();
        let keys: Vec<_> = kept
            .iter()
            .map(|(n, l, _)| (n.as_str(), l.clone()))
            .collect();
        assert_eq!(
            keys,
            [
                ("ferrybus_inbox_stage_seconds", label("stage", "handoff")),
                ("ferrybus_outbox_stage_seconds", label("stage", "finish")),
            ]
        );
        assert!(kept.iter().all(|(_, _, secs)| *secs >= 0.0 && *secs < 60.0));
    }

    #[test]
    fn sends_are_counted_under_their_source() {
        let recorder = Kept::default();
        metrics::with_local_recorder(&recorder, || {
            SendSource::Bus.count_sent();
            SendSource::Consumer.count_sent();
            SendSource::Sweeper.count_sent();
            SendSource::Consumer.count_failure();
        });
        let kept = recorder.0.lock().unwrap();
        let sent = "ferrybus_outbox_sent_total";
        let failed = "ferrybus_outbox_send_failures_total";
        assert_eq!(
            *kept,
            [
                (sent.to_owned(), label("source", "bus"), 1.0),
                (sent.to_owned(), label("source", "consumer"), 1.0),
                (sent.to_owned(), label("source", "sweeper"), 1.0),
                (failed.to_owned(), label("source", "consumer"), 1.0),
            ]
        );
    }
}
