//! [`Probe`]: a separate AMQP connection to look at broker state, publish raw messages as a
//! foreign producer would, and delete what a test declared; [`Received`]: a message it took.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ferrybus_core::endpoint::{error_queue_name, skipped_queue_name};
use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::Value;

use crate::{eventually, unique, WAIT};

/// A separate AMQP connection to look at broker state, publish raw messages and clean up. Each
/// operation opens a channel of its own, so a refused declaration (which closes its channel)
/// never breaks the next one.
#[derive(Debug)]
pub struct Probe {
    url: String,
    connection: Mutex<Arc<Connection>>,
    tracked: Mutex<(Vec<String>, Vec<String>)>,
}

impl Probe {
    /// Connects to `url` (usually [`amqp_url`](crate::amqp_url)).
    pub async fn connect(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            connection: Mutex::new(Arc::new(open(url).await)),
            tracked: Mutex::new((Vec::new(), Vec::new())),
        }
    }

    /// A fresh channel; the connection is opened again when the broker closed it (a probe's
    /// refused operations close their channels, and now and then the connection with them).
    async fn channel(&self) -> Channel {
        let connection = self.connection.lock().unwrap().clone();
        if let Ok(channel) = connection.create_channel().await {
            return channel;
        }
        let fresh = Arc::new(open(&self.url).await);
        *self.connection.lock().unwrap() = fresh.clone();
        fresh.create_channel().await.expect("probe channel")
    }

    /// Registers queues and exchanges to delete in [`Probe::cleanup`].
    pub fn track(&self, queues: &[&str], exchanges: &[&str]) {
        let mut tracked = self.tracked.lock().unwrap();
        tracked.0.extend(queues.iter().map(|s| s.to_string()));
        tracked.1.extend(exchanges.iter().map(|s| s.to_string()));
    }

    /// Registers an endpoint and what MassTransit derives from it: queues and exchanges
    /// `queue`, `queue_error`, `queue_skipped`.
    pub fn track_endpoint(&self, queue: &str) {
        let error = error_queue_name(queue);
        let skipped = skipped_queue_name(queue);
        self.track(&[queue, &error, &skipped], &[queue, &error, &skipped]);
    }

    /// Declares the fanout exchange `name` with MassTransit's flags (durable), so probes can be
    /// bound before anyone publishes.
    pub async fn declare_exchange(&self, name: &str) {
        let ch = self.channel().await;
        let options = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.exchange_declare(
            name.into(),
            ExchangeKind::Fanout,
            options,
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("declare exchange {name}: {e}"));
        let _ = ch.close(200, "".into()).await;
    }

    /// A queue bound to `exchange` (declared durable when missing) that collects what is
    /// published there; deleted at cleanup (and by the broker after 10 idle minutes).
    pub async fn bind_probe(&self, exchange: &str) -> String {
        self.declare_exchange(exchange).await;
        self.bind_probe_existing(exchange).await
    }

    /// Like [`Probe::bind_probe`], for an exchange that exists already with whatever flags it
    /// has (a temporary exchange refuses a durable declare).
    pub async fn bind_probe_existing(&self, exchange: &str) -> String {
        let name = unique("probe");
        let mut args = FieldTable::default();
        args.insert("x-expires".into(), AMQPValue::LongLongInt(600_000));
        self.declare_queue(&name, true, args)
            .await
            .expect("probe queue");
        let ch = self.channel().await;
        ch.queue_bind(
            name.as_str().into(),
            exchange.into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("binding {exchange}: {e}"));
        let _ = ch.close(200, "".into()).await;
        name
    }

    /// Declares queue `name` with these flags and arguments (tracked: deleted at cleanup); the
    /// broker's refusal (`PRECONDITION_FAILED`) comes back as the error.
    pub async fn declare_queue(
        &self,
        name: &str,
        durable: bool,
        arguments: FieldTable,
    ) -> Result<(), lapin::Error> {
        self.track(&[name], &[]);
        let ch = self.channel().await;
        let options = QueueDeclareOptions {
            durable,
            ..Default::default()
        };
        let declared = ch.queue_declare(name.into(), options, arguments).await;
        let _ = ch.close(200, "".into()).await;
        declared.map(drop)
    }

    /// Deletes queue `name` (and its messages) now.
    pub async fn delete_queue(&self, name: &str) {
        let ch = self.channel().await;
        ch.queue_delete(name.into(), QueueDeleteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("delete queue {name}: {e}"));
        let _ = ch.close(200, "".into()).await;
    }

    /// Takes one message from `queue` (auto-ack), if there is one.
    pub async fn get(&self, queue: &str) -> Option<BasicGetMessage> {
        let ch = self.channel().await;
        let got = ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .ok()
            .flatten();
        let _ = ch.close(200, "".into()).await;
        got
    }

    /// Waits until `queue` yields a message; panics after [`WAIT`].
    pub async fn wait_get(&self, queue: &str) -> BasicGetMessage {
        eventually(&format!("a message in {queue}"), WAIT, || self.get(queue)).await
    }

    /// Takes messages from `queue` until one satisfies `pred` (others are dropped: they belong
    /// to other tests publishing the same message type); panics after [`WAIT`].
    pub async fn wait_for(&self, queue: &str, pred: impl Fn(&Received) -> bool) -> Received {
        eventually(&format!("a matching message in {queue}"), WAIT, || async {
            while let Some(message) = self.get(queue).await {
                let received = Received::from(message);
                if pred(&received) {
                    return Some(received);
                }
            }
            None
        })
        .await
    }

    /// The number of ready messages in `queue`, or `None` when it does not exist.
    pub async fn queue_count(&self, queue: &str) -> Option<u32> {
        let ch = self.channel().await;
        let options = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let q = ch
            .queue_declare(queue.into(), options, FieldTable::default())
            .await
            .ok();
        let _ = ch.close(200, "".into()).await;
        q.map(|q| q.message_count())
    }

    /// Whether the exchange `name` exists.
    pub async fn exchange_exists(&self, name: &str) -> bool {
        let options = ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        };
        self.declare_exchange_with(name, options).await
    }

    /// Whether an active declare with these flags succeeds (the broker refuses other flags).
    pub async fn exchange_flags_match(&self, name: &str, durable: bool, auto_delete: bool) -> bool {
        let options = ExchangeDeclareOptions {
            durable,
            auto_delete,
            ..Default::default()
        };
        self.declare_exchange_with(name, options).await
    }

    async fn declare_exchange_with(&self, name: &str, options: ExchangeDeclareOptions) -> bool {
        let ch = self.channel().await;
        let ok = ch
            .exchange_declare(
                name.into(),
                ExchangeKind::Fanout,
                options,
                FieldTable::default(),
            )
            .await
            .is_ok();
        let _ = ch.close(200, "".into()).await;
        ok
    }

    /// Whether an active queue declare with these flags and arguments succeeds.
    pub async fn queue_flags_match(
        &self,
        name: &str,
        durable: bool,
        arguments: FieldTable,
    ) -> bool {
        let ch = self.channel().await;
        let options = QueueDeclareOptions {
            durable,
            ..Default::default()
        };
        let result = ch.queue_declare(name.into(), options, arguments).await;
        if let Err(error) = &result {
            eprintln!("declare {name}: {error}");
        }
        let _ = ch.close(200, "".into()).await;
        result.is_ok()
    }

    /// Publishes raw bytes as a foreign (.NET) producer would, and waits for the confirm.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) {
        let ch = self.channel().await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        ch.basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
        let _ = ch.close(200, "".into()).await;
    }

    /// Deletes what was tracked (queues first, then exchanges).
    pub async fn cleanup(&self) {
        let (queues, exchanges) = std::mem::take(&mut *self.tracked.lock().unwrap());
        for queue in queues {
            let ch = self.channel().await;
            let _ = ch
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await;
            let _ = ch.close(200, "".into()).await;
        }
        for exchange in exchanges {
            let ch = self.channel().await;
            let _ = ch
                .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                .await;
            let _ = ch.close(200, "".into()).await;
        }
    }
}

async fn open(url: &str) -> Connection {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("RabbitMQ is reachable")
}

/// The AMQP properties MassTransit puts on an envelope message.
pub fn mt_properties(message_id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_content_type("application/vnd.masstransit+json".into())
        .with_message_id(message_id.into())
        .with_delivery_mode(2)
}

fn header<'a>(message: &'a BasicGetMessage, name: &str) -> Option<&'a AMQPValue> {
    message
        .delivery
        .properties
        .headers()
        .as_ref()?
        .inner()
        .get(name)
}

/// Whether `message` carries header `name` at all.
pub fn has_header(message: &BasicGetMessage, name: &str) -> bool {
    header(message, name).is_some()
}

/// A string header of `message`.
pub fn header_str(message: &BasicGetMessage, name: &str) -> Option<String> {
    match header(message, name)? {
        AMQPValue::LongString(s) => Some(s.to_string()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

/// An integer header of `message`.
pub fn header_int(message: &BasicGetMessage, name: &str) -> Option<i64> {
    match header(message, name)? {
        AMQPValue::LongLongInt(i) => Some(*i),
        AMQPValue::LongInt(i) => Some((*i).into()),
        _ => None,
    }
}

/// A message taken from a queue: its body as JSON and its AMQP properties and headers.
#[derive(Debug)]
pub struct Received {
    /// The body, parsed as JSON (`Null` if it is not JSON).
    pub body: Value,
    /// The AMQP headers, as text.
    pub headers: HashMap<String, String>,
    /// The `content_type` property.
    pub content_type: Option<String>,
    /// The `message_id` property.
    pub message_id: Option<String>,
    /// The `delivery_mode` property.
    pub delivery_mode: Option<u8>,
}

impl From<BasicGetMessage> for Received {
    fn from(message: BasicGetMessage) -> Self {
        let delivery = message.delivery;
        let properties = &delivery.properties;
        let headers = properties
            .headers()
            .as_ref()
            .map(|table| {
                table
                    .inner()
                    .iter()
                    .map(|(k, v)| (k.to_string(), amqp_text(v)))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            body: serde_json::from_slice(&delivery.data).unwrap_or(Value::Null),
            headers,
            content_type: properties.content_type().as_ref().map(|s| s.to_string()),
            message_id: properties.message_id().as_ref().map(|s| s.to_string()),
            delivery_mode: *properties.delivery_mode(),
        }
    }
}

fn amqp_text(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(s) => s.to_string(),
        AMQPValue::ShortString(s) => s.to_string(),
        AMQPValue::LongLongInt(i) => i.to_string(),
        AMQPValue::LongInt(i) => i.to_string(),
        AMQPValue::ShortInt(i) => i.to_string(),
        AMQPValue::Boolean(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}
