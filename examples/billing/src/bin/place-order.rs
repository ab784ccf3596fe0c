//! Publishes one `OrderPlaced` as a .NET MassTransit publisher would, and prints its message id.
//!
//! ```text
//! cargo run --release --bin place-order -- [TOTAL] [CURRENCY] [ORDER_ID] [MESSAGE_ID]
//! cargo run --release --bin place-order -- 12.00 TRY
//! ```
//!
//! Each argument may also come from the environment (`ORDER_TOTAL`, `ORDER_CURRENCY`, `ORDER_ID`,
//! `MESSAGE_ID`). TOTAL defaults to `12.00`, CURRENCY to `TRY`, ORDER_ID and MESSAGE_ID to new ids. Pass the
//! same ids twice to publish a duplicate (same MessageId: the inbox drops it), or the same order
//! id with a new message id (the unique order key drops it). The broker is `AMQP_URL`
//! (default `amqp://guest:guest@127.0.0.1:5672/%2f`).

use std::process::ExitCode;

use example_billing::config::DEFAULT_AMQP_URL;
use example_contracts::OrderPlaced;
use ferrybus::rabbitmq::RabbitMqBus;
use ferrybus::{Publish, SendOptions};
use uuid::Uuid;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("place-order: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), ferrybus::error::BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: place-order [TOTAL] [CURRENCY] [ORDER_ID] [MESSAGE_ID]");
        return Ok(());
    }
    // An argument, else its environment variable.
    let arg = |i: usize, var: &str| args.get(i).cloned().or_else(|| std::env::var(var).ok());
    let total = arg(0, "ORDER_TOTAL").unwrap_or_else(|| "12.00".into());
    let total = ferrybus::dotnet::decimal::parse_decimal(&total)?;
    let currency = arg(1, "ORDER_CURRENCY").unwrap_or_else(|| "TRY".into());
    let order_id = arg(2, "ORDER_ID")
        .map(|s| Uuid::parse_str(&s))
        .transpose()?;
    let message_id = arg(3, "MESSAGE_ID")
        .map(|s| Uuid::parse_str(&s))
        .transpose()?;
    let order_id = order_id.unwrap_or_else(Uuid::now_v7);
    let message_id = message_id.unwrap_or_else(Uuid::now_v7);
    let amqp_url = std::env::var("AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned());

    let bus = RabbitMqBus::builder(&amqp_url)
        .connection_name("place-order")
        .start()
        .await?;
    let order = OrderPlaced {
        order_id,
        total,
        currency,
    };
    let published = bus
        .publish_with(&order, SendOptions::new().message_id(message_id))
        .await;
    bus.stop().await;
    let message_id = published?;
    eprintln!(
        "published OrderPlaced order_id={} total={} currency={} to exchange Bookstore.Contracts:OrderPlaced",
        order.order_id, order.total, order.currency
    );
    println!("{message_id}");
    Ok(())
}
