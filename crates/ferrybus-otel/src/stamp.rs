//! The trace context every message built carries: [`stamp`], the
//! [`TraceStamp`](ferrybus_core::integration::TraceStamp) this crate installs.

use ferrybus_core::Headers;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::Context;

use crate::context::{
    baggage_header, format_traceparent, ACTIVITY_CORRELATION_CONTEXT_HEADER, ACTIVITY_ID_HEADER,
};

/// Writes the current span's context into `MT-Activity-Id` and the current baggage into
/// `MT-Activity-Correlation-Context`, where a message being built has neither: the current span
/// (inside a consumer, its process span) continues in whatever receives the message, also when an
/// outbox row carries it there later.
pub fn stamp(headers: &mut Headers) {
    if !headers.contains(ACTIVITY_ID_HEADER) {
        if let Some(activity_id) = current_activity_id() {
            headers.insert(ACTIVITY_ID_HEADER, activity_id);
        }
    }
    if !headers.contains(ACTIVITY_CORRELATION_CONTEXT_HEADER) {
        if let Some(baggage) = baggage_header(&Context::current()) {
            headers.insert(ACTIVITY_CORRELATION_CONTEXT_HEADER, baggage);
        }
    }
}

/// The `MT-Activity-Id` a message built now carries: the current span's context, when there is
/// one (inside a consumer, the process span).
fn current_activity_id() -> Option<String> {
    let cx = Context::current();
    let span = cx.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| format_traceparent(span_context))
}
