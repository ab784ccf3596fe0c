//! The consumer comparisons, (1) inbox, (2) plain and (3) consumer outbox: ferrybus against a
//! hand-rolled lapin baseline, side by side, each run verified.

use std::time::{Duration, Instant};

use ferrybus_core::Message;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::FieldTable;
use lapin::ExchangeKind;

use super::Bench;
use crate::baseline::{self, RunResult};
use crate::broker;
use crate::cpu;
use crate::db;
use crate::ferry::{self, FerryError};
use crate::messages::OrderAccepted;
use crate::report::{self, Measure, Row, Target};
use crate::{Args, BoxError};

/// A consumer comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// (2) no storage.
    Plain,
    /// (1) inbox.
    Inbox,
    /// (3) inbox + consumer outbox.
    Outbox,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Inbox => "inbox",
            Kind::Outbox => "outbox",
        }
    }

    fn messages(self, args: &Args) -> usize {
        match self {
            Kind::Plain => args.plain_messages,
            Kind::Inbox | Kind::Outbox => args.messages,
        }
    }
}

/// Who consumes in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// The hand-rolled baseline.
    Baseline,
    /// ferrybus, this many service instances on the one queue.
    Ferrybus(usize),
}

/// One run of one side: fresh queue (and schema), pre-fill, consume, verify.
async fn consumer_run(
    b: &Bench,
    kind: Kind,
    side: Side,
    round: usize,
) -> Result<RunResult, FerryError> {
    let label = match side {
        Side::Baseline => "baseline".to_owned(),
        Side::Ferrybus(1) => "ferrybus".to_owned(),
        Side::Ferrybus(n) => format!("ferrybus{n}"),
    };
    let what = format!("{}-{label}-{round}", kind.label());
    let n = kind.messages(&b.args);
    let queue = b.fresh_queue(&what).await?;
    let schema = match kind {
        Kind::Plain => None,
        Kind::Inbox | Kind::Outbox => Some(b.fresh_schema(&what).await?),
    };
    let sink = match kind {
        Kind::Outbox => Some(sink_queue(b, &format!("{what}-sink")).await?),
        _ => None,
    };
    let fill_rate = b.fill(&queue, n).await?;
    eprintln!("   {what}: pre-filled {n} at {fill_rate:.0} msg/s");
    let limit = b.limit(n);
    let concurrency = b.args.concurrency;
    let load = baseline::Load {
        prefetch: b.args.prefetch_count(),
        concurrency,
        expected: n,
        limit,
    };
    let result = if let Side::Ferrybus(instances) = side {
        match (kind, &schema) {
            (Kind::Plain, _) => ferry::plain(b, &queue, n, limit).await?,
            (Kind::Inbox, Some(s)) => ferry::inbox(b, &queue, s, n, limit).await?,
            (Kind::Outbox, Some(s)) => ferry::outbox(b, &queue, s, n, limit, instances).await?,
            _ => unreachable!("storage scenarios have a schema"),
        }
    } else {
        let pool = match &schema {
            Some(s) => Some(db::pool(&b.args.database_url, Some(s), concurrency as u32).await?),
            None => None,
        };
        match (kind, pool) {
            (Kind::Plain, _) => baseline::plain(&b.conn, &queue, load).await?,
            (Kind::Inbox, Some(pool)) => baseline::inbox(&b.conn, pool, &queue, load).await?,
            (Kind::Outbox, Some(pool)) => {
                baseline::outbox(&b.conn, pool, &queue, load, b.factory.clone()).await?
            }
            _ => unreachable!("storage scenarios have a pool"),
        }
    };
    eprintln!(
        "   {what}: {} of {n} in {:.2} s = {:.0} msg/s",
        result.processed,
        result.elapsed.as_secs_f64(),
        result.rate()
    );
    // Every message must have been processed, and its effects must be there.
    let mut missing = Vec::new();
    if result.processed < n {
        missing.push(format!("acknowledged {} of {n}", result.processed));
    }
    if result.errors > 0 {
        missing.push(format!("{} handler errors", result.errors));
    }
    if let Some(schema) = &schema {
        let rows = db::count(&b.admin, schema, "bench_orders")
            .await
            .map_err(FerryError::Failed)?;
        if rows != n as i64 {
            missing.push(format!("{rows} business rows for {n} messages"));
        }
    }
    if let Some(sink) = &sink {
        let depth = wait_depth(b, sink, n).await;
        if depth != n {
            missing.push(format!("{depth} published messages for {n} inputs"));
        }
        broker::delete(&b.conn, std::slice::from_ref(sink), &[]).await;
    }
    let left = wait_depth(b, &queue, 0).await;
    if left != 0 && result.processed >= n {
        missing.push(format!("{left} messages left in the queue"));
    }
    if !missing.is_empty() {
        b.fail(format!("{what}: {}", missing.join(", ")));
    }
    Ok(result)
}

/// Declares `OrderAccepted`'s exchange (as MassTransit does: durable fanout) and a queue bound to
/// it that collects what the outbox consumers publish.
async fn sink_queue(b: &Bench, what: &str) -> Result<String, BoxError> {
    let exchange = OrderAccepted::message_type().entity_name().to_owned();
    b.remember_exchange(&exchange);
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
    let queue = b.fresh_queue(what).await?;
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

/// Polls `queue`'s depth for up to 5 s until it equals `n`; returns the last depth.
pub(crate) async fn wait_depth(b: &Bench, queue: &str, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let depth = match b.conn.create_channel().await {
            Ok(ch) => {
                let d = broker::depth(&ch, queue).await.unwrap_or(0) as usize;
                let _ = ch.close(200, "done".into()).await;
                d
            }
            Err(_) => 0,
        };
        if depth == n || Instant::now() > deadline {
            return depth;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn measure(b: &Bench, what: &str, results: Vec<Result<RunResult, FerryError>>) -> Measure {
    let mut best: Option<f64> = None;
    let mut reason = None;
    for r in results {
        match r {
            Ok(run) if run.processed > 0 => best = Some(best.unwrap_or(0.0).max(run.rate())),
            Ok(_) => reason = Some("nothing processed".to_owned()),
            Err(FerryError::Missing(why)) => reason = Some(why),
            Err(FerryError::Failed(e)) => {
                b.fail(format!("{what}: {e}"));
                reason = Some(format!("failed: {e}"));
            }
        }
    }
    match best {
        Some(v) => Measure::Value(v),
        None => Measure::na(reason.unwrap_or_else(|| "not run".into())),
    }
}

/// Every round's rate, in run order.
fn rounds(runs: &[Result<RunResult, FerryError>]) -> String {
    report::rounds_label(runs.iter().map(|r| {
        r.as_ref()
            .ok()
            .filter(|run| run.processed > 0)
            .map(RunResult::rate)
    }))
}

/// The mean CPU per message over the timed spans of the completed `runs`.
fn mean_cpu(runs: &[Result<RunResult, FerryError>]) -> String {
    let per: Vec<_> = runs
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter(|r| r.processed > 1)
        .map(|r| r.cpu.per(r.processed))
        .collect();
    cpu::mean_label(&per)
}

pub(super) async fn consumer_rows(b: &Bench, kind: Kind) -> Result<Vec<Row>, BoxError> {
    let mut base = Vec::new();
    let mut ferry = Vec::new();
    let mut ferry2 = Vec::new();
    for round in 0..b.args.rounds {
        // Alternate which side goes first, so neither always gets the warmer broker.
        let mut sides = vec![Side::Baseline, Side::Ferrybus(1)];
        if kind == Kind::Outbox {
            // (3) also scales out: two service instances on the one queue.
            sides.push(Side::Ferrybus(2));
        }
        if round % 2 == 1 {
            sides.reverse();
        }
        for side in sides {
            let r = consumer_run(b, kind, side, round).await;
            match side {
                Side::Baseline => base.push(r),
                Side::Ferrybus(1) => ferry.push(r),
                Side::Ferrybus(_) => ferry2.push(r),
            }
        }
    }
    let label = kind.label();
    let cpu = format!(
        "; CPU per message, whole machine (bench process): ferrybus {}, baseline {}; \
         every round (msg/s): ferrybus {}, baseline {}",
        mean_cpu(&ferry),
        mean_cpu(&base),
        rounds(&ferry),
        rounds(&base)
    );
    let two = format!(
        "CPU per message, whole machine (bench process) {}; every round (msg/s): {}",
        mean_cpu(&ferry2),
        rounds(&ferry2)
    );
    let ferry = measure(b, &format!("{label} ferrybus"), ferry);
    let base = measure(b, &format!("{label} baseline"), base);
    let c = b.args.concurrency;
    Ok(match kind {
        Kind::Plain => vec![Row::new(
            "2 plain consumer",
            "throughput",
            "msg/s",
            ferry,
            "raw lapin consume + ack",
            base,
            Target::ratio(0.9),
        )
        .note(format!("{} msgs, concurrency {c}", b.args.plain_messages))],
        Kind::Inbox => vec![Row::new(
            "1 inbox consumer",
            "throughput",
            "msg/s",
            ferry,
            "hand-rolled lapin + sqlx",
            base,
            Target::ratio(1.0),
        )
        .note(format!(
            "{} msgs, concurrency {c}, pool {c}{cpu}",
            b.args.messages
        ))],
        Kind::Outbox => vec![
            Row::new(
                "3 consumer outbox",
                "throughput",
                "msg/s",
                ferry.clone(),
                "hand-rolled inbox + outbox row + publish",
                base,
                Target::none(),
            )
            .note(format!(
                "{} msgs, concurrency {c}; one OrderAccepted published per input{cpu}",
                b.args.messages
            )),
            Row::new(
                "3 consumer outbox",
                "two instances vs one",
                "msg/s",
                measure(b, &format!("{label} ferrybus, two instances"), ferry2),
                "(3) ferrybus, one instance",
                ferry.clone(),
                Target::ratio(1.0),
            )
            .note(format!(
                "two services on one queue, each concurrency {c} with its own pool, sender and \
                 delivery service; {two}"
            )),
            Row::new(
                "3 consumer outbox",
                "vs (1) ferrybus inbox",
                "msg/s",
                ferry,
                "(1) ferrybus inbox consumer",
                Measure::na("(1) not run"),
                Target::ratio(0.8),
            ),
        ],
    })
}
