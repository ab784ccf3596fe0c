//! The table-growth scenarios: rows put into MassTransit's tables with one `INSERT … SELECT
//! generate_series` each (no broker involved), then the normal scenario on top.
//!
//! * `billing-growth` (in [`crate::billing`]): billing with N delivered inbox rows already there.
//! * `relay-growth`: one delivery instance draining a backlog of `--growth-relay-rows` pending
//!   bus-outbox rows (rate over the first `--relay-messages`) against a backlog of 1,000.
//! * `cleanup`: the inbox consumer of (1) while a writer adds 2,000 expired delivered rows per
//!   second, with the inbox cleanup running (every second) and without it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::broker::Counter;
use crate::db;
use crate::ferry::{self, FerryError};
use crate::messages::{self, RelayPing};
use crate::relay::{self, Latencies};
use crate::report::{Measure, Row, Target};
use crate::scenarios::Bench;
use crate::BoxError;

/// Writes `n` delivered inbox rows (consumed and delivered within the last 20 minutes, inside
/// the default duplicate window, four consumer ids) in batches of 500,000, then `VACUUM
/// ANALYZE`s the table, as autovacuum would have.
pub(crate) async fn fill_inbox(b: &Bench, schema: &str, n: u64) -> Result<(), BoxError> {
    let mut left = n;
    while left > 0 {
        let batch = left.min(500_000);
        sqlx::query(sqlx::AssertSqlSafe(format!(
            r#"INSERT INTO "{schema}"."InboxState"
               ("MessageId", "ConsumerId", "LockId", "Received", "ReceiveCount", "Consumed", "Delivered")
               SELECT gen_random_uuid(), ('00000000-0000-4000-8000-00000000000' || (g % 4))::uuid,
                      gen_random_uuid(), t, 1, t, t
               FROM (SELECT g, now() - random() * interval '20 minutes' AS t
                     FROM generate_series(1, $1::bigint) g) s"#
        )))
        .bind(batch as i64)
        .execute(&b.admin)
        .await?;
        left -= batch;
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        r#"VACUUM ANALYZE "{schema}"."InboxState""#
    )))
    .execute(&b.admin)
    .await?;
    Ok(())
}

/// Writes `n` pending bus outboxes of one `RelayPing` each (`OutboxState` + `OutboxMessage`,
/// the shape `BusOutbox` writes, ids time-ordered as its `BUS_OUTBOX_ID` makes them), then
/// `VACUUM ANALYZE`s both tables.
async fn fill_relay(b: &Bench, schema: &str, n: u64) -> Result<(), BoxError> {
    let (_, body) = messages::envelope(&b.factory, "relay", &RelayPing { seq: 0, writer: 0 })?;
    let body = String::from_utf8(body)?;
    let ping = <RelayPing as ferrybus_core::Message>::message_type();
    let destination = b.factory.host().entity_address(ping.entity_name());
    let mut left = n;
    let mut offset = 0u64;
    while left > 0 {
        let batch = left.min(200_000);
        sqlx::query(sqlx::AssertSqlSafe(format!(
            r#"WITH ids AS (
                 SELECT g, (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0')
                            || '7' || substr(md5('fb-bench-' || g::text), 1, 3)
                            || '8' || substr(md5('fb-bench-' || g::text), 4, 15))::uuid AS id,
                        t
                 FROM generate_series($1::bigint + 1, $1::bigint + $2::bigint) g,
                      LATERAL (SELECT now() - interval '1 hour' + g * interval '1 microsecond' AS t) c),
               states AS (
                 INSERT INTO "{schema}"."OutboxState" ("OutboxId", "LockId", "Created")
                 SELECT id, '00000000-0000-0000-0000-000000000000', t FROM ids)
               INSERT INTO "{schema}"."OutboxMessage"
                 ("OutboxId", "SentTime", "MessageId", "ContentType", "MessageType", "Body",
                  "DestinationAddress", "Properties")
               SELECT id, t, gen_random_uuid(), $3, $4, $5, $6,
                      '{{"RMQ-Exchange": "' || $7 || '"}}'
               FROM ids"#
        )))
        .bind(offset as i64)
        .bind(batch as i64)
        .bind(crate::broker::ENVELOPE)
        .bind(ping.urn())
        .bind(&body)
        .bind(&destination)
        .bind(ping.entity_name())
        .execute(&b.admin)
        .await?;
        left -= batch;
        offset += batch;
    }
    for table in ["OutboxState", "OutboxMessage"] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            r#"VACUUM ANALYZE "{schema}"."{table}""#
        )))
        .execute(&b.admin)
        .await?;
    }
    Ok(())
}

/// One relay-growth run: `backlog` pending rows, one delivery instance, the rate over the first
/// `measured` messages received (from the first on).
async fn relay_run(b: &Bench, what: &str, backlog: u64, measured: usize) -> Result<f64, BoxError> {
    let schema = b.fresh_schema(what).await?;
    let queue = relay::ping_queue(b, &format!("{what}-in")).await?;
    let t = Instant::now();
    fill_relay(b, &schema, backlog).await?;
    eprintln!(
        "   {what}: {backlog} pending rows written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let received = Counter::new();
    let (receiver, ch) =
        relay::receive_latencies(&b.conn, &queue, Latencies::new(), received.clone()).await?;
    let channel = format!("ferrybus_bench_{}_{}", b.run_id, what.replace('-', "_"));
    let start = Instant::now();
    let (bus, sdb) = ferry::start_service(b, &schema, &channel, what, 0)
        .await
        .map_err(|e| match e {
            FerryError::Failed(e) => e,
            FerryError::Missing(m) => m.into(),
        })?;
    let (got, last) = received.wait_for(measured, b.limit(measured)).await;
    bus.stop().await;
    sdb.close().await.ok();
    let _ = ch.close(200, "done".into()).await;
    receiver.abort();
    // The queue stays bound to `RelayPing`'s exchange: delete it, or the next run's messages
    // would also pile up in it (persisted to disk, their confirms waiting for that).
    crate::broker::delete(&b.conn, std::slice::from_ref(&queue), &[]).await;
    if got < measured {
        b.fail(format!("{what}: received {got} of {measured}"));
    }
    let span = received.span(start, last);
    let rate = got.saturating_sub(1) as f64 / span.as_secs_f64().max(1e-9);
    eprintln!("   {what}: {got} delivered at {rate:.0} msg/s");
    Ok(rate)
}

/// `relay-growth`'s rows.
pub(crate) async fn relay_rows(b: &Bench) -> Result<Vec<Row>, BoxError> {
    let big = b.args.growth_relay_rows;
    let small = 1000u64.min(big);
    let measured = b.args.relay_messages.min(big as usize);
    let (mut s, mut l) = (Vec::new(), Vec::new());
    for round in 0..b.args.rounds {
        s.push(
            relay_run(
                b,
                &format!("relay-growth-small-{round}"),
                small,
                small as usize,
            )
            .await,
        );
        l.push(relay_run(b, &format!("relay-growth-large-{round}"), big, measured).await);
    }
    let best = |what: &str, runs: Vec<Result<f64, BoxError>>| -> Measure {
        let mut best: Option<f64> = None;
        for r in runs {
            match r {
                Ok(v) => best = Some(best.unwrap_or(0.0).max(v)),
                Err(e) => b.fail(format!("{what}: {e}")),
            }
        }
        best.map_or_else(|| Measure::na("no run"), Measure::Value)
    };
    Ok(vec![Row::new(
        "7 table growth",
        &format!("relay, {big} pending"),
        "msg/s",
        best("relay growth large", l),
        &format!("relay, {small} pending"),
        best("relay growth small", s),
        Target::ratio(0.9),
    )
    .note(format!(
        "one instance; rate over the first {measured} (large) / all {small} (small) messages"
    ))])
}

/// Adds `per_second` expired delivered inbox rows per second (every 50 ms a twentieth) until
/// `stop` is set.
fn expired_writer(
    b: &Bench,
    schema: &str,
    per_second: u64,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    let admin = b.admin.clone();
    let sql = format!(
        r#"INSERT INTO "{schema}"."InboxState"
           ("MessageId", "ConsumerId", "LockId", "Received", "ReceiveCount", "Consumed", "Delivered")
           SELECT gen_random_uuid(), '00000000-0000-4000-8000-000000000009', gen_random_uuid(),
                  t, 1, t, t
           FROM (SELECT now() - interval '31 minutes' AS t FROM generate_series(1, $1::bigint)) s"#
    );
    tokio::spawn(async move {
        let per_tick = (per_second / 20).max(1);
        let mut written = 0;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            if sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(per_tick as i64)
                .execute(&admin)
                .await
                .is_ok()
            {
                written += per_tick;
            }
        }
        written
    })
}

/// One cleanup run: the (1) inbox consumer on `n` messages with the writer adding expired rows;
/// the cleanup on or off. Returns the consumer's rate and the expired rows left at the end.
async fn cleanup_run(b: &Bench, what: &str, cleanup: bool) -> Result<(f64, i64, u64), BoxError> {
    let n = b.args.messages;
    let queue = b.fresh_queue(what).await?;
    let schema = b.fresh_schema(what).await?;
    b.fill(&queue, n).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = expired_writer(b, &schema, 2000, stop.clone());
    let result = ferry::inbox_with_cleanup(b, &queue, &schema, n, b.limit(n), cleanup)
        .await
        .map_err(|e| match e {
            FerryError::Failed(e) => e,
            FerryError::Missing(m) => m.into(),
        })?;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap_or(0);
    let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        r#"SELECT count(*) FROM "{schema}"."InboxState" WHERE "Delivered" < now() - interval '30 minutes'"#
    )))
    .fetch_one(&b.admin)
    .await?;
    let orders = db::count(&b.admin, &schema, "bench_orders").await?;
    if result.processed < n || orders != n as i64 {
        b.fail(format!(
            "{what}: {} acknowledged, {orders} orders for {n}",
            result.processed
        ));
    }
    eprintln!(
        "   {what}: {:.0} msg/s; {written} expired rows written, {left} left",
        result.rate()
    );
    Ok((result.rate(), left, written))
}

/// `cleanup`'s rows.
pub(crate) async fn cleanup_rows(b: &Bench) -> Result<Vec<Row>, BoxError> {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    let mut kept_up = Vec::new();
    for round in 0..b.args.rounds {
        for cleanup in [round % 2 == 0, round % 2 == 1] {
            let label = if cleanup { "on" } else { "off" };
            let r = cleanup_run(b, &format!("cleanup-{label}-{round}"), cleanup).await;
            match (cleanup, r) {
                (true, Ok((rate, left, written))) => {
                    on.push(rate);
                    kept_up.push((left, written));
                }
                (false, Ok((rate, _, _))) => off.push(rate),
                (_, Err(e)) => b.fail(format!("cleanup {label}: {e}")),
            }
        }
    }
    let best = |v: &[f64]| {
        v.iter()
            .copied()
            .reduce(f64::max)
            .map_or_else(|| Measure::na("no run"), Measure::Value)
    };
    let left = kept_up
        .iter()
        .map(|(l, w)| format!("{l} of {w} expired rows left"))
        .collect::<Vec<_>>()
        .join("; ");
    Ok(vec![Row::new(
        "7 table growth",
        "inbox consumer, cleanup on",
        "msg/s",
        best(&on),
        "inbox consumer, cleanup off",
        best(&off),
        Target::ratio(0.9),
    )
    .note(format!(
        "{} msgs; a writer adds 2000 expired rows/s in both; cleanup every 1 s, batch 100: {left}",
        b.args.messages
    ))])
}
