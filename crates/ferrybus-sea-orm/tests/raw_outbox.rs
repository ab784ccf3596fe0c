//! A raw JSON bus (MassTransit's `UseRawJsonSerializer`) through the PostgreSQL consumer outbox,
//! against real RabbitMQ and PostgreSQL: the row keeps the raw form (`ContentType`
//! `application/json`, the message as `Body`, the raw headers in `Headers`, as MassTransit's
//! outbox stores `ContentType`), and what the sweeper sends from that row arrives raw.
//!
//! The after-commit send is refused for real (the destination's exchange is declared beforehand
//! as `topic` where MassTransit declares `fanout`), so the message waits in the table; deleting
//! that exchange lets a second bus's sweeper send it from the row.

mod common;

use std::time::Duration;

use common::TestDb;
use ferrybus_core::outgoing::{MessageFactory, MessageOrigin, Serializer};
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Message, MessageType, SendOptions};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_testing::{
    amqp_url, eventually, header_str, mt_properties, unique, Probe, Shape, WAIT,
};
use lapin::options::{ExchangeDeclareOptions, ExchangeDeleteOptions};
use lapin::types::FieldTable;
use lapin::{ConnectionProperties, ExchangeKind};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    n: u32,
}

impl Message for Order {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusRawOutbox.Contracts:Order").unwrap()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shipped {
    order_id: Uuid,
    n: u32,
}

impl Message for Shipped {
    fn message_type() -> MessageType {
        MessageType::parse("FerrybusRawOutbox.Contracts:Shipped").unwrap()
    }
}

async fn channel() -> (lapin::Connection, lapin::Channel) {
    let connection = lapin::Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    (connection, channel)
}

/// Declares exchange `name` as `topic`: every send to `queue:<name>` is refused with
/// `PRECONDITION_FAILED` until the exchange is deleted.
async fn declare_wrong_type(name: &str) {
    let (connection, channel) = channel().await;
    let options = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .exchange_declare(
            name.into(),
            ExchangeKind::Topic,
            options,
            FieldTable::default(),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "".into()).await;
}

async fn delete_exchange(name: &str) {
    let (connection, channel) = channel().await;
    channel
        .exchange_delete(name.into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    let _ = connection.close(200, "".into()).await;
}

/// The consumer-outbox row of the message sent, as stored: content type, body, headers.
async fn stored_row(tdb: &TestDb) -> Option<(String, String, serde_json::Value)> {
    let c = |name: &str| tdb.c(name);
    let sql = format!(
        "SELECT {} AS content_type, {} AS body, {} AS headers FROM {} WHERE {} IS NOT NULL",
        c("ContentType"),
        c("Body"),
        c("Headers"),
        tdb.t("message"),
        c("InboxMessageId")
    );
    let row = tdb
        .db
        .query_one_raw(Statement::from_sql_and_values(DbBackend::Postgres, sql, []))
        .await
        .unwrap()?;
    let headers = row.try_get::<String>("", "headers").unwrap();
    Some((
        row.try_get("", "content_type").unwrap(),
        row.try_get("", "body").unwrap(),
        serde_json::from_str(&headers).unwrap(),
    ))
}

/// A raw JSON bus's consumer sends through the consumer outbox; the broker refuses the send after
/// commit, so the message waits as a row — in its raw form — and the sweeper of a bus that
/// writes envelopes itself still sends it raw: `application/json`, the message as the body, the
/// ids and types as headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_message_through_the_consumer_outbox_arrives_raw() {
    ferrybus_testing::init_tracing();
    let tdb = TestDb::new(Shape::Snake).await;
    let probe = Probe::connect(&amqp_url()).await;
    let input = unique("raw-outbox-in");
    let dest = unique("raw-outbox-dest");
    probe.track_endpoint(&input);
    probe.track(&[&dest], &[&dest]);
    declare_wrong_type(&dest).await;

    let order_id = Uuid::new_v4();
    let to = format!("queue:{dest}");
    let storage = tdb
        .storage()
        .await
        .delivery_backoff(Duration::from_millis(20), Duration::from_millis(40))
        .sweep_after(Some(Duration::from_secs(3600)))
        .inbox_cleanup(false);
    let bus = RabbitMqBus::builder(&amqp_url())
        .serializer(Serializer::raw_json())
        .storage(storage)
        .receive_endpoint(&input, move |e| {
            let to = to.clone();
            e.bind_message_types(false).inbox().consumer(consumer_fn(
                "ShipConsumer",
                move |ctx: ConsumeContext<Order>| {
                    let to = to.clone();
                    async move {
                        let n = ctx.message().n;
                        ctx.send(&to, &Shipped { order_id, n }).await?;
                        Ok::<_, ConsumeError>(())
                    }
                },
            ))
        })
        .start()
        .await
        .unwrap();

    // An envelope from a peer, with a header the raw message carries on.
    let factory = MessageFactory::new(bus.host().clone());
    let order = factory
        .send(
            &format!("queue:{input}"),
            &Order { n: 4 },
            &MessageOrigin::default(),
            SendOptions::new().header("Tenant", "acme"),
        )
        .unwrap();
    probe
        .publish(
            "",
            &input,
            &order.body,
            mt_properties(&order.message_id.to_string()),
        )
        .await;
    let (content_type, body, headers) = eventually("the raw row", WAIT, || stored_row(&tdb)).await;
    bus.stop().await;
    assert_eq!(content_type, "application/json");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"orderId": order_id.to_string(), "n": 4})
    );
    assert_eq!(
        headers["MT-MessageType"],
        "urn:message:FerrybusRawOutbox.Contracts:Shipped"
    );
    assert_eq!(headers["Tenant"], "acme");
    let sent_id = headers["MessageId"].as_str().unwrap().to_owned();

    // Once the broker accepts, a sweeper (of an envelope bus) sends the row as it is.
    delete_exchange(&dest).await;
    let storage = tdb.storage().await.inbox_cleanup(false);
    let sweeping = RabbitMqBus::builder(&amqp_url())
        .storage(storage)
        .start()
        .await
        .unwrap();
    let got = eventually("the sweeper sends it", WAIT, || async {
        probe.get(&dest).await
    })
    .await;
    sweeping.stop().await;
    let properties = &got.delivery.properties;
    assert_eq!(
        properties.content_type().as_ref().map(|c| c.as_str()),
        Some("application/json")
    );
    let wire: serde_json::Value = serde_json::from_slice(&got.delivery.data).unwrap();
    assert_eq!(wire, body, "the body is the message, no envelope");
    assert_eq!(header_str(&got, "MessageId"), Some(sent_id.clone()));
    assert_eq!(
        properties.message_id().as_ref().map(|m| m.to_string()),
        Some(sent_id)
    );
    assert_eq!(
        header_str(&got, "MT-MessageType").as_deref(),
        Some("urn:message:FerrybusRawOutbox.Contracts:Shipped")
    );
    assert_eq!(header_str(&got, "Tenant").as_deref(), Some("acme"));
    assert_eq!(
        header_str(&got, "ConversationId"),
        order.conversation_id.map(|id| id.to_string())
    );
    assert!(
        stored_row(&tdb).await.is_none(),
        "the row is gone once sent"
    );
    probe.cleanup().await;
}
