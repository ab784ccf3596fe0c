//! Declarations with MassTransit's flags (masstransit-wire §4), cached once per connection.

use std::collections::HashSet;
use std::sync::Mutex;

use ferrybus_core::integration::EndpointAddress;

use crate::queue::{QueueOptions, QueueType};
use lapin::options::{
    ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, ExchangeKind};
use serde_json::Value;

use crate::error::{ErrorKind, RabbitMqError, Result};

/// An exchange declaration.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ExchangeDecl {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) durable: bool,
    pub(crate) auto_delete: bool,
    pub(crate) arguments: FieldTable,
}

impl ExchangeDecl {
    /// A fanout exchange, MassTransit's default type.
    pub(crate) fn fanout(name: &str, durable: bool, auto_delete: bool) -> Self {
        Self {
            name: name.to_owned(),
            kind: "fanout".to_owned(),
            durable,
            auto_delete,
            arguments: FieldTable::default(),
        }
    }

    fn key(&self) -> String {
        format!("e:{}", self.name)
    }
}

/// A queue declaration, holding the flags as configured; [`QueueDecl::declare`] applies
/// MassTransit's `BrokerTopologyBuilder.QueueDeclare` rules.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct QueueDecl {
    pub(crate) name: String,
    pub(crate) durable: bool,
    pub(crate) auto_delete: bool,
    pub(crate) exclusive: bool,
    pub(crate) arguments: FieldTable,
}

impl QueueDecl {
    /// The queue of a receive endpoint.
    pub(crate) fn for_endpoint(name: &str, options: &QueueOptions) -> Self {
        Self {
            name: name.to_owned(),
            durable: options.is_durable(),
            auto_delete: options.is_auto_delete(),
            exclusive: options.is_exclusive(),
            arguments: arguments_table(options),
        }
    }

    /// A queue copying this one's flags and arguments (the `_error` and `_skipped` queues).
    pub(crate) fn sibling(&self, name: String) -> Self {
        Self {
            name,
            exclusive: false,
            ..self.clone()
        }
    }

    /// The flags sent on `queue.declare`: with `x-expires` the queue is not auto-delete (the
    /// broker's expiry cleans up) but still counts as auto-delete for exclusivity; a
    /// non-durable auto-delete queue is exclusive.
    pub(crate) fn declare_options(&self) -> QueueDeclareOptions {
        let expires = self.arguments.contains_key("x-expires");
        QueueDeclareOptions {
            durable: self.durable,
            auto_delete: self.auto_delete && !expires,
            exclusive: self.exclusive || (self.auto_delete && !self.durable),
            ..QueueDeclareOptions::default()
        }
    }

    fn key(&self) -> String {
        format!("q:{}", self.name)
    }
}

/// The arguments sent on `queue.declare`, `x-queue-type` included for quorum queues.
fn arguments_table(options: &QueueOptions) -> FieldTable {
    let mut table = FieldTable::default();
    if options.kind() == QueueType::Quorum {
        table.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
    }
    for (name, value) in options.arguments() {
        if let (Ok(key), Some(v)) = (ShortString::try_new(name.as_str()), argument_value(value)) {
            table.insert(key, v);
        }
    }
    table
}

fn argument_value(value: &Value) -> Option<AMQPValue> {
    match value {
        Value::Bool(b) => Some(AMQPValue::Boolean(*b)),
        Value::String(s) => Some(AMQPValue::LongString(LongString::from(s.as_str()))),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or_default()),
        }),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// Entity names as AMQP short strings (at most 255 bytes).
pub(crate) fn short(name: &str) -> Result<ShortString> {
    ShortString::try_new(name).map_err(|e| {
        RabbitMqError::with_source(ErrorKind::Config, format!("name too long: {name:.40}…"), e)
    })
}

/// What was declared on one connection, so each entity is declared once per connection.
#[derive(Debug, Default)]
pub(crate) struct Topology {
    declared: Mutex<HashSet<String>>,
}

impl Topology {
    fn is_declared(&self, key: &str) -> bool {
        self.declared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key)
    }

    fn remember(&self, key: String) {
        self.declared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key);
    }

    /// Forgets every declaration: after a broker error (an entity deleted behind our back),
    /// everything is declared again on next use.
    pub(crate) fn forget_all(&self) {
        self.declared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Declares an exchange unless it was declared on this connection.
    pub(crate) async fn exchange(&self, channel: &Channel, d: &ExchangeDecl) -> Result<()> {
        if self.is_declared(&d.key()) {
            return Ok(());
        }
        let kind = match d.kind.as_str() {
            "fanout" => ExchangeKind::Fanout,
            "direct" => ExchangeKind::Direct,
            "topic" => ExchangeKind::Topic,
            "headers" => ExchangeKind::Headers,
            other => ExchangeKind::Custom(other.to_owned()),
        };
        let options = ExchangeDeclareOptions {
            durable: d.durable,
            auto_delete: d.auto_delete,
            ..ExchangeDeclareOptions::default()
        };
        channel
            .exchange_declare(short(&d.name)?, kind, options, d.arguments.clone())
            .await
            .map_err(|e| RabbitMqError::amqp(format!("declaring exchange {:?}", d.name), e))?;
        tracing::debug!(target: "ferrybus::rabbitmq", exchange = %d.name, kind = %d.kind, durable = d.durable, "declared exchange");
        self.remember(d.key());
        Ok(())
    }

    /// Declares a queue unless it was declared on this connection.
    pub(crate) async fn queue(&self, channel: &Channel, d: &QueueDecl) -> Result<()> {
        if self.is_declared(&d.key()) {
            return Ok(());
        }
        self.queue_always(channel, d).await?;
        self.remember(d.key());
        Ok(())
    }

    /// Declares a queue even if it was declared before (resets an `x-expires` timer).
    pub(crate) async fn queue_always(&self, channel: &Channel, d: &QueueDecl) -> Result<()> {
        channel
            .queue_declare(short(&d.name)?, d.declare_options(), d.arguments.clone())
            .await
            .map_err(|e| RabbitMqError::amqp(format!("declaring queue {:?}", d.name), e))?;
        tracing::debug!(target: "ferrybus::rabbitmq", queue = %d.name, durable = d.durable, "declared queue");
        Ok(())
    }

    /// Binds exchange `exchange` to queue `queue` (routing key `""`).
    pub(crate) async fn bind_queue(
        &self,
        channel: &Channel,
        exchange: &str,
        queue: &str,
    ) -> Result<()> {
        let key = format!("bq:{exchange}\u{0}{queue}");
        if self.is_declared(&key) {
            return Ok(());
        }
        channel
            .queue_bind(
                short(queue)?,
                short(exchange)?,
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| {
                RabbitMqError::amqp(format!("binding {exchange:?} to queue {queue:?}"), e)
            })?;
        self.remember(key);
        Ok(())
    }

    /// Binds exchange `source` to exchange `destination` (routing key `""`).
    pub(crate) async fn bind_exchange(
        &self,
        channel: &Channel,
        source: &str,
        destination: &str,
    ) -> Result<()> {
        let key = format!("be:{source}\u{0}{destination}");
        if self.is_declared(&key) {
            return Ok(());
        }
        channel
            .exchange_bind(
                short(destination)?,
                short(source)?,
                "".into(),
                ExchangeBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| {
                RabbitMqError::amqp(format!("binding {source:?} to exchange {destination:?}"), e)
            })?;
        self.remember(key);
        Ok(())
    }

    /// A receive endpoint's topology: exchange `Q` → queue `Q`, and each consumed type's
    /// exchange → exchange `Q`.
    pub(crate) async fn endpoint(
        &self,
        channel: &Channel,
        queue: &QueueDecl,
        types: &[String],
    ) -> Result<()> {
        let exchange = ExchangeDecl::fanout(&queue.name, queue.durable, queue.auto_delete);
        self.exchange(channel, &exchange).await?;
        self.queue(channel, queue).await?;
        self.bind_queue(channel, &queue.name, &queue.name).await?;
        for name in types {
            self.exchange(channel, &ExchangeDecl::fanout(name, true, false))
                .await?;
            self.bind_exchange(channel, name, &queue.name).await?;
        }
        Ok(())
    }

    /// The `<queue><suffix>` exchange + queue pair (`_error`, `_skipped`), copying the source
    /// queue's flags and arguments. Returns the exchange name.
    pub(crate) async fn move_target(
        &self,
        channel: &Channel,
        source: &QueueDecl,
        suffix: &str,
    ) -> Result<String> {
        let target = source.sibling(format!("{}{suffix}", source.name));
        let exchange = ExchangeDecl::fanout(&target.name, target.durable, target.auto_delete);
        self.exchange(channel, &exchange).await?;
        self.queue(channel, &target).await?;
        self.bind_queue(channel, &target.name, &target.name).await?;
        Ok(target.name)
    }

    /// Whatever a send to `address` needs: its exchange (flags, type, `x-delayed-type` and
    /// `alternate-exchange` from the address), the bound queue for `bind=true`, the
    /// `bindexchange=` exchanges bound from it, and base-type exchanges bound from it for
    /// publishes — MassTransit's `RabbitMqSendSettings`
    /// (`src/Transports/MassTransit.RabbitMqTransport/RabbitMqTransport/Topology/RabbitMqSendSettings.cs`).
    pub(crate) async fn destination(
        &self,
        channel: &Channel,
        address: &EndpointAddress,
        bases: &[String],
    ) -> Result<()> {
        let (exchange, bound) = destination_exchanges(address);
        self.exchange(channel, &exchange).await?;
        for decl in &bound {
            self.exchange(channel, decl).await?;
            self.bind_exchange(channel, &address.name, &decl.name)
                .await?;
        }
        if let Some(queue) = address.queue.as_deref().filter(|_| address.bind) {
            let decl = QueueDecl {
                name: queue.to_owned(),
                durable: address.durable,
                auto_delete: address.auto_delete,
                exclusive: false,
                arguments: FieldTable::default(),
            };
            self.queue(channel, &decl).await?;
            self.bind_queue(channel, &address.name, queue).await?;
        }
        for base in bases {
            self.exchange(channel, &ExchangeDecl::fanout(base, true, false))
                .await?;
            self.bind_exchange(channel, &address.name, base).await?;
        }
        Ok(())
    }
}

/// The exchange a send to `address` declares, and the `bindexchange=` exchanges bound from it.
pub(crate) fn destination_exchanges(
    address: &EndpointAddress,
) -> (ExchangeDecl, Vec<ExchangeDecl>) {
    let mut exchange = ExchangeDecl::fanout(&address.name, address.durable, address.auto_delete);
    exchange.kind.clone_from(&address.exchange_type);
    if let Some(delayed) = &address.delayed_type {
        exchange.arguments.insert(
            "x-delayed-type".into(),
            AMQPValue::LongString(LongString::from(delayed.as_str())),
        );
    }
    if let Some(alternate) = &address.alternate_exchange {
        exchange.arguments.insert(
            "alternate-exchange".into(),
            AMQPValue::LongString(LongString::from(alternate.as_str())),
        );
    }
    // `BindToExchange`: the bound exchange is of the delayed type when there is one, else fanout.
    let bound_kind = address.delayed_type.as_deref().unwrap_or("fanout");
    let bound = address
        .bind_exchanges
        .iter()
        .map(|name| {
            let mut decl = ExchangeDecl::fanout(name, address.durable, address.auto_delete);
            bound_kind.clone_into(&mut decl.kind);
            decl
        })
        .collect();
    (exchange, bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn address_options_shape_the_destination() {
        let address = EndpointAddress::parse(
            "rabbitmq://localhost/orders?alternateexchange=unrouted&bindexchange=audit&delayedtype=direct",
        )
        .unwrap();
        let (exchange, bound) = destination_exchanges(&address);
        assert_eq!(exchange.kind, "x-delayed-message");
        assert_eq!(
            exchange.arguments.inner()["x-delayed-type"],
            AMQPValue::LongString("direct".into())
        );
        assert_eq!(
            exchange.arguments.inner()["alternate-exchange"],
            AMQPValue::LongString("unrouted".into())
        );
        assert_eq!(bound.len(), 1);
        assert_eq!(
            (bound[0].name.as_str(), bound[0].kind.as_str()),
            ("audit", "direct")
        );
        let plain = EndpointAddress::parse("rabbitmq://localhost/orders").unwrap();
        let (exchange, bound) = destination_exchanges(&plain);
        assert_eq!(exchange, ExchangeDecl::fanout("orders", true, false));
        assert!(bound.is_empty());
    }

    #[test]
    fn masstransit_declare_rules() {
        let temp = QueueDecl::for_endpoint(
            "bus",
            &QueueOptions::default()
                .durable(false)
                .auto_delete(true)
                .expires(Duration::from_secs(60)),
        );
        let o = temp.declare_options();
        assert!(!o.durable && !o.auto_delete && o.exclusive);

        let quorum = QueueDecl::for_endpoint(
            "q",
            &QueueOptions::default()
                .queue_type(QueueType::Quorum)
                .durable(false),
        );
        assert!(quorum.declare_options().durable);
        let error = quorum.sibling("q_error".into());
        assert_eq!(error.arguments, quorum.arguments);
        assert!(error.arguments.contains_key("x-queue-type"));
    }
}
