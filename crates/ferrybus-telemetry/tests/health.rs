//! `/health/ready` over a connection that a `TcpProxy` cuts: 200 with the broker up, 503 within
//! 10 seconds of the cut, 200 again after the restore; `/health/live` stays 200; the database
//! and outbox-backlog parts on a real PostgreSQL.
#![allow(missing_docs)]

mod common;

use std::time::Duration;

use common::{bus, get, ready, serve};
use ferrybus_telemetry::{health_router, BacklogThreshold, Health, HealthStatus};
use ferrybus_testing::{
    amqp_url, broker_socket, eventually, unique, Probe, Shape, TcpProxy, TestSchema, WAIT,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_turns_503_when_the_broker_connection_is_cut_and_200_after_restore() {
    let proxy = TcpProxy::start(&broker_socket(), true).await;
    let queue = unique("health-cut");
    let probe = Probe::connect(&amqp_url()).await;
    probe.track_endpoint(&queue);
    let bus = bus(&proxy.url(&amqp_url()), &queue).await;
    let addr = serve(health_router(Health::new().rabbitmq(&bus))).await;

    let (status, report) = ready(addr).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["status"], "Healthy");
    let parts = report["parts"].as_array().unwrap();
    assert!(parts
        .iter()
        .any(|p| p["name"] == "broker" && p["status"] == "Healthy"));
    assert!(parts
        .iter()
        .any(|p| p["name"] == format!("endpoint:{queue}") && p["status"] == "Healthy"));

    proxy.cut();
    let report = eventually("ready to answer 503", Duration::from_secs(10), || async {
        let (status, report) = ready(addr).await;
        (status == 503).then_some(report)
    })
    .await;
    assert_eq!(report["status"], "Unhealthy");
    let broker = report["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "broker")
        .cloned()
        .unwrap();
    assert_eq!(broker["status"], "Unhealthy", "{report}");
    assert!(broker["reason"].as_str().unwrap().contains("not connected"));
    assert_eq!(
        get(addr, "/health/live").await.0,
        200,
        "live while the broker is away"
    );

    proxy.restore();
    eventually("ready to answer 200 again", WAIT, || async {
        (ready(addr).await.0 == 200).then_some(())
    })
    .await;

    bus.stop().await;
    let (status, report) = ready(addr).await;
    assert_eq!(status, 503, "a stopped bus is not ready: {report}");
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_and_the_outbox_backlog_are_parts_of_the_health() {
    let schema = TestSchema::new(Shape::Snake).await;
    let storage = schema.storage().await;
    let health = Health::new().postgres(&storage, BacklogThreshold::default());
    let report = health.report().await;
    assert_eq!(report.status, HealthStatus::Healthy, "{report:?}");
    let names: Vec<&str> = report.parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["database", "outbox"]);

    // One bus-outbox message waiting, with a threshold of none: degraded, with the reason.
    let factory = ferrybus_core::outgoing::MessageFactory::new(
        ferrybus_core::address::HostAddress::new("rabbitmq", "localhost", None, "/"),
    );
    let outbox = ferrybus_sea_orm::BusOutbox::new(&storage, &factory);
    // Written inside a trace (an HTTP handler's span): the row keeps it in its headers, as
    // MassTransit's outbox does, for the delivery to continue it.
    use ferrybus_core::Publish as _;
    use opentelemetry::trace::TraceContextExt as _;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let remote = ferrybus_otel::parse_traceparent(traceparent).unwrap();
    let cx = opentelemetry::Context::new().with_remote_span_context(remote);
    let publisher = outbox.on(storage.db());
    let written = {
        let _current = cx.attach();
        publisher.publish(&common::Ping { n: 1 })
    };
    written.await.expect("written");
    let headers = schema
        .count(
            &format!(
                "SELECT count(*) FROM {} WHERE {}::jsonb ->> 'MT-Activity-Id' = $1",
                schema.t("message"),
                schema.c("Headers")
            ),
            vec![traceparent.into()],
        )
        .await;
    assert_eq!(headers, 1, "the row's headers carry MT-Activity-Id");
    let strict = BacklogThreshold {
        pending: 0,
        ..BacklogThreshold::default()
    };
    let report = Health::new().postgres(&storage, strict).report().await;
    assert_eq!(report.status, HealthStatus::Degraded, "{report:?}");
    let outbox_part = &report.parts[1];
    assert_eq!(outbox_part.status, HealthStatus::Degraded);
    assert!(
        outbox_part.reason.contains("1 messages waiting"),
        "{outbox_part:?}"
    );
}
