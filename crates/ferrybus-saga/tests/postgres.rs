//! State machine sagas on PostgreSQL: instance rows written in the inbox transaction, on a
//! snake_case table with a version column and on a .NET (EF Core, PascalCase, `xmin`) table;
//! duplicates apply once, a failed step publishes nothing, concurrent events on one instance
//! lose no update (optimistic and pessimistic), an instance .NET left mid-way is taken over.

use ferrybus_core::memory::TestHarness;
use ferrybus_core::storage::Storage;
use ferrybus_core::{ConsumeError, Message, Publish, SendOptions, SettlementKind};
use ferrybus_saga::postgres::{ColumnType, Concurrency, PostgresSagaRepository, SagaTable};
use ferrybus_saga::{Event, SagaEndpointExt, StateMachine};
use ferrybus_sea_orm::NamingStyle;
use ferrybus_testing::{settlements, wait_settled, TestSchema};
use ferrybus_testing::{Shape, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
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
    sku: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderShipped {
    order_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderCompleted {
    order_id: Uuid,
    invoice_id: Option<Uuid>,
    item_count: i32,
}

ferrybus_saga::saga_states! {
    enum OrderStatus { Submitted, Invoiced, Completed }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct OrderState {
    #[serde(default)]
    item_count: i32,
    #[serde(default)]
    invoice_id: Option<Uuid>,
}

const QUEUE: &str = "order-state";

fn machine() -> StateMachine<OrderState, OrderStatus> {
    let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    let item_added = Event::<OrderItemAdded>::correlated_by(|m| m.order_id);
    let shipped = Event::<OrderShipped>::correlated_by(|m| m.order_id);
    StateMachine::<OrderState, OrderStatus>::new("OrderState")
        .initially(|s| s.when(&submitted, |b| b.transition_to(OrderStatus::Submitted)))
        .during(OrderStatus::Submitted, |s| {
            s.when(&item_added, |b| {
                b.then(|c| c.instance.item_count += 1)
                    .publish(|c| OrderCompleted {
                        order_id: c.correlation_id(),
                        invoice_id: None,
                        item_count: -1,
                    })
                    .try_then(|c| match c.message().sku.as_str() {
                        "fail" => Err(ConsumeError::permanent("out of stock")),
                        _ => Ok(()),
                    })
            })
            .ignore(&submitted)
        })
        .during(OrderStatus::Invoiced, |s| {
            s.when(&shipped, |b| {
                b.transition_to(OrderStatus::Completed)
                    .publish(|c| OrderCompleted {
                        order_id: c.correlation_id(),
                        invoice_id: c.instance.invoice_id,
                        item_count: c.instance.item_count,
                    })
                    .finalize()
            })
        })
        .set_completed_when_finalized()
}

fn snake_table(tdb: &TestSchema) -> SagaTable {
    SagaTable::new("order_state")
        .schema(&tdb.schema)
        .column("item_count", ColumnType::Integer)
        .column("invoice_id", ColumnType::Uuid)
        .version_column("version")
}

/// The table EF Core's saga map creates for `OrderState` on Npgsql with its default naming: a
/// `uint RowVersion` mapped with `IsRowVersion()` is the system column `xmin`, no column.
async fn dotnet_table(tdb: &TestSchema) -> SagaTable {
    tdb.exec(&format!(
        "CREATE TABLE \"{}\".\"OrderState\" (\
           \"CorrelationId\" uuid NOT NULL, \
           \"CurrentState\" character varying(64) NULL, \
           \"ItemCount\" integer NOT NULL, \
           \"InvoiceId\" uuid NULL, \
           CONSTRAINT \"PK_OrderState\" PRIMARY KEY (\"CorrelationId\"))",
        tdb.schema
    ))
    .await;
    SagaTable::new("OrderState")
        .schema(&tdb.schema)
        .naming(NamingStyle::PascalCase)
        .column("item_count", ColumnType::Integer)
        .column("invoice_id", ColumnType::Uuid)
}

async fn harness(
    tdb: &TestSchema,
    repository: PostgresSagaRepository<OrderState>,
    concurrency: usize,
) -> TestHarness {
    let storage = tdb
        .storage()
        .await
        .outbox_delivery(false)
        .inbox_cleanup(false);
    storage.prepare().await.unwrap();
    repository.create_table(&tdb.db).await.unwrap();
    TestHarness::builder()
        .storage(storage)
        .timeout(WAIT)
        .receive_endpoint(QUEUE, move |e| {
            e.concurrency(concurrency)
                .inbox()
                .saga(machine(), repository)
        })
        .start()
        .await
        .expect("the harness starts")
}

async fn row(tdb: &TestSchema, table: &SagaTable, id: Uuid) -> Option<(String, i32)> {
    let sql = format!(
        "SELECT \"{}\" AS state, \"{}\" AS items FROM \"{}\".\"{}\" WHERE \"{}\" = $1",
        table.state_column(),
        table.column_name("item_count").unwrap(),
        tdb.schema,
        if table.key_column() == "CorrelationId" {
            "OrderState"
        } else {
            "order_state"
        },
        table.key_column(),
    );
    let row = tdb
        .db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            [id.into()],
        ))
        .await
        .unwrap()?;
    Some((
        row.try_get("", "state").unwrap(),
        row.try_get("", "items").unwrap(),
    ))
}

async fn submit(harness: &TestHarness, order_id: Uuid) {
    let id = harness.publish(&OrderSubmitted { order_id }).await.unwrap();
    wait_settled(harness, id, 1).await;
}

#[tokio::test]
async fn a_duplicated_event_applies_once() {
    let tdb = TestSchema::new(Shape::Snake).await;
    let table = snake_table(&tdb);
    let harness = harness(&tdb, PostgresSagaRepository::new(table.clone()), 4).await;
    let order_id = Uuid::now_v7();
    submit(&harness, order_id).await;
    let item = OrderItemAdded {
        order_id,
        sku: "a".into(),
    };
    let id = harness.publish(&item).await.unwrap();
    wait_settled(&harness, id, 1).await;
    harness
        .publish_with(&item, SendOptions::new().message_id(id))
        .await
        .unwrap();
    wait_settled(&harness, id, 2).await;
    assert_eq!(
        settlements(&harness, id),
        [SettlementKind::Ack, SettlementKind::Duplicate]
    );
    assert_eq!(
        row(&tdb, &table, order_id).await,
        Some(("Submitted".into(), 1))
    );
    assert_eq!(
        harness.sent_now::<OrderCompleted>().len(),
        1,
        "published once"
    );
    harness.stop().await;
}

#[tokio::test]
async fn a_failed_step_saves_and_publishes_nothing() {
    let tdb = TestSchema::new(Shape::Snake).await;
    let table = snake_table(&tdb);
    let harness = harness(&tdb, PostgresSagaRepository::new(table.clone()), 4).await;
    let order_id = Uuid::now_v7();
    submit(&harness, order_id).await;
    let id = harness
        .publish(&OrderItemAdded {
            order_id,
            sku: "fail".into(),
        })
        .await
        .unwrap();
    harness.faulted(id).await.unwrap();
    assert_eq!(
        row(&tdb, &table, order_id).await,
        Some(("Submitted".into(), 0))
    );
    assert!(harness.sent_now::<OrderCompleted>().is_empty());
    assert_eq!(tdb.rows("message").await, 0, "no outbox row left");
    harness.stop().await;
}

async fn concurrent_items_lose_no_update(concurrency: Concurrency, dotnet: bool) {
    let tdb = TestSchema::new(if dotnet {
        Shape::CanonicalFixture
    } else {
        Shape::Snake
    })
    .await;
    let table = if dotnet {
        dotnet_table(&tdb).await
    } else {
        snake_table(&tdb)
    };
    let repository = PostgresSagaRepository::new(table.clone()).concurrency(concurrency);
    let harness = harness(&tdb, repository, 8).await;
    let order_id = Uuid::now_v7();
    submit(&harness, order_id).await;
    let mut ids = Vec::new();
    for n in 0..120 {
        let item = OrderItemAdded {
            order_id,
            sku: format!("sku-{n}"),
        };
        ids.push(harness.publish(&item).await.unwrap());
    }
    for id in &ids {
        wait_settled(&harness, *id, 1).await;
    }
    assert_eq!(
        row(&tdb, &table, order_id).await,
        Some(("Submitted".into(), 120))
    );
    assert_eq!(harness.sent_now::<OrderCompleted>().len(), 120);
    harness.stop().await;
}

#[tokio::test]
async fn optimistic_concurrency_on_a_version_column_loses_no_update() {
    concurrent_items_lose_no_update(Concurrency::Optimistic, false).await;
}

#[tokio::test]
async fn optimistic_concurrency_on_xmin_loses_no_update() {
    concurrent_items_lose_no_update(Concurrency::Optimistic, true).await;
}

#[tokio::test]
async fn pessimistic_concurrency_loses_no_update() {
    concurrent_items_lose_no_update(Concurrency::Pessimistic, false).await;
    concurrent_items_lose_no_update(Concurrency::Pessimistic, true).await;
}

#[tokio::test]
async fn an_instance_dotnet_left_mid_way_is_taken_over() {
    let tdb = TestSchema::new(Shape::CanonicalFixture).await;
    let table = dotnet_table(&tdb).await;
    let order_id = Uuid::now_v7();
    let invoice_id = Uuid::now_v7();
    tdb.db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "INSERT INTO \"{}\".\"OrderState\" (\"CorrelationId\", \"CurrentState\", \"ItemCount\", \"InvoiceId\") \
                 VALUES ($1, 'Invoiced', 5, $2)",
                tdb.schema
            ),
            [order_id.into(), invoice_id.into()],
        ))
        .await
        .unwrap();
    let harness = harness(&tdb, PostgresSagaRepository::new(table.clone()), 4).await;
    let id = harness.publish(&OrderShipped { order_id }).await.unwrap();
    wait_settled(&harness, id, 1).await;
    let completed: OrderCompleted = harness
        .sent::<OrderCompleted>()
        .await
        .unwrap()
        .message
        .bind()
        .unwrap();
    assert_eq!(completed.item_count, 5);
    assert_eq!(completed.invoice_id, Some(invoice_id));
    assert_eq!(
        row(&tdb, &table, order_id).await,
        None,
        "completed: deleted"
    );
    harness.stop().await;
}

#[tokio::test]
async fn a_saga_endpoint_without_the_inbox_faults_with_the_reason() {
    let tdb = TestSchema::new(Shape::Snake).await;
    let table = snake_table(&tdb);
    let repository = PostgresSagaRepository::new(table);
    repository.create_table(&tdb.db).await.unwrap();
    let harness = TestHarness::builder()
        .storage(
            tdb.storage()
                .await
                .outbox_delivery(false)
                .inbox_cleanup(false),
        )
        .timeout(WAIT)
        .receive_endpoint(QUEUE, move |e| e.saga(machine(), repository))
        .start()
        .await
        .unwrap();
    let id = harness
        .publish(&OrderSubmitted {
            order_id: Uuid::now_v7(),
        })
        .await
        .unwrap();
    harness.faulted(id).await.unwrap();
    let error = harness.broker().messages(&format!("{QUEUE}_error"));
    let reason = error[0]
        .headers
        .get_str("MT-Fault-Message")
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains(".inbox()"), "{reason}");
    harness.stop().await;
}
