//! The correlation id convention where messages are built: the message's own id (here its
//! `EventId`) in the envelope, the caller's `SendOptions::correlation_id` winning.

use ferrybus_core::address::HostAddress;
use ferrybus_core::outgoing::{MessageFactory, MessageOrigin};
use ferrybus_core::{Envelope, Message, SendOptions};
use uuid::Uuid;

#[derive(serde::Serialize, serde::Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderShipped {
    event_id: Uuid,
}

#[test]
fn the_correlation_id_convention_yields_to_the_caller() {
    let factory = MessageFactory::new(HostAddress::loopback());
    let event = OrderShipped {
        event_id: Uuid::from_u128(5),
    };
    let origin = MessageOrigin::default();
    let published = factory
        .publish(&event, &origin, SendOptions::new())
        .unwrap();
    assert_eq!(published.correlation_id, Some(Uuid::from_u128(5)));
    let envelope = Envelope::from_slice(&published.body).unwrap();
    assert_eq!(envelope.correlation_id, Some(Uuid::from_u128(5)));
    let explicit = SendOptions::new().correlation_id(Uuid::from_u128(6));
    let sent = factory.send("queue:q", &event, &origin, explicit).unwrap();
    assert_eq!(sent.correlation_id, Some(Uuid::from_u128(6)));
    let raw = factory
        .send(
            "queue:q",
            &event,
            &origin,
            SendOptions::new().serializer(ferrybus_core::outgoing::Serializer::raw_json()),
        )
        .unwrap();
    assert_eq!(
        raw.headers.get_str("CorrelationId"),
        Some(Uuid::from_u128(5).to_string().as_str())
    );
}
