//! The database and outbox-backlog parts of [`Health`](crate::Health), and the backlog gauges.

use std::sync::OnceLock;

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

pub(crate) async fn postgres_parts(
    storage: &PostgresStorage,
    threshold: BacklogThreshold,
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
    let outbox = match status::outbox_status(storage.db(), storage.table_names()).await {
        Ok(status) => {
            let gauges = gauges();
            let mut pending = 0;
            let mut oldest = 0.0_f64;
            for (kind, count, at) in [
                (
                    "bus",
                    status.bus_outbox.messages,
                    status.bus_outbox.oldest_message,
                ),
                (
                    "consumer",
                    status.consumer_outbox.messages,
                    status.consumer_outbox.oldest_message,
                ),
            ] {
                let age = status
                    .age(at)
                    .map_or(0.0, |a| a.num_milliseconds().max(0) as f64 / 1000.0);
                let labels = [KeyValue::new("ferrybus.outbox", kind)];
                gauges.pending.record(count, &labels);
                gauges.oldest_age.record(age, &labels);
                pending += count;
                oldest = oldest.max(age);
            }
            let over = pending > threshold.pending || oldest > threshold.oldest_age.as_secs_f64();
            let reason = format!("{pending} messages waiting, the oldest for {oldest:.0} s");
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
        Err(error) => PartHealth::new(
            "outbox",
            HealthStatus::Degraded,
            format!("the outbox status could not be read: {error}"),
        ),
    };
    vec![database, outbox]
}
