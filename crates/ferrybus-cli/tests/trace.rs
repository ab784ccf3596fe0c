//! `ferrybus trace MESSAGE_ID` against the real billing service, RabbitMQ and PostgreSQL: the
//! story of a consumed message (its inbox row), a faulted one (in `_error` with its exception),
//! a skipped one (in `_skipped`), and one whose outbox rows still wait (in the tables .NET
//! created, with a saga instance); every queue keeps its messages.

mod support;

use example_billing::Billing;
use ferrybus_e2e::{eventually, order, send, TestEnv, WAIT};
use ferrybus_testing::{mt_properties, Shape, TestSchema};
use sea_orm::ConnectionTrait;
use serde_json::Value;
use support::{envelope, failure, run, success};
use uuid::Uuid;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trace_tells_the_story_of_consumed_faulted_and_skipped_messages() {
    TestEnv::new("cli_trace")
        .await
        .run(|env| async move {
            let config = env.billing_config(false);
            let billing = Billing::start(&config).await.expect("billing starts");
            let schema = config.tables.schema_name().to_owned();
            let queue = config.invoice_queue.clone();
            let (error_queue, skipped_queue) = (format!("{queue}_error"), format!("{queue}_skipped"));
            let consumer_key = format!("InvoiceConsumer:Bookstore.Contracts.OrderPlaced:{queue}");

            // Consumed: billing invoices the order and sends what it published.
            let consumed = Uuid::now_v7();
            send(billing.bus(), &queue, &order("12.00", "TRY"), consumed).await;
            let delivered = format!(
                "SELECT count(*) AS n FROM \"{schema}\".inbox_state WHERE message_id = $1 AND delivered IS NOT NULL"
            );
            eventually("the order consumed and delivered", WAIT, || async {
                (env.count(&delivered, consumed).await == 1).then_some(())
            })
            .await;
            let consumed_id = consumed.to_string();
            let args = [
                "trace", &consumed_id, "--schema", &schema, "--queue", &queue, "--consumer",
                &consumer_key,
            ];
            let trace = json(&success(&run(&[&args[..], &["--json"]].concat()).await));
            assert_eq!(trace["messageId"], consumed_id);
            let inbox = trace["inbox"].as_array().unwrap();
            assert_eq!(inbox.len(), 1, "{trace}");
            let row = &inbox[0];
            assert_eq!(row["schema"], schema);
            assert_eq!(row["state"], "delivered", "{row}");
            assert_eq!(row["receiveCount"], 0);
            assert!(row["consumed"].as_str().is_some() && row["delivered"].as_str().is_some());
            assert_eq!(
                row["consumer"],
                format!("InvoiceConsumer (Bookstore.Contracts.OrderPlaced on {queue})"),
                "the key hashes to the id billing's inbox used: {row}"
            );
            let ids = format!(
                "SELECT count(*) AS n FROM \"{schema}\".inbox_state WHERE message_id = $1 AND consumer_id = '{}'",
                row["consumerId"].as_str().unwrap()
            );
            assert_eq!(env.count(&ids, consumed).await, 1);
            assert_eq!(trace["produced"], serde_json::json!([]), "sent rows are deleted");
            assert_eq!(trace["queues"]["copies"], serde_json::json!([]));
            let story = success(&run(&args).await);
            assert!(story.starts_with(&format!("message {consumed}\n")), "{story}");
            assert!(story.contains(&format!("  InvoiceConsumer (Bookstore.Contracts.OrderPlaced on {queue}), consumer id ")), "{story}");
            assert!(story.contains("    received  ") && story.contains("(once)"), "{story}");
            assert!(story.contains(": every message it produced was sent"), "{story}");

            // Faulted: without its invoices table, billing moves the order to the error queue.
            env.db
                .execute_unprepared(&format!(
                    r#"ALTER TABLE "{}".invoices RENAME TO invoices_away"#,
                    config.billing_schema
                ))
                .await
                .unwrap();
            let faulted = Uuid::now_v7();
            send(billing.bus(), &queue, &order("30.50", "EUR"), faulted).await;
            eventually("the order in the error queue", WAIT, || async {
                (env.probe.queue_count(&error_queue).await == Some(1)).then_some(())
            })
            .await;

            // Skipped: a message type no consumer of the endpoint takes.
            let skipped = Uuid::now_v7();
            let body = envelope(&skipped.to_string(), "Bookstore.Contracts:OrderShelved", serde_json::json!({"orderId": skipped}));
            env.probe.publish("", &queue, &body, mt_properties(&skipped.to_string())).await;
            eventually("the message in the skipped queue", WAIT, || async {
                (env.probe.queue_count(&skipped_queue).await == Some(1)).then_some(())
            })
            .await;

            let faulted_id = faulted.to_string();
            let args = ["trace", &faulted_id, "--schema", &schema, "--queue", &queue];
            let trace = json(&success(&run(&[&args[..], &["--json"]].concat()).await));
            let copies = trace["queues"]["copies"].as_array().unwrap();
            assert_eq!(copies.len(), 1, "{trace}");
            let copy = &copies[0];
            assert_eq!(copy["queue"], error_queue);
            assert_eq!(copy["kind"], "error");
            assert_eq!(copy["messageId"], faulted_id);
            assert_eq!(copy["reason"], "fault");
            assert_eq!(copy["consumerType"], "InvoiceConsumer");
            assert!(copy["exceptionMessage"].as_str().unwrap().contains("invoices"), "{copy}");
            assert!(copy["exceptionType"].as_str().is_some_and(|t| !t.is_empty()), "{copy}");
            assert!(copy["stackTrace"].as_str().is_some_and(|t| !t.is_empty()), "{copy}");
            let searched: Vec<&str> = trace["queues"]["searched"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["queue"].as_str().unwrap())
                .collect();
            assert_eq!(searched, [error_queue.as_str(), skipped_queue.as_str()]);
            // The inbox transaction rolled back with the fault: no inbox row.
            assert_eq!(trace["inbox"], serde_json::json!([]), "{trace}");
            let story = success(&run(&args).await);
            assert!(story.contains(&format!("queues: in {error_queue} (position 1 of 1)")), "{story}");
            assert!(story.contains("  faulted ") && story.contains(" in InvoiceConsumer on "), "{story}");
            assert!(story.contains("invoices"), "{story}");
            assert!(story.contains(&format!("queues: not in {skipped_queue} (1 message)")), "{story}");
            assert!(story.contains("queues: every message peeked is still in its queue"), "{story}");

            let skipped_id = skipped.to_string();
            let args = ["trace", &skipped_id, "--schema", &schema, "--queue", &skipped_queue];
            let trace = json(&success(&run(&[&args[..], &["--json"]].concat()).await));
            let copies = trace["queues"]["copies"].as_array().unwrap();
            assert_eq!(copies.len(), 1, "{trace}");
            assert_eq!(copies[0]["queue"], skipped_queue);
            assert_eq!(copies[0]["kind"], "skipped");
            assert_eq!(copies[0]["messageType"], "urn:message:Bookstore.Contracts:OrderShelved");
            assert_eq!(trace["inbox"], serde_json::json!([]), "{trace}");
            let story = success(&run(&args).await);
            assert!(story.contains(&format!("queues: in {skipped_queue} (position 1 of 1)")), "{story}");
            assert!(story.contains("  skipped"), "{story}");

            // Nothing was taken.
            assert_eq!(env.probe.queue_count(&error_queue).await, Some(1));
            assert_eq!(env.probe.queue_count(&skipped_queue).await, Some(1));
            billing.stop().await;
        })
        .await;
}

/// Rows a .NET service left behind in its own tables (PascalCase, EF's foreign keys): a message
/// consumed whose two outgoing messages still wait, one waiting in the bus outbox, and the saga
/// instance they belong to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_shows_the_outbox_rows_still_pending_and_the_saga_instance() {
    let schema = TestSchema::new(Shape::CanonicalFixture).await;
    let s = &schema.schema;
    let (message, published, outbox, order) = (
        Uuid::now_v7(),
        Uuid::now_v7(),
        Uuid::now_v7(),
        Uuid::now_v7(),
    );
    let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
    let key = "Billing.InvoiceConsumer:Bookstore.Contracts.OrderPlaced:billing-invoice";
    let consumer = ferrybus::message::consumer_id(
        "Billing.InvoiceConsumer",
        "Bookstore.Contracts.OrderPlaced",
        "billing-invoice",
    );
    schema
        .exec(&format!(
            r#"INSERT INTO "{s}"."InboxState" ("MessageId", "ConsumerId", "LockId", "Received", "ReceiveCount", "Consumed", "Delivered", "LastSequenceNumber")
                 VALUES ('{message}', '{consumer}', gen_random_uuid(), now() - interval '5 minutes', 1, now() - interval '5 minutes', NULL, NULL);
               INSERT INTO "{s}"."OutboxMessage" ("SentTime", "MessageId", "ContentType", "MessageType", "Body", "InboxMessageId", "InboxConsumerId", "CorrelationId", "DestinationAddress")
                 VALUES (now() - interval '5 minutes', '{first}', 'application/vnd.masstransit+json', 'urn:message:Bookstore.Contracts:InvoiceCreated', '{{}}', '{message}', '{consumer}', '{order}', 'rabbitmq://localhost/Bookstore.Contracts:InvoiceCreated'),
                        (now() - interval '5 minutes', '{second}', 'application/vnd.masstransit+json', 'urn:message:Bookstore.Contracts:PaymentCaptured', '{{}}', '{message}', '{consumer}', '{order}', 'rabbitmq://localhost/Bookstore.Contracts:PaymentCaptured');
               INSERT INTO "{s}"."OutboxState" ("OutboxId", "LockId", "Created") VALUES ('{outbox}', gen_random_uuid(), now());
               INSERT INTO "{s}"."OutboxMessage" ("SentTime", "MessageId", "ContentType", "MessageType", "Body", "OutboxId", "DestinationAddress")
                 VALUES (now(), '{published}', 'application/vnd.masstransit+json', 'urn:message:Bookstore.Contracts:OrderPlaced', '{{}}', '{outbox}', 'rabbitmq://localhost/Bookstore.Contracts:OrderPlaced');
               CREATE TABLE "{s}"."OrderState" ("CorrelationId" uuid PRIMARY KEY, "CurrentState" text NOT NULL, "Total" numeric);
               INSERT INTO "{s}"."OrderState" VALUES ('{order}', 'Invoiced', 12.5), (gen_random_uuid(), 'Submitted', 1);"#
        ))
        .await;

    let message_id = message.to_string();
    let args = [
        "trace",
        &message_id,
        "--schema",
        s,
        "--consumer",
        key,
        "--saga-table",
        "OrderState",
        "--queue",
        "amq.rabbitmq.trace_error",
    ];
    // No such queue: a clear error, before anything is read.
    let line = failure(&run(&args).await, 1);
    assert!(
        line.contains("amq.rabbitmq.trace_error does not exist"),
        "{line}"
    );

    let args = &args[..8];
    let trace = json(&success(&run(&[args, &["--json"]].concat()).await));
    let inbox = trace["inbox"].as_array().unwrap();
    assert_eq!(inbox.len(), 1, "{trace}");
    assert_eq!(inbox[0]["state"], "consumed");
    assert_eq!(inbox[0]["receiveCount"], 1);
    assert_eq!(inbox[0]["consumerId"], consumer.to_string());
    assert_eq!(
        inbox[0]["consumer"],
        "Billing.InvoiceConsumer (Bookstore.Contracts.OrderPlaced on billing-invoice)"
    );
    let produced = trace["produced"].as_array().unwrap();
    let ids: Vec<&str> = produced
        .iter()
        .map(|r| r["messageId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [first.to_string(), second.to_string()]);
    assert_eq!(
        produced[1]["destinationAddress"],
        "rabbitmq://localhost/Bookstore.Contracts:PaymentCaptured"
    );
    assert_eq!(
        produced[1]["messageType"],
        "urn:message:Bookstore.Contracts:PaymentCaptured"
    );
    assert_eq!(produced[0]["inboxConsumer"], inbox[0]["consumer"]);
    let sagas = trace["sagas"].as_array().unwrap();
    assert_eq!(
        sagas.len(),
        1,
        "only the instance its messages correlate to: {trace}"
    );
    assert_eq!(sagas[0]["table"], format!("{s}.OrderState"));
    assert_eq!(sagas[0]["correlationId"], order.to_string());
    assert_eq!(sagas[0]["currentState"], "Invoiced");
    assert_eq!(
        sagas[0]["linkedBy"],
        serde_json::json!(["correlation id of a message it produced"])
    );
    assert_eq!(sagas[0]["row"]["Total"], 12.5);

    let story = success(&run(args).await);
    assert!(
        story.contains("    received  ") && story.contains("(2 times)"),
        "{story}"
    );
    assert!(
        story
            .contains("    not delivered: messages it produced wait to be sent (last sent: #none)"),
        "{story}"
    );
    assert!(
        story.contains("outbox: 2 messages it produced wait to be sent"),
        "{story}"
    );
    assert!(story.contains(&format!("Bookstore.Contracts:PaymentCaptured {second} to rabbitmq://localhost/Bookstore.Contracts:PaymentCaptured (by Billing.InvoiceConsumer")), "{story}");
    assert!(
        story.contains(&format!(
            "saga: instance {order} of {s}.OrderState in state Invoiced"
        )),
        "{story}"
    );

    // The message waiting in the bus outbox.
    let published_id = published.to_string();
    let trace = json(&success(
        &run(&["trace", &published_id, "--schema", s, "--json"]).await,
    ));
    let own = trace["outbox"].as_array().unwrap();
    assert_eq!(own.len(), 1, "{trace}");
    assert_eq!(own[0]["outboxId"], outbox.to_string());
    assert_eq!(trace["inbox"], serde_json::json!([]));
    let story = success(&run(&["trace", &published_id, "--schema", s]).await);
    assert!(
        story.contains(&format!(
            "outbox: it waits in bus outbox {outbox} (schema {s})"
        )),
        "{story}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_refuses_bad_input() {
    let line = failure(&run(&["trace", "not-a-uuid"]).await, 2);
    assert!(
        line.contains("\"not-a-uuid\" is not a message id (a UUID)"),
        "{line}"
    );
    let id = Uuid::now_v7().to_string();
    let line = failure(
        &run(&[
            "trace",
            &id,
            "--database-url",
            "postgres://postgres:s3cret@127.0.0.1:5432/ferrybus_no_such_db",
        ])
        .await,
        1,
    );
    assert!(line.contains("ferrybus_no_such_db"), "{line}");
    assert!(!line.contains("s3cret"), "{line}");
    let schema = TestSchema::new(Shape::Snake).await;
    let line = failure(
        &run(&[
            "trace",
            &id,
            "--schema",
            &schema.schema,
            "--queue",
            "ferrybus-no-such-endpoint",
        ])
        .await,
        1,
    );
    assert!(
        line.contains("queue ferrybus-no-such-endpoint does not exist"),
        "{line}"
    );
    let line = failure(
        &run(&[
            "trace",
            &id,
            "--schema",
            &schema.schema,
            "--saga-table",
            "no_such_saga",
        ])
        .await,
        1,
    );
    assert!(
        line.contains(&format!(
            "saga table {}.no_such_saga does not exist",
            schema.schema
        )),
        "{line}"
    );
    let line = failure(&run(&["trace", &id, "--consumer", "Lonely"]).await, 2);
    assert!(
        line.contains("neither CONSUMER:MESSAGE_TYPE:QUEUE nor NAME=UUID"),
        "{line}"
    );
    // Nothing anywhere: the story says so, and the status is 1.
    let out = run(&["trace", &id, "--schema", &schema.schema, "--json"]).await;
    let line = failure(&out, 1);
    assert!(
        line.contains("is in none of the tables and queues searched"),
        "{line}"
    );
    let trace = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(trace["inbox"], serde_json::json!([]));
}

/// A .NET consumer that failed: its inbox row stays (received, not consumed) and its copy sits in
/// the error queue; the fault headers name the consumer, and the copy's correlation id links the
/// saga instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_names_a_dotnet_consumer_from_its_fault_headers() {
    TestEnv::new("cli_trace_dotnet")
        .await
        .run(|env| async move {
            let schema = TestSchema::new(Shape::CanonicalFixture).await;
            let s = &schema.schema;
            let queue = env.queue("orders");
            let error_queue = format!("{queue}_error");
            env.probe
                .declare_queue(&error_queue, true, Default::default())
                .await
                .expect("the error queue is declared");
            let message = Uuid::now_v7();
            let consumer = ferrybus::message::consumer_id(
                "Billing.InvoiceConsumer",
                "Bookstore.Contracts.OrderPlaced",
                &queue,
            );
            schema
                .exec(&format!(
                    r#"INSERT INTO "{s}"."InboxState" ("MessageId", "ConsumerId", "LockId", "Received", "ReceiveCount")
                         VALUES ('{message}', '{consumer}', gen_random_uuid(), now(), 3);
                       CREATE TABLE "{s}"."OrderState" ("CorrelationId" uuid PRIMARY KEY, "CurrentState" text NOT NULL);
                       INSERT INTO "{s}"."OrderState" VALUES ('{message}', 'Submitted');"#
                ))
                .await;
            let id = message.to_string();
            // An unrelated message first, then the copy MassTransit moved.
            let other = Uuid::now_v7().to_string();
            for id in [&other, &id] {
                let body = envelope(id, "Bookstore.Contracts:OrderPlaced", serde_json::json!({"orderId": id}));
                let properties = support::faulted_properties(
                    id,
                    &format!("rabbitmq://localhost/{queue}"),
                    "System.InvalidOperationException",
                    "The invoice could not be written",
                    "2026-12-01T10:57:00.579Z",
                );
                env.probe.publish("", &error_queue, &body, properties).await;
            }

            let args = ["trace", &id, "--schema", s, "--queue", &queue, "--saga-table", "OrderState"];
            let trace = json(&success(&run(&[&args[..], &["--json"]].concat()).await));
            let inbox = trace["inbox"].as_array().unwrap();
            assert_eq!(inbox.len(), 1, "{trace}");
            assert_eq!(inbox[0]["state"], "received");
            assert_eq!(inbox[0]["receiveCount"], 3);
            assert_eq!(
                inbox[0]["consumer"],
                format!("Billing.InvoiceConsumer (Bookstore.Contracts.OrderPlaced on {queue})"),
                "named from MT-Fault-ConsumerType, the message type and the input queue: {trace}"
            );
            let copies = trace["queues"]["copies"].as_array().unwrap();
            assert_eq!(copies.len(), 1, "{trace}");
            assert_eq!(copies[0]["position"], 2);
            assert_eq!(copies[0]["queueMessages"], 2);
            assert_eq!(copies[0]["exceptionType"], "System.InvalidOperationException");
            assert_eq!(copies[0]["retryCount"], 2);
            assert_eq!(trace["queues"]["searched"][0]["queue"], error_queue, "{trace}");
            assert_eq!(trace["queues"]["searched"].as_array().unwrap().len(), 1, "no skipped queue: {trace}");
            let sagas = trace["sagas"].as_array().unwrap();
            assert_eq!(sagas.len(), 1, "{trace}");
            assert_eq!(sagas[0]["currentState"], "Submitted");
            assert_eq!(
                sagas[0]["linkedBy"],
                serde_json::json!(["message id", "correlation id of its copy in a queue"])
            );

            let story = success(&run(&args).await);
            assert!(story.contains("    not consumed: the consumer did not commit"), "{story}");
            assert!(story.contains("(4 times)"), "{story}");
            assert!(story.contains(&format!("queues: in {error_queue} (position 2 of 2)")), "{story}");
            assert!(story.contains("  System.InvalidOperationException: The invoice could not be written"), "{story}");
            assert!(story.contains("    at Billing.InvoiceConsumer.Consume()"), "{story}");
            assert_eq!(env.probe.queue_count(&error_queue).await, Some(2), "both still there");
        })
        .await;
}
