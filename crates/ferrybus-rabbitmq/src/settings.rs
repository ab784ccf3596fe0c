//! [`HostSettings`]: where the broker is and how to talk to it.

use std::time::Duration;

use ferrybus_core::HostAddress;
use url::Url;

use crate::error::{ErrorKind, RabbitMqError, Result};

/// The broker connection: URI (`amqp://` or `amqps://`, credentials, vhost), connection name and
/// timeouts.
///
/// The vhost follows the AMQP URI rules: `amqp://host` and `amqp://host/%2f` mean `/`.
/// `rabbitmq://` and `rabbitmqs://` (MassTransit's spelling) are accepted too.
///
/// ```
/// use ferrybus_rabbitmq::HostSettings;
/// let host = HostSettings::parse("amqp://guest:guest@broker:5673/sales").unwrap();
/// assert_eq!(host.vhost(), "sales");
/// assert_eq!(host.host_address().to_string(), "rabbitmq://broker:5673/sales/");
/// let local = HostSettings::parse("amqps://localhost/%2f").unwrap();
/// assert_eq!(local.host_address().to_string(), "rabbitmqs://localhost/");
/// ```
#[derive(Clone, Debug)]
pub struct HostSettings {
    uri: String,
    host: String,
    port: Option<u16>,
    vhost: String,
    tls: bool,
    pub(crate) connection_name: Option<String>,
    pub(crate) connect_timeout: Duration,
    pub(crate) publish_timeout: Duration,
    pub(crate) reconnect_min: Duration,
    pub(crate) reconnect_max: Duration,
}

impl HostSettings {
    /// Parses a broker URI.
    pub fn parse(uri: &str) -> Result<Self> {
        let invalid = |reason: String| RabbitMqError::new(ErrorKind::Config, reason);
        let mut url = Url::parse(uri).map_err(|e| invalid(format!("{uri:?}: {e}")))?;
        let tls = match url.scheme() {
            "amqp" | "rabbitmq" => false,
            "amqps" | "rabbitmqs" => true,
            other => return Err(invalid(format!("unsupported scheme {other:?}"))),
        };
        let scheme = if tls { "amqps" } else { "amqp" };
        if url.scheme() != scheme {
            // `Url::set_scheme` refuses special/non-special changes; rebuild instead.
            url = Url::parse(&format!("{scheme}{}", &uri[uri.find("://").unwrap_or(0)..]))
                .map_err(|e| invalid(e.to_string()))?;
        }
        let host = url
            .host_str()
            .ok_or_else(|| invalid(format!("{uri:?} has no host")))?
            .to_owned();
        let vhost = percent_decode(url.path().strip_prefix('/').unwrap_or(""));
        if vhost.is_empty() {
            url.set_path("/%2f");
        }
        Ok(Self {
            uri: url.to_string(),
            host,
            port: url.port(),
            vhost: if vhost.is_empty() {
                "/".to_owned()
            } else {
                vhost
            },
            tls,
            connection_name: None,
            connect_timeout: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(30),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
        })
    }

    /// The URI lapin connects to.
    pub(crate) fn uri(&self) -> &str {
        &self.uri
    }

    /// The virtual host (`/` for the default).
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// The host name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether the connection uses TLS (`amqps`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// MassTransit's host address for this broker (`rabbitmq://host[:port]/[vhost/]`), the base of
    /// every address written into envelopes.
    pub fn host_address(&self) -> HostAddress {
        let scheme = if self.tls { "rabbitmqs" } else { "rabbitmq" };
        HostAddress::new(scheme, &self.host, self.port, &self.vhost)
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_uris() {
        let s = HostSettings::parse("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap();
        assert_eq!(s.vhost(), "/");
        assert_eq!(s.host_address().to_string(), "rabbitmq://127.0.0.1/");
        let s = HostSettings::parse("rabbitmq://localhost/my%2Fvhost").unwrap();
        assert_eq!(s.vhost(), "my/vhost");
        assert!(s.uri().starts_with("amqp://"));
        assert!(HostSettings::parse("http://x").is_err());
        assert!(HostSettings::parse("not a uri").is_err());
    }
}
