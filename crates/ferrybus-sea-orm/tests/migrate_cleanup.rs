//! The migrator (generated SQL files, idempotence, .NET tables, schema check) and the inbox
//! cleanup.

mod common;

use std::time::Duration;

use common::TestDb;
use ferrybus_sea_orm::migrate::SchemaProblem;
use ferrybus_sea_orm::{migrate, Migrator, Tables};
use ferrybus_testing::Shape;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use uuid::Uuid;

type TablesFn = fn() -> Tables;

const RENDERED: [(&str, TablesFn); 2] = [
    ("messaging-snake-case.sql", Tables::new),
    ("dotnet-default-pascal-case.sql", Tables::dotnet_default),
];

/// The committed files for DBAs equal what the migrations generate (regenerate with
/// `FERRYBUS_BLESS=1 cargo test -p ferrybus-sea-orm --test migrate_cleanup`).
#[test]
fn committed_migrations_match_the_generated_sql() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    for (file, tables) in RENDERED {
        let rendered = migrate::sql(&tables(), true);
        let path = dir.join(file);
        if std::env::var_os("FERRYBUS_BLESS").is_some() {
            std::fs::write(&path, &rendered).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            committed, rendered,
            "{file} is out of date; run with FERRYBUS_BLESS=1"
        );
    }
}

async fn schema_objects(tdb: &TestDb) -> (i64, i64) {
    let schema = tdb.schema.clone();
    let indexes = tdb
        .count(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = $1",
            vec![schema.clone().into()],
        )
        .await;
    let constraints = tdb
        .count(
            "SELECT count(*) FROM pg_constraint WHERE connamespace = $1::text::regnamespace",
            vec![format!("\"{schema}\"").into()],
        )
        .await;
    (indexes, constraints)
}

/// Four migrations at once on existing tables (four instances starting) add nothing, or only
/// what .NET left out.
async fn migrator_is_idempotent(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let before = schema_objects(&tdb).await;
    let tables = tdb.tables();
    let runs = (0..4).map(|_| {
        let db = tdb.db.clone();
        let tables = tables.clone();
        async move { Migrator::new(tables).run(&db).await }
    });
    for result in futures::future::join_all(runs).await {
        result.unwrap();
    }
    let after = schema_objects(&tdb).await;
    match shape {
        // .NET-created tables without FKs get the two FKs, nothing else.
        Shape::BookwormLegacy | Shape::CanonicalLegacy => {
            assert_eq!(after, (before.0, before.1 + 2))
        }
        _ => assert_eq!(after, before, "nothing added to complete tables"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrator_creates_masstransit_shape() {
    let tdb = TestDb::new(Shape::Pascal).await;
    let columns = tdb
        .count(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1",
            vec![tdb.schema.clone().into()],
        )
        .await;
    assert_eq!(
        columns,
        11 + 6 + 21 + 2,
        "three tables plus the test's invoices table"
    );
    let (indexes, constraints) = schema_objects(&tdb).await;
    assert_eq!(indexes, 3 + 1 + 6 + 1, "PKs, AK, 6 indexes, invoices PK");
    assert_eq!(
        constraints,
        3 + 1 + 2 + 1,
        "PKs, AK, FKs, invoices PK (+ NOT NULL not counted)"
    );
}

/// Inserts an inbox row delivered `age` ago (or not delivered).
async fn inbox_row(tdb: &TestDb, delivered_ago: Option<Duration>) -> Uuid {
    let c = |n: &str| tdb.c(n);
    let message_id = Uuid::new_v4();
    let at = |d: Duration| chrono::Utc::now() - chrono::Duration::from_std(d).unwrap();
    let sql = format!(
        "INSERT INTO {} ({}, {}, {}, {}, {}, {}, {}) VALUES ($1, $2, $3, $4, 0, $5, $5)",
        tdb.t("inbox"),
        c("MessageId"),
        c("ConsumerId"),
        c("LockId"),
        c("Received"),
        c("ReceiveCount"),
        c("Consumed"),
        c("Delivered")
    );
    let values = [
        message_id.into(),
        Uuid::nil().into(),
        Uuid::new_v4().into(),
        tdb.ts(Some(at(Duration::from_secs(7200)))),
        tdb.ts(delivered_ago.map(at)),
    ];
    tdb.db
        .execute(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await
        .unwrap();
    message_id
}

async fn reference(tdb: &TestDb, message_id: Uuid) {
    let c = |n: &str| tdb.c(n);
    let sql = format!(
        "INSERT INTO {} ({}, {}, {}, {}, {}, {}, {}) VALUES (now(), $1, $2, $3, 'application/json', 'urn:message:X:Y', '{{}}')",
        tdb.t("message"), c("SentTime"), c("InboxMessageId"), c("InboxConsumerId"), c("MessageId"), c("ContentType"),
        c("MessageType"), c("Body")
    );
    let values = [message_id.into(), Uuid::nil().into(), Uuid::new_v4().into()];
    tdb.db
        .execute(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await
        .unwrap();
}

async fn cleanup_removes_exactly_expired_rows(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let hour = Duration::from_secs(3600);
    let mut expired = Vec::new();
    for _ in 0..7 {
        expired.push(inbox_row(&tdb, Some(hour)).await);
    }
    let referenced = inbox_row(&tdb, Some(hour * 2)).await; // the oldest, still referenced
    reference(&tdb, referenced).await;
    let recent = inbox_row(&tdb, Some(Duration::from_secs(60))).await;
    let undelivered = inbox_row(&tdb, None).await;
    let cleanup = tdb
        .storage()
        .await
        .duplicate_window(Duration::from_secs(1800))
        .cleanup_batch_size(3);
    // Two cleanups at once (two instances): neither fails, each row removed once.
    let (a, b) = tokio::join!(cleanup.cleanup_once(), cleanup.cleanup_once());
    assert_eq!(a.unwrap() + b.unwrap(), 7);
    for id in expired {
        assert_eq!(tdb.inbox_row(id).await, None);
    }
    assert!(
        tdb.inbox_row(referenced).await.is_some(),
        "FK-referenced row skipped, not blocking"
    );
    assert!(tdb.inbox_row(recent).await.is_some());
    assert!(tdb.inbox_row(undelivered).await.is_some());
    assert_eq!(cleanup.cleanup_once().await.unwrap(), 0);
}

/// The schema check: the migrator's and .NET's shapes are complete, the legacy ones only lack
/// the foreign keys; a missing column or a wrong type makes the schema unusable.
async fn schema_check_finds_what_is_missing(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let tables = tdb.tables();
    let report = migrate::check(&tdb.db, &tables).await.unwrap();
    match shape {
        Shape::BookwormLegacy | Shape::CanonicalLegacy => {
            assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
            assert!(report
                .problems
                .iter()
                .all(|p| matches!(p, SchemaProblem::MissingForeignKey { .. })));
            assert!(report.is_usable() && !report.is_complete());
        }
        _ => assert!(report.is_complete(), "{:?}", report.problems),
    }
    tdb.exec(&format!(
        "ALTER TABLE {} DROP COLUMN {}; ALTER TABLE {} ALTER COLUMN {} TYPE text",
        tdb.t("message"),
        tdb.c("Headers"),
        tdb.t("state"),
        tdb.c("LockId")
    ))
    .await;
    let report = migrate::check(&tdb.db, &tables).await.unwrap();
    assert!(!report.is_usable());
    assert!(report.problems.contains(&SchemaProblem::MissingColumn {
        table: tables.outbox_message().to_owned(),
        column: tdb.c("Headers").trim_matches('"').to_owned(),
    }));
    assert!(report.problems.iter().any(|p| matches!(
        p,
        SchemaProblem::ColumnType { found, .. } if found == "text"
    )));
}

ferrybus_testing::on_every_shape!(
    migrator_is_idempotent,
    cleanup_removes_exactly_expired_rows,
    schema_check_finds_what_is_missing
);
