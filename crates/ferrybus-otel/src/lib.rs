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
//! use ferrybus_otel::{parse_traceparent, ACTIVITY_ID_HEADER};
//! assert_eq!(ACTIVITY_ID_HEADER, "MT-Activity-Id");
//! assert!(parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").is_some());
//! ```

mod consume;
mod context;
mod metrics;
mod receive;
mod send;
mod stamp;

use ferrybus_core::integration::{set_trace_stamp, BoxConsumeLayer};
use ferrybus_core::BusConfig;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::{Context, KeyValue};

pub use consume::{ConsumeInstrument, ConsumeInstrumentLayer};
pub use context::{
    baggage_pairs, format_traceparent, parse_traceparent, propagation, remote_parent, Propagation,
    ACTIVITY_CORRELATION_CONTEXT_HEADER, ACTIVITY_ID_HEADER, ACTIVITY_PROPAGATION_HEADER,
    TRACEPARENT_HEADER,
};
pub use metrics::*;
pub use receive::{ReceiveFuture, ReceiveInstrument, ReceiveInstrumentLayer};
pub use send::SendInstrument;
pub use stamp::stamp;

/// Instruments a bus: every endpoint gets the receive span and instruments outermost
/// ([`ReceiveInstrumentLayer`]), every consumer the process span and consume instruments
/// innermost ([`ConsumeInstrumentLayer`]), and every message built carries the trace context it
/// was built in ([`install`]). The RabbitMQ transport does this for every bus when its `otel`
/// feature is on (the default); the in-memory bus when asked:
///
/// ```
/// use ferrybus_core::memory::TestHarness;
/// let harness = TestHarness::builder().configure(ferrybus_otel::instrument);
/// # let _ = harness;
/// ```
pub fn instrument(bus: BusConfig) -> BusConfig {
    install();
    bus.endpoint_layer(|input_address| ReceiveInstrumentLayer::new(input_address).boxed())
        .consumer_layer(BoxConsumeLayer::new(ConsumeInstrumentLayer))
}

/// Makes every message built from now on carry the trace context it is built in ([`stamp`]);
/// idempotent. [`instrument`] calls it; call it yourself where messages are built outside an
/// instrumented bus (a bus outbox used before the bus starts).
pub fn install() {
    let _ = set_trace_stamp(stamp);
}

/// Records the inbox's decision for one consumer on the current span
/// ([`INBOX_DECISION_ATTRIBUTE`]); the storage's inbox calls it.
///
/// ```
/// ferrybus_otel::record_inbox_decision("duplicate");
/// ```
pub fn record_inbox_decision(decision: &'static str) {
    Context::current()
        .span()
        .set_attribute(KeyValue::new(INBOX_DECISION_ATTRIBUTE, decision));
}
