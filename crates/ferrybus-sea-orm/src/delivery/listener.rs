//! `LISTEN` on the outbox channel; every notification wakes one idle worker.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::sqlx::PgPool;
use sea_orm::{DatabaseConnection, DatabaseConnectionType};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::background::sleep_or_cancel;
use crate::error::StoreError;

/// The sqlx pool under `db`, for `LISTEN` (which needs a connection of its own); a
/// [`StoreErrorKind::Config`](crate::StoreErrorKind::Config) error, not sea-orm's panic, when
/// `db` is not a PostgreSQL pool (a mock, a proxy, another backend, a closed connection).
pub(crate) fn postgres_pool(db: &DatabaseConnection) -> Result<PgPool, StoreError> {
    // `if let`, not a match: which other variants exist depends on the sea-orm features the
    // application enables (mock, proxy, other backends).
    if let DatabaseConnectionType::SqlxPostgresPoolConnection(_) = &db.inner {
        return Ok(db.get_postgres_connection_pool().clone());
    }
    Err(StoreError::config(
        "the outbox needs a PostgreSQL connection pool (sea-orm's sqlx-postgres) for LISTEN/NOTIFY",
    ))
}

/// Listens until cancelled, reconnecting after errors. Holds one pool connection.
pub(crate) async fn listen(
    pool: PgPool,
    channel: String,
    wake: Arc<Notify>,
    cancel: CancellationToken,
) {
    while !cancel.is_cancelled() {
        match PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(error) = listener.listen(&channel).await {
                    tracing::warn!(target: "ferrybus::outbox", %error, "LISTEN failed");
                } else {
                    // Rows may have been committed while we were not listening.
                    wake.notify_one();
                    receive(&mut listener, &wake, &cancel).await;
                }
            }
            Err(error) => {
                tracing::warn!(target: "ferrybus::outbox", %error, "cannot connect the outbox listener")
            }
        }
        sleep_or_cancel(Duration::from_secs(1), &cancel).await;
    }
}

async fn receive(listener: &mut PgListener, wake: &Notify, cancel: &CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            received = listener.try_recv() => match received {
                // `None`: the connection was lost and is re-established on the next call.
                // One waiting worker wakes; when all are busy, the first to finish starts a pass
                // at once (`Notify` keeps one permit): a burst of notifications while every
                // worker sends costs one pass, not one each.
                Ok(_) => wake.notify_one(),
                Err(error) => {
                    tracing::warn!(target: "ferrybus::outbox", %error, "outbox listener failed");
                    return;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreErrorKind;

    #[test]
    fn a_connection_that_is_not_postgres_is_a_config_error() {
        let error = postgres_pool(&DatabaseConnection::default()).unwrap_err();
        assert_eq!(error.kind(), StoreErrorKind::Config);
        assert!(error.to_string().contains("PostgreSQL"), "{error}");
    }
}
