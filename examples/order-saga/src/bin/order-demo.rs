//! `order-demo`: walks one order through the running `order-saga` as the other services would
//! (publishes `OrderSubmitted`, three `OrderItemAdded` — one of them twice with the same
//! MessageId —, `InvoiceCreated`, `OrderShipped`), printing the instance row after each step
//! and the `OrderCompleted` the saga publishes. Same environment as `order-saga`.

use std::process::ExitCode;
use std::time::Duration;

use example_contracts::{InvoiceCreated, OrderItemAdded, OrderShipped, OrderSubmitted};
use example_order_saga::{Config, OrderCompleted};
use ferrybus::error::BoxError;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::{consumer_fn, ConsumeContext, ConsumeError, Publish, SendOptions};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use tokio::sync::mpsc;
use uuid::Uuid;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("order-demo: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let config = Config::from_env()?;
    let db = Database::connect(config.database_url.as_str()).await?;
    let (tx, mut completed) = mpsc::unbounded_channel();
    let bus = RabbitMqBus::builder(&config.amqp_url)
        .connection_name("order-demo")
        .receive_endpoint("order-demo", move |e| {
            e.consumer(consumer_fn(
                "OrderCompletedPrinter",
                move |ctx: ConsumeContext<OrderCompleted>| {
                    let tx = tx.clone();
                    async move {
                        let _ = tx.send(ctx.into_message());
                        Ok::<_, ConsumeError>(())
                    }
                },
            ))
        })
        .start()
        .await?;
    let order_id = Uuid::now_v7();
    println!("order {order_id}");
    bus.publish(&OrderSubmitted {
        order_id,
        total: "42.50".parse()?,
        currency: "EUR".into(),
    })
    .await?;
    show(&db, &config, order_id, |s, _| s == "Submitted").await?;
    let mut ids = Vec::new();
    for sku in ["BOOK-1", "BOOK-2", "BOOK-3"] {
        let item = OrderItemAdded {
            order_id,
            sku: sku.into(),
        };
        ids.push(bus.publish(&item).await?);
    }
    // The second item again, with the same MessageId: the inbox drops it.
    bus.publish_with(
        &OrderItemAdded {
            order_id,
            sku: "BOOK-2".into(),
        },
        SendOptions::new().message_id(ids[1]),
    )
    .await?;
    show(&db, &config, order_id, |_, items| items == 3).await?;
    let invoice_id = Uuid::now_v7();
    bus.publish(&InvoiceCreated {
        invoice_id,
        order_id,
        amount: "42.50".parse()?,
        currency: "EUR".into(),
    })
    .await?;
    show(&db, &config, order_id, |s, _| s == "Invoiced").await?;
    bus.publish(&OrderShipped { order_id }).await?;
    show(&db, &config, order_id, |s, _| s == "Completed").await?;
    let done = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(message) = completed.recv().await {
            if message.order_id == order_id {
                return Some(message);
            }
        }
        None
    })
    .await?
    .ok_or("the OrderCompleted consumer stopped")?;
    println!(
        "OrderCompleted {{ orderId: {}, invoiceId: {}, itemCount: {} }}",
        done.order_id, done.invoice_id, done.item_count
    );
    bus.stop().await;
    Ok(())
}

/// Polls the instance row until `until` holds (30 s at most), then prints it.
async fn show(
    db: &DatabaseConnection,
    config: &Config,
    order_id: Uuid,
    until: impl Fn(&str, i32) -> bool,
) -> Result<(), BoxError> {
    let sql = format!(
        "SELECT current_state, item_count, invoice_id, version FROM \"{}\".order_state WHERE correlation_id = $1",
        config.saga_schema.replace('"', "\"\"")
    );
    for _ in 0..300 {
        let row = db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql.as_str(),
                [order_id.into()],
            ))
            .await?;
        if let Some(row) = row {
            let state: String = row.try_get("", "current_state")?;
            let items: Option<i32> = row.try_get("", "item_count")?;
            let invoice: Option<Uuid> = row.try_get("", "invoice_id")?;
            let version: i64 = row.try_get("", "version")?;
            if until(&state, items.unwrap_or(0)) {
                let invoice = invoice.map_or_else(|| "null".to_owned(), |i| i.to_string());
                println!(
                    "  order_state: current_state={state} item_count={} invoice_id={invoice} version={version}",
                    items.unwrap_or(0)
                );
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the saga did not reach the expected state within 30 s (is order-saga running?)".into())
}
