//! The broker connection of the tool: one lapin connection per command, named
//! `ferrybus-cli`, with helpers that turn the broker's refusals into one-line errors.

use ferrybus_core::address::redact;
use std::time::Duration;

use ferrybus_rabbitmq::HostSettings;
use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};

use crate::error::{CliError, CliErrorKind};

/// How long connecting may take before the command gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The `NOT_FOUND` reply code.
pub(crate) const NOT_FOUND: u16 = 404;
/// The `PRECONDITION_FAILED` reply code.
pub(crate) const PRECONDITION_FAILED: u16 = 406;

/// An open broker connection.
pub(crate) struct Broker {
    connection: Connection,
    settings: HostSettings,
    shown: String,
}

/// A queue's counts, from a passive declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueCounts {
    /// Messages ready for delivery.
    pub(crate) messages: u32,
    /// Consumers attached.
    pub(crate) consumers: u32,
}

impl Broker {
    /// Connects to `url` (`amqp://`, `amqps://`, or MassTransit's `rabbitmq://`).
    pub(crate) async fn connect(url: &str) -> Result<Self, CliError> {
        let shown = redact(url);
        let settings = HostSettings::parse(url)
            .map_err(|e| CliError::usage(format!("--amqp-url {shown} is not a broker URL: {e}")))?;
        let properties =
            ConnectionProperties::default().with_connection_name("ferrybus-cli".into());
        let connection = tokio::time::timeout(
            CONNECT_TIMEOUT,
            Connection::connect(settings.connection_uri(), properties),
        )
        .await
        .map_err(|_| {
            CliError::new(
                CliErrorKind::Broker,
                format!(
                    "connecting to {shown}: no answer within {}s",
                    CONNECT_TIMEOUT.as_secs()
                ),
            )
        })?
        .map_err(|e| CliError::broker(format!("connecting to {shown}"), describe(&e)))?;
        Ok(Self {
            connection,
            settings,
            shown,
        })
    }

    /// The broker URL with its password masked.
    pub(crate) fn shown_url(&self) -> &str {
        &self.shown
    }

    /// The virtual host (`/` for the default).
    pub(crate) fn vhost(&self) -> &str {
        self.settings.vhost()
    }

    /// A fresh channel.
    pub(crate) async fn channel(&self) -> Result<Channel, CliError> {
        self.connection
            .create_channel()
            .await
            .map_err(|e| CliError::broker("opening a channel", describe(&e)))
    }

    /// A fresh channel with publisher confirms.
    pub(crate) async fn confirm_channel(&self) -> Result<Channel, CliError> {
        let channel = self.channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| CliError::broker("enabling publisher confirms", describe(&e)))?;
        Ok(channel)
    }

    /// The counts of queue `name`, or `None` when it does not exist (a passive declare on a
    /// channel of its own, since a refusal closes the channel).
    pub(crate) async fn queue_counts(&self, name: &str) -> Result<Option<QueueCounts>, CliError> {
        let channel = self.channel().await?;
        let options = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let result = channel
            .queue_declare(short(name)?, options, FieldTable::default())
            .await;
        match result {
            Ok(queue) => {
                close(&channel).await;
                Ok(Some(QueueCounts {
                    messages: queue.message_count(),
                    consumers: queue.consumer_count(),
                }))
            }
            Err(error) if reply_code(&error) == Some(NOT_FOUND) => Ok(None),
            Err(error) => Err(CliError::broker(
                format!("looking up queue {name}"),
                describe(&error),
            )),
        }
    }

    /// Like [`Broker::queue_counts`], failing when the queue does not exist.
    pub(crate) async fn existing_queue(&self, name: &str) -> Result<QueueCounts, CliError> {
        self.queue_counts(name).await?.ok_or_else(|| {
            CliError::new(
                CliErrorKind::Broker,
                format!(
                    "queue {name} does not exist on vhost {} of {}",
                    self.vhost(),
                    self.shown
                ),
            )
        })
    }

    /// Closes the connection (outstanding unacknowledged deliveries return to their queues).
    pub(crate) async fn close(self) {
        let _ = self.connection.close(200, "done".into()).await;
    }
}

/// Closes a channel, ignoring errors (it may be closed by the broker already).
pub(crate) async fn close(channel: &Channel) {
    let _ = channel.close(200, "done".into()).await;
}

/// An entity name as an AMQP short string.
pub(crate) fn short(name: &str) -> Result<lapin::types::ShortString, CliError> {
    lapin::types::ShortString::try_new(name)
        .map_err(|_| CliError::usage(format!("{name:.40}…: names are at most 255 bytes")))
}

/// The broker's reply code of a refused operation (404, 406 …).
pub(crate) fn reply_code(error: &lapin::Error) -> Option<u16> {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(e) => Some(e.get_id()),
        _ => None,
    }
}

/// A lapin error as one line: the broker's own text for refusals (`NOT_FOUND - no queue …`).
pub(crate) fn describe(error: &lapin::Error) -> String {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(e) => e.get_message().to_string(),
        _ => error.to_string(),
    }
}
