//! MassTransit endpoint addresses: `rabbitmq://host/vhost/name?options`, `queue:name`,
//! `exchange:name` (masstransit-wire §4.4); and [`redact`], which keeps the passwords of URLs out
//! of every log line and message.

use std::fmt;
use std::sync::Arc;

use url::Url;

use crate::shared_text::TextCache;

pub use crate::secrets::{redact, url_passwords};

/// An address that cannot be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid address {address:?}: {reason}")]
pub struct AddressError {
    address: String,
    reason: String,
}

impl AddressError {
    fn new(address: &str, reason: impl Into<String>) -> Self {
        Self {
            address: address.to_owned(),
            reason: reason.into(),
        }
    }
}

/// The base address of a bus: scheme, host, port and virtual host, e.g. `rabbitmq://localhost/`
/// or `rabbitmq://broker:5673/sales/`. Addresses of exchanges and queues are built from it.
///
/// ```
/// use ferrybus_core::address::HostAddress;
/// let host = HostAddress::new("rabbitmq", "localhost", None, "/");
/// assert_eq!(host.entity_address("billing-invoice"), "rabbitmq://localhost/billing-invoice");
/// assert_eq!(host.resolve("queue:orders").unwrap(), "rabbitmq://localhost/orders?bind=true");
/// assert_eq!(host.resolve("exchange:Contracts:OrderPlaced").unwrap(),
///            "rabbitmq://localhost/Contracts:OrderPlaced");
///
/// let sales = HostAddress::new("rabbitmq", "broker", Some(5673), "sales");
/// assert_eq!(sales.entity_address("q"), "rabbitmq://broker:5673/sales/q");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostAddress {
    scheme: String,
    vhost: String,
    /// `scheme://host[:port]/[vhost/]`, made once: every address on this host starts with it.
    base: String,
}

impl HostAddress {
    /// A host address. `vhost` `/` (or empty) means the default virtual host; default ports
    /// (5672, 5671) are left out, as MassTransit formats them.
    pub fn new(scheme: &str, host: &str, port: Option<u16>, vhost: &str) -> Self {
        let vhost = vhost.trim_matches('/');
        let mut base = format!("{scheme}://{host}");
        if let Some(port) = port.filter(|p| *p != 5672 && *p != 5671) {
            base.push_str(&format!(":{port}"));
        }
        base.push('/');
        if !vhost.is_empty() {
            base.push_str(vhost);
            base.push('/');
        }
        Self {
            scheme: scheme.to_owned(),
            vhost: vhost.to_owned(),
            base,
        }
    }

    /// The in-memory transport's host, `loopback://localhost/`.
    pub fn loopback() -> Self {
        Self::new("loopback", "localhost", None, "/")
    }

    /// The virtual host (empty for the default).
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// The scheme (`rabbitmq`, `loopback`).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The address of an exchange or queue named `name` on this host.
    pub fn entity_address(&self, name: &str) -> String {
        let mut address = String::with_capacity(self.base.len() + name.len());
        address.push_str(&self.base);
        address.push_str(name);
        address
    }

    /// Resolves what a user passes to `send`: a full URI, `queue:name` (declares and binds the
    /// queue), `exchange:name`, or a bare name (the exchange of that name).
    pub fn resolve(&self, address: &str) -> Result<String, AddressError> {
        if let Some(name) = address.strip_prefix("queue:") {
            return Ok(format!(
                "{}?bind=true",
                self.entity_address(checked(address, name)?)
            ));
        }
        if let Some(name) = address.strip_prefix("exchange:") {
            return Ok(self.entity_address(checked(address, name)?));
        }
        if address.contains("://") {
            EndpointAddress::parse(address)?;
            return Ok(address.to_owned());
        }
        Ok(self.entity_address(checked(address, address)?))
    }
}

fn checked<'a>(address: &str, name: &'a str) -> Result<&'a str, AddressError> {
    if name.is_empty() {
        return Err(AddressError::new(address, "the entity name is empty"));
    }
    if !name
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    {
        return Err(AddressError::new(
            address,
            "entity names may contain letters, digits, '-', '_', '.' and ':' only",
        ));
    }
    Ok(name)
}

impl fmt::Display for HostAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base)
    }
}

/// A parsed MassTransit endpoint address: the entity name (last path segment) and its options.
///
/// ```
/// use ferrybus_core::address::EndpointAddress;
/// let a = EndpointAddress::parse("rabbitmq://localhost/masstransit/orders?bind=true").unwrap();
/// assert_eq!(a.name, "orders");
/// assert_eq!(a.vhost, "masstransit");
/// assert!(a.bind);
/// let t = EndpointAddress::parse("rabbitmq://localhost/Host_app_bus_x?temporary=true").unwrap();
/// assert!(!t.durable && t.auto_delete);
/// let o = EndpointAddress::parse(
///     "rabbitmq://localhost/orders?alternateexchange=unrouted&bindexchange=audit&bindexchange=copy&delayedtype=topic",
/// )
/// .unwrap();
/// assert_eq!(o.alternate_exchange.as_deref(), Some("unrouted"));
/// assert_eq!(o.bind_exchanges, ["audit", "copy"]);
/// assert_eq!((o.exchange_type.as_str(), o.delayed_type.as_deref()), ("x-delayed-message", Some("topic")));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointAddress {
    /// The scheme (`rabbitmq`, `rabbitmqs`, `amqp`, `amqps`, `loopback`).
    pub scheme: String,
    /// The host name.
    pub host: String,
    /// The virtual host (empty for the default `/`).
    pub vhost: String,
    /// The exchange (and, with `bind`, queue) name.
    pub name: String,
    /// Whether the exchange is durable (`durable=false` or `temporary=true` turn it off).
    pub durable: bool,
    /// Whether the exchange is auto-delete (`autodelete=true` or `temporary=true`).
    pub auto_delete: bool,
    /// Whether a queue of the same name (or `queue=`) is declared and bound (`bind=true`).
    pub bind: bool,
    /// The queue to bind, when `bind` is set.
    pub queue: Option<String>,
    /// The exchange type (`fanout` unless `type=` says otherwise; `x-delayed-message` with
    /// `delayedtype=`).
    pub exchange_type: String,
    /// `delayedtype=T`: the exchange is a delayed-message exchange (`x-delayed-message`, the
    /// plugin's) routing as `T` (its `x-delayed-type` argument).
    pub delayed_type: Option<String>,
    /// `alternateexchange=X`: the exchange is declared with `alternate-exchange = X`, where the
    /// broker sends what no binding routes.
    pub alternate_exchange: Option<String>,
    /// `bindexchange=X` (repeatable): exchange `X` is declared (fanout, or the delayed type, with
    /// the address's flags) and bound from this exchange, so it gets every message sent here.
    pub bind_exchanges: Vec<String>,
}

/// Parsed addresses by their text, so that the few destinations a service sends to are parsed
/// once, not per message ([`EndpointAddress::parse_shared`]).
static PARSED: TextCache<Arc<EndpointAddress>> = TextCache::new();

impl EndpointAddress {
    /// [`parse`](Self::parse), shared: an address parsed once is not parsed again (a bounded
    /// process-wide cache).
    ///
    /// ```
    /// use ferrybus_core::address::EndpointAddress;
    /// let a = EndpointAddress::parse_shared("rabbitmq://localhost/orders").unwrap();
    /// let b = EndpointAddress::parse_shared("rabbitmq://localhost/orders").unwrap();
    /// assert!(std::sync::Arc::ptr_eq(&a, &b));
    /// assert_eq!(a.name, "orders");
    /// ```
    pub fn parse_shared(address: &str) -> Result<Arc<Self>, AddressError> {
        PARSED.get_or_try(address, |address| Self::parse(address).map(Arc::new))
    }

    /// Parses a full address URI.
    pub fn parse(address: &str) -> Result<Self, AddressError> {
        let url = Url::parse(address).map_err(|e| AddressError::new(address, e.to_string()))?;
        let segments: Vec<String> = url
            .path()
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        let (name, vhost) = match segments.split_last() {
            Some((name, rest)) => (name.clone(), rest.join("/")),
            None => return Err(AddressError::new(address, "the address names no entity")),
        };
        let mut parsed = EndpointAddress {
            scheme: url.scheme().to_owned(),
            host: url.host_str().unwrap_or_default().to_owned(),
            vhost,
            name,
            durable: true,
            auto_delete: false,
            bind: false,
            queue: None,
            exchange_type: "fanout".to_owned(),
            delayed_type: None,
            alternate_exchange: None,
            bind_exchanges: Vec::new(),
        };
        for (key, value) in url.query_pairs() {
            parsed.apply_option(&key, &value);
        }
        if parsed.bind && parsed.queue.is_none() {
            parsed.queue = Some(parsed.name.clone());
        }
        Ok(parsed)
    }

    fn apply_option(&mut self, key: &str, value: &str) {
        let on = value.eq_ignore_ascii_case("true");
        match key.to_ascii_lowercase().as_str() {
            "temporary" if on => {
                self.durable = false;
                self.auto_delete = true;
            }
            "durable" => self.durable = on,
            "autodelete" => self.auto_delete = on,
            "bind" => self.bind = on,
            "queue" => {
                self.bind = true;
                self.queue = Some(value.to_owned());
            }
            "type" if !value.trim().is_empty() => self.exchange_type = value.to_owned(),
            // MassTransit's `RabbitMqEndpointAddress` options
            // (`src/Transports/MassTransit.RabbitMqTransport/RabbitMqEndpointAddress.cs`).
            "delayedtype" if !value.trim().is_empty() => {
                self.delayed_type = Some(value.to_owned());
                self.exchange_type = "x-delayed-message".to_owned();
            }
            "alternateexchange" if !value.trim().is_empty() => {
                self.alternate_exchange = Some(value.to_owned());
            }
            "bindexchange"
                if !value.trim().is_empty() && !self.bind_exchanges.iter().any(|e| e == value) =>
            {
                self.bind_exchanges.push(value.to_owned());
            }
            _ => {}
        }
    }
}

fn percent_decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_short_forms() {
        let host = HostAddress::new("rabbitmq", "localhost", Some(5672), "/");
        assert_eq!(host.to_string(), "rabbitmq://localhost/");
        assert_eq!(
            host.resolve("orders").unwrap(),
            "rabbitmq://localhost/orders"
        );
        assert!(host.resolve("queue:").is_err());
        assert!(host.resolve("queue:bad name").is_err());
        assert_eq!(
            host.resolve("rabbitmq://other/x?temporary=true").unwrap(),
            "rabbitmq://other/x?temporary=true"
        );
    }

    #[test]
    fn parses_options() {
        let a = EndpointAddress::parse(
            "rabbitmq://localhost/vh/q?queue=other&type=topic&durable=false",
        )
        .unwrap();
        assert_eq!(a.queue.as_deref(), Some("other"));
        assert!(a.bind);
        assert_eq!(a.exchange_type, "topic");
        assert!(!a.durable);
        let a = EndpointAddress::parse("rabbitmq://localhost/Contracts:OrderPlaced").unwrap();
        assert_eq!(a.name, "Contracts:OrderPlaced");
        assert_eq!(a.vhost, "");
        assert!(EndpointAddress::parse("rabbitmq://localhost/").is_err());
    }
}
