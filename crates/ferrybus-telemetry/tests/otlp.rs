//! OTLP export from `OTEL_*`: spans and metrics of a consumed message reach an OTLP/HTTP
//! receiver on loopback as protobuf, with the service name of `OTEL_SERVICE_NAME`; `/metrics`
//! serves the same instruments. Its own
//! binary: it installs the process's global providers.
#![allow(missing_docs)]

mod common;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::routing::post;
use common::{serve, Ping};
use ferrybus_core::memory::TestHarness;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Publish};
use ferrybus_telemetry::{Telemetry, TelemetryConfig};
use ferrybus_testing::{eventually, unique, WAIT};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;

#[derive(Clone, Default)]
struct Received {
    traces: Arc<Mutex<Vec<Bytes>>>,
    metrics: Arc<Mutex<Vec<Bytes>>>,
}

fn receiver(received: &Received) -> axum::Router {
    let (traces, metrics) = (received.traces.clone(), received.metrics.clone());
    axum::Router::new()
        .route(
            "/v1/traces",
            post(move |body: Bytes| {
                let traces = traces.clone();
                async move { traces.lock().unwrap().push(body) }
            }),
        )
        .route(
            "/v1/metrics",
            post(move |body: Bytes| {
                let metrics = metrics.clone();
                async move { metrics.lock().unwrap().push(body) }
            }),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_reach_an_otlp_receiver() {
    let received = Received::default();
    let addr = serve(receiver(&received)).await;
    let endpoint = format!("http://{addr}");
    let config = TelemetryConfig::from_lookup("unused", |name| match name {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(endpoint.clone()),
        "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("http/protobuf".to_owned()),
        "OTEL_SERVICE_NAME" => Some("ferrybus-otlp-test".to_owned()),
        _ => None,
    })
    .expect("config");
    let telemetry = Telemetry::init(config).expect("telemetry");

    let queue = unique("otlp");
    let harness = TestHarness::builder()
        .configure(ferrybus_otel::instrument)
        .receive_endpoint(&queue, |e| {
            e.consumer(consumer_fn(
                "PingConsumer",
                |_ctx: ConsumeContext<Ping>| async { Ok::<_, ConsumeError>(()) },
            ))
        })
        .start()
        .await
        .expect("harness");
    let id = harness
        .bus()
        .publish(&Ping { n: 1 })
        .await
        .expect("published");
    harness.consumed(id).await.expect("consumed");
    harness.stop().await;

    let process = format!("{queue} process");
    let flushing = telemetry.clone();
    let names = eventually("the spans at the receiver", WAIT, || {
        let flushing = flushing.clone();
        let received = received.clone();
        let process = process.clone();
        async move {
            tokio::task::spawn_blocking(move || flushing.flush())
                .await
                .unwrap();
            let mut names = Vec::new();
            let mut service = None;
            for body in received.traces.lock().unwrap().iter() {
                let request = ExportTraceServiceRequest::decode(body.as_ref()).expect("protobuf");
                for resource in request.resource_spans {
                    for attribute in resource.resource.iter().flat_map(|r| &r.attributes) {
                        if attribute.key == "service.name" {
                            if let Some(Value::StringValue(name)) =
                                attribute.value.as_ref().and_then(|v| v.value.clone())
                            {
                                service = Some(name);
                            }
                        }
                    }
                    for scope in resource.scope_spans {
                        names.extend(scope.spans.into_iter().map(|s| s.name));
                    }
                }
            }
            (names.contains(&process)).then_some((names, service))
        }
    })
    .await;
    assert!(
        names.0.contains(&format!("{queue} receive")),
        "{:?}",
        names.0
    );
    assert_eq!(names.1.as_deref(), Some("ferrybus-otlp-test"));

    let metric_names: Vec<String> = received
        .metrics
        .lock()
        .unwrap()
        .iter()
        .flat_map(|body| {
            ExportMetricsServiceRequest::decode(body.as_ref())
                .expect("protobuf")
                .resource_metrics
        })
        .flat_map(|r| r.scope_metrics)
        .flat_map(|s| s.metrics)
        .map(|m| m.name)
        .collect();
    assert!(
        metric_names
            .iter()
            .any(|n| n == "messaging.masstransit.consume"),
        "{metric_names:?}"
    );

    // The same instruments in Prometheus text at /metrics.
    let metrics = serve(ferrybus_telemetry::metrics_router(&telemetry)).await;
    let (status, text) = common::get(metrics, "/metrics").await;
    assert_eq!(status, 200);
    let series = format!(
        "messaging_masstransit_consume_total{{messaging_masstransit_consumer_type=\"PingConsumer\",messaging_masstransit_destination=\"{queue}\""
    );
    assert!(text.contains(&series), "{text}");

    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
}
