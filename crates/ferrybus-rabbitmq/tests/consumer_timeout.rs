//! A consumer slower than RabbitMQ's `consumer_timeout`: the broker closes the delivery's channel
//! and redelivers the message; the slow attempt, when it fails at last, neither moves its
//! delivery to `<queue>_error` nor publishes a `Fault<T>` (it no longer holds the delivery),
//! and the redelivered copy is handled once.
//!
//! The only test in this binary: it shortens the broker's `consumer_timeout` (RabbitMQ 3.10 has
//! no per-queue `x-consumer-timeout`) and the channel tick that checks it, for every channel
//! opened meanwhile, and sets both back when it ends, whether it passes or not.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Fault, Message, Publish};
use ferrybus_rabbitmq::{Event, RabbitMqBus};
use ferrybus_testing::{amqp_url, eventually, unique, wait_event, Probe, WAIT};

test_message!(Report, "FerrybusTests.ConsumerTimeout:Report");

/// The broker's consumer timeout: what a channel opened now applies.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A broker setting (`application:set_env(rabbit, Key, Value)`) changed for as long as it lives.
struct BrokerEnv {
    key: &'static str,
    old: String,
}

impl BrokerEnv {
    fn set(key: &'static str, value: u64) -> Self {
        // `{ok,1800000}`, or `undefined` when unset.
        let old = rabbit_eval(&format!("application:get_env(rabbit, {key})."));
        rabbit_eval(&format!("application:set_env(rabbit, {key}, {value})."));
        Self { key, old }
    }
}

impl Drop for BrokerEnv {
    fn drop(&mut self) {
        let key = self.key;
        let restore = match self
            .old
            .strip_prefix("{ok,")
            .and_then(|v| v.strip_suffix('}'))
        {
            Some(value) => format!("application:set_env(rabbit, {key}, {value})."),
            None => format!("application:unset_env(rabbit, {key})."),
        };
        rabbit_eval(&restore);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_lost_to_the_consumer_timeout_is_neither_moved_nor_faulted() {
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("consumer-timeout");
    let error_queue = format!("{queue}_error");
    probe.track_endpoint(&queue);
    let fault_exchange = Fault::<Report>::message_type().entity_name().to_owned();
    probe.track(
        &[],
        &["FerrybusTests.ConsumerTimeout:Report", &fault_exchange],
    );
    let faults = probe.bind_probe(&fault_exchange).await;

    let _timeout = BrokerEnv::set("consumer_timeout", TIMEOUT.as_millis() as u64);
    let _tick = BrokerEnv::set("channel_tick_interval", 500);

    let attempts = Arc::new(AtomicU32::new(0));
    let slow_done = Arc::new(AtomicU32::new(0));
    let consumed = Arc::new(AtomicU32::new(0));
    let (a, d, c) = (attempts.clone(), slow_done.clone(), consumed.clone());
    let consumer = consumer_fn("ReportConsumer", move |_ctx: ConsumeContext<Report>| {
        let attempt = a.fetch_add(1, Ordering::SeqCst);
        let (d, c) = (d.clone(), c.clone());
        async move {
            if attempt == 0 {
                // Slower than the consumer timeout, then failing.
                tokio::time::sleep(TIMEOUT * 3).await;
                d.fetch_add(1, Ordering::SeqCst);
                return Err(ConsumeError::handler("report took too long and failed"));
            }
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    });
    let bus =
        start(RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| e.consumer(consumer)))
            .await;
    let mut events = bus.events();
    let id = bus
        .publish(&Report { n: 1, fail: false })
        .await
        .unwrap()
        .to_string();

    // The broker took the delivery back from the slow attempt and redelivered it.
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Consumed { message_id: Some(m), .. } if *m == id),
    )
    .await;
    // The slow attempt failed at last, and its settlement found the channel gone.
    eventually("the slow attempt to fail", WAIT, || async {
        (slow_done.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Returned { message_id: Some(m), .. } if *m == id),
    )
    .await;

    assert_eq!(attempts.load(Ordering::SeqCst), 2, "delivered twice");
    assert_eq!(
        consumed.load(Ordering::SeqCst),
        1,
        "the redelivered copy, once"
    );
    assert_eq!(
        probe.queue_count(&error_queue).await.unwrap_or(0),
        0,
        "no copy in the error queue"
    );
    assert_eq!(
        probe.queue_count(&faults).await,
        Some(0),
        "no Fault<Report>"
    );
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    bus.stop().await;
    probe.cleanup().await;
}
