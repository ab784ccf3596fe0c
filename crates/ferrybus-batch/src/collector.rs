//! [`BatchCollector`]: gathers the deliveries of a batch consumer into batches and answers each
//! delivery with its batch's outcome, as MassTransit's `BatchCollector` / `BatchConsumer` do
//! (`src/MassTransit/Consumers/Batching/`): each message's consume waits for the batch it joined.
//!
//! ```text
//! message ─▶ bind to M? ──no──▶ Err(Deserialize) (a ReceiveFault for that message alone)
//!    │ yes
//!    ▼
//!  open batch (new one, and its timer, when none) ─ same message id already in it? ─▶ follow it
//!    │                                                        (acked with it, or faulted with it)
//!    ├─ message limit reached ─▶ deliver (Size)
//!    └─ timer: time limit passed since the first (or the last) message ─▶ deliver (Time)
//!                                endpoint stopping ─▶ every waiting message abandoned (requeued)
//! deliver: wait for one of `concurrency_limit` slots ─▶ batch pipeline ─▶ answer every message
//! ```

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::sync::{oneshot, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};
use tracing::Instrument;
use uuid::Uuid;

use ferrybus_core::error::ConsumeErrorKind;
use ferrybus_core::integration::{catch_panic, ConsumeOutcome, ConsumeRequest};
use ferrybus_core::ConsumeError;

use crate::options::{BatchCompletionMode, BatchOptions, TimeLimitStart};
use crate::request::{BatchRequest, BoxBatchService};

type Reply = oneshot::Sender<Result<ConsumeOutcome, ConsumeError>>;

/// Checks that a message binds to the batch's message type before it joins a batch.
pub(crate) type Validate = fn(&ConsumeRequest) -> Result<(), ConsumeError>;

/// The consumer-level service an endpoint routes a batch consumer's messages to (see the
/// [module docs](self)). One per built endpoint.
#[derive(Clone)]
pub(crate) struct BatchCollector {
    shared: Arc<Shared>,
}

struct Shared {
    options: BatchOptions,
    validate: Validate,
    pipeline: BoxBatchService,
    slots: Arc<Semaphore>,
    cancellation: CancellationToken,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: Option<Open>,
    next_id: u64,
}

/// The batch being gathered.
struct Open {
    id: u64,
    waiting: Vec<Waiting>,
    /// Copies of a message already in the batch: they settle with it.
    followers: Vec<Reply>,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    deadline: Instant,
}

struct Waiting {
    request: ConsumeRequest,
    message_id: Option<Uuid>,
    reply: Reply,
}

impl BatchCollector {
    pub(crate) fn new(
        options: BatchOptions,
        validate: Validate,
        pipeline: BoxBatchService,
        cancellation: CancellationToken,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                slots: Arc::new(Semaphore::new(options.concurrency_limit_value())),
                options,
                validate,
                pipeline,
                cancellation,
                state: Mutex::new(State::default()),
            }),
        }
    }
}

impl Service<ConsumeRequest> for BatchCollector {
    type Response = ConsumeOutcome;
    type Error = ConsumeError;
    type Future = BoxFuture<'static, Result<ConsumeOutcome, ConsumeError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConsumeError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ConsumeRequest) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move {
            (shared.validate)(&request)?;
            let (reply, answer) = oneshot::channel();
            shared.add(request, reply);
            answer.await.unwrap_or_else(|_| {
                Err(ConsumeError::handler(
                    "the batch this message joined ended without an answer",
                ))
            })
        })
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(self: &Arc<Self>, request: ConsumeRequest, reply: Reply) {
        let message_id = request.received().original_message_id();
        let now = Instant::now();
        let limit = self.options.message_limit_value();
        let (full, new_batch) = {
            let mut state = self.lock();
            let mut new_batch = None;
            if state.open.is_none() {
                let id = state.next_id;
                state.next_id += 1;
                new_batch = Some(id);
                state.open = Some(Open {
                    id,
                    waiting: Vec::with_capacity(limit),
                    followers: Vec::new(),
                    first: Utc::now(),
                    last: Utc::now(),
                    deadline: now + self.options.time_limit_value(),
                });
            }
            let open = state.open.as_mut().expect("an open batch was just ensured");
            let seen =
                message_id.is_some_and(|id| open.waiting.iter().any(|w| w.message_id == Some(id)));
            if seen {
                // MassTransit keeps one copy of a message id per batch (`BatchConsumer.Add`); the
                // other copy waits for the batch and settles with it.
                open.followers.push(reply);
            } else {
                open.waiting.push(Waiting {
                    request,
                    message_id,
                    reply,
                });
            }
            open.last = Utc::now();
            if self.options.time_limit_start_value() == TimeLimitStart::FromLast {
                open.deadline = now + self.options.time_limit_value();
            }
            let full = if open.waiting.len() >= limit {
                state.open.take()
            } else {
                None
            };
            (full, new_batch)
        };
        if let Some(open) = full {
            self.deliver(open, BatchCompletionMode::Size);
        } else if let Some(id) = new_batch {
            tokio::spawn(self.clone().timer(id));
        }
    }

    /// Delivers batch `id` when its time limit passes (the deadline moves with `FromLast`), or
    /// abandons its messages when the endpoint stops first.
    async fn timer(self: Arc<Self>, id: u64) {
        loop {
            let deadline = match &self.lock().open {
                Some(open) if open.id == id => open.deadline,
                _ => return,
            };
            let cancelled = tokio::select! {
                () = tokio::time::sleep_until(deadline) => false,
                () = self.cancellation.cancelled() => true,
            };
            let due = {
                let mut state = self.lock();
                match &state.open {
                    Some(open)
                        if open.id == id && (cancelled || open.deadline <= Instant::now()) =>
                    {
                        state.open.take()
                    }
                    Some(open) if open.id == id => None,
                    _ => return,
                }
            };
            match due {
                Some(open) if cancelled => return abandon(open),
                Some(open) => return self.deliver(open, BatchCompletionMode::Time),
                None => {}
            }
        }
    }

    /// Runs `open` through the batch pipeline in its own task, once a concurrency slot is free,
    /// and answers every message of it.
    fn deliver(self: &Arc<Self>, open: Open, mode: BatchCompletionMode) {
        let shared = self.clone();
        let span = tracing::info_span!(
            target: "ferrybus::batch",
            "batch",
            messages = open.waiting.len(),
            mode = ?mode,
        );
        tokio::spawn(
            async move {
                let slot = tokio::select! {
                    slot = shared.slots.clone().acquire_owned() => slot.ok(),
                    () = shared.cancellation.cancelled() => None,
                };
                let Some(_slot) = slot else {
                    // The endpoint stopped while the batch waited for a slot.
                    return abandon(open);
                };
                let mut waiting = open.waiting;
                // In delivery order, as MassTransit's `GetMessageBatchInOrder` (the transport's
                // sequence number, else the sent time), not in the order the deliveries' tasks
                // reached the collector.
                waiting.sort_by_key(|w| {
                    let received = w.request.received();
                    (received.sequence_number, received.envelope.sent_time)
                });
                let (requests, replies): (Vec<_>, Vec<_>) =
                    waiting.into_iter().map(|w| (w.request, w.reply)).unzip();
                let Some(request) = BatchRequest::new(requests, mode, open.first, open.last) else {
                    return;
                };
                // The batch runs in a task of its own, outside every delivery's endpoint guard:
                // this guard answers every waiting message if the pipeline panics (the
                // consumer's own guard, inside retry, has already turned its panics into errors).
                let result = catch_panic(shared.pipeline.clone().oneshot(request)).await;
                answer(result, replies, open.followers);
            }
            .instrument(span),
        );
    }
}

/// Sends each message its outcome: the batch's, or (failed) the batch's error.
fn answer(
    result: Result<Vec<ConsumeOutcome>, ConsumeError>,
    replies: Vec<Reply>,
    followers: Vec<Reply>,
) {
    match result {
        Ok(outcomes) => {
            tracing::debug!(target: "ferrybus::batch", messages = replies.len(), "batch consumed");
            let mut outcomes = outcomes.into_iter();
            for reply in replies {
                let outcome = outcomes.next().ok_or_else(|| {
                    ConsumeError::handler("a batch layer answered fewer outcomes than messages")
                });
                let _ = reply.send(outcome);
            }
            for follower in followers {
                let _ = follower.send(Ok(ConsumeOutcome::Duplicate));
            }
        }
        Err(error) => {
            tracing::warn!(target: "ferrybus::batch", messages = replies.len(), error = %error, "batch failed");
            let error = Arc::new(error);
            for reply in replies.into_iter().chain(followers) {
                let _ = reply.send(Err(ConsumeError::shared(&error)));
            }
        }
    }
}

/// The endpoint stopped while `open` was gathering: its messages go back to the queue.
fn abandon(open: Open) {
    let replies = open.waiting.into_iter().map(|w| w.reply);
    for reply in replies.chain(open.followers) {
        let _ = reply.send(Err(ConsumeError::new(
            ConsumeErrorKind::Cancelled,
            "the endpoint stopped before the batch was complete",
        )));
    }
}
