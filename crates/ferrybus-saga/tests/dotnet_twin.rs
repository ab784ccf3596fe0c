//! A Rust saga beside its .NET twin on RabbitMQ and PostgreSQL (MassTransit's EF Core tables):
//! with the .NET saga type configured, both key the inbox by the same consumer id, so an event
//! the .NET instance consumed is a duplicate when it is redelivered to the Rust one, and both
//! name the same consumer type in their faults.

use ferrybus_core::{Message, Publish, SendOptions};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_saga::postgres::{ColumnType, PostgresSagaRepository, SagaTable};
use ferrybus_saga::{Event, MissingInstance, SagaEndpointExt, StateMachine};
use ferrybus_sea_orm::NamingStyle;
use ferrybus_testing::{amqp_url, eventually, header_str, unique, Probe, Shape, TestSchema, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderSubmitted {
    order_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderItemAdded {
    order_id: Uuid,
}

ferrybus_saga::saga_states! {
    enum OrderStatus { Submitted }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct OrderState {
    #[serde(default)]
    item_count: i32,
}

/// The saga instance type of the .NET service.
const DOTNET_SAGA: &str = "Bookstore.Sagas.OrderState";

fn machine() -> StateMachine<OrderState, OrderStatus> {
    let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    let item_added = Event::<OrderItemAdded>::correlated_by(|m| m.order_id)
        .on_missing_instance(MissingInstance::Fault);
    StateMachine::<OrderState, OrderStatus>::new("OrderState")
        .dotnet_type(DOTNET_SAGA)
        .initially(|s| s.when(&submitted, |b| b.transition_to(OrderStatus::Submitted)))
        .during(OrderStatus::Submitted, |s| {
            s.when(&item_added, |b| b.then(|c| c.instance.item_count += 1))
        })
}

struct Fixture {
    tdb: TestSchema,
    probe: Probe,
    queue: String,
}

impl Fixture {
    async fn new() -> Self {
        let tdb = TestSchema::new(Shape::CanonicalFixture).await;
        // EF Core's saga map for OrderState on Npgsql (RowVersion is `xmin`, no column).
        tdb.exec(&format!(
            "CREATE TABLE \"{}\".\"OrderState\" (\
               \"CorrelationId\" uuid NOT NULL, \
               \"CurrentState\" character varying(64) NULL, \
               \"ItemCount\" integer NOT NULL, \
               CONSTRAINT \"PK_OrderState\" PRIMARY KEY (\"CorrelationId\"))",
            tdb.schema
        ))
        .await;
        let probe = Probe::connect(&amqp_url()).await;
        let queue = unique("order-state");
        probe.track_endpoint(&queue);
        Self { tdb, probe, queue }
    }

    async fn bus(&self) -> RabbitMqBus {
        let table = SagaTable::new("OrderState")
            .schema(&self.tdb.schema)
            .naming(NamingStyle::PascalCase)
            .column("item_count", ColumnType::Integer);
        let repository = PostgresSagaRepository::<OrderState>::new(table);
        let storage = self.tdb.storage().await.inbox_cleanup(false);
        RabbitMqBus::builder(&amqp_url())
            .storage(storage)
            .receive_endpoint(&self.queue, move |e| {
                e.bind_message_types(false)
                    .concurrency(1)
                    .inbox()
                    .saga(machine(), repository)
            })
            .start()
            .await
            .expect("the bus starts")
    }

    async fn item_count(&self, id: Uuid) -> Option<i32> {
        let row = self
            .tdb
            .db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT \"ItemCount\" FROM \"{}\".\"OrderState\" WHERE \"CorrelationId\" = $1",
                    self.tdb.schema
                ),
                [id.into()],
            ))
            .await
            .unwrap()?;
        Some(row.try_get("", "ItemCount").unwrap())
    }

    async fn wait_items(&self, id: Uuid, n: i32) {
        eventually(&format!("order {id} with {n} items"), WAIT, || async {
            (self.item_count(id).await == Some(n)).then_some(())
        })
        .await;
    }

    /// What the .NET instance's step commits for an `OrderItemAdded` it consumed, as
    /// MassTransit's EF Core outbox does (`EntityFrameworkOutboxContextFactory`: the inbox row
    /// inserted with `ReceiveCount` 0 then counted to 1, `Consumed` and `Delivered` set, in the
    /// saga's transaction).
    async fn dotnet_consumes_item(&self, order_id: Uuid, message_id: Uuid, consumer_id: Uuid) {
        let txn = self.tdb.db.begin().await.unwrap();
        let schema = &self.tdb.schema;
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "UPDATE \"{schema}\".\"OrderState\" SET \"ItemCount\" = \"ItemCount\" + 1 \
                 WHERE \"CorrelationId\" = $1"
            ),
            [order_id.into()],
        ))
        .await
        .unwrap();
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "INSERT INTO \"{schema}\".\"InboxState\" (\"MessageId\", \"ConsumerId\", \"LockId\", \
                 \"Received\", \"ReceiveCount\", \"Consumed\", \"Delivered\") \
                 VALUES ($1, $2, $3, now(), 1, now(), now())"
            ),
            [message_id.into(), consumer_id.into(), Uuid::new_v4().into()],
        ))
        .await
        .unwrap();
        txn.commit().await.unwrap();
    }

    async fn inbox_rows(&self, message_id: Uuid) -> Vec<Uuid> {
        let rows = self
            .tdb
            .db
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT \"ConsumerId\" FROM {} WHERE \"MessageId\" = $1",
                    self.tdb.t("inbox")
                ),
                [message_id.into()],
            ))
            .await
            .unwrap();
        rows.iter()
            .map(|r| r.try_get("", "ConsumerId").unwrap())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_dotnet_twin_consumed_is_not_applied_again() {
    let fixture = Fixture::new().await;
    // MassTransit's id for the .NET saga's consumer of OrderItemAdded on this queue, derived
    // here from the .NET names alone.
    let dotnet_id = ferrybus_core::message::consumer_id(
        DOTNET_SAGA,
        "Bookstore.Contracts.OrderItemAdded",
        &fixture.queue,
    );
    let address = format!("queue:{}", fixture.queue);
    let bus = fixture.bus().await;
    let order_id = Uuid::now_v7();
    bus.send(&address, &OrderSubmitted { order_id })
        .await
        .unwrap();
    fixture.wait_items(order_id, 0).await;

    // The .NET instance consumed the event; the broker redelivers it to the Rust instance.
    let event_id = Uuid::now_v7();
    fixture
        .dotnet_consumes_item(order_id, event_id, dotnet_id)
        .await;
    let item = OrderItemAdded { order_id };
    bus.send_with(&address, &item, SendOptions::new().message_id(event_id))
        .await
        .unwrap();
    // A new event behind it on the one-at-a-time endpoint is applied, so the redelivery was
    // handled before it.
    let next_id = bus.send(&address, &item).await.unwrap();
    fixture.wait_items(order_id, 2).await;

    assert_eq!(
        fixture.inbox_rows(event_id).await,
        [dotnet_id],
        "the redelivery found the .NET row and added none"
    );
    assert_eq!(
        fixture.inbox_rows(next_id).await,
        [dotnet_id],
        "the Rust instance keys its own rows as .NET does"
    );
    assert_eq!(fixture.item_count(order_id).await, Some(2));
    assert_eq!(
        fixture
            .probe
            .queue_count(&format!("{}_error", fixture.queue))
            .await
            .unwrap_or(0),
        0
    );

    // A fault names the .NET saga type as its consumer, as the .NET instance's faults do.
    bus.send(
        &address,
        &OrderItemAdded {
            order_id: Uuid::now_v7(),
        },
    )
    .await
    .unwrap();
    let faulted = fixture
        .probe
        .wait_get(&format!("{}_error", fixture.queue))
        .await;
    assert_eq!(
        header_str(&faulted, "MT-Fault-ConsumerType").as_deref(),
        Some(DOTNET_SAGA)
    );
    bus.stop().await;
    fixture.probe.cleanup().await;
}
