//! Channels of one connection: [`ChannelSlot`], a shared channel re-opened when the broker closed
//! it, and [`Declarer`], where declarations run, isolating a refused one from the others.

use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection};
use tokio::sync::Mutex;

use crate::error::{RabbitMqError, Result};

/// Whether `channel` closed while `connection` stays open.
pub(crate) fn closed_under(connection: &Connection, channel: &Channel) -> bool {
    !channel.status().connected() && connection.status().connected()
}

/// Where declarations run: the connection's shared declaration channel, opened when a
/// declaration is first needed (the topology cache skips those made on this connection already).
///
/// A refused declaration closes the channel it ran on, and with it every declaration in flight
/// there, of other publishes, moves and endpoints. A declaration that failed because its channel
/// closed under it runs once more, alone, on a channel of its own: the refused one fails again
/// (closing only that channel), the others succeed; what follows goes to the shared channel,
/// opened again.
#[derive(Clone, Copy)]
pub(crate) struct Declarer<'a> {
    pub(crate) connection: &'a Connection,
    pub(crate) slot: &'a ChannelSlot,
}

impl Declarer<'_> {
    /// Runs one declaration (`declare` on a channel), as above; `what` names it in errors.
    pub(crate) async fn run<T, F, Fut>(&self, what: impl Fn() -> String, declare: F) -> Result<T>
    where
        F: Fn(Channel) -> Fut,
        Fut: std::future::Future<Output = lapin::Result<T>>,
    {
        let channel = self.slot.get(self.connection).await?;
        let result = match declare(channel.clone()).await {
            Err(error) if closed_under(self.connection, &channel) => {
                tracing::debug!(target: "ferrybus::rabbitmq", %error, "the declaration channel closed; declaring again on a channel of its own");
                let own = ChannelSlot::open(self.connection, false).await?;
                let result = declare(own.clone()).await;
                close_quietly(&own).await;
                result
            }
            result => result,
        };
        result.map_err(|e| RabbitMqError::amqp(what(), e))
    }
}

/// A lazily opened channel, re-opened when the broker closed it.
///
/// Every publish asks for it, so the open channel is read under a plain mutex held only for a
/// clone: concurrent publishes do not queue behind each other (an async mutex hands itself from
/// waiter to waiter, one task wake-up per publish). Only opening a channel takes the async
/// `opening` lock, so one task opens it while the others wait for that one.
pub(crate) struct ChannelSlot {
    confirm: bool,
    channel: std::sync::Mutex<Option<Channel>>,
    opening: Mutex<()>,
}

impl ChannelSlot {
    pub(crate) fn new(confirm: bool) -> Self {
        Self {
            confirm,
            channel: std::sync::Mutex::new(None),
            opening: Mutex::new(()),
        }
    }

    /// The channel while it is open.
    fn open_channel(&self) -> Option<Channel> {
        self.channel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|c| c.status().connected())
            .cloned()
    }

    pub(crate) fn current(&self) -> Option<Channel> {
        self.channel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) async fn get(&self, connection: &Connection) -> Result<Channel> {
        if let Some(channel) = self.open_channel() {
            return Ok(channel);
        }
        let _opening = self.opening.lock().await;
        if let Some(channel) = self.open_channel() {
            return Ok(channel);
        }
        let channel = Self::open(connection, self.confirm).await?;
        *self.channel.lock().unwrap_or_else(|e| e.into_inner()) = Some(channel.clone());
        Ok(channel)
    }

    /// A new channel on `connection`, in confirm mode if `confirm`.
    pub(crate) async fn open(connection: &Connection, confirm: bool) -> Result<Channel> {
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| RabbitMqError::amqp("opening a channel", e))?;
        if confirm {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| RabbitMqError::amqp("enabling publisher confirms", e))?;
        }
        Ok(channel)
    }
}

/// Closes a channel of one operation's own (it may be closed already: a refusal closed it).
pub(crate) async fn close_quietly(channel: &Channel) {
    if channel.status().connected() {
        let _ = channel.close(200, "done".into()).await;
    }
}
