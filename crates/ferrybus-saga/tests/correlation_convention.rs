//! MassTransit's correlation id send convention on RabbitMQ: a Rust-published event carries the
//! envelope `correlationId` taken from its `EventId` (no attribute) or from the field named by
//! `#[message(correlated_by)]`, a caller's id wins, and a saga correlating on the envelope's
//! `correlationId` (as a .NET saga with `CorrelateById(context => context.CorrelationId)` does)
//! reads it.

use ferrybus_core::{Message, Publish, SendOptions};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_saga::{Event, InMemorySagaRepository, SagaEndpointExt, StateMachine};
use ferrybus_testing::{amqp_url, unique, Probe, WAIT};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// No attribute: the convention finds `EventId` (`eventId` on the wire).
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.Correlation")]
struct PaymentAccepted {
    event_id: Uuid,
    amount: String,
}

/// `CorrelatedBy<Guid>` on `OrderId`.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.Correlation", correlated_by = "order_id")]
struct PaymentSettled {
    order_id: Uuid,
}

ferrybus_saga::saga_states! {
    enum PaymentStatus { Accepted, Settled }
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct PaymentState {
    amount: String,
}

fn machine() -> StateMachine<PaymentState, PaymentStatus> {
    let accepted = Event::<PaymentAccepted>::correlated_by_envelope();
    let settled = Event::<PaymentSettled>::correlated_by_envelope();
    StateMachine::<PaymentState, PaymentStatus>::new("PaymentState")
        .initially(|s| {
            s.when(&accepted, |b| {
                b.then(|c| c.instance.amount = c.message().amount.clone())
                    .transition_to(PaymentStatus::Accepted)
            })
        })
        .during(PaymentStatus::Accepted, |s| {
            s.when(&settled, |b| b.transition_to(PaymentStatus::Settled))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_event_gets_its_correlation_id_by_convention_and_a_saga_reads_it() {
    let probe = Probe::connect(&amqp_url()).await;
    let queue = unique("correlation-saga");
    probe.track_endpoint(&queue);
    let exchange = PaymentAccepted::message_type().entity_name().to_owned();
    let repository = InMemorySagaRepository::<PaymentState>::new();
    let bus = RabbitMqBus::builder(&amqp_url())
        .receive_endpoint(&queue, {
            let repository = repository.clone();
            move |e| e.saga(machine(), repository)
        })
        .start()
        .await
        .expect("the bus starts");
    let wire = probe.bind_probe_existing(&exchange).await;

    let payment = Uuid::now_v7();
    let accepted = PaymentAccepted {
        event_id: payment,
        amount: "12.50".into(),
    };
    let id = bus.publish(&accepted).await.unwrap();
    let on_wire = probe
        .wait_for(&wire, |m| m.body["messageId"] == id.to_string())
        .await;
    assert_eq!(on_wire.body["correlationId"], payment.to_string());
    let stored = repository
        .wait_state(payment, "Accepted", WAIT)
        .await
        .expect("the saga found its instance by the envelope correlationId");
    assert_eq!(stored.instance.amount, "12.50");

    bus.publish(&PaymentSettled { order_id: payment })
        .await
        .unwrap();
    repository
        .wait_state(payment, "Settled", WAIT)
        .await
        .expect("correlated_by gives the envelope correlationId");

    // The caller's correlation id wins over the convention (MassTransit runs the caller's send
    // callback after the topology's SetCorrelationIdFilter).
    let chosen = Uuid::now_v7();
    let other = PaymentAccepted {
        event_id: Uuid::now_v7(),
        amount: "1.00".into(),
    };
    let id = bus
        .publish_with(&other, SendOptions::new().correlation_id(chosen))
        .await
        .unwrap();
    let on_wire = probe
        .wait_for(&wire, |m| m.body["messageId"] == id.to_string())
        .await;
    assert_eq!(on_wire.body["correlationId"], chosen.to_string());
    repository
        .wait_state(chosen, "Accepted", WAIT)
        .await
        .expect("the instance is the caller's id");
    assert!(repository.get(other.event_id).is_none());

    bus.stop().await;
    probe.delete_queue(&wire).await;
    probe.cleanup().await;
}
