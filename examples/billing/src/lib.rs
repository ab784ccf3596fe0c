//! Run with `cargo run --release --bin billing`, then publish an order with
//! `cargo run --release --bin place-order -- 12.00 TRY`.
//!
//! Billing consumes `OrderPlaced` as a .NET MassTransit publisher sends it (exchange
//! `Bookstore.Contracts:OrderPlaced`, queue `billing-invoice`), charges the order through a fake
//! payment gateway with the order id as idempotency key, writes the invoice and publishes
//! `InvoiceCreated` (and `PaymentCaptured`) through the consumer outbox. A second endpoint,
//! `billing-payments`, runs the payment state machine. You will see one log line per message:
//!
//! ```text
//! INFO example_billing::invoice: invoice created order_id=… invoice_id=… amount=12.00 currency=TRY charge_attempts=1
//! INFO example_billing::payments: PaymentCaptured: payment is now Captured payment_id=… status=Captured
//! ```
//!
//! A duplicate of the same message is acknowledged by the inbox without reaching the consumer;
//! an invalid order (`total <= 0`, currency not three capital letters) is tried three times and
//! lands in `billing-invoice_error`, and a `Fault<OrderPlaced>` is published.
//!
//! The modules are the building blocks the service ([`Billing`]) and the scenario tests share:
//! [`config`], [`gateway`], [`invoice`], [`payments`], [`schema`], [`app`].

pub mod app;
pub mod config;
pub mod gateway;
pub mod invoice;
pub mod payments;
pub mod schema;

pub use app::Billing;
pub use config::Config;
