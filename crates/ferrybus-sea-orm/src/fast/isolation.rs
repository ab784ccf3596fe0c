//! [`Begin`]: READ COMMITTED transactions on sea-orm's pool without sea-orm's extra
//! `SET TRANSACTION` round trip.

use sea_orm::sea_query::{Alias, Func, Query};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, IsolationLevel,
    TransactionTrait,
};

use crate::error::StoreError;

/// Begins READ COMMITTED transactions (whatever the server default is): a waiter on a row lock
/// then sees the committed row instead of failing with a serialization error.
///
/// sea-orm's `begin_with_config` sends `SET TRANSACTION ISOLATION LEVEL …` after `BEGIN`: one
/// more round trip per transaction. So the first use asks the server for
/// `default_transaction_isolation` and, when it is already `read committed` (PostgreSQL's
/// default), later transactions start with a plain `BEGIN`. The answer is kept for the life of
/// this value (one per inbox layer / delivery service); if the check fails, it is asked again
/// next time and this transaction sets the level explicitly.
///
/// The check holds for every connection of the pool as long as the level comes from the server,
/// database or role configuration (`ALTER DATABASE/ROLE … SET default_transaction_isolation`);
/// a session-level `SET default_transaction_isolation` on some pooled connections is not seen.
#[derive(Debug, Default)]
pub(crate) struct Begin {
    plain: tokio::sync::OnceCell<bool>,
}

impl Begin {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Begins a READ COMMITTED transaction on `db`.
    pub(crate) async fn read_committed(
        &self,
        db: &DatabaseConnection,
    ) -> Result<DatabaseTransaction, StoreError> {
        let plain = match self
            .plain
            .get_or_try_init(|| default_is_read_committed(db))
            .await
        {
            Ok(plain) => *plain,
            Err(error) => {
                tracing::debug!(
                    target: "ferrybus::storage",
                    %error,
                    "cannot read default_transaction_isolation; setting the level explicitly"
                );
                false
            }
        };
        if plain {
            Ok(db.begin().await?)
        } else {
            Ok(db
                .begin_with_config(Some(IsolationLevel::ReadCommitted), None)
                .await?)
        }
    }
}

async fn default_is_read_committed(db: &DatabaseConnection) -> Result<bool, StoreError> {
    let query = Query::select()
        .expr_as(
            Func::cust(Alias::new("current_setting")).arg("default_transaction_isolation"),
            Alias::new("level"),
        )
        .to_owned();
    let row = db.query_one_raw(DbBackend::Postgres.build(&query)).await?;
    let level: Option<String> = row.map(|r| r.try_get("", "level")).transpose()?;
    Ok(level.is_some_and(|l| l.eq_ignore_ascii_case("read committed")))
}
