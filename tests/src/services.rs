//! Buses for the tests: starting one, merging their events, sending, and waiting for events.

use std::collections::HashMap;

use example_billing::Config;
use ferrybus::rabbitmq::{Event, RabbitMqBus, ReceiveEndpoint};
use ferrybus::SendOptions;
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::WAIT;

/// Starts a bus on `config.amqp_url` with `endpoints`.
pub async fn start_bus(
    config: &Config,
    endpoints: impl IntoIterator<Item = ReceiveEndpoint>,
) -> RabbitMqBus {
    let mut builder =
        RabbitMqBus::builder(&config.amqp_url).connection_name(config.connection_name.clone());
    for endpoint in endpoints {
        builder = builder.receive_endpoint(endpoint);
    }
    builder.start().await.expect("the bus starts")
}

/// The events of several buses as one stream.
pub fn merged_events(buses: &[&RabbitMqBus]) -> broadcast::Receiver<Event> {
    let (tx, rx) = broadcast::channel(4096);
    for bus in buses {
        let mut events = bus.events();
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => {
                        let _ = tx.send(event);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
    rx
}

/// Sends `message` to `queue` twice at the same moment, both copies with `message_id`.
pub async fn send_twice<M: ferrybus::Message>(
    bus: &RabbitMqBus,
    queue: &str,
    message: &M,
    message_id: Uuid,
) {
    let address = format!("queue:{queue}");
    let options = SendOptions::new().message_id(message_id);
    let (a, b) = tokio::join!(
        bus.send_with(&address, message, options.clone()),
        bus.send_with(&address, message, options.clone())
    );
    a.expect("first copy sent");
    b.expect("second copy sent");
}

/// Sends `message` to `queue` with `message_id`.
pub async fn send<M: ferrybus::Message>(
    bus: &RabbitMqBus,
    queue: &str,
    message: &M,
    message_id: Uuid,
) {
    bus.send_with(
        &format!("queue:{queue}"),
        message,
        SendOptions::new().message_id(message_id),
    )
    .await
    .expect("sent");
}

/// An order of `total` in `currency` with a new id.
pub fn order(total: &str, currency: &str) -> example_contracts::OrderPlaced {
    example_contracts::OrderPlaced {
        order_id: Uuid::now_v7(),
        total: total.parse().expect("a decimal"),
        currency: currency.to_owned(),
    }
}

/// Collects bus events until every id in `expected` was consumed (acknowledged) as many times
/// as given; panics after [`WAIT`].
pub async fn wait_consumed(events: &mut broadcast::Receiver<Event>, expected: &[(Uuid, usize)]) {
    let mut want: HashMap<String, usize> = expected
        .iter()
        .map(|(id, n)| (id.to_string(), *n))
        .collect();
    let wait = async {
        while want.values().any(|n| *n > 0) {
            match events.recv().await {
                Ok(Event::Consumed {
                    message_id: Some(id),
                    ..
                }) => {
                    if let Some(n) = want.get_mut(&id) {
                        *n = n.saturating_sub(1);
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("the bus event stream closed"),
            }
        }
    };
    if tokio::time::timeout(WAIT, wait).await.is_err() {
        panic!("timed out waiting for consumption of {expected:?}");
    }
}

/// Waits for the first bus event matching `pred`; panics after [`WAIT`].
pub async fn wait_event(
    events: &mut broadcast::Receiver<Event>,
    pred: impl Fn(&Event) -> bool,
) -> Event {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(event) if pred(&event) => return event,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("the bus event stream closed"),
            }
        }
    };
    tokio::time::timeout(WAIT, wait)
        .await
        .expect("timed out waiting for a bus event")
}
