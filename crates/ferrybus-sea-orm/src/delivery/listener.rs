//! `LISTEN` on the outbox channel; every notification wakes one idle worker.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::background::sleep_or_cancel;

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
