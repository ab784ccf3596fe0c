//! [`Probe`]: a separate AMQP connection to look at broker state, publish raw messages, and
//! clean up; [`Received`]: a message it took from a queue.

use std::collections::HashMap;

use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::Value;

use crate::{eventually, unique_suffix, WAIT};

/// A separate AMQP connection to look at broker state, publish raw messages, and clean up.
#[derive(Debug)]
pub struct Probe {
    connection: Connection,
    tracked: std::sync::Mutex<(Vec<String>, Vec<String>)>,
}

impl Probe {
    /// Connects to `url`.
    pub async fn connect(url: &str) -> Self {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .expect("RabbitMQ is reachable");
        Self {
            connection,
            tracked: std::sync::Mutex::new((Vec::new(), Vec::new())),
        }
    }

    /// Deletes `queue`, `queue_error`, `queue_skipped` and the exchanges of the same names at
    /// cleanup.
    pub fn track_endpoint(&self, queue: &str) {
        let mut tracked = self.tracked.lock().unwrap();
        for name in [
            queue.to_owned(),
            format!("{queue}_error"),
            format!("{queue}_skipped"),
        ] {
            tracked.0.push(name.clone());
            tracked.1.push(name);
        }
    }

    async fn channel(&self) -> lapin::Channel {
        self.connection
            .create_channel()
            .await
            .expect("probe channel")
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

    /// A queue bound to `exchange` that collects what is published there (deleted at cleanup).
    pub async fn bind_probe(&self, exchange: &str) -> String {
        self.declare_exchange(exchange).await;
        let name = format!("e2e-probe-{}", unique_suffix());
        self.tracked.lock().unwrap().0.push(name.clone());
        let ch = self.channel().await;
        let options = QueueDeclareOptions {
            auto_delete: false,
            ..Default::default()
        };
        let mut args = FieldTable::default();
        args.insert("x-expires".into(), AMQPValue::LongLongInt(600_000));
        ch.queue_declare(name.as_str().into(), options, args)
            .await
            .expect("probe queue");
        ch.queue_bind(
            name.as_str().into(),
            exchange.into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("probe binding");
        let _ = ch.close(200, "".into()).await;
        name
    }

    /// Takes one message from `queue`.
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

    /// The number of ready messages in `queue`, if it exists.
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

    /// Publishes raw bytes, as a foreign (.NET) producer would, and waits for the confirm.
    pub async fn publish(&self, exchange: &str, body: &[u8], properties: BasicProperties) {
        let ch = self.channel().await;
        ch.confirm_select(Default::default())
            .await
            .expect("confirms");
        ch.basic_publish(
            exchange.into(),
            "".into(),
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

    /// Deletes what was tracked.
    pub async fn cleanup(&self) {
        let (queues, exchanges) = std::mem::take(&mut *self.tracked.lock().unwrap());
        for queue in queues {
            let ch = self.channel().await;
            let _ = ch
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        for exchange in exchanges {
            let ch = self.channel().await;
            let _ = ch
                .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
    }
}

/// A message taken from a queue: its body as JSON and its AMQP properties and headers.
#[derive(Debug)]
pub struct Received {
    /// The body, parsed as JSON (`Null` if it is not JSON).
    pub body: Value,
    /// The AMQP headers, as strings.
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
