//! Type names and consumer ids, derived as MassTransit derives them (endpoint names:
//! [`EndpointNameFormatter`](crate::endpoint::EndpointNameFormatter)).

use md5::{Digest, Md5};
use uuid::Uuid;

/// The last path segment of a Rust type name: `billing::InvoiceConsumer` → `InvoiceConsumer`.
///
/// ```
/// struct InvoiceConsumer;
/// assert_eq!(ferrybus_core::message::short_type_name::<InvoiceConsumer>(), "InvoiceConsumer");
/// ```
pub fn short_type_name<T: ?Sized>() -> &'static str {
    let full = std::any::type_name::<T>();
    let without_generics = full.split('<').next().unwrap_or(full);
    without_generics
        .rsplit("::")
        .next()
        .unwrap_or(without_generics)
}

/// A Rust type's full path, generics included, with `.` between its segments, as .NET writes
/// a namespace-qualified type name: `billing::InvoiceConsumer` → `billing.InvoiceConsumer`.
///
/// ```
/// mod billing { pub struct InvoiceConsumer; }
/// let name = ferrybus_core::message::dotted_type_name::<billing::InvoiceConsumer>();
/// assert!(name.ends_with("billing.InvoiceConsumer"), "{name}");
/// ```
pub fn dotted_type_name<T: ?Sized>() -> String {
    std::any::type_name::<T>().replace("::", ".")
}

/// The inbox consumer id MassTransit derives for a consumer on an endpoint: MD5 of
/// `"<ConsumerType>:<MessageType>:<queue>"` read as a .NET (mixed-endian) GUID.
///
/// Use the .NET names of a consumer that a .NET service also runs, so both dedupe against each
/// other (masstransit-outbox §2.1):
///
/// ```
/// use ferrybus_core::message::consumer_id;
/// let id = consumer_id(
///     "Sample.Components.Consumers.ValidateRegistrationConsumer",
///     "Sample.Components.Contracts.RegistrationSubmitted",
///     "validate-registration",
/// );
/// assert_eq!(id.to_string(), "8a7d86ea-1445-26d8-67cd-f62e24c9d4a8");
/// ```
pub fn consumer_id(consumer_type: &str, message_type: &str, queue: &str) -> Uuid {
    let key = format!("{consumer_type}:{message_type}:{queue}");
    let digest: [u8; 16] = Md5::digest(key.as_bytes()).into();
    Uuid::from_bytes_le(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names() {
        assert_eq!(short_type_name::<String>(), "String");
        assert_eq!(short_type_name::<Vec<u8>>(), "Vec");
    }
}
