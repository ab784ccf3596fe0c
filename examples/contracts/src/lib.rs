//! Message contracts of the examples, as a .NET `Bookstore.Contracts` assembly defines them.
//!
//! A .NET MassTransit service with these records in namespace `Bookstore.Contracts` exchanges
//! messages with the Rust examples unchanged:
//!
//! ```csharp
//! namespace Bookstore.Contracts;
//! public record OrderPlaced(Guid OrderId, decimal Total, string Currency);
//! public record InvoiceCreated(Guid InvoiceId, Guid OrderId, decimal Amount, string Currency);
//! public record PaymentCaptured(Guid PaymentId, Guid OrderId);
//! public record PaymentRefunded(Guid PaymentId, Guid OrderId);
//! public record OrderSubmitted(Guid OrderId, decimal Total, string Currency);
//! public record OrderItemAdded(Guid OrderId, string Sku);
//! public record OrderShipped(Guid OrderId);
//! public record OrderCompleted(Guid OrderId, Guid InvoiceId, int ItemCount);
//! ```

use ferrybus::Message;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// An order was placed: published by the order API, consumed by billing.
///
/// ```
/// use example_contracts::OrderPlaced;
/// use ferrybus::Message;
/// assert_eq!(OrderPlaced::message_type().urn(), "urn:message:Bookstore.Contracts:OrderPlaced");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
pub struct OrderPlaced {
    /// The order.
    pub order_id: Uuid,
    /// The order total (a .NET `decimal`, written as a string).
    #[serde(with = "ferrybus::dotnet::decimal")]
    pub total: Decimal,
    /// ISO 4217 currency code, e.g. `TRY`.
    pub currency: String,
}

/// Billing created the invoice of an order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
pub struct InvoiceCreated {
    /// The new invoice.
    pub invoice_id: Uuid,
    /// The invoiced order.
    pub order_id: Uuid,
    /// The invoiced amount.
    #[serde(with = "ferrybus::dotnet::decimal")]
    pub amount: Decimal,
    /// The currency.
    pub currency: String,
}

/// The payment provider captured a payment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
pub struct PaymentCaptured {
    /// The payment.
    pub payment_id: Uuid,
    /// Its order.
    pub order_id: Uuid,
}

/// The payment provider refunded a payment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
pub struct PaymentRefunded {
    /// The payment.
    pub payment_id: Uuid,
    /// Its order.
    pub order_id: Uuid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_dotnet_writes() {
        let order: OrderPlaced = serde_json::from_str(
            r#"{"orderId":"7569172a-7c0e-44fb-a297-54bdebe6ce44","total":"12.00","currency":"TRY"}"#,
        )
        .unwrap();
        assert_eq!(order.total.to_string(), "12.00");
        let written = serde_json::to_value(&order).unwrap();
        assert_eq!(written["total"], "12.00");
    }
}

/// An order was submitted: starts the order saga (`examples/order-saga`).
///
/// ```
/// use example_contracts::OrderSubmitted;
/// use ferrybus::Message;
/// assert_eq!(OrderSubmitted::message_type().urn(), "urn:message:Bookstore.Contracts:OrderSubmitted");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
pub struct OrderSubmitted {
    /// The order.
    pub order_id: Uuid,
    /// The order total (a .NET `decimal`).
    #[serde(with = "ferrybus::dotnet::decimal")]
    pub total: Decimal,
    /// ISO 4217 currency code.
    pub currency: String,
}

/// An item was added to a submitted order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
pub struct OrderItemAdded {
    /// The order.
    pub order_id: Uuid,
    /// The item's stock-keeping unit.
    pub sku: String,
}

/// An invoiced order was shipped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
pub struct OrderShipped {
    /// The order.
    pub order_id: Uuid,
}

/// The order saga finished an order: published when a shipped order completes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
pub struct OrderCompleted {
    /// The order.
    pub order_id: Uuid,
    /// Its invoice.
    pub invoice_id: Uuid,
    /// How many items it had.
    pub item_count: i32,
}
