//! A server span per HTTP request, the child of the caller's W3C `traceparent` when it sends
//! one: the orders a request writes to the bus outbox carry its trace in their rows'
//! `MT-Activity-Id`, so the trace goes on through the outbox delivery to every consumer.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use ferrybus::otel::{parse_traceparent, TRACEPARENT_HEADER};
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::{global, Context, KeyValue};

/// The axum middleware (`axum::middleware::from_fn(trace_requests)`).
pub async fn trace_requests(request: Request, next: Next) -> Response {
    let tracer = global::tracer("order-api");
    let parent = request
        .headers()
        .get(TRACEPARENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_traceparent)
        .map(|remote| Context::new().with_remote_span_context(remote))
        .unwrap_or_default();
    let span = tracer
        .span_builder(format!("{} {}", request.method(), request.uri().path()))
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("http.request.method", request.method().to_string()),
            KeyValue::new("url.path", request.uri().path().to_owned()),
        ])
        .start_with_context(&tracer, &parent);
    let cx = parent.with_span(span);
    let response = next.run(request).with_context(cx.clone()).await;
    let span = cx.span();
    span.set_attribute(KeyValue::new(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    ));
    span.end();
    response
}
