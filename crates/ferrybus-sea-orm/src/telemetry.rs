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

/// Runs `fut` inside a span named after the stage and records its duration in `histogram`.
///
/// A plain future around `fut` rather than an `async fn`, which would hold `fut` twice (once
/// before its first poll, once while it runs): stage futures are kilobytes.
pub(crate) fn timed<F: Future>(histogram: &'static str, stage: &'static str, fut: F) -> Timed<F> {
    let span = tracing::debug_span!(target: "ferrybus::stage", "stage", stage);
    Timed {
        inner: fut.instrument(span),
        histogram,
        stage,
        start: None,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`timed`].
    pub(crate) struct Timed<F> {
        #[pin]
        inner: tracing::instrument::Instrumented<F>,
        histogram: &'static str,
        stage: &'static str,
        start: Option<Instant>,
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let start = *this.start.get_or_insert_with(Instant::now);
        let output = std::task::ready!(this.inner.poll(cx));
        metrics::histogram!(*this.histogram, "stage" => *this.stage)
            .record(start.elapsed().as_secs_f64());
        Poll::Ready(output)
    }
}
