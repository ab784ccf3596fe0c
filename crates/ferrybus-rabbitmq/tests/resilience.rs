//! Broker restart while messages flow: nothing is lost, the endpoint resumes by itself.
//! The only test in this binary, because it stops the broker for everyone.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Publish, SendOptions};
use ferrybus_rabbitmq::{Event, RabbitMqBus};
use ferrybus_testing::{amqp_url, eventually, unique, wait_event, Probe};

test_message!(Tick, "FerrybusTests.Restart:Tick");

/// Messages published after the broker is back.
const AFTER: u32 = 50;
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

/// Publishes until confirmed, keeping the message id, so a publish that failed mid-outage is
/// retried as the same message.
async fn publish_until_confirmed(bus: &RabbitMqBus, n: u32) -> uuid::Uuid {
    let id = uuid::Uuid::now_v7();
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        match bus
            .publish_with(&Tick { n, fail: false }, SendOptions::new().message_id(id))
            .await
        {
            Ok(id) => return id,
            Err(error) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "publish never succeeded: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_loses_nothing_and_consumers_resume() {
    let queue = unique("restart");
    let seen: Arc<Mutex<HashSet<uuid::Uuid>>> = Arc::default();
    let s = seen.clone();
    let consumer = consumer_fn("TickConsumer", move |ctx: ConsumeContext<Tick>| {
        s.lock().unwrap().insert(ctx.message_id().unwrap());
        async { Ok::<_, ConsumeError>(()) }
    });
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .reconnect_backoff(Duration::from_millis(100), Duration::from_secs(1))
            .publish_timeout(Duration::from_secs(60))
            .receive_endpoint(&queue, |e| e.consumer(consumer)),
    )
    .await;
    let mut events = bus.events();

    // Publishes without pause through the outage until told the broker is back, then AFTER more.
    let back = tokio_util::sync::CancellationToken::new();
    let publisher = tokio::spawn({
        let (bus, back) = (bus.clone(), back.clone());
        async move {
            let mut ids = Vec::new();
            let mut n = 0;
            while !back.is_cancelled() {
                ids.push(publish_until_confirmed(&bus, n).await);
                n += 1;
            }
            for _ in 0..AFTER {
                ids.push(publish_until_confirmed(&bus, n).await);
                n += 1;
            }
            ids
        }
    });
    eventually("some messages consumed", LONG, || async {
        (seen.lock().unwrap().len() >= 20).then_some(())
    })
    .await;

    rabbitmqctl("stop_app").await;
    wait_event(&mut events, LONG, |e| {
        matches!(e, Event::Disconnected { .. })
    })
    .await;
    rabbitmqctl("start_app").await;
    let reconnected = wait_event(&mut events, LONG, |e| {
        matches!(e, Event::Reconnected { .. })
    })
    .await;
    let Event::Reconnected { generation } = reconnected else {
        unreachable!()
    };
    wait_event(
        &mut events,
        LONG,
        |e| matches!(e, Event::EndpointReady { generation: g, .. } if *g >= generation),
    )
    .await;
    back.cancel();

    let published = tokio::time::timeout(LONG, publisher)
        .await
        .expect("publisher finishes")
        .unwrap();
    eventually("every message consumed", LONG, || async {
        let seen = seen.lock().unwrap();
        published.iter().all(|id| seen.contains(id)).then_some(())
    })
    .await;
    let probe = Probe::connect(&amqp_url()).await;
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Restart:Tick"]);
    eventually("the queue drained", LONG, || async {
        (probe.queue_count(&queue).await == Some(0)).then_some(())
    })
    .await;
    assert_eq!(
        probe.queue_count(&format!("{queue}_error")).await,
        None,
        "nothing faulted"
    );
    bus.stop().await;
    probe.cleanup().await;
}
