//! `ferrybus topology <endpoint>`: what ferrybus declares for a receive endpoint beside what the
//! broker has, and the differences.
//!
//! The expected side is the transport's own description of the endpoint,
//! [`EndpointTopology`], built from the endpoint as given on the command line (name, consumed
//! types, `--quorum`, queue arguments): the entities and bindings the bus declares when the
//! endpoint starts, and the `Q_error` / `Q_skipped` pairs it declares on the first move there,
//! with the flags and arguments it sends. Nothing about the topology is derived here.
//!
//! The broker side comes from the management API when it answers (exact flags, arguments,
//! bindings); otherwise from AMQP: a passive declare says whether each entity exists (and a
//! queue's counts), and for an existing entity a declare with the expected flags says whether
//! they are equivalent — RabbitMQ refuses a different one with `PRECONDITION_FAILED` and names
//! the argument, and changes nothing either way. Bindings cannot be read over AMQP.

use std::io::Write;

use comfy_table::{presets, Table};

use crate::output::arrangement;
use ferrybus_rabbitmq::convert::amqp_to_json;
use ferrybus_rabbitmq::topology::{
    Arguments, Declaration, DeclaredWhen, EndpointTopology, EntityKind, Exchange, Queue,
};
use ferrybus_rabbitmq::{QueueOptions, QueueType};
use lapin::options::ExchangeDeclareOptions;
use lapin::types::FieldTable;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::amqp::{self, describe, reply_code, Broker, NOT_FOUND, PRECONDITION_FAILED};
use crate::error::CliError;
use crate::management::{segment, Management, Unavailable};

/// How the endpoint is configured (what ferrybus would declare).
#[derive(Clone, Debug, Default)]
pub(crate) struct EndpointSpec {
    /// The endpoint (queue) name.
    pub(crate) name: String,
    /// Message types it consumes, as exchange names (`Bookstore.Contracts:OrderPlaced`).
    pub(crate) consumes: Vec<String>,
    /// A quorum queue.
    pub(crate) quorum: bool,
    /// Queue arguments.
    pub(crate) arguments: Vec<(String, Value)>,
}

impl EndpointSpec {
    /// What the transport declares for the endpoint so configured.
    pub(crate) fn topology(&self) -> EndpointTopology {
        let mut options = QueueOptions::default();
        if self.quorum {
            options = options.queue_type(QueueType::Quorum);
        }
        for (name, value) in &self.arguments {
            options = options.argument(name.clone(), value.clone());
        }
        EndpointTopology::new(&self.name, &options, &self.consumes)
    }
}

/// An exchange or queue as the tool compares it: what ferrybus declares, or what the management
/// API reports.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Declared {
    /// `exchange` or `queue`.
    pub(crate) kind: &'static str,
    /// Its name.
    pub(crate) name: String,
    /// The exchange type (exchanges only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exchange_type: Option<String>,
    /// Durable.
    pub(crate) durable: bool,
    /// Auto-delete.
    pub(crate) auto_delete: bool,
    /// Exclusive (queues only).
    pub(crate) exclusive: bool,
    /// Arguments.
    pub(crate) arguments: Map<String, Value>,
    /// Declared only on first use (`_error`, `_skipped`).
    pub(crate) lazy: bool,
}

impl Declared {
    fn exchange(exchange: &Exchange, lazy: bool) -> Self {
        let flags = exchange.declare_options();
        Self {
            kind: EntityKind::Exchange.as_str(),
            name: exchange.name().to_owned(),
            exchange_type: Some(exchange.kind().to_owned()),
            durable: flags.durable,
            auto_delete: flags.auto_delete,
            exclusive: false,
            arguments: arguments_json(exchange.arguments()),
            lazy,
        }
    }

    fn queue(queue: &Queue, lazy: bool) -> Self {
        let flags = queue.declare_options();
        Self {
            kind: EntityKind::Queue.as_str(),
            name: queue.name().to_owned(),
            exchange_type: None,
            durable: flags.durable,
            auto_delete: flags.auto_delete,
            exclusive: flags.exclusive,
            arguments: arguments_json(queue.arguments()),
            lazy,
        }
    }
}

/// Declaration arguments as JSON, in the order the transport sets them.
fn arguments_json(arguments: &Arguments) -> Map<String, Value> {
    arguments
        .iter()
        .filter_map(|(name, value)| amqp_to_json(value).map(|v| (name.to_owned(), v)))
        .collect()
}

/// An entity ferrybus declares: the transport's declaration and the tool's view of it.
pub(crate) struct Expected<'a> {
    /// The view compared and printed.
    pub(crate) view: Declared,
    /// What the transport declares (for the equivalence declare over AMQP).
    entity: Entity<'a>,
}

/// The transport's declaration of an exchange or a queue.
enum Entity<'a> {
    Exchange(&'a Exchange),
    Queue(&'a Queue),
}

/// A binding ferrybus declares (routing key `""`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Binding {
    /// The source exchange.
    pub(crate) source: String,
    /// The destination.
    pub(crate) destination: String,
    /// `queue` or `exchange`.
    pub(crate) destination_type: &'static str,
    /// Declared only on first use.
    pub(crate) lazy: bool,
}

/// What ferrybus declares for the endpoint: the transport's entities and bindings, in the order
/// it declares them.
pub(crate) fn expected(topology: &EndpointTopology) -> (Vec<Expected<'_>>, Vec<Binding>) {
    let mut entities = Vec::new();
    let mut bindings = Vec::new();
    for (declaration, when) in topology.declarations() {
        let lazy = when == DeclaredWhen::FirstMove;
        match declaration {
            Declaration::Exchange(e) => entities.push(Expected {
                view: Declared::exchange(e, lazy),
                entity: Entity::Exchange(e),
            }),
            Declaration::Queue(q) => entities.push(Expected {
                view: Declared::queue(q, lazy),
                entity: Entity::Queue(q),
            }),
            Declaration::Binding(b) => bindings.push(Binding {
                source: b.source().to_owned(),
                destination: b.destination().to_owned(),
                destination_type: b.destination_kind().as_str(),
                lazy,
            }),
        }
    }
    (entities, bindings)
}

/// One row of the comparison.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Row {
    /// `exchange`, `queue` or `binding`.
    pub(crate) kind: &'static str,
    /// The entity (`source → destination` for bindings).
    pub(crate) name: String,
    /// What ferrybus declares, in words.
    pub(crate) expected: String,
    /// What the broker has, in words.
    pub(crate) actual: String,
    /// `ok`, `missing`, `differs`, `not declared yet`, `extra`, `unknown`.
    pub(crate) status: &'static str,
}

impl Row {
    fn is_difference(&self) -> bool {
        matches!(self.status, "missing" | "differs")
    }
}

fn describe_declared(d: &Declared) -> String {
    let mut parts = Vec::new();
    if let Some(t) = &d.exchange_type {
        parts.push(t.to_owned());
    }
    parts.push(if d.durable { "durable" } else { "transient" }.to_owned());
    if d.auto_delete {
        parts.push("auto-delete".into());
    }
    if d.exclusive {
        parts.push("exclusive".into());
    }
    for (k, v) in &d.arguments {
        parts.push(format!("{k}={}", plain(v)));
    }
    parts.join(", ")
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What the broker says about an entity over AMQP.
enum AmqpFinding {
    Missing,
    Matches(String),
    Differs(String),
}

async fn amqp_exchange(broker: &Broker, d: &Exchange) -> Result<AmqpFinding, CliError> {
    let name = amqp::short(d.name())?;
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..ExchangeDeclareOptions::default()
    };
    let channel = broker.channel().await?;
    match channel
        .exchange_declare(
            name.clone(),
            d.exchange_kind(),
            passive,
            FieldTable::default(),
        )
        .await
    {
        Ok(()) => amqp::close(&channel).await,
        Err(e) if reply_code(&e) == Some(NOT_FOUND) => return Ok(AmqpFinding::Missing),
        Err(e) => {
            return Err(CliError::broker(
                format!("looking up exchange {}", d.name()),
                describe(&e),
            ))
        }
    }
    let channel = broker.channel().await?;
    match channel
        .exchange_declare(
            name,
            d.exchange_kind(),
            d.declare_options(),
            d.arguments().to_field_table(),
        )
        .await
    {
        Ok(()) => {
            amqp::close(&channel).await;
            Ok(AmqpFinding::Matches("exists, equivalent".into()))
        }
        Err(e) if reply_code(&e) == Some(PRECONDITION_FAILED) => {
            Ok(AmqpFinding::Differs(describe(&e)))
        }
        Err(e) => Err(CliError::broker(
            format!("comparing exchange {}", d.name()),
            describe(&e),
        )),
    }
}

async fn amqp_queue(broker: &Broker, d: &Queue) -> Result<AmqpFinding, CliError> {
    let Some(counts) = broker.queue_counts(d.name()).await? else {
        return Ok(AmqpFinding::Missing);
    };
    let counts = format!(
        "{} messages, {} consumers",
        counts.messages, counts.consumers
    );
    let channel = broker.channel().await?;
    match channel
        .queue_declare(
            amqp::short(d.name())?,
            d.declare_options(),
            d.arguments().to_field_table(),
        )
        .await
    {
        Ok(_) => {
            amqp::close(&channel).await;
            Ok(AmqpFinding::Matches(format!(
                "exists, equivalent; {counts}"
            )))
        }
        Err(e) if reply_code(&e) == Some(PRECONDITION_FAILED) => {
            Ok(AmqpFinding::Differs(format!("{}; {counts}", describe(&e))))
        }
        Err(e) => Err(CliError::broker(
            format!("comparing queue {}", d.name()),
            describe(&e),
        )),
    }
}

/// An entity as the management API describes it.
fn management_entity(value: &Value, kind: &str) -> Declared {
    let b = |k: &str| value.get(k).and_then(Value::as_bool).unwrap_or(false);
    let mut arguments = value
        .get("arguments")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    // Newer brokers report the classic default explicitly; ferrybus sends nothing for it.
    if arguments.get("x-queue-type").and_then(Value::as_str) == Some("classic") {
        arguments.remove("x-queue-type");
    }
    Declared {
        kind: if kind == "queue" { "queue" } else { "exchange" },
        name: value
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        exchange_type: if kind == "queue" {
            None
        } else {
            Some(
                match value.get("type").and_then(Value::as_str) {
                    Some("fanout") => "fanout",
                    Some("direct") => "direct",
                    Some("topic") => "topic",
                    Some("headers") => "headers",
                    _ => "other",
                }
                .to_owned(),
            )
        },
        durable: b("durable"),
        auto_delete: b("auto_delete"),
        exclusive: b("exclusive"),
        arguments,
        lazy: false,
    }
}

fn same(expected: &Declared, actual: &Declared) -> bool {
    expected.exchange_type == actual.exchange_type
        && expected.durable == actual.durable
        && expected.auto_delete == actual.auto_delete
        && expected.exclusive == actual.exclusive
        && expected.arguments == actual.arguments
}

/// The full comparison.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Comparison {
    /// The endpoint.
    pub(crate) endpoint: String,
    /// The broker, password masked.
    pub(crate) broker: String,
    /// The vhost.
    pub(crate) vhost: String,
    /// `management API` or `AMQP`.
    pub(crate) source: String,
    /// Why the management API was not used, if it was not.
    pub(crate) management_unavailable: Option<String>,
    /// One row per entity and binding.
    pub(crate) rows: Vec<Row>,
    /// How many rows are `missing` or `differs`.
    pub(crate) differences: usize,
}

/// Compares what ferrybus declares for `spec` with the broker.
pub(crate) async fn compare(
    broker: &Broker,
    amqp_url: &str,
    management_url: Option<&str>,
    spec: &EndpointSpec,
) -> Result<Comparison, CliError> {
    let topology = spec.topology();
    let (entities, bindings) = expected(&topology);
    let management = Management::new(amqp_url, management_url)
        .and_then(|m| tokio::task::block_in_place(|| m.probe()).map(|()| m));
    let vhost = broker.vhost().to_owned();
    let mut rows = Vec::new();
    let (source, unavailable) = match management {
        Ok(m) => {
            tokio::task::block_in_place(|| {
                compare_with_management(&m, &vhost, &topology, &entities, &bindings, &mut rows)
            })
            .map_err(|u| CliError::broker(format!("the management API at {}", u.url), u.reason))?;
            (format!("management API at {}", m.url()), None)
        }
        Err(Unavailable { url, reason }) => {
            for Expected { view: d, entity } in &entities {
                let finding = match entity {
                    Entity::Queue(q) => amqp_queue(broker, q).await?,
                    Entity::Exchange(e) => amqp_exchange(broker, e).await?,
                };
                let (actual, status) = match finding {
                    AmqpFinding::Missing if d.lazy => ("absent".to_owned(), "not declared yet"),
                    AmqpFinding::Missing => ("absent".to_owned(), "missing"),
                    AmqpFinding::Matches(text) => (text, "ok"),
                    AmqpFinding::Differs(text) => (text, "differs"),
                };
                rows.push(Row {
                    kind: d.kind,
                    name: d.name.clone(),
                    expected: describe_declared(d),
                    actual,
                    status,
                });
            }
            for b in &bindings {
                // A lazy pair's binding is declared with its queue: unknown once that exists.
                let declared = rows
                    .iter()
                    .any(|r| r.kind == "queue" && r.name == b.destination && r.actual != "absent");
                rows.push(Row {
                    kind: "binding",
                    name: binding_name(&b.source, b.destination_type, &b.destination),
                    expected: "bound".into(),
                    actual: "not visible over AMQP".into(),
                    status: if b.lazy && !declared {
                        "not declared yet"
                    } else {
                        "unknown"
                    },
                });
            }
            (
                "AMQP (passive and equivalent declares)".to_owned(),
                Some(format!("management API not available at {url}: {reason}")),
            )
        }
    };
    let differences = rows.iter().filter(|r| r.is_difference()).count();
    Ok(Comparison {
        endpoint: spec.name.clone(),
        broker: broker.shown_url().to_owned(),
        vhost,
        source,
        management_unavailable: unavailable,
        rows,
        differences,
    })
}

fn compare_with_management(
    m: &Management,
    vhost: &str,
    topology: &EndpointTopology,
    entities: &[Expected<'_>],
    bindings: &[Binding],
    rows: &mut Vec<Row>,
) -> Result<(), Unavailable> {
    let v = segment(vhost);
    let mut present = std::collections::HashSet::new();
    for Expected { view: d, .. } in entities {
        let path = match d.kind {
            "queue" => format!("queues/{v}/{}", segment(&d.name)),
            _ => format!("exchanges/{v}/{}", segment(&d.name)),
        };
        let (actual, status) = match m.get(&path)? {
            None if d.lazy => ("absent".to_owned(), "not declared yet"),
            None => ("absent".to_owned(), "missing"),
            Some(value) => {
                present.insert((d.kind, d.name.clone()));
                let found = management_entity(&value, d.kind);
                let mut text = describe_declared(&found);
                if d.kind == "queue" {
                    let n = |k: &str| value.get(k).and_then(Value::as_u64).unwrap_or(0);
                    text = format!(
                        "{text}; {} messages, {} consumers",
                        n("messages"),
                        n("consumers")
                    );
                }
                (text, if same(d, &found) { "ok" } else { "differs" })
            }
        };
        rows.push(Row {
            kind: d.kind,
            name: d.name.clone(),
            expected: describe_declared(d),
            actual,
            status,
        });
    }
    // Bindings: the endpoint exchange's and the error/skipped exchanges' outgoing ones, and
    // every binding into the endpoint exchange.
    let mut seen = Vec::new();
    let mut actual_bindings: Vec<(String, String, String)> = Vec::new();
    let exchange = |pair: &ferrybus_rabbitmq::topology::BoundQueue| segment(pair.exchange().name());
    let endpoint = exchange(topology.endpoint());
    for path in [
        format!("exchanges/{v}/{endpoint}/bindings/destination"),
        format!("exchanges/{v}/{endpoint}/bindings/source"),
        format!(
            "exchanges/{v}/{}/bindings/source",
            exchange(topology.error())
        ),
        format!(
            "exchanges/{v}/{}/bindings/source",
            exchange(topology.skipped())
        ),
    ] {
        if let Some(Value::Array(list)) = m.get(&path)? {
            for b in list {
                let s = |k: &str| {
                    b.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let key = (s("source"), s("destination"), s("destination_type"));
                if !key.0.is_empty() && !actual_bindings.contains(&key) {
                    actual_bindings.push(key);
                }
            }
        }
    }
    for b in bindings {
        let key = (
            b.source.clone(),
            b.destination.clone(),
            b.destination_type.to_owned(),
        );
        let found = actual_bindings.contains(&key);
        seen.push(key);
        let status = match (found, b.lazy) {
            (true, _) => "ok",
            (false, true) => "not declared yet",
            (false, false) => "missing",
        };
        rows.push(Row {
            kind: "binding",
            name: binding_name(&b.source, b.destination_type, &b.destination),
            expected: "bound".into(),
            actual: if found {
                "bound".into()
            } else {
                "absent".into()
            },
            status,
        });
    }
    for key in actual_bindings.into_iter().filter(|k| !seen.contains(k)) {
        rows.push(Row {
            kind: "binding",
            name: binding_name(&key.0, &key.2, &key.1),
            expected: "-".into(),
            actual: "bound".into(),
            status: "extra",
        });
    }
    Ok(())
}

fn binding_name(source: &str, destination_type: &str, destination: &str) -> String {
    format!("{source} → {destination_type} {destination}")
}

/// Prints `comparison` for people.
pub(crate) fn print(out: &mut impl Write, c: &Comparison) -> Result<(), CliError> {
    writeln!(
        out,
        "endpoint {} on {} (vhost {}), read through {}",
        c.endpoint, c.broker, c.vhost, c.source
    )?;
    if let Some(reason) = &c.management_unavailable {
        writeln!(out, "{reason}; bindings were not compared")?;
    }
    let mut table = Table::new();
    table
        .load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(arrangement())
        .set_header(["", "name", "ferrybus declares", "broker has", "status"]);
    for r in &c.rows {
        table.add_row([
            r.kind,
            r.name.as_str(),
            r.expected.as_str(),
            r.actual.as_str(),
            r.status,
        ]);
    }
    writeln!(out, "{table}")?;
    match c.differences {
        0 => writeln!(out, "no differences")?,
        1 => writeln!(out, "1 difference")?,
        n => writeln!(out, "{n} differences")?,
    }
    Ok(())
}

/// `comparison` as one JSON document.
pub(crate) fn to_json(c: &Comparison) -> Value {
    json!(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_side_is_what_the_transport_declares() {
        let spec = EndpointSpec {
            name: "billing-invoice".into(),
            consumes: vec!["Bookstore.Contracts:OrderPlaced".into()],
            quorum: true,
            arguments: vec![("x-delivery-limit".into(), Value::from(20))],
        };
        let topology = spec.topology();
        let (entities, bindings) = expected(&topology);
        let names: Vec<_> = entities
            .iter()
            .map(|e| format!("{} {}", e.view.kind, e.view.name))
            .collect();
        assert_eq!(
            names,
            [
                "exchange billing-invoice",
                "queue billing-invoice",
                "exchange Bookstore.Contracts:OrderPlaced",
                "exchange billing-invoice_error",
                "queue billing-invoice_error",
                "exchange billing-invoice_skipped",
                "queue billing-invoice_skipped",
            ]
        );
        let queue = &entities[1].view;
        assert!(queue.durable && !queue.auto_delete && !queue.exclusive);
        assert_eq!(
            describe_declared(queue),
            "durable, x-queue-type=quorum, x-delivery-limit=20"
        );
        assert_eq!(describe_declared(&entities[0].view), "fanout, durable");
        assert_eq!(
            entities[4].view.arguments, queue.arguments,
            "the error queue copies the arguments"
        );
        assert!(entities[4].view.lazy && !entities[2].view.lazy);
        let b: Vec<_> = bindings
            .iter()
            .map(|b| format!("{}→{}:{}", b.source, b.destination_type, b.destination))
            .collect();
        assert_eq!(
            b,
            [
                "billing-invoice→queue:billing-invoice",
                "Bookstore.Contracts:OrderPlaced→exchange:billing-invoice",
                "billing-invoice_error→queue:billing-invoice_error",
                "billing-invoice_skipped→queue:billing-invoice_skipped",
            ]
        );
        assert!(bindings[2].lazy && !bindings[1].lazy);
    }

    #[test]
    fn reads_management_entities() {
        let q = management_entity(
            &json!({"name": "q", "durable": true, "auto_delete": false, "exclusive": false,
                    "arguments": {"x-queue-type": "classic"}, "messages": 3}),
            "queue",
        );
        let topology = EndpointSpec {
            name: "q".into(),
            ..EndpointSpec::default()
        }
        .topology();
        let (entities, _) = expected(&topology);
        assert!(same(&entities[1].view, &q));
        let e = management_entity(
            &json!({"name": "q", "type": "direct", "durable": true}),
            "exchange",
        );
        assert!(!same(&entities[0].view, &e));
        let fanout = management_entity(
            &json!({"name": "q", "type": "fanout", "durable": true}),
            "exchange",
        );
        assert!(same(&entities[0].view, &fanout));
    }
}
