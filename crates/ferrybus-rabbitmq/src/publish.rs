//! [`Publisher`]: the [`MessageSink`] that puts outgoing messages on the broker with
//! MassTransit's topology and properties, waiting for publisher confirms.

use std::sync::Arc;

use crate::properties::DIRECT_REPLY_TO;
use async_trait::async_trait;
use ferrybus_core::integration::{EndpointAddress, MessageSink, OutgoingMessage};
use ferrybus_core::PublishError;

use std::time::Duration;

use lapin::types::{AMQPValue, ShortString};
use lapin::BasicProperties;
use serde_json::{Map, Value};

use crate::connection::{Connector, Live, PublishTarget};
use crate::convert::outgoing_properties;
use crate::delay::{schedule, DelayMode};
use crate::error::{ErrorKind, RabbitMqError, Result};
use crate::topology::{Arguments, Queue};

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

    /// Sends one message and waits for the broker's confirm, inside its `<destination> send`
    /// span (feature `otel`), whose context it writes into the transport's `MT-Activity-Id`.
    pub(crate) async fn send(&self, message: &OutgoingMessage) -> Result<()> {
        let timeout = self.connector.publish_timeout();
        traced(message, |address, activity_id| async move {
            let live = self.connector.live(timeout).await?;
            Self::publish_once(&live, None, message, &address, activity_id.as_deref()).await
        })
        .await
    }

    /// [`send`](Self::send) on `channel` of `live` (a direct reply-to client's channel, which
    /// must carry the requests whose replies it consumes).
    pub(crate) async fn send_on(
        live: &Live,
        channel: &lapin::Channel,
        message: &OutgoingMessage,
    ) -> Result<()> {
        traced(message, |address, activity_id| async move {
            Self::publish_once(
                live,
                Some(channel),
                message,
                &address,
                activity_id.as_deref(),
            )
            .await
        })
        .await
    }

    async fn publish_once(
        live: &Live,
        channel: Option<&lapin::Channel>,
        message: &OutgoingMessage,
        address: &EndpointAddress,
        activity_id: Option<&str>,
    ) -> Result<()> {
        let timeout = live.publish_timeout();
        // The confirm wait has its own deadline; this one also bounds opening the channel and
        // declaring the destination, so a publish never hangs on a stalled connection.
        let publish = Self::declare_and_publish(live, address, message, channel, activity_id);
        let result = tokio::time::timeout(timeout, publish)
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
        channel: Option<&lapin::Channel>,
        activity_id: Option<&str>,
    ) -> Result<()> {
        let row = RowProperties::read(&message.properties);
        let mut exchange = row.exchange.as_deref().unwrap_or(&address.name);
        if exchange == DIRECT_REPLY_TO {
            // As MassTransit's RabbitMqSendTransportContext: the reply-to pseudo-queue has no
            // topology; its responses go through the default exchange, routed by the reply-to name.
            if row.routing_key.is_empty() {
                return Err(RabbitMqError::new(
                    ErrorKind::Config,
                    format!(
                        "RoutingKey must be specified when sending to reply-to address {:?}",
                        message.destination_address
                    ),
                ));
            }
            exchange = "";
        } else {
            live.topology
                .destination(live.declarer(), address, &message.publish_bindings)
                .await?;
        }
        // Built when sent (and again if it is sent again on a channel of its own).
        let properties = || {
            let properties = row.apply(outgoing_properties(message));
            let Some(activity_id) = activity_id else {
                return properties;
            };
            let mut headers = properties.headers().clone().unwrap_or_default();
            headers.insert(
                "MT-Activity-Id".into(),
                AMQPValue::LongString(activity_id.into()),
            );
            properties.with_headers(headers)
        };
        if let Some(delay) = row.delay.filter(|d| !d.is_zero() && !exchange.is_empty()) {
            // As MassTransit's RabbitMqSendTransportContext: through `<exchange>_delay` (the
            // delayed-message plugin) or, without it, a TTL queue dead-lettering to the exchange.
            let source = Queue {
                name: exchange.to_owned(),
                durable: address.durable,
                auto_delete: address.auto_delete,
                exclusive: false,
                arguments: Arguments::default(),
            };
            return schedule(
                live,
                DelayMode::Auto,
                &source,
                delay,
                &message.body,
                properties(),
            )
            .await;
        }
        let target = PublishTarget {
            exchange,
            routing_key: &row.routing_key,
            mandatory: row.mandatory,
        };
        match channel {
            Some(channel) => {
                live.publish_on(channel, target, &message.body, properties())
                    .await
            }
            None => live.publish(target, &message.body, properties).await,
        }
    }
}

/// Runs one send of `message` inside its `<destination> send` span: `send` gets the destination
/// and the span's `MT-Activity-Id`; the span ends with the outcome.
/// Runs `send` for `message` inside its `<destination> send` span (feature `otel`), with the
/// span's context as the `MT-Activity-Id` to write into the transport headers.
#[cfg(feature = "otel")]
async fn traced<F, Fut>(message: &OutgoingMessage, send: F) -> Result<()>
where
    F: FnOnce(Arc<EndpointAddress>, Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    use opentelemetry::context::FutureExt as _;
    let address = message.destination()?;
    let instrument = ferrybus_otel::SendInstrument::start(message, &address.name, "rabbitmq");
    let activity_id = instrument.activity_id();
    let result = send(address, activity_id)
        .with_context(instrument.context().clone())
        .await;
    match &result {
        Ok(()) => instrument.finish(None),
        Err(error) => {
            let kind = format!("{:?}", error.kind());
            instrument.finish(Some((&kind, &error.to_string())));
        }
    }
    result
}

/// Runs `send` for `message` (no send span without the `otel` feature; the message's own
/// `MT-Activity-Id`, if any, travels in its headers).
#[cfg(not(feature = "otel"))]
async fn traced<F, Fut>(message: &OutgoingMessage, send: F) -> Result<()>
where
    F: FnOnce(Arc<EndpointAddress>, Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    send(message.destination()?, None).await
}

#[async_trait]
impl MessageSink for Publisher {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        self.send(&message).await.map_err(Into::into)
    }
}

/// The transport properties of a message read back from a .NET-written outbox row, read as
/// MassTransit's `MessageSendContext.ReadPropertiesFrom` and
/// `RabbitMqMessageSendContext.ReadPropertiesFrom` read them
/// (`MassTransit/Contexts/Context/MessageSendContext.cs`,
/// `Transports/MassTransit.RabbitMqTransport/RabbitMqTransport/RabbitMqMessageSendContext.cs`):
/// `Durable`, `Mandatory`, `Delay`, `RMQ-Exchange`, `RMQ-RoutingKey`, `RMQ-AppId`,
/// `RMQ-Priority`, `RMQ-ReplyTo`, `RMQ-Type`, `RMQ-UserId` (keys case-insensitive).
#[derive(Debug, Default, PartialEq)]
struct RowProperties {
    exchange: Option<String>,
    routing_key: String,
    durable: bool,
    mandatory: bool,
    delay: Option<Duration>,
    app_id: Option<String>,
    priority: Option<u8>,
    reply_to: Option<String>,
    kind: Option<String>,
    user_id: Option<String>,
}

impl RowProperties {
    fn read(map: &Map<String, Value>) -> Self {
        let get = |key: &str| {
            map.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        };
        let string = |key: &str| match get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        let long = |key: &str| match get(key) {
            Some(Value::Number(n)) => n.as_i64(),
            Some(Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        let boolean = |key: &str, default: bool| match get(key) {
            Some(Value::Bool(b)) => *b,
            Some(_) => long(key).map_or(default, |v| v != 0),
            None => default,
        };
        let delay = match get("Delay") {
            Some(Value::String(s)) => ferrybus_core::dotnet::timespan::parse_timespan(s).ok(),
            Some(Value::Number(n)) => n.as_u64().map(Duration::from_millis),
            _ => None,
        };
        Self {
            exchange: string("RMQ-Exchange"),
            routing_key: string("RMQ-RoutingKey").unwrap_or_default(),
            durable: boolean("Durable", true),
            mandatory: boolean("Mandatory", false),
            delay,
            app_id: string("RMQ-AppId"),
            priority: long("RMQ-Priority").and_then(|p| u8::try_from(p).ok()),
            reply_to: string("RMQ-ReplyTo"),
            kind: string("RMQ-Type"),
            user_id: string("RMQ-UserId"),
        }
    }

    /// `properties` with these applied (a non-durable message is sent with delivery mode 1).
    fn apply(&self, mut properties: BasicProperties) -> BasicProperties {
        let short = |s: &str| ShortString::try_new(s).ok();
        if !self.durable {
            properties = properties.with_delivery_mode(1);
        }
        if let Some(v) = self.app_id.as_deref().and_then(short) {
            properties = properties.with_app_id(v);
        }
        if let Some(p) = self.priority {
            properties = properties.with_priority(p);
        }
        if let Some(v) = self.reply_to.as_deref().and_then(short) {
            properties = properties.with_reply_to(v);
        }
        if let Some(v) = self.kind.as_deref().and_then(short) {
            properties = properties.with_type(v);
        }
        if let Some(v) = self.user_id.as_deref().and_then(short) {
            properties = properties.with_user_id(v);
        }
        properties
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_dotnet_writes() {
        let map = json!({
            "RMQ-Exchange": "Bookstore.Contracts:OrderPlaced",
            "RMQ-RoutingKey": "eu.orders",
            "Delay": "00:00:02.5000000",
            "Durable": false,
            "mandatory": true,
            "RMQ-Priority": 3,
            "RMQ-AppId": "bookstore"
        });
        let p = RowProperties::read(map.as_object().unwrap());
        assert_eq!(
            p.exchange.as_deref(),
            Some("Bookstore.Contracts:OrderPlaced")
        );
        assert_eq!(p.routing_key, "eu.orders");
        assert_eq!(p.delay, Some(Duration::from_millis(2500)));
        assert!(!p.durable && p.mandatory);
        assert_eq!(p.priority, Some(3));
        let props = p.apply(BasicProperties::default().with_delivery_mode(2));
        assert_eq!(props.delivery_mode(), &Some(1));
        assert_eq!(
            props.app_id().as_ref().map(|s| s.as_str()),
            Some("bookstore")
        );
        assert!(RowProperties::read(&Map::new()).durable);
    }
}
