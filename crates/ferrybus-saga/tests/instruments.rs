//! MassTransit's saga instruments (`messaging.masstransit.saga.*`, feature `otel`) recorded for
//! a saga on RabbitMQ: a handled event counts once, a faulting one counts as an error with its
//! exception type, and the active count returns to zero; the consume instruments around the
//! saga label it as the saga instruments do (its short name, not its .NET type's full name).

use ferrybus_core::{Message, Publish};
use ferrybus_otel::{
    CONSUMER_TYPE_LABEL, CONSUME_TOTAL, ENDPOINT_LABEL, EXCEPTION_TYPE_LABEL, MESSAGE_TYPE_LABEL,
    SAGA_DURATION, SAGA_FAULT_TOTAL, SAGA_IN_PROGRESS, SAGA_TOTAL,
};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_saga::{
    Event, InMemorySagaRepository, MissingInstance, SagaEndpointExt, StateMachine,
};
use ferrybus_testing::{amqp_url, eventually, unique, Probe, WAIT};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.SagaMetrics")]
struct OrderSubmitted {
    order_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.SagaMetrics")]
struct OrderShipped {
    order_id: Uuid,
}

ferrybus_saga::saga_states! {
    enum OrderStatus { Submitted, Shipped }
}

#[derive(Clone, Debug, Default, Serialize)]
struct OrderState;

fn machine() -> StateMachine<OrderState, OrderStatus> {
    let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    // Shipped for an order that does not exist faults.
    let shipped = Event::<OrderShipped>::correlated_by(|m| m.order_id)
        .on_missing_instance(MissingInstance::Fault);
    StateMachine::<OrderState, OrderStatus>::new("OrderState")
        .dotnet_type("Ferrybus.Tests.Sagas.OrderState")
        .initially(|s| s.when(&submitted, |b| b.transition_to(OrderStatus::Submitted)))
        .during(OrderStatus::Submitted, |s| {
            s.when(&shipped, |b| b.transition_to(OrderStatus::Shipped))
        })
}

struct Metrics {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

impl Metrics {
    /// The sum of the integer sum `name` over the points carrying every label of `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> i64 {
        self.provider.force_flush().unwrap();
        let Some(last) = self.exporter.get_finished_metrics().unwrap().pop() else {
            return 0;
        };
        let mut total = 0;
        for scope in last.scope_metrics() {
            for metric in scope.metrics().filter(|m| m.name() == name) {
                let points: Vec<(i64, Vec<(String, String)>)> = match metric.data() {
                    AggregatedMetrics::U64(MetricData::Sum(sum)) => sum
                        .data_points()
                        .map(|p| (p.value() as i64, attributes(p.attributes())))
                        .collect(),
                    AggregatedMetrics::I64(MetricData::Sum(sum)) => sum
                        .data_points()
                        .map(|p| (p.value(), attributes(p.attributes())))
                        .collect(),
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => h
                        .data_points()
                        .map(|p| (p.count() as i64, attributes(p.attributes())))
                        .collect(),
                    _ => Vec::new(),
                };
                for (value, attributes) in points {
                    let matches = labels
                        .iter()
                        .all(|(key, value)| attributes.iter().any(|(k, v)| k == key && v == value));
                    if matches {
                        total += value;
                    }
                }
            }
        }
        total
    }
}

fn attributes<'a>(kvs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> Vec<(String, String)> {
    kvs.map(|kv| (kv.key.to_string(), kv.value.as_str().into_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_records_masstransit_saga_instruments() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    opentelemetry::global::set_meter_provider(provider.clone());
    let metrics = Metrics { provider, exporter };

    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("saga-metrics");
    probe.track_endpoint(&queue);
    let repository = InMemorySagaRepository::<OrderState>::new();
    let bus = RabbitMqBus::builder(&amqp_url())
        .receive_endpoint(&queue, {
            let repository = repository.clone();
            move |e| e.bind_message_types(false).saga(machine(), repository)
        })
        .start()
        .await
        .expect("the bus starts");
    let address = format!("queue:{queue}");
    let order_id = Uuid::now_v7();
    bus.send(&address, &OrderSubmitted { order_id })
        .await
        .unwrap();
    bus.send(
        &address,
        &OrderShipped {
            order_id: Uuid::now_v7(),
        },
    )
    .await
    .unwrap();

    let endpoint = queue.as_str();
    let saga = [
        (ENDPOINT_LABEL, endpoint),
        (CONSUMER_TYPE_LABEL, "OrderState"),
    ];
    let submitted = [saga[0], saga[1], (MESSAGE_TYPE_LABEL, "OrderSubmitted")];
    let shipped = [saga[0], saga[1], (MESSAGE_TYPE_LABEL, "OrderShipped")];
    eventually("the faulted event in the error queue", WAIT, || async {
        (probe.queue_count(&format!("{queue}_error")).await == Some(1)).then_some(())
    })
    .await;
    eventually("the submitted event counted", WAIT, || async {
        (metrics.sum(SAGA_TOTAL, &submitted) == 1).then_some(())
    })
    .await;
    assert_eq!(repository.state(order_id).as_deref(), Some("Submitted"));
    assert_eq!(metrics.sum(SAGA_FAULT_TOTAL, &submitted), 0);
    assert_eq!(metrics.sum(SAGA_DURATION, &submitted), 1, "one duration");

    let attempts = metrics.sum(SAGA_TOTAL, &shipped);
    assert!(attempts >= 1);
    assert_eq!(
        metrics.sum(
            SAGA_FAULT_TOTAL,
            &[
                shipped[0],
                shipped[1],
                shipped[2],
                (EXCEPTION_TYPE_LABEL, "SagaError")
            ]
        ),
        attempts,
        "every attempt of the event without an instance failed"
    );
    assert_eq!(metrics.sum(SAGA_IN_PROGRESS, &saga), 0, "none active");
    assert_eq!(
        metrics.sum(CONSUME_TOTAL, &submitted),
        1,
        "the consume instruments label the saga by its short name, as the saga instruments do"
    );
    assert_eq!(
        metrics.sum(
            CONSUME_TOTAL,
            &[(CONSUMER_TYPE_LABEL, "Ferrybus.Tests.Sagas.OrderState")]
        ),
        0,
        "no instrument carries the saga's full .NET type name"
    );
    bus.stop().await;
    probe.cleanup().await;
}
