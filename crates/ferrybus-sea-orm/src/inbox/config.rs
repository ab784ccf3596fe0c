//! [`InboxConfig`]: the tables and how consumer ids are derived.

use std::collections::HashMap;
use std::sync::OnceLock;

use ferrybus_core::{consumer_id, ConsumerInfo};
use uuid::Uuid;

use crate::settings::StorageConfig;

#[derive(Clone, Debug)]
enum ConsumerIdSource {
    Fixed(Uuid),
    DotNet {
        consumer_type: String,
        message_type: Option<String>,
    },
}

/// Settings of the [`InboxLayer`](crate::InboxLayer).
///
/// The inbox key is (original message id, consumer id). By default the consumer id is derived
/// as MassTransit derives it, from the Rust names: MD5 of
/// `"<consumer name>:<message .NET type>:<queue>"`. To dedupe against a .NET instance of the same
/// consumer, give the .NET consumer type name (or a fixed id): `PostgresStorage::dotnet_consumer`,
/// `PostgresStorage::consumer_id`.
#[derive(Clone, Debug)]
pub(crate) struct InboxConfig {
    storage: StorageConfig,
    consumer_ids: HashMap<String, ConsumerIdSource>,
    pipelined: bool,
    async_delivered_commit: bool,
}

impl InboxConfig {
    /// An inbox over the tables of `storage`.
    pub(crate) fn new(storage: StorageConfig) -> Self {
        Self {
            storage,
            consumer_ids: HashMap::new(),
            pipelined: false,
            async_delivered_commit: false,
        }
    }

    /// The same settings on other tables.
    pub(crate) fn with_storage(mut self, storage: StorageConfig) -> Self {
        self.storage = storage;
        self
    }

    /// Uses a fixed consumer id for the consumer named `consumer` (its [`ConsumerInfo::name`]).
    pub(crate) fn consumer_id(mut self, consumer: impl Into<String>, id: Uuid) -> Self {
        self.consumer_ids
            .insert(consumer.into(), ConsumerIdSource::Fixed(id));
        self
    }

    /// Derives the consumer id of `consumer` from the .NET consumer type name (namespace
    /// qualified, e.g. `Billing.Consumers.InvoiceConsumer`), the message's .NET name and the
    /// queue, exactly as MassTransit does.
    pub(crate) fn dotnet_consumer(
        mut self,
        consumer: impl Into<String>,
        dotnet_type: impl Into<String>,
    ) -> Self {
        let source = ConsumerIdSource::DotNet {
            consumer_type: dotnet_type.into(),
            message_type: None,
        };
        self.consumer_ids.insert(consumer.into(), source);
        self
    }

    /// Like [`InboxConfig::dotnet_consumer`], also overriding the .NET message type name.
    pub(crate) fn dotnet_consumer_of(
        mut self,
        consumer: impl Into<String>,
        dotnet_type: impl Into<String>,
        dotnet_message_type: impl Into<String>,
    ) -> Self {
        let source = ConsumerIdSource::DotNet {
            consumer_type: dotnet_type.into(),
            message_type: Some(dotnet_message_type.into()),
        };
        self.consumer_ids.insert(consumer.into(), source);
        self
    }

    /// After the consumer's transaction commits, start sending all of its messages in order and
    /// await the broker's confirms together, instead of awaiting each confirm before the next
    /// send (the default). Only for transports that keep publish order for sends started one
    /// after another, including first sends to destinations still to be declared — verify that
    /// for your transport before turning it on. After a failed send, later messages of the same
    /// delivery may have gone out already: they are sent again with the rest.
    pub(crate) fn pipelined(mut self, enabled: bool) -> Self {
        self.pipelined = enabled;
        self
    }

    /// Whether sends after commit are pipelined (see [`InboxConfig::pipelined`]).
    pub(crate) fn is_pipelined(&self) -> bool {
        self.pipelined
    }

    /// Commits the short transaction that records "sent" after commit (inbox row `Delivered`,
    /// consumer-outbox rows deleted) with `synchronous_commit = off` (set in the statement that
    /// locks the row: no extra round trip). Off by default.
    ///
    /// The consumer's own transaction (its writes, the inbox row, its messages) stays a normal
    /// durable commit; only the bookkeeping after sending stops waiting for the WAL flush. If
    /// PostgreSQL crashes within a few hundred milliseconds of such a commit, the row may come
    /// back as consumed and not delivered with its messages still stored: they are sent again
    /// (by a redelivered copy or the sweeper), the same duplicate an application crash between
    /// send and mark already produces. Delivery stays at-least-once; nothing is lost.
    pub(crate) fn async_delivered_commit(mut self, enabled: bool) -> Self {
        self.async_delivered_commit = enabled;
        self
    }

    /// Whether [`InboxConfig::async_delivered_commit`] is on.
    pub(crate) fn is_async_delivered_commit(&self) -> bool {
        self.async_delivered_commit
    }

    /// The storage settings.
    pub(crate) fn storage(&self) -> &StorageConfig {
        &self.storage
    }

    /// The consumer id the inbox uses for `consumer`.
    pub(crate) fn resolve_consumer_id(&self, consumer: &ConsumerInfo) -> Uuid {
        match self.consumer_ids.get(consumer.name()) {
            None => consumer.consumer_id(),
            Some(ConsumerIdSource::Fixed(id)) => *id,
            Some(ConsumerIdSource::DotNet {
                consumer_type,
                message_type,
            }) => {
                let message = message_type
                    .clone()
                    .unwrap_or_else(|| consumer.message_type().dotnet_name());
                consumer_id(consumer_type, &message, consumer.queue())
            }
        }
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
        let config = InboxConfig::new(StorageConfig::default())
            .dotnet_consumer("InvoiceConsumer", "Billing.Consumers.InvoiceConsumer");
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
