//! [`PanicGuard`]: the outermost wrapper of every endpoint, so a panicking endpoint layer still
//! settles its delivery (in the error queue) and the transport never sees a panic.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::FutureExt;
use tower::{Service, ServiceExt};

use crate::consume::panic_message;
use crate::endpoint::{BoxEndpointService, Delivery, Faulted, Settlement};
use crate::error::ConsumeError;
use crate::fault::{fault_headers, ExceptionInfo};

/// Turns a panic anywhere in an endpoint's stack into [`Settlement::Fault`] (no fault message:
/// the panic happened outside any consumer, before the message was known).
#[derive(Clone)]
pub(crate) struct PanicGuard {
    inner: BoxEndpointService,
    input_address: Arc<str>,
}

impl PanicGuard {
    pub(crate) fn new(inner: BoxEndpointService, input_address: String) -> Self {
        Self {
            inner,
            input_address: input_address.into(),
        }
    }
}

impl Service<Delivery> for PanicGuard {
    type Response = Settlement;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Settlement, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        let inner = self.inner.clone();
        let input_address = self.input_address.clone();
        Box::pin(async move {
            let outcome = AssertUnwindSafe(inner.oneshot(delivery))
                .catch_unwind()
                .await;
            Ok(match outcome {
                Ok(Ok(settlement)) => settlement,
                Ok(Err(never)) => match never {},
                Err(payload) => {
                    let error = ConsumeError::panic(panic_message(&*payload));
                    tracing::error!(target: "ferrybus::receive", error = %error, "an endpoint layer panicked; moving the message to the error queue");
                    Settlement::Fault(Box::new(Faulted {
                        headers: fault_headers(&error, &input_address, None),
                        fault: None,
                        exception: ExceptionInfo::from_error(&error, "ferrybus"),
                        receive_fault: false,
                    }))
                }
            })
        })
    }
}
