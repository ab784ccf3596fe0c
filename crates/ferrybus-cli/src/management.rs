//! The RabbitMQ management HTTP API, when the plugin is enabled: the only way to see an
//! entity's exact flags and arguments and its bindings without declaring anything. `topology`
//! uses it when it answers and falls back to AMQP (passive and equivalent declares) when not.

use ferrybus_core::address::redact;
use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use url::Url;

/// How long one management request may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A management API client.
pub(crate) struct Management {
    agent: ureq::Agent,
    base: String,
    authorization: Option<String>,
    shown: String,
}

/// Why the management API cannot be used.
#[derive(Debug)]
pub(crate) struct Unavailable {
    /// The API's address, password masked.
    pub(crate) url: String,
    /// What happened.
    pub(crate) reason: String,
}

impl Management {
    /// The management API of the broker at `amqp_url`: `explicit` when given, else
    /// `http://<host>:15672/` (`https://…:15671/` for `amqps`) with the broker URL's
    /// credentials (`guest`/`guest` when it has none).
    pub(crate) fn new(amqp_url: &str, explicit: Option<&str>) -> Result<Self, Unavailable> {
        let base = match explicit {
            Some(url) => url.to_owned(),
            None => {
                let parsed = Url::parse(amqp_url).map_err(|e| Unavailable {
                    url: redact(amqp_url),
                    reason: e.to_string(),
                })?;
                let tls = matches!(parsed.scheme(), "amqps" | "rabbitmqs");
                let host = parsed.host_str().unwrap_or("localhost");
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host.to_owned()
                };
                if tls {
                    format!("https://{host}:15671/")
                } else {
                    format!("http://{host}:15672/")
                }
            }
        };
        let mut url = Url::parse(&base).map_err(|e| Unavailable {
            url: redact(&base),
            reason: format!("not a URL: {e}"),
        })?;
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        // The management URL's own credentials, else the broker URL's, else guest/guest.
        let credentials = if url.username().is_empty() {
            match Url::parse(amqp_url) {
                Ok(amqp) if !amqp.username().is_empty() => (
                    decode(amqp.username()),
                    decode(amqp.password().unwrap_or("")),
                ),
                _ => ("guest".to_owned(), "guest".to_owned()),
            }
        } else {
            (decode(url.username()), decode(url.password().unwrap_or("")))
        };
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let mut base = url.to_string();
        if !base.ends_with('/') {
            base.push('/');
        }
        let (user, password) = credentials;
        let authorization = Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        ));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Self {
            agent,
            shown: base.clone(),
            base,
            authorization,
        })
    }

    /// The API's address (it holds no credentials).
    pub(crate) fn url(&self) -> &str {
        &self.shown
    }

    /// `GET api/<path>`: `Ok(None)` for 404, `Err` when the API does not answer usefully.
    pub(crate) fn get(&self, path: &str) -> Result<Option<Value>, Unavailable> {
        let url = format!("{}api/{path}", self.base);
        let mut request = self.agent.get(&url);
        if let Some(authorization) = &self.authorization {
            request = request.header("Authorization", authorization);
        }
        let unavailable = |reason: String| Unavailable {
            url: self.shown.clone(),
            reason,
        };
        let mut response = request
            .call()
            .map_err(|e| unavailable(redact(&e.to_string())))?;
        match response.status().as_u16() {
            200 => response
                .body_mut()
                .read_json::<Value>()
                .map(Some)
                .map_err(|e| unavailable(format!("unreadable answer: {e}"))),
            404 => Ok(None),
            401 | 403 => Err(unavailable(format!(
                "{} (pass credentials in --management-url)",
                response.status()
            ))),
            _ => Err(unavailable(format!("answered {}", response.status()))),
        }
    }

    /// Checks the API answers (`api/overview`).
    pub(crate) fn probe(&self) -> Result<(), Unavailable> {
        match self.get("overview")? {
            Some(_) => Ok(()),
            None => Err(Unavailable {
                url: self.shown.clone(),
                reason: "api/overview not found: not a RabbitMQ management API".into(),
            }),
        }
    }
}

/// A path segment, percent-encoded (`/` → `%2F`).
pub(crate) fn segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derives_the_api_address_from_the_broker_url() {
        let m = Management::new("amqp://ops:s3cret@broker:5672/%2f", None)
            .ok()
            .unwrap();
        assert_eq!(m.url(), "http://broker:15672/");
        assert_eq!(
            m.authorization.as_deref(),
            Some(
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("ops:s3cret")
                )
                .as_str()
            )
        );
        let tls = Management::new("amqps://broker/sales", None).ok().unwrap();
        assert_eq!(tls.url(), "https://broker:15671/");
        let explicit = Management::new("amqp://x", Some("http://admin:pw@mgmt:8080/rabbit"))
            .ok()
            .unwrap();
        assert_eq!(explicit.url(), "http://mgmt:8080/rabbit/");
        assert!(!explicit.url().contains("pw"));
        let basic = |m: &Management| m.authorization.clone().unwrap();
        let encode = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert_eq!(basic(&explicit), encode("admin:pw"));
        let borrowed = Management::new("amqp://ops:s3cret@h", Some("http://mgmt:15672"))
            .ok()
            .unwrap();
        assert_eq!(basic(&borrowed), encode("ops:s3cret"));
        assert_eq!(
            basic(&Management::new("amqp://h", None).ok().unwrap()),
            encode("guest:guest")
        );
        assert_eq!(segment("/"), "%2F");
        assert_eq!(segment("billing-invoice"), "billing%2Dinvoice");
    }
}
