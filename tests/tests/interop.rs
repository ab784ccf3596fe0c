//! Billing next to .NET: a message shaped exactly as a MassTransit 8 publisher writes it, and the
//! failure path a .NET operator expects (`_error` queue with fault headers, `Fault<T>`).

use example_billing::Billing;
use ferrybus::Message;
use ferrybus_e2e::{eventually, order, send, TestEnv, WAIT};
use lapin::BasicProperties;
use serde_json::json;
use uuid::Uuid;

/// Scenario 7 / interop: an `OrderPlaced` published raw with lapin to the exchange
/// `Bookstore.Contracts:OrderPlaced`, as a .NET `IPublishEndpoint.Publish` (MassTransit 8,
/// System.Text.Json) sends it, is invoiced, and `InvoiceCreated` goes out with the right fields
/// and MassTransit's envelope rules (conversation kept, initiator = the consumed message,
/// custom headers carried over).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dotnet_published_order_is_invoiced() {
    TestEnv::new("dotnet")
        .await
        .run(|env| async move {
            let config = env.billing_config(true);
            let schema = config.billing_schema.clone();
            let billing = Billing::start(&config).await.expect("billing starts");
            let probe = env.probe.bind_probe("Bookstore.Contracts:InvoiceCreated").await;

            let (message_id, conversation_id, order_id) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
            let correlation_id = Uuid::now_v7();
            // The body of a MassTransit 8.4 STJ publish (compare fixtures/envelopes/08-*.json).
            let body = json!({
                "messageId": message_id,
                "requestId": null,
                "correlationId": correlation_id,
                "conversationId": conversation_id,
                "initiatorId": null,
                "sourceAddress": "rabbitmq://localhost/DESKTOP3VIT6KG_OrdersApi_bus_infoyyrr4hq7s4ptbdq3ih1g88?temporary=true",
                "destinationAddress": "rabbitmq://localhost/Bookstore.Contracts:OrderPlaced",
                "responseAddress": null,
                "faultAddress": null,
                "messageType": ["urn:message:Bookstore.Contracts:OrderPlaced"],
                "message": { "orderId": order_id, "total": "12.00", "currency": "TRY" },
                "expirationTime": null,
                "sentTime": "2025-05-24T18:39:56.3305069Z",
                "headers": { "my-custom-header": "value" },
                "host": {
                    "machineName": "DESKTOP-3VIT6KG",
                    "processName": "OrdersApi",
                    "processId": 35752,
                    "assembly": "OrdersApi",
                    "assemblyVersion": "1.0.0.0",
                    "frameworkVersion": "8.0.16",
                    "massTransitVersion": "8.4.1.0",
                    "operatingSystemVersion": "Microsoft Windows NT 10.0.26100.0"
                }
            });
            let properties = BasicProperties::default()
                .with_content_type("application/vnd.masstransit+json".into())
                .with_message_id(message_id.to_string().into())
                .with_delivery_mode(2);
            env.probe
                .publish(
                    "Bookstore.Contracts:OrderPlaced",
                    "",
                    serde_json::to_vec(&body).unwrap().as_slice(),
                    properties,
                )
                .await;

            eventually("the invoice", WAIT, || async {
                (env.invoices(&schema, order_id).await == 1).then_some(())
            })
            .await;
            assert_eq!(env.charges(&schema, order_id).await, vec![1]);

            let order_text = order_id.to_string();
            let created = env
                .probe
                .wait_for(&probe, |m| {
                    // Other tests' billings bound to the same exchange invoice this order too.
                    m.body["message"]["orderId"] == order_text.as_str()
                        && m.body["sourceAddress"]
                            .as_str()
                            .is_some_and(|a| a.ends_with(&config.invoice_queue))
                })
                .await;
            let envelope = &created.body;
            assert_eq!(created.content_type.as_deref(), Some("application/vnd.masstransit+json"));
            assert_eq!(created.delivery_mode, Some(2));
            assert_eq!(created.message_id.as_deref(), envelope["messageId"].as_str());
            assert_eq!(envelope["messageType"][0], "urn:message:Bookstore.Contracts:InvoiceCreated");
            assert_eq!(envelope["message"]["amount"], "12.00");
            assert_eq!(envelope["message"]["currency"], "TRY");
            assert!(Uuid::parse_str(envelope["message"]["invoiceId"].as_str().unwrap()).is_ok());
            assert_eq!(envelope["conversationId"], conversation_id.to_string(), "conversation kept");
            // MassTransit's TransferConsumeContextHeaders: initiator = the consumed correlation id.
            assert_eq!(envelope["initiatorId"], correlation_id.to_string(), "initiated by the order");
            assert_eq!(envelope["headers"]["my-custom-header"], "value", "custom headers carried over");
            assert!(
                envelope["sourceAddress"].as_str().unwrap().ends_with(&config.invoice_queue),
                "sent from the billing endpoint: {}",
                envelope["sourceAddress"]
            );
            assert_eq!(
                envelope["destinationAddress"].as_str().unwrap().rsplit('/').next(),
                Some("Bookstore.Contracts:InvoiceCreated")
            );

            // The PaymentCaptured billing published after the charge reached its own endpoint.
            let payment = example_billing::payments::payment_id(order_id);
            eventually("the captured payment", WAIT, || async {
                (env.payment_status(&schema, payment).await.as_deref() == Some("Captured")).then_some(())
            })
            .await;
            billing.stop().await;
        })
        .await;
}

/// Validation failures: an order with `total <= 0` or a currency that is not three capital
/// letters fails, is retried twice (3 attempts), lands in `<queue>_error` with `MT-Reason=fault`
/// and the `MT-Fault-*` headers, and a `Fault<OrderPlaced>` is published to
/// `MassTransit:Fault--Bookstore.Contracts:OrderPlaced--`. Nothing is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_order_goes_to_the_error_queue_with_a_fault() {
    TestEnv::new("invalid")
        .await
        .run(|env| async move {
            let config = env.billing_config(false);
            let schema = config.billing_schema.clone();
            let billing = Billing::start(&config).await.expect("billing starts");
            let fault_exchange = ferrybus::Fault::<example_contracts::OrderPlaced>::message_type()
                .entity_name()
                .to_owned();
            assert_eq!(
                fault_exchange,
                "MassTransit:Fault--Bookstore.Contracts:OrderPlaced--"
            );
            let faults = env.probe.bind_probe(&fault_exchange).await;
            let error_queue = format!("{}_error", config.invoice_queue);

            for (total, currency, reason) in [
                ("0", "TRY", "total must be positive"),
                ("12.00", "try", "currency must be three capital letters"),
            ] {
                let order = order(total, currency);
                let message_id = Uuid::now_v7();
                send(billing.bus(), &config.invoice_queue, &order, message_id).await;

                let id = message_id.to_string();
                let failed = env
                    .probe
                    .wait_for(&error_queue, |m| {
                        m.message_id.as_deref() == Some(id.as_str())
                    })
                    .await;
                let h = &failed.headers;
                assert_eq!(
                    h.get("MT-Reason").map(String::as_str),
                    Some("fault"),
                    "{h:?}"
                );
                assert_eq!(
                    h.get("MT-Fault-ExceptionType").map(String::as_str),
                    Some("example_billing::invoice::InvalidOrder")
                );
                assert!(h["MT-Fault-Message"].contains(reason), "{h:?}");
                assert_eq!(
                    h.get("MT-Fault-RetryCount").map(String::as_str),
                    Some("2"),
                    "3 attempts"
                );
                assert_eq!(
                    h.get("MT-Fault-ConsumerType").map(String::as_str),
                    Some("InvoiceConsumer")
                );
                assert!(h["MT-Fault-MessageType"].contains("OrderPlaced"), "{h:?}");
                assert!(
                    h["MT-Fault-InputAddress"].ends_with(&config.invoice_queue),
                    "{h:?}"
                );
                assert!(h.contains_key("MT-Fault-Timestamp"));
                assert!(h.contains_key("MT-Host-MachineName"));
                assert_eq!(
                    failed.body["messageId"], id,
                    "the original message, unchanged"
                );

                let fault = env
                    .probe
                    .wait_for(&faults, |m| {
                        m.body["message"]["faultedMessageId"] == id.as_str()
                    })
                    .await;
                let types: Vec<&str> = fault.body["messageType"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|t| t.as_str())
                    .collect();
                assert!(
                    types.contains(
                        &"urn:message:MassTransit:Fault[[Bookstore.Contracts:OrderPlaced]]"
                    ),
                    "{types:?}"
                );
                let body = &fault.body["message"];
                assert_eq!(body["message"]["orderId"], order.order_id.to_string());
                assert_eq!(
                    body["exceptions"][0]["exceptionType"],
                    "example_billing::invoice::InvalidOrder"
                );
                assert!(body["exceptions"][0]["message"]
                    .as_str()
                    .unwrap()
                    .contains(reason));

                assert!(
                    env.charges(&schema, order.order_id).await.is_empty(),
                    "nothing charged"
                );
                assert_eq!(env.invoices(&schema, order.order_id).await, 0);
            }
            billing.stop().await;
        })
        .await;
}
