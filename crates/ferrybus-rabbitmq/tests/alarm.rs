//! `stop()` during a broker memory alarm: the broker blocks every connection that publishes and
//! reads nothing more from it (no `basic.cancel`, no `channel.close`, no publisher confirm), and
//! the bus still stops, by its shutdown timeout.
//!
//! The only test in this binary, because the alarm blocks every publisher on the broker; the
//! memory watermark is restored when the test ends, whether it passes or not.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::time::Duration;

use common::*;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Publish};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_testing::{amqp_url, eventually, unique, Probe, WAIT};

test_message!(Order, "FerrybusTests.Alarm:Order");

/// A memory alarm raised for as long as it lives: the watermark set so low that the broker's
/// memory is above it, the old watermark set back on drop.
struct MemoryAlarm {
    old: Vec<String>,
}

impl MemoryAlarm {
    fn raise() -> Self {
        // `0.4` (relative) or `{absolute,1073741824}`.
        let printed = rabbit_eval("vm_memory_monitor:get_vm_memory_high_watermark().");
        let old = match printed.strip_prefix("{absolute,") {
            Some(rest) => vec!["absolute".to_owned(), rest.trim_end_matches('}').to_owned()],
            None => vec![printed],
        };
        rabbitmqctl(&["set_vm_memory_high_watermark", "0.0000001"]);
        Self { old }
    }

    fn is_raised() -> bool {
        rabbit_eval("rabbit_alarm:get_alarms().").contains("memory")
    }
}

impl Drop for MemoryAlarm {
    fn drop(&mut self) {
        let mut args = vec!["set_vm_memory_high_watermark"];
        args.extend(self.old.iter().map(String::as_str));
        rabbitmqctl(&args);
    }
}

/// The state the broker reports (`running`, `blocking`, `blocked` …) for the connection whose
/// client named it `name`, if there is one.
fn connection_state(name: &str) -> Option<String> {
    let listed = rabbitmqctl(&[
        "list_connections",
        "-q",
        "--no-table-headers",
        "state",
        "client_properties",
    ]);
    let named = format!("{{\"connection_name\",\"{name}\"}}");
    listed.lines().find_map(|line| {
        let (state, properties) = line.split_once('\t')?;
        properties.contains(&named).then(|| state.trim().to_owned())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_returns_during_a_memory_alarm_with_confirms_pending() {
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("alarm");
    let name = unique("alarm-connection");
    probe.track_endpoint(&queue);
    probe.track(&[], &["FerrybusTests.Alarm:Order"]);
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .connection_name(name.as_str())
            .shutdown_timeout(Duration::from_secs(1))
            // Publishes wait for their confirms longer than the test: they are pending at stop.
            .publish_timeout(Duration::from_secs(300))
            .receive_endpoint(&queue, |e| {
                e.consumer(consumer_fn("Orders", |_: ConsumeContext<Order>| async {
                    Ok::<_, ConsumeError>(())
                }))
            }),
    )
    .await;
    bus.publish(&Order { n: 0, fail: false }).await.unwrap();

    let alarm = MemoryAlarm::raise();
    eventually("the memory alarm", WAIT, || async {
        MemoryAlarm::is_raised().then_some(())
    })
    .await;
    let mut publishes = tokio::task::JoinSet::new();
    for n in 1..=5 {
        let bus = bus.clone();
        publishes.spawn(async move { bus.publish(&Order { n, fail: false }).await.map(drop) });
    }
    eventually("the broker to block the bus's connection", WAIT, || async {
        let name = name.clone();
        let state = tokio::task::spawn_blocking(move || connection_state(&name))
            .await
            .unwrap();
        (state.as_deref() == Some("blocked")).then_some(())
    })
    .await;

    // The bound is generous: what is asserted is that stop returns at all while the broker reads
    // nothing from the connection.
    let stopped = tokio::time::timeout(WAIT, bus.stop()).await;
    drop(alarm);
    publishes.abort_all();
    assert!(stopped.is_ok(), "stop() did not return during the alarm");
    assert!(bus.is_stopped());
    eventually("the alarm to clear", WAIT, || async {
        (!MemoryAlarm::is_raised()).then_some(())
    })
    .await;
    probe.cleanup().await;
}
