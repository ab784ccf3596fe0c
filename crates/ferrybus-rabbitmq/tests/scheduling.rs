//! Scheduled messages on the real broker (no delayed-message plugin: TTL queues): sent from the
//! bus and from a consumer, published, kept by the broker across a restart of the bus,
//! cancelled; and a consumer redelivering its message later.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Publish};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_testing::{amqp_url, eventually, unique, Probe, WAIT};
use uuid::Uuid;

test_message!(Reminder, "FerrybusTests.Scheduling:Reminder");
test_message!(Trigger, "FerrybusTests.Scheduling:Trigger");

const DELAY: Duration = Duration::from_millis(1500);

/// What an endpoint saw: the message, when it arrived, and its scheduling token header.
type Arrivals = Arc<Mutex<Vec<(u32, Instant, Option<String>)>>>;

fn arrivals(seen: Arrivals) -> impl ferrybus_core::Consumer<Reminder> {
    consumer_fn("ReminderConsumer", move |ctx: ConsumeContext<Reminder>| {
        let token = ctx
            .headers()
            .get_str("MT-Scheduling-TokenId")
            .map(str::to_owned);
        seen.lock()
            .unwrap()
            .push((ctx.message().n, Instant::now(), token));
        async { Ok::<_, ConsumeError>(()) }
    })
}

async fn arrived(seen: &Arrivals, n: u32) -> (Instant, Option<String>) {
    eventually(&format!("reminder {n}"), WAIT, || async {
        let seen = seen.lock().unwrap();
        seen.iter()
            .find(|(m, _, _)| *m == n)
            .map(|(_, at, token)| (*at, token.clone()))
    })
    .await
}

fn track(probe: &Probe, queue: &str) {
    probe.track_endpoint(queue);
    let delay_queue = format!("{queue}_delay_{}", DELAY.as_millis());
    probe.track(&[&delay_queue], &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_scheduled_from_the_bus_arrives_after_its_delay() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("schedule-bus");
    track(&probe, &queue);
    let seen = Arrivals::default();
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&queue, |e| e.consumer(arrivals(seen.clone()))),
    )
    .await;
    let sent = Instant::now();
    let scheduled = bus
        .schedule_send(
            &format!("queue:{queue}"),
            DELAY,
            &Reminder { n: 1, fail: false },
        )
        .await
        .unwrap();
    let (at, token) = arrived(&seen, 1).await;
    assert!(at - sent >= DELAY, "arrived after {:?}", at - sent);
    assert_eq!(token, Some(scheduled.token_id.to_string()));
    assert!(scheduled.destination_address.contains(&queue));
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_scheduled_from_a_consumer_arrives_after_its_delay() {
    let probe = Probe::connect(&amqp_url()).await;
    let (input, target) = (unique("schedule-from"), unique("schedule-to"));
    track(&probe, &input);
    track(&probe, &target);
    let seen = Arrivals::default();
    let address = format!("queue:{target}");
    let scheduler = consumer_fn("Scheduler", move |ctx: ConsumeContext<Trigger>| {
        let address = address.clone();
        async move {
            let reminder = Reminder {
                n: ctx.message().n,
                fail: false,
            };
            ctx.schedule_send(&address, DELAY, &reminder).await?;
            Ok::<_, ConsumeError>(())
        }
    });
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&input, |e| e.consumer(scheduler))
            .receive_endpoint(&target, |e| e.consumer(arrivals(seen.clone()))),
    )
    .await;
    let sent = Instant::now();
    bus.send(&format!("queue:{input}"), &Trigger { n: 7, fail: false })
        .await
        .unwrap();
    let (at, token) = arrived(&seen, 7).await;
    assert!(at - sent >= DELAY, "arrived after {:?}", at - sent);
    assert!(token.is_some(), "the scheduling token travels with it");
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_publish_reaches_the_subscribers_after_its_delay() {
    test_message!(Due, "FerrybusTests.Scheduling:Due");
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("schedule-publish");
    track(&probe, &queue);
    probe.track(
        &[&format!(
            "FerrybusTests.Scheduling:Due_delay_{}",
            DELAY.as_millis()
        )],
        &["FerrybusTests.Scheduling:Due"],
    );
    let seen: Seen<Due> = Seen::default();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.consumer(consumer_fn("DueConsumer", recorder(seen.clone())))
        }),
    )
    .await;
    let sent = Instant::now();
    bus.schedule_publish(DELAY, &Due { n: 3, fail: false })
        .await
        .unwrap();
    eventually("the published message", WAIT, || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert!(sent.elapsed() >= DELAY);
    assert_eq!(*seen.lock().unwrap(), [Due { n: 3, fail: false }]);
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_message_survives_a_restart_of_the_bus() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("schedule-restart");
    track(&probe, &queue);
    let address = format!("queue:{queue}");
    // The first bus schedules and stops before the message is due; it consumes nothing.
    let first = start(RabbitMqBus::builder(&amqp_url())).await;
    let scheduled = first
        .schedule_send(&address, DELAY, &Reminder { n: 1, fail: false })
        .await
        .unwrap();
    first.stop().await;
    drop(first);
    assert_eq!(
        probe.queue_count(&queue).await,
        Some(0),
        "not delivered yet"
    );
    let seen = Arrivals::default();
    let second = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&queue, |e| e.consumer(arrivals(seen.clone()))),
    )
    .await;
    let (_, token) = arrived(&seen, 1).await;
    assert_eq!(token, Some(scheduled.token_id.to_string()));
    second.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_scheduled_message_is_not_delivered() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("schedule-cancel");
    track(&probe, &queue);
    let seen = Arrivals::default();
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .receive_endpoint(&queue, |e| e.consumer(arrivals(seen.clone()))),
    )
    .await;
    let address = format!("queue:{queue}");
    let cancelled = bus
        .schedule_send(&address, DELAY, &Reminder { n: 1, fail: false })
        .await
        .unwrap();
    let kept = bus
        .schedule_send(&address, DELAY, &Reminder { n: 2, fail: false })
        .await
        .unwrap();
    bus.cancel_scheduled_send(cancelled.token_id);
    // One delay queue expires its messages in order: once the second arrived, the first was
    // settled before it.
    let (_, token) = arrived(&seen, 2).await;
    assert_eq!(token, Some(kept.token_id.to_string()));
    let numbers: Vec<u32> = seen.lock().unwrap().iter().map(|(n, _, _)| *n).collect();
    assert_eq!(
        numbers,
        [2],
        "the cancelled message never reached the consumer"
    );
    eventually("the cancelled message acknowledged", WAIT, || async {
        (probe.queue_count(&queue).await == Some(0)).then_some(())
    })
    .await;
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_redelivers_its_message_later() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("redeliver-self");
    probe.track_endpoint(&queue);
    probe.track(&[&format!("{queue}_delay_500")], &[]);
    type Seen = Arc<Mutex<Vec<(u32, Option<Uuid>, Option<String>, Instant)>>>;
    let seen = Seen::default();
    let s = seen.clone();
    let consumer = consumer_fn("Redeliverer", move |ctx: ConsumeContext<Trigger>| {
        let s = s.clone();
        async move {
            let original = ctx
                .headers()
                .get_str("MT-OriginalMessageId")
                .map(str::to_owned);
            s.lock().unwrap().push((
                ctx.redelivery_count(),
                ctx.message_id(),
                original,
                Instant::now(),
            ));
            if ctx.redelivery_count() == 0 {
                ctx.redeliver(Duration::from_millis(500)).await?;
            }
            Ok::<_, ConsumeError>(())
        }
    });
    let bus =
        start(RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| e.consumer(consumer)))
            .await;
    let id = bus
        .send(&format!("queue:{queue}"), &Trigger { n: 1, fail: false })
        .await
        .unwrap();
    eventually("the redelivered copy", WAIT, || async {
        (seen.lock().unwrap().len() >= 2).then_some(())
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    let (first, second) = (&seen[0], &seen[1]);
    assert_eq!((first.0, first.1, first.2.as_deref()), (0, Some(id), None));
    assert_eq!(second.0, 1, "MT-Redelivery-Count incremented");
    assert_ne!(second.1, Some(id), "a new message id");
    assert_eq!(second.2, Some(id.to_string()), "MT-OriginalMessageId");
    assert!(second.3 - first.3 >= Duration::from_millis(500));
    assert_eq!(seen.len(), 2, "consumed once redelivered");
    bus.stop().await;
    probe.cleanup().await;
}
