//! [`BoxEndpointService`] and [`BoxEndpointLayer`]: endpoint services and layers with their
//! types erased, so that layers of any type stack on one endpoint.
//!
//! Unlike tower's boxed services, cloning one costs no allocation (an `Arc`): a transport clones
//! its endpoint for every delivery, and every layer of the stack would otherwise box a copy of
//! what it wraps each time. A call runs a clone of the wrapped service (services are cheap to
//! clone: layers keep their shared state behind `Arc`s), made ready and called, in one
//! allocation.

use std::any::Any;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::{Layer, Service, ServiceExt};

use super::delivery::Delivery;
use super::service::EndpointService;
use super::settlement::Settlement;

/// A type-erased endpoint: `Service<Delivery, Response = Settlement, Error = Infallible>`, what
/// every endpoint layer wraps and returns (see [`crate::endpoint`]).
#[derive(Clone)]
pub struct BoxEndpointService(Arc<dyn Erased>);

trait Erased: Send + Sync {
    fn call(&self, delivery: Delivery) -> BoxFuture<'static, Result<Settlement, Infallible>>;
}

struct Wrapped<S>(S);

impl<S> Erased for Wrapped<S>
where
    S: Service<Delivery, Response = Settlement, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    fn call(&self, delivery: Delivery) -> BoxFuture<'static, Result<Settlement, Infallible>> {
        Box::pin(self.0.clone().oneshot(delivery))
    }
}

/// The endpoint service itself, innermost: its future is boxed once, with nothing around it.
struct Innermost(EndpointService);

impl Erased for Innermost {
    fn call(&self, delivery: Delivery) -> BoxFuture<'static, Result<Settlement, Infallible>> {
        Box::pin(self.0.handle(delivery))
    }
}

impl BoxEndpointService {
    /// Erases `service`'s type (a `BoxEndpointService` is kept as it is).
    pub fn new<S>(service: S) -> Self
    where
        S: Service<Delivery, Response = Settlement, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        if let Some(boxed) = (&service as &dyn Any).downcast_ref::<BoxEndpointService>() {
            return boxed.clone();
        }
        Self(Arc::new(Wrapped(service)))
    }

    pub(crate) fn innermost(service: EndpointService) -> Self {
        Self(Arc::new(Innermost(service)))
    }
}

impl Service<Delivery> for BoxEndpointService {
    type Response = Settlement;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Settlement, Infallible>>;

    /// Always ready: each call readies its own clone of the wrapped service.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        self.0.call(delivery)
    }
}

impl std::fmt::Debug for BoxEndpointService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxEndpointService").finish_non_exhaustive()
    }
}

/// A type-erased endpoint-level layer (see `EndpointConfig::layer`,
/// `BusConfig::endpoint_layer`).
///
/// ```
/// use ferrybus_core::endpoint::BoxEndpointLayer;
/// let layer = BoxEndpointLayer::new(tower::limit::ConcurrencyLimitLayer::new(8));
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct BoxEndpointLayer(Arc<dyn Fn(BoxEndpointService) -> BoxEndpointService + Send + Sync>);

impl BoxEndpointLayer {
    /// Erases `layer`'s type.
    pub fn new<L>(layer: L) -> Self
    where
        L: Layer<BoxEndpointService> + Send + Sync + 'static,
        L::Service: Service<Delivery, Response = Settlement, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as Service<Delivery>>::Future: Send + 'static,
    {
        Self(Arc::new(move |inner| {
            BoxEndpointService::new(layer.layer(inner))
        }))
    }
}

impl Layer<BoxEndpointService> for BoxEndpointLayer {
    type Service = BoxEndpointService;

    fn layer(&self, inner: BoxEndpointService) -> BoxEndpointService {
        (self.0)(inner)
    }
}

impl std::fmt::Debug for BoxEndpointLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxEndpointLayer").finish_non_exhaustive()
    }
}
