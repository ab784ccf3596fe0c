//! The messages the benchmarks move, and the envelope bodies both ferrybus and the baselines read.

use ferrybus_core::{Message, SendOptions};

use ferrybus_core::address::HostAddress;

use ferrybus_core::outgoing::MessageFactory;

use ferrybus_core::outgoing::MessageOrigin;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The message every consumer scenario consumes: a realistic order with a few lines
/// (about 900 bytes as a MassTransit envelope).
#[derive(Clone, Debug, Serialize, Deserialize, ferrybus_core::Message)]
#[message(namespace = "FerrybusBench.Contracts")]
#[serde(rename_all = "camelCase")]
pub(crate) struct OrderSubmitted {
    pub(crate) order_id: Uuid,
    pub(crate) customer: String,
    pub(crate) amount: String,
    pub(crate) lines: Vec<OrderLine>,
}

/// One order line.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OrderLine {
    pub(crate) sku: String,
    pub(crate) quantity: u32,
    pub(crate) price: String,
}

/// What the outbox consumer publishes for every order it consumes.
#[derive(Clone, Debug, Serialize, Deserialize, ferrybus_core::Message)]
#[message(namespace = "FerrybusBench.Contracts")]
#[serde(rename_all = "camelCase")]
pub(crate) struct OrderAccepted {
    pub(crate) order_id: Uuid,
    pub(crate) amount: String,
}

/// What the bus-outbox writers publish in the relay scenario.
#[derive(Clone, Debug, Serialize, Deserialize, ferrybus_core::Message)]
#[message(namespace = "FerrybusBench.Contracts")]
#[serde(rename_all = "camelCase")]
pub(crate) struct RelayPing {
    pub(crate) seq: u64,
    pub(crate) writer: u32,
}

/// The envelope as a hand-rolled consumer would read it: only what it needs, with serde.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BaselineEnvelope<M> {
    pub(crate) message_id: Uuid,
    pub(crate) message: M,
}

/// An order with `i` in it.
pub(crate) fn order(i: usize) -> OrderSubmitted {
    OrderSubmitted {
        order_id: Uuid::now_v7(),
        customer: format!("customer-{:05}", i % 10_000),
        amount: format!("{}.{:02}", 10 + i % 990, i % 100),
        lines: (0..3)
            .map(|l| OrderLine {
                sku: format!("SKU-{:04}-{l}", i % 5000),
                quantity: 1 + (l as u32),
                price: format!("{}.99", 3 + l * 7),
            })
            .collect(),
    }
}

/// The broker host address written into envelopes.
pub(crate) fn host() -> HostAddress {
    HostAddress::new("rabbitmq", "127.0.0.1", None, "/")
}

/// A MassTransit envelope body sending `message` to queue `queue`, as ferrybus writes one.
pub(crate) fn envelope<M: Message>(
    factory: &MessageFactory,
    queue: &str,
    message: &M,
) -> Result<(Uuid, Vec<u8>), crate::BoxError> {
    let origin = MessageOrigin {
        source_address: Some(factory.host().entity_address("ferrybus-bench")),
        ..MessageOrigin::default()
    };
    let out = factory.send(
        &format!("queue:{queue}"),
        message,
        &origin,
        SendOptions::new(),
    )?;
    Ok((out.message_id, out.body.to_vec()))
}
