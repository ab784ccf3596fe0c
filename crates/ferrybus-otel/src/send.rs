//! [`SendInstrument`]: the `<destination> send` span and the send instruments of one message a
//! transport puts on the broker.

use ferrybus_core::integration::OutgoingMessage;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{global, Context, KeyValue, StringValue};

use crate::context::{format_traceparent, remote_parent};
use crate::metrics::{
    self, exception_type_label, service_label, ENDPOINT_LABEL, EXCEPTION_TYPE_LABEL,
    MESSAGE_TYPE_LABEL, SCOPE,
};

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
/// use ferrybus_core::SendOptions;
/// use ferrybus_otel::SendInstrument;
/// use ferrybus_core::address::HostAddress;
/// use ferrybus_core::outgoing::MessageFactory;
/// use ferrybus_core::outgoing::MessageOrigin;
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
