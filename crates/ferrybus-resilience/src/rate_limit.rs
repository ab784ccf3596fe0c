//! [`RateLimitLayer`]: MassTransit's `UseRateLimit` as an endpoint layer.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use crate::window::Settled;
use ferrybus_core::endpoint::BoxEndpointService;
use ferrybus_core::{Delivery, Settlement};

/// At most `limit` deliveries start per `interval`, on this endpoint; the others wait, in order
/// of arrival, for the next interval (MassTransit's `UseRateLimit(limit, interval)`,
/// `src/MassTransit/Middleware/RateLimitFilter.cs`: a semaphore of `limit` permits, released
/// every interval).
///
/// tower's own `RateLimitLayer` keeps its state per service instance, while a transport clones
/// the endpoint for every delivery; this one shares its window among the clones. For a limit on
/// how many run *at once*, use tower's [`ConcurrencyLimitLayer`](tower::limit::ConcurrencyLimitLayer)
/// (per endpoint) or [`GlobalConcurrencyLimitLayer`](tower::limit::GlobalConcurrencyLimitLayer)
/// (one semaphore shared by several endpoints) as they are.
///
/// ```
/// use std::time::Duration;
/// use ferrybus_resilience::RateLimitLayer;
/// use ferrybus_core::EndpointConfig;
///
/// let endpoint = EndpointConfig::new("billing-invoice")
///     .layer(RateLimitLayer::new(100, Duration::from_secs(1)))
///     .layer(tower::limit::ConcurrencyLimitLayer::new(2));
/// # let _ = endpoint;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RateLimitLayer {
    limit: u32,
    interval: Duration,
}

impl RateLimitLayer {
    /// At most `limit` (at least 1) deliveries per `interval`.
    pub fn new(limit: u32, interval: Duration) -> Self {
        Self {
            limit: limit.max(1),
            interval,
        }
    }
}

impl Layer<BoxEndpointService> for RateLimitLayer {
    type Service = RateLimit;

    fn layer(&self, inner: BoxEndpointService) -> RateLimit {
        RateLimit {
            inner,
            limit: self.limit,
            interval: self.interval,
            window: Arc::new(Mutex::new(Window {
                started: Instant::now(),
                started_count: 0,
            })),
        }
    }
}

/// The service of a [`RateLimitLayer`].
#[derive(Clone)]
pub struct RateLimit {
    inner: BoxEndpointService,
    limit: u32,
    interval: Duration,
    window: Arc<Mutex<Window>>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    started_count: u32,
}

impl RateLimit {
    /// Waits for a slot. The lock is held while waiting, so waiters are served in order.
    async fn acquire(&self) {
        let mut window = self.window.lock().await;
        loop {
            let now = Instant::now();
            if now >= window.started + self.interval {
                window.started = now;
                window.started_count = 0;
            }
            if window.started_count < self.limit {
                window.started_count += 1;
                return;
            }
            tokio::time::sleep_until(window.started + self.interval).await;
        }
    }
}

impl Service<Delivery> for RateLimit {
    type Response = Settlement;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Settled>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            this.acquire().await;
            this.inner.clone().oneshot(delivery).await
        })
    }
}
