//! Scenario 4, the bus outbox relay: writers commit outbox rows, a delivery service moves them to
//! the broker. Figures: rows committed per second, messages delivered per second, and
//! commit-to-broker latency (commit returned → message received by a consumer of the target
//! queue) with NOTIFY wake-up and with the polling fallback, for one and two delivery instances.
//!
//! Baselines are the ceilings a relay cannot beat on this machine: raw sqlx inserts of the same
//! rows by the same number of writers, raw lapin publishing with confirms, and the broker's own
//! publish-to-consume latency.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrybus_core::Message;
use futures::StreamExt;
use hdrhistogram::Histogram;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ExchangeDeclareOptions,
    QueueBindOptions,
};
use lapin::types::FieldTable;
use lapin::ExchangeKind;
use serde_json::json;
use uuid::Uuid;

use crate::baseline;
use crate::broker::{self, Counter};
use crate::db;
use crate::ferry::{self, FerryError};
use crate::messages::{self, RelayPing};
use crate::report::{Measure, Row, Target};
use crate::scenarios::Bench;
use crate::BoxError;

/// Latency percentiles of one run, ms.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Latency {
    /// Median.
    pub(crate) p50: f64,
    /// 99th percentile.
    pub(crate) p99: f64,
}

/// A latency histogram in microseconds, 1 µs to 60 s, 3 significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// The percentiles of `h`, in ms.
pub(crate) fn latency(h: &Histogram<u64>) -> Latency {
    Latency {
        p50: h.value_at_quantile(0.50) as f64 / 1000.0,
        p99: h.value_at_quantile(0.99) as f64 / 1000.0,
    }
}

/// Matches commit instants with receive instants by message id, whichever comes first, and
/// records the difference in a histogram.
#[derive(Clone)]
pub(crate) struct Latencies {
    inner: Arc<Mutex<LatencyState>>,
}

struct LatencyState {
    committed: HashMap<Uuid, Instant>,
    received: HashMap<Uuid, Instant>,
    histogram: Histogram<u64>,
}

impl Latencies {
    /// Empty.
    pub(crate) fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(LatencyState {
                committed: HashMap::new(),
                received: HashMap::new(),
                histogram: histogram(),
            })),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LatencyState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(h: &mut Histogram<u64>, from: Instant, to: Instant) {
        let us = to.saturating_duration_since(from).as_micros().max(1) as u64;
        let _ = h.record(us.min(60_000_000));
    }

    /// Message `id` was committed (or published) at `t`.
    pub(crate) fn committed(&self, id: Uuid, t: Instant) {
        let mut s = self.state();
        match s.received.remove(&id) {
            Some(r) => Self::record(&mut s.histogram, t, r),
            None => {
                s.committed.insert(id, t);
            }
        }
    }

    /// Message `id` was received at `t`.
    pub(crate) fn received(&self, id: Uuid, t: Instant) {
        let mut s = self.state();
        match s.committed.remove(&id) {
            Some(c) => Self::record(&mut s.histogram, c, t),
            None => {
                s.received.insert(id, t);
            }
        }
    }

    /// Forgets everything (receipts of an earlier phase).
    pub(crate) fn reset(&self) {
        let mut s = self.state();
        s.committed.clear();
        s.received.clear();
        s.histogram.reset();
    }

    /// How many latencies were recorded.
    pub(crate) fn count(&self) -> u64 {
        self.state().histogram.len()
    }

    /// The percentiles so far.
    pub(crate) fn percentiles(&self) -> Latency {
        latency(&self.state().histogram)
    }
}

/// What a ferrybus relay run measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RelayResult {
    /// Rows committed per second by the writers.
    pub(crate) committed: f64,
    /// Messages delivered per second (draining a backlog).
    pub(crate) delivered: f64,
    /// Commit-to-broker latency.
    pub(crate) latency: Latency,
    /// Messages received.
    pub(crate) received: usize,
    /// Messages written.
    pub(crate) expected: usize,
}

/// Declares `RelayPing`'s exchange as MassTransit does and a fresh queue bound to it.
pub(crate) async fn ping_queue(b: &Bench, what: &str) -> Result<String, BoxError> {
    let exchange = RelayPing::message_type().entity_name().to_owned();
    b.remember_exchange(&exchange);
    let queue = b.fresh_queue(what).await?;
    let ch = b.conn.create_channel().await?;
    ch.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await?;
    ch.queue_bind(
        queue.as_str().into(),
        exchange.as_str().into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let _ = ch.close(200, "done".into()).await;
    Ok(queue)
}

/// Consumes `queue` (auto-ack): counts every message and reports its receipt to `latencies`.
/// Stops when the channel closes.
pub(crate) async fn receive_latencies(
    conn: &lapin::Connection,
    queue: &str,
    latencies: Latencies,
    counter: Counter,
) -> Result<(tokio::task::JoinHandle<()>, lapin::Channel), BoxError> {
    let ch = conn.create_channel().await?;
    ch.basic_qos(500, BasicQosOptions::default()).await?;
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "bench-latency".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    let handle = tokio::spawn(async move {
        while let Some(Ok(d)) = consumer.next().await {
            let now = Instant::now();
            let id = d
                .properties
                .message_id()
                .as_ref()
                .and_then(|s| Uuid::parse_str(s.as_str()).ok());
            if let Some(id) = id {
                latencies.received(id, now);
            }
            counter.incr();
        }
    });
    Ok((handle, ch))
}

/// Raw sqlx: `writers` tasks insert `n` `OutboxMessage` rows, one transaction each.
async fn baseline_writers(b: &Bench, n: usize, writers: usize) -> Result<f64, BoxError> {
    let schema = b.fresh_schema("relay-baseline").await?;
    let pool = db::pool(&b.args.database_url, Some(&schema), writers as u32).await?;
    let body = String::from_utf8(
        messages::envelope(&b.factory, "relay", &RelayPing { seq: 0, writer: 0 })?.1,
    )?;
    let body = Arc::new(body);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let pool = pool.clone();
        let body = body.clone();
        let count = n / writers + usize::from(w < n % writers);
        tasks.push(tokio::spawn(async move {
            for _ in 0..count {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    r#"INSERT INTO "OutboxMessage" ("SentTime", "MessageId", "ContentType",
                        "MessageType", "Body", "DestinationAddress")
                       VALUES (now(), $1, $2, $3, $4, $5)"#,
                )
                .bind(Uuid::now_v7())
                .bind(broker::ENVELOPE)
                .bind("urn:message:FerrybusBench.Contracts:RelayPing")
                .bind(body.as_str())
                .bind("rabbitmq://127.0.0.1/FerrybusBench.Contracts:RelayPing")
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    let rows = db::count(&b.admin, &schema, "\"OutboxMessage\"").await?;
    if rows != n as i64 {
        b.fail(format!("relay baseline writers: {rows} rows for {n}"));
    }
    pool.close().await;
    Ok(rate)
}

/// How many unconfirmed publishes the raw baseline keeps in flight: the delivery service's
/// default 4 workers × 64 outboxes per claim.
const BASELINE_IN_FLIGHT: usize = 256;

/// Raw lapin: publish `n` messages with confirms on one channel (the channel the delivery
/// service publishes on is one, too), keeping [`BASELINE_IN_FLIGHT`] unconfirmed: a new
/// publish as soon as any confirm arrives. msgs/s received by a consumer.
async fn baseline_publish(b: &Bench, n: usize) -> Result<f64, BoxError> {
    let queue = b.fresh_queue("relay-publish-baseline").await?;
    let publisher = baseline::publisher(&b.conn).await?;
    let counter = Counter::new();
    let (handle, ch) =
        receive_latencies(&b.conn, &queue, Latencies::new(), counter.clone()).await?;
    let bodies: Vec<_> = (0..n)
        .map(|i| {
            messages::envelope(
                &b.factory,
                &queue,
                &RelayPing {
                    seq: i as u64,
                    writer: 0,
                },
            )
        })
        .collect::<Result<_, _>>()?;
    let start = Instant::now();
    let mut in_flight = futures::stream::FuturesUnordered::new();
    for (id, body) in &bodies {
        if in_flight.len() >= BASELINE_IN_FLIGHT {
            if let Some(confirm) = in_flight.next().await {
                ensure_ack(confirm)?;
            }
        }
        in_flight.push(
            publisher
                .basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions::default(),
                    body,
                    broker::properties(*id),
                )
                .await?,
        );
    }
    while let Some(confirm) = in_flight.next().await {
        ensure_ack(confirm)?;
    }
    let (received, last) = counter.wait_for(n, b.limit(n)).await;
    let _ = ch.close(200, "done".into()).await;
    handle.abort();
    if received < n {
        b.fail(format!(
            "relay publish baseline: received {received} of {n}"
        ));
    }
    Ok(received as f64 / last.duration_since(start).as_secs_f64())
}

/// `Ok` when the broker acknowledged a publish.
fn ensure_ack(confirm: lapin::Result<lapin::Confirmation>) -> Result<(), BoxError> {
    if confirm?.is_ack() {
        Ok(())
    } else {
        Err("nack".into())
    }
}

/// The broker's own latency: publish one message (with confirm) at a time, time to receipt.
async fn baseline_latency(b: &Bench, n: usize) -> Result<Latency, BoxError> {
    let queue = b.fresh_queue("relay-latency-baseline").await?;
    let publisher = baseline::publisher(&b.conn).await?;
    let counter = Counter::new();
    let latencies = Latencies::new();
    let (handle, ch) =
        receive_latencies(&b.conn, &queue, latencies.clone(), counter.clone()).await?;
    for i in 0..n {
        let (id, body) = messages::envelope(
            &b.factory,
            &queue,
            &RelayPing {
                seq: i as u64,
                writer: 0,
            },
        )?;
        latencies.committed(id, Instant::now());
        publisher
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                &body,
                broker::properties(id),
            )
            .await?
            .await?;
        counter.wait_for(i + 1, Duration::from_secs(5)).await;
    }
    let _ = ch.close(200, "done".into()).await;
    handle.abort();
    if latencies.count() < n as u64 {
        b.fail(format!(
            "relay latency baseline: {} of {n} received",
            latencies.count()
        ));
    }
    Ok(latencies.percentiles())
}

/// The relay scenario's rows.
pub(crate) async fn rows(b: &Bench) -> Result<Vec<Row>, BoxError> {
    let n = b.args.relay_messages;
    let writers = b.args.relay_writers;
    let base_writers: Measure = baseline_writers(b, n, writers).await.into();
    let base_publish: Measure = baseline_publish(b, n).await.into();
    let lat_n = n.clamp(50, 1000);
    let base_latency = baseline_latency(b, lat_n).await;
    let (base_p50, base_p99): (Measure, Measure) = match &base_latency {
        Ok(l) => (Measure::Value(l.p50), Measure::Value(l.p99)),
        Err(e) => (
            Measure::na(format!("failed: {e}")),
            Measure::na(format!("failed: {e}")),
        ),
    };
    eprintln!(
        "   baselines: writers {:?} rows/s, publish {:?} msg/s, latency p50 {:?} ms",
        base_writers.value(),
        base_publish.value(),
        base_p50.value()
    );

    let mut runs = Vec::new();
    for (instances, notify) in [(1usize, true), (2, true), (1, false)] {
        let r = ferry::relay(b, n, writers, instances, notify).await;
        if let Ok(r) = &r {
            eprintln!(
                "   ferrybus relay ({instances} instance(s), {}): committed {:.0} rows/s, \
                 delivered {:.0} msg/s, p50 {:.2} ms, p99 {:.2} ms",
                if notify { "NOTIFY" } else { "polling" },
                r.committed,
                r.delivered,
                r.latency.p50,
                r.latency.p99
            );
            if r.received < r.expected {
                b.fail(format!(
                    "relay ({instances}, notify {notify}): received {} of {}",
                    r.received, r.expected
                ));
            }
        }
        runs.push(((instances, notify), r));
    }
    let get = |key: (usize, bool), f: &dyn Fn(&RelayResult) -> f64| -> Measure {
        match runs.iter().find(|(k, _)| *k == key) {
            Some((_, Ok(r))) => Measure::Value(f(r)),
            Some((_, Err(FerryError::Missing(why)))) => Measure::na(why.clone()),
            Some((_, Err(FerryError::Failed(e)))) => Measure::na(format!("failed: {e}")),
            None => Measure::na("not run"),
        }
    };
    for ((instances, notify), r) in &runs {
        if let Err(FerryError::Failed(e)) = r {
            b.fail(format!("relay ({instances}, notify {notify}): {e}"));
        }
    }
    b.detail(
        "relay",
        json!({
            "messages": n,
            "writers": writers,
            "baseline_latency_samples": lat_n,
        }),
    );
    let s = "4 bus outbox relay";
    Ok(vec![
        Row::new(
            s,
            "rows committed (writers)",
            "rows/s",
            get((1, true), &|r| r.committed),
            "raw sqlx INSERT, 1 tx/row",
            base_writers.clone(),
            Target::none(),
        )
        .note(format!(
            "{n} messages, {writers} writers, one message per transaction"
        )),
        Row::new(
            s,
            "rows committed, no NOTIFY (writers)",
            "rows/s",
            get((1, false), &|r| r.committed),
            "raw sqlx INSERT, 1 tx/row",
            base_writers,
            Target::none(),
        )
        .note(
            "notify_on_write(false): PostgreSQL serializes the commits of notifying transactions",
        ),
        Row::new(
            s,
            "delivered, 1 instance (NOTIFY)",
            "msg/s",
            get((1, true), &|r| r.delivered),
            "raw lapin publish+confirm",
            base_publish.clone(),
            Target::at_least(10_000.0, ">= 10000 msg/s"),
        ),
        Row::new(
            s,
            "delivered, 2 instances (NOTIFY)",
            "msg/s",
            get((2, true), &|r| r.delivered),
            "raw lapin publish+confirm",
            base_publish.clone(),
            Target::at_least(10_000.0, ">= 10000 msg/s"),
        ),
        Row::new(
            s,
            "delivered, 1 instance (polling)",
            "msg/s",
            get((1, false), &|r| r.delivered),
            "raw lapin publish+confirm",
            base_publish,
            Target::none(),
        ),
        Row::new(
            s,
            "commit→broker p50 (NOTIFY)",
            "ms",
            get((1, true), &|r| r.latency.p50),
            "broker publish→consume p50",
            base_p50.clone(),
            Target::below(3.0, "< 3 ms"),
        ),
        Row::new(
            s,
            "commit→broker p99 (NOTIFY)",
            "ms",
            get((1, true), &|r| r.latency.p99),
            "broker publish→consume p99",
            base_p99.clone(),
            Target::below(10.0, "< 10 ms"),
        ),
        Row::new(
            s,
            "commit→broker p50, 2 instances",
            "ms",
            get((2, true), &|r| r.latency.p50),
            "broker publish→consume p50",
            base_p50.clone(),
            Target::none(),
        ),
        Row::new(
            s,
            "commit→broker p50 (polling)",
            "ms",
            get((1, false), &|r| r.latency.p50),
            "broker publish→consume p50",
            base_p50,
            Target::none(),
        ),
        Row::new(
            s,
            "commit→broker p99 (polling)",
            "ms",
            get((1, false), &|r| r.latency.p99),
            "broker publish→consume p99",
            base_p99,
            Target::none(),
        ),
    ])
}
