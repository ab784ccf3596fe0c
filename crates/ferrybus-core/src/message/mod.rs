//! Messages and their MassTransit identity: URNs, .NET type names, exchange names.
//!
//! Every message type implements [`Message`], usually through `#[derive(Message)]`:
//!
//! ```
//! use ferrybus_core::{Message, MessageType};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Serialize, Deserialize, Message)]
//! #[serde(rename_all = "camelCase")]
//! #[message(namespace = "Bookstore.Contracts", implements = ["Bookstore.Contracts:IOrderEvent"])]
//! struct OrderPlaced {
//!     order_id: uuid::Uuid,
//! }
//!
//! let t = OrderPlaced::message_type();
//! assert_eq!(t.urn(), "urn:message:Bookstore.Contracts:OrderPlaced");
//! assert_eq!(t.entity_name(), "Bookstore.Contracts:OrderPlaced");
//! assert_eq!(t.urns(), ["urn:message:Bookstore.Contracts:OrderPlaced",
//!                       "urn:message:Bookstore.Contracts:IOrderEvent"]);
//! ```

pub mod correlation;
mod naming;

use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};
use uuid::Uuid;

pub use ferrybus_dotnet::{bind, bind_value, ParseTypeNameError, TypeName, URN_PREFIX};
pub use naming::{consumer_id, dotted_type_name, short_type_name};

/// A Rust type that travels as a MassTransit message.
///
/// The payload is (de)serialized with serde; MassTransit writes camelCase, so most contracts carry
/// `#[serde(rename_all = "camelCase")]`. The identity comes from [`Message::message_type`].
///
/// Implement it with `#[derive(Message)]`, or by hand:
///
/// ```
/// use ferrybus_core::{Message, MessageType};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct Ping {}
///
/// impl Message for Ping {
///     fn message_type() -> MessageType {
///         MessageType::parse("MassTransit.TestFramework.Messages:PingMessage").unwrap()
///     }
/// }
/// assert_eq!(Ping::message_type().entity_name(), "MassTransit.TestFramework.Messages:PingMessage");
/// ```
pub trait Message: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The MassTransit identity of this message type.
    fn message_type() -> MessageType;

    /// The envelope `correlationId` every send and publish of this message gets, unless the
    /// caller sets one ([`SendOptions::correlation_id`](crate::SendOptions::correlation_id)
    /// wins, as MassTransit's send pipe runs the caller's callback after its topology's
    /// `SetCorrelationIdFilter`). MassTransit's convention
    /// (`src/MassTransit/Topology/Configuration/CorrelationIdMessageSendTopologyConvention.cs`):
    /// `CorrelatedBy<Guid>`, else a `Guid`/`Guid?` property named `CorrelationId`, else
    /// `EventId`, else `CommandId`; a nil id sets none.
    ///
    /// `#[derive(Message)]` implements it: `#[message(correlated_by = "field")]` names the
    /// field (the `CorrelatedBy<Guid>` of .NET), else the first `Uuid` / `Option<Uuid>` field
    /// whose name is `CorrelationId`, `EventId` or `CommandId` — in that order, compared without
    /// case and underscores, a field's `#[serde(rename = "...")]` counting as its name. By hand,
    /// the default is none:
    ///
    /// ```
    /// use ferrybus_core::{Message, MessageType};
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct OrderShipped { order_id: uuid::Uuid }
    /// impl Message for OrderShipped {
    ///     fn message_type() -> MessageType { MessageType::parse("Shop:OrderShipped").unwrap() }
    ///     fn correlation_id(&self) -> Option<uuid::Uuid> { Some(self.order_id) }
    /// }
    /// let id = uuid::Uuid::now_v7();
    /// assert_eq!(OrderShipped { order_id: id }.correlation_id(), Some(id));
    /// ```
    fn correlation_id(&self) -> Option<Uuid> {
        None
    }
}

/// The MassTransit identity of a message type: its URN, its exchange (entity) name, its .NET type
/// name, and the types it also advertises (the .NET base classes and interfaces of the contract).
///
/// Cheap to clone.
///
/// ```
/// use ferrybus_core::MessageType;
/// let created = MessageType::parse("Contracts.Events:OrderCreated")
///     .unwrap()
///     .with_entity_name("OrderCReted"); // [EntityName("OrderCReted")]
/// assert_eq!(created.entity_name(), "OrderCReted");
/// let fault = created.fault();
/// assert_eq!(fault.urns(), ["urn:message:MassTransit:Fault[[Contracts.Events:OrderCreated]]",
///                           "urn:message:MassTransit:Fault"]);
/// assert_eq!(fault.entity_name(), "MassTransit:Fault--Contracts.Events:OrderCreated--");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MessageType(Arc<Inner>);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Inner {
    type_name: TypeName,
    urn: String,
    entity_name: String,
    fault_entity_name: Option<String>,
    implements: Vec<MessageType>,
}

impl MessageType {
    /// The identity MassTransit gives `type_name` with no attributes.
    pub fn new(type_name: TypeName) -> Self {
        Self(Arc::new(Inner {
            urn: type_name.urn(),
            entity_name: type_name.entity_name(),
            fault_entity_name: None,
            implements: Vec::new(),
            type_name,
        }))
    }

    /// Parses `Ns:Type` (or a full URN) into a [`MessageType`].
    pub fn parse(name: &str) -> Result<Self, ParseTypeNameError> {
        TypeName::parse(name).map(Self::new)
    }

    /// Overrides the URN, as `[MessageUrn("x")]` does: `x` becomes `urn:message:x`; a value that
    /// already has a scheme (`scheme:x` with `useDefaultPrefix: false`) is used as it is when it
    /// starts with `urn:`.
    pub fn with_urn(mut self, urn: &str) -> Self {
        let urn = if urn.starts_with("urn:") {
            urn.to_owned()
        } else {
            format!("{URN_PREFIX}{urn}")
        };
        Arc::make_mut(&mut self.0).urn = urn;
        self
    }

    /// Overrides the exchange name, as `[EntityName("x")]` does.
    pub fn with_entity_name(mut self, entity_name: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.0).entity_name = entity_name.into();
        self
    }

    /// Overrides the exchange name of `Fault<Self>`, as `[FaultEntityName("x")]` does.
    pub fn with_fault_entity_name(mut self, entity_name: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.0).fault_entity_name = Some(entity_name.into());
        self
    }

    /// Adds a base class or interface this message also advertises (nearest base first, then
    /// interfaces, as MassTransit orders them).
    pub fn implements(mut self, base: MessageType) -> Self {
        Arc::make_mut(&mut self.0).implements.push(base);
        self
    }

    /// The .NET type name.
    pub fn type_name(&self) -> &TypeName {
        &self.0.type_name
    }

    /// The primary URN (`urn:message:Ns:Type`).
    pub fn urn(&self) -> &str {
        &self.0.urn
    }

    /// The exchange name messages of this type are published to.
    pub fn entity_name(&self) -> &str {
        &self.0.entity_name
    }

    /// The .NET short type name (`Ns.Type`), used in fault headers and consumer ids.
    pub fn dotnet_name(&self) -> String {
        self.0.type_name.dotnet_name()
    }

    /// The advertised base types, as given.
    pub fn implemented(&self) -> &[MessageType] {
        &self.0.implements
    }

    /// Every type this message is published as, the type itself first, without duplicates.
    pub fn all_types(&self) -> Vec<MessageType> {
        let mut out: Vec<MessageType> = Vec::new();
        self.collect_types(&mut out);
        out
    }

    fn collect_types(&self, out: &mut Vec<MessageType>) {
        if !out.iter().any(|t| t.urn().eq_ignore_ascii_case(self.urn())) {
            out.push(self.clone());
        }
        for base in &self.0.implements {
            base.collect_types(out);
        }
    }

    /// The `messageType` array written into envelopes: this URN, then every base type's URN.
    pub fn urns(&self) -> Vec<String> {
        self.all_types()
            .iter()
            .map(|t| t.urn().to_owned())
            .collect()
    }

    /// Whether `urn` names this type or one it implements (case-insensitive, as MassTransit matches).
    pub fn is_urn(&self, urn: &str) -> bool {
        self.urn().eq_ignore_ascii_case(urn)
    }

    /// The identity of `Fault<Self>`: `urn:message:MassTransit:Fault[[Ns:T]]`, exchange
    /// `MassTransit:Fault--Ns:T--` (or the fault entity name override), advertising `Fault<Base>` for
    /// every base of `Self` and finally `MassTransit:Fault`.
    pub fn fault(&self) -> MessageType {
        Self::fault_with_bases(self, true)
    }

    fn fault_with_bases(of: &MessageType, with_base_fault: bool) -> MessageType {
        let type_name = TypeName::generic("MassTransit", "Fault", vec![of.type_name().clone()]);
        let mut fault = MessageType::new(type_name);
        if let Some(name) = &of.0.fault_entity_name {
            fault = fault.with_entity_name(name.clone());
        }
        for base in &of.all_types()[1..] {
            fault = fault.implements(Self::fault_with_bases(base, false));
        }
        if with_base_fault {
            fault = fault.implements(MessageType::new(TypeName::new("MassTransit", "Fault")));
        }
        fault
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> MessageType {
        MessageType::parse(s).unwrap()
    }

    #[test]
    fn urns_list_the_type_then_bases_then_interfaces() {
        let team = t("PIK.ESB.Messages.Implementation.BOP:IdpTeam")
            .implements(t("PIK.ESB.Messages.Implementation.BOP:BopMessage"))
            .implements(t("PIK.ESB.Messages.Implementation:Message"))
            .implements(t("PIK.ESB.Messages:IMessage"));
        assert_eq!(
            team.urns(),
            [
                "urn:message:PIK.ESB.Messages.Implementation.BOP:IdpTeam",
                "urn:message:PIK.ESB.Messages.Implementation.BOP:BopMessage",
                "urn:message:PIK.ESB.Messages.Implementation:Message",
                "urn:message:PIK.ESB.Messages:IMessage",
            ]
        );
    }

    #[test]
    fn fault_lists_faults_of_bases_then_fault() {
        let item = t("Play.Items.Contracts.Events:ItemCreated")
            .implements(t("Play.Common.Abs.Events:IEvent"));
        let fault = item.fault();
        assert_eq!(
            fault.urns(),
            [
                "urn:message:MassTransit:Fault[[Play.Items.Contracts.Events:ItemCreated]]",
                "urn:message:MassTransit:Fault[[Play.Common.Abs.Events:IEvent]]",
                "urn:message:MassTransit:Fault",
            ]
        );
        assert_eq!(
            fault.entity_name(),
            "MassTransit:Fault--Play.Items.Contracts.Events:ItemCreated--"
        );
        let bases: Vec<_> = fault
            .all_types()
            .iter()
            .map(|t| t.entity_name().to_owned())
            .collect();
        assert_eq!(
            bases,
            [
                "MassTransit:Fault--Play.Items.Contracts.Events:ItemCreated--",
                "MassTransit:Fault--Play.Common.Abs.Events:IEvent--",
                "MassTransit:Fault",
            ]
        );
    }

    #[test]
    fn custom_urn_and_entity_names() {
        let m = t("Ns:T")
            .with_urn("custom-contract")
            .with_entity_name("custom-exchange");
        assert_eq!(m.urn(), "urn:message:custom-contract");
        assert_eq!(m.entity_name(), "custom-exchange");
        // The generic argument's [MessageUrn] is ignored by the fault URN.
        assert_eq!(m.fault().urn(), "urn:message:MassTransit:Fault[[Ns:T]]");
        let m = t("Ns:T").with_fault_entity_name("t-faults");
        assert_eq!(m.fault().entity_name(), "t-faults");
        let m = t("Ns:T").with_urn("urn:custom:t");
        assert_eq!(m.urn(), "urn:custom:t");
    }
}
