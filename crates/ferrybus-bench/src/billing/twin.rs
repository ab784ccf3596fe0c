//! Billing's hand-written twin: the same work as `examples/billing` with the same guarantees,
//! written with lapin and tokio-postgres alone, as a careful engineer would (statements
//! prepared once per connection, both publishes in flight at once).
//!
//! Per `OrderPlaced`: one transaction — inbox row (`ON CONFLICT DO NOTHING`; a duplicate commits
//! and is acknowledged), the gateway charge on the gateway's own connection (committed at once,
//! idempotency key = order id), the invoice (`ON CONFLICT (order_id) DO NOTHING`), the payment
//! `Pending`, the two `OutboxMessage` rows (`InvoiceCreated`, `PaymentCaptured`) —; after
//! commit both messages published with confirms, both in flight; one statement that deletes the
//! outbox rows and marks the inbox row delivered; ack. Per `PaymentCaptured`: one transaction —
//! inbox row, payment ensured `Pending`, moved to `Captured` where it is `Pending`, its status
//! read (billing logs it) —; ack.

use std::sync::{Arc, Mutex};

use example_contracts::{InvoiceCreated, OrderPlaced, PaymentCaptured};
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::outgoing::MessageOrigin;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::SendOptions;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ExchangeDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ExchangeKind};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::{Client, NoTls, Statement};
use uuid::Uuid;

use crate::broker;
use crate::BoxError;

/// The envelope fields the twin reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct In<M> {
    message_id: Uuid,
    conversation_id: Option<Uuid>,
    correlation_id: Option<Uuid>,
    message: M,
}

/// The consumer ids the twin writes (fixed, like a hand-written service would).
const INVOICE_CONSUMER: Uuid = Uuid::from_u128(0x7a11_0000_0000_4000_8000_0000_0000_0001);
const PAYMENTS_CONSUMER: Uuid = Uuid::from_u128(0x7a11_0000_0000_4000_8000_0000_0000_0002);

/// The statements of one connection, prepared when it opens.
struct Prepared {
    inbox: Statement,
    inbox_done: Statement,
    invoice: Statement,
    payment: Statement,
    outbox: Statement,
    delivered: Statement,
    capture: Statement,
    status: Statement,
    charge: Statement,
}

struct Conn {
    client: Client,
    st: Prepared,
}

/// A fixed-size pool of prepared connections.
pub(crate) struct Pool {
    conns: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
}

struct Lease<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool
                .conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
    }
}

impl Lease<'_> {
    fn get(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("a leased connection")
    }
}

impl Pool {
    /// `size` connections to `url` with `search_path` = `schema` (MassTransit's tables), the
    /// billing tables in `billing`.
    pub(crate) async fn connect(
        url: &str,
        schema: &str,
        billing: &str,
        size: usize,
    ) -> Result<Arc<Self>, BoxError> {
        let mut config: tokio_postgres::Config = url.parse()?;
        config.options(format!("-c search_path={schema}"));
        let mut conns = Vec::new();
        for _ in 0..size {
            let (client, connection) = config.connect(NoTls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let st = prepare(&client, billing).await?;
            conns.push(Conn { client, st });
        }
        Ok(Arc::new(Self {
            conns: Mutex::new(conns),
            permits: Arc::new(Semaphore::new(size)),
        }))
    }

    async fn lease(&self) -> Result<Lease<'_>, BoxError> {
        let permit = self.permits.clone().acquire_owned().await?;
        let conn = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or("pool: a permit without a connection")?;
        Ok(Lease {
            pool: self,
            conn: Some(conn),
            _permit: permit,
        })
    }
}

async fn prepare(client: &Client, b: &str) -> Result<Prepared, BoxError> {
    let inbox = r#"INSERT INTO "InboxState"
        ("MessageId", "ConsumerId", "LockId", "Received", "ReceiveCount", "Consumed")
        VALUES ($1, $2, $3, now(), 1, now()) ON CONFLICT ("MessageId", "ConsumerId") DO NOTHING"#;
    let inbox_done = r#"INSERT INTO "InboxState"
        ("MessageId", "ConsumerId", "LockId", "Received", "ReceiveCount", "Consumed", "Delivered")
        VALUES ($1, $2, $3, now(), 1, now(), now())
        ON CONFLICT ("MessageId", "ConsumerId") DO NOTHING"#;
    let outbox_cols = r#""SentTime", "Properties", "InboxMessageId", "InboxConsumerId", "MessageId",
        "ContentType", "MessageType", "Body", "ConversationId", "InitiatorId", "SourceAddress",
        "DestinationAddress""#;
    let outbox = format!(
        r#"INSERT INTO "OutboxMessage" ({outbox_cols}) VALUES
        ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12),
        ($13, $14, $3, $4, $15, $6, $16, $17, $9, $10, $11, $18)"#
    );
    Ok(Prepared {
        inbox: client.prepare(inbox).await?,
        inbox_done: client.prepare(inbox_done).await?,
        invoice: client
            .prepare(&format!(
                "INSERT INTO \"{b}\".invoices (id, order_id, amount, currency) \
                 VALUES ($1, $2, $3::text::numeric, $4) ON CONFLICT (order_id) DO NOTHING"
            ))
            .await?,
        payment: client
            .prepare(&format!(
                "INSERT INTO \"{b}\".payments (payment_id, order_id, status) \
                 VALUES ($1, $2, 'Pending') ON CONFLICT (payment_id) DO NOTHING"
            ))
            .await?,
        outbox: client.prepare(&outbox).await?,
        delivered: client
            .prepare(
                r#"WITH sent AS (DELETE FROM "OutboxMessage"
                     WHERE "InboxMessageId" = $1 AND "InboxConsumerId" = $2)
                   UPDATE "InboxState" SET "Delivered" = now()
                   WHERE "MessageId" = $1 AND "ConsumerId" = $2"#,
            )
            .await?,
        capture: client
            .prepare(&format!(
                "UPDATE \"{b}\".payments SET status = 'Captured', updated_at = now() \
                 WHERE payment_id = $1 AND status IN ('Pending')"
            ))
            .await?,
        status: client
            .prepare(&format!(
                "SELECT status FROM \"{b}\".payments WHERE payment_id = $1"
            ))
            .await?,
        charge: client
            .prepare(&format!(
                "INSERT INTO \"{b}\".charges (idempotency_key, order_id, amount, currency, attempts) \
                 VALUES ($1, $2, $3::text::numeric, $4, 1) ON CONFLICT (idempotency_key) \
                 DO UPDATE SET attempts = charges.attempts + 1 RETURNING attempts"
            ))
            .await?,
    })
}

/// What the twin runs on.
pub(crate) struct Twin {
    pub(crate) db: Arc<Pool>,
    pub(crate) gateway: Arc<Pool>,
    pub(crate) publisher: Channel,
    pub(crate) factory: Arc<MessageFactory>,
    pub(crate) invoice_queue: String,
}

/// Declares the two event exchanges as MassTransit does (durable fanout).
pub(crate) async fn declare_exchanges(conn: &Connection) -> Result<(), BoxError> {
    let ch = conn.create_channel().await?;
    for name in [exchange::<InvoiceCreated>(), exchange::<PaymentCaptured>()] {
        ch.exchange_declare(
            name.as_str().into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    }
    let _ = ch.close(200, "done".into()).await;
    Ok(())
}

pub(crate) fn exchange<M: ferrybus_core::Message>() -> String {
    M::message_type().entity_name().to_owned()
}

fn params(m: &OutgoingMessage) -> Result<(String, String, &str), BoxError> {
    // MassTransit's outbox keeps the exchange beside the message (`RMQ-Exchange`).
    let properties = serde_json::json!({ "RMQ-Exchange": m.destination()?.name }).to_string();
    Ok((
        properties,
        m.message_type.join(";"),
        std::str::from_utf8(&m.body)?,
    ))
}

impl Twin {
    /// One `OrderPlaced`.
    pub(crate) async fn invoice(&self, delivery: &Delivery) -> Result<(), BoxError> {
        let envelope: In<OrderPlaced> = serde_json::from_slice(&delivery.data)?;
        let order = &envelope.message;
        let origin = MessageOrigin {
            source_address: Some(self.factory.host().entity_address(&self.invoice_queue)),
            conversation_id: envelope.conversation_id,
            initiator_id: envelope.correlation_id,
            headers: Default::default(),
            ..MessageOrigin::default()
        };
        let mut lease = self.db.lease().await?;
        let conn = lease.get();
        let tx = conn.client.transaction().await?;
        let st = &conn.st;
        let fresh = tx
            .execute(
                &st.inbox,
                &[&envelope.message_id, &INVOICE_CONSUMER, &Uuid::now_v7()],
            )
            .await?;
        if fresh == 0 {
            tx.commit().await?;
            return Ok(());
        }
        // The gateway: its own connection, committed at once.
        let key = order.order_id.to_string();
        let total = order.total.to_string();
        {
            let mut gw = self.gateway.lease().await?;
            let g = gw.get();
            g.client
                .query_one(
                    &g.st.charge,
                    &[&key, &order.order_id, &total, &order.currency],
                )
                .await?;
        }
        let invoice_id = Uuid::now_v7();
        let inserted = tx
            .execute(
                &st.invoice,
                &[&invoice_id, &order.order_id, &total, &order.currency],
            )
            .await?;
        if inserted == 0 {
            tx.commit().await?;
            return Ok(());
        }
        let payment_id = example_billing::payments::payment_id(order.order_id);
        tx.execute(&st.payment, &[&payment_id, &order.order_id])
            .await?;
        let invoice = self.factory.publish(
            &InvoiceCreated {
                invoice_id,
                order_id: order.order_id,
                amount: order.total,
                currency: order.currency.clone(),
            },
            &origin,
            SendOptions::new(),
        )?;
        let captured = self.factory.publish(
            &PaymentCaptured {
                payment_id,
                order_id: order.order_id,
            },
            &origin,
            SendOptions::new(),
        )?;
        let (p1, t1, b1) = params(&invoice)?;
        let (p2, t2, b2) = params(&captured)?;
        tx.execute(
            &st.outbox,
            &[
                &invoice.sent_time,
                &p1,
                &envelope.message_id,
                &INVOICE_CONSUMER,
                &invoice.message_id,
                &invoice.content_type,
                &t1,
                &b1,
                &invoice.conversation_id,
                &invoice.initiator_id,
                &invoice.source_address,
                &invoice.destination_address,
                &captured.sent_time,
                &p2,
                &captured.message_id,
                &t2,
                &b2,
                &captured.destination_address,
            ],
        )
        .await?;
        tx.commit().await?;
        // Both publishes in flight at once.
        let c1 = self
            .publisher
            .basic_publish(
                exchange::<InvoiceCreated>().as_str().into(),
                "".into(),
                BasicPublishOptions::default(),
                &invoice.body,
                broker::properties(invoice.message_id),
            )
            .await?;
        let c2 = self
            .publisher
            .basic_publish(
                exchange::<PaymentCaptured>().as_str().into(),
                "".into(),
                BasicPublishOptions::default(),
                &captured.body,
                broker::properties(captured.message_id),
            )
            .await?;
        let (a, b) = futures::try_join!(c1, c2)?;
        if !a.is_ack() || !b.is_ack() {
            return Err("publish nacked".into());
        }
        conn.client
            .execute(&st.delivered, &[&envelope.message_id, &INVOICE_CONSUMER])
            .await?;
        Ok(())
    }

    /// One `PaymentCaptured`.
    pub(crate) async fn capture(&self, delivery: &Delivery) -> Result<(), BoxError> {
        let envelope: In<PaymentCaptured> = serde_json::from_slice(&delivery.data)?;
        let m = &envelope.message;
        let mut lease = self.db.lease().await?;
        let conn = lease.get();
        let tx = conn.client.transaction().await?;
        let st = &conn.st;
        let fresh = tx
            .execute(
                &st.inbox_done,
                &[&envelope.message_id, &PAYMENTS_CONSUMER, &Uuid::now_v7()],
            )
            .await?;
        if fresh == 1 {
            tx.execute(&st.payment, &[&m.payment_id, &m.order_id])
                .await?;
            tx.execute(&st.capture, &[&m.payment_id]).await?;
            let row = tx.query_one(&st.status, &[&m.payment_id]).await?;
            std::hint::black_box(row.get::<_, String>(0));
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Consumes `queue` with `prefetch` and `concurrency` (a semaphore, one task per delivery, the
/// permit held through the ack), running `handle` and acknowledging after it succeeds. Runs
/// until the channel closes; errors are counted in `errors`.
pub(crate) async fn consume<F, Fut>(
    conn: &Connection,
    queue: &str,
    prefetch: u16,
    concurrency: usize,
    handle: F,
    errors: Arc<std::sync::atomic::AtomicUsize>,
) -> Result<(Channel, tokio::task::JoinHandle<()>), BoxError>
where
    F: Fn(Arc<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), BoxError>> + Send + 'static,
{
    let channel = conn.create_channel().await?;
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            format!("twin-{}", Uuid::now_v7()).as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let handle = Arc::new(handle);
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let pump = tokio::spawn(async move {
        while let Some(Ok(delivery)) = consumer.next().await {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let handle = handle.clone();
            let errors = errors.clone();
            tokio::spawn(async move {
                let delivery = Arc::new(delivery);
                match handle(delivery.clone()).await {
                    Ok(()) => {
                        let _ = delivery.ack(BasicAckOptions::default()).await;
                    }
                    Err(e) => {
                        if errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                            eprintln!("billing twin: {e}");
                        }
                    }
                }
                drop(permit);
            });
        }
    });
    Ok((channel, pump))
}
