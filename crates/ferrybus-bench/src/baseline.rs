//! The hand-rolled baselines: what a careful engineer writes with lapin and sqlx alone.
//!
//! Every baseline consumer reads the same queue shape with the same prefetch and the same
//! concurrency (a semaphore of N permits, one task per delivery, as ferrybus does), parses the
//! envelope with serde_json (message id and payload), does its work, then acknowledges.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrybus_core::SendOptions;

use ferrybus_core::outgoing::MessageFactory;

use ferrybus_core::outgoing::MessageOrigin;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use sqlx::PgPool;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::broker::{self, Counter};
use crate::cpu::CpuSpent;
use crate::db;
use crate::messages::{BaselineEnvelope, OrderAccepted, OrderSubmitted};
use crate::BoxError;

/// How a consumer run went.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunResult {
    /// Messages processed (acknowledged).
    pub(crate) processed: usize,
    /// From the first processed message to the last.
    pub(crate) elapsed: Duration,
    /// Handler errors (each leaves a message unacknowledged).
    pub(crate) errors: usize,
    /// CPU spent over the timed span (the whole machine and the bench process).
    pub(crate) cpu: CpuSpent,
}

impl RunResult {
    /// Messages per second (the span starts at the first message, hence `processed - 1`).
    pub(crate) fn rate(&self) -> f64 {
        self.processed.saturating_sub(1) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// How a consumer run is loaded: prefetch, concurrency, how many messages, how long at most.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Load {
    /// AMQP prefetch.
    pub(crate) prefetch: u16,
    /// Messages handled at once.
    pub(crate) concurrency: usize,
    /// Messages to wait for.
    pub(crate) expected: usize,
    /// How long the run may take.
    pub(crate) limit: Duration,
}

/// Consumes `queue` as `load` says, running `handler` on each delivery and acknowledging it when
/// it succeeds, until `load.expected` were handled or `load.limit` passed.
pub(crate) async fn run_consumer<H, Fut>(
    conn: &Connection,
    queue: &str,
    load: Load,
    handler: H,
    counter: Counter,
) -> Result<RunResult, BoxError>
where
    H: Fn(Arc<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    let channel = conn.create_channel().await?;
    let Load {
        prefetch,
        concurrency,
        expected,
        limit,
    } = load;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    let errors = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            format!("bench-{}", Uuid::now_v7()).as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let handler = Arc::new(handler);
    let limit_permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let loop_counter = counter.clone();
    let loop_errors = errors.clone();
    let pump = tokio::spawn(async move {
        while let Some(delivery) = consumer.next().await {
            let Ok(delivery) = delivery else { break };
            let Ok(permit) = limit_permits.clone().acquire_owned().await else {
                break;
            };
            let handler = handler.clone();
            let counter = loop_counter.clone();
            let errors = loop_errors.clone();
            tokio::spawn(async move {
                let delivery = Arc::new(delivery);
                match handler(delivery.clone()).await {
                    Ok(()) => {
                        // Counted where ferrybus counts: when the handler is done (the permit
                        // is held through the ack on both sides).
                        counter.incr();
                        if let Err(e) = delivery.ack(BasicAckOptions::default()).await {
                            eprintln!("baseline ack failed: {e}");
                        }
                    }
                    Err(e) => {
                        if errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                            eprintln!("baseline handler error: {e}");
                        }
                    }
                }
                drop(permit);
            });
        }
    });
    let (processed, last) = counter.wait_for(expected, limit).await;
    let cpu = counter.cpu_since_first();
    // Let the last acknowledgements go out before closing.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let elapsed = counter.span(start, last);
    let _ = channel.close(200, "done".into()).await;
    pump.abort();
    Ok(RunResult {
        processed,
        elapsed,
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
        cpu,
    })
}

/// Reads the envelope as a hand-rolled consumer does.
fn parse(delivery: &Delivery) -> Result<BaselineEnvelope<OrderSubmitted>, BoxError> {
    Ok(serde_json::from_slice(&delivery.data)?)
}

/// Raw lapin: parse, acknowledge.
pub(crate) async fn plain(
    conn: &Connection,
    queue: &str,
    load: Load,
) -> Result<RunResult, BoxError> {
    run_consumer(
        conn,
        queue,
        load,
        |d: Arc<Delivery>| async move {
            let envelope = parse(&d)?;
            std::hint::black_box(envelope.message_id);
            Ok(())
        },
        Counter::new(),
    )
    .await
}

const INSERT_INBOX: &str = r#"INSERT INTO "InboxState"
    ("MessageId", "ConsumerId", "LockId", "Received", "ReceiveCount", "Consumed")
    VALUES ($1, $2, $3, now(), 1, now())
    ON CONFLICT ("MessageId", "ConsumerId") DO NOTHING"#;

/// The consumer id the hand-rolled consumers write in `InboxState`.
pub(crate) const CONSUMER_ID: Uuid = Uuid::from_u128(0x0b5e_55ed_0000_4000_8000_0000_0000_0001);

/// Inserts the inbox row and the order in `tx`; false for a duplicate (nothing written).
async fn inbox_and_order(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    envelope: &BaselineEnvelope<OrderSubmitted>,
) -> Result<bool, BoxError> {
    let inserted = sqlx::query(INSERT_INBOX)
        .bind(envelope.message_id)
        .bind(CONSUMER_ID)
        .bind(Uuid::now_v7())
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if inserted == 0 {
        return Ok(false);
    }
    let order = &envelope.message;
    sqlx::query(db::INSERT_ORDER)
        .bind(order.order_id)
        .bind(envelope.message_id)
        .bind(&order.customer)
        .bind(&order.amount)
        .execute(&mut **tx)
        .await?;
    Ok(true)
}

/// Hand-rolled lapin + sqlx inbox consumer: one transaction per message
/// (`INSERT "InboxState" ... ON CONFLICT DO NOTHING; INSERT bench_orders; COMMIT`), then ack.
pub(crate) async fn inbox(
    conn: &Connection,
    pool: PgPool,
    queue: &str,
    load: Load,
) -> Result<RunResult, BoxError> {
    run_consumer(
        conn,
        queue,
        load,
        move |d: Arc<Delivery>| {
            let pool = pool.clone();
            async move {
                let envelope = parse(&d)?;
                let mut tx = pool.begin().await?;
                inbox_and_order(&mut tx, &envelope).await?;
                tx.commit().await?;
                Ok(())
            }
        },
        Counter::new(),
    )
    .await
}

const INSERT_OUTBOX: &str = r#"INSERT INTO "OutboxMessage"
    ("SentTime", "Headers", "Properties", "InboxMessageId", "InboxConsumerId", "MessageId",
     "ContentType", "MessageType", "Body", "ConversationId", "SourceAddress", "DestinationAddress")
    VALUES ($1, NULL, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"#;

const OUTBOX_DELIVERED: &str = r#"WITH sent AS (
        DELETE FROM "OutboxMessage" WHERE "InboxMessageId" = $1 AND "InboxConsumerId" = $2)
    UPDATE "InboxState" SET "Delivered" = now()
    WHERE "MessageId" = $1 AND "ConsumerId" = $2"#;

/// Hand-rolled consumer outbox (MassTransit's protocol done by hand): in one transaction the
/// inbox row, the order and an `OutboxMessage` row for the `OrderAccepted` it publishes; after
/// commit, publish with a confirm, delete the outbox row and mark the inbox row delivered; ack.
pub(crate) async fn outbox(
    conn: &Connection,
    pool: PgPool,
    queue: &str,
    load: Load,
    factory: Arc<MessageFactory>,
) -> Result<RunResult, BoxError> {
    let publisher = publisher(conn).await?;
    let input = factory.host().entity_address(queue);
    run_consumer(
        conn,
        queue,
        load,
        move |d: Arc<Delivery>| {
            let pool = pool.clone();
            let publisher = publisher.clone();
            let factory = factory.clone();
            let input = input.clone();
            async move {
                let envelope = parse(&d)?;
                let origin = MessageOrigin {
                    source_address: Some(input),
                    conversation_id: None,
                    initiator_id: None,
                    headers: Default::default(),
                    ..MessageOrigin::default()
                };
                let accepted = OrderAccepted {
                    order_id: envelope.message.order_id,
                    amount: envelope.message.amount.clone(),
                };
                let out = factory.publish(&accepted, &origin, SendOptions::new())?;
                let exchange = out.destination()?.name.clone();
                let mut tx = pool.begin().await?;
                if !inbox_and_order(&mut tx, &envelope).await? {
                    return Ok(());
                }
                sqlx::query(INSERT_OUTBOX)
                    .bind(out.sent_time)
                    .bind(Some(
                        serde_json::json!({ "RMQ-Exchange": exchange }).to_string(),
                    ))
                    .bind(envelope.message_id)
                    .bind(CONSUMER_ID)
                    .bind(out.message_id)
                    .bind(&out.content_type)
                    .bind(out.message_type.join(";"))
                    .bind(std::str::from_utf8(&out.body)?)
                    .bind(out.conversation_id)
                    .bind(&out.source_address)
                    .bind(&out.destination_address)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                let confirm = publisher
                    .basic_publish(
                        exchange.as_str().into(),
                        "".into(),
                        BasicPublishOptions::default(),
                        &out.body,
                        broker::properties(out.message_id),
                    )
                    .await?
                    .await?;
                if !confirm.is_ack() {
                    return Err("publish nacked".into());
                }
                sqlx::query(OUTBOX_DELIVERED)
                    .bind(envelope.message_id)
                    .bind(CONSUMER_ID)
                    .execute(&pool)
                    .await?;
                Ok(())
            }
        },
        Counter::new(),
    )
    .await
}

/// A channel in confirm mode.
pub(crate) async fn publisher(conn: &Connection) -> Result<Channel, BoxError> {
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}
