//! The inbox and consumer outbox: one READ COMMITTED transaction per delivery.
//!
//! ```text
//! BEGIN ─ INSERT inbox row (consumed = delivered = now) ON CONFLICT DO NOTHING
//!         ─┬─ inserted ─────────────▶ run consumer
//!          └─ exists: lock (UPDATE) ─┬─ not consumed ▶ run consumer (older row: marked afterwards)
//!                                    ├─ consumed, not delivered ▶ send rest, finish
//!                                    └─ delivered ▶ duplicate: ack
//! run consumer ─ Err ▶ ROLLBACK (nothing happened, the row is gone too)
//!              └ Ok  ▶ published nothing: COMMIT
//!                      published: INSERT outbox rows + set consumed, delivered = NULL (one
//!                      statement) ─ COMMIT
//! after COMMIT, if it published: BEGIN ─ lock inbox row, check undelivered ─ send in order
//!                                 (pipelined) ─ set delivered + delete rows (one statement)
//!                                 ─ COMMIT ─ ack
//! ```

mod config;
mod context;
mod flow;
mod layer;
mod sink;

use std::sync::Arc;
use std::task::{Context, Poll};

use ferrybus_core::{ConsumeError, ConsumeRequest};
use futures::future::BoxFuture;
use tower::Service;

pub use config::InboxConfig;
pub use context::{InboxTransaction, TransactionExt};
pub use layer::InboxLayer;

use layer::Shared;

/// The inbox service: wraps a consumer pipeline `S` (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Inbox<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Inbox<S> {
    pub(crate) fn from_shared(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<ConsumeRequest> for Inbox<S>
where
    S: Service<ConsumeRequest, Response = (), Error = ConsumeError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ();
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<(), ConsumeError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ConsumeRequest) -> Self::Future {
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        Box::pin(flow::handle(shared, inner, request))
    }
}
