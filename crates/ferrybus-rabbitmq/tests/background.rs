//! Starting without a broker (`RabbitMqBusBuilder::start_background`): the bus comes up at once,
//! connects when the broker becomes reachable, and publishes wait for the connection up to the
//! publish timeout.
//!
//! "The broker is down" is a TCP proxy in this test that refuses connections until it is opened:
//! the real broker stays up for every other test running at the same time.
#![allow(missing_docs, unreachable_pub)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use ferrybus_core::{consumer_fn, EndpointConfig, MessageOrigin, MessageSink, SendOptions};
use ferrybus_rabbitmq::{ErrorKind, Event, RabbitMqBus, RabbitMqError};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

test_message!(Ping, "FerrybusTests.Background:Ping");

/// Logs to the test output (`RUST_LOG` to change the level; warnings by default).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// The broker behind [`URI`].
const BROKER: &str = "127.0.0.1:5672";

/// A TCP proxy to the broker that can be closed (connections dropped, new ones refused) and
/// opened again.
struct TcpProxy {
    addr: SocketAddr,
    up: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// A proxy that refuses connections until [`TcpProxy::open`].
    async fn closed() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy listens");
        let addr = listener.local_addr().expect("proxy address");
        let up = Arc::new(watch::channel(false).0);
        let state = up.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let rx = state.subscribe();
                if *rx.borrow() {
                    tokio::spawn(pipe(client, rx));
                } // else dropped: the broker is "down"
            }
        });
        Self { addr, up, task }
    }

    fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.addr)
    }

    fn open(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.up.send_replace(false);
        self.task.abort();
    }
}

async fn pipe(mut client: TcpStream, mut up: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(BROKER).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = up.wait_for(|up| !*up) => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_without_a_broker_and_catches_up_when_it_is_reachable() {
    init_tracing();
    let probe = Probe::new().await;
    let queue = unique("background");
    probe.track_endpoint(&queue);
    let proxy = TcpProxy::closed().await;
    let publish_timeout = Duration::from_secs(15);
    let seen: Seen<Ping> = Arc::default();
    let bus = RabbitMqBus::builder(&proxy.amqp_url())
        .connection_name("ferrybus-tests-background")
        .connect_timeout(Duration::from_secs(2))
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(250))
        .publish_timeout(publish_timeout)
        .receive_endpoint(
            EndpointConfig::new(&queue)
                .consumer(consumer_fn("PingConsumer", recorder(seen.clone()))),
        )
        .start_background()
        .expect("the bus starts without a broker");
    let mut events = bus.events();
    assert!(!bus.is_connected());
    wait_event(&mut events, WAIT, |e| {
        matches!(e, Event::ConnectFailed { .. })
    })
    .await;

    // A send issued while the broker is down waits for it ...
    let sender = bus.clone();
    let address = format!("queue:{queue}");
    let mut sending = tokio::spawn(async move {
        sender
            .send_with(
                &address,
                &Ping { n: 1, fail: false },
                SendOptions::new().header("Tenant", "acme"),
            )
            .await
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut sending)
            .await
            .is_err(),
        "the send waits while there is no connection"
    );
    assert!(!bus.is_connected());

    // ... and completes once it is reachable, within the publish timeout.
    proxy.open();
    let message_id = tokio::time::timeout(publish_timeout, sending)
        .await
        .expect("the send completes within the publish timeout")
        .expect("the send task")
        .expect("the send is confirmed");

    // The bus reports the connection, the endpoint declares and consumes.
    let id = message_id.to_string();
    let (mut connected, mut ready, mut consumed) = (false, false, false);
    while !(connected && ready && consumed) {
        match wait_event(&mut events, WAIT, |e| {
            matches!(
                e,
                Event::Connected { .. } | Event::EndpointReady { .. } | Event::Consumed { .. }
            )
        })
        .await
        {
            Event::Connected { generation } => {
                assert_eq!(generation, 1);
                connected = true;
            }
            Event::EndpointReady { queue: q, .. } => ready |= q == queue,
            Event::Consumed { message_id, .. } => consumed |= message_id.as_ref() == Some(&id),
            _ => {}
        }
    }
    assert!(bus.is_connected());
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [Ping { n: 1, fail: false }]
    );

    // Publishing works as after `start()`.
    let next = bus
        .send(&format!("queue:{queue}"), &Ping { n: 2, fail: false })
        .await
        .expect("sent")
        .to_string();
    wait_event(
        &mut events,
        WAIT,
        |e| matches!(e, Event::Consumed { message_id: Some(m), .. } if *m == next),
    )
    .await;

    bus.stop().await;
    assert!(!bus.is_connected());
    probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_without_a_broker_fails_after_the_publish_timeout() {
    init_tracing();
    let proxy = TcpProxy::closed().await;
    let publish_timeout = Duration::from_millis(700);
    let bus = RabbitMqBus::builder(&proxy.amqp_url())
        .connect_timeout(Duration::from_secs(1))
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(200))
        .publish_timeout(publish_timeout)
        .receive_endpoint(EndpointConfig::new(unique("never-declared")))
        .start_background()
        .expect("the bus starts without a broker");

    let started = Instant::now();
    let error = bus
        .publish(&Ping { n: 1, fail: false })
        .await
        .expect_err("no broker");
    let waited = started.elapsed();
    assert_eq!(error.kind(), ErrorKind::NotConnected, "{error}");
    assert!(waited >= publish_timeout, "failed after {waited:?}");
    assert!(waited < Duration::from_secs(10), "failed after {waited:?}");
    let text = error.to_string();
    assert!(
        text.starts_with("not connected to the broker: no connection within 700ms")
            && text.contains("; last attempt failed: "),
        "a clear message: {text}"
    );

    let error = bus
        .send("queue:anywhere", &Ping { n: 2, fail: false })
        .await
        .expect_err("no broker");
    assert_eq!(error.kind(), ErrorKind::NotConnected, "{error}");

    let message = bus
        .factory()
        .publish(
            &Ping { n: 3, fail: false },
            &MessageOrigin::default(),
            SendOptions::new(),
        )
        .unwrap();
    let error = bus.sink().deliver(message).await.expect_err("no broker");
    let error = error.downcast::<RabbitMqError>().expect("a RabbitMqError");
    assert_eq!(error.kind(), ErrorKind::NotConnected, "{error}");
    assert!(!bus.is_connected());

    // Stopping does not wait for a broker.
    tokio::time::timeout(Duration::from_secs(10), bus.stop())
        .await
        .expect("stop returns without a broker");
    let error = bus
        .publish(&Ping { n: 4, fail: false })
        .await
        .expect_err("stopped");
    assert_eq!(error.kind(), ErrorKind::Stopped, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_still_fails_fast_without_a_broker() {
    let proxy = TcpProxy::closed().await;
    let started = Instant::now();
    let error = RabbitMqBus::builder(&proxy.amqp_url())
        .connect_timeout(Duration::from_millis(500))
        .start()
        .await
        .expect_err("no broker");
    assert!(
        matches!(error.kind(), ErrorKind::NotConnected | ErrorKind::Timeout),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn start_background_checks_the_configuration() {
    let error = RabbitMqBus::builder("http://localhost")
        .start_background()
        .expect_err("bad scheme");
    assert_eq!(error.kind(), ErrorKind::Config);
    let error = RabbitMqBus::builder(URI)
        .receive_endpoint(EndpointConfig::new("twice"))
        .receive_endpoint(EndpointConfig::new("twice"))
        .start_background()
        .expect_err("duplicate endpoint");
    assert_eq!(error.kind(), ErrorKind::Config);
}

#[test]
fn start_background_outside_a_runtime_is_an_error_not_a_panic() {
    let error = RabbitMqBus::builder(URI)
        .start_background()
        .expect_err("no runtime");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
}
