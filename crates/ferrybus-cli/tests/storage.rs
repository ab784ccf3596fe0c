//! `ferrybus migrate` (create, `--print`, `--check`) and `ferrybus outbox status` on the real
//! PostgreSQL, on the migrator's tables and on the schemas .NET services created.

mod support;

use std::process::Output;

use ferrybus_e2e::TestEnv;
use ferrybus_testing::{database_url, Shape, TestSchema};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, TransactionTrait};
use serde_json::Value;
use support::{failure, json_lines, run, success};

async fn exec(db: &impl ConnectionTrait, sql: &str) {
    db.execute_unprepared(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn one_json(out: &Output) -> Value {
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(lines.len(), 1, "{lines:?}");
    lines.into_iter().next().unwrap()
}

/// `--help` names the table settings' environment variables but never shows their values.
#[test]
fn help_shows_no_environment_value() {
    for command in [
        &["migrate", "--help"][..],
        &["outbox", "status", "--help"],
        &["trace", "--help"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrybus"))
            .args(command)
            .env("FERRYBUS_SCHEMA", "env-schema-value")
            .env("FERRYBUS_NAMING", "pascal")
            .env("FERRYBUS_INBOX_TABLE", "env-inbox-value")
            .env("FERRYBUS_OUTBOX_STATE_TABLE", "env-state-value")
            .env("FERRYBUS_OUTBOX_MESSAGE_TABLE", "env-message-value")
            .output()
            .unwrap();
        let help = success(&out);
        assert!(
            help.contains("[env: FERRYBUS_SCHEMA]"),
            "{command:?}: {help}"
        );
        assert!(
            help.contains("[env: FERRYBUS_INBOX_TABLE]"),
            "{command:?}: {help}"
        );
        for value in [
            "env-schema-value",
            "FERRYBUS_NAMING=",
            "env-inbox-value",
            "env-state-value",
            "env-message-value",
        ] {
            assert!(!help.contains(value), "{command:?} shows {value}: {help}");
        }
    }
}

#[test]
fn migrate_print_prints_the_ddl_without_a_database() {
    // No database at this URL: --print needs none.
    let nowhere = ["--database-url", "postgres://nobody@127.0.0.1:1/none"];
    let sql = success(&support::ferrybus(
        &[&nowhere[..], &["migrate", "--print"]].concat(),
    ));
    assert!(
        sql.starts_with("-- FERRYBUS_SCHEMA=messaging FERRYBUS_NAMING=snake"),
        "{sql}"
    );
    assert!(
        sql.contains(r#"CREATE SCHEMA IF NOT EXISTS "messaging";"#),
        "{sql}"
    );
    assert!(
        sql.contains(r#"CREATE TABLE IF NOT EXISTS "messaging"."inbox_state" ("#),
        "{sql}"
    );
    assert!(sql.contains(r#""message_id" uuid NOT NULL"#), "{sql}");
    assert!(sql.contains("FOREIGN KEY"), "{sql}");

    let sql = success(&support::ferrybus(
        &[
            &nowhere[..],
            &[
                "migrate",
                "--print",
                "--schema",
                "communication",
                "--naming",
                "pascal",
                "--inbox-table",
                "InboxStates",
                "--no-foreign-keys",
            ],
        ]
        .concat(),
    ));
    assert!(
        sql.contains(r#"CREATE TABLE IF NOT EXISTS "communication"."InboxStates" ("#),
        "{sql}"
    );
    assert!(
        sql.contains(r#"CREATE TABLE IF NOT EXISTS "communication"."OutboxState" ("#),
        "{sql}"
    );
    assert!(sql.contains(r#""MessageId" uuid NOT NULL"#), "{sql}");
    assert!(!sql.contains("FOREIGN KEY"), "{sql}");

    // The same settings from billing's environment variables.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrybus"))
        .args(["migrate", "--print"])
        .env("FERRYBUS_SCHEMA", "ops")
        .env("FERRYBUS_NAMING", "pascal")
        .env("FERRYBUS_OUTBOX_MESSAGE_TABLE", "OutboxMessages")
        .output()
        .unwrap();
    let sql = success(&out);
    assert!(sql.contains(r#""ops"."OutboxMessages""#), "{sql}");
    assert!(sql.contains(r#""ops"."InboxState""#), "{sql}");
    let line = failure(
        &support::ferrybus(&["migrate", "--print", "--naming", "kebab"]),
        2,
    );
    assert!(line.contains("kebab"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_creates_the_tables_and_check_accepts_them() {
    TestEnv::new("cli_migrate")
        .await
        .run(|env| async move {
            let schema = env.schema("messaging");
            let out = success(&run(&["migrate", "--schema", &schema]).await);
            assert_eq!(
                out,
                format!("schema {schema}: inbox_state, outbox_state, outbox_message are in place (snake naming)\n")
            );
            let row = env
                .db
                .query_one_raw(sea_orm::Statement::from_sql_and_values(
                    sea_orm::DbBackend::Postgres,
                    "SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = $1",
                    [schema.clone().into()],
                ))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(row.try_get::<i64>("", "n").unwrap(), 3);
            // Idempotent.
            success(&run(&["migrate", "--schema", &schema]).await);

            let report = success(&run(&["migrate", "--check", "--schema", &schema]).await);
            assert!(report.starts_with(&format!("schema {schema}: snake naming (detected)\n")), "{report}");
            assert!(report.contains("  inbox_state              ok"), "{report}");
            assert!(report.contains("time columns: timestamp with time zone"), "{report}");
            assert!(report.contains("foreign keys: outbox_message → inbox_state, outbox_message → outbox_state"), "{report}");
            assert!(report.contains(&format!("FERRYBUS_SCHEMA={schema} FERRYBUS_NAMING=snake")), "{report}");
            let json = one_json(&run(&["migrate", "--check", "--schema", &schema, "--json"]).await);
            assert_eq!(json["ok"], true);
            assert_eq!(json["naming"], "snake");
            assert_eq!(json["problems"], serde_json::json!([]));
        })
        .await;
}

/// The schemas .NET services created: PascalCase and snake_case, with and without foreign
/// keys, `integer` ids and `timestamp without time zone`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_recognizes_the_schemas_dotnet_created() {
    for (shape, naming, tables, legacy) in [
        (
            Shape::CanonicalFixture,
            "pascal",
            ["InboxState", "OutboxState", "OutboxMessage"],
            false,
        ),
        (
            Shape::BookwormFixture,
            "snake",
            ["inbox_state", "outbox_state", "outbox_message"],
            false,
        ),
        (
            Shape::CanonicalLegacy,
            "pascal",
            ["InboxState", "OutboxState", "OutboxMessage"],
            true,
        ),
        (
            Shape::BookwormLegacy,
            "snake",
            ["inbox_state", "outbox_state", "outbox_message"],
            true,
        ),
        (
            Shape::Pascal,
            "pascal",
            ["InboxState", "OutboxState", "OutboxMessage"],
            false,
        ),
    ] {
        let schema = TestSchema::new(shape).await;
        let json =
            one_json(&run(&["migrate", "--check", "--schema", &schema.schema, "--json"]).await);
        assert_eq!(json["ok"], true, "{shape:?}: {json}");
        assert_eq!(json["naming"], naming, "{shape:?}");
        assert_eq!(json["detected"], true);
        assert_eq!(json["tables"], serde_json::json!(tables), "{shape:?}");
        if legacy {
            assert_eq!(
                json["timestamps"], "timestamp without time zone",
                "{shape:?}"
            );
            assert_eq!(json["foreignKeys"], serde_json::json!([]), "{shape:?}");
            assert!(
                json["notes"].to_string().contains("MassTransit < 8.3"),
                "{shape:?}: {json}"
            );
        } else {
            assert_eq!(json["timestamps"], "timestamp with time zone", "{shape:?}");
            assert_eq!(
                json["foreignKeys"].as_array().unwrap().len(),
                2,
                "{shape:?}: {json}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_what_ferrybus_cannot_use() {
    let schema = TestSchema::new(Shape::Snake).await;
    let s = &schema.schema;
    // The wrong naming given.
    let out = run(&[
        "migrate",
        "--check",
        "--schema",
        s,
        "--naming",
        "pascal",
        "--inbox-table",
        "inbox_state",
        "--outbox-state-table",
        "outbox_state",
        "--outbox-message-table",
        "outbox_message",
    ])
    .await;
    let line = failure(&out, 1);
    assert_eq!(
        line,
        format!("error: ferrybus cannot use the tables of schema {s} as they are")
    );
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(
        report.contains(
            "inbox_state has snake columns, not pascal: use --naming snake (FERRYBUS_NAMING=snake)"
        ),
        "{report}"
    );

    // The status refuses to read them in the wrong naming, and says why.
    let line = failure(
        &run(&[
            "outbox",
            "status",
            "--schema",
            s,
            "--naming",
            "pascal",
            "--inbox-table",
            "inbox_state",
            "--outbox-state-table",
            "outbox_state",
            "--outbox-message-table",
            "outbox_message",
        ])
        .await,
        1,
    );
    assert_eq!(
        line,
        "error: inbox_state has snake columns, not pascal: use --naming snake (FERRYBUS_NAMING=snake)"
    );

    // A pre-8.1 message table, no unique key, a NOT NULL column ferrybus does not write.
    schema.exec(&format!(
        r#"ALTER TABLE "{s}".outbox_message DROP COLUMN message_type;
           ALTER TABLE "{s}".inbox_state DROP CONSTRAINT ak_inbox_state_message_id_consumer_id CASCADE;
           ALTER TABLE "{s}".outbox_state ADD COLUMN tenant text NOT NULL"#
    ))
    .await;
    let out = run(&["migrate", "--check", "--schema", s, "--json"]).await;
    failure(&out, 1);
    let json = one_json(&out);
    assert_eq!(json["ok"], false);
    let problems = json["problems"].to_string();
    assert!(
        problems.contains("outbox_message: column message_type is missing (MassTransit < 8.1)"),
        "{problems}"
    );
    assert!(
        problems.contains("inbox_state has no unique key on (message_id, consumer_id)"),
        "{problems}"
    );
    assert!(
        problems.contains(
            "outbox_state.tenant (not a MassTransit column) is NOT NULL without a default"
        ),
        "{problems}"
    );

    let missing = format!("{s}_none");
    let line = failure(&run(&["outbox", "status", "--schema", &missing]).await, 1);
    assert!(
        line.contains(&format!("no inbox table in schema {missing}")),
        "{line}"
    );
}

/// One of the two foreign keys missing: usable, and the note says which one `migrate` adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_notes_a_missing_foreign_key() {
    let schema = TestSchema::new(Shape::CanonicalFixture).await;
    let s = &schema.schema;
    schema
        .exec(&format!(
            r#"ALTER TABLE "{s}"."OutboxMessage" DROP CONSTRAINT "FK_OutboxMessage_OutboxState_OutboxId""#
        ))
        .await;
    let json = one_json(&run(&["migrate", "--check", "--schema", s, "--json"]).await);
    assert_eq!(json["ok"], true, "{json}");
    assert_eq!(
        json["foreignKeys"],
        serde_json::json!(["OutboxMessage → InboxState"])
    );
    assert_eq!(
        json["notes"],
        serde_json::json!([
            "no foreign key to OutboxState (MassTransit < 8.3 shape); `ferrybus migrate` would add it"
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_status_counts_what_waits_and_who_delivers() {
    let schema = TestSchema::new(Shape::Snake).await;
    let s = &schema.schema;
    let outbox = uuid::Uuid::now_v7();
    let (consumed, delivered, unconsumed) = (
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7(),
    );
    let consumer = uuid::Uuid::now_v7();
    schema
        .exec(&format!(
            r#"INSERT INTO "{s}".outbox_state (outbox_id, lock_id, created) VALUES ('{outbox}', '00000000-0000-0000-0000-000000000000', now() - interval '3 minutes');
               INSERT INTO "{s}".outbox_message (sent_time, message_id, content_type, message_type, body, outbox_id)
                 SELECT now() - interval '3 minutes', gen_random_uuid(), 'application/vnd.masstransit+json', 'urn:message:A:B', '{{}}', '{outbox}' FROM generate_series(1, 2);
               INSERT INTO "{s}".inbox_state (message_id, consumer_id, lock_id, received, receive_count, consumed, delivered) VALUES
                 ('{consumed}', '{consumer}', gen_random_uuid(), now() - interval '10 minutes', 0, now() - interval '10 minutes', NULL),
                 ('{delivered}', '{consumer}', gen_random_uuid(), now() - interval '2 hours', 0, now() - interval '2 hours', now() - interval '2 hours'),
                 ('{unconsumed}', '{consumer}', gen_random_uuid(), now(), 1, NULL, NULL);
               INSERT INTO "{s}".outbox_message (sent_time, message_id, content_type, message_type, body, inbox_message_id, inbox_consumer_id)
                 VALUES (now() - interval '10 minutes', gen_random_uuid(), 'application/vnd.masstransit+json', 'urn:message:A:C', '{{}}', '{consumed}', '{consumer}');"#
        ))
        .await;

    // A delivery service at work: a transaction holding the outbox state's row lock.
    let mut options = ConnectOptions::new(database_url());
    options.max_connections(1).sqlx_logging(false);
    let deliverer = Database::connect(options).await.unwrap();
    let txn = deliverer.begin().await.unwrap();
    exec(
        &txn,
        "SET LOCAL application_name = 'billing-outbox-delivery'",
    )
    .await;
    exec(
        &txn,
        &format!(r#"SELECT * FROM "{s}".outbox_state FOR UPDATE"#),
    )
    .await;

    let json = one_json(&run(&["outbox", "status", "--schema", s, "--json"]).await);
    assert_eq!(json["schema"], s.as_str());
    assert_eq!(json["naming"], "snake");
    let bus = &json["busOutbox"];
    assert_eq!(bus["outboxes"], 1);
    assert_eq!(bus["messages"], 2);
    assert!(
        bus["oldestMessageAgeSeconds"].as_f64().unwrap() >= 170.0,
        "{bus}"
    );
    let who = bus["beingDelivered"].as_array().unwrap();
    assert_eq!(who.len(), 1, "{bus}");
    assert_eq!(who[0]["application"], "billing-outbox-delivery");
    assert_eq!(who[0]["outboxes"], 1);
    assert_eq!(who[0]["user"], "postgres");
    let consumer_outbox = &json["consumerOutbox"];
    assert_eq!(consumer_outbox["messages"], 1);
    assert_eq!(consumer_outbox["pendingInboxRows"], 1);
    assert_eq!(
        consumer_outbox["stranded"], 1,
        "consumed 10 minutes ago, stranded after 5"
    );
    let listed = consumer_outbox["strandedEntries"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "the stranded entry is listed");
    assert_eq!(listed[0]["messages"], 1);
    let age = listed[0]["consumedAgeSeconds"].as_f64().unwrap();
    assert!((500.0..700.0).contains(&age), "{age}");
    let inbox = &json["inbox"];
    assert_eq!(inbox["rows"], 3);
    assert_eq!(inbox["delivered"], 1);
    assert_eq!(inbox["notConsumed"], 1);
    assert_eq!(inbox["pastCleanupWindow"], 1);
    assert_eq!(inbox["cleanupWindowSeconds"], 1800);

    // Other windows.
    let json = one_json(
        &run(&[
            "outbox",
            "status",
            "--schema",
            s,
            "--json",
            "--stranded-after",
            "1h",
            "--cleanup-window",
            "3h",
        ])
        .await,
    );
    assert_eq!(json["consumerOutbox"]["stranded"], 0);
    assert_eq!(
        json["consumerOutbox"]["strandedEntries"],
        serde_json::json!([])
    );
    assert_eq!(json["inbox"]["pastCleanupWindow"], 0);

    let table = success(&run(&["outbox", "status", "--schema", s]).await);
    assert!(
        table.starts_with(&format!(
            "schema {s} (snake naming: inbox_state, outbox_state, outbox_message)"
        )),
        "{table}"
    );
    assert!(table.contains("2 in 1 outboxes"), "{table}");
    assert!(
        table.contains("billing-outbox-delivery as postgres"),
        "{table}"
    );
    txn.rollback().await.unwrap();

    let json = one_json(&run(&["outbox", "status", "--schema", s, "--json"]).await);
    assert_eq!(json["busOutbox"]["beingDelivered"], serde_json::json!([]));
}

/// A .NET schema needs no --naming: the status reads the naming from the tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_status_reads_dotnet_tables() {
    let schema = TestSchema::new(Shape::CanonicalLegacy).await;
    let s = &schema.schema;
    schema
        .exec(&format!(
            r#"INSERT INTO "{s}"."InboxState" ("MessageId", "ConsumerId", "LockId", "Received", "ReceiveCount", "Consumed", "Delivered")
               VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), (now() AT TIME ZONE 'UTC') - interval '1 hour', 0,
                       (now() AT TIME ZONE 'UTC') - interval '1 hour', (now() AT TIME ZONE 'UTC') - interval '1 hour')"#
        ))
        .await;
    let json = one_json(&run(&["outbox", "status", "--schema", s, "--json"]).await);
    assert_eq!(json["naming"], "pascal");
    assert_eq!(
        json["tables"],
        serde_json::json!(["InboxState", "OutboxState", "OutboxMessage"])
    );
    assert_eq!(json["inbox"]["rows"], 1);
    assert_eq!(json["inbox"]["pastCleanupWindow"], 1);
    // Written as UTC wall-clock time one hour ago: read back as one hour, whatever the zone.
    let age = json["inbox"]["oldestDeliveredAgeSeconds"].as_f64().unwrap();
    assert!((3500.0..3700.0).contains(&age), "{age}");
}

/// A window past the earliest date there is is refused with a clear error, not a panic (the
/// tables exist and the database answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_status_refuses_windows_too_long_to_count_with() {
    let schema = TestSchema::new(Shape::Snake).await;
    let s = schema.schema.as_str();
    for (flag, value) in [
        ("--cleanup-window", "300000y"),
        ("--stranded-after", "300000y"),
    ] {
        let out = run(&["outbox", "status", "--schema", s, flag, value]).await;
        let line = failure(&out, 2);
        assert!(
            line.starts_with(&format!("error: {flag} 300000years is too long")),
            "{line}"
        );
    }
    // A long window that fits still works.
    success(
        &run(&[
            "outbox",
            "status",
            "--schema",
            s,
            "--cleanup-window",
            "1000y",
        ])
        .await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_passwords_never_appear() {
    let schema = TestSchema::new(Shape::Snake).await;
    let with_password =
        database_url().replacen("postgres://postgres@", "postgres://postgres:s3cr3t-pw@", 1);
    assert!(
        with_password.contains("s3cr3t-pw"),
        "DATABASE_URL has the default shape"
    );
    // Trust authentication ignores the password: the commands work and never print it.
    for args in [
        vec![
            "--database-url",
            with_password.as_str(),
            "outbox",
            "status",
            "--schema",
            schema.schema.as_str(),
        ],
        vec![
            "--database-url",
            with_password.as_str(),
            "migrate",
            "--check",
            "--schema",
            schema.schema.as_str(),
        ],
    ] {
        let out = success(&run(&args).await);
        assert!(!out.contains("s3cr3t-pw"), "{out}");
    }
    let unreachable = "postgres://postgres:s3cr3t-pw@127.0.0.1:1/test";
    let line = failure(
        &run(&["--database-url", unreachable, "outbox", "status"]).await,
        1,
    );
    assert!(
        line.starts_with("error: connecting to postgres://postgres:***@127.0.0.1:1/test: "),
        "{line}"
    );
    // Passwords with RFC 3986 sub-delimiters are masked whole.
    for password in ["s3c;r(e)t", "p!w$d&x'y", "a*b+c,d=e"] {
        let unreachable = format!("postgres://postgres:{password}@127.0.0.1:1/test");
        let out = run(&["--database-url", &unreachable, "outbox", "status"]).await;
        let line = failure(&out, 1);
        assert!(!line.contains(password), "{line}");
        assert!(line.contains("postgres:***@127.0.0.1:1"), "{line}");
    }
    let line = failure(
        &run(&["--database-url", "mysql://root:s3cr3t-pw@db/x", "migrate"]).await,
        2,
    );
    assert_eq!(
        line,
        "error: --database-url mysql://root:***@db/x is not a postgres:// URL"
    );
}
