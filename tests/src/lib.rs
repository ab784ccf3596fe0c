//! Support for the end-to-end scenario tests (`tests/tests/*.rs`): per-test isolation (unique
//! PostgreSQL schemas and queue names, cleaned up afterwards), a broker probe, a TCP proxy that
//! simulates a RabbitMQ outage for one test's connections only, a tiny HTTP client, and
//! poll-until helpers.
//!
//! Every test runs against the real services: PostgreSQL at `DATABASE_URL` and RabbitMQ at
//! `AMQP_URL` (the defaults of `scripts/services.sh`).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Once};
use std::time::Duration;

use example_billing::config::{DEFAULT_AMQP_URL, DEFAULT_DATABASE_URL};
use example_billing::Config;
use ferrybus::rabbitmq::{Event, RabbitMqBus, ReceiveEndpoint};
use ferrybus::sea_orm::{StorageConfig, Tables};
use ferrybus::SendOptions;
use futures::FutureExt;
use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, watch};
use uuid::Uuid;

/// How long the tests wait for something that should happen (generous: the machine is shared).
pub const WAIT: Duration = Duration::from_secs(60);

/// The PostgreSQL URL of the tests.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// The RabbitMQ URL of the tests.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned())
}

/// Logs to the test output (`RUST_LOG` to change the level; warnings by default).
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// A short unique suffix.
pub fn unique_suffix() -> String {
    Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// Polls `f` every 50 ms until it returns `Some`; panics after `timeout`.
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
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One test's private world: its schemas, queues and exchanges, and what cleans them up.
#[derive(Debug)]
pub struct TestEnv {
    /// The suffix all names share.
    pub id: String,
    /// An admin pool for assertions.
    pub db: DatabaseConnection,
    /// The broker probe.
    pub probe: Probe,
    schemas: std::sync::Mutex<Vec<String>>,
}

impl TestEnv {
    /// A new environment named after `test`.
    pub async fn new(test: &str) -> Self {
        init_tracing();
        let id = format!("{}_{}", test.replace('-', "_"), unique_suffix());
        let mut options = sea_orm::ConnectOptions::new(database_url());
        options
            .max_connections(4)
            .min_connections(0)
            .sqlx_logging(false);
        let db = Database::connect(options)
            .await
            .expect("PostgreSQL is reachable");
        let probe = Probe::connect(&amqp_url()).await;
        Self {
            id,
            db,
            probe,
            schemas: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A schema name unique to this test (dropped by [`TestEnv::cleanup`]).
    pub fn schema(&self, name: &str) -> String {
        let schema = format!("e2e_{}_{}", self.id, name);
        self.schemas.lock().unwrap().push(schema.clone());
        schema
    }

    /// A queue name unique to this test; the queue, its `_error`/`_skipped` companions and
    /// their exchanges are deleted by [`TestEnv::cleanup`].
    pub fn queue(&self, name: &str) -> String {
        let queue = format!("e2e-{}-{}", name, self.id.replace('_', "-"));
        self.probe.track_endpoint(&queue);
        queue
    }

    /// Billing's configuration for this test: unique billing and messaging schemas, unique
    /// queues and notify channel; the endpoints do not bind the shared message-type exchanges
    /// (tests send straight to the queues) unless `bind` is set.
    pub fn billing_config(&self, bind: bool) -> Config {
        self.billing_config_tagged("", bind)
    }

    /// Like [`TestEnv::billing_config`], for a second (third …) billing of the same test: `tag`
    /// keeps the names apart.
    pub fn billing_config_tagged(&self, tag: &str, bind: bool) -> Config {
        let messaging = self.schema(&format!("messaging{tag}"));
        Config {
            database_url: database_url(),
            amqp_url: amqp_url(),
            concurrency: 4,
            payment_delay: Duration::from_millis(200),
            billing_schema: self.schema(&format!("billing{tag}")),
            storage: storage(&messaging),
            invoice_queue: self.queue(&format!("invoice{tag}")),
            payments_queue: self.queue(&format!("payments{tag}")),
            bind_message_types: bind,
            connection_name: format!("e2e-billing-{}", self.id),
        }
    }

    /// How many inbox rows of `config`'s messaging schema have `message_id` consumed.
    pub async fn inbox_consumed(&self, config: &Config, message_id: Uuid) -> i64 {
        let schema = config.storage.tables().schema_name();
        self.count(
            &format!(
                "SELECT count(*) AS n FROM \"{schema}\".inbox_state WHERE message_id = $1 AND consumed IS NOT NULL"
            ),
            message_id,
        )
        .await
    }

    /// Runs `body`, then cleans up whether it passed or panicked (and re-raises the panic).
    pub async fn run<F: Future<Output = ()>>(self, body: impl FnOnce(Arc<Self>) -> F) {
        let env = Arc::new(self);
        let result = AssertUnwindSafe(body(env.clone())).catch_unwind().await;
        env.cleanup().await;
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }

    /// Drops the schemas and deletes the queues and exchanges.
    pub async fn cleanup(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
        for schema in schemas {
            let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
            if let Err(error) = self.db.execute_unprepared(&sql).await {
                eprintln!("cleanup: {sql}: {error}");
            }
        }
        self.probe.cleanup().await;
    }

    /// `SELECT count(*)` of `sql` (which must select a count named `n`) with one uuid parameter.
    pub async fn count(&self, sql: &str, id: Uuid) -> i64 {
        let row = self
            .db
            .query_one(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                [id.into()],
            ))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .expect("a count row");
        row.try_get("", "n").expect("column n")
    }

    /// How many invoices `schema` has for `order_id`.
    pub async fn invoices(&self, schema: &str, order_id: Uuid) -> i64 {
        self.count(
            &format!("SELECT count(*) AS n FROM \"{schema}\".invoices WHERE order_id = $1"),
            order_id,
        )
        .await
    }

    /// The charge rows of `order_id`: their `attempts`, one entry per idempotency key.
    pub async fn charges(&self, schema: &str, order_id: Uuid) -> Vec<i32> {
        let rows = self
            .db
            .query_all(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!("SELECT attempts FROM \"{schema}\".charges WHERE order_id = $1 ORDER BY attempts"),
                [order_id.into()],
            ))
            .await
            .expect("charges");
        rows.iter()
            .map(|r| r.try_get("", "attempts").expect("attempts"))
            .collect()
    }

    /// The status of a payment, if it has a row.
    pub async fn payment_status(&self, schema: &str, payment_id: Uuid) -> Option<String> {
        self.db
            .query_one(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!("SELECT status FROM \"{schema}\".payments WHERE payment_id = $1"),
                [payment_id.into()],
            ))
            .await
            .expect("payments")
            .map(|r| r.try_get("", "status").expect("status"))
    }
}

/// The outbox/inbox tables in `schema`, notifying on a channel of its own.
pub fn storage(schema: &str) -> StorageConfig {
    StorageConfig::new(Tables::new().schema(schema)).notify_channel(format!("ferrybus_{schema}"))
}

/// Starts a bus on `config.amqp_url` with `endpoints`.
pub async fn start_bus(
    config: &Config,
    endpoints: impl IntoIterator<Item = ReceiveEndpoint>,
) -> RabbitMqBus {
    let mut builder =
        RabbitMqBus::builder(&config.amqp_url).connection_name(config.connection_name.clone());
    for endpoint in endpoints {
        builder = builder.receive_endpoint(endpoint);
    }
    builder.start().await.expect("the bus starts")
}

/// The events of several buses as one stream.
pub fn merged_events(buses: &[&RabbitMqBus]) -> broadcast::Receiver<Event> {
    let (tx, rx) = broadcast::channel(4096);
    for bus in buses {
        let mut events = bus.events();
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => {
                        let _ = tx.send(event);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
    rx
}

/// Sends `message` to `queue` twice at the same moment, both copies with `message_id`.
pub async fn send_twice<M: ferrybus::Message>(
    bus: &RabbitMqBus,
    queue: &str,
    message: &M,
    message_id: Uuid,
) {
    let address = format!("queue:{queue}");
    let options = SendOptions::new().message_id(message_id);
    let (a, b) = tokio::join!(
        bus.send_with(&address, message, options.clone()),
        bus.send_with(&address, message, options.clone())
    );
    a.expect("first copy sent");
    b.expect("second copy sent");
}

/// Sends `message` to `queue` with `message_id`.
pub async fn send<M: ferrybus::Message>(
    bus: &RabbitMqBus,
    queue: &str,
    message: &M,
    message_id: Uuid,
) {
    bus.send_with(
        &format!("queue:{queue}"),
        message,
        SendOptions::new().message_id(message_id),
    )
    .await
    .expect("sent");
}

/// An order of `total` in `currency` with a new id.
pub fn order(total: &str, currency: &str) -> example_contracts::OrderPlaced {
    example_contracts::OrderPlaced {
        order_id: Uuid::now_v7(),
        total: total.parse().expect("a decimal"),
        currency: currency.to_owned(),
    }
}

/// Collects bus events until every id in `expected` was consumed (acknowledged) as many times
/// as given; panics after [`WAIT`].
pub async fn wait_consumed(events: &mut broadcast::Receiver<Event>, expected: &[(Uuid, usize)]) {
    let mut want: HashMap<String, usize> = expected
        .iter()
        .map(|(id, n)| (id.to_string(), *n))
        .collect();
    let wait = async {
        while want.values().any(|n| *n > 0) {
            match events.recv().await {
                Ok(Event::Consumed {
                    message_id: Some(id),
                    ..
                }) => {
                    if let Some(n) = want.get_mut(&id) {
                        *n = n.saturating_sub(1);
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("the bus event stream closed"),
            }
        }
    };
    if tokio::time::timeout(WAIT, wait).await.is_err() {
        panic!("timed out waiting for consumption of {expected:?}");
    }
}

/// Waits for the first bus event matching `pred`; panics after [`WAIT`].
pub async fn wait_event(
    events: &mut broadcast::Receiver<Event>,
    pred: impl Fn(&Event) -> bool,
) -> Event {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(event) if pred(&event) => return event,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("the bus event stream closed"),
            }
        }
    };
    tokio::time::timeout(WAIT, wait)
        .await
        .expect("timed out waiting for a bus event")
}

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

/// A TCP proxy in front of RabbitMQ that a test can cut and restore: only the connections that
/// go through it see the "outage", so the broker stays up for every other test.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    up: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on `127.0.0.1:<random port>` and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy listens");
        let addr = listener.local_addr().expect("proxy address");
        let up = Arc::new(watch::channel(true).0);
        let upstream = upstream.to_owned();
        let state = up.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let rx = state.subscribe();
                if !*rx.borrow() {
                    drop(client); // refused while the broker is "down"
                    continue;
                }
                tokio::spawn(pipe(client, upstream.clone(), rx));
            }
        });
        Self { addr, up, task }
    }

    /// The broker URL through the proxy.
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.addr)
    }

    /// Drops every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.up.send_replace(false);
        self.task.abort();
    }
}

async fn pipe(mut client: TcpStream, upstream: String, mut up: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = up.wait_for(|up| !*up) => {}
    }
    // Dropping both ends closes them: the client sees the connection die.
}

/// The RabbitMQ `host:port` of [`amqp_url`].
pub fn broker_socket() -> String {
    let url = amqp_url();
    let rest = url.split("://").nth(1).unwrap_or("127.0.0.1:5672");
    let host_port = rest.rsplit('@').next().unwrap_or(rest);
    let host_port = host_port.split('/').next().unwrap_or(host_port);
    if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5672")
    }
}

/// A minimal HTTP/1.1 client: sends one request (`Connection: close`) and returns the status
/// and the body.
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("HTTP connect");
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("HTTP write");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("HTTP read");
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
