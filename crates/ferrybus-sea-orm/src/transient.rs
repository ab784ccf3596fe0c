//! Which database errors are transient infrastructure failures (the hook of core's
//! [`Storage::classify`](ferrybus_core::storage::Storage::classify)): the endpoint pauses on them until
//! PostgreSQL answers again, instead of spending its retries.

use std::error::Error as StdError;

use ferrybus_core::pause::Dependency;
use sea_orm::sqlx;
use sea_orm::{ConnAcquireErr, DbErr, RuntimeErr};

/// `Some(Dependency::Storage)` for a connection refused, reset or closed, a pool timeout, and
/// PostgreSQL's SQLSTATE class `08` (connection exception), `57P01` (admin shutdown), `57P02`
/// (crash shutdown), `57P03` (cannot connect now) and `53300` (too many connections), whether
/// wrapped in a [`DbErr`] or not.
///
/// ```
/// use ferrybus_core::pause::Dependency;
/// use ferrybus_sea_orm::is_transient;
/// use sea_orm::{ConnAcquireErr, DbErr};
/// assert_eq!(is_transient(&DbErr::ConnectionAcquire(ConnAcquireErr::Timeout)), Some(Dependency::Storage));
/// assert_eq!(is_transient(&DbErr::RecordNotFound("x".into())), None);
/// ```
pub fn is_transient(error: &(dyn StdError + 'static)) -> Option<Dependency> {
    let transient = if let Some(db) = error.downcast_ref::<DbErr>() {
        match db {
            DbErr::ConnectionAcquire(
                ConnAcquireErr::Timeout | ConnAcquireErr::ConnectionClosed,
            ) => true,
            DbErr::Conn(RuntimeErr::SqlxError(e))
            | DbErr::Exec(RuntimeErr::SqlxError(e))
            | DbErr::Query(RuntimeErr::SqlxError(e)) => sqlx_transient(e),
            _ => false,
        }
    } else if let Some(e) = error.downcast_ref::<sqlx::Error>() {
        sqlx_transient(e)
    } else {
        false
    };
    transient.then_some(Dependency::Storage)
}

fn sqlx_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300")
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_are_transient() {
        let reset = DbErr::Exec(RuntimeErr::SqlxError(std::sync::Arc::new(sqlx::Error::Io(
            std::io::ErrorKind::ConnectionReset.into(),
        ))));
        assert_eq!(is_transient(&reset), Some(Dependency::Storage));
        let timeout = DbErr::Conn(RuntimeErr::SqlxError(std::sync::Arc::new(
            sqlx::Error::PoolTimedOut,
        )));
        assert_eq!(is_transient(&timeout), Some(Dependency::Storage));
        assert_eq!(
            is_transient(&sqlx::Error::PoolTimedOut),
            Some(Dependency::Storage)
        );
        let closed = DbErr::Conn(RuntimeErr::SqlxError(std::sync::Arc::new(
            sqlx::Error::PoolClosed,
        )));
        assert_eq!(is_transient(&closed), None, "closed on purpose");
        assert_eq!(is_transient(&DbErr::Custom("bad".into())), None);
    }
}
