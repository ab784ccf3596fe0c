//! [`BatchOptions`]: how messages are gathered into batches.

use std::time::Duration;

/// Why a batch was handed to its consumer (MassTransit's `BatchCompletionMode`; its `Forced`
/// completes a batch when a retried message arrives, and ferrybus retries whole batches instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchCompletionMode {
    /// The time limit passed (`Time`).
    Time,
    /// The message limit was reached (`Size`).
    Size,
}

/// Where the time limit of a batch counts from (MassTransit's `BatchTimeLimitStart`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TimeLimitStart {
    /// From the batch's first message (`FromFirst`, the default).
    #[default]
    FromFirst,
    /// From its latest message: every message restarts the timer (`FromLast`).
    FromLast,
}

/// How messages are gathered into batches (MassTransit's `BatchOptions`).
///
/// ```
/// use std::time::Duration;
/// use ferrybus_batch::{BatchOptions, TimeLimitStart};
/// let options = BatchOptions::new()
///     .message_limit(50)
///     .time_limit(Duration::from_secs(2))
///     .concurrency_limit(2)
///     .time_limit_start(TimeLimitStart::FromLast);
/// assert_eq!(options.message_capacity(), 100);
/// assert_eq!(BatchOptions::default().message_limit_value(), 10);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    message_limit: usize,
    time_limit: Duration,
    concurrency_limit: usize,
    time_limit_start: TimeLimitStart,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchOptions {
    /// MassTransit's defaults: 10 messages, 1 second, one batch at a time, from the first message.
    pub fn new() -> Self {
        Self {
            message_limit: 10,
            time_limit: Duration::from_secs(1),
            concurrency_limit: 1,
            time_limit_start: TimeLimitStart::FromFirst,
        }
    }

    /// The most messages in one batch (`MessageLimit`); 0 is taken as 1.
    pub fn message_limit(mut self, limit: usize) -> Self {
        self.message_limit = limit.max(1);
        self
    }

    /// How long a partial batch waits for more messages (`TimeLimit`); zero is taken as 1 ms.
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = limit.max(Duration::from_millis(1));
        self
    }

    /// How many batches run at once (`ConcurrencyLimit`); 0 is taken as 1.
    pub fn concurrency_limit(mut self, limit: usize) -> Self {
        self.concurrency_limit = limit.max(1);
        self
    }

    /// Where the time limit counts from (`TimeLimitStart`).
    pub fn time_limit_start(mut self, start: TimeLimitStart) -> Self {
        self.time_limit_start = start;
        self
    }

    /// The message limit.
    pub fn message_limit_value(&self) -> usize {
        self.message_limit
    }

    /// The time limit.
    pub fn time_limit_value(&self) -> Duration {
        self.time_limit
    }

    /// The concurrency limit.
    pub fn concurrency_limit_value(&self) -> usize {
        self.concurrency_limit
    }

    /// Where the time limit counts from.
    pub fn time_limit_start_value(&self) -> TimeLimitStart {
        self.time_limit_start
    }

    /// `message_limit × concurrency_limit`: the prefetch count and concurrency the endpoint gets
    /// at least (MassTransit's `messageCapacity`).
    pub fn message_capacity(&self) -> usize {
        self.message_limit.saturating_mul(self.concurrency_limit)
    }
}
