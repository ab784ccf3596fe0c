//! The `Serializer` choice without a broker: what a raw JSON factory writes under each
//! `RawSerializerOptions`, and which reader a delivery gets by its content type
//! (MassTransit's `RawSerializerOptions`, `RawMessageSerializer.SetRawMessageHeaders`,
//! `RawMessageContext.TransportHeaderFilter`).

use ferrybus_core::address::HostAddress;
use ferrybus_core::outgoing::{MessageFactory, MessageOrigin, RawSerializerOptions, Serializer};
use ferrybus_core::{Delivery, SendOptions};
use uuid::Uuid;

#[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
#[message(namespace = "Shop")]
struct OrderPlaced {
    id: u32,
}

fn raw(add_transport_headers: bool, copy_headers: bool) -> Serializer {
    Serializer::RawJson(RawSerializerOptions {
        add_transport_headers,
        copy_headers,
    })
}

#[test]
fn the_default_options_are_masstransits() {
    assert_eq!(Serializer::default(), Serializer::Envelope);
    assert_eq!(Serializer::raw_json(), raw(true, true));
}

#[test]
fn without_transport_headers_a_raw_message_carries_only_its_own_headers() {
    let factory = MessageFactory::new(HostAddress::loopback()).with_serializer(raw(false, true));
    let options = SendOptions::new().header("Tenant", "acme");
    let message = factory
        .publish(&OrderPlaced { id: 1 }, &MessageOrigin::default(), options)
        .unwrap();
    assert_eq!(message.content_type, "application/json");
    assert_eq!(&message.body[..], br#"{"id":1}"#);
    let names: Vec<&str> = message.headers.iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["Tenant"]);
}

#[test]
fn one_message_can_differ_from_the_factory() {
    let factory = MessageFactory::new(HostAddress::loopback()).with_serializer(raw(true, true));
    let options = SendOptions::new().serializer(Serializer::Envelope);
    let message = factory
        .send(
            "queue:q",
            &OrderPlaced { id: 2 },
            &MessageOrigin::default(),
            options,
        )
        .unwrap();
    assert_eq!(message.content_type, "application/vnd.masstransit+json");
    let raw = factory
        .send(
            "queue:q",
            &OrderPlaced { id: 2 },
            &MessageOrigin::default(),
            SendOptions::new(),
        )
        .unwrap();
    assert_eq!(
        raw.headers.get_str("MessageId"),
        Some(raw.message_id.to_string().as_str())
    );
}

fn raw_delivery() -> Delivery {
    let mut delivery = Delivery::new(br#"{"id":3}"#.to_vec())
        .content_type("application/json; charset=utf-8")
        .message_id(Uuid::from_u128(3).to_string());
    delivery.headers.insert("Tenant", "acme");
    delivery
        .headers
        .insert("CorrelationId", Uuid::from_u128(4).to_string());
    delivery
        .headers
        .insert("MT-MessageType", "urn:message:Shop:OrderPlaced");
    delivery
}

#[test]
fn a_raw_reader_keeps_the_headers_only_with_copy_headers() {
    let copied = raw_delivery().read_envelope(raw(true, true)).unwrap();
    assert_eq!(copied.message["id"], 3);
    assert_eq!(copied.message_id, Some(Uuid::from_u128(3)));
    assert_eq!(copied.correlation_id, Some(Uuid::from_u128(4)));
    assert_eq!(copied.message_type, ["urn:message:Shop:OrderPlaced"]);
    let names: Vec<&str> = copied.headers.iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["Tenant"], "no MT- or id headers");
    let bare = raw_delivery().read_envelope(raw(true, false)).unwrap();
    assert_eq!(bare.correlation_id, Some(Uuid::from_u128(4)));
    assert!(bare.headers.is_empty());
}

#[test]
fn the_reader_is_chosen_by_content_type() {
    let factory = MessageFactory::new(HostAddress::loopback());
    let envelope = factory
        .publish(
            &OrderPlaced { id: 5 },
            &MessageOrigin::default(),
            SendOptions::new(),
        )
        .unwrap();
    let delivery = Delivery::new(envelope.body.clone()).content_type(envelope.content_type);
    let read = delivery.read_envelope(Serializer::raw_json()).unwrap();
    assert_eq!(
        read.message_id,
        Some(envelope.message_id),
        "an envelope on a raw endpoint"
    );
    assert_eq!(read.message["id"], 5);
    assert!(
        raw_delivery().read_envelope(Serializer::Envelope).is_err(),
        "raw JSON is read only where the serializer is raw"
    );
}
