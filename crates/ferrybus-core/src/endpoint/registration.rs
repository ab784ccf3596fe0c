//! [`ConsumerRegistration`]: a consumer on an endpoint before the endpoint is built, and the
//! [`ConsumerBuild`] its stack is built with.
//!
//! Every consumer's stack is the one drawn in the [module docs](crate::endpoint) (retry ▶
//! transient guard ▶ inbox ▶ the endpoint's consumer layers ▶ the bus's ▶ the consumer), so each
//! retry attempt runs the inbox and the consumer layers again (a new transaction). An
//! add-on with a stack of its own (a batch consumer gathers messages before its own pipeline)
//! registers with [`ConsumerRegistration::custom`] and builds from the same parts.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tower::util::BoxCloneSyncService;
use tower::Layer;

use crate::consume::{BoxConsumeLayer, BoxConsumeService, ConsumerInfo, RetryLayer, RetryPolicy};
use crate::error::ConsumeError;
use crate::pause::{Guarded, TransientGuardLayer};
use crate::storage::Storage;

/// Builds one consumer's stack when its endpoint is built.
type BuildFn = Arc<dyn Fn(&ConsumerBuild<'_>) -> BoxConsumeService + Send + Sync>;

/// A consumer on an endpoint before the endpoint is built: who it is, how many messages it needs
/// in flight at once, and how its stack is built.
///
/// ```
/// use std::sync::Arc;
/// use ferrybus_core::consume::{ConsumerInfo, ConsumerService};
/// use ferrybus_core::endpoint::ConsumerRegistration;
/// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig, Message};
/// # #[derive(serde::Serialize, serde::Deserialize, ferrybus_core::Message)]
/// # #[message(namespace = "Shop")]
/// # struct OrderPlaced {}
/// let audit = consumer_fn("Audit", |_: ConsumeContext<OrderPlaced>| async { Ok::<_, ConsumeError>(()) });
/// let info = ConsumerInfo::of::<OrderPlaced>("Audit", "order-audit");
/// let service = tower::util::BoxCloneSyncService::new(ConsumerService::new(Arc::new(audit)));
/// let endpoint = EndpointConfig::new("order-audit").register(ConsumerRegistration::new(info, service));
/// assert_eq!(endpoint.consumers().count(), 1);
/// ```
#[derive(Clone)]
pub struct ConsumerRegistration {
    info: ConsumerInfo,
    in_flight: usize,
    build: BuildFn,
}

impl ConsumerRegistration {
    /// A consumer with the endpoint's standard stack around `service`
    /// ([`ConsumerBuild::standard`]).
    pub fn new(info: ConsumerInfo, service: BoxConsumeService) -> Self {
        Self::custom(info, 0, move |build| build.standard(service.clone()))
    }

    /// A consumer that builds its own stack with `build`, and needs `in_flight` messages
    /// delivered at once (the endpoint's prefetch and concurrency are raised to it).
    pub fn custom(
        info: ConsumerInfo,
        in_flight: usize,
        build: impl Fn(&ConsumerBuild<'_>) -> BoxConsumeService + Send + Sync + 'static,
    ) -> Self {
        Self {
            info,
            in_flight,
            build: Arc::new(build),
        }
    }

    /// Who the consumer is.
    pub fn info(&self) -> &ConsumerInfo {
        &self.info
    }

    /// How many messages it needs delivered at once (0: no requirement).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn build(&self, parts: &ConsumerBuild<'_>) -> BoxConsumeService {
        (self.build)(parts)
    }
}

impl std::fmt::Debug for ConsumerRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerRegistration")
            .field("consumer", &self.info.name())
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

/// What a consumer's stack is built with: the endpoint's retry policy, transient guard, inbox
/// and consumer layers, the bus's storage and consumer layers.
pub struct ConsumerBuild<'a> {
    pub(crate) retry: Option<&'a RetryPolicy>,
    pub(crate) guard: Option<&'a TransientGuardLayer>,
    pub(crate) inbox: Option<&'a BoxConsumeLayer>,
    pub(crate) uses_inbox: bool,
    pub(crate) endpoint_layers: &'a [BoxConsumeLayer],
    pub(crate) bus_layers: &'a [BoxConsumeLayer],
    pub(crate) storage: Option<&'a Arc<dyn Storage>>,
    pub(crate) cancellation: &'a CancellationToken,
}

impl ConsumerBuild<'_> {
    /// The endpoint's retry policy.
    pub fn retry(&self) -> Option<&RetryPolicy> {
        self.retry
    }

    /// The endpoint's transient-failure guard (absent with `pause_on_transient(false)`).
    pub fn transient_guard(&self) -> Option<&TransientGuardLayer> {
        self.guard
    }

    /// Whether the endpoint runs its consumers behind the storage's inbox.
    pub fn uses_inbox(&self) -> bool {
        self.uses_inbox
    }

    /// The bus's storage.
    pub fn storage(&self) -> Option<&Arc<dyn Storage>> {
        self.storage
    }

    /// Cancelled when the endpoint must abandon in-flight work.
    pub fn cancellation(&self) -> &CancellationToken {
        self.cancellation
    }

    /// The standard stack around `consumer`: retry ▶ transient guard ▶ inbox ▶ the endpoint's
    /// consumer layers ▶ the bus's consumer layers ▶ `consumer`.
    pub fn standard(&self, consumer: BoxConsumeService) -> BoxConsumeService {
        let layered = self
            .endpoint_layers
            .iter()
            .chain(self.bus_layers)
            .rev()
            .fold(consumer, |inner, layer| layer.layer(inner));
        let layered = match self.inbox {
            Some(inbox) => inbox.layer(layered),
            None => layered,
        };
        self.guarded_retry(layered)
    }

    /// `service` behind the transient guard, then retry: what every stack has outermost.
    pub fn guarded_retry<S, R>(&self, service: S) -> BoxCloneSyncService<R, S::Response, S::Error>
    where
        S: tower::Service<R, Error = ConsumeError> + Clone + Send + Sync + 'static,
        S::Response: Send + 'static,
        S::Future: Send + 'static,
        R: Guarded + Send + 'static,
        RetryPolicy: tower::retry::Policy<R, S::Response, ConsumeError>,
        <RetryPolicy as tower::retry::Policy<R, S::Response, ConsumeError>>::Future: Send + 'static,
    {
        let guarded = match self.guard {
            Some(guard) => BoxCloneSyncService::new(guard.layer(service)),
            None => BoxCloneSyncService::new(service),
        };
        match self.retry {
            Some(policy) => {
                BoxCloneSyncService::new(RetryLayer::new(policy.clone()).layer(guarded))
            }
            None => guarded,
        }
    }
}
