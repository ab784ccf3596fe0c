//! Helpers for the broker tests: unique names, a probe connection that reads broker state
//! with passive declares and `basic_get`, event waits, and cleanup.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrybus_core::Message;
use ferrybus_rabbitmq::{Event, RabbitMqBus};
use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::broadcast;

pub const URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
pub const WAIT: Duration = Duration::from_secs(20);

/// A name unique to this test run.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Polls `f` until it returns `Some`, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for the first event matching `pred`.
pub async fn wait_event(
    rx: &mut broadcast::Receiver<Event>,
    timeout: Duration,
    pred: impl Fn(&Event) -> bool,
) -> Event {
    let wait = async {
        loop {
            match rx.recv().await {
                Ok(event) if pred(&event) => return event,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("event stream closed"),
            }
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .expect("timed out waiting for an event")
}

/// A separate connection to look at (and clean up) broker state.
pub struct Probe {
    connection: Connection,
    channel: Channel,
    created: Mutex<(Vec<String>, Vec<String>)>,
}

impl Probe {
    pub async fn new() -> Self {
        let connection = Connection::connect(URI, ConnectionProperties::default())
            .await
            .expect("probe connects");
        let channel = connection.create_channel().await.expect("probe channel");
        Self {
            connection,
            channel,
            created: Mutex::new((Vec::new(), Vec::new())),
        }
    }

    /// Registers queues and exchanges to delete in [`Probe::cleanup`].
    pub fn track(&self, queues: &[&str], exchanges: &[&str]) {
        let mut c = self.created.lock().unwrap();
        c.0.extend(queues.iter().map(|s| s.to_string()));
        c.1.extend(exchanges.iter().map(|s| s.to_string()));
    }

    /// Registers an endpoint queue and everything MassTransit derives from it.
    pub fn track_endpoint(&self, queue: &str) {
        let error = format!("{queue}_error");
        let skipped = format!("{queue}_skipped");
        self.track(&[queue, &error, &skipped], &[queue, &error, &skipped]);
    }

    pub async fn exchange_exists(&self, name: &str) -> bool {
        let ch = self.connection.create_channel().await.unwrap();
        let options = lapin::options::ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let ok = ch
            .exchange_declare(
                name.into(),
                lapin::ExchangeKind::Fanout,
                options,
                FieldTable::default(),
            )
            .await
            .is_ok();
        let _ = ch.close(200, "".into()).await;
        ok
    }

    /// Whether an active declare with these flags succeeds (the broker refuses different flags).
    pub async fn exchange_flags_match(&self, name: &str, durable: bool, auto_delete: bool) -> bool {
        let ch = self.connection.create_channel().await.unwrap();
        let options = lapin::options::ExchangeDeclareOptions {
            durable,
            auto_delete,
            ..Default::default()
        };
        let ok = ch
            .exchange_declare(
                name.into(),
                lapin::ExchangeKind::Fanout,
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
        let ch = self.connection.create_channel().await.unwrap();
        let options = QueueDeclareOptions {
            durable,
            ..Default::default()
        };
        let result = ch.queue_declare(name.into(), options, arguments).await;
        if let Err(error) = &result {
            eprintln!("declare {name}: {error}");
        }
        let ok = result.is_ok();
        let _ = ch.close(200, "".into()).await;
        ok
    }

    /// The message count of `name`, or `None` if it does not exist.
    pub async fn queue_count(&self, name: &str) -> Option<u32> {
        let ch = self.connection.create_channel().await.unwrap();
        let options = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let q = ch
            .queue_declare(name.into(), options, FieldTable::default())
            .await
            .ok();
        let _ = ch.close(200, "".into()).await;
        q.map(|q| q.message_count())
    }

    /// Takes one message from `queue` (auto-ack).
    pub async fn get(&self, queue: &str) -> Option<BasicGetMessage> {
        let ch = self.connection.create_channel().await.unwrap();
        let got = ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .ok()
            .flatten();
        let _ = ch.close(200, "".into()).await;
        got
    }

    /// Waits until `queue` yields a message.
    pub async fn wait_get(&self, queue: &str) -> BasicGetMessage {
        eventually(&format!("a message in {queue}"), WAIT, || self.get(queue)).await
    }

    /// An exclusive queue bound to `exchange`, to see what is published there.
    pub async fn bind_probe(&self, exchange: &str) -> String {
        let name = unique("probe");
        let options = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..Default::default()
        };
        self.channel
            .queue_declare(name.as_str().into(), options, FieldTable::default())
            .await
            .unwrap();
        self.channel
            .queue_bind(
                name.as_str().into(),
                exchange.into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        name
    }

    /// Publishes raw bytes as a foreign (e.g. .NET) producer would.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) {
        self.channel
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    pub async fn cleanup(&self) {
        let (queues, exchanges) = std::mem::take(&mut *self.created.lock().unwrap());
        for q in queues {
            let ch = self.connection.create_channel().await.unwrap();
            let _ = ch
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        for e in exchanges {
            let ch = self.connection.create_channel().await.unwrap();
            let _ = ch
                .exchange_delete(e.as_str().into(), ExchangeDeleteOptions::default())
                .await;
        }
        let _ = self.connection.close(200, "".into()).await;
    }
}

/// The AMQP properties MassTransit puts on an envelope message.
pub fn mt_properties(message_id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_content_type("application/vnd.masstransit+json".into())
        .with_message_id(message_id.into())
        .with_delivery_mode(2)
}

pub fn header<'a>(m: &'a BasicGetMessage, name: &str) -> Option<&'a AMQPValue> {
    m.delivery.properties.headers().as_ref()?.inner().get(name)
}

pub fn header_str(m: &BasicGetMessage, name: &str) -> Option<String> {
    match header(m, name)? {
        AMQPValue::LongString(s) => Some(s.to_string()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

pub fn header_int(m: &BasicGetMessage, name: &str) -> Option<i64> {
    match header(m, name)? {
        AMQPValue::LongLongInt(i) => Some(*i),
        AMQPValue::LongInt(i) => Some((*i).into()),
        _ => None,
    }
}

pub type Seen<T> = Arc<Mutex<Vec<T>>>;

/// Defines a message type `$name` with fields `n: u32` and `fail: bool`, named `$urn` (`Ns:Type`).
#[macro_export]
macro_rules! test_message {
    ($name:ident, $urn:expr) => {
        test_message!($name, $urn, []);
    };
    ($name:ident, $urn:expr, [$($base:expr),*]) => {
        #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            pub n: u32,
            #[serde(default)]
            pub fail: bool,
        }
        impl ferrybus_core::Message for $name {
            fn message_type() -> ferrybus_core::MessageType {
                ferrybus_core::MessageType::parse($urn).unwrap()
                    $(.implements(ferrybus_core::MessageType::parse($base).unwrap()))*
            }
        }
    };
}

/// The future a boxed test consumer returns.
pub type ConsumeFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<(), ferrybus_core::ConsumeError>> + Send>>;

/// Records what a consumer saw.
pub fn recorder<M>(
    seen: Seen<M>,
) -> impl Fn(ferrybus_core::ConsumeContext<M>) -> ConsumeFuture + Send + Sync + 'static
where
    M: Message + Clone,
{
    move |ctx| {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().push(ctx.message().clone());
            Ok(())
        })
    }
}

pub async fn start(bus: ferrybus_rabbitmq::RabbitMqBusBuilder) -> RabbitMqBus {
    bus.start().await.expect("bus starts")
}
