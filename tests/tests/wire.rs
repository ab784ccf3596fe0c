//! Billing and real publishers' bodies, against real RabbitMQ and PostgreSQL: an order published
//! with PascalCase payload properties (Newtonsoft's default, hand-written publishers) is
//! invoiced, as a .NET billing would invoice it; an order whose payload does not bind to
//! `OrderPlaced` goes to the error queue with a `ReceiveFault`, never a `Fault<OrderPlaced>`.

use example_billing::app::connect;
use example_billing::gateway::PaymentGateway;
use example_billing::invoice::InvoiceConsumer;
use example_billing::schema::{self, InvoiceKey};
use ferrybus::{Fault, Message};
use ferrybus_e2e::{eventually, header_str, start_invoice_bus, TestEnv, WAIT};
use lapin::BasicProperties;
use uuid::Uuid;

fn properties(message_id: Uuid) -> BasicProperties {
    BasicProperties::default()
        .with_content_type("application/vnd.masstransit+json".into())
        .with_message_id(message_id.to_string().into())
        .with_delivery_mode(2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn billing_invoices_an_order_with_pascal_case_properties() {
    TestEnv::new("pascal")
        .await
        .run(|env| async move {
            let config = env.billing_config(false);
            let schema = config.billing_schema.clone();
            let db = connect(&config).await.unwrap();
            schema::create(&db, &schema, InvoiceKey::UniqueOrderId)
                .await
                .unwrap();
            let gateway =
                PaymentGateway::connect(&config.database_url, &schema, config.payment_delay)
                    .await
                    .unwrap();
            let fault_exchange = Fault::<example_contracts::OrderPlaced>::message_type()
                .entity_name()
                .to_owned();
            env.probe.track(&[], &[&fault_exchange]);
            let typed_faults = env.probe.bind_probe(&fault_exchange).await;
            let bus = start_invoice_bus(&config, &db, InvoiceConsumer::new(gateway, &schema)).await;

            // What a .NET publisher with Newtonsoft's default settings writes.
            let order_id = Uuid::now_v7();
            let message_id = Uuid::now_v7();
            let pascal = serde_json::json!({
                "MessageId": message_id,
                "ConversationId": Uuid::now_v7(),
                "MessageType": ["urn:message:Bookstore.Contracts:OrderPlaced"],
                "Message": {"OrderId": order_id, "Total": 12.5, "Currency": "TRY"},
                "SentTime": "2025-05-24T18:39:56.3305069Z"
            });
            env.probe
                .publish(
                    "",
                    &config.invoice_queue,
                    &serde_json::to_vec(&pascal).unwrap(),
                    properties(message_id),
                )
                .await;
            eventually("the PascalCase order invoiced", WAIT, || async {
                (env.invoices(&schema, order_id).await == 1).then_some(())
            })
            .await;
            assert_eq!(env.charges(&schema, order_id).await, vec![1]);

            // A payload that does not bind: the error queue, a ReceiveFault, no Fault<T>.
            let bad_id = Uuid::now_v7();
            let unbound = serde_json::json!({
                "messageId": bad_id,
                "messageType": ["urn:message:Bookstore.Contracts:OrderPlaced"],
                "message": {"orderId": "order-42", "total": "abc", "currency": "TRY"}
            });
            env.probe
                .publish(
                    "",
                    &config.invoice_queue,
                    &serde_json::to_vec(&unbound).unwrap(),
                    properties(bad_id),
                )
                .await;
            let moved = env
                .probe
                .wait_get(&format!("{}_error", config.invoice_queue))
                .await;
            assert_eq!(
                moved
                    .delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .unwrap()
                    .as_str(),
                bad_id.to_string()
            );
            assert_eq!(
                header_str(&moved, "MT-Fault-ExceptionType").as_deref(),
                Some("serde_json::Error")
            );
            assert_eq!(header_str(&moved, "MT-Fault-ConsumerType"), None);
            assert_eq!(env.probe.queue_count(&typed_faults).await, Some(0));
            bus.stop().await;
        })
        .await;
}
