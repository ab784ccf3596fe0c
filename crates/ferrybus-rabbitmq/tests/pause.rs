//! Pausing endpoints on the real broker: a transient failure gives the delivery back and pauses
//! consuming (no hot loop, no retry spent, nothing in `_error`); a failing move to `_error`
//! pauses instead of requeueing in a loop; a kill switch stops and restarts an endpoint; a
//! quorum queue's delivery limit ends in `_error` with the fault, never in a dropped message.
#![allow(missing_docs, unreachable_pub)]

mod common;

use ferrybus_rabbitmq::QueueEndpointExt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use ferrybus_core::endpoint::BoxEndpointService;
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Delivery, Message, Publish, RetryPolicy,
    SendOptions, Settlement,
};
use ferrybus_rabbitmq::{Event, RabbitMqBus};
use ferrybus_resilience::{KillSwitchLayer, KillSwitchOptions};
use ferrybus_testing::{amqp_url, eventually, header_str, unique, wait_event, Probe, WAIT};
use lapin::options::BasicGetOptions;
use lapin::types::FieldTable;
use tokio::sync::broadcast;
use tower::ServiceExt;

test_message!(Job, "FerrybusTests.Pause:Job");

/// Collects the events of `queue` until `until` holds for the list.
async fn events_until(
    events: &mut broadcast::Receiver<Event>,
    until: impl Fn(&[Event]) -> bool,
) -> Vec<Event> {
    let mut seen = Vec::new();
    let collect = async {
        while !until(&seen) {
            if let Ok(event) = events.recv().await {
                seen.push(event);
            }
        }
    };
    tokio::time::timeout(WAIT, collect)
        .await
        .unwrap_or_else(|_| panic!("timed out; events so far: {seen:?}"));
    seen
}

fn count(events: &[Event], f: impl Fn(&Event) -> bool) -> usize {
    events.iter().filter(|e| f(e)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_pauses_the_endpoint_until_the_dependency_answers() {
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("pause-transient");
    probe.track_endpoint(&queue);
    let down = Arc::new(AtomicBool::new(true));
    let attempts = Arc::new(AtomicU32::new(0));
    let (d, a) = (down.clone(), attempts.clone());
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.bind_message_types(false)
                .retry(RetryPolicy::immediate(5))
                .consumer(consumer_fn(
                    "Dependent",
                    move |_ctx: ConsumeContext<Job>| {
                        a.fetch_add(1, Ordering::SeqCst);
                        let down = d.load(Ordering::SeqCst);
                        async move {
                            if down {
                                // What a refused connection to a database or an API looks like.
                                Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)
                                    .into())
                            } else {
                                Ok::<(), ConsumeError>(())
                            }
                        }
                    },
                ))
        }),
    )
    .await;
    let mut events = bus.events();
    bus.send(&format!("queue:{queue}"), &Job { n: 1, fail: false })
        .await
        .unwrap();

    // Paused and resumed (no probe for `Other`: after the back-off the next delivery probes)
    // at least twice while the dependency is down.
    let seen = events_until(&mut events, |seen| {
        count(seen, |e| matches!(e, Event::EndpointResumed { .. })) >= 2
    })
    .await;
    let paused = seen
        .iter()
        .find_map(|e| match e {
            Event::EndpointPaused {
                queue: q,
                cause,
                reason,
            } if *q == queue => Some((cause.clone(), reason.clone())),
            _ => None,
        })
        .expect("an EndpointPaused event");
    assert_eq!(paused.0, "transient:other");
    assert!(paused.1.contains("refused"), "{}", paused.1);
    let state = bus.endpoint_states();
    assert_eq!(state.len(), 1);
    // Every failed attempt gave the delivery back and paused: no hot loop, no retry spent.
    let returned = count(&seen, |e| matches!(e, Event::Returned { .. }));
    let pauses = count(&seen, |e| matches!(e, Event::EndpointPaused { .. }));
    assert!(pauses >= 2);
    assert!(
        returned <= pauses,
        "{returned} deliveries given back for {pauses} pauses: {seen:?}"
    );
    assert!(attempts.load(Ordering::SeqCst) as usize <= pauses + 1);
    assert_eq!(
        probe
            .queue_count(&format!("{queue}_error"))
            .await
            .unwrap_or(0),
        0
    );

    // The dependency answers: the message is consumed, once.
    down.store(false, Ordering::SeqCst);
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Consumed { queue: q, .. } if *q == queue),
    )
    .await;
    assert!(!bus.endpoint_states()[0].1.is_paused());
    assert_eq!(
        probe
            .queue_count(&format!("{queue}_error"))
            .await
            .unwrap_or(0),
        0
    );
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_move_to_the_error_queue_pauses_instead_of_looping() {
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("pause-move");
    probe.track_endpoint(&queue);
    // An `_error` queue declared with other flags: the move's declaration fails
    // (PRECONDITION_FAILED) until it is deleted.
    let error_queue = format!("{queue}_error");
    probe
        .declare_queue(&error_queue, false, FieldTable::default())
        .await
        .expect("declared");
    let attempts = Arc::new(AtomicU32::new(0));
    let a = attempts.clone();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.bind_message_types(false).consumer(consumer_fn(
                "Failing",
                move |_ctx: ConsumeContext<Job>| {
                    a.fetch_add(1, Ordering::SeqCst);
                    async { Err::<(), _>(ConsumeError::handler("card declined")) }
                },
            ))
        }),
    )
    .await;
    let mut events = bus.events();
    bus.send(&format!("queue:{queue}"), &Job { n: 1, fail: true })
        .await
        .unwrap();
    let seen = events_until(&mut events, |seen| {
        count(seen, |e| matches!(e, Event::EndpointPaused { .. })) >= 2
    })
    .await;
    let cause = seen
        .iter()
        .find_map(|e| match e {
            Event::EndpointPaused { cause, .. } => Some(cause.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(cause, "transient:broker");
    let pauses = count(&seen, |e| matches!(e, Event::EndpointPaused { .. }));
    assert!(
        attempts.load(Ordering::SeqCst) as usize <= pauses + 1,
        "each failed move paused the endpoint"
    );

    // Fixed: the message lands in `_error` with its fault.
    probe.delete_queue(&error_queue).await;
    let moved = probe.wait_get(&error_queue).await;
    assert_eq!(
        header_str(&moved, "MT-Fault-Message").as_deref(),
        Some("card declined")
    );
    bus.stop().await;
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_switch_stops_the_endpoint_and_restarts_it() {
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("pause-kill");
    probe.track_endpoint(&queue);
    let seen = Seen::<Job>::default();
    let record = recorder(seen.clone());
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.bind_message_types(false)
                .concurrency(1)
                .layer(KillSwitchLayer::new(
                    KillSwitchOptions::default()
                        .activation_threshold(2)
                        .trip_threshold(50)
                        .restart_timeout(Duration::from_secs(2)),
                ))
                .consumer(consumer_fn("Jobs", move |ctx: ConsumeContext<Job>| {
                    let fail = ctx.message().fail;
                    let record = record(ctx);
                    async move {
                        record.await?;
                        if fail {
                            return Err(ConsumeError::handler("job failed"));
                        }
                        Ok(())
                    }
                }))
        }),
    )
    .await;
    let mut events = bus.events();
    let address = format!("queue:{queue}");
    for n in 0..3 {
        bus.send(&address, &Job { n, fail: true }).await.unwrap();
    }
    let paused = wait_event(&mut events, WAIT, |e| {
        matches!(e, Event::EndpointPaused { .. })
    })
    .await;
    let Event::EndpointPaused { cause, .. } = paused else {
        unreachable!()
    };
    assert_eq!(cause, "kill-switch");
    // Stopped: what arrives now waits in the queue.
    bus.send(&address, &Job { n: 10, fail: false })
        .await
        .unwrap();
    eventually("the message to wait in the queue", WAIT, || async {
        (probe.queue_count(&queue).await == Some(1)).then_some(())
    })
    .await;
    assert!(!seen.lock().unwrap().iter().any(|j| j.n == 10));
    // Restarted: it is consumed.
    wait_event(&mut events, WAIT, |e| {
        matches!(e, Event::EndpointResumed { .. })
    })
    .await;
    eventually("the waiting message to be consumed", WAIT, || async {
        seen.lock().unwrap().iter().any(|j| j.n == 10).then_some(())
    })
    .await;
    assert_eq!(probe.queue_count(&format!("{queue}_error")).await, Some(3));
    bus.stop().await;
    probe.cleanup().await;
}

/// Counts the settlements of one kind an endpoint's deliveries end with, as any endpoint layer
/// sees them.
#[derive(Clone, Default)]
struct CountingLayer {
    faults: Arc<AtomicU32>,
    receive_faults: Arc<AtomicU32>,
}

impl tower::Layer<BoxEndpointService> for CountingLayer {
    type Service = BoxEndpointService;

    fn layer(&self, inner: BoxEndpointService) -> BoxEndpointService {
        let counts = self.clone();
        BoxEndpointService::new(tower::service_fn(move |delivery: Delivery| {
            let (inner, counts) = (inner.clone(), counts.clone());
            async move {
                let settlement = inner.oneshot(delivery).await?;
                if let Settlement::Fault(faulted) = &settlement {
                    counts.faults.fetch_add(1, Ordering::SeqCst);
                    if faulted.receive_fault {
                        counts.receive_faults.fetch_add(1, Ordering::SeqCst);
                    }
                }
                Ok::<_, std::convert::Infallible>(settlement)
            }
        }))
    }
}

/// A poison message that crashed its consumer's process each time it was delivered reaches the
/// quorum queue's delivery limit: the endpoint (not the transport) faults it, unconsumed, as it
/// faults every other delivery — through the endpoint's layers, with a `ReceiveFault` naming the
/// message's id and types — instead of the broker dropping it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_at_the_quorum_delivery_limit_ends_in_error_with_its_fault() {
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("pause-poison");
    let faults = unique("pause-poison-faults");
    probe.track_endpoint(&queue);
    probe.track(&[&faults], &[&faults]);
    let seen = Seen::<Job>::default();
    let counting = CountingLayer::default();
    let builder = || {
        let record = recorder(seen.clone());
        let counting = counting.clone();
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.bind_message_types(false)
                .quorum()
                .delivery_limit(3)
                .layer(counting)
                .consumer(consumer_fn("Jobs", record))
        })
    };
    // Declare the topology, then stop: the message waits.
    start(builder()).await.stop().await;
    let sender = start(RabbitMqBus::builder(&amqp_url())).await;
    // Through the endpoint's exchange (`queue:` would declare a classic queue of that name); its
    // faults go to a queue of this test's own.
    let options = SendOptions::new().fault_address(format!("queue:{faults}"));
    let id = sender
        .send_with(
            &format!("exchange:{queue}"),
            &Job { n: 1, fail: false },
            options,
        )
        .await
        .unwrap();
    sender.stop().await;

    // A poison message: a consumer took it three times and died each time (its channel closed
    // without an ack): the quorum queue counts 3 deliveries.
    let connection =
        lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
            .await
            .unwrap();
    for _ in 0..3 {
        let channel = connection.create_channel().await.unwrap();
        let got = eventually("the message", WAIT, || async {
            channel
                .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: false })
                .await
                .unwrap()
        })
        .await;
        drop(got);
        channel.close(200, "crashed".into()).await.unwrap();
    }
    let _ = connection.close(200, "".into()).await;

    // The fourth delivery is the last the broker makes: it goes to `_error`, unconsumed.
    let bus = start(builder()).await;
    let moved = probe.wait_get(&format!("{queue}_error")).await;
    let reason = header_str(&moved, "MT-Fault-Message").unwrap_or_default();
    assert!(reason.contains("delivery limit is 3"), "{reason}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "the consumer did not run again"
    );
    assert_eq!(probe.queue_count(&queue).await, Some(0));
    // The endpoint's layers saw it settle as a fault, as they see every fault.
    assert_eq!(counting.faults.load(Ordering::SeqCst), 1);
    assert_eq!(counting.receive_faults.load(Ordering::SeqCst), 1);
    // Its fault names the message as every fault does: its id and its types.
    let fault = probe.wait_get(&faults).await;
    let fault: serde_json::Value = serde_json::from_slice(&fault.delivery.data).unwrap();
    assert_eq!(
        fault["messageType"][0],
        "urn:message:MassTransit:ReceiveFault"
    );
    assert_eq!(fault["message"]["faultedMessageId"], id.to_string());
    assert_eq!(
        fault["message"]["faultMessageTypes"],
        serde_json::json!(Job::message_type().urns())
    );
    assert!(fault["message"]["exceptions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("delivery limit is 3"));
    bus.stop().await;
    probe.cleanup().await;
}

/// A message whose failure looks transient (a refused connection) while the other messages of
/// the endpoint get through is poison, not an outage: after its strikes it is handled as an
/// ordinary failure and lands in `_error` with its fault, instead of pausing the endpoint every
/// time it comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_fails_transiently_while_others_succeed_ends_in_error() {
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("pause-poison");
    probe.track_endpoint(&queue);
    let good = Arc::new(AtomicU32::new(0));
    let g = good.clone();
    let bus = start(
        RabbitMqBus::builder(&amqp_url()).receive_endpoint(&queue, |e| {
            e.bind_message_types(false)
                .concurrency(4)
                .retry(RetryPolicy::immediate(1))
                .transient_strikes(2)
                .consumer(consumer_fn("Picky", move |ctx: ConsumeContext<Job>| {
                    let poison = ctx.message().n == 0;
                    let g = g.clone();
                    async move {
                        if poison {
                            // The one request this API always refuses.
                            return Err(std::io::Error::from(
                                std::io::ErrorKind::ConnectionRefused,
                            )
                            .into());
                        }
                        g.fetch_add(1, Ordering::SeqCst);
                        Ok::<(), ConsumeError>(())
                    }
                }))
        }),
    )
    .await;
    let mut events = bus.events();
    let to = format!("queue:{queue}");
    bus.send(&to, &Job { n: 0, fail: true }).await.unwrap();
    // Other work keeps arriving meanwhile, and gets through.
    let feeder = {
        let (bus, to) = (bus.clone(), to.clone());
        tokio::spawn(async move {
            for n in 1.. {
                if bus.send(&to, &Job { n, fail: false }).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let moved = probe.wait_get(&format!("{queue}_error")).await;
    feeder.abort();
    let seen = {
        let mut seen = Vec::new();
        while let Ok(event) = events.try_recv() {
            seen.push(event);
        }
        seen
    };
    assert!(
        count(&seen, |e| matches!(e, Event::EndpointPaused { .. })) >= 2,
        "it paused the endpoint for its strikes first: {seen:?}"
    );
    assert!(good.load(Ordering::SeqCst) > 0);
    let body: serde_json::Value = serde_json::from_slice(&moved.delivery.data).unwrap();
    assert_eq!(body["message"]["n"], 0);
    assert!(
        header_str(&moved, "MT-Fault-Message")
            .unwrap_or_default()
            .contains("refused"),
        "the fault names the failure"
    );
    // The endpoint carries on.
    let before = good.load(Ordering::SeqCst);
    bus.send(
        &to,
        &Job {
            n: 1000,
            fail: false,
        },
    )
    .await
    .unwrap();
    eventually("the endpoint consumes again", WAIT, || async {
        (good.load(Ordering::SeqCst) > before).then_some(())
    })
    .await;
    bus.stop().await;
    probe.cleanup().await;
}

/// One consumer that never returns, then a pause (here by hand; a transient failure, a kill
/// switch or a breaker pause the same way): the pause waits for the deliveries in flight only
/// up to the shutdown timeout, then abandons the hung one (its channel closes, the broker
/// requeues it), and the endpoint resumes and consumes what comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_does_not_wait_for_a_hung_delivery_beyond_the_shutdown_timeout() {
    use ferrybus_core::pause::{PauseCause, Resume};
    ferrybus_testing::init_tracing();
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("pause-hung");
    probe.track_endpoint(&queue);
    let seen = Seen::<Job>::default();
    let hung = Arc::new(AtomicU32::new(0));
    let (s, h) = (seen.clone(), hung.clone());
    let bus = start(
        RabbitMqBus::builder(&amqp_url())
            .shutdown_timeout(Duration::from_millis(500))
            .receive_endpoint(&queue, |e| {
                e.bind_message_types(false)
                    .concurrency(2)
                    .consumer(consumer_fn("Jobs", move |ctx: ConsumeContext<Job>| {
                        let (s, h) = (s.clone(), h.clone());
                        async move {
                            if ctx.message().fail {
                                h.fetch_add(1, Ordering::SeqCst);
                                std::future::pending::<()>().await;
                            }
                            s.lock().unwrap().push(ctx.message().clone());
                            Ok::<_, ConsumeError>(())
                        }
                    }))
            }),
    )
    .await;
    let mut events = bus.events();
    let address = format!("queue:{queue}");
    bus.send(&address, &Job { n: 0, fail: true }).await.unwrap();
    eventually("the consumer to hang", WAIT, || async {
        (hung.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;

    let control = bus
        .endpoint_control(&queue)
        .expect("the endpoint's control");
    control.pause(
        PauseCause::Manual,
        "maintenance",
        Resume::After(Duration::from_millis(200)),
    );
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::EndpointResumed { queue: q, .. } if *q == queue),
    )
    .await;
    for n in 1..=3 {
        bus.send(&address, &Job { n, fail: false }).await.unwrap();
    }
    eventually(
        "the messages after the pause to be consumed",
        WAIT,
        || async {
            let mut ns: Vec<u32> = seen.lock().unwrap().iter().map(|j| j.n).collect();
            ns.sort_unstable();
            (ns == [1, 2, 3]).then_some(())
        },
    )
    .await;
    // The hung delivery was given back, and taken again.
    eventually("the hung message to be delivered again", WAIT, || async {
        (hung.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    assert_eq!(
        probe
            .queue_count(&format!("{queue}_error"))
            .await
            .unwrap_or(0),
        0
    );
    bus.stop().await;
    probe.cleanup().await;
}
