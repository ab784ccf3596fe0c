//! The idempotency scenarios of `scenarios.md` against real RabbitMQ and PostgreSQL, with the
//! numbers the users asked for: invoices per order, charges per order.
//!
//! Each test has its own schemas and queues, and sends straight to its queues (its endpoints do
//! not bind the shared `Bookstore.Contracts:*` exchanges), so tests running at the same time do
//! not see each other's messages.

use std::time::Duration;

use example_billing::app::{self, connect, payments_endpoint};
use example_billing::gateway::PaymentGateway;
use example_billing::invoice::{CheckThenActConsumer, InvoiceConsumer, InvoiceWrite};
use example_billing::schema::{self, InvoiceKey};
use example_contracts::{PaymentCaptured, PaymentRefunded};
use ferrybus_e2e::{
    merged_events, order, send, send_twice, start_bus, start_invoice_bus, wait_consumed, TestEnv,
};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

/// Scenario 2, "check-then-act is not idempotency": the same message twice at the same moment
/// (concurrency 4), a handler that checks for an invoice, charges with a fresh key and inserts,
/// and no unique index → 2 invoices and 2 charges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_then_act_makes_two_invoices_and_two_charges() {
    TestEnv::new("race")
        .await
        .run(|env| async move {
            let config = env.billing_config(false);
            let schema = config.billing_schema.clone();
            let db = connect(&config).await.unwrap();
            schema::create(&db, &schema, InvoiceKey::None)
                .await
                .unwrap();
            // A slow gateway (1 s) makes the overlap of the two copies certain.
            let gateway =
                PaymentGateway::connect(&config.database_url, &schema, Duration::from_secs(1))
                    .await
                    .unwrap();
            // No inbox, no storage: the handler is on its own.
            let consumer = CheckThenActConsumer::new(db.clone(), gateway, &schema);
            let bus = start_bus(&config, |bus| {
                bus.receive_endpoint(&config.invoice_queue, |e| {
                    e.concurrency(4)
                        .bind_message_types(false)
                        .consumer(consumer)
                })
            })
            .await;
            let mut events = bus.events();

            let order = order("12.00", "TRY");
            let message_id = Uuid::now_v7();
            send_twice(&bus, &config.invoice_queue, &order, message_id).await;
            wait_consumed(&mut events, &[(message_id, 2)]).await;

            assert_eq!(
                env.invoices(&schema, order.order_id).await,
                2,
                "both copies passed the check"
            );
            assert_eq!(
                env.charges(&schema, order.order_id).await,
                vec![1, 1],
                "two charges under two random idempotency keys"
            );
            bus.stop().await;
        })
        .await;
}

/// Scenario 3, the inbox: the same message twice at the same moment (concurrency 4), then
/// again across two bus instances on one queue → 1 invoice and 1 charge, which the gateway saw
/// once (`attempts = 1`): the second copy waited on the first one's inbox row and was
/// acknowledged without running the consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inbox_runs_the_consumer_once_per_message() {
    TestEnv::new("inbox")
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
            let consumer = || InvoiceConsumer::new(gateway.clone(), &schema);

            // One instance, concurrency 4.
            let bus = start_invoice_bus(&config, &db, consumer()).await;
            let mut events = bus.events();
            let first = order("12.00", "TRY");
            let first_id = Uuid::now_v7();
            send_twice(&bus, &config.invoice_queue, &first, first_id).await;
            wait_consumed(&mut events, &[(first_id, 2)]).await;
            assert_eq!(env.invoices(&schema, first.order_id).await, 1);
            assert_eq!(
                env.charges(&schema, first.order_id).await,
                vec![1],
                "the gateway was called once"
            );
            assert_eq!(
                env.inbox_consumed(&config, first_id).await,
                1,
                "one inbox row"
            );

            // Two instances on one queue.
            let second_bus = start_invoice_bus(&config, &db, consumer()).await;
            let mut events = merged_events(&[&bus, &second_bus]);
            let second = order("30.50", "EUR");
            let second_id = Uuid::now_v7();
            send_twice(&bus, &config.invoice_queue, &second, second_id).await;
            wait_consumed(&mut events, &[(second_id, 2)]).await;
            assert_eq!(env.invoices(&schema, second.order_id).await, 1);
            assert_eq!(env.charges(&schema, second.order_id).await, vec![1]);
            assert_eq!(env.inbox_consumed(&config, second_id).await, 1);

            second_bus.stop().await;
            bus.stop().await;
        })
        .await;
}

/// Scenario 4 / exercise 10: the Order API publishes one order under two MessageIds (an HTTP
/// retry). The inbox sees two messages. The inbox-only handler (plain INSERT, no unique key)
/// makes 2 invoices; the unique-key handler (`ON CONFLICT (order_id) DO NOTHING`) makes 1. The
/// gateway's idempotency key (the order id) keeps the charge at one in both (`attempts = 2`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_order_under_two_message_ids() {
    TestEnv::new("two_ids")
        .await
        .run(|env| async move {
            for (tag, key, write, invoices) in [
                ("a", InvoiceKey::None, InvoiceWrite::PlainInsert, 2),
                ("b", InvoiceKey::UniqueOrderId, InvoiceWrite::Upsert, 1),
            ] {
                let config = env.billing_config_tagged(tag, false);
                let schema = config.billing_schema.clone();
                let db = connect(&config).await.unwrap();
                schema::create(&db, &schema, key).await.unwrap();
                let gateway =
                    PaymentGateway::connect(&config.database_url, &schema, config.payment_delay)
                        .await
                        .unwrap();
                let consumer = InvoiceConsumer::with_write(gateway, &schema, write);
                let bus = start_invoice_bus(&config, &db, consumer).await;
                let mut events = bus.events();

                let order = order("12.00", "TRY");
                let (first, retry) = (Uuid::now_v7(), Uuid::now_v7());
                let queue = &config.invoice_queue;
                tokio::join!(
                    send(&bus, queue, &order, first),
                    send(&bus, queue, &order, retry)
                );
                wait_consumed(&mut events, &[(first, 1), (retry, 1)]).await;

                assert_eq!(
                    env.invoices(&schema, order.order_id).await,
                    invoices,
                    "{write:?} with {key:?}"
                );
                assert_eq!(
                    env.charges(&schema, order.order_id).await,
                    vec![2],
                    "one charge, asked twice"
                );
                bus.stop().await;
            }
        })
        .await;
}

/// Scenario 5, "side effects do not roll back": the charge succeeds, then the commit fails (a
/// deferred constraint trigger fails the first commit). The message is retried, the gateway is
/// called again with the same idempotency key and does not charge again: one charge row with
/// `attempts = 2`, and one invoice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idempotency_key_keeps_one_charge_when_the_commit_fails() {
    TestEnv::new("commit_fails")
        .await
        .run(|env| async move {
            let config = env.billing_config(false);
            let schema = config.billing_schema.clone();
            let db = connect(&config).await.unwrap();
            schema::create(&db, &schema, InvoiceKey::UniqueOrderId).await.unwrap();
            // Runs at COMMIT, after the consumer (and the charge) finished; fails the first time.
            db.execute_unprepared(&format!(
                r#"CREATE SEQUENCE "{schema}".invoice_commits;
                   CREATE FUNCTION "{schema}".fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN
                     IF nextval('"{schema}".invoice_commits') = 1 THEN
                       RAISE EXCEPTION 'simulated failure at commit, after the charge';
                     END IF;
                     RETURN NULL;
                   END $$;
                   CREATE CONSTRAINT TRIGGER fail_first_commit AFTER INSERT ON "{schema}".invoices
                     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".fail_first_commit();"#
            ))
            .await
            .unwrap();
            let gateway = PaymentGateway::connect(&config.database_url, &schema, config.payment_delay)
                .await
                .unwrap();
            let consumer = InvoiceConsumer::new(gateway, &schema);
            let bus = start_invoice_bus(&config, &db, consumer).await;
            let mut events = bus.events();

            let order = order("99.90", "USD");
            let message_id = Uuid::now_v7();
            send(&bus, &config.invoice_queue, &order, message_id).await;
            wait_consumed(&mut events, &[(message_id, 1)]).await;

            assert_eq!(env.charges(&schema, order.order_id).await, vec![2], "charged once, asked twice");
            assert_eq!(env.invoices(&schema, order.order_id).await, 1);
            assert_eq!(env.inbox_consumed(&config, message_id).await, 1);
            bus.stop().await;
        })
        .await;
}

/// Exercise 10, the payment state machine: `PaymentCaptured` three times (twice with one
/// MessageId, once with another), a `PaymentRefunded`, then a late `PaymentCaptured` → Refunded;
/// a refund that overtakes its capture → Refunded; everything at once → Refunded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payment_state_machine_survives_repeats_and_reordering() {
    TestEnv::new("payments")
        .await
        .run(|env| async move {
            let config = env.billing_config(false);
            let schema = config.billing_schema.clone();
            let db = connect(&config).await.unwrap();
            schema::create(&db, &schema, InvoiceKey::UniqueOrderId)
                .await
                .unwrap();
            let bus = start_bus(&config, |bus| {
                bus.storage(app::storage(&config, db.clone()))
                    .receive_endpoint(&config.payments_queue, |e| payments_endpoint(e, &config))
            })
            .await;
            let mut events = bus.events();
            let queue = config.payments_queue.clone();
            let captured = |payment_id, order_id| PaymentCaptured {
                payment_id,
                order_id,
            };
            let refunded = |payment_id, order_id| PaymentRefunded {
                payment_id,
                order_id,
            };

            // In order, with repeats.
            let (payment, order_id) = (Uuid::now_v7(), Uuid::now_v7());
            let (m1, m2) = (Uuid::now_v7(), Uuid::now_v7());
            send_twice(&bus, &queue, &captured(payment, order_id), m1).await;
            send(&bus, &queue, &captured(payment, order_id), m2).await;
            wait_consumed(&mut events, &[(m1, 2), (m2, 1)]).await;
            assert_eq!(
                env.payment_status(&schema, payment).await.as_deref(),
                Some("Captured")
            );
            let m3 = Uuid::now_v7();
            send(&bus, &queue, &refunded(payment, order_id), m3).await;
            wait_consumed(&mut events, &[(m3, 1)]).await;
            assert_eq!(
                env.payment_status(&schema, payment).await.as_deref(),
                Some("Refunded")
            );
            let late = Uuid::now_v7();
            send(&bus, &queue, &captured(payment, order_id), late).await;
            wait_consumed(&mut events, &[(late, 1)]).await;
            assert_eq!(
                env.payment_status(&schema, payment).await.as_deref(),
                Some("Refunded"),
                "a late capture does not move a refunded payment back"
            );

            // The refund overtakes the capture.
            let (payment, order_id) = (Uuid::now_v7(), Uuid::now_v7());
            let (r, c) = (Uuid::now_v7(), Uuid::now_v7());
            send(&bus, &queue, &refunded(payment, order_id), r).await;
            wait_consumed(&mut events, &[(r, 1)]).await;
            send(&bus, &queue, &captured(payment, order_id), c).await;
            wait_consumed(&mut events, &[(c, 1)]).await;
            assert_eq!(
                env.payment_status(&schema, payment).await.as_deref(),
                Some("Refunded")
            );

            // Everything at once (concurrency 4): any interleaving ends Refunded.
            let (payment, order_id) = (Uuid::now_v7(), Uuid::now_v7());
            let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
            let (capture, refund) = (captured(payment, order_id), refunded(payment, order_id));
            tokio::join!(
                send(&bus, &queue, &capture, ids[0]),
                send(&bus, &queue, &capture, ids[1]),
                send(&bus, &queue, &refund, ids[2]),
                send(&bus, &queue, &capture, ids[3]),
            );
            let expected: Vec<(Uuid, usize)> = ids.iter().map(|id| (*id, 1)).collect();
            wait_consumed(&mut events, &expected).await;
            assert_eq!(
                env.payment_status(&schema, payment).await.as_deref(),
                Some("Refunded")
            );
            bus.stop().await;
        })
        .await;
}
