//! The ferrybus side of every scenario: the same work as the baselines, through
//! `ferrybus-rabbitmq` endpoints and `ferrybus-sea-orm` layers, with the same pool size, prefetch
//! and concurrency.

use std::time::{Duration, Instant};

use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig, Publish};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_sea_orm::{BusOutbox, PostgresStorage, Tables, TransactionExt};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait};

use crate::baseline::RunResult;
use crate::broker::Counter;
use crate::db;
use crate::messages::{OrderAccepted, OrderSubmitted, RelayPing};
use crate::relay::{self, Latencies, RelayResult};
use crate::scenarios::Bench;
use crate::BoxError;

/// Why the ferrybus side has no figure.
#[derive(Debug)]
pub(crate) enum FerryError {
    /// The API the scenario needs does not exist (yet).
    #[allow(dead_code)]
    Missing(String),
    /// It ran and failed.
    Failed(BoxError),
}

impl From<BoxError> for FerryError {
    fn from(e: BoxError) -> Self {
        FerryError::Failed(e)
    }
}

impl From<ferrybus_rabbitmq::RabbitMqError> for FerryError {
    fn from(e: ferrybus_rabbitmq::RabbitMqError) -> Self {
        FerryError::Failed(Box::new(e))
    }
}

/// The tables as the bench creates them: MassTransit's EF Core shape in `schema`.
fn tables(schema: &str) -> Tables {
    Tables::dotnet_default().schema(schema)
}

/// The consumer scenarios' storage: the run's tables, without the background services (outbox
/// delivery, cleanup), which the baselines do not run either and which would take connections
/// from the same pool.
fn consumer_storage(b: &Bench, db: DatabaseConnection, schema: &str) -> PostgresStorage {
    PostgresStorage::new(db)
        .tables(tables(schema))
        .async_delivered_commit(b.args.async_delivered_commit)
        .outbox_delivery(false)
        .inbox_cleanup(false)
}

/// A sea-orm connection over the same kind of pool the baselines use.
async fn database(b: &Bench, schema: &str, size: u32) -> Result<DatabaseConnection, BoxError> {
    let pool = db::pool(&b.args.database_url, Some(schema), size).await?;
    Ok(sea_orm::SqlxPostgresConnector::from_sqlx_postgres_pool(
        pool,
    ))
}

/// Starts one bus per entry of `storages` (with that storage, if any), each consuming queue
/// `queue` as `endpoint` configures it, waits until `expected` were counted, stops the buses.
async fn run_endpoint(
    amqp_url: &str,
    queue: &str,
    storages: Vec<Option<PostgresStorage>>,
    endpoint: impl Fn(EndpointConfig) -> EndpointConfig + Clone,
    counter: Counter,
    expected: usize,
    limit: Duration,
) -> Result<RunResult, FerryError> {
    let start = Instant::now();
    // Several instances start together, as separately deployed ones do.
    let buses = futures::future::try_join_all(storages.into_iter().map(|storage| {
        let mut builder = RabbitMqBus::builder(amqp_url).connection_name("ferrybus-bench");
        if let Some(storage) = storage {
            builder = builder.storage(storage);
        }
        builder.receive_endpoint(queue, endpoint.clone()).start()
    }))
    .await?;
    let (processed, last) = counter.wait_for(expected, limit).await;
    let cpu = counter.cpu_since_first();
    for bus in buses {
        bus.stop().await;
    }
    Ok(RunResult {
        processed,
        elapsed: counter.span(start, last),
        errors: 0,
        cpu,
    })
}

fn plain_endpoint(
    endpoint: EndpointConfig,
    prefetch: u16,
    concurrency: usize,
    counter: Counter,
) -> EndpointConfig {
    endpoint
        .prefetch(prefetch)
        .concurrency(concurrency)
        .consumer(consumer_fn(
            "BenchPlainConsumer",
            move |ctx: ConsumeContext<OrderSubmitted>| {
                let counter = counter.clone();
                async move {
                    std::hint::black_box(ctx.message_id());
                    counter.incr();
                    Ok::<_, ConsumeError>(())
                }
            },
        ))
}

/// The plain consumer: parse, dispatch to a consumer that reads the message id, ack.
pub(crate) async fn plain(
    b: &Bench,
    queue: &str,
    expected: usize,
    limit: Duration,
) -> Result<RunResult, FerryError> {
    let counter = Counter::new();
    let c = counter.clone();
    let (prefetch, concurrency) = (b.args.prefetch_count(), b.args.concurrency);
    let endpoint = move |e| plain_endpoint(e, prefetch, concurrency, c.clone());
    run_endpoint(
        &b.args.amqp_url,
        queue,
        vec![None],
        endpoint,
        counter,
        expected,
        limit,
    )
    .await
}

/// The business insert, in the inbox transaction.
async fn insert_order(ctx: &ConsumeContext<OrderSubmitted>) -> Result<(), ConsumeError> {
    let order = ctx.message();
    ctx.db()
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            db::INSERT_ORDER,
            [
                order.order_id.into(),
                ctx.message_id().unwrap_or_default().into(),
                order.customer.clone().into(),
                order.amount.clone().into(),
            ],
        ))
        .await
        .map_err(|e| ConsumeError::handler(e.to_string()))?;
    Ok(())
}

/// The inbox consumer (`publish`: also publishes one `OrderAccepted`, through the consumer
/// outbox).
async fn storage_run(
    b: &Bench,
    queue: &str,
    schema: &str,
    expected: usize,
    limit: Duration,
    publish: bool,
) -> Result<RunResult, FerryError> {
    let storage = |db| consumer_storage(b, db, schema);
    storage_run_with(b, queue, schema, expected, limit, publish, 1, storage).await
}

/// The inbox consumer of (1) with the inbox cleanup of its storage on (every second, batch 100)
/// or off.
pub(crate) async fn inbox_with_cleanup(
    b: &Bench,
    queue: &str,
    schema: &str,
    expected: usize,
    limit: Duration,
    cleanup: bool,
) -> Result<RunResult, FerryError> {
    let storage = |db| {
        consumer_storage(b, db, schema)
            .inbox_cleanup(cleanup)
            .cleanup_interval(Duration::from_secs(1))
    };
    storage_run_with(b, queue, schema, expected, limit, false, 1, storage).await
}

/// `instances` service instances on one queue, each with its own pool (sized as the baseline's,
/// plus three when it publishes) and its storage as `storage` configures it.
#[allow(clippy::too_many_arguments)]
async fn storage_run_with(
    b: &Bench,
    queue: &str,
    schema: &str,
    expected: usize,
    limit: Duration,
    publish: bool,
    instances: usize,
    storage: impl Fn(DatabaseConnection) -> PostgresStorage,
) -> Result<RunResult, FerryError> {
    let counter = Counter::new();
    let extra = if publish { 3 } else { 0 };
    let mut pools = Vec::new();
    for _ in 0..instances {
        pools.push(database(b, schema, b.args.concurrency as u32 + extra).await?);
    }
    let c = counter.clone();
    let (prefetch, concurrency) = (b.args.prefetch_count(), b.args.concurrency);
    let endpoint = move |e: EndpointConfig| {
        let c = c.clone();
        e.prefetch(prefetch)
            .concurrency(concurrency)
            .inbox()
            .consumer(consumer_fn(
                "BenchInboxConsumer",
                move |ctx: ConsumeContext<OrderSubmitted>| {
                    let counter = c.clone();
                    async move {
                        insert_order(&ctx).await?;
                        if publish {
                            let order = ctx.message();
                            ctx.publish(&OrderAccepted {
                                order_id: order.order_id,
                                amount: order.amount.clone(),
                            })
                            .await?;
                        }
                        counter.incr();
                        Ok::<_, ConsumeError>(())
                    }
                },
            ))
    };
    let storages = pools.iter().map(|db| Some(storage(db.clone()))).collect();
    let result = run_endpoint(
        &b.args.amqp_url,
        queue,
        storages,
        endpoint,
        counter,
        expected,
        limit,
    )
    .await;
    for db in pools {
        db.close().await.ok();
    }
    result
}

/// The inbox consumer: inbox layer + one business insert in the inbox transaction.
pub(crate) async fn inbox(
    b: &Bench,
    queue: &str,
    schema: &str,
    expected: usize,
    limit: Duration,
) -> Result<RunResult, FerryError> {
    storage_run(b, queue, schema, expected, limit, false).await
}

/// The inbox consumer that publishes one `OrderAccepted` per order (consumer outbox), with the
/// outbox delivery service running (one worker): its sweeper is what covers a crash after the
/// delivery was acknowledged, so the after-commit sender runs and deliveries are acknowledged
/// after commit. The pool has three more connections than the baseline's (the worker, its
/// `LISTEN`, the after-commit sender).
///
/// `instances` such services consume the one queue side by side, as users scale out.
pub(crate) async fn outbox(
    b: &Bench,
    queue: &str,
    schema: &str,
    expected: usize,
    limit: Duration,
    instances: usize,
) -> Result<RunResult, FerryError> {
    let storage = |db| {
        consumer_storage(b, db, schema)
            .outbox_delivery(true)
            .delivery_workers(1)
    };
    storage_run_with(b, queue, schema, expected, limit, true, instances, storage).await
}

/// The memory probe's ferrybus consumer: the plain endpoint, counting into `counter`.
pub(crate) async fn memory_consumer(
    args: &crate::Args,
    queue: &str,
    expected: usize,
    limit: Duration,
    counter: Counter,
) -> Result<RunResult, FerryError> {
    let c = counter.clone();
    let (prefetch, concurrency) = (args.prefetch_count(), args.concurrency);
    let endpoint = move |e| plain_endpoint(e, prefetch, concurrency, c.clone());
    run_endpoint(
        &args.amqp_url,
        queue,
        vec![None],
        endpoint,
        counter,
        expected,
        limit,
    )
    .await
}

/// Writes `n` `RelayPing`s through the bus outbox from `writers` tasks, one message per
/// transaction; stamps each commit in `latencies` (when given). Returns rows/s.
async fn write_outbox(
    db: &DatabaseConnection,
    outbox: &BusOutbox,
    n: usize,
    writers: usize,
    latencies: Option<Latencies>,
) -> Result<f64, BoxError> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let db = db.clone();
        let outbox = outbox.clone();
        let latencies = latencies.clone();
        let count = n / writers + usize::from(w < n % writers);
        tasks.push(tokio::spawn(async move {
            for seq in 0..count {
                let txn = db.begin().await?;
                let id = outbox
                    .on(&txn)
                    .publish(&RelayPing {
                        seq: seq as u64,
                        writer: w as u32,
                    })
                    .await?;
                txn.commit().await?;
                if let Some(l) = &latencies {
                    l.committed(id, Instant::now());
                }
            }
            Ok::<_, BoxError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// A bus-outbox relay run: `writers` commit `n` messages through the bus outbox; `instances`
/// delivery services (each with its own pool and broker connection) move them to the broker,
/// woken by NOTIFY (`notify`) or only by polling (default 1 s interval; the writers then send
/// no NOTIFY).
///
/// Phase 1 (throughput): the writers fill the outbox with no delivery service running, then the
/// services start and drain it: rows/s committed, messages/s delivered. Phase 2 (latency): the
/// services run while the writers commit another `n / 2`; each message's commit-to-receipt time.
pub(crate) async fn relay(
    b: &Bench,
    n: usize,
    writers: usize,
    instances: usize,
    notify: bool,
) -> Result<RelayResult, FerryError> {
    let what = format!(
        "relay-{instances}-{}",
        if notify { "notify" } else { "poll" }
    );
    let schema = b.fresh_schema(&what).await?;
    let queue = relay::ping_queue(b, &format!("{what}-in")).await?;
    let channel = format!("ferrybus_bench_{}_{}", b.run_id, what.replace('-', "_"));
    let db = database(b, &schema, writers as u32).await?;
    // A polling run's writers send no NOTIFY (`notify_on_write(false)`).
    let writer_storage = PostgresStorage::new(db.clone())
        .tables(tables(&schema))
        .notify_channel(channel.clone())
        .notify_on_write(notify);
    let outbox = BusOutbox::new(&writer_storage, &writer_factory());

    // Phase 1: fill, then drain.
    let committed = write_outbox(&db, &outbox, n, writers, None).await?;
    let received = Counter::new();
    let latencies = Latencies::new();
    let (receiver, ch) =
        relay::receive_latencies(&b.conn, &queue, latencies.clone(), received.clone()).await?;
    let start = Instant::now();
    // The instances start together, as separately deployed ones do: started one after the
    // other, the second's start-up counted against the pair.
    let services = futures::future::try_join_all(
        (0..instances).map(|i| start_service(b, &schema, &channel, &what, i)),
    )
    .await?;
    let (got, last) = received.wait_for(n, b.limit(n)).await;
    let delivered = got as f64 / last.duration_since(start).as_secs_f64().max(1e-9);
    // For reference only (the row keeps the figure above, service start-up included): the rate
    // from the first message received, as the consumer scenarios time their runs.
    let span = received.span(start, last);
    let first_after = last.saturating_duration_since(start).saturating_sub(span);
    eprintln!(
        "   {what}: drained {got} in {:.3} s from service start ({delivered:.0} msg/s); first \
         message after {:.0} ms; {:.0} msg/s from the first message on",
        last.duration_since(start).as_secs_f64(),
        first_after.as_secs_f64() * 1000.0,
        got.saturating_sub(1) as f64 / span.as_secs_f64().max(1e-9),
    );

    // Phase 2: latency with the services running.
    let m = (n / 2).max(1);
    latencies.reset();
    write_outbox(&db, &outbox, m, writers, Some(latencies.clone())).await?;
    let (got2, _) = received.wait_for(n + m, b.limit(m)).await;
    let latency = latencies.percentiles();
    for (bus, sdb) in services {
        bus.stop().await;
        sdb.close().await.ok();
    }
    let _ = ch.close(200, "done".into()).await;
    receiver.abort();
    // The queue stays bound to `RelayPing`'s exchange: delete it now, or every later run's
    // messages would also pile up in it, unconsumed, so persisted to disk before RabbitMQ
    // confirms them (this made two instances look half as fast as one).
    crate::broker::delete(&b.conn, std::slice::from_ref(&queue), &[]).await;
    db.close().await.ok();
    Ok(RelayResult {
        committed,
        delivered,
        latency,
        received: got.min(n) + got2.saturating_sub(n),
        expected: n + m,
    })
}

/// One delivery-service instance: its own bus (broker connection) with a storage on its own
/// pool; the bus runs the outbox delivery.
pub(crate) async fn start_service(
    b: &Bench,
    schema: &str,
    channel: &str,
    what: &str,
    i: usize,
) -> Result<(RabbitMqBus, DatabaseConnection), FerryError> {
    let sdb = database(b, schema, 6).await?;
    let mut storage = PostgresStorage::new(sdb.clone())
        .tables(tables(schema))
        .notify_channel(channel)
        .inbox_cleanup(false);
    if let Some(count) = b.args.relay_outboxes_per_claim {
        storage = storage.outboxes_per_claim(count);
    }
    if let Some(workers) = b.args.relay_workers {
        storage = storage.delivery_workers(workers);
    }
    let bus = RabbitMqBus::builder(&b.args.amqp_url)
        .connection_name(format!("ferrybus-bench {what} delivery {i}"))
        .storage(storage)
        .start()
        .await?;
    Ok((bus, sdb))
}

/// The factory a service that writes bus-outbox rows without a bus of its own uses: the bench's
/// host, RabbitMQ's transport properties.
fn writer_factory() -> MessageFactory {
    MessageFactory::new(crate::messages::host())
        .with_transport(std::sync::Arc::new(ferrybus_rabbitmq::RabbitMqProperties))
}
