//! A user-written endpoint layer on a real endpoint: a tower `Layer` over
//! `ferrybus::endpoint::BoxEndpointService` that calls the endpoint and counts the `Settlement` of every
//! delivery by kind (what a metrics layer does), on RabbitMQ with the PostgreSQL inbox. Each kind
//! comes from what really happened to a message: acknowledged, a duplicate the inbox stopped, a
//! fault moved to `_error`, a delayed redelivery, a message of a type nobody consumes moved to
//! `_skipped`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use example_contracts::{OrderPlaced, PaymentCaptured};
use ferrybus::endpoint::BoxEndpointService;
use ferrybus::rabbitmq::{Event, RabbitMqBus};
use ferrybus::sea_orm::{PostgresStorage, Tables};
use ferrybus::{
    consumer_fn, ConsumeContext, ConsumeError, Delivery, RetryPolicy, Settlement, SettlementKind,
};
use ferrybus_e2e::{
    amqp_url, database_url, order, send, wait_event, Probe, Received, TestEnv, WAIT,
};
use sea_orm::{ConnectOptions, Database};
use tokio::sync::broadcast;
use tower::{Layer, ServiceExt};
use uuid::Uuid;

/// A delivery's message id property and how it was settled.
type Seen = (Option<String>, SettlementKind);

/// Counts settlements by kind, and remembers each delivery's message id with its settlement.
#[derive(Clone, Default)]
struct SettlementCounter {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl SettlementCounter {
    fn counts(&self) -> HashMap<SettlementKind, usize> {
        let mut counts = HashMap::new();
        for (_, kind) in self.seen.lock().unwrap().iter() {
            *counts.entry(*kind).or_default() += 1;
        }
        counts
    }

    fn of(&self, message_id: Uuid) -> Vec<SettlementKind> {
        let id = Some(message_id.to_string());
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| *m == id)
            .map(|(_, kind)| *kind)
            .collect()
    }
}

impl Layer<BoxEndpointService> for SettlementCounter {
    type Service = BoxEndpointService;

    fn layer(&self, inner: BoxEndpointService) -> BoxEndpointService {
        let seen = self.seen.clone();
        BoxEndpointService::new(tower::service_fn(move |delivery: Delivery| {
            let (inner, seen) = (inner.clone(), seen.clone());
            async move {
                let message_id = delivery.message_id.clone();
                let settlement = inner.oneshot(delivery).await?;
                seen.lock().unwrap().push((message_id, settlement.kind()));
                Ok::<Settlement, Infallible>(settlement)
            }
        }))
    }
}

/// How the consumer treats an order, by its currency.
const REJECT: &str = "ERR"; // a permanent error: no retry, no redelivery, `_error`
const FLAKY: &str = "RDL"; // fails until it is redelivered once

/// Waits for the bus event of `message_id` that `pred` accepts.
async fn settled(
    events: &mut broadcast::Receiver<Event>,
    message_id: Uuid,
    pred: impl Fn(&Event) -> bool,
) -> Event {
    let id = Some(message_id.to_string());
    wait_event(events, WAIT, |e| {
        let of_message = match e {
            Event::Consumed { message_id, .. }
            | Event::Faulted { message_id, .. }
            | Event::Skipped { message_id, .. }
            | Event::Redelivered { message_id, .. } => *message_id == id,
            _ => false,
        };
        of_message && pred(e)
    })
    .await
}

/// Takes every message in `queue` (all settlements are done: nothing more arrives).
async fn drain(probe: &Probe, queue: &str) -> Vec<Received> {
    let mut taken = Vec::new();
    while let Some(message) = probe.get(queue).await {
        taken.push(message.into());
    }
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn endpoint_layer_counts_every_settlement_kind() {
    TestEnv::new("endpoint_layer")
        .await
        .run(|env| async move {
            let queue = env.queue("layer");
            // Delayed redelivery declares these (plugin exchange, or a TTL queue per delay).
            let (delay_exchange, delay_queue) =
                (format!("{queue}_delay"), format!("{queue}_delay_200"));
            env.probe.track(&[&delay_queue], &[&delay_exchange]);
            let mut options = ConnectOptions::new(database_url());
            options
                .max_connections(10)
                .min_connections(0)
                .sqlx_logging(false);
            let db = Database::connect(options).await.expect("PostgreSQL");
            let messaging = env.schema("messaging");
            let storage = PostgresStorage::new(db.clone())
                .tables(Tables::new().schema(&messaging))
                .migrate(true);

            let counter = SettlementCounter::default();
            let consumer = consumer_fn(
                "LayerConsumer",
                |ctx: ConsumeContext<OrderPlaced>| async move {
                    match ctx.message().currency.as_str() {
                        REJECT => Err(ConsumeError::permanent("order rejected")),
                        FLAKY if ctx.redelivery_count() == 0 => {
                            Err(ConsumeError::handler("payment provider busy"))
                        }
                        _ => Ok(()),
                    }
                },
            );
            let bus = RabbitMqBus::builder(&amqp_url())
                .connection_name(format!("e2e-layer-{}", env.id))
                .storage(storage)
                .receive_endpoint(&queue, |e| {
                    e.layer(counter.clone())
                        .bind_message_types(false)
                        .redelivery(RetryPolicy::intervals([Duration::from_millis(200)]))
                        .inbox()
                        .consumer(consumer)
                })
                .start()
                .await
                .expect("the bus starts");
            let mut events = bus.events();

            // Ack: a good order.
            let good = order("12.00", "TRY");
            let good_id = Uuid::now_v7();
            send(&bus, &queue, &good, good_id).await;
            settled(&mut events, good_id, |e| {
                matches!(
                    e,
                    Event::Consumed {
                        duplicate: false,
                        ..
                    }
                )
            })
            .await;

            // Duplicate: the same message again, after it was consumed.
            send(&bus, &queue, &good, good_id).await;
            settled(&mut events, good_id, |e| {
                matches!(
                    e,
                    Event::Consumed {
                        duplicate: true,
                        ..
                    }
                )
            })
            .await;

            // Fault: a permanent consumer error goes straight to `_error`.
            let rejected_id = Uuid::now_v7();
            send(&bus, &queue, &order("5.00", REJECT), rejected_id).await;
            settled(&mut events, rejected_id, |e| {
                matches!(e, Event::Faulted { .. })
            })
            .await;

            // Redeliver, then Ack: fails the first time, succeeds when redelivered.
            let flaky_id = Uuid::now_v7();
            send(&bus, &queue, &order("7.00", FLAKY), flaky_id).await;
            let redelivered = settled(&mut events, flaky_id, |e| {
                matches!(e, Event::Redelivered { .. })
            })
            .await;
            assert!(
                matches!(redelivered, Event::Redelivered { count: 1, .. }),
                "{redelivered:?}"
            );
            settled(&mut events, flaky_id, |e| {
                matches!(
                    e,
                    Event::Consumed {
                        duplicate: false,
                        ..
                    }
                )
            })
            .await;

            // Skip: a message type no consumer on the endpoint handles.
            let skipped_id = Uuid::now_v7();
            let captured = PaymentCaptured {
                payment_id: Uuid::now_v7(),
                order_id: Uuid::now_v7(),
            };
            send(&bus, &queue, &captured, skipped_id).await;
            settled(&mut events, skipped_id, |e| {
                matches!(e, Event::Skipped { .. })
            })
            .await;

            bus.stop().await;

            // The layer saw every delivery, and each settlement as the transport carried it out.
            let expected = HashMap::from([
                (SettlementKind::Ack, 2),
                (SettlementKind::Duplicate, 1),
                (SettlementKind::Fault, 1),
                (SettlementKind::Redeliver, 1),
                (SettlementKind::Skip, 1),
            ]);
            assert_eq!(counter.counts(), expected);
            assert_eq!(
                counter.of(good_id),
                [SettlementKind::Ack, SettlementKind::Duplicate]
            );
            assert_eq!(counter.of(rejected_id), [SettlementKind::Fault]);
            assert_eq!(
                counter.of(flaky_id),
                [SettlementKind::Redeliver, SettlementKind::Ack]
            );
            assert_eq!(counter.of(skipped_id), [SettlementKind::Skip]);

            // `_error` holds the rejected order, with its fault headers; nothing else.
            let errors = drain(&env.probe, &format!("{queue}_error")).await;
            assert_eq!(errors.len(), 1, "{errors:?}");
            let rejected = &errors[0];
            assert_eq!(rejected.message_id, Some(rejected_id.to_string()));
            assert_eq!(
                rejected.headers.get("MT-Reason").map(String::as_str),
                Some("fault")
            );
            assert!(
                rejected.headers["MT-Fault-Message"].contains("order rejected"),
                "{:?}",
                rejected.headers
            );
            assert_eq!(
                rejected
                    .headers
                    .get("MT-Fault-ConsumerType")
                    .map(String::as_str),
                Some("LayerConsumer")
            );
            assert_eq!(rejected.body["message"]["currency"], REJECT);

            // `_skipped` holds the PaymentCaptured, marked dead-letter; nothing else.
            let skipped = drain(&env.probe, &format!("{queue}_skipped")).await;
            assert_eq!(skipped.len(), 1, "{skipped:?}");
            assert_eq!(skipped[0].message_id, Some(skipped_id.to_string()));
            assert_eq!(
                skipped[0].headers.get("MT-Reason").map(String::as_str),
                Some("dead-letter")
            );
            assert_eq!(
                skipped[0].body["messageType"][0],
                "urn:message:Bookstore.Contracts:PaymentCaptured"
            );
            assert_eq!(
                env.probe.queue_count(&queue).await,
                Some(0),
                "everything settled"
            );

            // The inbox recorded the two consumed orders, not the rejected one.
            assert_eq!(env.consumed_in(&messaging, good_id).await, 1);
            assert_eq!(env.consumed_in(&messaging, flaky_id).await, 1);
            assert_eq!(env.consumed_in(&messaging, rejected_id).await, 0);
            db.close().await.expect("the pool closes");
        })
        .await;
}
