//! The names MassTransit derives from a receive endpoint's queue name.

/// The suffix of an endpoint's error queue (and exchange): faulted messages go to
/// `<queue>_error`. MassTransit's `DefaultErrorQueueNameFormatter`
/// (`src/MassTransit.Abstractions/Topology/Topology/DefaultErrorQueueNameFormatter.cs`).
pub const ERROR_QUEUE_SUFFIX: &str = "_error";

/// The suffix of an endpoint's skipped queue (and exchange): messages no consumer takes go to
/// `<queue>_skipped`. MassTransit's `DefaultDeadLetterQueueNameFormatter`
/// (`src/MassTransit.Abstractions/Topology/Topology/DefaultDeadLetterQueueNameFormatter.cs`).
pub const SKIPPED_QUEUE_SUFFIX: &str = "_skipped";

/// The error queue of endpoint `queue`.
///
/// ```
/// use ferrybus_core::endpoint::error_queue_name;
/// assert_eq!(error_queue_name("billing-invoice"), "billing-invoice_error");
/// ```
pub fn error_queue_name(queue: &str) -> String {
    format!("{queue}{ERROR_QUEUE_SUFFIX}")
}

/// The skipped queue of endpoint `queue`.
///
/// ```
/// use ferrybus_core::endpoint::skipped_queue_name;
/// assert_eq!(skipped_queue_name("billing-invoice"), "billing-invoice_skipped");
/// ```
pub fn skipped_queue_name(queue: &str) -> String {
    format!("{queue}{SKIPPED_QUEUE_SUFFIX}")
}
