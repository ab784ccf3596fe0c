//! The connection supervisor: one AMQP connection at a time, re-opened with back-off when it is
//! lost. Each open connection is a [`Live`] generation with its own channels and declaration
//! cache, so nothing (an ack, a cached declaration) leaks from a dead connection to a new one.

mod connector;
mod outage;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use tokio::sync::OnceCell;

use crate::channel::{close_quietly, closed_under, ChannelSlot, Declarer};
use crate::error::{ErrorKind, RabbitMqError, Result};
use crate::settings::HostSettings;
use crate::topology::{short, Topology};

pub(crate) use connector::Connector;

/// One open connection and what belongs to it.
pub(crate) struct Live {
    pub(crate) generation: u64,
    /// Which of the settings' hosts it is connected to.
    pub(crate) host_index: usize,
    connection: Connection,
    publish: ChannelSlot,
    declare: ChannelSlot,
    pub(crate) topology: Topology,
    delayed_exchange: OnceCell<bool>,
    settings: Arc<HostSettings>,
}

impl Live {
    /// Whether the connection is still usable.
    pub(crate) fn is_open(&self) -> bool {
        self.connection.status().connected()
    }

    /// How long a publish may take (the settings' publish timeout).
    pub(crate) fn publish_timeout(&self) -> Duration {
        self.settings.publish_timeout
    }

    /// A new channel in confirm mode (for a consumer that also publishes).
    pub(crate) async fn create_confirm_channel(&self) -> Result<Channel> {
        ChannelSlot::open(&self.connection, true).await
    }

    /// A new channel (for a consumer).
    pub(crate) async fn create_channel(&self) -> Result<Channel> {
        self.connection
            .create_channel()
            .await
            .map_err(|e| RabbitMqError::amqp("opening a channel", e))
    }

    /// Where this connection's declarations run (see [`Declarer`]).
    pub(crate) fn declarer(&self) -> Declarer<'_> {
        Declarer {
            connection: &self.connection,
            slot: &self.declare,
        }
    }

    /// Publishes and waits for the broker's confirm. A nack, or a mandatory message that was
    /// returned, is an error. `properties` builds the message's properties (again if it is sent
    /// again).
    ///
    /// Publishes share one channel per connection, and a publish the broker refuses closes it,
    /// failing every confirm pending there. So a publish the broker would refuse for what it
    /// carries (a `user_id` other than the connection's user, from a .NET outbox row's
    /// `RMQ-UserId`) goes on a channel of its own; and a publish that failed because the shared
    /// channel closed under it (another publish to an exchange deleted behind the declaration
    /// cache) is sent once more on a channel of its own: the refused one fails again, the others
    /// are confirmed. One that had reached its queues before the channel closed, unconfirmed,
    /// then arrives twice: at least once, as any publish retried after a lost confirm.
    pub(crate) async fn publish(
        &self,
        target: PublishTarget<'_>,
        body: &[u8],
        properties: impl Fn() -> BasicProperties,
    ) -> Result<()> {
        let first = properties();
        if self.foreign_user(&first) {
            return self.publish_alone(target, body, first).await;
        }
        let channel = self.publish.get(&self.connection).await?;
        match self.publish_on(&channel, target, body, first).await {
            Err(error) if self.closed_under(&channel, &error) => {
                tracing::debug!(target: "ferrybus::rabbitmq", %error, "the publishing channel closed; publishing again on a channel of its own");
                self.publish_alone(target, body, properties()).await
            }
            result => result,
        }
    }

    /// Publishes on a channel of its own, closed afterwards.
    async fn publish_alone(
        &self,
        target: PublishTarget<'_>,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<()> {
        let own = ChannelSlot::open(&self.connection, true).await?;
        let result = self.publish_on(&own, target, body, properties).await;
        close_quietly(&own).await;
        result
    }

    /// Whether `properties` name a `user_id` other than the connection's user, which the broker
    /// refuses (closing the channel) unless the user may impersonate others.
    fn foreign_user(&self, properties: &BasicProperties) -> bool {
        properties
            .user_id()
            .as_ref()
            .is_some_and(|user| user.as_str() != self.connection.status().username())
    }

    /// Whether `error` came from `channel` closing while the connection stays open (a refusal
    /// of this operation or of another one on the same channel), rather than from the broker
    /// answering (a nack, a return) or from the connection.
    fn closed_under(&self, channel: &Channel, error: &RabbitMqError) -> bool {
        matches!(error.kind(), ErrorKind::Broker | ErrorKind::NotConnected)
            && error.lapin_error().is_some()
            && closed_under(&self.connection, channel)
    }

    /// [`publish`](Self::publish) on a channel of the caller's (in confirm mode), e.g. the one
    /// consuming direct reply-to responses, which must also carry the requests.
    pub(crate) async fn publish_on(
        &self,
        channel: &Channel,
        target: PublishTarget<'_>,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<()> {
        let options = BasicPublishOptions {
            mandatory: target.mandatory,
            ..BasicPublishOptions::default()
        };
        let what = || format!("publishing to exchange {:?}", target.exchange);
        let confirm = channel
            .basic_publish(
                short(target.exchange)?,
                short(target.routing_key)?,
                options,
                body,
                properties,
            )
            .await
            .map_err(|e| RabbitMqError::amqp(what(), e))?;
        let confirmation = tokio::time::timeout(self.settings.publish_timeout, confirm)
            .await
            .map_err(|_| {
                RabbitMqError::new(
                    ErrorKind::Timeout,
                    format!("no publisher confirm: {}", what()),
                )
            })?
            .map_err(|e| RabbitMqError::amqp(what(), e))?;
        match confirmation {
            Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
            Confirmation::Ack(Some(returned)) => Err(RabbitMqError::new(
                ErrorKind::Returned,
                format!(
                    "{}: {} {}",
                    what(),
                    returned.reply_code,
                    returned.reply_text
                ),
            )),
            Confirmation::Nack(_) => Err(RabbitMqError::new(ErrorKind::Nacked, what())),
        }
    }

    /// Whether the broker has the `rabbitmq_delayed_message_exchange` plugin, probed once per
    /// connection on a throwaway connection (an unknown exchange type closes the connection).
    pub(crate) async fn delayed_exchange_supported(&self) -> bool {
        *self
            .delayed_exchange
            .get_or_init(|| probe_delayed_exchange(self.settings.clone(), self.host_index))
            .await
    }

    /// Waits for outstanding confirms, then closes the connection, waiting for the broker
    /// until `until` at most (a connection blocked by an alarm gets no answer: the close is left
    /// to finish on its own, when the broker reads it or the socket closes).
    async fn close(self: &Arc<Self>, until: tokio::time::Instant) {
        if !self.is_open() {
            return;
        }
        if let Some(channel) = self.publish.current() {
            let confirms = channel.wait_for_confirms();
            if tokio::time::timeout_at(until, confirms).await.is_err() {
                tracing::warn!(target: "ferrybus::rabbitmq", "publisher confirms still outstanding at the end of the shutdown timeout; closing anyway");
            }
        }
        let live = self.clone();
        let close = tokio::spawn(async move { live.connection.close(200, "bye".into()).await });
        if tokio::time::timeout_at(until, close).await.is_err() {
            tracing::warn!(target: "ferrybus::rabbitmq", "the broker did not answer connection.close in time; leaving it to close on its own");
        }
    }
}

/// Where a message is published: exchange, routing key, mandatory flag.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PublishTarget<'a> {
    pub(crate) exchange: &'a str,
    pub(crate) routing_key: &'a str,
    pub(crate) mandatory: bool,
}

/// Opens a connection to host `index` of `settings` (with the extra TLS roots for `amqps://`).
/// Errors name the host, never the credentials.
async fn open(settings: &HostSettings, index: usize) -> Result<Connection> {
    let mut properties = ConnectionProperties::default();
    if let Some(name) = &settings.connection_name {
        properties = properties.with_connection_name(name.as_str().into());
    }
    let host = settings.host_label(index);
    let tls = lapin::tcp::OwnedTLSConfig {
        identity: None,
        cert_chain: settings.tls_roots.clone(),
    };
    let runtime = lapin::runtime::default_runtime().map_err(|e| {
        RabbitMqError::with_source(ErrorKind::Config, "no async runtime for lapin", e)
    })?;
    let connect = Connection::connect_with_config(settings.uri(index), properties, tls, runtime);
    tokio::time::timeout(settings.connect_timeout, connect)
        .await
        .map_err(|_| {
            RabbitMqError::new(
                ErrorKind::Timeout,
                format!("connecting to the broker at {host}"),
            )
        })?
        .map_err(|e| {
            RabbitMqError::new(
                ErrorKind::NotConnected,
                format!(
                    "connecting to the broker at {host} ({})",
                    ferrybus_core::address::redact(&e.to_string())
                ),
            )
        })
}

async fn probe_delayed_exchange(settings: Arc<HostSettings>, index: usize) -> bool {
    let probe = async {
        let connection = open(&settings, index).await.ok()?;
        let channel = connection.create_channel().await.ok()?;
        let name = format!("ferrybus.delay-probe.{}", uuid::Uuid::now_v7());
        let mut args = lapin::types::FieldTable::default();
        args.insert(
            "x-delayed-type".into(),
            lapin::types::AMQPValue::LongString("fanout".into()),
        );
        let options = lapin::options::ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        };
        let kind = lapin::ExchangeKind::Custom("x-delayed-message".into());
        let supported = channel
            .exchange_declare(name.as_str().into(), kind, options, args)
            .await
            .is_ok();
        if supported {
            let _ = channel
                .exchange_delete(name.as_str().into(), Default::default())
                .await;
        }
        let _ = connection.close(200, "probe done".into()).await;
        Some(supported)
    };
    let supported = probe.await.unwrap_or(false);
    tracing::info!(target: "ferrybus::rabbitmq", supported, "probed for the delayed message exchange plugin");
    supported
}

/// The broker's reply when `error` is a channel-level one (AMQP's soft errors, which close only
/// the channel they happened on).
fn channel_refusal(error: &lapin::Error) -> Option<&lapin::protocol::AMQPError> {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(refusal)
            if matches!(refusal.kind(), lapin::protocol::AMQPErrorKind::Soft(_)) =>
        {
            Some(refusal)
        }
        _ => None,
    }
}

/// Resolves when `live`'s connection is no longer usable, with the reason.
///
/// lapin reports a channel the broker closed (`channel.close`: a soft error such as 403
/// ACCESS_REFUSED, 404 NOT_FOUND or 406 PRECONDITION_FAILED on one publish, declaration or
/// acknowledgement) on the connection's events too; the connection stays open then, and so it
/// is kept: the channel's owner opens another (the publishing and declaration channels, an
/// endpoint, the request client), and the closing is logged with the broker's reply.
async fn wait_lost(live: &Live) -> String {
    let mut errors = live.connection.events_listener();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            event = errors.next() => match event {
                Some(lapin::Event::Error(error)) => match channel_refusal(&error) {
                    Some(refusal) if live.is_open() => {
                        let host = live.settings.host_label(live.host_index);
                        tracing::warn!(
                            target: "ferrybus::rabbitmq",
                            generation = live.generation,
                            %host,
                            reply_code = refusal.get_id(),
                            reply_text = %refusal.get_message(),
                            "channel closed by the broker; the connection is kept"
                        );
                    }
                    _ => return error.to_string(),
                },
                Some(_) => {}
                None => return "the connection ended".to_owned(),
            },
            _ = tick.tick() => {
                if !live.is_open() {
                    return "the connection is closed".to_owned();
                }
            }
        }
    }
}
