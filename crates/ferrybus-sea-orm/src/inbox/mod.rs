//! The inbox and consumer outbox: one READ COMMITTED transaction per delivery.
//!
//! ```text
//! BEGIN (READ COMMITTED, on a connection kept between deliveries)
//!       ─ INSERT inbox row (consumed; delivered = now, or NULL when the last delivery
//!         published) ON CONFLICT DO NOTHING
//!         ─┬─ inserted ─────────────▶ run consumer
//!          └─ exists: lock (UPDATE) ─┬─ not consumed ▶ run consumer (older row: marked afterwards)
//!                                    ├─ consumed, not delivered ▶ send rest, finish
//!                                    └─ delivered ▶ duplicate: ack
//! run consumer ─ Err ▶ ROLLBACK (nothing happened, the row is gone too)
//!              └ Ok  ▶ published nothing: COMMIT
//!                      published: INSERT outbox rows + set consumed, delivered = NULL (one
//!                      statement) ─ COMMIT
//! after COMMIT, if it published: hand the rows to the after-commit sender ─ ack
//!     the sender, for everything handed over meanwhile: BEGIN ─ lock those inbox rows (SKIP
//!     LOCKED) ─ send each entry in order, entries concurrently ─ set delivered + delete rows
//!     (one statement for all) ─ COMMIT
//!     (no sender running, or `deliver_before_ack`: BEGIN ─ lock inbox row ─ send in order ─
//!     set delivered + delete rows ─ COMMIT ─ ack)
//! ```

#[cfg(feature = "batch")]
mod batch;
mod config;
mod context;
mod flow;
mod handoff;
mod layer;
mod sink;

use std::sync::Arc;
use std::task::{Context, Poll};

use ferrybus_core::ConsumeError;

use ferrybus_core::consume::ConsumeOutcome;

use ferrybus_core::consume::ConsumeRequest;
use futures::future::BoxFuture;
use tower::Service;

#[cfg(feature = "batch")]
pub(crate) use batch::BatchInboxLayer;
pub(crate) use config::InboxConfig;
pub use context::TransactionExt;
pub(crate) use handoff::Handoff;
pub(crate) use layer::InboxLayer;

use layer::Shared;

/// The inbox service: wraps a consumer pipeline `S` (see the [module docs](self)).
#[derive(Clone, Debug)]
pub(crate) struct Inbox<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Inbox<S> {
    pub(crate) fn from_shared(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }
}

impl<S> Service<ConsumeRequest> for Inbox<S>
where
    S: Service<ConsumeRequest, Response = ConsumeOutcome, Error = ConsumeError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = ConsumeOutcome;
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<ConsumeOutcome, ConsumeError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ConsumeRequest) -> Self::Future {
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        Box::pin(flow::handle(shared, inner, request))
    }
}
