//! Which consumer an inbox consumer id stands for: the id is an MD5 hash of
//! `"<consumer>:<message type>:<queue>"` ([`consumer_id`]), so a name is known only when one of
//! the candidates hashes to it: a `--consumer` key, or the fault headers of a copy found in an
//! error queue (`MT-Fault-ConsumerType`, the envelope's message types or `MT-Fault-MessageType`,
//! and the queue of `MT-Fault-InputAddress`).

use std::collections::HashMap;

use ferrybus_core::address::EndpointAddress;
use ferrybus_core::message::{consumer_id, MessageType};
use uuid::Uuid;

use super::queues::Copy;
use super::tables::{InboxEntry, OutboxEntry};

/// A `--consumer` argument: a consumer id and the name to show for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConsumerKey {
    id: Uuid,
    name: String,
}

impl ConsumerKey {
    /// `CONSUMER:MESSAGE_TYPE:QUEUE` (hashed as MassTransit does) or `NAME=UUID`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        if let Some((name, id)) = text.rsplit_once('=') {
            let id = Uuid::parse_str(id.trim())
                .map_err(|_| format!("{text:?}: {id:?} after `=` is not a consumer id (a UUID)"))?;
            return Ok(Self {
                id,
                name: name.trim().to_owned(),
            });
        }
        let (consumer, rest) = text.split_once(':').unwrap_or((text, ""));
        let Some((message_type, queue)) = rest.rsplit_once(':') else {
            return Err(format!(
                "{text:?} is neither CONSUMER:MESSAGE_TYPE:QUEUE nor NAME=UUID"
            ));
        };
        if [consumer, message_type, queue].iter().any(|p| p.is_empty()) {
            return Err(format!(
                "{text:?}: CONSUMER, MESSAGE_TYPE and QUEUE must not be empty"
            ));
        }
        Ok(Self::hashed(consumer, message_type, queue))
    }

    /// The key of `consumer` of `message_type` (its .NET name) on `queue`.
    fn hashed(consumer: &str, message_type: &str, queue: &str) -> Self {
        Self {
            id: consumer_id(consumer, message_type, queue),
            name: format!("{consumer} ({message_type} on {queue})"),
        }
    }
}

/// The consumer names known for this trace.
pub(crate) struct Names(HashMap<Uuid, String>);

impl Names {
    /// The names of `keys`, and of the consumers the fault headers of `copies` name.
    pub(crate) fn new(keys: &[ConsumerKey], copies: &[Copy]) -> Self {
        let mut names = HashMap::new();
        for key in copies
            .iter()
            .flat_map(from_fault)
            .chain(keys.iter().cloned())
        {
            names.insert(key.id, key.name);
        }
        Self(names)
    }

    fn name(&self, id: Option<Uuid>) -> Option<String> {
        id.and_then(|id| self.0.get(&id).cloned())
    }

    /// `rows` with their consumers named where known.
    pub(crate) fn name_inbox(&self, mut rows: Vec<InboxEntry>) -> Vec<InboxEntry> {
        for row in &mut rows {
            row.consumer = self.name(Some(row.consumer_id));
        }
        rows
    }

    /// `rows` with the consumers of their inbox keys named where known.
    pub(crate) fn name_outbox(&self, mut rows: Vec<OutboxEntry>) -> Vec<OutboxEntry> {
        for row in &mut rows {
            row.inbox_consumer = self.name(row.inbox_consumer_id);
        }
        rows
    }
}

/// The consumer keys a faulted copy's headers give: its consumer type with each of its message
/// types on its input queue.
fn from_fault(copy: &Copy) -> Vec<ConsumerKey> {
    let Some(consumer) = copy.summary.consumer_type.as_deref() else {
        return Vec::new();
    };
    let Some(queue) = copy.summary.input_address.as_deref().and_then(|a| {
        EndpointAddress::parse(a)
            .ok()
            .map(|e| e.queue.unwrap_or(e.name))
    }) else {
        return Vec::new();
    };
    let mut types: Vec<String> = copy
        .summary
        .message_types
        .iter()
        .filter_map(|urn| MessageType::parse(urn).ok())
        .map(|t| t.dotnet_name())
        .collect();
    types.extend(copy.fault_message_type.clone());
    types
        .iter()
        .map(|t| ConsumerKey::hashed(consumer, t, &queue))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hashed_and_fixed_keys() {
        let key = ConsumerKey::parse(
            "Sample.Components.Consumers.ValidateRegistrationConsumer:Sample.Components.Contracts.RegistrationSubmitted:validate-registration",
        )
        .unwrap();
        // MassTransit's id for this consumer (ferrybus_core::message::consumer_id's example).
        assert_eq!(key.id.to_string(), "8a7d86ea-1445-26d8-67cd-f62e24c9d4a8");
        assert!(key
            .name
            .starts_with("Sample.Components.Consumers.ValidateRegistrationConsumer ("));
        let fixed = ConsumerKey::parse("billing=8a7d86ea-1445-26d8-67cd-f62e24c9d4a8").unwrap();
        assert_eq!(fixed.id, key.id);
        assert_eq!(fixed.name, "billing");
        assert!(ConsumerKey::parse("billing=nope")
            .unwrap_err()
            .contains("not a consumer id"));
        assert!(ConsumerKey::parse("InvoiceConsumer").is_err());
        assert!(ConsumerKey::parse("InvoiceConsumer::q").is_err());
    }
}
