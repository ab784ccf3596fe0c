//! The in-memory transport end to end: consumers run, retries retry, faults reach the error queue
//! with a published `Fault<T>`, unknown types reach the skipped queue.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrybus_core::consume::ConsumeOutcome;
use ferrybus_core::endpoint::BoxEndpointService;
use ferrybus_core::memory::{StoredMessage, TestHarness};
use ferrybus_core::{
    consumer_fn, ConsumeContext, ConsumeError, Consumer, Delivery, Envelope, Fault, Message,
    Publish, ReceiveFault, RetryPolicy, SendOptions, SettlementKind,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts", implements = ["Bookstore.Contracts:IOrderEvent"])]
struct OrderPlaced {
    order_id: Uuid,
    total: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct IOrderEvent {
    order_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct InvoiceCreated {
    order_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(namespace = "Elsewhere")]
struct Unrelated {}

fn order() -> OrderPlaced {
    OrderPlaced {
        order_id: Uuid::now_v7(),
        total: "12.00".into(),
    }
}

/// Counts attempts and fails the first `failures` of them.
struct Flaky {
    attempts: Arc<AtomicU32>,
    failures: u32,
}

impl Consumer<OrderPlaced> for Flaky {
    async fn consume(&self, _ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst);
        if attempt < self.failures {
            return Err(ConsumeError::handler(format!(
                "payment gateway down (attempt {attempt})"
            )));
        }
        Ok(())
    }
}

fn flaky(failures: u32) -> (Flaky, Arc<AtomicU32>) {
    let attempts = Arc::new(AtomicU32::new(0));
    (
        Flaky {
            attempts: attempts.clone(),
            failures,
        },
        attempts,
    )
}

#[tokio::test]
async fn a_consumer_runs_and_sees_the_envelope() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.consumer(consumer_fn(
                "InvoiceConsumer",
                move |ctx: ConsumeContext<OrderPlaced>| {
                    let record = record.clone();
                    async move {
                        record.lock().unwrap().push((
                            ctx.message_id(),
                            ctx.message().total.clone(),
                            ctx.headers().get_str("Tenant").map(str::to_owned),
                        ));
                        Ok(())
                    }
                },
            ))
        })
        .start()
        .await
        .unwrap();
    let id = harness
        .publish_with(&order(), SendOptions::new().header("Tenant", "acme"))
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [(Some(id), "12.00".to_owned(), Some("acme".to_owned()))]
    );
    harness.stop().await;
}

#[tokio::test]
async fn the_retry_policy_retries_until_the_consumer_succeeds() {
    let (consumer, attempts) = flaky(2);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.retry(RetryPolicy::immediate(2)).consumer(consumer)
        })
        .start()
        .await
        .unwrap();
    let id = harness.publish(&order()).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert!(harness.broker().messages("billing_error").is_empty());
    harness.stop().await;
}

#[tokio::test]
async fn a_final_failure_moves_to_the_error_queue_and_publishes_a_fault() {
    let (consumer, attempts) = flaky(u32::MAX);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.retry(RetryPolicy::intervals([Duration::from_millis(5)]))
                .consumer(consumer)
        })
        .start()
        .await
        .unwrap();
    let id = harness.publish(&order()).await.unwrap();
    assert_eq!(harness.faulted(id).await.unwrap(), "billing");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);

    let errors = harness.broker().messages("billing_error");
    assert_eq!(errors.len(), 1);
    let moved = &errors[0];
    assert_eq!(moved.message_id.as_deref(), Some(id.to_string().as_str()));
    let h = &moved.headers;
    assert_eq!(h.get_str("MT-Reason"), Some("fault"));
    assert_eq!(
        h.get_str("MT-Fault-Message"),
        Some("payment gateway down (attempt 1)")
    );
    assert_eq!(h.get_str("MT-Fault-ConsumerType"), Some("in_memory.Flaky"));
    assert_eq!(
        h.get_str("MT-Fault-MessageType"),
        Some("Bookstore.Contracts.OrderPlaced")
    );
    assert_eq!(
        h.get_str("MT-Fault-InputAddress"),
        Some("loopback://localhost/billing")
    );
    assert_eq!(h.get_i64("MT-Fault-RetryCount"), Some(1));
    assert!(h.get_str("MT-Host-ProcessId").is_some());
    // The original body is moved unchanged.
    assert_eq!(
        Envelope::from_slice(&moved.body).unwrap().message_id,
        Some(id)
    );

    let fault = harness.sent::<Fault<OrderPlaced>>().await.unwrap();
    assert_eq!(
        fault.message_type,
        [
            "urn:message:MassTransit:Fault[[Bookstore.Contracts:OrderPlaced]]",
            "urn:message:MassTransit:Fault[[Bookstore.Contracts:IOrderEvent]]",
            "urn:message:MassTransit:Fault",
        ]
    );
    assert_eq!(
        fault.destination_address.as_deref(),
        Some("loopback://localhost/MassTransit:Fault--Bookstore.Contracts:OrderPlaced--")
    );
    let payload: Fault<OrderPlaced> = fault.message.bind().unwrap();
    assert_eq!(payload.faulted_message_id, Some(id));
    assert_eq!(
        payload.exceptions[0].message.as_deref(),
        Some("payment gateway down (attempt 1)")
    );
    assert_eq!(
        payload.fault_message_types[0],
        "urn:message:Bookstore.Contracts:OrderPlaced"
    );
    harness.stop().await;
}

#[tokio::test]
async fn faults_go_to_the_fault_address_when_there_is_one() {
    let (consumer, _) = flaky(u32::MAX);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| e.consumer(consumer))
        .receive_endpoint("fault-watch", |e| e)
        .start()
        .await
        .unwrap();
    let id = harness
        .publish_with(&order(), SendOptions::new().fault_address("queue:faults"))
        .await
        .unwrap();
    harness.faulted(id).await.unwrap();
    let fault = harness.sent::<Fault<OrderPlaced>>().await.unwrap();
    assert_eq!(
        fault.destination_address.as_deref(),
        Some("loopback://localhost/faults?bind=true")
    );
    assert_eq!(harness.broker().messages("faults").len(), 1);
    harness.stop().await;
}

#[tokio::test]
async fn an_unknown_message_type_goes_to_the_skipped_queue() {
    let (consumer, attempts) = flaky(0);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| e.consumer(consumer))
        .start()
        .await
        .unwrap();
    let id = harness.send("queue:billing", &Unrelated {}).await.unwrap();
    harness.skipped(&id.to_string()).await.unwrap();
    let skipped = harness.broker().messages("billing_skipped");
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].headers.get_str("MT-Reason"), Some("dead-letter"));
    assert!(skipped[0].headers.get_str("MT-Host-MachineName").is_some());
    assert_eq!(attempts.load(Ordering::SeqCst), 0);
    harness.stop().await;
}

#[tokio::test]
async fn a_body_that_is_not_an_envelope_goes_to_the_error_queue_with_a_receive_fault() {
    let (consumer, _) = flaky(0);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| e.consumer(consumer))
        .start()
        .await
        .unwrap();
    for (id, body) in [
        ("bad-json", &b"{not json"[..]),
        (
            "bad-id",
            &br#"{"messageId": "nope", "messageType": [], "message": {}}"#[..],
        ),
        (
            "no-message",
            &br#"{"messageId": "181c0000-6393-3630-36a4-08daf4e7c6da"}"#[..],
        ),
    ] {
        harness.publish_raw(
            "billing",
            StoredMessage {
                body: body.into(),
                message_id: Some(id.to_owned()),
                ..StoredMessage::default()
            },
        );
        harness.faulted_raw(id).await.unwrap();
    }
    let errors = harness.broker().messages("billing_error");
    assert_eq!(errors.len(), 3);
    assert!(errors[1]
        .headers
        .get_str("MT-Fault-Message")
        .unwrap()
        .contains("messageId"));
    assert!(errors
        .iter()
        .all(|m| m.headers.get_str("MT-Reason") == Some("fault")));
    harness.sent::<ReceiveFault>().await.unwrap();
    assert_eq!(harness.sent_now::<ReceiveFault>().len(), 3);
    harness.stop().await;
}

#[tokio::test]
async fn every_consumer_of_any_advertised_type_runs() {
    let counts = Arc::new(AtomicU32::new(0));
    let (c1, c2) = (counts.clone(), counts.clone());
    let harness = TestHarness::builder()
        .receive_endpoint("orders", |e| {
            e.consumer(consumer_fn(
                "Concrete",
                move |_ctx: ConsumeContext<OrderPlaced>| {
                    let c = c1.clone();
                    async move {
                        c.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    }
                },
            ))
            .consumer(consumer_fn(
                "Polymorphic",
                move |ctx: ConsumeContext<IOrderEvent>| {
                    let c = c2.clone();
                    async move {
                        assert!(!ctx.message().order_id.is_nil());
                        c.fetch_add(10, Ordering::SeqCst);
                        Ok(())
                    }
                },
            ))
        })
        .start()
        .await
        .unwrap();
    let id = harness.publish(&order()).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(counts.load(Ordering::SeqCst), 11);
    harness.stop().await;
}

#[tokio::test]
async fn publishing_from_a_consumer_keeps_the_conversation() {
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.consumer(consumer_fn(
                "InvoiceConsumer",
                |ctx: ConsumeContext<OrderPlaced>| async move {
                    ctx.publish(&InvoiceCreated {
                        order_id: ctx.message().order_id,
                    })
                    .await?;
                    Ok(())
                },
            ))
        })
        .start()
        .await
        .unwrap();
    let placed = order();
    let correlation = Uuid::now_v7();
    let id = harness
        .publish_with(
            &placed,
            SendOptions::new()
                .correlation_id(correlation)
                .header("Tenant", "acme")
                .header("MT-Private", "x"),
        )
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    let consumed = harness.sent_now::<OrderPlaced>().remove(0);
    let invoice = harness.sent::<InvoiceCreated>().await.unwrap();
    assert_eq!(invoice.conversation_id, consumed.conversation_id);
    assert_eq!(invoice.initiator_id, Some(correlation));
    assert_eq!(
        invoice.source_address.as_deref(),
        Some("loopback://localhost/billing")
    );
    assert_eq!(invoice.headers.get_str("Tenant"), Some("acme"));
    assert!(!invoice.headers.contains("MT-Private"));
    assert_ne!(invoice.message_id, Some(id));
    harness.stop().await;
}

#[tokio::test]
async fn delayed_redelivery_counts_then_faults() {
    let (consumer, attempts) = flaky(u32::MAX);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.redelivery(RetryPolicy::intervals([
                Duration::from_millis(10),
                Duration::from_millis(10),
            ]))
            .consumer(consumer)
        })
        .start()
        .await
        .unwrap();
    let id = harness.publish(&order()).await.unwrap();
    harness.faulted(id).await.unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    let moved = harness.broker().messages("billing_error").remove(0);
    assert_eq!(moved.headers.get_i64("MT-Redelivery-Count"), Some(2));
    assert_eq!(moved.headers.get_i64("MT-Fault-RedeliveryCount"), Some(2));
    let envelope = Envelope::from_slice(&moved.body).unwrap();
    assert_eq!(envelope.headers.get_i64("MT-Redelivery-Count"), Some(2));
    harness.stop().await;
}

#[tokio::test]
async fn permanent_errors_are_not_retried() {
    let attempts = Arc::new(AtomicU32::new(0));
    let count = attempts.clone();
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.retry(RetryPolicy::immediate(5)).consumer(consumer_fn(
                "Validator",
                move |_ctx: ConsumeContext<OrderPlaced>| {
                    let count = count.clone();
                    async move {
                        count.fetch_add(1, Ordering::SeqCst);
                        Err(ConsumeError::permanent("total must be positive"))
                    }
                },
            ))
        })
        .start()
        .await
        .unwrap();
    let id = harness.publish(&order()).await.unwrap();
    harness.faulted(id).await.unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    harness.stop().await;
}

#[tokio::test]
async fn responses_go_to_the_response_address_with_the_request_id() {
    let harness = TestHarness::builder()
        .receive_endpoint("orders", |e| {
            e.consumer(consumer_fn(
                "StatusConsumer",
                |ctx: ConsumeContext<OrderPlaced>| async move {
                    ctx.respond(&InvoiceCreated {
                        order_id: ctx.message().order_id,
                    })
                    .await?;
                    Ok(())
                },
            ))
        })
        .receive_endpoint("client-replies", |e| e)
        .start()
        .await
        .unwrap();
    let request_id = Uuid::now_v7();
    let id = harness
        .publish_with(
            &order(),
            SendOptions::new()
                .request_id(request_id)
                .response_address("loopback://localhost/client-replies")
                .time_to_live(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    harness.consumed(id).await.unwrap();
    let response = harness.sent::<InvoiceCreated>().await.unwrap();
    assert_eq!(response.request_id, Some(request_id));
    assert_eq!(response.initiator_id, Some(request_id));
    assert_eq!(
        response.destination_address.as_deref(),
        Some("loopback://localhost/client-replies")
    );
    assert!(response.expiration_time.is_some());
    harness.stop().await;
}

/// MassTransit: `TryGetMessage<T>` throws in the message-type filter, inside the endpoint's
/// retry, before any consumer ran; the error pipe publishes a `ReceiveFault`, not a `Fault<T>`.
#[tokio::test]
async fn a_payload_that_does_not_bind_is_retried_then_moved_with_a_receive_fault() {
    let (consumer, attempts) = flaky(0);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.retry(RetryPolicy::immediate(3)).consumer(consumer)
        })
        .start()
        .await
        .unwrap();
    let body = serde_json::json!({
        "messageId": "181c0000-6393-3630-36a4-08daf4e7c6da",
        "messageType": ["urn:message:Bookstore.Contracts:OrderPlaced"],
        "message": {"orderId": "not-a-guid", "total": 5}
    });
    harness.publish_raw(
        "billing",
        StoredMessage {
            body: serde_json::to_vec(&body).unwrap().into(),
            message_id: Some("181c0000-6393-3630-36a4-08daf4e7c6da".into()),
            ..StoredMessage::default()
        },
    );
    harness
        .faulted_raw("181c0000-6393-3630-36a4-08daf4e7c6da")
        .await
        .unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 0);
    let moved = harness.broker().messages("billing_error").remove(0);
    assert_eq!(
        moved.headers.get_str("MT-Fault-ExceptionType"),
        Some("serde_json::Error")
    );
    assert_eq!(moved.headers.get_i64("MT-Fault-RetryCount"), Some(3));
    assert!(!moved.headers.contains("MT-Fault-ConsumerType"));
    let fault = harness.sent::<ReceiveFault>().await.unwrap();
    let fault: ReceiveFault = fault.message.bind().unwrap();
    assert_eq!(
        fault.faulted_message_id.unwrap().to_string(),
        "181c0000-6393-3630-36a4-08daf4e7c6da"
    );
    assert_eq!(fault.exceptions[0].exception_type, "serde_json::Error");
    assert!(harness.sent_now::<Fault<OrderPlaced>>().is_empty());
    harness.stop().await;
}

/// A layer that records when its service is entered, to check the pipeline order.
#[derive(Clone)]
struct Record {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl<S> tower::Layer<S> for Record {
    type Service = Recorded<S>;
    fn layer(&self, inner: S) -> Recorded<S> {
        Recorded {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
struct Recorded<S> {
    inner: S,
    layer: Record,
}

impl<S> tower::Service<ferrybus_core::consume::ConsumeRequest> for Recorded<S>
where
    S: tower::Service<
        ferrybus_core::consume::ConsumeRequest,
        Response = ConsumeOutcome,
        Error = ConsumeError,
    >,
{
    type Response = ConsumeOutcome;
    type Error = ConsumeError;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ConsumeError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ferrybus_core::consume::ConsumeRequest) -> Self::Future {
        let entry = format!("{}#{}", self.layer.name, request.attempt());
        self.layer.log.lock().unwrap().push(entry);
        self.inner.call(request)
    }
}

#[tokio::test]
async fn retry_wraps_the_layers_in_the_order_they_were_added() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let record = |name| Record {
        name,
        log: log.clone(),
    };
    let (consumer, attempts) = flaky(1);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.retry(RetryPolicy::immediate(1))
                .consumer_layer(record("outer"))
                .consumer_layer(record("inner"))
                .consumer(consumer)
        })
        .start()
        .await
        .unwrap();
    let id = harness.publish(&order()).await.unwrap();
    harness.consumed(id).await.unwrap();
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(
        *log.lock().unwrap(),
        ["outer#0", "inner#0", "outer#1", "inner#1"]
    );
    harness.stop().await;
}

#[tokio::test]
async fn an_oversized_body_goes_to_the_error_queue_unread() {
    let (consumer, attempts) = flaky(0);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| e.max_body_size(1024).consumer(consumer))
        .start()
        .await
        .unwrap();
    let mut body = serde_json::to_vec(&serde_json::json!({
        "messageId": "181c0000-6393-3630-36a4-08daf4e7c6da",
        "messageType": ["urn:message:Bookstore.Contracts:OrderPlaced"],
        "message": {"orderId": Uuid::nil(), "total": "x".repeat(2000)}
    }))
    .unwrap();
    body.shrink_to_fit();
    harness.publish_raw(
        "billing",
        StoredMessage {
            body: body.into(),
            message_id: Some("big".into()),
            ..StoredMessage::default()
        },
    );
    harness.faulted_raw("big").await.unwrap();
    let moved = harness.broker().messages("billing_error").remove(0);
    let reason = moved.headers.get_str("MT-Fault-Message").unwrap();
    assert!(
        reason.contains("more than the endpoint's limit of 1024 bytes"),
        "{reason}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 0);
    harness.stop().await;
}

#[tokio::test]
async fn a_fault_carries_the_message_as_the_consumer_type_writes_it() {
    let (consumer, _) = flaky(u32::MAX);
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| e.consumer(consumer))
        .start()
        .await
        .unwrap();
    let body = serde_json::json!({
        "messageId": "181c0000-6393-3630-36a4-08daf4e7c6da",
        "messageType": ["urn:message:Bookstore.Contracts:OrderPlaced"],
        "message": {"OrderId": Uuid::nil(), "orderId": Uuid::nil(), "total": "5.00", "unknownField": true}
    });
    harness.publish_raw(
        "billing",
        StoredMessage {
            body: serde_json::to_vec(&body).unwrap().into(),
            message_id: Some("181c0000-6393-3630-36a4-08daf4e7c6da".into()),
            ..StoredMessage::default()
        },
    );
    harness
        .faulted_raw("181c0000-6393-3630-36a4-08daf4e7c6da")
        .await
        .unwrap();
    let fault = harness.sent::<Fault<OrderPlaced>>().await.unwrap();
    // As MassTransit does: the faulted message re-serialized as T, unknown fields dropped.
    assert_eq!(
        fault.message["message"],
        serde_json::json!({"orderId": Uuid::nil(), "total": "5.00"})
    );
    harness.stop().await;
}

/// Panics on every attempt, counting them.
struct Panicky(Arc<AtomicU32>);

impl Consumer<OrderPlaced> for Panicky {
    async fn consume(&self, _ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
        let attempt = self.0.fetch_add(1, Ordering::SeqCst);
        if attempt < 3 {
            panic!("ledger index {attempt} out of range");
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_panicking_consumer_is_retried_then_faulted_and_the_endpoint_lives() {
    let attempts = Arc::new(AtomicU32::new(0));
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.retry(RetryPolicy::immediate(2))
                .consumer(Panicky(attempts.clone()))
        })
        .start()
        .await
        .unwrap();
    let id = harness.publish(&order()).await.unwrap();
    harness.faulted(id).await.unwrap();
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "the policy retried the panic"
    );

    let moved = harness.broker().messages("billing_error").remove(0);
    assert_eq!(
        moved.headers.get_str("MT-Fault-ExceptionType"),
        Some("Panic")
    );
    assert_eq!(
        moved.headers.get_str("MT-Fault-Message"),
        Some("ledger index 2 out of range")
    );
    assert_eq!(moved.headers.get_i64("MT-Fault-RetryCount"), Some(2));
    let fault = harness.sent::<Fault<OrderPlaced>>().await.unwrap();
    let fault: Fault<OrderPlaced> = fault.message.bind().unwrap();
    assert_eq!(fault.faulted_message_id, Some(id));
    assert_eq!(fault.exceptions[0].exception_type, "Panic");
    assert_eq!(harness.sent_now::<Fault<OrderPlaced>>().len(), 1);

    // The endpoint still consumes: the fourth attempt (a new message) succeeds.
    let next = harness.publish(&order()).await.unwrap();
    harness.consumed(next).await.unwrap();
    harness.stop().await;
}

/// An endpoint layer written the way a user would: counts settlements by kind, and panics on
/// a delivery whose message id property is `boom`.
#[derive(Clone, Default)]
struct SettlementCounter(Arc<Mutex<std::collections::HashMap<SettlementKind, usize>>>);

impl SettlementCounter {
    fn count(&self, kind: SettlementKind) -> usize {
        self.0.lock().unwrap().get(&kind).copied().unwrap_or(0)
    }
}

impl tower::Layer<BoxEndpointService> for SettlementCounter {
    type Service = BoxEndpointService;

    fn layer(&self, inner: BoxEndpointService) -> BoxEndpointService {
        let counts = self.0.clone();
        BoxEndpointService::new(tower::service_fn(move |delivery: Delivery| {
            let (inner, counts) = (inner.clone(), counts.clone());
            async move {
                if delivery.message_id.as_deref() == Some("boom") {
                    panic!("the layer blew up");
                }
                let settlement = tower::ServiceExt::oneshot(inner, delivery).await?;
                *counts.lock().unwrap().entry(settlement.kind()).or_default() += 1;
                Ok::<_, std::convert::Infallible>(settlement)
            }
        }))
    }
}

/// A consumer layer standing in for an inbox: answers `Duplicate` without running the consumer
/// for orders whose total is `"dup"`.
#[derive(Clone)]
struct FakeInbox;

impl tower::Layer<ferrybus_core::consume::BoxConsumeService> for FakeInbox {
    type Service = ferrybus_core::consume::BoxConsumeService;

    fn layer(&self, inner: ferrybus_core::consume::BoxConsumeService) -> Self::Service {
        ferrybus_core::consume::BoxConsumeService::new(tower::service_fn(
            move |request: ferrybus_core::consume::ConsumeRequest| {
                let inner = inner.clone();
                async move {
                    if request.received().envelope.message["total"] == "dup" {
                        return Ok(ConsumeOutcome::Duplicate);
                    }
                    tower::ServiceExt::oneshot(inner, request).await
                }
            },
        ))
    }
}

#[tokio::test]
async fn an_endpoint_layer_sees_every_settlement_and_a_panicking_layer_faults() {
    let counter = SettlementCounter::default();
    let harness = TestHarness::builder()
        .receive_endpoint("billing", |e| {
            e.layer(counter.clone())
                .consumer_layer(FakeInbox)
                .redelivery(RetryPolicy::intervals([Duration::from_millis(5)]))
                .consumer(consumer_fn(
                    "Picky",
                    |ctx: ConsumeContext<OrderPlaced>| async move {
                        match ctx.message().total.as_str() {
                            "bad" => Err(ConsumeError::handler("declined")),
                            _ => Ok(()),
                        }
                    },
                ))
        })
        .start()
        .await
        .unwrap();
    let ok = harness.publish(&order()).await.unwrap();
    harness.consumed(ok).await.unwrap();
    let dup = harness
        .publish(&OrderPlaced {
            total: "dup".into(),
            ..order()
        })
        .await
        .unwrap();
    assert_eq!(
        harness.settled(dup).await.unwrap(),
        SettlementKind::Duplicate
    );
    let bad = harness
        .publish(&OrderPlaced {
            total: "bad".into(),
            ..order()
        })
        .await
        .unwrap();
    harness.faulted(bad).await.unwrap(); // redelivered once, then faulted
    let skipped = harness.send("queue:billing", &Unrelated {}).await.unwrap();
    harness.skipped(&skipped.to_string()).await.unwrap();
    harness.publish_raw(
        "billing",
        StoredMessage {
            body: serde_json::to_vec(&serde_json::json!({"messageType": [], "message": {}}))
                .unwrap()
                .into(),
            message_id: Some("boom".into()),
            ..StoredMessage::default()
        },
    );
    harness.faulted_raw("boom").await.unwrap();

    assert_eq!(counter.count(SettlementKind::Ack), 1);
    assert_eq!(counter.count(SettlementKind::Duplicate), 1);
    assert_eq!(counter.count(SettlementKind::Redeliver), 1);
    assert_eq!(
        counter.count(SettlementKind::Fault),
        1,
        "the panic is not counted by the layer that panicked"
    );
    assert_eq!(counter.count(SettlementKind::Skip), 1);
    let errors = harness.broker().messages("billing_error");
    assert_eq!(errors.len(), 2);
    assert_eq!(
        errors[1].headers.get_str("MT-Fault-Message"),
        Some("the layer blew up")
    );
    harness.stop().await;
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct CheckOrder {
    order_id: Uuid,
    known: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[serde(rename_all = "camelCase")]
#[message(namespace = "Bookstore.Contracts")]
struct OrderStatus {
    order_id: Uuid,
    status: String,
}

#[tokio::test]
async fn the_harness_makes_requests_and_reads_their_answers_or_faults() {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let responder = consumer_fn(
        "OrderStatusConsumer",
        move |ctx: ConsumeContext<CheckOrder>| {
            seen.lock().unwrap().push(ctx.envelope().clone());
            async move {
                let CheckOrder { order_id, known } = *ctx.message();
                if !known {
                    return Err(ConsumeError::handler(format!("no order {order_id}")));
                }
                let status = "shipped".to_owned();
                ctx.respond(&OrderStatus { order_id, status }).await?;
                Ok(())
            }
        },
    );
    let harness = TestHarness::builder()
        .receive_endpoint("order-status", |e| e.consumer(responder))
        .start()
        .await
        .unwrap();
    let order_id = Uuid::now_v7();
    let check = CheckOrder {
        order_id,
        known: true,
    };
    let (status, envelope) = harness
        .get_response::<_, OrderStatus>("queue:order-status", &check)
        .await
        .unwrap();
    assert_eq!(
        (status.order_id, status.status.as_str()),
        (order_id, "shipped")
    );
    let request = requests.lock().unwrap()[0].clone();
    assert_eq!(envelope.request_id, request.request_id);
    assert!(request.request_id.is_some());
    assert_eq!(
        request.headers.get("MT-Request-AcceptType"),
        Some(&serde_json::json!([
            "urn:message:Bookstore.Contracts:OrderStatus"
        ]))
    );

    let unknown = CheckOrder {
        order_id,
        known: false,
    };
    let fault = harness
        .get_response::<_, OrderStatus>("queue:order-status", &unknown)
        .await
        .unwrap_err();
    assert!(
        fault.to_string().contains(&format!("no order {order_id}")),
        "{fault}"
    );
    harness.stop().await;
}

#[tokio::test]
async fn a_message_with_a_cancelled_scheduling_token_is_acknowledged_unconsumed() {
    use ferrybus_core::outgoing::SCHEDULING_TOKEN_ID;
    let consumed = Arc::new(AtomicU32::new(0));
    let c = consumed.clone();
    let consumer = consumer_fn(
        "ReminderConsumer",
        move |_ctx: ConsumeContext<InvoiceCreated>| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, ConsumeError>(()) }
        },
    );
    let harness = TestHarness::builder()
        .receive_endpoint("reminders", |e| e.consumer(consumer))
        .start()
        .await
        .unwrap();
    let token = Uuid::now_v7();
    harness.cancel_scheduled_send(token);
    let message = InvoiceCreated {
        order_id: Uuid::now_v7(),
    };
    let with_token = || SendOptions::new().header(SCHEDULING_TOKEN_ID, token.to_string());
    let dropped = harness
        .send_with("queue:reminders", &message, with_token())
        .await
        .unwrap();
    assert_eq!(harness.settled(dropped).await.unwrap(), SettlementKind::Ack);
    assert_eq!(consumed.load(Ordering::SeqCst), 0, "no consumer ran");
    // A token is dropped once: the same token again is consumed.
    let again = harness
        .send_with("queue:reminders", &message, with_token())
        .await
        .unwrap();
    harness.consumed(again).await.unwrap();
    assert_eq!(consumed.load(Ordering::SeqCst), 1);
    harness.stop().await;
}

#[test]
fn a_scheduled_message_carries_its_delay_as_a_dotnet_timespan_property() {
    use ferrybus_core::address::HostAddress;
    use ferrybus_core::outgoing::{
        MessageFactory, MessageOrigin, ScheduledMessage, DELAY_PROPERTY,
    };
    let factory = MessageFactory::new(HostAddress::loopback());
    let message = || {
        let invoice = InvoiceCreated {
            order_id: Uuid::now_v7(),
        };
        factory
            .send(
                "queue:reminders",
                &invoice,
                &MessageOrigin::default(),
                SendOptions::new(),
            )
            .unwrap()
    };
    let mut delayed = message();
    let token = Uuid::now_v7();
    let scheduled = ScheduledMessage::delay(&mut delayed, token, Duration::from_millis(2500));
    assert_eq!(delayed.properties[DELAY_PROPERTY], "00:00:02.5000000");
    assert_eq!(scheduled.token_id, token);
    assert_eq!(scheduled.message_id, delayed.message_id);
    assert!(scheduled.scheduled_time > chrono::Utc::now() + chrono::Duration::seconds(2));
    let mut now = message();
    ScheduledMessage::delay(&mut now, token, Duration::ZERO);
    assert!(
        !now.properties.contains_key(DELAY_PROPERTY),
        "no delay, sent at once"
    );
}

#[tokio::test]
async fn a_scheduled_send_is_consumed_after_its_delay() {
    let consumed = Arc::new(AtomicU32::new(0));
    let c = consumed.clone();
    let consumer = consumer_fn(
        "ReminderConsumer",
        move |_ctx: ConsumeContext<InvoiceCreated>| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, ConsumeError>(()) }
        },
    );
    let harness = TestHarness::builder()
        .receive_endpoint("reminders", |e| e.consumer(consumer))
        .start()
        .await
        .unwrap();
    let delay = Duration::from_millis(300);
    let sent = std::time::Instant::now();
    let invoice = InvoiceCreated {
        order_id: Uuid::now_v7(),
    };
    let scheduled = harness
        .schedule_send("queue:reminders", delay, &invoice)
        .await
        .unwrap();
    assert_eq!(consumed.load(Ordering::SeqCst), 0, "held back");
    harness.consumed(scheduled.message_id).await.unwrap();
    assert!(sent.elapsed() >= delay);
    assert_eq!(consumed.load(Ordering::SeqCst), 1);
    harness.stop().await;
}
