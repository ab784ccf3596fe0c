//! [`Event`]: what happened to the connection and the endpoints, for logs, metrics and tests.

use tokio::sync::broadcast;

/// Something that happened on the bus. Subscribe with
/// [`RabbitMqBus::events`](crate::RabbitMqBus::events); tests await these instead of sleeping.
///
/// ```no_run
/// # async fn run(bus: ferrybus_rabbitmq::RabbitMqBus) {
/// use ferrybus_rabbitmq::Event;
/// let mut events = bus.events();
/// while let Ok(event) = events.recv().await {
///     if let Event::Reconnected { generation } = event {
///         println!("back online (connection #{generation})");
///     }
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The first connection is open.
    Connected {
        /// The connection number, 1 for the first.
        generation: u64,
    },
    /// The connection was lost (or closed by the broker); a channel the broker closed (a
    /// refused publish or declaration) leaves the connection open and emits none.
    Disconnected {
        /// The connection that was lost.
        generation: u64,
        /// Why, as far as the client knows.
        reason: String,
    },
    /// A connection attempt failed; another follows after a back-off.
    ConnectFailed {
        /// The attempt number since the last successful connection.
        attempt: u32,
        /// Why it failed.
        reason: String,
    },
    /// A new connection is open after a loss; endpoints re-declare and re-consume on it.
    Reconnected {
        /// The new connection number.
        generation: u64,
    },
    /// An endpoint declared its topology and is consuming on connection `generation`.
    EndpointReady {
        /// The queue.
        queue: String,
        /// The connection it consumes on.
        generation: u64,
    },
    /// An endpoint could not declare its topology or start consuming; it retries.
    EndpointFailed {
        /// The queue.
        queue: String,
        /// Why.
        reason: String,
    },
    /// An endpoint paused: it takes no deliveries until it resumes (a transient failure of
    /// the database or the broker, a kill switch, a circuit breaker; see
    /// [`ferrybus_core::pause`]). Unsettled deliveries went back to the queue.
    EndpointPaused {
        /// The queue.
        queue: String,
        /// Why, as [`PauseCause::as_str`](ferrybus_core::pause::PauseCause::as_str):
        /// `transient:storage`, `transient:broker`, `kill-switch` …
        cause: String,
        /// What failed, in one line.
        reason: String,
    },
    /// A paused endpoint consumes again.
    EndpointResumed {
        /// The queue.
        queue: String,
        /// How long it was paused.
        paused_for: std::time::Duration,
    },
    /// An endpoint stopped consuming (shutdown).
    EndpointStopped {
        /// The queue.
        queue: String,
    },
    /// A delivery was consumed and acknowledged.
    Consumed {
        /// The queue.
        queue: String,
        /// The AMQP `message_id` property.
        message_id: Option<String>,
        /// Whether every consumer had handled it already (the inbox acknowledged a duplicate).
        duplicate: bool,
    },
    /// A delivery was moved to `<queue>_error` and acknowledged.
    Faulted {
        /// The queue.
        queue: String,
        /// The AMQP `message_id` property.
        message_id: Option<String>,
    },
    /// A delivery was moved to `<queue>_skipped` and acknowledged.
    Skipped {
        /// The queue.
        queue: String,
        /// The AMQP `message_id` property.
        message_id: Option<String>,
    },
    /// A delivery was scheduled for delayed redelivery and acknowledged.
    Redelivered {
        /// The queue.
        queue: String,
        /// The AMQP `message_id` property.
        message_id: Option<String>,
        /// The new `MT-Redelivery-Count`.
        count: i64,
    },
    /// A delivery was given back to the broker (`basic.nack` with requeue), or left
    /// unacknowledged because its channel was gone.
    Returned {
        /// The queue.
        queue: String,
        /// The AMQP `message_id` property.
        message_id: Option<String>,
    },
    /// The bus stopped; the connection is closed.
    Stopped,
}

/// The sending side of the event stream.
#[derive(Clone, Debug)]
pub(crate) struct Events(broadcast::Sender<Event>);

impl Events {
    pub(crate) fn new() -> Self {
        Self(broadcast::channel(4096).0)
    }

    pub(crate) fn emit(&self, event: Event) {
        tracing::debug!(target: "ferrybus::rabbitmq", ?event, "event");
        // No subscriber is fine.
        let _ = self.0.send(event);
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.0.subscribe()
    }
}
