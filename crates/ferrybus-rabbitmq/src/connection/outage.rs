//! Logging of the periods without a connection ([`Outage`]) and durations rounded for logs.

use std::time::Duration;

use crate::error::RabbitMqError;

/// How often a broker that stays unreachable is logged at WARN; the other failed attempts are
/// logged at DEBUG.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Logging of one period without a connection: the first failed attempt and then one a minute at
/// WARN (with the attempt count and how long the broker has been unreachable), the rest at
/// DEBUG; the recovery at INFO with how long it took.
#[derive(Debug)]
pub(super) struct Outage {
    /// Whether a connection was lost (a reconnect), rather than the first one being opened.
    lost: bool,
    since: std::time::Instant,
    last_warn: Option<std::time::Instant>,
}

impl Outage {
    pub(super) fn starting() -> Self {
        Self {
            lost: false,
            since: std::time::Instant::now(),
            last_warn: None,
        }
    }

    pub(super) fn lost() -> Self {
        Self {
            lost: true,
            ..Self::starting()
        }
    }

    /// Whether the failure of `attempt` at `now` is logged at WARN.
    fn warns(&mut self, attempt: u32, now: std::time::Instant) -> bool {
        let warn = attempt == 1
            || self
                .last_warn
                .is_none_or(|last| now.saturating_duration_since(last) >= WARN_EVERY);
        if warn {
            self.last_warn = Some(now);
        }
        warn
    }

    pub(super) fn log_failed(&mut self, attempt: u32, error: &RabbitMqError) {
        let now = std::time::Instant::now();
        let down_for = Rounded(now.saturating_duration_since(self.since));
        if !self.warns(attempt, now) {
            tracing::debug!(target: "ferrybus::rabbitmq", attempt, %down_for, %error, "connection attempt failed");
        } else if attempt == 1 {
            tracing::warn!(target: "ferrybus::rabbitmq", attempt, %error, "connection attempt failed; retrying with back-off (further failures are logged once a minute)");
        } else {
            tracing::warn!(target: "ferrybus::rabbitmq", attempt, %down_for, %error, "still cannot connect to the broker; retrying");
        }
    }

    pub(super) fn log_recovered(&self, generation: u64, attempt: u32) {
        let down_for = Rounded(self.since.elapsed());
        let failed_attempts = attempt - 1;
        if self.lost {
            tracing::info!(target: "ferrybus::rabbitmq", generation, failed_attempts, "reconnected after {down_for} without a connection");
        } else if failed_attempts > 0 {
            tracing::info!(target: "ferrybus::rabbitmq", generation, failed_attempts, "connected after the broker was unreachable for {down_for}");
        } else {
            tracing::info!(target: "ferrybus::rabbitmq", generation, "connected");
        }
    }
}

/// A duration for logs: milliseconds under a second, then tenths of seconds, then minutes.
struct Rounded(Duration);

impl std::fmt::Display for Rounded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        match ms {
            0..=999 => write!(f, "{ms}ms"),
            1_000..=59_999 => write!(f, "{:.1}s", self.0.as_secs_f64()),
            _ => write!(f, "{}m{:02}s", ms / 60_000, (ms / 1_000) % 60),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_warns_on_the_first_failure_then_once_a_minute() {
        let mut outage = Outage::starting();
        let t0 = std::time::Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(outage.warns(1, at(0)));
        assert!(!outage.warns(2, at(1)));
        assert!(!outage.warns(10, at(59)));
        assert!(outage.warns(11, at(60)));
        assert!(!outage.warns(12, at(65)));
        assert!(outage.warns(30, at(125)));
    }

    #[test]
    fn durations_are_rounded_for_logs() {
        assert_eq!(Rounded(Duration::from_millis(250)).to_string(), "250ms");
        assert_eq!(Rounded(Duration::from_millis(12_345)).to_string(), "12.3s");
        assert_eq!(Rounded(Duration::from_secs(125)).to_string(), "2m05s");
    }
}
