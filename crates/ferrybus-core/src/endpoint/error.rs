//! [`DeliveryLimitReached`]: why an endpoint faulted a delivery it never ran.

/// Why a delivery went to the error queue without running any consumer: the broker delivered it
/// `count` times without it being settled (a consumer that crashed the process each time).
#[derive(Debug, thiserror::Error)]
#[error("delivered {count} times without being settled (the queue's delivery limit is {limit}): moved to the error queue without running the consumer again")]
pub struct DeliveryLimitReached {
    pub(crate) count: u32,
    pub(crate) limit: u32,
}
