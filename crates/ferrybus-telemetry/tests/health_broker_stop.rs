//! `/health/ready` across a real broker outage: 200 with RabbitMQ up, 503 within 10 seconds of
//! `rabbitmqctl stop_app`, 200 again after `start_app`. The only test in this binary, because it
//! stops the broker for everyone (the `TcpProxy` variant in `health.rs` runs freely).
#![allow(missing_docs)]

mod common;

use std::time::Duration;

use common::{bus, ready, serve};
use ferrybus_telemetry::{health_router, Health};
use ferrybus_testing::{amqp_url, eventually, unique, Probe};

const LONG: Duration = Duration::from_secs(180);

async fn rabbitmqctl(command: &'static str) {
    let status = tokio::task::spawn_blocking(move || {
        std::process::Command::new("rabbitmqctl")
            .arg(command)
            .status()
    })
    .await
    .unwrap()
    .expect("rabbitmqctl runs");
    assert!(status.success(), "rabbitmqctl {command} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_follows_rabbitmqctl_stop_app_and_start_app() {
    let queue = unique("health-stop");
    let bus = bus(&amqp_url(), &queue).await;
    let addr = serve(health_router(Health::new().rabbitmq(&bus))).await;
    assert_eq!(ready(addr).await.0, 200);

    rabbitmqctl("stop_app").await;
    let outage = eventually("ready to answer 503", Duration::from_secs(10), || async {
        let (status, report) = ready(addr).await;
        (status == 503).then_some(report)
    })
    .await;
    rabbitmqctl("start_app").await;
    assert_eq!(outage["status"], "Unhealthy", "{outage}");

    eventually("ready to answer 200 again", LONG, || async {
        (ready(addr).await.0 == 200).then_some(())
    })
    .await;
    bus.stop().await;
    let probe = Probe::connect(&amqp_url()).await;
    probe.track_endpoint(&queue);
    probe.cleanup().await;
}
