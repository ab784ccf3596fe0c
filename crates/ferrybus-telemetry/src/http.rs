//! The axum router fragments: `/metrics`, `/health/live`, `/health/ready`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use crate::{Health, HealthStatus, Telemetry};

/// `GET /metrics`: the Prometheus text format.
///
/// ```no_run
/// # async fn run(telemetry: ferrybus_telemetry::Telemetry) {
/// let app: axum::Router = axum::Router::new().merge(ferrybus_telemetry::metrics_router(&telemetry));
/// # }
/// ```
pub fn metrics_router<S: Clone + Send + Sync + 'static>(telemetry: &Telemetry) -> Router<S> {
    let telemetry = telemetry.clone();
    Router::new().route(
        "/metrics",
        get(move || {
            let telemetry = telemetry.clone();
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    telemetry.prometheus_text(),
                )
            }
        }),
    )
}

/// `GET /health/live` (200 while the process serves) and `GET /health/ready` (200 with the
/// [`HealthReport`](crate::HealthReport) as JSON when `Healthy`, 503 with the same body
/// otherwise).
///
/// ```no_run
/// # async fn run(bus: ferrybus_rabbitmq::RabbitMqBus) {
/// use ferrybus_telemetry::{health_router, Health};
/// let app: axum::Router = axum::Router::new().merge(health_router(Health::new().rabbitmq(&bus)));
/// # }
/// ```
pub fn health_router<S: Clone + Send + Sync + 'static>(health: Health) -> Router<S> {
    Router::new()
        .route(
            "/health/live",
            get(|| async { Json(serde_json::json!({ "status": HealthStatus::Healthy })) }),
        )
        .route("/health/ready", get(ready))
        .with_state(health)
}

async fn ready(State(health): State<Health>) -> impl IntoResponse {
    let report = health.report().await;
    let code = if report.status == HealthStatus::Healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(report))
}

/// `/metrics`, `/health/live` and `/health/ready` in one router, to mount in one line.
///
/// ```no_run
/// # async fn run(telemetry: ferrybus_telemetry::Telemetry, health: ferrybus_telemetry::Health) -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
/// axum::serve(listener, ferrybus_telemetry::router(&telemetry, health)).await
/// # }
/// ```
pub fn router(telemetry: &Telemetry, health: Health) -> Router {
    Router::new()
        .merge(metrics_router(telemetry))
        .merge(health_router(health))
}
