//! State machine sagas driven in memory through the TestHarness: creation, transitions,
//! ignore, unhandled events, missing instances, finalize + completed, filters, concurrency.

use ferrybus_core::memory::TestHarness;
use ferrybus_core::{Message, Publish};
use ferrybus_saga::{
    Event, InMemorySagaRepository, MissingInstance, SagaEndpointExt, StateMachine, UnhandledEvent,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderSubmitted {
    order_id: Uuid,
    total: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderItemAdded {
    order_id: Uuid,
    sku: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderShipped {
    order_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderCompleted {
    order_id: Uuid,
    item_count: i32,
}

ferrybus_saga::saga_states! {
    enum OrderStatus { Submitted, Shipped }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
struct OrderState {
    total: String,
    item_count: i32,
    big: bool,
}

fn machine(missing: MissingInstance, completed: bool) -> StateMachine<OrderState, OrderStatus> {
    let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    let item_added =
        Event::<OrderItemAdded>::correlated_by(|m| m.order_id).on_missing_instance(missing);
    let shipped = Event::<OrderShipped>::correlated_by(|m| m.order_id);
    let machine = StateMachine::<OrderState, OrderStatus>::new("OrderState")
        .initially(|s| {
            s.when(&submitted, |b| {
                b.then(|c| c.instance.total = c.message().total.clone())
                    .transition_to(OrderStatus::Submitted)
            })
        })
        .during(OrderStatus::Submitted, |s| {
            s.when_if(
                &item_added,
                |c| c.message().sku != "skip",
                |b| {
                    b.then(|c| c.instance.item_count += 1).if_else(
                        |c| c.instance.item_count >= 3,
                        |b| b.then(|c| c.instance.big = true),
                        |b| b.then(|c| c.instance.big = false),
                    )
                },
            )
            .when(&shipped, |b| {
                b.transition_to(OrderStatus::Shipped).finalize()
            })
            .ignore(&submitted)
        })
        .finally(|b| {
            b.publish(|c| OrderCompleted {
                order_id: c.correlation_id(),
                item_count: c.instance.item_count,
            })
        });
    if completed {
        machine.set_completed_when_finalized()
    } else {
        machine
    }
}

async fn harness(
    machine: StateMachine<OrderState, OrderStatus>,
    repository: &InMemorySagaRepository<OrderState>,
) -> TestHarness {
    let repository = repository.clone();
    TestHarness::builder()
        .receive_endpoint(machine.endpoint_name(), |e| {
            e.concurrency(16).saga(machine, repository)
        })
        .start()
        .await
        .expect("harness starts")
}

fn submitted(order_id: Uuid) -> OrderSubmitted {
    OrderSubmitted {
        order_id,
        total: "12.50".into(),
    }
}

fn item(order_id: Uuid, sku: &str) -> OrderItemAdded {
    OrderItemAdded {
        order_id,
        sku: sku.into(),
    }
}

#[tokio::test]
async fn an_initial_event_creates_the_instance_and_later_events_change_it() {
    let repository = InMemorySagaRepository::new();
    let harness = harness(machine(MissingInstance::Discard, false), &repository).await;
    let order_id = Uuid::now_v7();
    let id = harness.publish(&submitted(order_id)).await.unwrap();
    harness.consumed(id).await.unwrap();
    let stored = repository.get(order_id).expect("instance created");
    assert_eq!(stored.current_state, "Submitted");
    assert_eq!(stored.instance.total, "12.50");

    for sku in ["a", "skip", "b", "c"] {
        let id = harness.publish(&item(order_id, sku)).await.unwrap();
        harness.consumed(id).await.unwrap();
    }
    let stored = repository.get(order_id).unwrap();
    assert_eq!(
        stored.instance.item_count, 3,
        "the filtered `skip` item is not counted"
    );
    assert!(stored.instance.big, "if_else took the >= 3 branch");

    // Ignore(submitted) during Submitted: acknowledged, nothing changes.
    let id = harness.publish(&submitted(order_id)).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(repository.get(order_id).unwrap().instance.item_count, 3);

    // Finalize runs Finally, which publishes; without SetCompletedWhenFinalized the row stays.
    let id = harness.publish(&OrderShipped { order_id }).await.unwrap();
    harness.consumed(id).await.unwrap();
    let completed = harness.sent::<OrderCompleted>().await.unwrap();
    let completed: OrderCompleted = completed.message.bind().unwrap();
    assert_eq!(completed.order_id, order_id);
    assert_eq!(completed.item_count, 3);
    assert_eq!(repository.state(order_id).as_deref(), Some("Final"));
    harness.stop().await;
}

#[tokio::test]
async fn set_completed_when_finalized_deletes_the_instance() {
    let repository = InMemorySagaRepository::new();
    let harness = harness(machine(MissingInstance::Discard, true), &repository).await;
    let order_id = Uuid::now_v7();
    let id = harness.publish(&submitted(order_id)).await.unwrap();
    harness.consumed(id).await.unwrap();
    let id = harness.publish(&OrderShipped { order_id }).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert!(repository.get(order_id).is_none());
    assert_eq!(harness.sent_now::<OrderCompleted>().len(), 1);
    harness.stop().await;
}

#[tokio::test]
async fn an_unhandled_event_faults_and_changes_nothing() {
    let repository = InMemorySagaRepository::new();
    let harness = harness(machine(MissingInstance::Discard, false), &repository).await;
    let order_id = Uuid::now_v7();
    repository.insert(order_id, "Shipped", OrderState::default());
    let id = harness.publish(&item(order_id, "a")).await.unwrap();
    let queue = harness.faulted(id).await.unwrap();
    assert_eq!(queue, "order-state");
    assert_eq!(repository.get(order_id).unwrap().instance.item_count, 0);
    harness.stop().await;
}

#[tokio::test]
async fn on_unhandled_event_ignore_acknowledges() {
    let repository = InMemorySagaRepository::new();
    let machine =
        machine(MissingInstance::Discard, false).on_unhandled_event(UnhandledEvent::Ignore);
    let harness = harness(machine, &repository).await;
    let order_id = Uuid::now_v7();
    repository.insert(order_id, "Shipped", OrderState::default());
    let id = harness.publish(&item(order_id, "a")).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(repository.state(order_id).as_deref(), Some("Shipped"));
    harness.stop().await;
}

#[tokio::test]
async fn a_missing_instance_is_discarded_by_default_or_faulted() {
    let repository = InMemorySagaRepository::new();
    let harness = harness(machine(MissingInstance::Discard, false), &repository).await;
    let id = harness.publish(&item(Uuid::now_v7(), "a")).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert!(repository.is_empty());
    harness.stop().await;

    let repository = InMemorySagaRepository::new();
    let harness = harness_fault(&repository).await;
    let id = harness.publish(&item(Uuid::now_v7(), "a")).await.unwrap();
    assert_eq!(harness.faulted(id).await.unwrap(), "order-state");
    assert!(repository.is_empty());
    harness.stop().await;
}

async fn harness_fault(repository: &InMemorySagaRepository<OrderState>) -> TestHarness {
    harness(machine(MissingInstance::Fault, false), repository).await
}

#[tokio::test]
async fn an_unknown_stored_state_faults() {
    let repository = InMemorySagaRepository::new();
    let harness = harness(machine(MissingInstance::Discard, false), &repository).await;
    let order_id = Uuid::now_v7();
    repository.insert(order_id, "Archived", OrderState::default());
    let id = harness.publish(&item(order_id, "a")).await.unwrap();
    harness.faulted(id).await.unwrap();
    harness.stop().await;
}

#[tokio::test]
async fn concurrent_events_on_one_instance_lose_no_update() {
    let repository = InMemorySagaRepository::new();
    let harness = harness(machine(MissingInstance::Discard, false), &repository).await;
    let order_id = Uuid::now_v7();
    let id = harness.publish(&submitted(order_id)).await.unwrap();
    harness.consumed(id).await.unwrap();
    let mut ids = Vec::new();
    for n in 0..200 {
        ids.push(
            harness
                .publish(&item(order_id, &format!("sku-{n}")))
                .await
                .unwrap(),
        );
    }
    for id in ids {
        harness.consumed(id).await.unwrap();
    }
    assert_eq!(repository.get(order_id).unwrap().instance.item_count, 200);
    harness.stop().await;
}

#[tokio::test]
async fn an_instance_left_mid_way_is_taken_over() {
    let repository = InMemorySagaRepository::new();
    let harness = harness(machine(MissingInstance::Discard, true), &repository).await;
    let order_id = Uuid::now_v7();
    let left = OrderState {
        total: "9.99".into(),
        item_count: 7,
        big: true,
    };
    repository.insert(order_id, "Submitted", left);
    let id = harness.publish(&OrderShipped { order_id }).await.unwrap();
    harness.consumed(id).await.unwrap();
    let completed: OrderCompleted = harness
        .sent::<OrderCompleted>()
        .await
        .unwrap()
        .message
        .bind()
        .unwrap();
    assert_eq!(completed.item_count, 7);
    assert!(repository.get(order_id).is_none());
    harness.stop().await;
}

mod scheduling {
    use std::time::Duration;

    use ferrybus_core::memory::TestHarness;
    use ferrybus_core::{Message, Publish, SendOptions};
    use ferrybus_saga::{
        Event, InMemorySagaRepository, SagaEndpointExt, Schedule, StateMachine, SCHEDULING_TOKEN_ID,
    };
    use serde::{Deserialize, Serialize};
    use uuid::Uuid;

    #[derive(Debug, Clone, Serialize, Deserialize, Message)]
    #[serde(rename_all = "camelCase")]
    #[message(namespace = "Bookstore.Contracts")]
    struct PaymentTimeout {
        order_id: Uuid,
    }

    ferrybus_saga::saga_states! {
        enum Status { Waiting, TimedOut }
    }

    #[derive(Clone, Debug, Default, PartialEq, Serialize)]
    struct Instance {
        token: Option<Uuid>,
    }

    #[tokio::test]
    async fn only_the_current_token_runs_the_scheduled_event() {
        let timeout = Schedule::<Instance, PaymentTimeout>::new(
            Event::correlated_by(|m: &PaymentTimeout| m.order_id),
            Duration::from_secs(60),
            |s| &mut s.token,
        );
        let machine = StateMachine::<Instance, Status>::new("PaymentState")
            .during(Status::Waiting, |s| {
                s.when_scheduled(&timeout, |b| b.transition_to(Status::TimedOut))
            });
        let repository = InMemorySagaRepository::new();
        let harness = TestHarness::builder()
            .receive_endpoint(machine.endpoint_name(), {
                let repository = repository.clone();
                move |e| e.saga(machine, repository)
            })
            .start()
            .await
            .unwrap();
        let order_id = Uuid::now_v7();
        let current = Uuid::now_v7();
        repository.insert(
            order_id,
            "Waiting",
            Instance {
                token: Some(current),
            },
        );
        let stale = SendOptions::new().header(SCHEDULING_TOKEN_ID, Uuid::now_v7().to_string());
        let id = harness
            .publish_with(&PaymentTimeout { order_id }, stale)
            .await
            .unwrap();
        harness.consumed(id).await.unwrap();
        assert_eq!(repository.state(order_id).as_deref(), Some("Waiting"));

        let fresh = SendOptions::new().header(SCHEDULING_TOKEN_ID, current.to_string());
        let id = harness
            .publish_with(&PaymentTimeout { order_id }, fresh)
            .await
            .unwrap();
        harness.consumed(id).await.unwrap();
        let stored = repository.get(order_id).unwrap();
        assert_eq!(stored.current_state, "TimedOut");
        assert_eq!(stored.instance.token, None, "cleared once handled");
        harness.stop().await;
    }
}

mod messaging {
    use ferrybus_core::memory::TestHarness;
    use ferrybus_core::{Message, Publish, SendOptions};
    use ferrybus_saga::{Event, InMemorySagaRepository, SagaEndpointExt, StateMachine};
    use serde::{Deserialize, Serialize};
    use uuid::Uuid;

    /// Correlated by its own `CorrelationId` (the convention `Message::correlation_id` follows).
    #[derive(Debug, Clone, Serialize, Deserialize, Message)]
    #[serde(rename_all = "camelCase")]
    #[message(namespace = "Bookstore.Contracts")]
    struct CheckStatus {
        correlation_id: Uuid,
    }

    /// No id in the payload: correlated by the envelope's `correlationId`.
    #[derive(Debug, Clone, Serialize, Deserialize, Message)]
    #[serde(rename_all = "camelCase")]
    #[message(namespace = "Bookstore.Contracts")]
    struct Audit {}

    #[derive(Debug, Clone, Serialize, Deserialize, Message)]
    #[serde(rename_all = "camelCase")]
    #[message(namespace = "Bookstore.Contracts")]
    struct StatusReply {
        state: String,
        audits: u32,
    }

    #[derive(Debug, Clone, Serialize, Deserialize, Message)]
    #[serde(rename_all = "camelCase")]
    #[message(namespace = "Bookstore.Contracts")]
    struct Audited {
        order_id: Uuid,
    }

    ferrybus_saga::saga_states! {
        enum Status { Open, Held }
    }

    #[derive(Clone, Debug, Default, Serialize)]
    struct Instance {
        audits: u32,
    }

    #[tokio::test]
    async fn respond_and_send_from_a_step_and_default_correlations() {
        let check = Event::<CheckStatus>::new();
        let audit = Event::<Audit>::correlated_by_envelope();
        let machine = StateMachine::<Instance, Status>::new("PaymentSaga").during_each(
            [Status::Open, Status::Held],
            |s| {
                s.when(&check, |b| {
                    b.respond(|c| StatusReply {
                        state: c.state().name().to_owned(),
                        audits: c.instance.audits,
                    })
                })
                .when(&audit, |b| {
                    b.then(|c| c.instance.audits += 1)
                        .send("queue:audit-log", |c| Audited {
                            order_id: c.correlation_id(),
                        })
                        .transition_to(Status::Held)
                })
            },
        );
        assert_eq!(
            machine.endpoint_name(),
            "payment",
            "`Saga` trimmed as MassTransit does"
        );
        let repository = InMemorySagaRepository::new();
        let harness = TestHarness::builder()
            .receive_endpoint("payment", {
                let repository = repository.clone();
                move |e| e.saga(machine, repository)
            })
            .start()
            .await
            .unwrap();
        let id = Uuid::now_v7();
        repository.insert(id, "Open", Instance::default());

        let sent = harness
            .publish_with(&Audit {}, SendOptions::new().correlation_id(id))
            .await
            .unwrap();
        harness.consumed(sent).await.unwrap();
        let audited = harness.sent::<Audited>().await.unwrap();
        assert!(audited
            .destination_address
            .as_deref()
            .is_some_and(|a| a.contains("/audit-log")));
        assert_eq!(repository.state(id).as_deref(), Some("Held"));

        let request_id = Uuid::now_v7();
        let asked = harness
            .publish_with(
                &CheckStatus { correlation_id: id },
                SendOptions::new()
                    .request_id(request_id)
                    .response_address("queue:replies"),
            )
            .await
            .unwrap();
        harness.consumed(asked).await.unwrap();
        let reply = harness.sent::<StatusReply>().await.unwrap();
        assert_eq!(reply.request_id, Some(request_id));
        assert!(reply
            .destination_address
            .as_deref()
            .is_some_and(|a| a.contains("/replies")));
        let reply: StatusReply = reply.message.bind().unwrap();
        assert_eq!((reply.state.as_str(), reply.audits), ("Held", 1));
        harness.stop().await;
    }
}

mod then_async {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    /// An asynchronous lookup (a credit service): the action awaits it inside the step.
    #[derive(Clone, Default)]
    struct Credit(Arc<tokio::sync::Mutex<HashMap<String, i32>>>);

    impl Credit {
        async fn limit(&self, total: &str) -> Result<i32, ferrybus_core::ConsumeError> {
            tokio::task::yield_now().await;
            self.0
                .lock()
                .await
                .get(total)
                .copied()
                .ok_or_else(|| ferrybus_core::ConsumeError::permanent("no credit line"))
        }
    }

    fn machine(credit: Credit) -> StateMachine<OrderState, OrderStatus> {
        let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
        StateMachine::<OrderState, OrderStatus>::new("OrderState").initially(move |s| {
            s.when(&submitted, move |b| {
                b.then(|c| c.instance.total = c.message().total.clone())
                    .then_async(move |c| {
                        let credit = credit.clone();
                        Box::pin(async move {
                            c.instance.item_count = credit.limit(&c.instance.total).await?;
                            Ok(())
                        })
                    })
                    .then(|c| c.instance.big = c.instance.item_count > 10)
                    .transition_to(OrderStatus::Submitted)
            })
        })
    }

    #[tokio::test]
    async fn an_async_action_runs_in_order_and_a_failing_one_saves_nothing() {
        let credit = Credit::default();
        credit.0.lock().await.insert("12.50".into(), 40);
        let repository = InMemorySagaRepository::new();
        let harness = harness(machine(credit), &repository).await;

        let order_id = Uuid::now_v7();
        let id = harness.publish(&submitted(order_id)).await.unwrap();
        harness.consumed(id).await.unwrap();
        let stored = repository.get(order_id).expect("an instance");
        assert_eq!(
            stored.instance,
            OrderState {
                total: "12.50".into(),
                item_count: 40,
                big: true,
            },
            "the awaited value is saved, and the action after it saw it"
        );

        let unknown = Uuid::now_v7();
        let id = harness
            .publish(&OrderSubmitted {
                order_id: unknown,
                total: "99.00".into(),
            })
            .await
            .unwrap();
        harness.faulted(id).await.unwrap();
        assert!(repository.get(unknown).is_none(), "nothing saved");
        harness.stop().await;
    }
}
