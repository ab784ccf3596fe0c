//! [`TcpProxy`]: a RabbitMQ outage for one test's connections only.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::amqp_url;

/// A TCP proxy in front of RabbitMQ that a test can cut and restore: only the connections that
/// go through it see the "outage", so the broker stays up for every other test.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    up: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on `127.0.0.1:<random port>` and forwards to `upstream` (`host:port`, usually
    /// [`broker_socket`]); `up` says whether it accepts connections from the start.
    pub async fn start(upstream: &str, up: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy listens");
        let addr = listener.local_addr().expect("proxy address");
        let up = Arc::new(watch::channel(up).0);
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

    /// The broker URL through the proxy (guest/guest, vhost `/`).
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
///
/// ```
/// // With AMQP_URL unset: the default broker.
/// # if std::env::var("AMQP_URL").is_err() {
/// assert_eq!(ferrybus_testing::broker_socket(), "127.0.0.1:5672");
/// # }
/// ```
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
