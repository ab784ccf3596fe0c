//! [`InboxConfig`]: what an inbox layer reads of its storage's settings.

use std::sync::{Arc, OnceLock};

use ferrybus_core::consume::ConsumerInfo;
use uuid::Uuid;

use crate::settings::Settings;

/// The settings an inbox layer (and the batch inbox) runs with: its storage's one
/// [`Settings`], read through what the inbox needs of them.
#[derive(Clone, Debug)]
pub(crate) struct InboxConfig {
    storage: Arc<Settings>,
}

impl InboxConfig {
    /// An inbox with the settings of `storage`.
    pub(crate) fn new(storage: Arc<Settings>) -> Self {
        Self { storage }
    }

    /// The storage settings: the tables and their statements.
    pub(crate) fn storage(&self) -> &Settings {
        &self.storage
    }

    /// Whether the messages a delivery sends after commit are pipelined: every send started in
    /// order, the confirms awaited together (`PostgresStorage::pipelined_sends`).
    pub(crate) fn is_pipelined(&self) -> bool {
        self.storage.pipelined_sends
    }

    /// Whether the "sent" bookkeeping after commit commits with `synchronous_commit = off`
    /// (`PostgresStorage::async_delivered_commit`).
    pub(crate) fn is_async_delivered_commit(&self) -> bool {
        self.storage.inbox.async_delivered_commit
    }

    /// The consumer id the inbox uses for `consumer`.
    pub(crate) fn resolve_consumer_id(&self, consumer: &ConsumerInfo) -> Uuid {
        self.storage.inbox.resolve_consumer_id(consumer)
    }
}

/// The consumer id of the consumer an inbox layer serves, derived on its first delivery and
/// kept: a .NET-named consumer's id is an MD5 of its names, which every delivery would otherwise
/// compute again. A layer asked for another consumer (another name, message type or queue,
/// told apart by [`ConsumerInfo::consumer_id`]) derives that one's id each time.
#[derive(Debug, Default)]
pub(crate) struct KnownConsumerId {
    /// (the consumer's own id, the id the inbox uses for it)
    first: OnceLock<(Uuid, Uuid)>,
}

impl KnownConsumerId {
    /// The inbox consumer id of `consumer` under `config` ([`InboxConfig::resolve_consumer_id`]).
    pub(crate) fn get(&self, config: &InboxConfig, consumer: &ConsumerInfo) -> Uuid {
        let (own, resolved) = *self
            .first
            .get_or_init(|| (consumer.consumer_id(), config.resolve_consumer_id(consumer)));
        if own == consumer.consumer_id() {
            resolved
        } else {
            config.resolve_consumer_id(consumer)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Tables;
    use ferrybus_core::message::consumer_id;
    use ferrybus_core::MessageType;

    fn consumer(message: &str, queue: &str) -> ConsumerInfo {
        ConsumerInfo::new(
            "InvoiceConsumer",
            MessageType::parse(message).unwrap(),
            queue,
        )
    }

    #[test]
    fn a_kept_id_is_the_derived_one_and_only_for_its_consumer() {
        let mut settings = Settings::new(Tables::new());
        settings.inbox.dotnet_consumer(
            "InvoiceConsumer".into(),
            "Billing.Consumers.InvoiceConsumer".into(),
            None,
        );
        let config = InboxConfig::new(Arc::new(settings));
        let known = KnownConsumerId::default();
        let first = consumer("Billing.Contracts:OrderPlaced", "billing");
        let expected = consumer_id(
            "Billing.Consumers.InvoiceConsumer",
            "Billing.Contracts.OrderPlaced",
            "billing",
        );
        assert_eq!(known.get(&config, &first), expected);
        assert_eq!(known.get(&config, &first), expected, "kept");
        for other in [
            consumer("Billing.Contracts:OrderPlaced", "billing-eu"),
            consumer("Billing.Contracts:OrderCancelled", "billing"),
        ] {
            let id = known.get(&config, &other);
            assert_eq!(id, config.resolve_consumer_id(&other));
            assert_ne!(id, expected);
        }
    }
}
