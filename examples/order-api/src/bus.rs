//! Starting the bus in the background, and a sink that waits for it.
//!
//! `RabbitMqBus::builder(..).start()` keeps trying to connect for its connect timeout and then
//! fails. The order API must start (and take orders) while RabbitMQ is down, so it starts the bus
//! in a background task that tries again until it succeeds, and gives the outbox delivery
//! service a [`BusSink`] that waits a little for the bus and otherwise fails the send (the
//! delivery service backs off and tries again; the rows stay in the outbox meanwhile).

use std::time::Duration;

use async_trait::async_trait;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::{BoxError, MessageSink, OutgoingMessage};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;

/// A bus being started in the background.
#[derive(Debug)]
pub struct BackgroundBus {
    bus: watch::Receiver<Option<RabbitMqBus>>,
    task: JoinHandle<()>,
}

impl BackgroundBus {
    /// Starts connecting to `config.amqp_url`, retrying until it works.
    pub fn start(config: &Config) -> Self {
        let (tx, rx) = watch::channel(None);
        let (url, name, timeout) = (
            config.amqp_url.clone(),
            config.connection_name.clone(),
            config.connect_timeout,
        );
        let task = tokio::spawn(async move {
            let mut attempt = 0u32;
            loop {
                attempt += 1;
                let started = RabbitMqBus::builder(&url)
                    .connection_name(name.clone())
                    .connect_timeout(timeout)
                    .publish_timeout(Duration::from_secs(10))
                    .start()
                    .await;
                match started {
                    Ok(bus) => {
                        tracing::info!(attempt, "connected to RabbitMQ");
                        let _ = tx.send(Some(bus));
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(attempt, %error, "RabbitMQ is not reachable yet; orders wait in the outbox");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Self { bus: rx, task }
    }

    /// The bus, once started.
    pub fn get(&self) -> Option<RabbitMqBus> {
        self.bus.borrow().clone()
    }

    /// A sink delivering through the bus, waiting up to `wait` for it to start.
    pub fn sink(&self, wait: Duration) -> BusSink {
        BusSink {
            bus: self.bus.clone(),
            wait,
        }
    }

    /// Stops trying to connect, and stops the bus if it started.
    pub async fn stop(self) {
        self.task.abort();
        let bus = self.bus.borrow().clone();
        if let Some(bus) = bus {
            bus.stop().await;
        }
    }
}

/// The [`MessageSink`] of a [`BackgroundBus`].
#[derive(Clone, Debug)]
pub struct BusSink {
    bus: watch::Receiver<Option<RabbitMqBus>>,
    wait: Duration,
}

#[async_trait]
impl MessageSink for BusSink {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), BoxError> {
        let mut rx = self.bus.clone();
        let bus = match tokio::time::timeout(self.wait, rx.wait_for(Option::is_some)).await {
            Ok(Ok(bus)) => bus.clone().ok_or("no bus")?,
            _ => return Err("not connected to RabbitMQ yet".into()),
        };
        bus.sink().deliver(message).await
    }
}
