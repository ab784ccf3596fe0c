//! [`HostSettings`]: where the broker is and how to talk to it.

use std::time::Duration;

use ferrybus_core::address::redact;
use ferrybus_core::integration::HostAddress;
use url::Url;

use crate::error::{ErrorKind, RabbitMqError, Result};

/// The broker connection: one URI or several (a cluster), `amqp://` or `amqps://`,
/// credentials, vhost, connection name and timeouts.
///
/// The vhost follows the AMQP URI rules: `amqp://host` and `amqp://host/%2f` mean `/`.
/// `rabbitmq://` and `rabbitmqs://` (MassTransit's spelling) are accepted too.
///
/// A cluster is a comma-separated list of URIs (`amqp://u:p@node1/%2f,amqp://u:p@node2/%2f`)
/// or one URI with several hosts (`amqp://u:p@node1:5672,node2:5672/%2f`); every host must
/// have the same vhost and scheme. The bus connects to the first that answers, fails over to
/// the next when the connection is lost, and addresses messages with the first host's name
/// (MassTransit's host address). Passwords never appear in errors, logs or `Debug` output
/// (see [`redact`]).
///
/// ```
/// use ferrybus_rabbitmq::HostSettings;
/// let host = HostSettings::parse("amqp://guest:guest@broker:5673/sales").unwrap();
/// assert_eq!(host.vhost(), "sales");
/// assert_eq!(host.host_address().to_string(), "rabbitmq://broker:5673/sales/");
/// let local = HostSettings::parse("amqps://localhost/%2f").unwrap();
/// assert_eq!(local.host_address().to_string(), "rabbitmqs://localhost/");
/// let cluster = HostSettings::parse("amqp://app:s3cret@node1:5672,node2:5673,node3/%2f").unwrap();
/// assert_eq!(cluster.hosts(), ["node1:5672", "node2:5673", "node3:5672"]);
/// assert!(!format!("{cluster:?}").contains("s3cret"));
/// ```
#[derive(Clone)]
pub struct HostSettings {
    /// One URI per host, as lapin connects to it.
    uris: Vec<String>,
    host: String,
    port: Option<u16>,
    vhost: String,
    tls: bool,
    pub(crate) connection_name: Option<String>,
    pub(crate) connect_timeout: Duration,
    pub(crate) publish_timeout: Duration,
    pub(crate) reconnect_min: Duration,
    pub(crate) reconnect_max: Duration,
    /// Extra root certificates (PEM) for `amqps://`.
    pub(crate) tls_roots: Option<String>,
}

/// One parsed host URI.
struct Parsed {
    uri: String,
    host: String,
    port: Option<u16>,
    vhost: String,
    tls: bool,
}

impl HostSettings {
    /// Parses a broker URI, a comma-separated list of them, or a URI with several hosts.
    pub fn parse(uri: &str) -> Result<Self> {
        let invalid = |reason: String| RabbitMqError::new(ErrorKind::Config, reason);
        let parts = split_hosts(uri)?;
        let parsed = parts
            .iter()
            .map(|part| parse_one(part))
            .collect::<Result<Vec<_>>>()?;
        let first = &parsed[0];
        if let Some(other) = parsed
            .iter()
            .find(|p| p.vhost != first.vhost || p.tls != first.tls)
        {
            return Err(invalid(format!(
                "every host of a cluster needs the same vhost and scheme: {} and {}",
                redact(&first.uri),
                redact(&other.uri)
            )));
        }
        Ok(Self {
            uris: parsed.iter().map(|p| p.uri.clone()).collect(),
            host: first.host.clone(),
            port: first.port,
            vhost: first.vhost.clone(),
            tls: first.tls,
            connection_name: None,
            connect_timeout: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(30),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            tls_roots: None,
        })
    }

    /// The URI of host `index` (modulo the number of hosts), as lapin connects to it.
    pub(crate) fn uri(&self, index: usize) -> &str {
        &self.uris[index % self.uris.len()]
    }

    /// The URI lapin connects to for the first host: MassTransit's `rabbitmq://` and
    /// `rabbitmqs://` spelled `amqp://` and `amqps://`, the default vhost written `/%2f`, the
    /// query kept. For tools that open a lapin connection of their own.
    ///
    /// ```
    /// use ferrybus_rabbitmq::HostSettings;
    /// let host = HostSettings::parse("rabbitmq://guest:guest@localhost").unwrap();
    /// assert_eq!(host.connection_uri(), "amqp://guest:guest@localhost/%2f");
    /// let tls = HostSettings::parse("amqps://h:5671/sales?heartbeat=10").unwrap();
    /// assert_eq!(tls.connection_uri(), "amqps://h:5671/sales?heartbeat=10");
    /// ```
    pub fn connection_uri(&self) -> &str {
        self.uri(0)
    }

    /// How many hosts there are.
    pub(crate) fn host_count(&self) -> usize {
        self.uris.len()
    }

    /// `host:port` of every host, in order (no credentials).
    pub fn hosts(&self) -> Vec<String> {
        (0..self.uris.len()).map(|i| self.host_label(i)).collect()
    }

    /// `host:port` of host `index`.
    pub(crate) fn host_label(&self, index: usize) -> String {
        let uri = self.uri(index);
        match Url::parse(uri) {
            Ok(url) => {
                let port = url.port().unwrap_or(if self.tls { 5671 } else { 5672 });
                format!("{}:{port}", url.host_str().unwrap_or("?"))
            }
            Err(_) => "?".to_owned(),
        }
    }

    /// The virtual host (`/` for the default).
    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// The host name (of the first host).
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

impl std::fmt::Debug for HostSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSettings")
            .field(
                "uris",
                &self.uris.iter().map(|u| redact(u)).collect::<Vec<_>>(),
            )
            .field("vhost", &self.vhost)
            .field("connection_name", &self.connection_name)
            .field("connect_timeout", &self.connect_timeout)
            .field("publish_timeout", &self.publish_timeout)
            .field("tls_roots", &self.tls_roots.is_some())
            .finish_non_exhaustive()
    }
}

/// The URIs of `input`: a comma-separated list of URIs, or one URI with several hosts.
fn split_hosts(input: &str) -> Result<Vec<String>> {
    let invalid = |reason: String| RabbitMqError::new(ErrorKind::Config, reason);
    let input = input.trim();
    if input.is_empty() {
        return Err(invalid("the broker URI is empty".to_owned()));
    }
    let parts: Vec<&str> = input.split(',').map(str::trim).collect();
    if parts.len() == 1 {
        return Ok(vec![input.to_owned()]);
    }
    if parts[1..].iter().all(|p| p.contains("://")) {
        return Ok(parts.iter().map(|p| (*p).to_owned()).collect());
    }
    // One URI with several hosts: scheme://[userinfo@]h1[:p1],h2[:p2]…[/vhost][?query]
    let (scheme, rest) = input
        .split_once("://")
        .ok_or_else(|| invalid(format!("{} has no scheme", redact(input))))?;
    let path_at = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(path_at);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let uris: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .map(|host| {
            if host.is_empty() || host.contains("://") {
                Err(invalid(format!(
                    "{}: expected a list of URIs or one URI with several hosts",
                    redact(input)
                )))
            } else {
                Ok(format!("{scheme}://{userinfo}{host}{path}"))
            }
        })
        .collect::<Result<_>>()?;
    Ok(uris)
}

fn parse_one(uri: &str) -> Result<Parsed> {
    let invalid = |reason: String| RabbitMqError::new(ErrorKind::Config, reason);
    let shown = redact(uri);
    let mut url = Url::parse(uri).map_err(|e| invalid(format!("{shown}: {e}")))?;
    let tls = match url.scheme() {
        "amqp" | "rabbitmq" => false,
        "amqps" | "rabbitmqs" => true,
        other => return Err(invalid(format!("{shown}: unsupported scheme {other:?}"))),
    };
    let scheme = if tls { "amqps" } else { "amqp" };
    if url.scheme() != scheme {
        // `Url::set_scheme` refuses special/non-special changes; rebuild instead.
        url = Url::parse(&format!("{scheme}{}", &uri[uri.find("://").unwrap_or(0)..]))
            .map_err(|e| invalid(format!("{shown}: {e}")))?;
    }
    let host = url
        .host_str()
        .ok_or_else(|| invalid(format!("{shown} has no host")))?
        .to_owned();
    let vhost = percent_decode(url.path().strip_prefix('/').unwrap_or(""));
    if vhost.is_empty() {
        url.set_path("/%2f");
    }
    Ok(Parsed {
        uri: url.to_string(),
        host,
        port: url.port(),
        vhost: if vhost.is_empty() {
            "/".to_owned()
        } else {
            vhost
        },
        tls,
    })
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
        assert!(s.uri(0).starts_with("amqp://"));
        assert!(HostSettings::parse("http://x").is_err());
        assert!(HostSettings::parse("not a uri").is_err());
    }

    #[test]
    fn parses_clusters() {
        let s = HostSettings::parse("amqp://u:p@a:1/sales,amqp://v:q@b:2/%2f").unwrap_err();
        assert!(s.to_string().contains("same vhost"), "{s}");
        assert!(
            !s.to_string().contains(":p@") && !s.to_string().contains(":q@"),
            "{s}"
        );
        let s = HostSettings::parse("amqp://u:p@a:1/%2f, amqp://v:q@b:2/%2f").unwrap();
        assert_eq!(s.hosts(), ["a:1", "b:2"]);
        assert_eq!(s.uri(1), "amqp://v:q@b:2/%2f");
        assert_eq!(s.uri(2), s.uri(0));
        let s = HostSettings::parse("amqps://u:p@a,b:5670/v?heartbeat=10").unwrap();
        assert_eq!(s.uri(1), "amqps://u:p@b:5670/v?heartbeat=10");
        assert_eq!(s.hosts(), ["a:5671", "b:5670"]);
        assert_eq!(s.host_address().to_string(), "rabbitmqs://a/v/");
    }

    #[test]
    fn errors_never_show_passwords() {
        for bad in [
            "amqp://u:hunter2@a:1/%2f,amqp://v:hunter2@b:99999/%2f",
            "amqp://u:hunter2@a:1,,b/%2f",
            "amqp://u:hunter2@a:1/%2f,http://v:hunter2@b/%2f",
            "amqp://u:hunter2@a:notaport/%2f",
        ] {
            let error = HostSettings::parse(bad).unwrap_err().to_string();
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
