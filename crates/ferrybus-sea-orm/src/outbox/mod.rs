//! The bus outbox: publish and send from outside a consumer, inside the caller's own
//! transaction. [`OutboxDeliveryService`](crate::OutboxDeliveryService) sends the rows after
//! commit.

mod bus;

pub use bus::{BusOutbox, OutboxPublisher};
