//! The sqlx pool under a sea-orm [`DatabaseConnection`].

use sea_orm::sqlx::PgPool;
use sea_orm::{DatabaseConnection, DatabaseConnectionType};

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
