//! What a run creates on the broker and in the database, and its removal when the run ends:
//! after the last scenario, or on SIGINT / SIGTERM (`main` then stops every task of the run
//! first, so nothing re-declares a queue behind the clean-up). Only SIGKILL leaves names behind;
//! they all carry the run id the bench prints first.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::{broker, db, BoxError};

/// The queues, exchanges and schemas of one run, shared by the scenarios that create them and
/// `main`, which removes them however the run ends.
///
/// A name is recorded *before* the thing is created, so an interrupt between the two leaves
/// nothing behind (removing what does not exist is not an error).
#[derive(Clone, Default)]
pub(crate) struct Created {
    names: Arc<Mutex<Names>>,
}

#[derive(Default)]
struct Names {
    queues: Vec<String>,
    exchanges: Vec<String>,
    schemas: Vec<String>,
}

/// How much [`Created::remove`] removed (what was asked for: queues already gone count too).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Removed {
    pub(crate) queues: usize,
    pub(crate) exchanges: usize,
    pub(crate) schemas: usize,
}

impl Created {
    fn names(&self) -> MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records queue `name`.
    pub(crate) fn queue(&self, name: &str) {
        push_new(&mut self.names().queues, name);
    }

    /// Records exchange `name`.
    pub(crate) fn exchange(&self, name: &str) {
        push_new(&mut self.names().exchanges, name);
    }

    /// Records schema `name`.
    pub(crate) fn schema(&self, name: &str) {
        push_new(&mut self.names().schemas, name);
    }

    /// Deletes every recorded queue and exchange and drops every recorded schema, on fresh
    /// connections (the run's own may be closed or in use by a stopped scenario).
    pub(crate) async fn remove(&self, amqp_url: &str, database_url: &str) -> Removed {
        let (queues, exchanges, schemas) = {
            let names = self.names();
            (
                names.queues.clone(),
                names.exchanges.clone(),
                names.schemas.clone(),
            )
        };
        match broker::connect(amqp_url, "ferrybus-bench cleanup").await {
            Ok(conn) => {
                broker::delete(&conn, &queues, &exchanges).await;
                let _ = conn.close(200, "done".into()).await;
            }
            Err(e) => eprintln!("warning: cannot connect to the broker to clean up: {e}"),
        }
        if let Err(e) = drop_schemas(database_url, &schemas).await {
            eprintln!("warning: cannot drop this run's schemas: {e}");
        }
        Removed {
            queues: queues.len(),
            exchanges: exchanges.len(),
            schemas: schemas.len(),
        }
    }
}

fn push_new(names: &mut Vec<String>, name: &str) {
    if !names.iter().any(|n| n == name) {
        names.push(name.to_owned());
    }
}

async fn drop_schemas(database_url: &str, schemas: &[String]) -> Result<(), BoxError> {
    if schemas.is_empty() {
        return Ok(());
    }
    let admin = db::pool(database_url, None, 1).await?;
    for schema in schemas {
        if let Err(e) = db::drop_schema(&admin, schema).await {
            eprintln!("warning: could not drop schema {schema}: {e}");
        }
    }
    admin.close().await;
    Ok(())
}

/// Waits for SIGINT or SIGTERM; returns the signal's number (the process exits with 128 + it,
/// as shells report a process a signal ended).
#[cfg(unix)]
pub(crate) async fn interrupted() -> u8 {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!(
            "warning: cannot listen for SIGINT / SIGTERM; an interrupted run leaves its queues"
        );
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => 15,
        _ = int.recv() => 2,
    }
}

/// Waits for Ctrl-C (SIGINT's number).
#[cfg(not(unix))]
pub(crate) async fn interrupted() -> u8 {
    if tokio::signal::ctrl_c().await.is_err() {
        return std::future::pending().await;
    }
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_recorded_once() {
        let created = Created::default();
        created.queue("q");
        created.queue("q");
        created.exchange("q");
        created.schema("s");
        let names = created.names();
        assert_eq!(names.queues, ["q"]);
        assert_eq!(names.exchanges, ["q"]);
        assert_eq!(names.schemas, ["s"]);
    }
}
