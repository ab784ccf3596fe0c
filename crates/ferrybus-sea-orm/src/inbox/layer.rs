//! [`InboxLayer`]: adds the inbox and consumer outbox to an endpoint.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tower::Layer;

use ferrybus_core::consume::ConsumerInfo;
use uuid::Uuid;

use crate::fast::{Connections, PublishGuess};
use crate::inbox::config::KnownConsumerId;
use crate::inbox::{Handoff, Inbox, InboxConfig};

/// The inbox + consumer outbox as a tower layer. Add it with `EndpointConfig::layer`; put it
/// inside retry (retry is always outermost), so each attempt gets a new transaction.
#[derive(Clone, Debug)]
pub(crate) struct InboxLayer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    /// The connections deliveries run their transactions on (the storage's, shared by its
    /// endpoints).
    pub(crate) connections: Arc<Connections>,
    pub(crate) config: InboxConfig,
    /// The after-commit sender of the storage (acknowledge before sending while it runs).
    pub(crate) handoff: Arc<Handoff>,
    /// Whether the next delivery publishes: its inbox row is inserted "not delivered" when it
    /// is expected to (`flow::RunRow`), so a publishing consumer's row is written once.
    pub(crate) publish_guess: PublishGuess,
    /// The consumer id the inbox uses for the consumer of this layer, once derived.
    known_consumer_id: KnownConsumerId,
    /// The deliveries of this endpoint running through the inbox now.
    pub(crate) in_flight: AtomicUsize,
}

/// One delivery counted in [`Shared::in_flight`] while it lives.
pub(crate) struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    pub(crate) fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }

    /// Whether no other delivery of the endpoint runs now: always so on a sequential endpoint
    /// (concurrency 1), whose next delivery starts once this one is settled.
    pub(crate) fn alone(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 1
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl InboxLayer {
    /// An inbox running each delivery on one of `connections`.
    pub(crate) fn new(
        connections: Arc<Connections>,
        config: InboxConfig,
        handoff: Arc<Handoff>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared::new(connections, config, handoff)),
        }
    }
}

impl Shared {
    pub(crate) fn new(
        connections: Arc<Connections>,
        config: InboxConfig,
        handoff: Arc<Handoff>,
    ) -> Self {
        Self {
            connections,
            config,
            handoff,
            publish_guess: PublishGuess::default(),
            known_consumer_id: KnownConsumerId::default(),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The inbox consumer id of `consumer` (see [`InboxConfig::resolve_consumer_id`]).
    pub(crate) fn consumer_id(&self, consumer: &ConsumerInfo) -> Uuid {
        self.known_consumer_id.get(&self.config, consumer)
    }
}

impl<S> Layer<S> for InboxLayer {
    type Service = Inbox<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Inbox::from_shared(inner, self.shared.clone())
    }
}
