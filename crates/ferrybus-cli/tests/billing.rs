//! The on-call scenario end to end, with the real billing service: its `invoices` table is
//! renamed away, so orders fault into `<invoice queue>_error`; `errors list --json` shows each
//! of them and leaves them there; with the table back, `errors replay --all` makes billing
//! invoice each order exactly once and empties the error queue; `outbox status --json` answers.

mod support;

use example_billing::Billing;
use ferrybus_e2e::{eventually, order, send, TestEnv, WAIT};
use sea_orm::ConnectionTrait;
use support::{json_lines, run, success};
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replaying_the_error_queue_invoices_each_order_once() {
    TestEnv::new("cli_billing")
        .await
        .run(|env| async move {
            let config = env.billing_config(false);
            let billing = Billing::start(&config).await.expect("billing starts");
            let schema = config.billing_schema.clone();
            let queue = config.invoice_queue.clone();
            let error_queue = format!("{queue}_error");

            // The invoices table goes away: every order faults after billing's retries.
            env.db
                .execute_unprepared(&format!(
                    r#"ALTER TABLE "{schema}".invoices RENAME TO invoices_away"#
                ))
                .await
                .unwrap();
            let orders: Vec<_> = [("12.00", "TRY"), ("30.50", "EUR"), ("7.25", "USD")]
                .into_iter()
                .map(|(total, currency)| (order(total, currency), Uuid::now_v7()))
                .collect();
            for (order, id) in &orders {
                send(billing.bus(), &queue, order, *id).await;
            }
            eventually("three orders in the error queue", WAIT, || async {
                (env.probe.queue_count(&error_queue).await == Some(3)).then_some(())
            })
            .await;

            // The operator looks: each order is there, with why it failed, and stays there.
            let lines = json_lines(&success(&run(&["errors", "list", &queue, "--json"]).await));
            let mut listed: Vec<String> = lines
                .iter()
                .map(|l| l["messageId"].as_str().unwrap().to_owned())
                .collect();
            let mut sent: Vec<String> = orders.iter().map(|(_, id)| id.to_string()).collect();
            listed.sort();
            sent.sort();
            assert_eq!(listed, sent);
            for line in &lines {
                assert_eq!(
                    line["messageType"], "urn:message:Bookstore.Contracts:OrderPlaced",
                    "{line}"
                );
                assert!(
                    line["exceptionMessage"]
                        .as_str()
                        .unwrap()
                        .contains("invoices"),
                    "{line}"
                );
                assert!(
                    line["exceptionType"]
                        .as_str()
                        .is_some_and(|t| !t.is_empty()),
                    "{line}"
                );
                assert!(line["faultedAt"].as_str().is_some(), "{line}");
                assert_eq!(line["retryCount"], 2, "billing retries twice: {line}");
                assert!(
                    line["inputAddress"]
                        .as_str()
                        .unwrap()
                        .ends_with(&format!("/{queue}")),
                    "{line}"
                );
            }
            assert_eq!(
                env.probe.queue_count(&error_queue).await,
                Some(3),
                "listing took nothing out"
            );
            for (order, _) in &orders {
                let sql = format!(
                    r#"SELECT count(*) AS n FROM "{schema}".invoices_away WHERE order_id = $1"#
                );
                assert_eq!(env.count(&sql, order.order_id).await, 0, "not invoiced");
            }

            // The table is back; replay everything.
            env.db
                .execute_unprepared(&format!(
                    r#"ALTER TABLE "{schema}".invoices_away RENAME TO invoices"#
                ))
                .await
                .unwrap();
            let out = success(&run(&["errors", "replay", &queue, "--all"]).await);
            assert_eq!(out.lines().last(), Some("replayed 3, failed 0"), "{out}");
            assert_eq!(env.probe.queue_count(&error_queue).await, Some(0));
            for (order, id) in &orders {
                eventually("the invoice of a replayed order", WAIT, || async {
                    (env.invoices(&schema, order.order_id).await == 1).then_some(())
                })
                .await;
                eventually("the inbox row of a replayed order", WAIT, || async {
                    (env.inbox_consumed(&config, *id).await == 1).then_some(())
                })
                .await;
            }

            let status = json_lines(&success(
                &run(&[
                    "outbox",
                    "status",
                    "--schema",
                    config.tables.schema_name(),
                    "--json",
                ])
                .await,
            ));
            assert_eq!(status.len(), 1);
            assert_eq!(status[0]["schema"], config.tables.schema_name());
            assert!(
                status[0]["inbox"]["rows"].as_i64().unwrap() >= 3,
                "{}",
                status[0]
            );
            billing.stop().await;

            // Exactly once, also after billing stopped: no invoice twice, nothing left behind.
            for (order, _) in &orders {
                assert_eq!(env.invoices(&schema, order.order_id).await, 1);
            }
            assert_eq!(env.probe.queue_count(&error_queue).await, Some(0));
            assert_eq!(env.probe.queue_count(&queue).await, Some(0));
        })
        .await;
}
