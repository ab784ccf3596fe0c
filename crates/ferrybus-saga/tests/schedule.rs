//! Scheduled saga events on RabbitMQ (no delayed-message plugin: TTL queues) and PostgreSQL:
//! a timeout scheduled before the service stops fires after it starts again; an unscheduled
//! timeout is ignored when it arrives.

use std::time::Duration;

use ferrybus_core::{Message, Publish};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_saga::postgres::{ColumnType, PostgresSagaRepository, SagaTable};
use ferrybus_saga::{Event, SagaEndpointExt, Schedule, StateMachine};
use ferrybus_testing::TestSchema;
use ferrybus_testing::{amqp_url, eventually, unique, Probe, Shape, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.Scheduling")]
struct OrderSubmitted {
    order_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.Scheduling")]
struct OrderShipped {
    order_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.Scheduling")]
struct PaymentTimeout {
    order_id: Uuid,
}

ferrybus_saga::saga_states! {
    enum OrderStatus { Submitted, TimedOut, Shipped }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct OrderState {
    #[serde(default)]
    timeout_token: Option<Uuid>,
}

fn machine(delay: Duration) -> StateMachine<OrderState, OrderStatus> {
    let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    let shipped = Event::<OrderShipped>::correlated_by(|m| m.order_id);
    let timeout = Schedule::<OrderState, PaymentTimeout>::new(
        Event::correlated_by(|m: &PaymentTimeout| m.order_id),
        delay,
        |s| &mut s.timeout_token,
    );
    StateMachine::<OrderState, OrderStatus>::new("OrderState")
        .initially(|s| {
            s.when(&submitted, |b| {
                b.schedule(&timeout, |c| PaymentTimeout {
                    order_id: c.correlation_id(),
                })
                .transition_to(OrderStatus::Submitted)
            })
        })
        .during(OrderStatus::Submitted, |s| {
            s.when_scheduled(&timeout, |b| b.transition_to(OrderStatus::TimedOut))
                .when(&shipped, |b| {
                    b.unschedule(&timeout).transition_to(OrderStatus::Shipped)
                })
        })
}

struct Fixture {
    tdb: TestSchema,
    probe: Probe,
    queue: String,
    table: SagaTable,
}

impl Fixture {
    async fn new(delays_ms: &[u64]) -> Self {
        let tdb = TestSchema::new(Shape::Snake).await;
        let probe = Probe::connect(&amqp_url()).await;
        let queue = unique("saga-schedule");
        probe.track_endpoint(&queue);
        for ms in delays_ms {
            probe.track(&[&format!("{queue}_delay_{ms}")], &[]);
        }
        let table = SagaTable::new("order_state")
            .schema(&tdb.schema)
            .column("timeout_token", ColumnType::Uuid);
        Self {
            tdb,
            probe,
            queue,
            table,
        }
    }

    async fn bus(&self, delay: Duration) -> RabbitMqBus {
        let repository = PostgresSagaRepository::<OrderState>::new(self.table.clone());
        repository.create_table(&self.tdb.db).await.unwrap();
        let storage = self.tdb.storage().await.inbox_cleanup(false);
        RabbitMqBus::builder(&amqp_url())
            .storage(storage)
            .receive_endpoint(&self.queue, move |e| {
                e.bind_message_types(false)
                    .concurrency(4)
                    .inbox()
                    .saga(machine(delay), repository)
            })
            .start()
            .await
            .expect("the bus starts")
    }

    async fn instance(&self, id: Uuid) -> Option<(String, Option<Uuid>)> {
        let row = self
            .tdb
            .db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT current_state, timeout_token FROM \"{}\".order_state WHERE correlation_id = $1",
                    self.tdb.schema
                ),
                [id.into()],
            ))
            .await
            .unwrap()?;
        Some((
            row.try_get("", "current_state").unwrap(),
            row.try_get("", "timeout_token").unwrap(),
        ))
    }

    async fn wait_state(&self, id: Uuid, state: &str) -> Option<Uuid> {
        eventually(&format!("order {id} in {state}"), WAIT, || async {
            self.instance(id)
                .await
                .filter(|(s, _)| s == state)
                .map(|(_, token)| token)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_timeout_fires_after_a_restart() {
    let delay = Duration::from_secs(5);
    let fixture = Fixture::new(&[5000]).await;
    let address = format!("queue:{}", fixture.queue);
    let order_id = Uuid::now_v7();

    let bus = fixture.bus(delay).await;
    bus.send(&address, &OrderSubmitted { order_id })
        .await
        .unwrap();
    let token = fixture.wait_state(order_id, "Submitted").await;
    assert!(
        token.is_some(),
        "the token of the scheduled timeout is kept"
    );
    bus.stop().await;
    // Nobody consumes now; the timeout waits in the broker (a TTL queue), not in the process.
    assert_eq!(
        fixture.instance(order_id).await,
        Some(("Submitted".to_owned(), token))
    );

    let restarted = fixture.bus(delay).await;
    let token = fixture.wait_state(order_id, "TimedOut").await;
    assert_eq!(token, None, "the handled timeout's token is cleared");
    restarted.stop().await;
    fixture.probe.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unscheduled_timeout_is_ignored_when_it_arrives() {
    let delay = Duration::from_millis(1500);
    let fixture = Fixture::new(&[1500]).await;
    let address = format!("queue:{}", fixture.queue);
    let order_id = Uuid::now_v7();
    let bus = fixture.bus(delay).await;
    bus.send(&address, &OrderSubmitted { order_id })
        .await
        .unwrap();
    let token = fixture
        .wait_state(order_id, "Submitted")
        .await
        .expect("a token");
    bus.send(&address, &OrderShipped { order_id })
        .await
        .unwrap();
    assert_eq!(fixture.wait_state(order_id, "Shipped").await, None);

    // The timeout (its MessageId is the token) arrives, is consumed, and changes nothing.
    let consumed = format!(
        "SELECT count(*) FROM {} WHERE message_id = $1 AND consumed IS NOT NULL",
        fixture.tdb.t("inbox")
    );
    eventually("the stale timeout to be consumed", WAIT, || async {
        (fixture.tdb.count(&consumed, vec![token.into()]).await == 1).then_some(())
    })
    .await;
    assert_eq!(
        fixture.instance(order_id).await,
        Some(("Shipped".to_owned(), None))
    );
    assert_eq!(
        fixture
            .probe
            .queue_count(&format!("{}_error", fixture.queue))
            .await
            .unwrap_or(0),
        0
    );
    bus.stop().await;
    fixture.probe.cleanup().await;
}
