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
