//! Scenario 7, the dual-write problem: with RabbitMQ unreachable, the order API keeps taking
//! orders (they wait in the bus outbox), and when the broker is back the outbox delivers them
//! and billing invoices them.
//!
//! The outage is simulated with a TCP proxy between this test's services and RabbitMQ: cutting
//! it drops their connections and refuses new ones, while the broker stays up for every other
//! test running at the same time.

use std::time::Duration;

use example_billing::Billing;
use example_order_api::{Config as ApiConfig, OrderApi};
use ferrybus::rabbitmq::Event;
use ferrybus::sea_orm::testing::pending_bus_outbox;
use ferrybus::sea_orm::PostgresStorage;
use ferrybus_e2e::{
    broker_socket, database_url, eventually, http, tables, wait_event, TcpProxy, TestEnv, WAIT,
};
use serde_json::Value;
use uuid::Uuid;

/// Generous: after the outage, the transport and the outbox both reconnect with back-off.
const RECOVERY: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orders_taken_during_a_broker_outage_are_invoiced_afterwards() {
    TestEnv::new("outage")
        .await
        .run(|env| async move {
            let proxy = TcpProxy::start(&broker_socket(), true).await;

            // Billing connects through the proxy.
            let mut billing_config = env.billing_config(true);
            billing_config.amqp_url = proxy.amqp_url();
            let billing = Billing::start(&billing_config)
                .await
                .expect("billing starts");

            // The broker goes away: billing's connection drops.
            let mut billing_events = billing.bus().events();
            proxy.cut();
            wait_event(&mut billing_events, WAIT, |e| {
                matches!(e, Event::Disconnected { .. })
            })
            .await;

            // The order API starts anyway (its bus keeps trying in the background). It has an
            // outbox of its own here, so only its delivery service can send these orders.
            let api_tables = tables(&env.schema("api_messaging"));
            // To count what waits in the order API's outbox.
            let api_storage = PostgresStorage::new(env.db.clone()).tables(api_tables.clone());
            let api_config = ApiConfig {
                addr: "127.0.0.1:0".into(),
                database_url: database_url(),
                amqp_url: proxy.amqp_url(),
                orders_schema: env.schema("orders"),
                tables: api_tables,
                connection_name: format!("e2e-order-api-{}", env.id),
                connect_timeout: Duration::from_secs(2),
            };
            let api = OrderApi::start(&api_config)
                .await
                .expect("the order API starts without a broker");

            let mut orders = Vec::new();
            for total in ["10.00", "20.00", "30.00"] {
                let body = format!(r#"{{"total": "{total}", "currency": "TRY"}}"#);
                let (status, body) = http(api.local_addr(), "POST", "/orders", Some(&body)).await;
                assert_eq!(
                    status, 201,
                    "orders are accepted while the broker is down: {body}"
                );
                let placed: Value = serde_json::from_str(&body).unwrap();
                orders.push(Uuid::parse_str(placed["orderId"].as_str().unwrap()).unwrap());
            }
            // The outage lasts longer than one attempt to start the order API's bus (2 s): this
            // sleep is the outage itself, not a synchronization.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let pending = pending_bus_outbox(&api_storage).await.unwrap();
            assert!(
                pending >= 3,
                "the messages wait in the outbox ({pending} rows)"
            );
            assert!(!api.is_connected());
            let schema = billing_config.billing_schema.clone();
            for order in &orders {
                assert_eq!(env.invoices(&schema, *order).await, 0);
            }

            // The broker is back.
            proxy.restore();
            eventually("the order API to connect", RECOVERY, || async {
                api.is_connected().then_some(())
            })
            .await;
            for order in &orders {
                eventually(&format!("the invoice of {order}"), RECOVERY, || async {
                    (env.invoices(&schema, *order).await == 1).then_some(())
                })
                .await;
                assert_eq!(env.charges(&schema, *order).await, vec![1]);
            }
            eventually("the outbox to drain", RECOVERY, || async {
                (pending_bus_outbox(&api_storage).await.unwrap() == 0).then_some(())
            })
            .await;

            api.stop().await;
            billing.stop().await;
        })
        .await;
}
