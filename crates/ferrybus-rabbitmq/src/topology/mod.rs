//! The topology the transport declares, with MassTransit's flags (masstransit-wire §4): the
//! public description of a receive endpoint's entities and bindings ([`EndpointTopology`]), which
//! the transport declares from and tools compare the broker with, and the declarations made
//! once per connection.

mod endpoint;
mod entity;

use std::collections::HashSet;
use std::sync::Mutex;

use ferrybus_core::integration::EndpointAddress;
use lapin::options::{ExchangeBindOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

use crate::channel::Declarer;
use crate::error::{ErrorKind, RabbitMqError, Result};

pub use endpoint::{BoundQueue, Declaration, DeclaredWhen, EndpointTopology};
pub use entity::{Arguments, Binding, EntityKind, Exchange, Queue};

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
    pub(crate) async fn exchange(&self, on: Declarer<'_>, d: &Exchange) -> Result<()> {
        if self.is_declared(&d.key()) {
            return Ok(());
        }
        let name = short(&d.name)?;
        on.run(
            || format!("declaring exchange {:?}", d.name),
            |channel| {
                let name = name.clone();
                async move {
                    channel
                        .exchange_declare(
                            name,
                            d.exchange_kind(),
                            d.declare_options(),
                            d.arguments.to_field_table(),
                        )
                        .await
                }
            },
        )
        .await?;
        tracing::debug!(target: "ferrybus::rabbitmq", exchange = %d.name, kind = %d.kind, durable = d.durable, "declared exchange");
        self.remember(d.key());
        Ok(())
    }

    /// Declares a queue unless it was declared on this connection.
    pub(crate) async fn queue(&self, on: Declarer<'_>, d: &Queue) -> Result<()> {
        if self.is_declared(&d.key()) {
            return Ok(());
        }
        self.queue_always(on, d).await?;
        self.remember(d.key());
        Ok(())
    }

    /// Declares a queue even if it was declared before (resets an `x-expires` timer).
    pub(crate) async fn queue_always(&self, on: Declarer<'_>, d: &Queue) -> Result<()> {
        let name = short(&d.name)?;
        on.run(
            || format!("declaring queue {:?}", d.name),
            |channel| {
                let name = name.clone();
                async move {
                    channel
                        .queue_declare(name, d.declare_options(), d.arguments.to_field_table())
                        .await
                        .map(drop)
                }
            },
        )
        .await?;
        tracing::debug!(target: "ferrybus::rabbitmq", queue = %d.name, durable = d.durable, "declared queue");
        Ok(())
    }

    /// Binds exchange `exchange` to queue `queue` (routing key `""`).
    pub(crate) async fn bind_queue(
        &self,
        on: Declarer<'_>,
        exchange: &str,
        queue: &str,
    ) -> Result<()> {
        let key = format!("bq:{exchange}\u{0}{queue}");
        if self.is_declared(&key) {
            return Ok(());
        }
        let (queue_name, exchange_name) = (short(queue)?, short(exchange)?);
        on.run(
            || format!("binding {exchange:?} to queue {queue:?}"),
            |channel| {
                let (queue, exchange) = (queue_name.clone(), exchange_name.clone());
                async move {
                    let options = QueueBindOptions::default();
                    channel
                        .queue_bind(queue, exchange, "".into(), options, FieldTable::default())
                        .await
                }
            },
        )
        .await?;
        self.remember(key);
        Ok(())
    }

    /// Binds exchange `source` to exchange `destination` (routing key `""`).
    pub(crate) async fn bind_exchange(
        &self,
        on: Declarer<'_>,
        source: &str,
        destination: &str,
    ) -> Result<()> {
        let key = format!("be:{source}\u{0}{destination}");
        if self.is_declared(&key) {
            return Ok(());
        }
        let (destination_name, source_name) = (short(destination)?, short(source)?);
        on.run(
            || format!("binding {source:?} to exchange {destination:?}"),
            |channel| {
                let (destination, source) = (destination_name.clone(), source_name.clone());
                async move {
                    let options = ExchangeBindOptions::default();
                    channel
                        .exchange_bind(
                            destination,
                            source,
                            "".into(),
                            options,
                            FieldTable::default(),
                        )
                        .await
                }
            },
        )
        .await?;
        self.remember(key);
        Ok(())
    }

    /// Declares one entity or binding (unless it was declared on this connection).
    pub(crate) async fn declare(&self, on: Declarer<'_>, d: Declaration<'_>) -> Result<()> {
        match d {
            Declaration::Exchange(exchange) => self.exchange(on, exchange).await,
            Declaration::Queue(queue) => self.queue(on, queue).await,
            Declaration::Binding(b) => match b.destination_kind {
                EntityKind::Queue => self.bind_queue(on, &b.source, &b.destination).await,
                EntityKind::Exchange => self.bind_exchange(on, &b.source, &b.destination).await,
            },
        }
    }

    /// What a receive endpoint declares when it starts ([`EndpointTopology::on_start`]).
    pub(crate) async fn endpoint(
        &self,
        on: Declarer<'_>,
        topology: &EndpointTopology,
    ) -> Result<()> {
        for d in topology.on_start() {
            self.declare(on, d).await?;
        }
        Ok(())
    }

    /// An exchange + queue pair (`_error`, `_skipped`), declared on the first move there.
    pub(crate) async fn bound_queue(&self, on: Declarer<'_>, pair: &BoundQueue) -> Result<()> {
        for d in pair.declarations() {
            self.declare(on, d).await?;
        }
        Ok(())
    }

    /// Whatever a send to `address` needs: its exchange (flags, type, `x-delayed-type` and
    /// `alternate-exchange` from the address), the bound queue for `bind=true`, the
    /// `bindexchange=` exchanges bound from it, and base-type exchanges bound from it for
    /// publishes — MassTransit's `RabbitMqSendSettings`
    /// (`src/Transports/MassTransit.RabbitMqTransport/RabbitMqTransport/Topology/RabbitMqSendSettings.cs`).
    pub(crate) async fn destination(
        &self,
        on: Declarer<'_>,
        address: &EndpointAddress,
        bases: &[String],
    ) -> Result<()> {
        let (exchange, bound) = destination_exchanges(address);
        self.exchange(on, &exchange).await?;
        for decl in &bound {
            self.exchange(on, decl).await?;
            self.bind_exchange(on, &address.name, &decl.name).await?;
        }
        if let Some(queue) = address.queue.as_deref().filter(|_| address.bind) {
            let decl = Queue {
                name: queue.to_owned(),
                durable: address.durable,
                auto_delete: address.auto_delete,
                exclusive: false,
                arguments: Arguments::default(),
            };
            self.queue(on, &decl).await?;
            self.bind_queue(on, &address.name, queue).await?;
        }
        for base in bases {
            self.exchange(on, &Exchange::fanout(base, true, false))
                .await?;
            self.bind_exchange(on, &address.name, base).await?;
        }
        Ok(())
    }
}

/// The exchange a send to `address` declares, and the `bindexchange=` exchanges bound from it.
pub(crate) fn destination_exchanges(address: &EndpointAddress) -> (Exchange, Vec<Exchange>) {
    let mut exchange = Exchange::fanout(&address.name, address.durable, address.auto_delete);
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
            let mut decl = Exchange::fanout(name, address.durable, address.auto_delete);
            bound_kind.clone_into(&mut decl.kind);
            decl
        })
        .collect();
    (exchange, bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{ErrorQueueArguments, QueueEndpointExt, QueueOptions, QueueType};
    use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig};
    use ferrybus_core::{Message, MessageType};
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
            exchange.arguments.get("x-delayed-type"),
            Some(&AMQPValue::LongString("direct".into()))
        );
        assert_eq!(
            exchange.arguments.get("alternate-exchange"),
            Some(&AMQPValue::LongString("unrouted".into()))
        );
        assert_eq!(bound.len(), 1);
        assert_eq!(
            (bound[0].name.as_str(), bound[0].kind.as_str()),
            ("audit", "direct")
        );
        let plain = EndpointAddress::parse("rabbitmq://localhost/orders").unwrap();
        let (exchange, bound) = destination_exchanges(&plain);
        assert_eq!(exchange, Exchange::fanout("orders", true, false));
        assert!(bound.is_empty());
    }

    #[test]
    fn masstransit_declare_rules() {
        let temp = Queue::for_endpoint(
            "bus",
            &QueueOptions::default()
                .durable(false)
                .auto_delete(true)
                .expires(Duration::from_secs(60)),
        );
        let o = temp.declare_options();
        assert!(!o.durable && !o.auto_delete && o.exclusive);

        let quorum = Queue::for_endpoint(
            "q",
            &QueueOptions::default()
                .queue_type(QueueType::Quorum)
                .durable(false),
        );
        assert!(quorum.declare_options().durable);
        let error = quorum.sibling("q_error".into(), ErrorQueueArguments::Inherit);
        assert_eq!(error.arguments, quorum.arguments);
        assert!(error.arguments.contains_key("x-queue-type"));
    }

    /// Each declaration as `when kind name` (bindings `source→destination`).
    fn described(topology: &EndpointTopology) -> Vec<String> {
        topology
            .declarations()
            .into_iter()
            .map(|(d, when)| {
                let when = match when {
                    DeclaredWhen::Start => "start",
                    DeclaredWhen::FirstMove => "lazy",
                };
                match d {
                    Declaration::Exchange(e) => format!("{when} exchange {}", e.name()),
                    Declaration::Queue(q) => format!("{when} queue {}", q.name()),
                    Declaration::Binding(b) => format!(
                        "{when} bind {}→{} {}",
                        b.source(),
                        b.destination_kind().as_str(),
                        b.destination()
                    ),
                }
            })
            .collect()
    }

    #[test]
    fn an_endpoint_declares_what_masstransit_declares_in_order() {
        let options = QueueOptions::default()
            .queue_type(QueueType::Quorum)
            .argument("x-delivery-limit", 20);
        let topology = EndpointTopology::new("billing-invoice", &options, ["Shop:OrderPlaced"]);
        assert_eq!(
            described(&topology),
            [
                "start exchange billing-invoice",
                "start queue billing-invoice",
                "start bind billing-invoice→queue billing-invoice",
                "start exchange Shop:OrderPlaced",
                "start bind Shop:OrderPlaced→exchange billing-invoice",
                "lazy exchange billing-invoice_error",
                "lazy queue billing-invoice_error",
                "lazy bind billing-invoice_error→queue billing-invoice_error",
                "lazy exchange billing-invoice_skipped",
                "lazy queue billing-invoice_skipped",
                "lazy bind billing-invoice_skipped→queue billing-invoice_skipped",
            ]
        );
        let queue = topology.queue();
        let names: Vec<_> = queue.arguments().iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["x-queue-type", "x-delivery-limit"]);
        assert_eq!(
            queue.arguments().get("x-delivery-limit"),
            Some(&AMQPValue::LongLongInt(20))
        );
        for pair in [topology.error(), topology.skipped()] {
            assert_eq!(pair.queue().arguments(), queue.arguments());
            assert_eq!(pair.queue().declare_options(), queue.declare_options());
            assert_eq!(pair.exchange().kind(), "fanout");
            assert!(pair.exchange().declare_options().durable);
        }
        let (exchange, binding) = topology.message_types().next().unwrap();
        assert_eq!(exchange, &Exchange::fanout("Shop:OrderPlaced", true, false));
        assert_eq!(binding.destination_kind(), EntityKind::Exchange);
    }

    #[test]
    fn error_queues_inherit_every_argument_unless_told_to_keep_their_messages() {
        let options = QueueOptions::default()
            .queue_type(QueueType::Quorum)
            .delivery_limit(5)
            .argument("x-message-ttl", 60_000)
            .argument("x-max-length", 100)
            .argument("x-overflow", "reject-publish")
            .argument("x-dead-letter-exchange", "graveyard")
            .expires(Duration::from_secs(3600));
        let names = |q: &Queue| {
            q.arguments()
                .iter()
                .map(|(n, _)| n.to_owned())
                .collect::<Vec<_>>()
        };
        let inherited = EndpointTopology::new("orders", &options, Vec::<String>::new());
        for pair in [inherited.error(), inherited.skipped()] {
            assert_eq!(pair.queue().arguments(), inherited.queue().arguments());
            assert_eq!(
                pair.queue()
                    .message_dropping_arguments()
                    .collect::<Vec<_>>(),
                [
                    "x-message-ttl",
                    "x-max-length",
                    "x-overflow",
                    "x-dead-letter-exchange",
                    "x-expires"
                ]
            );
        }
        let kept = EndpointTopology::new(
            "orders",
            &options.error_queue_arguments(ErrorQueueArguments::KeepMessages),
            Vec::<String>::new(),
        );
        assert_eq!(
            kept.queue(),
            inherited.queue(),
            "the queue itself is unchanged"
        );
        for pair in [kept.error(), kept.skipped()] {
            assert_eq!(names(pair.queue()), ["x-queue-type", "x-delivery-limit"]);
            assert_eq!(pair.queue().message_dropping_arguments().count(), 0);
            assert!(pair.queue().declare_options().durable);
        }
    }

    #[test]
    fn a_temporary_endpoint_passes_its_flags_on_but_not_exclusivity() {
        let options = QueueOptions::default()
            .durable(false)
            .auto_delete(true)
            .exclusive(true);
        let topology = EndpointTopology::new("temp", &options, Vec::<String>::new());
        let exchange = topology.endpoint().exchange().declare_options();
        assert!(!exchange.durable && exchange.auto_delete);
        let error = topology.error();
        assert_eq!(error.queue().name(), "temp_error");
        let flags = error.queue().declare_options();
        assert!(!flags.durable && flags.auto_delete);
        // Not exclusive by configuration, but a non-durable auto-delete queue always is.
        assert!(flags.exclusive);
        assert!(!error.queue().exclusive);
        assert!(error.exchange().declare_options().auto_delete);
        assert_eq!(topology.on_start().len(), 3);
    }

    #[test]
    fn arguments_keep_their_order_and_only_what_amqp_can_carry() {
        let options = QueueOptions::default()
            .argument("x-single-active-consumer", true)
            .argument("x-max-length-bytes", 1.5)
            .argument("x-queue-mode", "lazy")
            .argument("x-dropped", serde_json::Value::Null)
            .argument("x".repeat(300), 1)
            .argument("x-single-active-consumer", false);
        let arguments = Arguments::for_queue(&options);
        let set: Vec<_> = arguments
            .iter()
            .map(|(n, v)| (n.to_owned(), v.clone()))
            .collect();
        assert_eq!(
            set,
            [
                ("x-max-length-bytes".to_owned(), AMQPValue::Double(1.5)),
                (
                    "x-queue-mode".to_owned(),
                    AMQPValue::LongString("lazy".into())
                ),
                (
                    "x-single-active-consumer".to_owned(),
                    AMQPValue::Boolean(false)
                ),
            ]
        );
        let mut replaced = arguments.clone();
        replaced.insert(
            "x-queue-mode".into(),
            AMQPValue::LongString("default".into()),
        );
        assert_eq!(replaced.iter().nth(1).map(|(n, _)| n), Some("x-queue-mode"));
        let table = arguments.to_field_table();
        assert_eq!(table.inner().len(), 3);
        assert_eq!(
            table.inner().get("x-max-length-bytes"),
            Some(&AMQPValue::Double(1.5))
        );
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Probe {}

    impl Message for Probe {
        fn message_type() -> MessageType {
            MessageType::parse("Shop.Contracts:Probe").unwrap()
        }
    }

    #[test]
    fn the_bus_topology_of_an_endpoint_follows_its_configuration() {
        let endpoint = EndpointConfig::new("audit").quorum().consumer(consumer_fn(
            "ProbeConsumer",
            |_: ConsumeContext<Probe>| async { Ok::<_, ConsumeError>(()) },
        ));
        let topology = EndpointTopology::for_endpoint(&endpoint);
        let types: Vec<_> = topology.message_types().map(|(e, _)| e.name()).collect();
        assert_eq!(types, ["Shop.Contracts:Probe"]);
        assert!(topology.queue().arguments().contains_key("x-queue-type"));
        let unbound = EndpointTopology::for_endpoint(&endpoint.bind_message_types(false));
        assert_eq!(unbound.message_types().count(), 0);
    }
}
