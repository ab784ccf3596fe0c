//! The database and outbox-backlog parts of [`Health`](crate::Health), and the backlog gauges.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrybus_core::storage::Storage as _;
use ferrybus_sea_orm::{status, PostgresStorage};
use opentelemetry::metrics::Gauge;
use opentelemetry::KeyValue;

use crate::{BacklogThreshold, HealthStatus, PartHealth};

/// Gauge (`ea`, ferrybus): messages waiting in the outbox tables, label `ferrybus.outbox`
/// (`bus`, `consumer`).
pub const OUTBOX_PENDING: &str = "ferrybus.outbox.pending";
/// Gauge (`s`, ferrybus): how long the oldest waiting message has waited, label
/// `ferrybus.outbox`.
pub const OUTBOX_OLDEST_AGE: &str = "ferrybus.outbox.oldest_age";

struct Gauges {
    pending: Gauge<i64>,
    oldest_age: Gauge<f64>,
}

fn gauges() -> &'static Gauges {
    static GAUGES: OnceLock<Gauges> = OnceLock::new();
    GAUGES.get_or_init(|| {
        let meter = opentelemetry::global::meter(ferrybus_otel::SCOPE);
        Gauges {
            pending: meter
                .i64_gauge(OUTBOX_PENDING)
                .with_unit("ea")
                .with_description("Number of messages waiting in the outbox tables")
                .build(),
            oldest_age: meter
                .f64_gauge(OUTBOX_OLDEST_AGE)
                .with_unit("s")
                .with_description("Age of the oldest message waiting in the outbox tables")
                .build(),
        }
    })
}

/// How long one reading of the backlog answers readiness probes: a flood of requests to the
/// unauthenticated `/health/ready` costs the database one bounded query per period.
pub const BACKLOG_CACHE: Duration = Duration::from_secs(5);

/// The longest a readiness check waits for the backlog (its statements stop after
/// [`status::BACKLOG_TIMEOUT`] on the server).
const BACKLOG_WAIT: Duration = Duration::from_secs(5);

/// The last outbox part, and when it was read: shared by the clones of one health check.
#[derive(Default)]
pub(crate) struct Cached(Mutex<Option<(Instant, PartHealth)>>);

pub(crate) async fn postgres_parts(
    storage: &PostgresStorage,
    threshold: BacklogThreshold,
    cached: &Cached,
) -> Vec<PartHealth> {
    if !storage.probe().await {
        return vec![
            PartHealth::new(
                "database",
                HealthStatus::Unhealthy,
                "the database does not answer SELECT 1 within 5 s",
            ),
            PartHealth::new("outbox", HealthStatus::Unhealthy, "unknown: no database"),
        ];
    }
    let database = PartHealth::new("database", HealthStatus::Healthy, "reachable");
    let fresh = {
        let last = cached.0.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < BACKLOG_CACHE)
            .map(|(_, part)| part.clone())
    };
    let outbox = match fresh {
        Some(part) => part,
        None => {
            let part = outbox_part(storage, threshold).await;
            *cached.0.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((Instant::now(), part.clone()));
            part
        }
    };
    vec![database, outbox]
}

/// The outbox part from a bounded reading of the backlog ([`status::backlog`]): counted up to
/// the threshold, never the inbox; exact figures are `ferrybus outbox status`'s.
async fn outbox_part(storage: &PostgresStorage, threshold: BacklogThreshold) -> PartHealth {
    // Exact below a thousand, and up to just past the threshold.
    let limit = u64::try_from(threshold.pending.saturating_add(1))
        .unwrap_or(1)
        .max(1_000);
    let reading = status::backlog(storage.db(), storage.table_names(), limit);
    let backlog = match tokio::time::timeout(BACKLOG_WAIT, reading).await {
        Ok(Ok(backlog)) => backlog,
        Ok(Err(error)) => {
            return PartHealth::new(
                "outbox",
                HealthStatus::Degraded,
                format!("the outbox backlog could not be read: {error}"),
            )
        }
        Err(_) => {
            return PartHealth::new(
                "outbox",
                HealthStatus::Degraded,
                "the outbox backlog could not be read within 5 s",
            )
        }
    };
    let gauges = gauges();
    let mut pending = 0;
    let mut oldest = 0.0_f64;
    for (kind, count, at) in [
        ("bus", backlog.bus_messages, backlog.oldest_bus_message),
        (
            "consumer",
            backlog.consumer_messages,
            backlog.oldest_consumer_message,
        ),
    ] {
        let age = backlog
            .age(at)
            .map_or(0.0, |a| a.num_milliseconds().max(0) as f64 / 1000.0);
        let labels = [KeyValue::new("ferrybus.outbox", kind)];
        gauges.pending.record(count, &labels);
        gauges.oldest_age.record(age, &labels);
        pending += count;
        oldest = oldest.max(age);
    }
    let over = pending > threshold.pending || oldest > threshold.oldest_age.as_secs_f64();
    let counted =
        if backlog.bus_messages >= backlog.limit || backlog.consumer_messages >= backlog.limit {
            format!("at least {} messages waiting", backlog.limit)
        } else {
            format!("{pending} messages waiting")
        };
    let reason = format!("{counted}, the oldest for {oldest:.0} s");
    if over {
        PartHealth::new(
            "outbox",
            HealthStatus::Degraded,
            format!("backlog: {reason}"),
        )
    } else {
        PartHealth::new("outbox", HealthStatus::Healthy, reason)
    }
}
