//! Buses for the tests: starting one, merging their events, sending, and waiting until messages
//! were consumed.

use std::collections::HashMap;

use example_billing::{app, Config};
use example_contracts::OrderPlaced;
use ferrybus::rabbitmq::{Event, RabbitMqBus, RabbitMqBusBuilder};
use ferrybus::{Consumer, Publish, SendOptions};
use sea_orm::DatabaseConnection;
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::WAIT;

/// Starts a bus on `config.amqp_url`, named `config.connection_name`, with what `configure`
/// adds (storage, endpoints).
pub async fn start_bus(
    config: &Config,
    configure: impl FnOnce(RabbitMqBusBuilder) -> RabbitMqBusBuilder,
) -> RabbitMqBus {
    let builder =
        RabbitMqBus::builder(&config.amqp_url).connection_name(config.connection_name.clone());
    configure(builder).start().await.expect("the bus starts")
}

/// Starts a bus with billing's storage (the messaging tables are created when missing) and
/// billing's invoice endpoint running `consumer` behind the inbox, as billing configures it.
pub async fn start_invoice_bus<C: Consumer<OrderPlaced>>(
    config: &Config,
    db: &DatabaseConnection,
    consumer: C,
) -> RabbitMqBus {
    start_bus(config, |bus| {
        bus.storage(app::storage(config, db.clone()))
            .receive_endpoint(&config.invoice_queue, |e| {
                app::invoice_endpoint(e, config, consumer)
            })
    })
    .await
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
pub fn order(total: &str, currency: &str) -> OrderPlaced {
    OrderPlaced {
        order_id: Uuid::now_v7(),
        total: total.parse().expect("a decimal"),
        currency: currency.to_owned(),
    }
}

/// Collects bus events until every id in `expected` was consumed (acknowledged, also as a
/// duplicate) as many times as given; panics after [`WAIT`].
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
