//! [`Publisher`]: the [`MessageSink`] that puts outgoing messages on the broker with
//! MassTransit's topology and properties, waiting for publisher confirms.

use std::sync::Arc;

use async_trait::async_trait;
use ferrybus_core::{EndpointAddress, MessageSink, OutgoingMessage, PublishError};

use crate::connection::{Connector, Live, PublishTarget};
use crate::convert::outgoing_properties;
use crate::error::{ErrorKind, RabbitMqError, Result};

/// Delivers [`OutgoingMessage`]s to RabbitMQ: declares the destination exchange on first use
/// (with the address's flags), declares and binds the queue for `bind=true` / `queue:` addresses,
/// binds base-type exchanges for publishes, publishes with routing key `""`, and waits for the
/// publisher confirm. While the connection is down (including before the first connection of a
/// bus started with [`start_background`](crate::RabbitMqBusBuilder::start_background)) it waits
/// up to the publish timeout for one, then fails with
/// [`ErrorKind::NotConnected`](crate::ErrorKind::NotConnected); it never waits forever.
///
/// The bus publishes through it ([`Publish`](ferrybus_core::Publish) on
/// [`RabbitMqBus`](crate::RabbitMqBus)), and hands it to its storage to deliver outbox rows.
#[derive(Clone)]
pub(crate) struct Publisher {
    connector: Arc<Connector>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

impl Publisher {
    pub(crate) fn new(connector: Arc<Connector>) -> Self {
        Self { connector }
    }

    /// Sends one message and waits for the broker's confirm.
    pub(crate) async fn send(&self, message: &OutgoingMessage) -> Result<()> {
        let address = message.destination()?;
        let timeout = self.connector.publish_timeout();
        let live = self.connector.live(timeout).await?;
        // The confirm wait has its own deadline; this one also bounds opening the channel and
        // declaring the destination, so a publish never hangs on a stalled connection.
        let result =
            tokio::time::timeout(timeout, Self::declare_and_publish(&live, &address, message))
                .await
                .unwrap_or_else(|_| {
                    Err(RabbitMqError::new(
                        ErrorKind::Timeout,
                        format!(
                            "publishing to exchange {:?} took longer than {timeout:?}",
                            address.name
                        ),
                    ))
                });
        if result
            .as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::Broker)
        {
            // An entity may have been deleted behind our back: declare again next time.
            live.topology.forget_all();
        }
        result?;
        tracing::debug!(
            target: "ferrybus::rabbitmq",
            message_id = %message.message_id,
            exchange = %address.name,
            "published"
        );
        Ok(())
    }

    async fn declare_and_publish(
        live: &Live,
        address: &EndpointAddress,
        message: &OutgoingMessage,
    ) -> Result<()> {
        let channel = live.declare_channel().await?;
        live.topology
            .destination(&channel, address, &message.publish_bindings)
            .await?;
        let target = PublishTarget {
            exchange: &address.name,
            routing_key: "",
            mandatory: false,
        };
        live.publish(target, &message.body, outgoing_properties(message))
            .await
    }
}

#[async_trait]
impl MessageSink for Publisher {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        self.send(&message).await.map_err(Into::into)
    }
}
