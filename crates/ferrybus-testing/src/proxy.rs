//! [`TcpProxy`]: an outage of RabbitMQ, PostgreSQL or any TCP service for one test's
//! connections only.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::amqp_url;

/// A TCP proxy in front of a service (RabbitMQ, PostgreSQL, any TCP upstream) that a test can
/// cut and restore: only the connections that go through it see the "outage", so the service
/// stays up for every other test. Cutting drops every open connection and refuses new ones
/// (accepted, then closed at once: the client sees the connection reset).
///
/// ```no_run
/// # async fn run() {
/// use ferrybus_testing::{database_socket, database_url, TcpProxy};
/// let db = TcpProxy::start(&database_socket(), true).await;
/// let url = db.url(&database_url()); // postgres://postgres@127.0.0.1:<proxy port>/test
/// // … connect through `url`, then:
/// db.cut();
/// db.restore();
/// # let _ = url;
/// # }
/// ```
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

    /// `url` (any `scheme://[user[:password]@]host[:port]/…` URL) with its host and port
    /// replaced by the proxy's: the same service, through the proxy.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let proxy = ferrybus_testing::TcpProxy::start("127.0.0.1:5432", true).await;
    /// let url = proxy.url("postgres://postgres:pw@127.0.0.1:5432/test?sslmode=disable");
    /// assert_eq!(url, format!("postgres://postgres:pw@{}/test?sslmode=disable", proxy.addr()));
    /// # });
    /// ```
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let userinfo = authority.rfind('@').map_or("", |at| &authority[..=at]);
        format!("{scheme}://{userinfo}{}{tail}", self.addr)
    }

    /// The proxy's address (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
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

/// The PostgreSQL `host:port` of [`database_url`](crate::database_url).
///
/// ```
/// # if std::env::var("DATABASE_URL").is_err() {
/// assert_eq!(ferrybus_testing::database_socket(), "127.0.0.1:5432");
/// # }
/// ```
pub fn database_socket() -> String {
    socket_of(&crate::database_url(), 5432)
}

fn socket_of(url: &str, default_port: u16) -> String {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:{default_port}")
    }
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
    socket_of(&amqp_url(), 5672)
}
