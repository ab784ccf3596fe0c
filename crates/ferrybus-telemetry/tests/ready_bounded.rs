//! `/health/ready`'s database work stays bounded at scale: with 300 000 inbox rows (a long
//! duplicate-detection window) one readiness check reads none of them, where it used to scan
//! the table. Measured by PostgreSQL itself (`pg_stat_user_tables`: tuples the check's session
//! read from `inbox_state`), not by timing.
#![allow(missing_docs)]

use ferrybus_core::storage::Storage as _;
use ferrybus_sea_orm::PostgresStorage;
use ferrybus_telemetry::{BacklogThreshold, Health, HealthStatus};
use ferrybus_testing::{database_url, eventually, Shape, TestSchema, WAIT};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};

/// (sequential scans of `table`, tuples read from it by scans and index fetches), as the
/// statistics show them.
async fn reads(admin: &DatabaseConnection, schema: &str, table: &str) -> (i64, i64) {
    let row = admin
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT coalesce(seq_scan, 0) AS scans, \
             coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS tuples \
             FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2",
            [schema.into(), table.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    (
        row.try_get("", "scans").unwrap(),
        row.try_get("", "tuples").unwrap(),
    )
}

/// Makes the one session of `db` publish its statistics, and waits until they are visible:
/// a scan of `marker` (its `seq_scan` goes up), then `pg_stat_force_next_flush()`.
async fn flush(db: &DatabaseConnection, admin: &DatabaseConnection, schema: &str) {
    let before = reads(admin, schema, "marker").await.0;
    db.execute_unprepared(&format!("SELECT count(*) FROM \"{schema}\".marker"))
        .await
        .unwrap();
    db.execute_unprepared("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    eventually("the statistics to be flushed", WAIT, || async {
        (reads(admin, schema, "marker").await.0 > before).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readiness_check_reads_no_inbox_row_at_scale() {
    let schema = TestSchema::new(Shape::Snake).await;
    let name = schema.schema.clone();
    schema
        .exec(&format!(
            "CREATE TABLE \"{name}\".marker (x int); \
             INSERT INTO \"{name}\".inbox_state (message_id, consumer_id, lock_id, received, receive_count, consumed, delivered) \
             SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), now() - interval '1 day', 0, \
                    now() - interval '1 day', now() - interval '1 day' FROM generate_series(1, 300000); \
             ANALYZE \"{name}\".inbox_state"
        ))
        .await;
    // The check's storage on a pool of one session, whose statistics the test reads.
    let options = ConnectOptions::new(database_url())
        .max_connections(1)
        .min_connections(1)
        .sqlx_logging(false)
        .to_owned();
    let db = Database::connect(options).await.unwrap();
    let storage = PostgresStorage::new(db.clone()).tables(schema.tables());
    storage.prepare().await.unwrap();
    let health = Health::new().postgres(&storage, BacklogThreshold::default());

    flush(&db, &schema.db, &name).await;
    let before = reads(&schema.db, &name, "inbox_state").await;
    let report = health.report().await;
    flush(&db, &schema.db, &name).await;
    let after = reads(&schema.db, &name, "inbox_state").await;

    assert_eq!(report.status, HealthStatus::Healthy, "{report:?}");
    assert_eq!(
        report.parts[1].reason,
        "0 messages waiting, the oldest for 0 s"
    );
    assert_eq!(after.0, before.0, "no sequential scan of the inbox");
    assert!(
        after.1 - before.1 < 1_000,
        "{} inbox rows read by one readiness check",
        after.1 - before.1
    );
}
