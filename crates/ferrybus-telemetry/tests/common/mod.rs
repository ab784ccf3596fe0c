//! Helpers of the telemetry tests: serving the routers on a free port, a minimal HTTP GET, and
//! a bus with one endpoint.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;

use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError};
use ferrybus_rabbitmq::RabbitMqBus;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The test message.
#[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
#[message(namespace = "FerrybusTests.Telemetry")]
pub struct Ping {
    pub n: u32,
}

/// Serves `router` on `127.0.0.1:<free port>` until the test ends.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// `GET path` on `addr`: the status code and the body.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the server answers");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// `GET /health/ready`: the status code and the report.
pub async fn ready(addr: SocketAddr) -> (u16, serde_json::Value) {
    let (status, body) = get(addr, "/health/ready").await;
    let report = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, report)
}

/// A bus on `url` with one endpoint `queue` consuming [`Ping`].
pub async fn bus(url: &str, queue: &str) -> RabbitMqBus {
    RabbitMqBus::builder(url)
        .receive_endpoint(queue, |e| {
            e.bind_message_types(false).consumer(consumer_fn(
                "PingConsumer",
                |_ctx: ConsumeContext<Ping>| async { Ok::<_, ConsumeError>(()) },
            ))
        })
        .start()
        .await
        .expect("the bus starts")
}
