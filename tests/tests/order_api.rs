//! The order API and billing together: `POST /orders` over HTTP stores the order and writes
//! `OrderPlaced` into the bus outbox in one transaction; the delivery service sends it; billing
//! invoices it.

use std::time::Duration;

use example_billing::Billing;
use example_order_api::{Config as ApiConfig, OrderApi};
use ferrybus_e2e::{amqp_url, database_url, eventually, http, TestEnv, WAIT};
use serde_json::Value;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn posted_order_is_invoiced_by_billing() {
    TestEnv::new("order_api")
        .await
        .run(|env| async move {
            // Billing as deployed: bound to Bookstore.Contracts:OrderPlaced.
            let billing_config = env.billing_config(true);
            let billing = Billing::start(&billing_config)
                .await
                .expect("billing starts");
            let api_config = ApiConfig {
                addr: "127.0.0.1:0".into(),
                database_url: database_url(),
                amqp_url: amqp_url(),
                orders_schema: env.schema("orders"),
                tables: billing_config.tables.clone(), // one `messaging` schema, as in production
                connection_name: format!("e2e-order-api-{}", env.id),
                connect_timeout: Duration::from_secs(5),
            };
            let api = OrderApi::start(&api_config)
                .await
                .expect("the order API starts");
            let addr = api.local_addr();

            // Health on the same address: live at once, ready once the bus is connected.
            assert_eq!(http(addr, "GET", "/health/live", None).await.0, 200);
            let report = eventually("the order API to be ready", WAIT, || async {
                let (status, body) = http(addr, "GET", "/health/ready", None).await;
                (status == 200).then_some(body)
            })
            .await;
            let report: Value = serde_json::from_str(&report).unwrap();
            assert_eq!(report["status"], "Healthy", "{report}");
            let parts: Vec<&str> = report["parts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            assert_eq!(parts, ["broker", "database", "outbox"], "{report}");

            let (status, body) = http(
                addr,
                "POST",
                "/orders",
                Some(r#"{"total": "12.00", "currency": "TRY"}"#),
            )
            .await;
            assert_eq!(status, 201, "{body}");
            let placed: Value = serde_json::from_str(&body).unwrap();
            let order_id = Uuid::parse_str(placed["orderId"].as_str().unwrap()).unwrap();
            let message_id = Uuid::parse_str(placed["messageId"].as_str().unwrap()).unwrap();

            let (status, body) = http(addr, "GET", &format!("/orders/{order_id}"), None).await;
            assert_eq!(status, 200, "{body}");
            let order: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(order["total"], "12.00");
            assert_eq!(order["currency"], "TRY");
            assert_eq!(order["messageId"], message_id.to_string());

            // A retry of the same request (same orderId) gets the same ids and publishes nothing.
            let retry =
                format!(r#"{{"orderId": "{order_id}", "total": "12.00", "currency": "TRY"}}"#);
            let (status, body) = http(addr, "POST", "/orders", Some(&retry)).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(
                serde_json::from_str::<Value>(&body).unwrap()["messageId"],
                message_id.to_string()
            );

            assert_eq!(
                http(addr, "GET", &format!("/orders/{}", Uuid::now_v7()), None)
                    .await
                    .0,
                404
            );
            assert_eq!(http(addr, "GET", "/orders/not-a-uuid", None).await.0, 400);
            assert_eq!(
                http(
                    addr,
                    "POST",
                    "/orders",
                    Some(r#"{"total": "0", "currency": "TRY"}"#)
                )
                .await
                .0,
                422
            );
            assert_eq!(
                http(
                    addr,
                    "POST",
                    "/orders",
                    Some(r#"{"total": "5", "currency": "euro"}"#)
                )
                .await
                .0,
                422
            );
            assert_eq!(
                http(addr, "POST", "/orders", Some(r#"{"total": "#)).await.0,
                400
            );

            let schema = billing_config.billing_schema.clone();
            eventually("the invoice of the posted order", WAIT, || async {
                (env.invoices(&schema, order_id).await == 1).then_some(())
            })
            .await;
            assert_eq!(env.charges(&schema, order_id).await, vec![1]);
            assert_eq!(
                env.inbox_consumed(&billing_config, message_id).await,
                1,
                "billing's inbox keeps the MessageId the API made"
            );

            api.stop().await;
            billing.stop().await;
        })
        .await;
}
