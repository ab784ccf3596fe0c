//! Billing's traces and metrics on real RabbitMQ and PostgreSQL: an `OrderPlaced` carrying a .NET
//! publisher's `MT-Activity-Id` continues into billing's receive and process spans and into the
//! `MT-Activity-Id` of the `InvoiceCreated` the consumer outbox delivers; the consume counter
//! equals the orders sent; an invalid order raises the error counters with its exception type;
//! a duplicate counts in `ferrybus.inbox.duplicates`, not in `consume`.
//! Billing runs in this process, its spans captured by an in-memory exporter.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::sync::OnceLock;

use example_billing::{Billing, Config};
use example_contracts::OrderPlaced;
use ferrybus::address::HostAddress;
use ferrybus::outgoing::MessageFactory;
use ferrybus::outgoing::MessageOrigin;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::{Publish, SendOptions};
use ferrybus_telemetry::{Telemetry, TelemetryConfig};
use ferrybus_testing::{amqp_url, database_url, eventually, mt_properties, unique, Probe, WAIT};
use lapin::types::{AMQPValue, FieldTable};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use uuid::Uuid;

/// The .NET publisher's span, as MassTransit writes it in `MT-Activity-Id`.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

fn telemetry() -> &'static (Telemetry, InMemorySpanExporter) {
    static TELEMETRY: OnceLock<(Telemetry, InMemorySpanExporter)> = OnceLock::new();
    TELEMETRY.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let config = TelemetryConfig::from_lookup("billing-test", |_| None)
            .expect("no OTEL_* is fine")
            .span_exporter(exporter.clone());
        (Telemetry::init(config).expect("telemetry"), exporter)
    })
}

/// A billing of its own: unique queues and schemas, not bound to the shared exchanges.
struct Isolated {
    billing: Billing,
    config: Config,
    probe: Probe,
}

impl Isolated {
    async fn start() -> Self {
        let id = unique("tel").replace('-', "_");
        let env: HashMap<&str, String> = HashMap::from([
            ("DATABASE_URL", database_url()),
            ("AMQP_URL", amqp_url()),
            ("BILLING_SCHEMA", format!("{id}_billing")),
            ("FERRYBUS_SCHEMA", format!("{id}_messaging")),
            ("BILLING_INVOICE_QUEUE", unique("tel-invoice")),
            ("BILLING_PAYMENTS_QUEUE", unique("tel-payments")),
            ("BILLING_BIND", "0".to_owned()),
            ("PAYMENT_DELAY_MS", "5".to_owned()),
        ]);
        let config = Config::from_lookup(|name| env.get(name).cloned()).expect("config");
        let probe = Probe::connect(&amqp_url()).await;
        probe.track_endpoint(&config.invoice_queue);
        probe.track_endpoint(&config.payments_queue);
        let billing = Billing::start(&config).await.expect("billing starts");
        Self {
            billing,
            config,
            probe,
        }
    }

    async fn invoices(&self) -> i64 {
        let sql = format!(
            "SELECT count(*) AS n FROM \"{}\".invoices",
            self.config.billing_schema
        );
        let row = self
            .billing
            .db()
            .query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
            .await
            .expect("count")
            .expect("a row");
        row.try_get::<i64>("", "n").expect("n")
    }

    async fn stop(self) {
        let db = self.billing.db().clone();
        self.billing.stop().await;
        for schema in [
            &self.config.billing_schema,
            self.config.tables.schema_name(),
        ] {
            let _ = db
                .execute_unprepared(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await;
        }
        self.probe.cleanup().await;
    }
}

fn order(total: &str) -> OrderPlaced {
    OrderPlaced {
        order_id: Uuid::now_v7(),
        total: total.parse().unwrap(),
        currency: "TRY".into(),
    }
}

fn spans_named(exporter: &InMemorySpanExporter, name: &str, trace: TraceId) -> Vec<SpanData> {
    exporter
        .get_finished_spans()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.name == name && s.span_context.trace_id() == trace)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dotnet_trace_continues_through_billing_into_invoice_created() {
    let (_, exporter) = telemetry();
    let app = Isolated::start().await;
    let queue = app.config.invoice_queue.clone();
    let invoices = app
        .probe
        .bind_probe("Bookstore.Contracts:InvoiceCreated")
        .await;

    // OrderPlaced as a .NET publisher sends it, its send activity in MT-Activity-Id.
    let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
    let placed = order("12.00");
    let message = factory
        .publish(&placed, &MessageOrigin::default(), SendOptions::new())
        .unwrap();
    let mut headers = FieldTable::default();
    headers.insert(
        "MT-Activity-Id".into(),
        AMQPValue::LongString(format!("00-{TRACE}-{PARENT_SPAN}-01").into()),
    );
    let properties = mt_properties(&message.message_id.to_string()).with_headers(headers);
    app.probe
        .publish("", &queue, &message.body, properties)
        .await;

    // InvoiceCreated, delivered by the consumer outbox after commit, carries the same trace.
    let order_id = placed.order_id.to_string();
    let created = app
        .probe
        .wait_for(&invoices, |m| m.body["message"]["orderId"] == order_id)
        .await;
    let activity = created
        .headers
        .get("MT-Activity-Id")
        .expect("InvoiceCreated carries MT-Activity-Id");
    let sent = ferrybus::otel::parse_traceparent(activity).expect("a W3C traceparent");
    let trace = TraceId::from_hex(TRACE).unwrap();
    assert_eq!(sent.trace_id(), trace, "{activity}");
    assert_ne!(sent.span_id(), SpanId::from_hex(PARENT_SPAN).unwrap());

    // The receive span is the child of the .NET span; the process span is the receive span's
    // child; the send span of InvoiceCreated is the one its header names.
    let receive = eventually("the receive span", WAIT, || async {
        spans_named(exporter, &format!("{queue} receive"), trace).pop()
    })
    .await;
    assert_eq!(
        receive.parent_span_id,
        SpanId::from_hex(PARENT_SPAN).unwrap()
    );
    assert!(receive.parent_span_is_remote);
    let attributes: HashMap<String, String> = receive
        .attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    assert_eq!(attributes["messaging.system"], "rabbitmq");
    assert_eq!(attributes["messaging.destination.name"], queue);
    assert_eq!(attributes["ferrybus.settlement"], "ack");
    assert_eq!(
        attributes["messaging.message.body.size"],
        message.body.len().to_string()
    );
    let process = spans_named(exporter, &format!("{queue} process"), trace);
    assert_eq!(process.len(), 1, "one consumer attempt");
    assert_eq!(process[0].parent_span_id, receive.span_context.span_id());
    let process_attributes: HashMap<String, String> = process[0]
        .attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    assert_eq!(
        process_attributes["messaging.masstransit.message_id"],
        message.message_id.to_string()
    );
    assert_eq!(
        process_attributes["messaging.masstransit.consumer_type"],
        "InvoiceConsumer"
    );
    let send = eventually("the InvoiceCreated send span", WAIT, || async {
        spans_named(exporter, "Bookstore_Contracts:InvoiceCreated send", trace)
            .into_iter()
            .find(|s| s.span_context.span_id() == sent.span_id())
    })
    .await;
    assert_eq!(send.span_kind, opentelemetry::trace::SpanKind::Producer);

    app.stop().await;
}

/// The sum of the Prometheus samples of `name` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_counts_equal_orders_and_faults_count_their_exception_type() {
    let (telemetry, _) = telemetry();
    let app = Isolated::start().await;
    let queue = app.config.invoice_queue.clone();
    let endpoint = [("messaging_masstransit_destination", queue.as_str())];
    let sender = RabbitMqBus::builder(&amqp_url())
        .start()
        .await
        .expect("sender");

    const ORDERS: i64 = 5;
    for _ in 0..ORDERS {
        sender
            .send(&format!("queue:{queue}"), &order("12.00"))
            .await
            .expect("sent");
    }
    eventually("every order invoiced", WAIT, || async {
        (app.invoices().await == ORDERS).then_some(())
    })
    .await;
    let text = eventually("the receive durations", WAIT, || async {
        let text = telemetry.prometheus_text();
        (sample(
            &text,
            "messaging_masstransit_receive_duration_milliseconds_count",
            &endpoint,
        ) == ORDERS as f64)
            .then_some(text)
    })
    .await;
    let consumed = [
        ("messaging_masstransit_destination", queue.as_str()),
        ("messaging_masstransit_message_type", "OrderPlaced"),
        ("messaging_masstransit_consumer_type", "InvoiceConsumer"),
    ];
    assert_eq!(
        sample(&text, "messaging_masstransit_consume_total", &consumed),
        ORDERS as f64,
        "{text}"
    );
    assert_eq!(
        sample(&text, "messaging_masstransit_receive_total", &endpoint),
        ORDERS as f64
    );
    assert_eq!(
        sample(
            &text,
            "messaging_masstransit_consume_errors_total",
            &endpoint
        ),
        0.0
    );
    assert_eq!(
        sample(&text, "messaging_masstransit_receive_active", &endpoint),
        0.0
    );
    assert_eq!(
        sample(
            &text,
            "messaging_masstransit_delivery_duration_milliseconds_count",
            &consumed
        ),
        ORDERS as f64
    );

    // An invalid order: three attempts (two retries), then the error queue.
    sender
        .send(&format!("queue:{queue}"), &order("-1.00"))
        .await
        .expect("sent");
    let error_queue = format!("{queue}_error");
    app.probe.wait_get(&error_queue).await;
    let text = eventually("the receive error", WAIT, || async {
        let text = telemetry.prometheus_text();
        (sample(
            &text,
            "messaging_masstransit_receive_errors_total",
            &endpoint,
        ) == 1.0)
            .then_some(text)
    })
    .await;
    let invalid = [
        ("messaging_masstransit_destination", queue.as_str()),
        ("messaging_masstransit_exception_type", "InvalidOrder"),
    ];
    assert_eq!(
        sample(
            &text,
            "messaging_masstransit_receive_errors_total",
            &invalid
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "messaging_masstransit_consume_errors_total",
            &invalid
        ),
        3.0
    );
    assert_eq!(
        sample(
            &text,
            "messaging_masstransit_consume_retries_total",
            &consumed
        ),
        2.0
    );
    assert_eq!(
        sample(&text, "messaging_masstransit_consume_total", &consumed),
        (ORDERS + 3) as f64
    );
    // InvoiceCreated and PaymentCaptured of each order went through the consumer outbox.
    assert!(
        sample(&text, "messaging_masstransit_outbox_delivery_total", &[]) >= 2.0 * ORDERS as f64
    );

    // The same message twice: the inbox stops the copy, not consumed. It counts once: as a
    // duplicate, or as a recovered copy when it came while the first copy's outbox messages were
    // still being sent (it then finishes sending them).
    let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
    let message = factory
        .publish(
            &order("8.00"),
            &MessageOrigin::default(),
            SendOptions::new(),
        )
        .unwrap();
    for _ in 0..2 {
        let properties = mt_properties(&message.message_id.to_string());
        app.probe
            .publish("", &queue, &message.body, properties)
            .await;
    }
    let duplicates = [
        ("messaging_masstransit_destination", queue.as_str()),
        ("messaging_masstransit_consumer_type", "InvoiceConsumer"),
    ];
    let text = eventually("the duplicate counted", WAIT, || async {
        let text = telemetry.prometheus_text();
        let stopped = sample(&text, "ferrybus_inbox_duplicates_total", &duplicates)
            + sample(&text, "ferrybus_inbox_recovered_total", &duplicates);
        (stopped == 1.0
            && sample(&text, "messaging_masstransit_receive_total", &endpoint)
                == (ORDERS + 3) as f64)
            .then_some(text)
    })
    .await;
    assert_eq!(
        sample(&text, "messaging_masstransit_consume_total", &consumed),
        (ORDERS + 4) as f64,
        "the copy did not reach the consumer: {text}"
    );

    sender.stop().await;
    app.stop().await;
}
