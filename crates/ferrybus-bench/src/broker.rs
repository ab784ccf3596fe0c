//! RabbitMQ plumbing shared by every scenario: connections, queue setup, pre-filling with
//! publisher confirms, counting and clean-up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::try_join_all;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeleteOptions, QueueDeclareOptions,
    QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::cpu::{CpuSample, CpuSpent};
use crate::BoxError;

/// MassTransit's content type.
pub(crate) const ENVELOPE: &str = "application/vnd.masstransit+json";

/// Opens a connection named `name`.
pub(crate) async fn connect(url: &str, name: &str) -> Result<Connection, BoxError> {
    let props = ConnectionProperties::default().with_connection_name(name.into());
    Ok(Connection::connect(url, props).await?)
}

/// Declares `queue` as MassTransit does (durable classic queue, no arguments).
pub(crate) async fn declare_queue(channel: &Channel, queue: &str) -> Result<(), BoxError> {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(())
}

/// How many messages wait in `queue` (ready, not unacknowledged).
pub(crate) async fn depth(channel: &Channel, queue: &str) -> Result<u32, BoxError> {
    let q = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(q.message_count())
}

/// Publishes `bodies` to `queue` through the default exchange, persistent, with publisher
/// confirms (windows of 1000); returns messages per second.
pub(crate) async fn prefill(
    conn: &Connection,
    queue: &str,
    bodies: &[(uuid::Uuid, Vec<u8>)],
) -> Result<f64, BoxError> {
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let start = Instant::now();
    for window in bodies.chunks(1000) {
        let mut confirms = Vec::with_capacity(window.len());
        for (id, body) in window {
            confirms.push(
                channel
                    .basic_publish(
                        "".into(),
                        queue.into(),
                        BasicPublishOptions::default(),
                        body,
                        properties(*id),
                    )
                    .await?,
            );
        }
        for confirm in try_join_all(confirms).await? {
            if !confirm.is_ack() {
                return Err("the broker nacked a pre-fill publish".into());
            }
        }
    }
    let rate = bodies.len() as f64 / start.elapsed().as_secs_f64();
    let _ = channel.close(200, "done".into()).await;
    Ok(rate)
}

/// The AMQP properties MassTransit sets on a message.
pub(crate) fn properties(id: uuid::Uuid) -> BasicProperties {
    BasicProperties::default()
        .with_content_type(ENVELOPE.into())
        .with_message_id(id.to_string().into())
        .with_delivery_mode(2)
}

/// Deletes queues and exchanges, ignoring the ones already gone.
pub(crate) async fn delete(conn: &Connection, queues: &[String], exchanges: &[String]) {
    for q in queues {
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
            let _ = ch.close(200, "done".into()).await;
        }
    }
    for e in exchanges {
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch
                .exchange_delete(e.as_str().into(), ExchangeDeleteOptions::default())
                .await;
            let _ = ch.close(200, "done".into()).await;
        }
    }
}

/// Empties `queue`.
pub(crate) async fn purge(conn: &Connection, queue: &str) -> Result<(), BoxError> {
    let ch = conn.create_channel().await?;
    ch.queue_purge(queue.into(), QueuePurgeOptions::default())
        .await?;
    let _ = ch.close(200, "done".into()).await;
    Ok(())
}

/// A counter of processed messages that a waiter polls (every 2 ms: no cost on the consumer side).
#[derive(Clone, Default)]
pub(crate) struct Counter {
    count: Arc<AtomicUsize>,
    first: Arc<std::sync::OnceLock<(Instant, CpuSample)>>,
}

impl Counter {
    /// A counter at zero.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds one.
    pub(crate) fn incr(&self) {
        if self.count.fetch_add(1, Ordering::Relaxed) == 0 {
            let _ = self.first.set((Instant::now(), CpuSample::now()));
        }
    }

    /// From the first count to `last` (from `start` when nothing was counted): the timed span
    /// of a run, which leaves connection and set-up time out on both sides.
    pub(crate) fn span(&self, start: Instant, last: Instant) -> Duration {
        let first = self.first.get().map_or(start, |(at, _)| *at);
        last.saturating_duration_since(first)
    }

    /// CPU spent from the first count to now (nothing when nothing was counted): read right
    /// after [`Counter::wait_for`], the CPU of the timed span.
    pub(crate) fn cpu_since_first(&self) -> CpuSpent {
        self.first
            .get()
            .map(|(_, cpu)| CpuSample::now().since(cpu))
            .unwrap_or_default()
    }

    /// The count.
    pub(crate) fn get(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// The shared atomic (for the memory sampler).
    pub(crate) fn atomic(&self) -> Arc<AtomicUsize> {
        self.count.clone()
    }

    /// Waits until the count reaches `n` or `limit` passes; returns the count and when it was
    /// last seen to change (the end of the run).
    pub(crate) async fn wait_for(&self, n: usize, limit: Duration) -> (usize, Instant) {
        let deadline = Instant::now() + limit;
        let mut last = self.get();
        let mut last_change = Instant::now();
        loop {
            let now = self.get();
            if now != last {
                last = now;
                last_change = Instant::now();
            }
            if now >= n || Instant::now() > deadline {
                return (now, last_change);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}
