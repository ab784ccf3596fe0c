//! The saga Request activity on RabbitMQ (TTL queues for the timeout) and PostgreSQL: a request
//! answered, one whose service faults, and one nobody answers, each handled as its event; the
//! pending request id is kept in the instance row and cleared by the response.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Message, Publish};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_saga::postgres::{ColumnType, PostgresSagaRepository, SagaTable};
use ferrybus_saga::{
    Event, Request, RequestTimeoutExpired, SagaEndpointExt, StateMachine, REQUEST_ACCEPT_TYPE,
};
use ferrybus_testing::{amqp_url, eventually, unique, Probe, Shape, TestSchema, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.SagaRequests")]
struct OrderSubmitted {
    order_id: Uuid,
    /// What the payment service does: `pay`, `fail` or `ignore`.
    outcome: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.SagaRequests")]
struct ProcessPayment {
    order_id: Uuid,
    outcome: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Ferrybus.Tests.SagaRequests")]
struct PaymentProcessed {
    order_id: Uuid,
}

ferrybus_saga::saga_states! {
    enum OrderStatus { AwaitingPayment, Paid, PaymentFailed, TimedOut }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct OrderState {
    #[serde(default)]
    payment_request_id: Option<Uuid>,
}

const TIMEOUT: Duration = Duration::from_millis(1500);

fn machine(service: &str) -> StateMachine<OrderState, OrderStatus> {
    let submitted = Event::<OrderSubmitted>::correlated_by(|m| m.order_id);
    let payment =
        Request::<OrderState, ProcessPayment, PaymentProcessed>::new("payment_request_id", |s| {
            &mut s.payment_request_id
        })
        .service_address(format!("queue:{service}"))
        .timeout(TIMEOUT)
        .clear_request_id_on_faulted();
    StateMachine::<OrderState, OrderStatus>::new("OrderState")
        .request(&payment)
        .initially(|s| {
            s.when(&submitted, |b| {
                b.request(&payment, |c| ProcessPayment {
                    order_id: c.correlation_id(),
                    outcome: c.message().outcome.clone(),
                })
                .transition_to(OrderStatus::AwaitingPayment)
            })
        })
        .during(OrderStatus::AwaitingPayment, |s| {
            s.when(&payment.completed, |b| b.transition_to(OrderStatus::Paid))
                .when(&payment.faulted, |b| {
                    b.transition_to(OrderStatus::PaymentFailed)
                })
                .when(&payment.timeout_expired, |b| {
                    b.transition_to(OrderStatus::TimedOut)
                })
        })
}

/// What the payment service saw of a request: its response address and accepted types.
#[derive(Clone, Debug)]
struct Seen {
    response_address: Option<String>,
    request_id: Option<Uuid>,
    accept: Option<serde_json::Value>,
}

struct Fixture {
    tdb: TestSchema,
    probe: Probe,
    queue: String,
    service: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Fixture {
    async fn new() -> Self {
        let tdb = TestSchema::new(Shape::Snake).await;
        let probe = Probe::connect(&amqp_url()).await;
        let queue = unique("saga-request");
        let service = unique("payments");
        probe.track_endpoint(&queue);
        probe.track_endpoint(&service);
        probe.track(&[&format!("{queue}_delay_{}", TIMEOUT.as_millis())], &[]);
        Self {
            tdb,
            probe,
            queue,
            service,
            seen: Arc::default(),
        }
    }

    async fn bus(&self) -> RabbitMqBus {
        let table = SagaTable::new("order_state")
            .schema(&self.tdb.schema)
            .column("payment_request_id", ColumnType::Uuid);
        let repository = PostgresSagaRepository::<OrderState>::new(table);
        repository.create_table(&self.tdb.db).await.unwrap();
        let storage = self.tdb.storage().await.inbox_cleanup(false);
        let machine = machine(&self.service);
        let seen = self.seen.clone();
        let payments = consumer_fn(
            "PaymentConsumer",
            move |ctx: ConsumeContext<ProcessPayment>| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(Seen {
                        response_address: ctx.envelope().response_address.clone(),
                        request_id: ctx.request_id(),
                        accept: ctx.headers().get(REQUEST_ACCEPT_TYPE).cloned(),
                    });
                    match ctx.message().outcome.as_str() {
                        "pay" => {
                            ctx.respond(&PaymentProcessed {
                                order_id: ctx.message().order_id,
                            })
                            .await?;
                            Ok(())
                        }
                        "fail" => Err(ConsumeError::permanent("card declined")),
                        _ => Ok(()),
                    }
                }
            },
        );
        RabbitMqBus::builder(&amqp_url())
            .storage(storage)
            .receive_endpoint(&self.queue, move |e| {
                e.bind_message_types(false)
                    .concurrency(4)
                    .inbox()
                    .saga(machine, repository)
            })
            .receive_endpoint(&self.service, move |e| {
                e.bind_message_types(false).consumer(payments)
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
                    "SELECT current_state, payment_request_id FROM \"{}\".order_state \
                     WHERE correlation_id = $1",
                    self.tdb.schema
                ),
                [id.into()],
            ))
            .await
            .unwrap()?;
        Some((
            row.try_get("", "current_state").unwrap(),
            row.try_get("", "payment_request_id").unwrap(),
        ))
    }

    async fn wait_state(&self, id: Uuid, state: &str) -> Option<Uuid> {
        eventually(&format!("order {id} in {state}"), WAIT, || async {
            self.instance(id)
                .await
                .filter(|(s, _)| s == state)
                .map(|(_, request_id)| request_id)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_request_completes_faults_and_times_out() {
    let fixture = Fixture::new().await;
    let bus = fixture.bus().await;
    let address = format!("queue:{}", fixture.queue);
    let (paid, failed, ignored) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    for (order_id, outcome) in [(paid, "pay"), (failed, "fail"), (ignored, "ignore")] {
        bus.send(
            &address,
            &OrderSubmitted {
                order_id,
                outcome: outcome.into(),
            },
        )
        .await
        .unwrap();
    }

    assert_eq!(
        fixture.wait_state(paid, "Paid").await,
        None,
        "the response cleared the pending request id"
    );
    assert_eq!(fixture.wait_state(failed, "PaymentFailed").await, None);
    let pending = fixture.wait_state(ignored, "TimedOut").await;
    assert!(pending.is_some(), "a timed-out request keeps its id");

    // Every request carried its id, the saga's endpoint as response address and the response
    // type; the timed-out one is the id the instance kept.
    let seen = fixture.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for s in &seen {
        assert!(
            s.response_address
                .as_deref()
                .is_some_and(|a| a.ends_with(&fixture.queue)),
            "{s:?}"
        );
        assert_eq!(
            s.accept,
            Some(serde_json::json!([
                "urn:message:Ferrybus.Tests.SagaRequests:PaymentProcessed"
            ])),
        );
    }
    assert!(seen.iter().any(|s| s.request_id == pending));

    // The timeouts of the answered requests arrive too, find no instance waiting for them and
    // change nothing.
    let timeouts = fixture.tdb.t("inbox");
    let consumer_id = machine(&fixture.service)
        .consumer_id::<RequestTimeoutExpired<ProcessPayment>>(&fixture.queue);
    let consumed =
        format!("SELECT count(*) FROM {timeouts} WHERE consumer_id = $1 AND consumed IS NOT NULL");
    eventually("the three timeouts to be consumed", WAIT, || async {
        (fixture.tdb.count(&consumed, vec![consumer_id.into()]).await == 3).then_some(())
    })
    .await;
    assert_eq!(
        fixture.instance(paid).await,
        Some(("Paid".to_owned(), None))
    );
    assert_eq!(
        fixture.instance(failed).await,
        Some(("PaymentFailed".to_owned(), None))
    );
    assert_eq!(
        fixture
            .probe
            .queue_count(&format!("{}_error", fixture.queue))
            .await
            .unwrap_or(0),
        0,
        "no saga message faulted"
    );
    bus.stop().await;
    fixture.probe.cleanup().await;
}
