//! `#[derive(Message)]` against the real `ferrybus_core::MessageType`.

use ferrybus_core::{Message, MessageType};

use ferrybus_core::message::TypeName;
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderPlaced {
    order_id: uuid::Uuid,
    quantity: u32,
}

#[test]
fn plain_struct_with_namespace() {
    let t = OrderPlaced::message_type();
    assert_eq!(t.urn(), "urn:message:Bookstore.Contracts:OrderPlaced");
    assert_eq!(t.entity_name(), "Bookstore.Contracts:OrderPlaced");
    assert_eq!(t.dotnet_name(), "Bookstore.Contracts.OrderPlaced");
    assert_eq!(
        t.type_name(),
        &TypeName::new("Bookstore.Contracts", "OrderPlaced")
    );
    assert_eq!(t.urns(), ["urn:message:Bookstore.Contracts:OrderPlaced"]);
    assert_eq!(
        t,
        MessageType::new(TypeName::new("Bookstore.Contracts", "OrderPlaced"))
    );

    // The derive leaves serde alone.
    let order = OrderPlaced {
        order_id: uuid::Uuid::nil(),
        quantity: 2,
    };
    let json = serde_json::to_value(&order).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"orderId": "00000000-0000-0000-0000-000000000000", "quantity": 2})
    );
    assert_eq!(serde_json::from_value::<OrderPlaced>(json).unwrap(), order);
}

#[derive(Serialize, Deserialize, Message)]
#[message(namespace = "Ns", name = "Outer+Inner")]
struct Inner {}

#[test]
fn name_override_with_nested_type() {
    let t = Inner::message_type();
    assert_eq!(t.urn(), "urn:message:Ns:Outer+Inner");
    assert_eq!(t.entity_name(), "Ns:Outer-Inner");
    assert_eq!(t.dotnet_name(), "Ns.Outer+Inner");
}

#[derive(Serialize, Deserialize, Message)]
#[message(type_name = "Bookstore.Contracts:OrderPlaced")]
struct OrderPlacedV2 {}

#[derive(Serialize, Deserialize, Message)]
#[message(type_name = "urn:message:Ns:Pair[[Ns:A],[Other:B]]")]
struct Pair {}

#[test]
fn type_name_form() {
    assert_eq!(OrderPlacedV2::message_type(), OrderPlaced::message_type());
    let t = Pair::message_type();
    assert_eq!(t.urn(), "urn:message:Ns:Pair[[Ns:A],[Other:B]]");
    assert_eq!(t.entity_name(), "Ns:Pair--A::Other:B--");
    assert_eq!(t.dotnet_name(), "Ns.Pair<Ns.A,Other.B>");
}

#[derive(Serialize, Deserialize, Message)]
#[message(namespace = "MassTransit.Tests", urn = "custom-contract")]
struct CustomUrn {}

#[derive(Serialize, Deserialize, Message)]
#[message(namespace = "MassTransit.Tests", urn = "urn:custom:t")]
struct SchemeUrn {}

#[test]
fn urn_override() {
    let t = CustomUrn::message_type();
    assert_eq!(t.urn(), "urn:message:custom-contract");
    // [MessageUrn] changes neither the exchange nor the .NET name.
    assert_eq!(t.entity_name(), "MassTransit.Tests:CustomUrn");
    assert_eq!(t.dotnet_name(), "MassTransit.Tests.CustomUrn");
    assert_eq!(SchemeUrn::message_type().urn(), "urn:custom:t");
}

#[derive(Serialize, Deserialize, Message)]
#[message(namespace = "Contracts.Events", entity_name = "OrderCReted")]
struct OrderCreated {}

#[test]
fn entity_name_override() {
    let t = OrderCreated::message_type();
    assert_eq!(t.entity_name(), "OrderCReted");
    assert_eq!(t.urn(), "urn:message:Contracts.Events:OrderCreated");
    assert_eq!(
        t.fault().entity_name(),
        "MassTransit:Fault--Contracts.Events:OrderCreated--"
    );
}

#[derive(Serialize, Deserialize, Message)]
#[message(namespace = "Ns")]
#[message(fault_entity_name = "t-faults")]
struct Faulty {}

#[test]
fn fault_entity_name_override() {
    let t = Faulty::message_type();
    assert_eq!(t.entity_name(), "Ns:Faulty");
    assert_eq!(t.fault().entity_name(), "t-faults");
    assert_eq!(
        t.fault().urn(),
        "urn:message:MassTransit:Fault[[Ns:Faulty]]"
    );
}

#[derive(Serialize, Deserialize, Message)]
#[message(
    namespace = "PIK.ESB.Messages.Implementation.BOP",
    implements = [
        "PIK.ESB.Messages.Implementation.BOP:BopMessage",
        "PIK.ESB.Messages.Implementation:Message",
    ]
)]
#[message(implements = "PIK.ESB.Messages:IMessage")]
struct IdpTeam {}

#[test]
fn implements_keeps_the_order() {
    let t = IdpTeam::message_type();
    assert_eq!(
        t.urns(),
        [
            "urn:message:PIK.ESB.Messages.Implementation.BOP:IdpTeam",
            "urn:message:PIK.ESB.Messages.Implementation.BOP:BopMessage",
            "urn:message:PIK.ESB.Messages.Implementation:Message",
            "urn:message:PIK.ESB.Messages:IMessage",
        ]
    );
    assert_eq!(t.implemented().len(), 3);
    assert_eq!(
        t.fault().urns(),
        [
            "urn:message:MassTransit:Fault[[PIK.ESB.Messages.Implementation.BOP:IdpTeam]]",
            "urn:message:MassTransit:Fault[[PIK.ESB.Messages.Implementation.BOP:BopMessage]]",
            "urn:message:MassTransit:Fault[[PIK.ESB.Messages.Implementation:Message]]",
            "urn:message:MassTransit:Fault[[PIK.ESB.Messages:IMessage]]",
            "urn:message:MassTransit:Fault",
        ]
    );
}

#[derive(Serialize, Deserialize, Message)]
#[message(namespace = "Ns")]
#[message(
    name = "Everything+AtOnce",
    urn = "everything",
    entity_name = "everything-exchange",
    fault_entity_name = "everything-faults",
    implements = ["Ns:IEvent"],
    crate = "::ferrybus_core",
)]
enum Everything {
    A,
    B { x: i32 },
}

#[test]
fn keys_combine_and_enums_work() {
    let t = Everything::message_type();
    assert_eq!(t.urn(), "urn:message:everything");
    assert_eq!(t.entity_name(), "everything-exchange");
    assert_eq!(t.dotnet_name(), "Ns.Everything+AtOnce");
    assert_eq!(
        t.urns(),
        ["urn:message:everything", "urn:message:Ns:IEvent"]
    );
    assert_eq!(t.fault().entity_name(), "everything-faults");
    let _ = (Everything::A, Everything::B { x: 1 });
}

#[allow(non_camel_case_types)]
#[derive(Serialize, Deserialize, Message)]
#[message(namespace = "Ns")]
struct r#match {}

#[test]
fn raw_identifiers_lose_their_prefix() {
    assert_eq!(r#match::message_type().urn(), "urn:message:Ns:match");
}

#[test]
fn the_identity_is_cached() {
    let a = IdpTeam::message_type();
    let b = IdpTeam::message_type();
    assert_eq!(a, b);
    // Distinct types keep distinct caches.
    assert_ne!(a, OrderPlaced::message_type());
    let from_threads: Vec<MessageType> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(Faulty::message_type)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(from_threads.iter().all(|t| *t == Faulty::message_type()));
}

fn generic_user<M: Message>() -> String {
    M::message_type().entity_name().to_owned()
}

#[test]
fn usable_through_the_trait() {
    assert_eq!(generic_user::<Inner>(), "Ns:Outer-Inner");
}

mod correlation {
    //! MassTransit's correlation id send convention
    //! (`CorrelationIdMessageSendTopologyConvention`): `CorrelatedBy<Guid>`, else a `Guid` /
    //! `Guid?` property `CorrelationId`, else `EventId`, else `CommandId`.
    use super::*;
    use uuid::Uuid;

    #[derive(Serialize, Deserialize, Message)]
    #[serde(rename_all = "camelCase")]
    #[message(namespace = "Ns")]
    struct AllThree {
        command_id: Uuid,
        event_id: Uuid,
        correlation_id: Option<Uuid>,
    }

    #[derive(Serialize, Deserialize, Message)]
    #[message(namespace = "Ns")]
    struct EventAndCommand {
        #[serde(rename = "CommandId")]
        command: Uuid,
        #[serde(rename = "EventId")]
        event: Uuid,
    }

    #[derive(Serialize, Deserialize, Message)]
    #[message(namespace = "Ns")]
    struct NotAGuid {
        correlation_id: String,
        event_id: Uuid,
    }

    #[derive(Serialize, Deserialize, Message)]
    #[message(namespace = "Ns", correlated_by = "order_id")]
    struct Explicit {
        order_id: Uuid,
        correlation_id: Uuid,
    }

    #[derive(Serialize, Deserialize, Message)]
    #[message(namespace = "Ns")]
    struct Renamed {
        #[serde(rename = "orderId")]
        correlation_id: Uuid,
    }

    #[test]
    fn correlation_id_first_then_event_id_then_command_id() {
        let (c, e, m) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let all = AllThree {
            command_id: m,
            event_id: e,
            correlation_id: Some(c),
        };
        assert_eq!(all.correlation_id(), Some(c));
        // The property is chosen by type, not by value: a `Guid?` CorrelationId that is null
        // sets none, as MassTransit's selector picked that property.
        let unset = AllThree {
            correlation_id: None,
            ..all
        };
        assert_eq!(Message::correlation_id(&unset), None);
        let two = EventAndCommand {
            command: m,
            event: e,
        };
        assert_eq!(two.correlation_id(), Some(e));
        let nil = EventAndCommand {
            command: m,
            event: Uuid::nil(),
        };
        assert_eq!(nil.correlation_id(), None, "Guid.Empty sets none");
    }

    #[test]
    fn a_property_that_is_not_a_guid_is_skipped() {
        let e = Uuid::from_u128(2);
        let m = NotAGuid {
            correlation_id: "x".into(),
            event_id: e,
        };
        assert_eq!(m.correlation_id(), Some(e));
    }

    #[test]
    fn correlated_by_wins_and_a_rename_hides_a_name() {
        let order = Uuid::from_u128(9);
        let m = Explicit {
            order_id: order,
            correlation_id: Uuid::from_u128(1),
        };
        assert_eq!(Message::correlation_id(&m), Some(order));
        let renamed = Renamed {
            correlation_id: order,
        };
        assert_eq!(Message::correlation_id(&renamed), None);
        assert_eq!(
            OrderPlaced::message_type().urn(),
            "urn:message:Bookstore.Contracts:OrderPlaced"
        );
        let placed = OrderPlaced {
            order_id: order,
            quantity: 1,
        };
        assert_eq!(
            placed.correlation_id(),
            None,
            "no attribute, no convention field"
        );
    }
}
