//! [`InboxConfig`]: the tables and how consumer ids are derived.

use std::collections::HashMap;

use ferrybus_core::{consumer_id, ConsumerInfo};
use uuid::Uuid;

use crate::config::StorageConfig;

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
/// consumer, give the .NET consumer type name (or a fixed id):
///
/// ```
/// use ferrybus_sea_orm::{InboxConfig, StorageConfig, Tables};
/// let config = InboxConfig::new(StorageConfig::new(Tables::new()))
///     .dotnet_consumer("InvoiceConsumer", "Billing.Consumers.InvoiceConsumer")
///     .consumer_id("AuditConsumer", uuid::Uuid::nil());
/// # let _ = config;
/// ```
#[derive(Clone, Debug)]
pub struct InboxConfig {
    storage: StorageConfig,
    consumer_ids: HashMap<String, ConsumerIdSource>,
}

impl InboxConfig {
    /// An inbox over the tables of `storage`.
    pub fn new(storage: StorageConfig) -> Self {
        Self {
            storage,
            consumer_ids: HashMap::new(),
        }
    }

    /// Uses a fixed consumer id for the consumer named `consumer` (its [`ConsumerInfo::name`]).
    pub fn consumer_id(mut self, consumer: impl Into<String>, id: Uuid) -> Self {
        self.consumer_ids
            .insert(consumer.into(), ConsumerIdSource::Fixed(id));
        self
    }

    /// Derives the consumer id of `consumer` from the .NET consumer type name (namespace
    /// qualified, e.g. `Billing.Consumers.InvoiceConsumer`), the message's .NET name and the
    /// queue, exactly as MassTransit does.
    pub fn dotnet_consumer(
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
    pub fn dotnet_consumer_of(
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

    /// The storage settings.
    pub fn storage(&self) -> &StorageConfig {
        &self.storage
    }

    /// The consumer id the inbox uses for `consumer`.
    ///
    /// ```
    /// use ferrybus_core::{ConsumerInfo, MessageType};
    /// use ferrybus_sea_orm::{InboxConfig, StorageConfig};
    /// let info = ConsumerInfo::new(
    ///     "InvoiceConsumer",
    ///     MessageType::parse("Billing.Contracts:OrderPlaced").unwrap(),
    ///     "billing-invoice",
    /// );
    /// let config = InboxConfig::new(StorageConfig::default());
    /// assert_eq!(config.resolve_consumer_id(&info), info.consumer_id());
    /// ```
    pub fn resolve_consumer_id(&self, consumer: &ConsumerInfo) -> Uuid {
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
