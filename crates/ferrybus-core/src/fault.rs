//! Faults as MassTransit writes them: [`Fault<T>`], [`ExceptionInfo`], [`ReceiveFault`] and the
//! `MT-Fault-*` headers of messages moved to `<queue>_error` (masstransit-wire §5).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::consume::ConsumerInfo;
use crate::envelope::{Headers, HostInfo};
use crate::error::{dyn_error_type, truncate, ConsumeError};
use crate::message::{Message, MessageType, TypeName};

/// `Fault<T>`: published (or sent to `faultAddress` / `responseAddress`) when a consumer of `T`
/// fails for good. Consume `Fault<T>` to react to failures of `T`.
///
/// ```
/// use ferrybus_core::{Fault, Message, MessageType};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Contracts.Events")]
/// # struct OrderCreated {}
/// let t = Fault::<OrderCreated>::message_type();
/// assert_eq!(t.urn(), "urn:message:MassTransit:Fault[[Contracts.Events:OrderCreated]]");
/// assert_eq!(t.entity_name(), "MassTransit:Fault--Contracts.Events:OrderCreated--");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault<T> {
    /// A new id for this fault.
    #[serde(default)]
    pub fault_id: Option<Uuid>,
    /// The id of the message that faulted.
    #[serde(default)]
    pub faulted_message_id: Option<Uuid>,
    /// When it faulted.
    #[serde(default, with = "ferrybus_dotnet::datetime::option")]
    pub timestamp: Option<DateTime<Utc>>,
    /// What went wrong.
    #[serde(default)]
    pub exceptions: Vec<ExceptionInfo>,
    /// Where it happened.
    #[serde(default)]
    pub host: Option<HostInfo>,
    /// The faulted message's type URNs.
    #[serde(default)]
    pub fault_message_types: Vec<String>,
    /// The faulted message.
    pub message: T,
}

impl<T: Message> Message for Fault<T> {
    fn message_type() -> MessageType {
        T::message_type().fault()
    }
}

/// An exception as MassTransit describes it (`ExceptionInfo`), built from a Rust error chain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionInfo {
    /// The error's type name.
    pub exception_type: String,
    /// The error's cause, if any.
    #[serde(default)]
    pub inner_exception: Option<Box<ExceptionInfo>>,
    /// The stack trace (a Rust backtrace when captured).
    #[serde(default)]
    pub stack_trace: Option<String>,
    /// The error message.
    #[serde(default)]
    pub message: Option<String>,
    /// The source (the failing consumer or component).
    #[serde(default)]
    pub source: Option<String>,
    /// Extra data.
    #[serde(default)]
    pub data: Option<Map<String, Value>>,
}

impl ExceptionInfo {
    /// Describes `error` and its chain of causes; `source` names the failing component.
    pub fn from_error(error: &ConsumeError, source: &str) -> Self {
        let mut chain = error.chain().skip(1).collect::<Vec<_>>().into_iter().rev();
        let mut inner: Option<Box<ExceptionInfo>> = None;
        for cause in chain.by_ref() {
            inner = Some(Box::new(ExceptionInfo {
                exception_type: dyn_error_type(cause),
                inner_exception: inner,
                stack_trace: None,
                message: Some(truncate(&cause.to_string())),
                source: Some(source.to_owned()),
                data: None,
            }));
        }
        ExceptionInfo {
            exception_type: error.exception_type().to_owned(),
            inner_exception: inner,
            stack_trace: Some(truncate(&error.stack_trace())),
            message: Some(truncate(&error.to_string())),
            source: Some(source.to_owned()),
            data: None,
        }
    }

    /// The innermost exception (what `MT-Fault-*` headers describe).
    pub fn innermost(&self) -> &ExceptionInfo {
        match &self.inner_exception {
            Some(inner) => inner.innermost(),
            None => self,
        }
    }
}

/// `ReceiveFault`: published when a message could not be received at all (bad body, bad
/// envelope), before any consumer ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiveFault {
    /// A new id for this fault.
    #[serde(default)]
    pub fault_id: Option<Uuid>,
    /// When it faulted.
    #[serde(default, with = "ferrybus_dotnet::datetime::option")]
    pub timestamp: Option<DateTime<Utc>>,
    /// The id of the message, when it could be read.
    #[serde(default)]
    pub faulted_message_id: Option<Uuid>,
    /// What went wrong.
    #[serde(default)]
    pub exceptions: Vec<ExceptionInfo>,
    /// Where it happened.
    #[serde(default)]
    pub host: Option<HostInfo>,
    /// The message types, when they could be read.
    #[serde(default)]
    pub fault_message_types: Vec<String>,
    /// The content type of the body.
    #[serde(default)]
    pub content_type: Option<String>,
}

impl Message for ReceiveFault {
    fn message_type() -> MessageType {
        MessageType::new(TypeName::new("MassTransit", "ReceiveFault"))
            .implements(MessageType::new(TypeName::new("MassTransit", "Fault")))
    }
}

/// Builds the `Fault<T>` payload for a failed message (as JSON, with the original payload).
pub(crate) fn fault_payload(
    error: &ConsumeError,
    consumer: &ConsumerInfo,
    faulted_message_id: Option<Uuid>,
    message_types: &[String],
    message: &Value,
) -> Value {
    let fault = Fault {
        fault_id: Some(Uuid::now_v7()),
        faulted_message_id,
        timestamp: Some(Utc::now()),
        exceptions: vec![ExceptionInfo::from_error(error, consumer.name())],
        host: Some(HostInfo::current().clone()),
        fault_message_types: message_types.to_vec(),
        message,
    };
    serde_json::to_value(fault).expect("a fault always serializes")
}

/// The headers MassTransit adds to a message it moves to `<queue>_error`: `MT-Reason=fault`, the
/// `MT-Fault-*` set describing the innermost error, and `MT-Host-*`.
///
/// ```
/// use ferrybus_core::ConsumeError;
/// use ferrybus_core::fault::fault_headers;
/// let headers = fault_headers(&ConsumeError::handler("declined"), "rabbitmq://localhost/billing", None);
/// assert_eq!(headers.get_str("MT-Reason"), Some("fault"));
/// assert_eq!(headers.get_str("MT-Fault-Message"), Some("declined"));
/// assert_eq!(headers.get_str("MT-Fault-InputAddress"), Some("rabbitmq://localhost/billing"));
/// assert!(headers.get_str("MT-Host-MachineName").is_some());
/// ```
pub fn fault_headers(
    error: &ConsumeError,
    input_address: &str,
    consumer: Option<&ConsumerInfo>,
) -> Headers {
    let info = ExceptionInfo::from_error(error, consumer.map_or("ferrybus", ConsumerInfo::name));
    let innermost = info.innermost();
    let mut headers = Headers::new();
    headers.insert("MT-Reason", "fault");
    headers.insert("MT-Fault-ExceptionType", innermost.exception_type.clone());
    headers.insert("MT-Fault-InputAddress", input_address);
    headers.insert(
        "MT-Fault-Message",
        innermost.message.clone().unwrap_or_default(),
    );
    // `ExceptionTimestamp.ToString("O")`: seven fractional digits, always
    // (`src/MassTransit.Abstractions/Contexts/SendContextExtensions.cs`, `SetExceptionHeaders`).
    headers.insert(
        "MT-Fault-Timestamp",
        ferrybus_dotnet::datetime::format_round_trip(&Utc::now()),
    );
    headers.insert(
        "MT-Fault-StackTrace",
        info.stack_trace.clone().unwrap_or_default(),
    );
    if let Some(consumer) = consumer {
        headers.insert("MT-Fault-ConsumerType", consumer.name());
        headers.insert(
            "MT-Fault-MessageType",
            consumer.message_type().dotnet_name(),
        );
    }
    if error.retry_count() > 0 {
        headers.insert("MT-Fault-RetryCount", i64::from(error.retry_count()));
    }
    add_host_headers(&mut headers);
    headers
}

/// The headers of a message moved to `<queue>_skipped`: `MT-Reason=dead-letter` and `MT-Host-*`.
pub fn skipped_headers() -> Headers {
    let mut headers = Headers::new();
    headers.insert("MT-Reason", "dead-letter");
    add_host_headers(&mut headers);
    headers
}

fn add_host_headers(headers: &mut Headers) {
    for (name, value) in HostInfo::current().headers() {
        headers.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("charge failed")]
    struct ChargeFailed(#[source] std::io::Error);

    #[test]
    fn exception_info_follows_the_chain() {
        let error = ConsumeError::from(ChargeFailed(std::io::Error::other("connection reset")));
        let info = ExceptionInfo::from_error(&error, "InvoiceConsumer");
        assert_eq!(
            info.exception_type,
            "ferrybus_core::fault::tests::ChargeFailed"
        );
        assert_eq!(
            info.inner_exception.as_ref().unwrap().exception_type,
            "std::io::Error"
        );
        assert_eq!(info.message.as_deref(), Some("charge failed"));
        let inner = info.inner_exception.as_ref().unwrap();
        assert_eq!(inner.message.as_deref(), Some("connection reset"));
        let headers = fault_headers(&error, "loopback://localhost/q", None);
        assert_eq!(
            headers.get_str("MT-Fault-Message"),
            Some("connection reset")
        );
        assert!(!headers.contains("MT-Fault-RetryCount"));
    }

    #[test]
    fn fault_json_shape() {
        let info = ConsumerInfo::new("C", MessageType::parse("Ns:T").unwrap(), "q");
        let payload = fault_payload(
            &ConsumeError::handler("x"),
            &info,
            Some(Uuid::nil()),
            &["urn:message:Ns:T".to_owned()],
            &serde_json::json!({"a": 1}),
        );
        let keys: Vec<_> = payload.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "faultId",
                "faultedMessageId",
                "timestamp",
                "exceptions",
                "host",
                "faultMessageTypes",
                "message"
            ]
        );
        let exception_keys: Vec<_> = payload["exceptions"][0]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            exception_keys,
            [
                "exceptionType",
                "innerException",
                "stackTrace",
                "message",
                "source",
                "data"
            ]
        );
        assert_eq!(payload["message"]["a"], 1);
    }

    #[test]
    fn truncates_long_text() {
        assert_eq!(truncate(&"x".repeat(3000)).len(), 2048);
    }
}
