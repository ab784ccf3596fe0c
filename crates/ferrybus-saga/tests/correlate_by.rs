//! Correlation by a property other than the id (MassTransit's `CorrelateBy(x => x.OrderNumber,
//! …)` with `SelectId`) and `CurrentState` stored as an int (`InstanceState(x => x.CurrentState,
//! Submitted, Accepted)`), on PostgreSQL in a table shaped as EF Core maps such an instance.

use ferrybus_core::memory::TestHarness;
use ferrybus_core::storage::Storage;
use ferrybus_core::{Message, Publish, SendOptions};
use ferrybus_saga::postgres::{ColumnType, PostgresSagaRepository, SagaTable};
use ferrybus_saga::{
    Event, InMemorySagaRepository, MissingInstance, SagaEndpointExt, StateMachine,
};
use ferrybus_sea_orm::NamingStyle;
use ferrybus_testing::{wait_settled, Shape, TestSchema, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderSubmitted {
    order_number: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderAccepted {
    order_number: String,
}

ferrybus_saga::saga_states! {
    // Declared in another order than the machine numbers them.
    enum OrderStatus { Accepted, Submitted }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct OrderState {
    #[serde(default)]
    order_number: String,
}

fn machine(select_id: bool) -> StateMachine<OrderState, OrderStatus> {
    let mut submitted =
        Event::<OrderSubmitted>::correlated_by_property("order_number", |m| m.order_number.clone());
    if select_id {
        submitted = submitted.select_id(|_| Uuid::now_v7());
    }
    let accepted =
        Event::<OrderAccepted>::correlated_by_property("order_number", |m| m.order_number.clone())
            .on_missing_instance(MissingInstance::Fault);
    StateMachine::<OrderState, OrderStatus>::new("OrderState")
        .current_state_as_int([OrderStatus::Submitted, OrderStatus::Accepted])
        .initially(|s| {
            s.when(&submitted, |b| {
                b.then(|c| c.instance.order_number = c.message().order_number.clone())
                    .transition_to(OrderStatus::Submitted)
            })
        })
        .during(OrderStatus::Submitted, |s| {
            s.when(&accepted, |b| b.transition_to(OrderStatus::Accepted))
                .ignore(&submitted)
        })
}

/// `OrderState { Guid CorrelationId; int CurrentState; string OrderNumber }` as EF Core maps it
/// on Npgsql, with a unique index on the correlated property.
async fn table(tdb: &TestSchema) -> SagaTable {
    tdb.exec(&format!(
        "CREATE TABLE \"{s}\".\"OrderState\" (\
           \"CorrelationId\" uuid NOT NULL, \
           \"CurrentState\" integer NOT NULL, \
           \"OrderNumber\" text NULL, \
           CONSTRAINT \"PK_OrderState\" PRIMARY KEY (\"CorrelationId\")); \
         CREATE UNIQUE INDEX \"IX_OrderState_OrderNumber\" ON \"{s}\".\"OrderState\" (\"OrderNumber\")",
        s = tdb.schema
    ))
    .await;
    SagaTable::new("OrderState")
        .schema(&tdb.schema)
        .naming(NamingStyle::PascalCase)
        .int_state()
        .column("order_number", ColumnType::Text)
}

async fn harness(tdb: &TestSchema, table: SagaTable) -> TestHarness {
    let storage = tdb
        .storage()
        .await
        .outbox_delivery(false)
        .inbox_cleanup(false);
    storage.prepare().await.unwrap();
    let repository = PostgresSagaRepository::<OrderState>::new(table);
    TestHarness::builder()
        .storage(storage)
        .timeout(WAIT)
        .receive_endpoint("order-state", move |e| {
            e.concurrency(2).inbox().saga(machine(true), repository)
        })
        .start()
        .await
        .expect("the harness starts")
}

/// (CorrelationId, CurrentState) of the instances with `order_number`.
async fn rows(tdb: &TestSchema, order_number: &str) -> Vec<(Uuid, i32)> {
    tdb.db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "SELECT \"CorrelationId\", \"CurrentState\" FROM \"{}\".\"OrderState\" \
                 WHERE \"OrderNumber\" = $1",
                tdb.schema
            ),
            [order_number.into()],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.try_get("", "CorrelationId").unwrap(),
                r.try_get("", "CurrentState").unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn events_find_their_instance_by_order_number_and_store_the_state_as_an_int() {
    let tdb = TestSchema::new(Shape::CanonicalFixture).await;
    let harness = harness(&tdb, table(&tdb).await).await;

    let id = harness
        .publish(&OrderSubmitted {
            order_number: "A-1".into(),
        })
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    let created = rows(&tdb, "A-1").await;
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].1, 3, "Submitted is the first listed state: 3");

    // A second submit of the same number finds the instance (and is ignored in Submitted).
    let id = harness
        .publish(&OrderSubmitted {
            order_number: "A-1".into(),
        })
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(rows(&tdb, "A-1").await, created, "no second instance");

    let id = harness
        .publish(&OrderAccepted {
            order_number: "A-1".into(),
        })
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(rows(&tdb, "A-1").await, [(created[0].0, 4)], "Accepted: 4");

    // An event for no instance faults (OnMissingInstance(m => m.Fault())).
    let id = harness
        .publish(&OrderAccepted {
            order_number: "B-404".into(),
        })
        .await
        .unwrap();
    harness.faulted(id).await.unwrap();
    assert!(rows(&tdb, "B-404").await.is_empty());
    harness.stop().await;
}

#[tokio::test]
async fn an_instance_dotnet_stored_with_an_int_state_is_taken_over() {
    let tdb = TestSchema::new(Shape::CanonicalFixture).await;
    let table = table(&tdb).await;
    let dotnet_id = Uuid::now_v7();
    tdb.db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "INSERT INTO \"{}\".\"OrderState\" (\"CorrelationId\", \"CurrentState\", \"OrderNumber\") \
                 VALUES ($1, 3, 'N-7')",
                tdb.schema
            ),
            [dotnet_id.into()],
        ))
        .await
        .unwrap();
    let harness = harness(&tdb, table).await;
    let id = harness
        .publish(&OrderAccepted {
            order_number: "N-7".into(),
        })
        .await
        .unwrap();
    wait_settled(&harness, id, 1).await;
    assert_eq!(rows(&tdb, "N-7").await, [(dotnet_id, 4)]);
    harness.stop().await;
}

#[tokio::test]
async fn a_machine_with_int_states_on_a_text_column_faults_with_the_reason() {
    let tdb = TestSchema::new(Shape::Snake).await;
    let table = SagaTable::new("order_state")
        .schema(&tdb.schema)
        .column("order_number", ColumnType::Text);
    PostgresSagaRepository::<OrderState>::new(table.clone())
        .create_table(&tdb.db)
        .await
        .unwrap();
    let harness = harness(&tdb, table).await;
    let id = harness
        .publish(&OrderSubmitted {
            order_number: "T-1".into(),
        })
        .await
        .unwrap();
    harness.faulted(id).await.unwrap();
    let error = harness.broker().messages("order-state_error");
    let reason = error[0]
        .headers
        .get_str("MT-Fault-Message")
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("SagaTable::int_state"), "{reason}");
    harness.stop().await;
}

#[tokio::test]
async fn an_initial_event_without_select_id_takes_the_envelope_correlation_id_or_faults() {
    let repository = InMemorySagaRepository::<OrderState>::new();
    let harness = TestHarness::builder()
        .timeout(WAIT)
        .receive_endpoint("order-state", {
            let repository = repository.clone();
            move |e| e.saga(machine(false), repository)
        })
        .start()
        .await
        .unwrap();
    let correlation_id = Uuid::now_v7();
    let id = harness
        .publish_with(
            &OrderSubmitted {
                order_number: "C-1".into(),
            },
            SendOptions::new().correlation_id(correlation_id),
        )
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(repository.state(correlation_id).as_deref(), Some("3"));

    let id = harness
        .publish(&OrderSubmitted {
            order_number: "C-2".into(),
        })
        .await
        .unwrap();
    harness.faulted(id).await.unwrap();
    let error = harness.broker().messages("order-state_error");
    let reason = error[0]
        .headers
        .get_str("MT-Fault-Message")
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.contains("the correlationId was not present") && reason.contains("select_id"),
        "{reason}"
    );
    assert_eq!(repository.len(), 1);
    harness.stop().await;
}

#[tokio::test]
async fn a_numbered_state_read_by_a_machine_of_names_faults_with_the_fix() {
    let accepted =
        Event::<OrderAccepted>::correlated_by_property("order_number", |m| m.order_number.clone());
    let by_name = StateMachine::<OrderState, OrderStatus>::new("OrderState")
        .during(OrderStatus::Submitted, |s| {
            s.when(&accepted, |b| b.transition_to(OrderStatus::Accepted))
        });
    let repository = InMemorySagaRepository::<OrderState>::new();
    repository.insert(
        Uuid::now_v7(),
        3,
        OrderState {
            order_number: "N-1".into(),
        },
    );
    let harness = TestHarness::builder()
        .timeout(WAIT)
        .receive_endpoint("order-state", {
            let repository = repository.clone();
            move |e| e.saga(by_name, repository)
        })
        .start()
        .await
        .unwrap();
    let id = harness
        .publish(&OrderAccepted {
            order_number: "N-1".into(),
        })
        .await
        .unwrap();
    harness.faulted(id).await.unwrap();
    let error = harness.broker().messages("order-state_error");
    let reason = error[0]
        .headers
        .get_str("MT-Fault-Message")
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("current_state_as_int"), "{reason}");
    harness.stop().await;
}
