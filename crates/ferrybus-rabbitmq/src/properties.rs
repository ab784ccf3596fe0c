//! The transport properties every message the RabbitMQ bus builds carries: what MassTransit's
//! outbox keeps beside a message (its `Properties` column) and the transport reads back, here and
//! in a .NET delivery service (`RabbitMqMessageSendContext.WritePropertiesTo` / `ReadPropertiesFrom`,
//! `src/Transports/MassTransit.RabbitMqTransport/RabbitMqTransport/RabbitMqMessageSendContext.cs`).

use ferrybus_core::outgoing::{OutgoingMessage, TransportProperties};
use serde_json::Value;

/// RabbitMQ's direct reply-to pseudo-queue (MassTransit's `RabbitMqExchangeNames.ReplyTo`): a
/// requester consumes it without a queue of its own; responses go through the default exchange
/// with the requester's reply-to name as routing key.
pub const DIRECT_REPLY_TO: &str = "amq.rabbitmq.reply-to";

/// Writes `RMQ-Exchange` (the destination exchange), `RMQ-Priority` (the message's priority, set or
/// copied from the consumed message, as MassTransit's `CopyIncomingPropertiesIfPresent` does) and,
/// for a response to a requester using direct reply-to, `RMQ-RoutingKey` and `RMQ-ReplyTo` (the
/// requester's reply-to name: MassTransit's `ReplyToSendEndpoint` routes by it).
///
/// The bus's own factory writes them; a service that writes bus-outbox rows without a bus of its
/// own builds its factory with them, so that a delivery service (ferrybus's or .NET's) reads what
/// it expects:
///
/// ```
/// use std::sync::Arc;
/// use ferrybus_core::address::HostAddress;
/// use ferrybus_core::outgoing::MessageFactory;
/// use ferrybus_rabbitmq::RabbitMqProperties;
/// let factory = MessageFactory::new(HostAddress::new("rabbitmq", "rabbit", None, "/"))
///     .with_transport(Arc::new(RabbitMqProperties));
/// # let _ = factory;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RabbitMqProperties;

impl TransportProperties for RabbitMqProperties {
    fn write(&self, message: &mut OutgoingMessage, priority: Option<u8>, reply_to: Option<&str>) {
        let Ok(destination) = message.destination() else {
            return;
        };
        let properties = &mut message.properties;
        properties.insert(
            "RMQ-Exchange".into(),
            Value::from(destination.name.as_str()),
        );
        if let Some(priority) = priority {
            properties.insert("RMQ-Priority".into(), Value::from(priority));
        }
        if let Some(reply_to) = reply_to.filter(|_| destination.name == DIRECT_REPLY_TO) {
            for key in ["RMQ-RoutingKey", "RMQ-ReplyTo"] {
                properties.insert(key.into(), Value::from(reply_to));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrybus_core::address::HostAddress;
    use ferrybus_core::outgoing::{MessageFactory, MessageOrigin};
    use ferrybus_core::{Message, MessageType, SendOptions};

    use super::*;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct OrderPlaced {}

    impl Message for OrderPlaced {
        fn message_type() -> MessageType {
            MessageType::parse("Bookstore.Contracts:OrderPlaced").unwrap()
        }
    }

    fn factory() -> MessageFactory {
        MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"))
            .with_transport(Arc::new(RabbitMqProperties))
    }

    #[test]
    fn priority_comes_from_the_consumed_message_unless_set() {
        let origin = MessageOrigin {
            priority: Some(4),
            ..MessageOrigin::default()
        };
        let copied = factory()
            .publish(&OrderPlaced {}, &origin, SendOptions::new())
            .unwrap();
        assert_eq!(copied.properties["RMQ-Priority"], 4);
        assert_eq!(
            copied.properties["RMQ-Exchange"],
            "Bookstore.Contracts:OrderPlaced"
        );
        let own = factory()
            .publish(&OrderPlaced {}, &origin, SendOptions::new().priority(8))
            .unwrap();
        assert_eq!(own.properties["RMQ-Priority"], 8);
        let none = factory()
            .publish(
                &OrderPlaced {},
                &MessageOrigin::default(),
                SendOptions::new(),
            )
            .unwrap();
        assert!(!none.properties.contains_key("RMQ-Priority"));
    }

    #[test]
    fn a_response_to_direct_reply_to_routes_by_the_requesters_name() {
        let origin = MessageOrigin {
            reply_to: Some("amq.rabbitmq.reply-to.g1h2AA".into()),
            ..MessageOrigin::default()
        };
        let response = factory()
            .send(
                "rabbitmq://localhost/amq.rabbitmq.reply-to",
                &OrderPlaced {},
                &origin,
                SendOptions::new(),
            )
            .unwrap();
        assert_eq!(
            response.properties["RMQ-RoutingKey"],
            "amq.rabbitmq.reply-to.g1h2AA"
        );
        assert_eq!(
            response.properties["RMQ-ReplyTo"],
            "amq.rabbitmq.reply-to.g1h2AA"
        );
        let elsewhere = factory()
            .send(
                "queue:billing",
                &OrderPlaced {},
                &origin,
                SendOptions::new(),
            )
            .unwrap();
        assert!(!elsewhere.properties.contains_key("RMQ-RoutingKey"));
    }
}
