//! The instruments, named, united and labelled as MassTransit 8.5 names them
//! (`src/MassTransit/Monitoring/ConfigureDefaultInstrumentationOptions.cs` for the names and
//! labels, `src/MassTransit/Logging/Monitoring/LogContextInstrumentationExtensions.cs` for the
//! units, the label values and when each is recorded), plus ferrybus's own under `ferrybus.*`.

use std::sync::OnceLock;

use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};
use opentelemetry::{KeyValue, StringValue};

use ferrybus_core::envelope::HostInfo;
use ferrybus_core::integration::TextCache;

/// The instrumentation scope (meter and tracer) name ferrybus records under.
pub const SCOPE: &str = "ferrybus";

/// Span attribute: what the transport did with the delivery (`ack`, `duplicate`, `redeliver`,
/// `fault`, `skip`, `abandon`).
pub const SETTLEMENT_ATTRIBUTE: &str = "ferrybus.settlement";
/// Span attribute: the inbox's decision for one consumer (`run`, `recover`, `duplicate`).
pub const INBOX_DECISION_ATTRIBUTE: &str = "ferrybus.inbox.decision";

/// Label: the service (MassTransit: the process name).
pub const SERVICE_LABEL: &str = "messaging.masstransit.service";
/// Label: the endpoint (the last path segment of its address, `.` as `_`).
pub const ENDPOINT_LABEL: &str = "messaging.masstransit.destination";
/// Label: the consumer type (its short name, [`consumer_type_label`]), sagas included.
pub const CONSUMER_TYPE_LABEL: &str = "messaging.masstransit.consumer_type";
/// Label: the exception type (its short name), on `*.errors`.
pub const EXCEPTION_TYPE_LABEL: &str = "messaging.masstransit.exception_type";
/// Label: the message type (its short name).
pub const MESSAGE_TYPE_LABEL: &str = "messaging.masstransit.message_type";

/// Counter (`ea`): deliveries received by an endpoint.
pub const RECEIVE_TOTAL: &str = "messaging.masstransit.receive";
/// Counter (`ea`): deliveries that ended in the error queue.
pub const RECEIVE_FAULT_TOTAL: &str = "messaging.masstransit.receive.errors";
/// Histogram (`ms`): time spent receiving a delivery, settlement included.
pub const RECEIVE_DURATION: &str = "messaging.masstransit.receive.duration";
/// Up-down counter (`ea`): deliveries being received.
pub const RECEIVE_IN_PROGRESS: &str = "messaging.masstransit.receive.active";
/// Counter (`ea`): consumer attempts.
pub const CONSUME_TOTAL: &str = "messaging.masstransit.consume";
/// Counter (`ea`): consumer attempts that failed.
pub const CONSUME_FAULT_TOTAL: &str = "messaging.masstransit.consume.errors";
/// Counter (`ea`): consumer attempts that were retries.
pub const CONSUME_RETRY_TOTAL: &str = "messaging.masstransit.consume.retries";
/// Histogram (`ms`): time spent in a consumer.
pub const CONSUME_DURATION: &str = "messaging.masstransit.consume.duration";
/// Up-down counter (`ea`): consumers running.
pub const CONSUME_IN_PROGRESS: &str = "messaging.masstransit.consume.active";
/// Histogram (`ms`): from the envelope's `sentTime` to the consumer starting.
pub const DELIVERY_DURATION: &str = "messaging.masstransit.delivery.duration";
/// Counter (`ea`): messages sent (published messages included; MassTransit 8.5 counts publishes
/// here too, its `PublishTotal` being obsolete with no default name).
pub const SEND_TOTAL: &str = "messaging.masstransit.send";
/// Counter (`ea`): sends that failed.
pub const SEND_FAULT_TOTAL: &str = "messaging.masstransit.send.errors";
/// Counter (`ea`): messages written to an outbox table instead of the broker.
pub const OUTBOX_SEND_TOTAL: &str = "messaging.masstransit.outbox.send";
/// Counter (`ea`): outbox rows delivered to the broker.
pub const OUTBOX_DELIVERY_TOTAL: &str = "messaging.masstransit.outbox.delivery";
/// Counter (`ea`): outbox rows whose delivery failed.
pub const OUTBOX_DELIVERY_FAULT_TOTAL: &str = "messaging.masstransit.outbox.delivery.errors";
/// Counter (`ea`): saga messages handled (one per event a saga consumes).
pub const SAGA_TOTAL: &str = "messaging.masstransit.saga";
/// Counter (`ea`): saga messages whose handling failed.
pub const SAGA_FAULT_TOTAL: &str = "messaging.masstransit.saga.errors";
/// Histogram (`ms`): time spent handling a saga message.
pub const SAGA_DURATION: &str = "messaging.masstransit.saga.duration";
/// Up-down counter (`ea`): saga messages being handled.
pub const SAGA_IN_PROGRESS: &str = "messaging.masstransit.saga.active";
/// Counter (`ea`, ferrybus): copies the inbox stopped before the consumer.
pub const INBOX_DUPLICATE_TOTAL: &str = "ferrybus.inbox.duplicates";
/// Counter (`ea`, ferrybus): deliveries that completed an earlier attempt's outbox.
pub const INBOX_RECOVERED_TOTAL: &str = "ferrybus.inbox.recovered";
/// Counter (`ea`, ferrybus): deliveries sent back to their endpoint (delayed redelivery).
pub const REDELIVERY_TOTAL: &str = "ferrybus.redeliveries";
/// Counter (`ea`, ferrybus): stranded consumer-outbox rows the sweeper delivered.
pub const SWEEPER_RECOVERED_TOTAL: &str = "ferrybus.sweeper.recovered";

/// Every instrument ferrybus records, created once from the global meter provider.
pub(crate) struct Instruments {
    pub(crate) receive_total: Counter<u64>,
    pub(crate) receive_fault_total: Counter<u64>,
    pub(crate) receive_duration: Histogram<f64>,
    pub(crate) receive_in_progress: UpDownCounter<i64>,
    pub(crate) consume_total: Counter<u64>,
    pub(crate) consume_fault_total: Counter<u64>,
    pub(crate) consume_retry_total: Counter<u64>,
    pub(crate) consume_duration: Histogram<f64>,
    pub(crate) consume_in_progress: UpDownCounter<i64>,
    pub(crate) delivery_duration: Histogram<f64>,
    pub(crate) send_total: Counter<u64>,
    pub(crate) send_fault_total: Counter<u64>,
    pub(crate) outbox_send_total: Counter<u64>,
    pub(crate) outbox_delivery_total: Counter<u64>,
    pub(crate) outbox_delivery_fault_total: Counter<u64>,
    pub(crate) saga_total: Counter<u64>,
    pub(crate) saga_fault_total: Counter<u64>,
    pub(crate) saga_duration: Histogram<f64>,
    pub(crate) saga_in_progress: UpDownCounter<i64>,
    pub(crate) inbox_duplicate_total: Counter<u64>,
    pub(crate) inbox_recovered_total: Counter<u64>,
    pub(crate) redelivery_total: Counter<u64>,
    pub(crate) sweeper_recovered_total: Counter<u64>,
}

static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();

/// The instruments, created at the first recording from the meter provider installed then
/// (install telemetry before the bus starts; `ferrybus-telemetry` does it in `init`).
pub(crate) fn instruments() -> &'static Instruments {
    INSTRUMENTS.get_or_init(|| Instruments::new(&opentelemetry::global::meter(SCOPE)))
}

impl Instruments {
    fn new(meter: &Meter) -> Self {
        let counter = |name: &'static str, description: &'static str| {
            meter
                .u64_counter(name)
                .with_unit("ea")
                .with_description(description)
                .build()
        };
        let gauge = |name: &'static str, description: &'static str| {
            meter
                .i64_up_down_counter(name)
                .with_unit("ea")
                .with_description(description)
                .build()
        };
        let millis = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("ms")
                .with_description(description)
                .build()
        };
        Self {
            receive_total: counter(RECEIVE_TOTAL, "Number of messages received"),
            receive_fault_total: counter(RECEIVE_FAULT_TOTAL, "Number of messages receive faults"),
            receive_duration: millis(
                RECEIVE_DURATION,
                "Elapsed time spent receiving a message, in millis",
            ),
            receive_in_progress: gauge(RECEIVE_IN_PROGRESS, "Number of messages being received"),
            consume_total: counter(CONSUME_TOTAL, "Number of messages consumed"),
            consume_fault_total: counter(CONSUME_FAULT_TOTAL, "Number of message consume faults"),
            consume_retry_total: counter(CONSUME_RETRY_TOTAL, "Number of message consume retries"),
            consume_duration: millis(
                CONSUME_DURATION,
                "Elapsed time spent consuming a message, in millis",
            ),
            consume_in_progress: gauge(CONSUME_IN_PROGRESS, "Number of consumers in progress"),
            delivery_duration: millis(
                DELIVERY_DURATION,
                "Elapsed time between when the message was sent and when it was consumed, in millis.",
            ),
            send_total: counter(SEND_TOTAL, "Number of messages sent"),
            send_fault_total: counter(SEND_FAULT_TOTAL, "Number of message send faults"),
            outbox_send_total: counter(OUTBOX_SEND_TOTAL, "Number of messages sent to outbox"),
            outbox_delivery_total: counter(
                OUTBOX_DELIVERY_TOTAL,
                "Number of outbox delivery messages executed",
            ),
            outbox_delivery_fault_total: counter(
                OUTBOX_DELIVERY_FAULT_TOTAL,
                "Number of outbox delivery message failures",
            ),
            saga_total: counter(SAGA_TOTAL, "Number of sagas executed"),
            saga_fault_total: counter(SAGA_FAULT_TOTAL, "Number of sagas faults"),
            saga_duration: millis(
                SAGA_DURATION,
                "Elapsed time spent saga processing a message, in millis",
            ),
            saga_in_progress: gauge(SAGA_IN_PROGRESS, "Number of sagas in progress"),
            inbox_duplicate_total: counter(
                INBOX_DUPLICATE_TOTAL,
                "Number of message copies the inbox kept from a consumer that had consumed them",
            ),
            inbox_recovered_total: counter(
                INBOX_RECOVERED_TOTAL,
                "Number of deliveries that completed an earlier attempt's outbox",
            ),
            redelivery_total: counter(
                REDELIVERY_TOTAL,
                "Number of messages scheduled for delayed redelivery",
            ),
            sweeper_recovered_total: counter(
                SWEEPER_RECOVERED_TOTAL,
                "Number of stranded consumer-outbox messages the sweeper delivered",
            ),
        }
    }
}

/// MassTransit's endpoint label of an address: its last path segment, `.` and `/` as `_`
/// (`GetEndpointLabel`); a bare name is its own label.
///
/// ```
/// use ferrybus_otel::endpoint_label;
/// assert_eq!(endpoint_label("rabbitmq://localhost/billing-invoice"), "billing-invoice");
/// assert_eq!(endpoint_label("rabbitmq://localhost/Bookstore.Contracts:OrderPlaced?type=topic"), "Bookstore_Contracts:OrderPlaced");
/// assert_eq!(endpoint_label("billing.invoice"), "billing_invoice");
/// ```
pub fn endpoint_label(address: &str) -> String {
    let path = address.split(['?', '#']).next().unwrap_or_default();
    let path = path.split_once("://").map_or(path, |(_, rest)| rest);
    let last = path.rsplit('/').next().unwrap_or_default();
    last.replace('.', "_")
}

/// MassTransit's message type label of a message type URN: the type's short name, generic
/// arguments joined with `_` (`Fault_OrderPlaced`).
///
/// ```
/// use ferrybus_otel::message_type_label;
/// assert_eq!(message_type_label("urn:message:Bookstore.Contracts:OrderPlaced"), "OrderPlaced");
/// assert_eq!(
///     message_type_label("urn:message:MassTransit:Fault[[Bookstore.Contracts:OrderPlaced]]"),
///     "Fault_OrderPlaced"
/// );
/// ```
pub fn message_type_label(urn: &str) -> String {
    let name = urn.strip_prefix("urn:message:").unwrap_or(urn);
    match name.split_once("[[") {
        Some((outer, args)) => {
            let args = args.trim_end_matches(']');
            let inner: Vec<String> = args
                .split("],[")
                .map(|a| message_type_label(a.trim_matches(['[', ']'])))
                .collect();
            format!("{}_{}", short(outer), inner.join("_"))
        }
        None => short(name).to_owned(),
    }
}

/// An error type's short name, as MassTransit's `exception.GetType().Name`.
///
/// ```
/// use ferrybus_otel::exception_type_label;
/// assert_eq!(exception_type_label("billing::PaymentDeclined"), "PaymentDeclined");
/// assert_eq!(exception_type_label("System.InvalidOperationException"), "InvalidOperationException");
/// ```
pub fn exception_type_label(type_name: &str) -> String {
    let name = type_name.split('<').next().unwrap_or(type_name);
    name.rsplit("::")
        .next()
        .unwrap_or(name)
        .rsplit('.')
        .next()
        .unwrap_or(name)
        .to_owned()
}

fn short(name: &str) -> &str {
    name.rsplit([':', '.', '+']).next().unwrap_or(name)
}

/// MassTransit's consumer type label (`GetConsumerTypeLabel` in
/// `src/MassTransit/Logging/Monitoring/LogContextInstrumentationExtensions.cs`) of the consumer
/// or saga named `consumer` consuming `message_type`: the name without its namespace, generic
/// arguments joined with `_` (the message's own name as its [`message_type_label`]), so that
/// `Sales.Sagas.OrderState` is `OrderState`, as .NET labels it; a MassTransit message handler
/// is `Handler`. The one label every consume, saga and inbox instrument carries.
///
/// ```
/// use ferrybus_core::message::{MessageType, TypeName};
/// use ferrybus_otel::consumer_type_label;
/// let placed = MessageType::new(TypeName::new("Shop.Contracts", "OrderPlaced"));
/// assert_eq!(consumer_type_label("Sales.Sagas.OrderState", &placed), "OrderState");
/// assert_eq!(consumer_type_label("billing.InvoiceConsumer", &placed), "InvoiceConsumer");
/// assert_eq!(consumer_type_label("Shop.Billing+Nested", &placed), "Nested");
/// assert_eq!(
///     consumer_type_label("relay.Forward<shop.OrderPlaced>", &placed),
///     "Forward_OrderPlaced"
/// );
/// assert_eq!(
///     consumer_type_label("Shop.Relay<Shop.Contracts.OrderPlaced>", &placed),
///     "Relay_OrderPlaced"
/// );
/// ```
pub fn consumer_type_label(consumer: &str, message_type: &ferrybus_core::MessageType) -> String {
    if consumer.starts_with("MassTransit.MessageHandler<") {
        return "Handler".to_owned();
    }
    let generic = format!("<{}>", message_type.dotnet_name());
    let label = message_type_label(message_type.urn());
    clean_label(&consumer.replace(&generic, &format!("_{label}")))
}

/// MassTransit's `CleanupLabel`: each type name without its namespace (or enclosing type),
/// generic arguments after `_`.
fn clean_label(label: &str) -> String {
    let simple = |text: &str| text.rsplit(['.', '+']).next().unwrap_or(text).to_owned();
    match label.find(['<', '>']) {
        Some(at) if label[at..].starts_with('<') => {
            format!("{}_{}", simple(&label[..at]), clean_label(&label[at + 1..]))
        }
        Some(at) => format!("{}{}", simple(&label[..at]), clean_label(&label[at + 1..])),
        None => simple(label),
    }
}

/// [`consumer_type_label`], shared (computed once per distinct consumer, as MassTransit caches
/// it by consumer type).
pub(crate) fn shared_consumer_type_label(
    consumer: &str,
    message_type: &ferrybus_core::MessageType,
) -> StringValue {
    static CONSUMER_TYPES: TextCache<StringValue> = TextCache::new();
    CONSUMER_TYPES.get(consumer, |consumer| {
        shared_string(consumer_type_label(consumer, message_type))
    })
}

/// The service label every instrument carries ([`SERVICE_LABEL`]: the process name, as
/// MassTransit uses it).
///
/// ```
/// assert_eq!(ferrybus_otel::service_label().key.as_str(), ferrybus_otel::SERVICE_LABEL);
/// ```
pub fn service_label() -> KeyValue {
    static SERVICE: OnceLock<KeyValue> = OnceLock::new();
    SERVICE
        .get_or_init(|| {
            let name = HostInfo::current()
                .process_name
                .clone()
                .unwrap_or_else(|| "ferrybus".to_owned());
            KeyValue::new(SERVICE_LABEL, shared_string(name))
        })
        .clone()
}

/// A label value that clones without allocating.
pub(crate) fn shared_string(text: String) -> opentelemetry::StringValue {
    opentelemetry::StringValue::from(std::sync::Arc::<str>::from(text))
}

/// [`endpoint_label`] of `address`, shared (computed once per distinct address).
pub(crate) fn shared_endpoint_label(address: &str) -> StringValue {
    static ENDPOINTS: TextCache<StringValue> = TextCache::new();
    ENDPOINTS.get(address, |address| shared_string(endpoint_label(address)))
}

/// [`message_type_label`] of `urn`, shared (computed once per distinct message type).
pub(crate) fn shared_message_type_label(urn: &str) -> StringValue {
    static MESSAGE_TYPES: TextCache<StringValue> = TextCache::new();
    MESSAGE_TYPES.get(urn, |urn| shared_string(message_type_label(urn)))
}

/// Counts one message written to an outbox table (MassTransit's `outbox.send`), labelled by its
/// destination and message type.
///
/// ```
/// ferrybus_otel::record_outbox_send("rabbitmq://localhost/billing", "urn:message:Shop:InvoiceCreated");
/// ```
pub fn record_outbox_send(destination: &str, message_type: &str) {
    instruments().outbox_send_total.add(
        1,
        &[
            service_label(),
            KeyValue::new(ENDPOINT_LABEL, shared_endpoint_label(destination)),
            KeyValue::new(MESSAGE_TYPE_LABEL, shared_message_type_label(message_type)),
        ],
    );
}

/// Counts one outbox row delivered (`ok`) or not (MassTransit's `outbox.delivery` and
/// `outbox.delivery.errors`, the latter with the exception type), and, for rows the sweeper
/// delivered, `ferrybus.sweeper.recovered`.
///
/// ```
/// ferrybus_otel::record_outbox_delivery("rabbitmq://localhost/billing", None, false);
/// ```
pub fn record_outbox_delivery(destination: &str, error_type: Option<&str>, swept: bool) {
    let instruments = instruments();
    let mut labels = vec![
        service_label(),
        KeyValue::new(ENDPOINT_LABEL, shared_endpoint_label(destination)),
    ];
    instruments.outbox_delivery_total.add(1, &labels);
    if let Some(error_type) = error_type {
        labels.push(KeyValue::new(
            EXCEPTION_TYPE_LABEL,
            exception_type_label(error_type),
        ));
        instruments.outbox_delivery_fault_total.add(1, &labels);
    } else if swept {
        instruments
            .sweeper_recovered_total
            .add(1, &[service_label()]);
    }
}

/// Counts a copy the inbox kept from `consumer` (`ferrybus.inbox.duplicates`), or a delivery
/// that completed an earlier attempt's outbox (`ferrybus.inbox.recovered`), labelled by its
/// endpoint and [`consumer_type_label`].
///
/// ```
/// use ferrybus_core::integration::ConsumerInfo;
/// use ferrybus_core::message::{MessageType, TypeName};
/// let placed = MessageType::new(TypeName::new("Shop.Contracts", "OrderPlaced"));
/// let consumer = ConsumerInfo::new("billing.InvoiceConsumer", placed, "billing-invoice");
/// ferrybus_otel::record_inbox(&consumer, true);
/// ```
pub fn record_inbox(consumer: &ferrybus_core::integration::ConsumerInfo, duplicate: bool) {
    let labels = [
        service_label(),
        KeyValue::new(ENDPOINT_LABEL, shared_endpoint_label(consumer.queue())),
        KeyValue::new(
            CONSUMER_TYPE_LABEL,
            shared_consumer_type_label(consumer.name(), consumer.message_type()),
        ),
    ];
    let instruments = instruments();
    if duplicate {
        instruments.inbox_duplicate_total.add(1, &labels);
    } else {
        instruments.inbox_recovered_total.add(1, &labels);
    }
}

/// MassTransit's saga instruments around one saga message (`StartSagaStateMachineInstrument`,
/// `src/MassTransit/Logging/Monitoring/LogContextInstrumentationExtensions.cs`, started by
/// `StateMachineSagaMessageFilter`): [`SAGA_TOTAL`] and [`SAGA_IN_PROGRESS`] when it starts,
/// [`SAGA_FAULT_TOTAL`] (with the exception type) on [`fault`](Self::fault), and the active
/// count back down and [`SAGA_DURATION`] when it is dropped. Labelled by service, endpoint,
/// message type and the saga's type ([`consumer_type_label`]: `Bookstore.Sagas.OrderState` is
/// `OrderState`).
///
/// ```
/// use ferrybus_core::message::{MessageType, TypeName};
/// use ferrybus_otel::SagaInstrument;
/// let mut instrument = SagaInstrument::start(
///     "rabbitmq://localhost/order-state",
///     &MessageType::new(TypeName::new("Bookstore.Contracts", "OrderSubmitted")),
///     "Bookstore.Sagas.OrderState",
/// );
/// instrument.fault("ferrybus_saga::SagaError");
/// drop(instrument);
/// ```
#[derive(Debug)]
pub struct SagaInstrument {
    labels: [KeyValue; 4],
    started: std::time::Instant,
}

impl SagaInstrument {
    /// Counts a saga message of type `message_type` handled by the saga `saga_type` (its full
    /// name, labelled by [`consumer_type_label`]) on the endpoint `input_address`.
    pub fn start(
        input_address: &str,
        message_type: &ferrybus_core::MessageType,
        saga_type: &str,
    ) -> Self {
        let labels = [
            service_label(),
            KeyValue::new(ENDPOINT_LABEL, shared_endpoint_label(input_address)),
            KeyValue::new(
                MESSAGE_TYPE_LABEL,
                shared_message_type_label(message_type.urn()),
            ),
            KeyValue::new(
                CONSUMER_TYPE_LABEL,
                shared_consumer_type_label(saga_type, message_type),
            ),
        ];
        let instruments = instruments();
        instruments.saga_total.add(1, &labels);
        instruments.saga_in_progress.add(1, &labels);
        Self {
            labels,
            started: std::time::Instant::now(),
        }
    }

    /// Counts the message as failed with an error of type `exception_type`.
    pub fn fault(&mut self, exception_type: &str) {
        let mut labels = self.labels.to_vec();
        labels.push(KeyValue::new(
            EXCEPTION_TYPE_LABEL,
            exception_type_label(exception_type),
        ));
        instruments().saga_fault_total.add(1, &labels);
    }
}

impl Drop for SagaInstrument {
    fn drop(&mut self) {
        let instruments = instruments();
        instruments.saga_in_progress.add(-1, &self.labels);
        instruments
            .saga_duration
            .record(self.started.elapsed().as_secs_f64() * 1000.0, &self.labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_labels_are_the_labels_and_are_made_once() {
        let address = "rabbitmq://localhost/Shop.Billing:InvoiceCreated?type=topic";
        let first = shared_endpoint_label(address);
        assert_eq!(first.as_str(), endpoint_label(address));
        assert_eq!(first.as_str(), "Shop_Billing:InvoiceCreated");
        let again = shared_endpoint_label(address);
        assert!(std::ptr::eq(first.as_str(), again.as_str()));

        let urn = "urn:message:MassTransit:Fault[[Shop.Billing:InvoiceCreated]]";
        assert_eq!(
            shared_message_type_label(urn).as_str(),
            message_type_label(urn)
        );
        assert_eq!(
            shared_message_type_label(urn).as_str(),
            "Fault_InvoiceCreated"
        );
    }
}
