//! The Request activity (MassTransit's `Request<TInstance, TRequest, TResponse>`): a saga sends a
//! request and handles its response, its fault or its timeout as events.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use ferrybus_core::dotnet::TypeName;
use ferrybus_core::message::{Message, MessageType};
use ferrybus_core::Fault;

use crate::event::Event;
use crate::schedule::TokenFn;

/// The header listing the response types a requester accepts (MassTransit's
/// `MessageHeaders.Request.Accept`).
pub const REQUEST_ACCEPT_TYPE: &str = "MT-Request-AcceptType";

/// The message a saga schedules to itself when it sends a request with a timeout, and handles
/// as [`Request::timeout_expired`] if no response came first (MassTransit's
/// `MassTransit.Contracts.RequestTimeoutExpired<TRequest>`,
/// `MassTransit.Abstractions/SagaStateMachine/Contracts/RequestTimeoutExpired.cs`).
///
/// ```
/// use ferrybus_core::Message;
/// use ferrybus_saga::RequestTimeoutExpired;
/// # use serde::{Deserialize, Serialize};
/// #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// #[message(namespace = "Payments.Contracts")]
/// struct ProcessPayment { order_id: uuid::Uuid }
/// assert_eq!(
///     RequestTimeoutExpired::<ProcessPayment>::message_type().urn(),
///     "urn:message:MassTransit.Contracts:RequestTimeoutExpired[[Payments.Contracts:ProcessPayment]]"
/// );
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestTimeoutExpired<R> {
    /// The saga instance's id.
    pub correlation_id: Uuid,
    /// When the request was sent.
    #[serde(with = "ferrybus_core::dotnet::datetime")]
    pub timestamp: DateTime<Utc>,
    /// When it expired.
    #[serde(with = "ferrybus_core::dotnet::datetime")]
    pub expiration_time: DateTime<Utc>,
    /// The request's id.
    pub request_id: Uuid,
    /// The request (absent: `None`).
    pub message: Option<R>,
}

impl<R: Message> Message for RequestTimeoutExpired<R> {
    fn message_type() -> MessageType {
        MessageType::new(TypeName::generic(
            "MassTransit.Contracts",
            "RequestTimeoutExpired",
            vec![R::message_type().type_name().clone()],
        ))
    }
}

/// A request of a state machine (MassTransit's `Request<TInstance, TRequest, TResponse>`,
/// declared with `Request(() => ProcessPayment, x => x.PaymentRequestId, r => { r.ServiceAddress
/// = …; r.Timeout = … })`): the request type `R`, the response type `P`, where requests go,
/// the timeout, and the instance field holding the pending request's id.
///
/// [`EventBinder::request`](crate::EventBinder::request) sends `R` (to the service address, or
/// published without one) with a new `requestId`, the saga's endpoint as `responseAddress` and
/// `P` in `MT-Request-AcceptType`, stores the id in the field and, with a timeout, schedules a
/// [`RequestTimeoutExpired<R>`] to the saga's endpoint. The three outcomes are events,
/// correlated by the field (MassTransit's `CorrelateBy(requestIdExpression, ctx =>
/// ctx.RequestId)`), so a response to an older request finds no instance:
///
/// - [`completed`](Self::completed): the response `P`;
/// - [`faulted`](Self::faulted): the service's `Fault<R>` (sent to the response address);
/// - [`timeout_expired`](Self::timeout_expired): the timeout, if the field still holds its id.
///
/// Declare it on the machine with [`StateMachine::request`](crate::StateMachine::request), as
/// MassTransit's `Request(…)` does: in every state but `Initial` and `Final` a response clears
/// the field (`DuringAny(When(Completed).CancelRequestTimeout(request))`), so the timeout that
/// arrives later is discarded; a fault keeps it unless
/// [`clear_request_id_on_faulted`](Self::clear_request_id_on_faulted). The id field must be a
/// column of the instance table (a `Uuid` column) and serialize under `field`'s name.
///
/// ```
/// use std::time::Duration;
/// use ferrybus_saga::Request;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Payments.Contracts")]
/// # struct ProcessPayment { order_id: uuid::Uuid }
/// # #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Payments.Contracts")]
/// # struct PaymentProcessed { order_id: uuid::Uuid }
/// #[derive(Clone, Default, Serialize, Deserialize)]
/// struct OrderState { payment_request_id: Option<uuid::Uuid> }
///
/// let payment = Request::<OrderState, ProcessPayment, PaymentProcessed>::new(
///     "payment_request_id",
///     |s| &mut s.payment_request_id,
/// )
/// .service_address("queue:payments")
/// .timeout(Duration::from_secs(30));
/// assert_eq!(payment.timeout_value(), Duration::from_secs(30));
/// ```
pub struct Request<T, R, P> {
    /// The response arrived (MassTransit's `Request.Completed`).
    pub completed: Event<P>,
    /// The service faulted (MassTransit's `Request.Faulted`).
    pub faulted: Event<Fault<R>>,
    /// No response within the timeout (MassTransit's `Request.TimeoutExpired`).
    pub timeout_expired: Event<RequestTimeoutExpired<R>>,
    pub(crate) request_id: TokenFn<T>,
    pub(crate) service_address: Option<String>,
    pub(crate) timeout: Duration,
    pub(crate) time_to_live: Option<Duration>,
    pub(crate) clear_on_faulted: bool,
}

impl<T, R, P> Clone for Request<T, R, P> {
    fn clone(&self) -> Self {
        Self {
            completed: self.completed.clone(),
            faulted: self.faulted.clone(),
            timeout_expired: self.timeout_expired.clone(),
            request_id: self.request_id.clone(),
            service_address: self.service_address.clone(),
            timeout: self.timeout,
            time_to_live: self.time_to_live,
            clear_on_faulted: self.clear_on_faulted,
        }
    }
}

impl<T, R: Message, P: Message> Request<T, R, P> {
    /// A request whose pending id lives in the instance field `field` (its serde name), which
    /// `request_id` returns. Published (no service address) with a 30 s timeout until set
    /// otherwise (MassTransit's `RequestSettings` default timeout).
    pub fn new(
        field: impl Into<String>,
        request_id: impl Fn(&mut T) -> &mut Option<Uuid> + Send + Sync + 'static,
    ) -> Self {
        let field = field.into();
        Self {
            completed: Event::correlated_by_property_in_context(field.clone(), |ctx| {
                ctx.request_id()
            }),
            faulted: Event::correlated_by_property_in_context(field.clone(), |ctx| {
                ctx.request_id()
            }),
            timeout_expired: Event::correlated_by_property(
                field,
                |m: &RequestTimeoutExpired<R>| m.request_id,
            ),
            request_id: Arc::new(request_id),
            service_address: None,
            timeout: Duration::from_secs(30),
            time_to_live: None,
            clear_on_faulted: false,
        }
    }

    /// Sends requests to `address` (`queue:payments`, an exchange or a full URI) instead of
    /// publishing them (MassTransit's `ServiceAddress`).
    pub fn service_address(mut self, address: impl Into<String>) -> Self {
        self.service_address = Some(address.into());
        self
    }

    /// How long to wait for a response before [`timeout_expired`](Self::timeout_expired)
    /// (MassTransit's `Timeout`); `Duration::ZERO` schedules no timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The timeout.
    pub fn timeout_value(&self) -> Duration {
        self.timeout
    }

    /// The request message's time to live (MassTransit's `TimeToLive`).
    pub fn time_to_live(mut self, ttl: Duration) -> Self {
        self.time_to_live = Some(ttl);
        self
    }

    /// Clears the pending request id on a fault too (MassTransit's `ClearRequestIdOnFaulted`).
    pub fn clear_request_id_on_faulted(mut self) -> Self {
        self.clear_on_faulted = true;
        self
    }
}

impl<T, R, P> std::fmt::Debug for Request<T, R, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("request", &std::any::type_name::<R>())
            .field("response", &std::any::type_name::<P>())
            .field("service_address", &self.service_address)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
