//! [`Endpoint`]: the service a transport runs for one receive endpoint — the endpoint service
//! inside its layers, behind the endpoint's one panic guard.

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::Service;

use super::boxed::BoxEndpointService;
use super::delivery::Delivery;
use super::service::EndpointService;
use super::settlement::{Faulted, Settlement};
use crate::consume::panic_message;
use crate::error::ConsumeError;
use crate::fault::{fault_headers, ExceptionInfo};
use crate::pause::EndpointControl;

/// A built receive endpoint: `Service<Delivery, Response = Settlement, Error = Infallible>`, what
/// `EndpointConfig::build` returns and a transport calls once per delivery. Cheap to clone.
///
/// It never panics. Panics have two guards in all: one around each consumer, inside retry (a
/// panicking consumer fails its attempt like any error), and this one around everything else —
/// the endpoint's layers, the inbox, the reading and routing: a panic there becomes
/// [`Settlement::Fault`], without a fault message since no consumer failed.
#[derive(Clone)]
pub struct Endpoint {
    stack: Stack,
    input_address: Arc<str>,
    control: EndpointControl,
}

#[derive(Clone)]
enum Stack {
    /// No endpoint layers: the endpoint service itself (one allocation per delivery).
    Bare(EndpointService),
    /// The endpoint service inside its layers; `true` when some of them are the endpoint's own,
    /// which find the endpoint's pause switch in each delivery's extensions (the bus's layers,
    /// the instruments, need no such lookup).
    Layered(BoxEndpointService, bool),
}

impl Endpoint {
    pub(crate) fn bare(
        service: EndpointService,
        input_address: String,
        control: EndpointControl,
    ) -> Self {
        Self {
            stack: Stack::Bare(service),
            input_address: input_address.into(),
            control,
        }
    }

    pub(crate) fn layered(
        service: BoxEndpointService,
        input_address: String,
        control: EndpointControl,
        own_layers: bool,
    ) -> Self {
        Self {
            stack: Stack::Layered(service, own_layers),
            input_address: input_address.into(),
            control,
        }
    }

    /// The endpoint's pause switch: the transport takes no deliveries while it is paused and
    /// runs [`EndpointControl::until_resumed`]; health checks read its state. Endpoint layers
    /// find it in every delivery's extensions.
    pub fn control(&self) -> &EndpointControl {
        &self.control
    }

    /// The endpoint's input address.
    pub fn input_address(&self) -> &str {
        &self.input_address
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let layered = matches!(self.stack, Stack::Layered(..));
        f.debug_struct("Endpoint")
            .field("input_address", &self.input_address)
            .field("layered", &layered)
            .field("state", &self.control.state())
            .finish_non_exhaustive()
    }
}

impl Service<Delivery> for Endpoint {
    type Response = Settlement;
    type Error = Infallible;
    type Future = EndpointFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut delivery: Delivery) -> EndpointFuture {
        let handled = match &mut self.stack {
            Stack::Bare(service) => Box::pin(service.handle(delivery)),
            Stack::Layered(service, own_layers) => {
                if *own_layers {
                    delivery.extensions.insert(self.control.clone());
                }
                service.call(delivery)
            }
        };
        EndpointFuture {
            handled,
            input_address: self.input_address.clone(),
        }
    }
}

/// The future of one delivery through an [`Endpoint`]: its stack's future behind the endpoint's
/// panic guard (no allocation of its own).
pub struct EndpointFuture {
    handled: BoxFuture<'static, Result<Settlement, Infallible>>,
    input_address: Arc<str>,
}

impl Future for EndpointFuture {
    type Output = Result<Settlement, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match std::panic::catch_unwind(AssertUnwindSafe(|| this.handled.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => Poll::Ready(Ok(panicked(&*payload, &this.input_address))),
        }
    }
}

impl std::fmt::Debug for EndpointFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointFuture")
            .field("input_address", &self.input_address)
            .finish_non_exhaustive()
    }
}

/// The settlement of a delivery whose handling panicked outside any consumer: the error queue,
/// no fault message.
fn panicked(payload: &(dyn Any + Send), input_address: &str) -> Settlement {
    let error = ConsumeError::panic(panic_message(payload));
    tracing::error!(target: "ferrybus::receive", error = %error, "handling a delivery panicked outside any consumer; moving it to the error queue");
    Settlement::Fault(Box::new(Faulted {
        headers: fault_headers(&error, input_address, None),
        fault: None,
        exception: ExceptionInfo::from_error(&error, "ferrybus"),
        receive_fault: false,
    }))
}
