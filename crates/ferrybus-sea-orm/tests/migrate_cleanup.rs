//! The migrator (generated SQL files, idempotence, .NET tables, schema check) and the inbox
//! cleanup.

mod common;

use std::time::Duration;

use common::TestDb;
use ferrybus_sea_orm::entity::OutboxTable;
use ferrybus_sea_orm::migrate::{SchemaProblem, TableSearch, TableStatus};
use ferrybus_sea_orm::{migrate, Migrator, NamingStyle, Tables, TimestampType};
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
        .execute_raw(Statement::from_sql_and_values(
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
        .execute_raw(Statement::from_sql_and_values(
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

const TABLES: [OutboxTable; 3] = [
    OutboxTable::InboxState,
    OutboxTable::OutboxState,
    OutboxTable::OutboxMessage,
];

/// The search by schema alone finds each shape's tables, reads their naming and time type,
/// and lists the foreign keys; the wrong naming given is named as such.
async fn check_search_detects_the_tables(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let tables = tdb.tables();
    let legacy = matches!(shape, Shape::BookwormLegacy | Shape::CanonicalLegacy);
    let report = migrate::check_search(&tdb.db, &TableSearch::new(&tdb.schema))
        .await
        .unwrap();
    assert!(report.naming_detected && report.found());
    assert_eq!(report.tables, tables.clone().timestamps(tdb.timestamps()));
    assert!(report.is_usable(), "{:?}", report.problems);
    for table in TABLES {
        assert_eq!(
            report.table_status(table),
            Some(TableStatus::Ok),
            "{table:?}"
        );
    }
    assert_eq!(report.timestamps, [tdb.timestamps()]);
    assert_eq!(report.timestamp_type(), Some(tdb.timestamps()));
    let fks: Vec<&str> = report
        .foreign_keys
        .iter()
        .map(|k| k.references.as_str())
        .collect();
    if legacy {
        assert_eq!(fks, Vec::<&str>::new());
    } else {
        let mut expected = [tables.inbox_state(), tables.outbox_state()];
        expected.sort();
        assert_eq!(fks, expected);
        assert!(report
            .foreign_keys
            .iter()
            .all(|k| k.table == tables.outbox_message() && k.references_schema == tdb.schema));
    }
    // What `check` says of the same tables, given.
    let given = migrate::check(&tdb.db, &tables).await.unwrap();
    assert_eq!(given.problems, report.problems);
    assert!(!given.naming_detected);

    // The other naming, with the tables' names.
    let other = match shape.naming() {
        NamingStyle::SnakeCase => NamingStyle::PascalCase,
        NamingStyle::PascalCase => NamingStyle::SnakeCase,
    };
    let search = TableSearch::new(&tdb.schema)
        .naming(other)
        .inbox_state(tables.inbox_state())
        .outbox_state(tables.outbox_state())
        .outbox_message(tables.outbox_message());
    let report = migrate::check_search(&tdb.db, &search).await.unwrap();
    assert_eq!(
        report.problems[0],
        SchemaProblem::NamingMismatch {
            table: tables.inbox_state().to_owned(),
            found: shape.naming(),
            configured: other,
        }
    );
    assert!(!report.is_usable() && !report.naming_detected);
    assert_eq!(
        report.tables.naming_style(),
        shape.naming(),
        "checked as they are"
    );
    assert_eq!(
        report.table_status(OutboxTable::InboxState),
        Some(TableStatus::Ok)
    );

    // The other naming's default names: nothing there.
    let report = migrate::check_search(&tdb.db, &TableSearch::new(&tdb.schema).naming(other))
        .await
        .unwrap();
    assert!(!report.found());
    assert!(matches!(
        &report.problems[..],
        [SchemaProblem::NoInboxTable { looked_for, .. }] if looked_for.len() == 1
    ));
    assert_eq!(report.table_status(OutboxTable::InboxState), None);
}

/// Defaults, `NOT NULL`s and the inbox key: what ferrybus's inserts need.
async fn check_names_what_inserts_need(shape: Shape) {
    let tdb = TestDb::new(shape).await;
    let tables = tdb.tables();
    let (inbox, state, message) = (tdb.t("inbox"), tdb.t("state"), tdb.t("message"));
    // A unique index instead of the unique constraint (columns in the other order) will do.
    tdb.exec(&format!(
        "DO $$ DECLARE r record; BEGIN FOR r IN SELECT conname FROM pg_constraint \
         WHERE conrelid = '{inbox}'::regclass AND contype = 'u' LOOP \
         EXECUTE format('ALTER TABLE {inbox} DROP CONSTRAINT %I CASCADE', r.conname); END LOOP; END $$; \
         CREATE UNIQUE INDEX inbox_key ON {inbox} ({}, {})",
        tdb.c("ConsumerId"),
        tdb.c("MessageId")
    ))
    .await;
    let report = migrate::check(&tdb.db, &tables).await.unwrap();
    assert!(report.is_usable(), "{:?}", report.problems);
    // A partial one will not (ON CONFLICT cannot infer it).
    tdb.exec(&format!(
        "DROP INDEX \"{}\".inbox_key; CREATE UNIQUE INDEX inbox_key ON {inbox} ({}, {}) WHERE {} IS NOT NULL",
        tdb.schema,
        tdb.c("MessageId"),
        tdb.c("ConsumerId"),
        tdb.c("Received")
    ))
    .await;
    tdb.exec(&format!(
        "ALTER TABLE {state} ADD COLUMN tenant text NOT NULL; \
         ALTER TABLE {state} ADD COLUMN region text NOT NULL DEFAULT 'eu'; \
         ALTER TABLE {inbox} ALTER COLUMN {} SET NOT NULL; \
         ALTER TABLE {message} ALTER COLUMN {} DROP IDENTITY",
        tdb.c("ExpirationTime"),
        tdb.c("SequenceNumber"),
    ))
    .await;
    let report = migrate::check(&tdb.db, &tables).await.unwrap();
    let column = |c: &str| tdb.c(c).trim_matches('"').to_owned();
    let expected = [
        SchemaProblem::NotNullWithoutDefault {
            table: tables.inbox_state().to_owned(),
            column: column("ExpirationTime"),
            masstransit: true,
        },
        SchemaProblem::NotNullWithoutDefault {
            table: tables.outbox_state().to_owned(),
            column: "tenant".to_owned(),
            masstransit: false,
        },
        SchemaProblem::MissingDefault {
            table: tables.outbox_message().to_owned(),
            column: column("SequenceNumber"),
        },
        SchemaProblem::MissingInboxKey {
            table: tables.inbox_state().to_owned(),
            columns: [column("MessageId"), column("ConsumerId")],
        },
    ];
    assert_eq!(
        report.problems[..4],
        expected,
        "in report order: {:?}",
        report.problems
    );
    // The unique constraint's CASCADE took the foreign key to the inbox (where there was one).
    assert!(report.problems[4..]
        .iter()
        .all(|p| matches!(p, SchemaProblem::MissingForeignKey { .. })));
    assert!(!report.is_usable());
    for table in TABLES {
        assert_eq!(report.table_status(table), Some(TableStatus::Problems));
    }
    assert_eq!(
        report.problems[3].to_string(),
        format!(
            "{} has no unique key on ({}, {}) (MassTransit < 8.0.8): the inbox cannot detect duplicates",
            tables.inbox_state(),
            column("MessageId"),
            column("ConsumerId")
        )
    );

    // A missing table, and time columns of both types.
    tdb.exec(&format!(
        "DROP TABLE {message}; ALTER TABLE {state} ALTER COLUMN {} TYPE timestamp without time zone; \
         ALTER TABLE {state} ALTER COLUMN {} TYPE timestamp with time zone",
        tdb.c("Created"),
        tdb.c("Delivered")
    ))
    .await;
    let report = migrate::check(&tdb.db, &tables).await.unwrap();
    assert_eq!(
        report.table_status(OutboxTable::OutboxMessage),
        Some(TableStatus::Missing)
    );
    assert!(report.problems.contains(&SchemaProblem::MissingTable {
        schema: tdb.schema.clone(),
        table: tables.outbox_message().to_owned(),
    }));
    assert!(report.foreign_keys.is_empty());
    assert_eq!(
        report.timestamps,
        [TimestampType::WithTimeZone, TimestampType::WithoutTimeZone]
    );
    assert_eq!(report.timestamp_type(), None);
    assert_eq!(
        report.tables.timestamp_type(),
        tdb.timestamps(),
        "from Received"
    );
}

ferrybus_testing::on_every_shape!(
    migrator_is_idempotent,
    cleanup_removes_exactly_expired_rows,
    schema_check_finds_what_is_missing,
    check_search_detects_the_tables,
    check_names_what_inserts_need
);
