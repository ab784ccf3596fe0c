//! Delayed redelivery (MassTransit's `UseDelayedRedelivery`, masstransit-wire §6.2).
//!
//! With the `rabbitmq_delayed_message_exchange` plugin the message goes, as MassTransit sends it,
//! to exchange `<queue>_delay` (type `x-delayed-message`, `x-delayed-type=fanout`, bound to
//! exchange `<queue>`) with header `x-delay`. Without the plugin the same observable behaviour
//! comes from a dead-letter queue per delay value: `<queue>_delay_<ms>` with `x-message-ttl=<ms>`,
//! `x-dead-letter-exchange=<queue>`, `x-dead-letter-routing-key=""` and `x-expires` for cleanup.
//! One queue per delay value keeps every message in it expiring in arrival order.

use std::time::Duration;

use lapin::types::{AMQPValue, LongString};
use lapin::BasicProperties;

use crate::connection::{Live, PublishTarget};
use crate::error::Result;
use crate::topology::{Arguments, Exchange, Queue};

/// How delayed redeliveries reach the broker.
///
/// ```
/// use ferrybus_rabbitmq::DelayMode;
/// assert_eq!(DelayMode::default(), DelayMode::Auto);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DelayMode {
    /// Use the plugin when the broker has it (probed once per connection), else TTL queues.
    #[default]
    Auto,
    /// Always use the `x-delayed-message` exchange `<queue>_delay` (MassTransit's way).
    Plugin,
    /// Always use per-delay TTL + dead-letter queues `<queue>_delay_<ms>`.
    TtlQueues,
}

/// How long an unused delay queue lives after its messages could have expired.
const DELAY_QUEUE_GRACE: Duration = Duration::from_secs(60);

/// Sends `body` back to endpoint `source` after `delay`.
pub(crate) async fn schedule(
    live: &Live,
    mode: DelayMode,
    source: &Queue,
    delay: Duration,
    body: &[u8],
    properties: BasicProperties,
) -> Result<()> {
    let plugin = match mode {
        DelayMode::Plugin => true,
        DelayMode::TtlQueues => false,
        DelayMode::Auto => live.delayed_exchange_supported().await,
    };
    let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    if plugin {
        via_plugin(live, source, ms, body, properties).await
    } else {
        via_ttl_queue(live, source, ms, body, properties).await
    }
}

async fn via_plugin(
    live: &Live,
    source: &Queue,
    ms: i64,
    body: &[u8],
    properties: BasicProperties,
) -> Result<()> {
    let name = format!("{}_delay", source.name);
    let mut exchange = Exchange::fanout(&name, source.durable, source.auto_delete);
    exchange.kind = "x-delayed-message".to_owned();
    exchange.arguments.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("fanout".into()),
    );
    let on = live.declarer();
    live.topology.exchange(on, &exchange).await?;
    live.topology.bind_exchange(on, &name, &source.name).await?;
    let mut headers = properties.headers().clone().unwrap_or_default();
    headers.insert("x-delay".into(), AMQPValue::LongLongInt(ms));
    let properties = properties.with_headers(headers);
    // A delayed exchange cannot route at publish time, so a mandatory publish would come back.
    let target = PublishTarget {
        exchange: &name,
        routing_key: "",
        mandatory: false,
    };
    live.publish(target, body, || properties.clone()).await
}

/// The dead-letter delay queue for `ms` on endpoint `source`.
pub(crate) fn ttl_queue(source: &Queue, ms: i64) -> Queue {
    let mut arguments = Arguments::default();
    arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ms));
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from(source.name.as_str())),
    );
    arguments.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString("".into()),
    );
    let grace = i64::try_from(DELAY_QUEUE_GRACE.as_millis()).unwrap_or(i64::MAX);
    arguments.insert(
        "x-expires".into(),
        AMQPValue::LongLongInt(ms.saturating_add(grace)),
    );
    Queue {
        name: format!("{}_delay_{ms}", source.name),
        durable: source.durable,
        auto_delete: false,
        exclusive: false,
        arguments,
    }
}

async fn via_ttl_queue(
    live: &Live,
    source: &Queue,
    ms: i64,
    body: &[u8],
    properties: BasicProperties,
) -> Result<()> {
    let queue = ttl_queue(source, ms);
    // Declared on every use: that resets the `x-expires` timer, so a queue in use never expires.
    live.topology.queue_always(live.declarer(), &queue).await?;
    let target = PublishTarget {
        exchange: "",
        routing_key: &queue.name,
        mandatory: true,
    };
    live.publish(target, body, || properties.clone()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_queues_are_named_per_delay() {
        let source = Queue {
            name: "orders".into(),
            durable: true,
            auto_delete: false,
            exclusive: false,
            arguments: Arguments::default(),
        };
        let q = ttl_queue(&source, 200);
        assert_eq!(q.name, "orders_delay_200");
        assert_eq!(
            q.arguments.get("x-message-ttl"),
            Some(&AMQPValue::LongLongInt(200))
        );
        assert_eq!(
            q.arguments.get("x-expires"),
            Some(&AMQPValue::LongLongInt(60_200))
        );
        assert_eq!(
            q.arguments.get("x-dead-letter-exchange"),
            Some(&AMQPValue::LongString("orders".into()))
        );
    }
}
