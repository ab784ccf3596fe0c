//! Scenario 6, billing: `examples/billing` as shipped (`Billing::start`, payment delay 0)
//! against its hand-written lapin + tokio-postgres twin ([`twin`]), both draining the same
//! pre-filled `OrderPlaced` backlog; each timed until every order has its invoice and its
//! payment `Captured`. Scenario 7 (`billing-growth`) runs billing with an empty inbox and with
//! `--growth-inbox-rows` delivered rows already in `InboxState`.

pub(crate) mod twin;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use example_billing::schema::InvoiceKey;
use example_billing::{Billing, Config};
use example_contracts::{InvoiceCreated, OrderPlaced, PaymentCaptured};
use ferrybus_sea_orm::Tables;
use lapin::options::QueueBindOptions;
use lapin::types::FieldTable;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::broker;
use crate::cpu::{self, CpuSample, CpuSpent};
use crate::messages;
use crate::report::{self, Measure, Row, Target};
use crate::scenarios::Bench;
use crate::BoxError;

/// Which side runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Side {
    /// `example_billing::Billing`.
    Ferrybus,
    /// The hand-written twin.
    Twin,
}

/// One billing run: how many orders were completed, and how fast.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BillingRun {
    /// Orders with invoice and captured payment.
    pub(crate) completed: usize,
    /// Orders per second, from the first invoice seen to the last capture.
    pub(crate) rate: f64,
    /// CPU per order over the same span (every process, the bench's own, steal).
    pub(crate) cpu: CpuSpent,
}

/// The names of one run.
struct Names {
    schema: String,
    billing: String,
    invoice_queue: String,
    payments_queue: String,
    events_queue: String,
}

async fn setup(b: &Bench, what: &str) -> Result<Names, BoxError> {
    let schema = b.fresh_schema(what).await?;
    let billing = format!("{schema}_b");
    b.remember_schema(&billing);
    let sea = sea_orm::SqlxPostgresConnector::from_sqlx_postgres_pool(b.admin.clone());
    example_billing::schema::create(&sea, &billing, InvoiceKey::UniqueOrderId).await?;
    twin::declare_exchanges(&b.conn).await?;
    let invoice_queue = b.fresh_queue(&format!("{what}-invoice")).await?;
    let payments_queue = b.fresh_queue(&format!("{what}-payments")).await?;
    let events_queue = b.fresh_queue(&format!("{what}-invoice-created")).await?;
    // The endpoints do not bind their message types (`bind_message_types: false`: other
    // sessions on this broker publish `OrderPlaced`); the payments queue and a queue counting
    // `InvoiceCreated` are bound to the event exchanges here, the same for both sides.
    let ch = b.conn.create_channel().await?;
    for (queue, exchange) in [
        (&payments_queue, twin::exchange::<PaymentCaptured>()),
        (&events_queue, twin::exchange::<InvoiceCreated>()),
    ] {
        ch.queue_bind(
            queue.as_str().into(),
            exchange.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    }
    let _ = ch.close(200, "done".into()).await;
    Ok(Names {
        schema,
        billing,
        invoice_queue,
        payments_queue,
        events_queue,
    })
}

/// Publishes `n` orders to the invoice queue.
async fn fill(b: &Bench, queue: &str, n: usize) -> Result<(), BoxError> {
    let bodies: Vec<_> = (0..n)
        .map(|i| {
            let order = OrderPlaced {
                order_id: Uuid::now_v7(),
                total: Decimal::new(1000 + (i as i64 % 9000), 2),
                currency: "TRY".into(),
            };
            messages::envelope(&b.factory, queue, &order)
        })
        .collect::<Result<_, _>>()?;
    broker::prefill(&b.conn, queue, &bodies).await?;
    Ok(())
}

/// (invoices, captured payments of those invoices) in `billing`.
async fn progress(b: &Bench, billing: &str) -> Result<(i64, i64), BoxError> {
    let row: (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM \"{billing}\".invoices), \
                (SELECT count(*) FROM \"{billing}\".payments p JOIN \"{billing}\".invoices i \
                 ON i.order_id = p.order_id WHERE p.status = 'Captured')"
    )))
    .fetch_one(&b.admin)
    .await?;
    Ok(row)
}

/// How often the progress query runs. It counts two tables that grow to `n` rows (two
/// sequential scans and a join), so it costs the database the same per second on both sides;
/// every 20 ms it took ~10 % of a core from the side being measured.
const POLL: Duration = Duration::from_millis(50);

/// Polls every [`POLL`] until `n` orders are complete (or the run is stuck); the span runs from
/// the first invoice seen to the last capture seen.
async fn wait_complete(b: &Bench, billing: &str, n: usize) -> Result<BillingRun, BoxError> {
    let deadline = Instant::now() + b.limit(2 * n);
    let mut first = None;
    let mut last_change = Instant::now();
    let mut last = (0, 0);
    let (mut cpu_first, mut cpu_last) = (CpuSample::default(), CpuSample::default());
    let mut at_first = (0, 0);
    loop {
        let now = progress(b, billing).await?;
        let t = Instant::now();
        let cpu = CpuSample::now();
        if now.0 > 0 && first.is_none() {
            first = Some(t);
            cpu_first = cpu;
            at_first = now;
        }
        if now != last {
            last = now;
            last_change = t;
            cpu_last = cpu;
        }
        if now.1 as usize >= n
            || t > deadline
            || t.duration_since(last_change) > Duration::from_secs(20)
        {
            let span = last_change.saturating_duration_since(first.unwrap_or(last_change));
            // The work done inside the span: half an order per invoice and per capture (the
            // first poll had some of both already).
            let inside = ((now.0 - at_first.0) + (now.1 - at_first.1)).max(0) as usize / 2;
            return Ok(BillingRun {
                completed: now.1 as usize,
                rate: now.1 as f64 / span.as_secs_f64().max(1e-9),
                cpu: cpu_last.since(&cpu_first).per(inside),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

fn config(b: &Bench, names: &Names) -> Config {
    Config {
        database_url: b.args.database_url.clone(),
        amqp_url: b.args.amqp_url.clone(),
        concurrency: b.args.concurrency,
        payment_delay: Duration::ZERO,
        billing_schema: names.billing.clone(),
        tables: Tables::dotnet_default().schema(&names.schema),
        invoice_queue: names.invoice_queue.clone(),
        payments_queue: names.payments_queue.clone(),
        bind_message_types: false,
        connection_name: "ferrybus-bench billing".into(),
        ..Config::default()
    }
}

/// Runs one side on a fresh backlog of `n` orders (`inbox_rows` delivered rows put in
/// `InboxState` first); verifies every order, every `InvoiceCreated` and the empty queues.
pub(crate) async fn run(
    b: &Bench,
    side: Side,
    what: &str,
    n: usize,
    inbox_rows: u64,
) -> Result<BillingRun, BoxError> {
    let names = setup(b, what).await?;
    if inbox_rows > 0 {
        let t = Instant::now();
        crate::growth::fill_inbox(b, &names.schema, inbox_rows).await?;
        eprintln!(
            "   {what}: {inbox_rows} delivered inbox rows written in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    fill(b, &names.invoice_queue, n).await?;
    settle_database(b).await;
    let config = config(b, &names);
    let result = match side {
        Side::Ferrybus => {
            let billing = Billing::start(&config).await?;
            let r = wait_complete(b, &names.billing, n).await;
            billing.stop().await;
            r?
        }
        Side::Twin => {
            let c = b.args.concurrency;
            // The pool sizes billing uses: 2 × concurrency + 6 for the service, 8 for the gateway.
            let db = twin::Pool::connect(
                &b.args.database_url,
                &names.schema,
                &names.billing,
                2 * c + 6,
            )
            .await?;
            let gateway =
                twin::Pool::connect(&b.args.database_url, &names.schema, &names.billing, 8).await?;
            let conn = broker::connect(&b.args.amqp_url, "ferrybus-bench billing twin").await?;
            let publisher = crate::baseline::publisher(&conn).await?;
            let twin = Arc::new(twin::Twin {
                db,
                gateway,
                publisher,
                factory: b.factory.clone(),
                invoice_queue: names.invoice_queue.clone(),
            });
            let errors = Arc::new(AtomicUsize::new(0));
            let prefetch = u16::try_from((c * 6).div_ceil(5)).unwrap_or(u16::MAX);
            let t1 = twin.clone();
            let (ch1, p1) = twin::consume(
                &conn,
                &names.invoice_queue,
                prefetch,
                c,
                move |d| {
                    let t = t1.clone();
                    async move { t.invoice(&d).await }
                },
                errors.clone(),
            )
            .await?;
            let t2 = twin.clone();
            let (ch2, p2) = twin::consume(
                &conn,
                &names.payments_queue,
                prefetch,
                c,
                move |d| {
                    let t = t2.clone();
                    async move { t.capture(&d).await }
                },
                errors.clone(),
            )
            .await?;
            let r = wait_complete(b, &names.billing, n).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = ch1.close(200, "done".into()).await;
            let _ = ch2.close(200, "done".into()).await;
            p1.abort();
            p2.abort();
            let _ = conn.close(200, "done".into()).await;
            r?
        }
    };
    let mut missing = Vec::new();
    if result.completed < n {
        missing.push(format!("{} of {n} orders completed", result.completed));
    }
    let (invoices, _) = progress(b, &names.billing).await?;
    if invoices != n as i64 {
        missing.push(format!("{invoices} invoices for {n} orders"));
    }
    let events = crate::scenarios::wait_depth(b, &names.events_queue, n).await;
    if events < n {
        missing.push(format!("{events} InvoiceCreated for {n} orders"));
    }
    for queue in [&names.invoice_queue, &names.payments_queue] {
        let left = crate::scenarios::wait_depth(b, queue, 0).await;
        if left != 0 {
            missing.push(format!("{left} messages left in {queue}"));
        }
    }
    if !missing.is_empty() {
        b.fail(format!("{what}: {}", missing.join(", ")));
    }
    eprintln!(
        "   {what}: {} of {n} orders in {:.0} orders/s; CPU per order {:.3} ms (bench process {:.3}, steal {:.3})",
        result.completed, result.rate, result.cpu.busy_ms, result.cpu.own_ms, result.cpu.steal_ms
    );
    // Verified: delete the run's queues now. They stay bound to the event exchanges, so every
    // later run would also route each `InvoiceCreated` and `PaymentCaptured` into them (the
    // second side of a round did twice the broker work of the first, the fourth four times).
    let queues = [
        names.invoice_queue.clone(),
        names.payments_queue.clone(),
        names.events_queue.clone(),
    ];
    broker::delete(&b.conn, &queues, &[]).await;
    // And drop its tables, so that autovacuum does not clean up after this side while the next
    // one is timed.
    for schema in [&names.billing, &names.schema] {
        if let Err(e) = crate::db::drop_schema(&b.admin, schema).await {
            eprintln!("   {what}: dropping schema {schema} failed ({e}); dropped at the end");
        }
    }
    Ok(result)
}

/// Starts every side from the same database state: a `CHECKPOINT` right before the clock, so
/// that neither side pays for the other's dirty pages, nor a checkpoint's full-page images in
/// the middle of its run. Needs superuser or `pg_checkpoint`; without it, runs go on.
async fn settle_database(b: &Bench) {
    if let Err(e) = sqlx::query("CHECKPOINT").execute(&b.admin).await {
        eprintln!("   CHECKPOINT before the run failed ({e}); timing without it");
    }
}

fn best(b: &Bench, what: &str, runs: &[Result<BillingRun, BoxError>]) -> Measure {
    let mut best: Option<f64> = None;
    for r in runs {
        match r {
            Ok(r) if r.completed > 0 => best = Some(best.unwrap_or(0.0).max(r.rate)),
            Ok(_) => {}
            Err(e) => b.fail(format!("{what}: {e}")),
        }
    }
    best.map_or_else(|| Measure::na("no run completed"), Measure::Value)
}

/// Scenario 6's rows: billing against its twin, sides alternating per round.
pub(crate) async fn rows(b: &Bench) -> Result<Vec<Row>, BoxError> {
    let n = b.args.billing_orders;
    let (mut ferry, mut twin) = (Vec::new(), Vec::new());
    for round in 0..b.args.rounds {
        let sides = if round % 2 == 0 {
            [Side::Twin, Side::Ferrybus]
        } else {
            [Side::Ferrybus, Side::Twin]
        };
        for side in sides {
            if !b.args.billing_sides.contains(&side) {
                continue;
            }
            let label = match side {
                Side::Ferrybus => "ferrybus",
                Side::Twin => "twin",
            };
            let r = run(b, side, &format!("billing-{label}-{round}"), n, 0).await;
            match side {
                Side::Ferrybus => ferry.push(r),
                Side::Twin => twin.push(r),
            }
        }
    }
    let c = b.args.concurrency;
    let cpu = format!(
        "; CPU per order, whole machine (bench process): ferrybus {}, twin {}; every round \
         (orders/s): ferrybus {}, twin {}",
        mean_cpu(&ferry),
        mean_cpu(&twin),
        rounds(&ferry),
        rounds(&twin)
    );
    Ok(vec![Row::new(
        "6 billing",
        "orders invoiced + captured",
        "msg/s",
        best(b, "billing ferrybus", &ferry),
        "hand-written lapin + tokio-postgres",
        best(b, "billing twin", &twin),
        Target::ratio(1.0),
    )
    .note(format!(
        "{n} orders, payment delay 0, concurrency {c} per endpoint; aim 1.5x{cpu}"
    ))])
}

/// Every round's rate, in run order.
fn rounds(runs: &[Result<BillingRun, BoxError>]) -> String {
    report::rounds_label(runs.iter().map(|r| {
        r.as_ref()
            .ok()
            .filter(|run| run.completed > 0)
            .map(|run| run.rate)
    }))
}

/// The mean CPU per order of the completed `runs`.
fn mean_cpu(runs: &[Result<BillingRun, BoxError>]) -> String {
    let per: Vec<CpuSpent> = runs
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter(|r| r.completed > 0)
        .map(|r| r.cpu)
        .collect();
    cpu::mean_label(&per)
}

/// Scenario 7's rows: billing with an empty inbox and with many delivered rows in it.
pub(crate) async fn growth_rows(b: &Bench) -> Result<Vec<Row>, BoxError> {
    let n = b.args.billing_orders;
    let rows = b.args.growth_inbox_rows;
    let (mut empty, mut full) = (Vec::new(), Vec::new());
    for round in 0..b.args.rounds {
        empty.push(run(b, Side::Ferrybus, &format!("growth-empty-{round}"), n, 0).await);
        full.push(run(b, Side::Ferrybus, &format!("growth-full-{round}"), n, rows).await);
    }
    Ok(vec![Row::new(
        "7 table growth",
        &format!("billing, {rows} delivered inbox rows"),
        "msg/s",
        best(b, "growth full", &full),
        "billing, empty inbox",
        best(b, "growth empty", &empty),
        Target::ratio(0.9),
    )
    .note(format!("{n} orders each"))])
}
