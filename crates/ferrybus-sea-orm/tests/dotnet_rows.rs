//! Bus-outbox rows shaped as a .NET service writes them (EF Core's PascalCase tables, MassTransit
//! 8.5's columns), delivered by ferrybus's outbox delivery to real RabbitMQ: the `Properties`
//! column applied (`Delay`, `Durable`, `RMQ-Exchange`), and Base64 bodies of a binary serializer
//! decoded before they are sent, as MassTransit's delivery does.

use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_sea_orm::PostgresStorage;
use ferrybus_testing::{amqp_url, eventually, unique, Probe, Shape, TestSchema, WAIT};
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};
use uuid::Uuid;

/// Inserts one outbox (state + message) as MassTransit's `EntityFrameworkOutboxExtensions.AddSend`
/// and `BusOutboxDeliveryService` leave it.
async fn insert_dotnet_row(
    schema: &TestSchema,
    exchange: &str,
    content_type: &str,
    body: &str,
    properties: &str,
) -> Uuid {
    let outbox_id = Uuid::new_v4();
    let message_id = Uuid::new_v4();
    let s = &schema.schema;
    let state = format!(
        r#"INSERT INTO "{s}"."OutboxState" ("OutboxId", "LockId", "Created") VALUES ($1, $2, now())"#
    );
    let message = format!(
        r#"INSERT INTO "{s}"."OutboxMessage"
           ("OutboxId", "SentTime", "Headers", "Properties", "MessageId", "ContentType",
            "MessageType", "Body", "ConversationId", "DestinationAddress")
           VALUES ($1, now(), NULL, $2, $3, $4, 'urn:message:Bookstore.Contracts:OrderPlaced',
                   $5, $3, $6)"#
    );
    let run = |sql: String, values: Vec<Value>| {
        schema.db.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
    };
    run(
        state,
        vec![Value::from(outbox_id), Value::from(Uuid::new_v4())],
    )
    .await
    .unwrap();
    run(
        message,
        vec![
            Value::from(outbox_id),
            Value::from(properties.to_owned()),
            Value::from(message_id),
            Value::from(content_type.to_owned()),
            Value::from(body.to_owned()),
            Value::from(format!("rabbitmq://localhost/{exchange}")),
        ],
    )
    .await
    .unwrap();
    message_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dotnet_properties_and_binary_bodies_are_delivered_as_masstransit_would() {
    let schema = TestSchema::new(Shape::CanonicalFixture).await;
    let probe = Probe::connect(&amqp_url()).await;
    let delayed = unique("dotnet-delayed");
    let binary = unique("dotnet-msgpack");
    probe.declare_exchange(&delayed).await;
    probe.declare_exchange(&binary).await;
    probe.track(&[], &[&delayed, &binary]);
    let delayed_q = probe.bind_probe(&delayed).await;
    let binary_q = probe.bind_probe(&binary).await;
    // Without the delayed-message plugin the delay goes through a TTL queue per delay value.
    let delay_queue = format!("{delayed}_delay_1500");
    probe.track(&[&delay_queue], &[&format!("{delayed}_delay")]);

    let envelope = format!(
        r#"{{"messageId":"{}","messageType":["urn:message:Bookstore.Contracts:OrderPlaced"],"message":{{"orderId":"{}"}}}}"#,
        Uuid::new_v4(),
        Uuid::new_v4()
    );
    let delayed_id = insert_dotnet_row(
        &schema,
        &delayed,
        "application/vnd.masstransit+json",
        &envelope,
        &format!(
            "{{\n  \"RMQ-Exchange\": \"{delayed}\",\n  \"Delay\": \"00:00:01.5000000\",\n  \"Durable\": false\n}}"
        ),
    )
    .await;
    // MessagePack bytes as MassTransit's outbox stores them: Base64 text.
    let packed: &[u8] = &[0x82, 0xa1, b'a', 0x01, 0xa1, b'b', 0xc0, 0xff, 0x00];
    let binary_id = insert_dotnet_row(
        &schema,
        &binary,
        "application/vnd.masstransit+msgpack",
        "gqFhAaFiwP8A",
        &format!("{{\"RMQ-Exchange\": \"{binary}\"}}"),
    )
    .await;

    let storage = PostgresStorage::new(schema.db.clone())
        .tables(schema.tables())
        .inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .start()
        .await
        .unwrap();

    let got = probe.wait_get(&binary_q).await.delivery;
    assert_eq!(got.data, packed, "the Base64 body is sent decoded");
    assert_eq!(
        got.properties.content_type().as_ref().map(|c| c.as_str()),
        Some("application/vnd.masstransit+msgpack")
    );
    assert_eq!(
        got.properties.message_id().as_ref().map(|c| c.to_string()),
        Some(binary_id.to_string())
    );

    // The delayed message went through the delay queue, then to its exchange.
    eventually("the delay queue was declared", WAIT, || async {
        probe.queue_count(&delay_queue).await.map(|_| ())
    })
    .await;
    let got = probe.wait_get(&delayed_q).await.delivery;
    assert_eq!(
        got.properties.message_id().as_ref().map(|c| c.to_string()),
        Some(delayed_id.to_string())
    );
    assert_eq!(got.properties.delivery_mode(), &Some(1), "Durable = false");
    assert_eq!(got.data, envelope.as_bytes(), "the body as written");
    bus.stop().await;
    probe.cleanup().await;
}
