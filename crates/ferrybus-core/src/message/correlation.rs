//! What `#[derive(Message)]` expands to for MassTransit's correlation id send convention
//! ([`Message::correlation_id`](super::Message::correlation_id)): a field read as a correlation
//! id when its type is a `Uuid` or an `Option<Uuid>`, ignored otherwise — as MassTransit's
//! `PropertyCorrelationIdSelector` only picks a `Guid` or `Guid?` property.
//!
//! The derive wraps a field in a [`Probe`] and calls `guid_field()` with both traits in scope:
//! [`GuidField`] answers for `Uuid` and `Option<Uuid>` fields, [`OtherField`] (one reference
//! further away, so method resolution tries it second) for every other type.
//!
//! ```
//! use ferrybus_core::message::correlation::{GuidField as _, OtherField as _, Probe};
//! let id = uuid::Uuid::from_u128(7);
//! assert_eq!((&Probe(&id)).guid_field(), Some(Some(id)));
//! assert_eq!((&Probe(&uuid::Uuid::nil())).guid_field(), Some(None)); // Guid.Empty: none
//! assert_eq!((&Probe(&Some(id))).guid_field(), Some(Some(id)));
//! assert_eq!((&Probe(&"text")).guid_field(), None); // not a Guid property: the next rule
//! ```

/// The type of correlation ids, for the code the derive writes.
pub use uuid::Uuid;

/// A field the derive asks about.
pub struct Probe<'a, T: ?Sized>(pub &'a T);

/// A `Uuid` or `Option<Uuid>` field: `Some(its value)`, the value `None` when it is nil or
/// absent (MassTransit sets no correlation id for `Guid.Empty`).
pub trait GuidField {
    /// `Some(value)`: the field is a correlation id property.
    fn guid_field(&self) -> Option<Option<Uuid>>;
}

impl GuidField for Probe<'_, Uuid> {
    fn guid_field(&self) -> Option<Option<Uuid>> {
        Some(Some(*self.0).filter(|id| !id.is_nil()))
    }
}

impl GuidField for Probe<'_, Option<Uuid>> {
    fn guid_field(&self) -> Option<Option<Uuid>> {
        Some(self.0.filter(|id| !id.is_nil()))
    }
}

/// Any other field: not a correlation id property (`None`).
pub trait OtherField {
    /// Always `None`.
    fn guid_field(&self) -> Option<Option<Uuid>> {
        None
    }
}

impl<T: ?Sized> OtherField for &Probe<'_, T> {}

/// The value of the field `#[message(correlated_by = "...")]` names: a `Uuid` or an
/// `Option<Uuid>`, nil read as none (MassTransit's `CorrelatedBy<Guid>` selector).
///
/// ```
/// use ferrybus_core::message::correlation::CorrelationValue;
/// assert_eq!(uuid::Uuid::nil().correlation_value(), None);
/// assert_eq!(Some(uuid::Uuid::max()).correlation_value(), Some(uuid::Uuid::max()));
/// ```
pub trait CorrelationValue {
    /// The correlation id, if set and not nil.
    fn correlation_value(&self) -> Option<Uuid>;
}

impl CorrelationValue for Uuid {
    fn correlation_value(&self) -> Option<Uuid> {
        Some(*self).filter(|id| !id.is_nil())
    }
}

impl CorrelationValue for Option<Uuid> {
    fn correlation_value(&self) -> Option<Uuid> {
        self.filter(|id| !id.is_nil())
    }
}
