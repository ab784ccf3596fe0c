//! Telling transient infrastructure failures from the consumer's own errors, in one place, and
//! the guard that pauses an endpoint on them instead of spending its retries.

use std::error::Error as StdError;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::{Layer, Service};

use super::control::{Dependency, EndpointControl, EndpointState, PauseCause, Resume};
use crate::consume::ConsumeRequest;
use crate::error::{ConsumeError, ConsumeErrorKind, PublishError, PublishErrorKind};

/// Decides whether an error (anywhere in a [`ConsumeError`]'s chain) is a transient
/// infrastructure failure, and of what.
pub type Classifier = Arc<dyn Fn(&(dyn StdError + 'static)) -> Option<Dependency> + Send + Sync>;

/// The classifiers of one endpoint, asked in order for every error in the chain, outermost
/// first: the storage's (see [`Storage::classify`](crate::storage::Storage::classify)), the endpoint's
/// own ([`EndpointConfig::transient_if`](crate::EndpointConfig::transient_if)), then the
/// built-in rules of [`builtin`].
///
/// ```
/// use ferrybus_core::pause::{Dependency, Transience};
/// use ferrybus_core::{ConsumeError, PublishError};
/// use ferrybus_core::error::PublishErrorKind;
///
/// let transience = Transience::default();
/// let refused = ConsumeError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
/// assert_eq!(transience.classify(&refused), Some(Dependency::Other));
/// let broker = ConsumeError::from(PublishError::new(PublishErrorKind::NotConnected, "no connection within 30s"));
/// assert_eq!(transience.classify(&broker), Some(Dependency::Broker));
/// assert_eq!(transience.classify(&ConsumeError::handler("payment declined")), None);
/// ```
#[derive(Clone, Default)]
pub struct Transience {
    classifiers: Vec<Classifier>,
}

impl Transience {
    /// Adds a classifier, asked before those added later and before the built-in rules.
    pub fn with(mut self, classifier: Classifier) -> Self {
        self.classifiers.push(classifier);
        self
    }

    /// The dependency `error` is a transient failure of, or `None` for the consumer's own
    /// errors (and for errors marked [permanent](ConsumeError::permanent)).
    pub fn classify(&self, error: &ConsumeError) -> Option<Dependency> {
        if error.is_permanent() {
            return None;
        }
        error.chain().find_map(|e| self.classify_one(e))
    }

    fn classify_one(&self, error: &(dyn StdError + 'static)) -> Option<Dependency> {
        self.classifiers
            .iter()
            .find_map(|c| c(error))
            .or_else(|| builtin(error))
    }
}

impl std::fmt::Debug for Transience {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transience")
            .field("classifiers", &self.classifiers.len())
            .finish()
    }
}

/// The built-in rules, for one error of a chain: a [`PublishError`] of kind `NotConnected` or
/// `Timeout` is the broker's; an [`std::io::Error`] of kind `ConnectionRefused`,
/// `ConnectionReset`, `ConnectionAborted`, `NotConnected`, `BrokenPipe`, `TimedOut`,
/// `UnexpectedEof`, `HostUnreachable`, `NetworkUnreachable` or `AddrNotAvailable` is transient
/// (of [`Dependency::Other`] unless a classifier asked before claims it).
pub fn builtin(error: &(dyn StdError + 'static)) -> Option<Dependency> {
    if let Some(publish) = error.downcast_ref::<PublishError>() {
        return matches!(
            publish.kind(),
            PublishErrorKind::NotConnected | PublishErrorKind::Timeout
        )
        .then_some(Dependency::Broker);
    }
    let io = error.downcast_ref::<std::io::Error>()?;
    use std::io::ErrorKind as K;
    matches!(
        io.kind(),
        K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::TimedOut
            | K::UnexpectedEof
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::AddrNotAvailable
    )
    .then_some(Dependency::Other)
}

/// The error a delivery ends with when its endpoint paused: kind
/// [`ConsumeErrorKind::Cancelled`], so it is not retried and the endpoint gives the delivery
/// back to the broker ([`Settlement::Abandon`](crate::Settlement::Abandon)).
#[derive(Debug, thiserror::Error)]
#[error("the endpoint is paused ({cause}): {reason}")]
pub struct EndpointPaused {
    cause: &'static str,
    reason: String,
}

/// A consumer-level layer, placed between retry and the inbox: a transient failure (see
/// [`Transience`]) pauses the endpoint and the delivery is given back unacknowledged, without
/// spending a retry; a delivery that reaches it while the endpoint is paused is given back
/// without running.
///
/// A message whose failures look transient while other messages of the endpoint succeed in
/// between is not waiting for its dependency: it is poison (a request that always times out, a
/// statement that always hits a lock timeout). After `strike_limit` such failures it is handled as
/// an ordinary failure (retry, redelivery, `_error` with its fault), so it cannot pause the
/// endpoint forever. During a real outage nothing succeeds in between, so no strike is counted.
#[derive(Clone)]
pub struct TransientGuardLayer {
    control: EndpointControl,
    transience: Transience,
    strikes: Arc<Strikes>,
}

impl TransientGuardLayer {
    /// A guard that pauses `control` on failures `transience` tells transient, striking a message
    /// after `strike_limit` such failures while others succeed.
    pub(crate) fn new(control: EndpointControl, transience: Transience, strike_limit: u32) -> Self {
        Self {
            control,
            transience,
            strikes: Arc::new(Strikes::new(strike_limit)),
        }
    }
}

impl std::fmt::Debug for TransientGuardLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransientGuardLayer")
            .field("endpoint", &self.control.name())
            .finish_non_exhaustive()
    }
}

/// The most messages the strike book remembers; past it, it starts afresh (a message's strikes
/// then count again from zero: it pauses the endpoint a few more times, nothing is lost).
const STRIKE_BOOK_SIZE: usize = 1024;

/// Per message, how often its failures looked transient while others succeeded (see
/// [`TransientGuardLayer`]).
#[derive(Debug)]
struct Strikes {
    limit: u32,
    successes: std::sync::atomic::AtomicU64,
    /// How many messages the book holds (read without the lock).
    struck: std::sync::atomic::AtomicUsize,
    book: std::sync::Mutex<std::collections::HashMap<uuid::Uuid, Strike>>,
}

#[derive(Clone, Copy, Debug)]
struct Strike {
    count: u32,
    successes_seen: u64,
}

impl Strikes {
    /// A book that lets a message fail transiently `limit` times while others succeed.
    fn new(limit: u32) -> Self {
        Self {
            limit: limit.max(1),
            successes: std::sync::atomic::AtomicU64::new(0),
            struck: std::sync::atomic::AtomicUsize::new(0),
            book: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    fn succeeded(&self, message: Option<uuid::Uuid>) {
        use std::sync::atomic::Ordering::Relaxed;
        self.successes.fetch_add(1, Relaxed);
        // The hot path: no lock while no message has a strike.
        if let Some(id) = message.filter(|_| self.struck.load(Relaxed) > 0) {
            let mut book = self.lock();
            book.remove(&id);
            self.struck.store(book.len(), Relaxed);
        }
    }

    /// Records a transient-looking failure of `message`; `true` when it has used up its strikes.
    fn failed(&self, message: Option<uuid::Uuid>) -> bool {
        let Some(id) = message else { return false };
        let successes = self.successes.load(std::sync::atomic::Ordering::Relaxed);
        let mut book = self.lock();
        if book.len() >= STRIKE_BOOK_SIZE && !book.contains_key(&id) {
            book.clear();
        }
        let strike = book.entry(id).or_insert(Strike {
            count: 0,
            successes_seen: successes,
        });
        if strike.count == 0 || successes > strike.successes_seen {
            strike.count += 1;
        }
        strike.successes_seen = successes;
        let used_up = strike.count > self.limit;
        self.struck
            .store(book.len(), std::sync::atomic::Ordering::Relaxed);
        used_up
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<uuid::Uuid, Strike>> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<S> Layer<S> for TransientGuardLayer {
    type Service = TransientGuard<S>;

    fn layer(&self, inner: S) -> TransientGuard<S> {
        TransientGuard {
            inner,
            layer: self.clone(),
        }
    }
}

/// See [`TransientGuardLayer`].
#[derive(Clone)]
pub struct TransientGuard<S> {
    inner: S,
    layer: TransientGuardLayer,
}

/// A request the transient guard runs: which message it is for, if one (a message that keeps
/// failing transiently while others succeed is struck; a batch, standing for several, is not).
pub trait Guarded {
    /// The id of the message the request is for.
    fn message_id(&self) -> Option<uuid::Uuid>;
}

impl Guarded for ConsumeRequest {
    fn message_id(&self) -> Option<uuid::Uuid> {
        self.received().envelope.message_id
    }
}

impl<S, R> Service<R> for TransientGuard<S>
where
    R: Guarded,
    S: Service<R, Error = ConsumeError> + Clone + Send + 'static,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<S::Response, ConsumeError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConsumeError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        if let Some(paused) = self.layer.paused() {
            return Box::pin(async move { Err(paused) });
        }
        let message = request.message_id();
        self.layer.guard(self.inner.call(request), message)
    }
}

impl TransientGuardLayer {
    /// The error a delivery taken while the endpoint is paused fails with.
    fn paused(&self) -> Option<ConsumeError> {
        match self.control.state() {
            EndpointState::Paused(paused) => {
                Some(paused_error(paused.cause.as_str(), paused.reason))
            }
            _ => None,
        }
    }

    /// Runs `future`; a transient failure pauses the endpoint and comes back as the paused error,
    /// unless `message` used up its strikes (see [`TransientGuardLayer`]).
    fn guard<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = Result<T, ConsumeError>> + Send + 'static,
        message: Option<uuid::Uuid>,
    ) -> BoxFuture<'static, Result<T, ConsumeError>> {
        let control = self.control.clone();
        let transience = self.transience.clone();
        let strikes = self.strikes.clone();
        Box::pin(async move {
            let error = match future.await {
                Ok(outcome) => {
                    strikes.succeeded(message);
                    return Ok(outcome);
                }
                Err(error) => error,
            };
            let Some(dependency) = transience.classify(&error) else {
                return Err(error);
            };
            if strikes.failed(message) {
                tracing::warn!(target: "ferrybus::resilience", endpoint = control.name(), ?message, error = %error, "this message keeps failing transiently while others succeed; handling it as a failure (retry, redelivery, error queue)");
                return Err(error);
            }
            let cause = PauseCause::Transient(dependency);
            control.pause(cause, error.to_string(), Resume::WhenAvailable(dependency));
            tracing::info!(target: "ferrybus::resilience", endpoint = control.name(), error = %error, "transient failure; the delivery goes back to the queue and the endpoint pauses until the dependency answers (no retry spent)");
            Err(paused_error(cause.as_str(), error.to_string()))
        })
    }
}

fn paused_error(cause: &'static str, reason: String) -> ConsumeError {
    ConsumeError::new(
        ConsumeErrorKind::Cancelled,
        EndpointPaused { cause, reason },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct Wrapped(#[source] std::io::Error);

    #[test]
    fn finds_transient_errors_anywhere_in_the_chain() {
        let t = Transience::default();
        let reset = ConsumeError::from(Wrapped(std::io::ErrorKind::ConnectionReset.into()));
        assert_eq!(t.classify(&reset), Some(Dependency::Other));
        let notfound = ConsumeError::from(Wrapped(std::io::ErrorKind::NotFound.into()));
        assert_eq!(t.classify(&notfound), None);
        let permanent =
            ConsumeError::permanent(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(t.classify(&permanent), None);
        let rejected = ConsumeError::from(PublishError::new(PublishErrorKind::Rejected, "nack"));
        assert_eq!(t.classify(&rejected), None);
    }

    #[test]
    fn strikes_count_only_while_others_succeed() {
        let strikes = Strikes::new(2);
        let (poison, other) = (
            Some(uuid::Uuid::from_u128(1)),
            Some(uuid::Uuid::from_u128(2)),
        );
        // An outage: the same message fails again and again, nothing succeeds in between.
        for _ in 0..10 {
            assert!(!strikes.failed(poison));
        }
        // Others succeed between its failures: the second strike is the last it gets.
        strikes.succeeded(other);
        assert!(!strikes.failed(poison));
        strikes.succeeded(other);
        assert!(strikes.failed(poison), "used up its strikes");
        // A success of the message itself forgets its strikes.
        strikes.succeeded(poison);
        assert!(!strikes.failed(poison));
        assert!(
            !strikes.failed(None),
            "messages without an id are never struck"
        );
    }

    #[test]
    fn classifiers_come_first() {
        let t = Transience::default().with(Arc::new(|e| {
            e.downcast_ref::<std::io::Error>()
                .map(|_| Dependency::Storage)
        }));
        let reset = ConsumeError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(t.classify(&reset), Some(Dependency::Storage));
    }
}
