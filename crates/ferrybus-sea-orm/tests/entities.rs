//! The entities: each table queried and written through its entity, on both namings, in a
//! configured schema ([`Retarget::on`]); rows ferrybus wrote read back through them; the status
//! counts (on every table shape: windows, lock holders, ages); and ferrybus's migrations run from
//! a user's sea-orm-migration `Migrator`.

use std::sync::OnceLock;

use chrono::{DurationRound, TimeDelta, Utc};
use ferrybus_core::address::HostAddress;
use ferrybus_core::outgoing::MessageFactory;
use ferrybus_core::{Message, MessageType, Publish};
use ferrybus_sea_orm::entity::{dotnet, inbox_state, outbox_message, outbox_state, Retarget};
use ferrybus_sea_orm::{migrate, status, BusOutbox, StoreErrorKind, Tables};
use ferrybus_testing::{database_url, Shape, TestSchema};
use sea_orm::sea_query::{Alias, ColumnDef, Table};
use sea_orm::{
    ColumnTrait, ConnectOptions, ConnectionTrait, Database, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, Set, TransactionTrait,
};
use sea_orm_migration::{MigrationName, MigrationTrait, MigratorTrait, SchemaManager};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderPlaced {
    order_id: Uuid,
}

impl Message for OrderPlaced {
    fn message_type() -> MessageType {
        MessageType::parse("Billing.Contracts:OrderPlaced").unwrap()
    }
}

/// Now, at the microsecond precision PostgreSQL keeps.
fn now() -> chrono::DateTime<Utc> {
    Utc::now()
        .duration_trunc(TimeDelta::microseconds(1))
        .unwrap()
}

/// Writes, reads, updates and deletes each of the three tables of `$schema` through the
/// entities of module `$m` (`ferrybus_sea_orm::entity` or `…::entity::dotnet`).
macro_rules! exercise_entities {
    ($m:ident, $tdb:expr) => {{
        let tdb: &TestSchema = $tdb;
        let tables: Tables = tdb.tables();
        let db = &tdb.db;
        let (message_id, consumer_id, outbox_id) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let received = now();

        // InboxState: an ActiveModel insert, RETURNING the identity.
        let inbox = $m::inbox_state::Entity::insert($m::inbox_state::ActiveModel {
            message_id: Set(message_id),
            consumer_id: Set(consumer_id),
            lock_id: Set(Uuid::new_v4()),
            received: Set(received),
            receive_count: Set(0),
            ..Default::default()
        })
        .on(&tables)
        .unwrap()
        .exec_with_returning(db)
        .await
        .unwrap();
        assert!(inbox.id > 0);
        assert_eq!(inbox.received, received);

        // OutboxState and two OutboxMessage rows (one per outbox kind).
        $m::outbox_state::Entity::insert($m::outbox_state::ActiveModel {
            outbox_id: Set(outbox_id),
            lock_id: Set(Uuid::nil()),
            created: Set(received),
            ..Default::default()
        })
        .on(&tables)
        .unwrap()
        .exec(db)
        .await
        .unwrap();
        let message = |inbox: bool| $m::outbox_message::ActiveModel {
            sent_time: Set(received),
            message_id: Set(Uuid::new_v4()),
            content_type: Set("application/vnd.masstransit+json".into()),
            message_type: Set("urn:message:Billing.Contracts:OrderPlaced".into()),
            body: Set("{}".into()),
            destination_address: Set(Some("rabbitmq://localhost/billing".into())),
            inbox_message_id: Set(inbox.then_some(message_id)),
            inbox_consumer_id: Set(inbox.then_some(consumer_id)),
            outbox_id: Set((!inbox).then_some(outbox_id)),
            ..Default::default()
        };
        for inbox in [true, false] {
            $m::outbox_message::Entity::insert(message(inbox))
                .on(&tables)
                .unwrap()
                .exec(db)
                .await
                .unwrap();
        }

        // Reads with filters and ordering.
        let found = $m::inbox_state::Entity::find()
            .filter($m::inbox_state::Column::MessageId.eq(message_id))
            .filter($m::inbox_state::Column::Delivered.is_null())
            .on(&tables)
            .unwrap()
            .one(db)
            .await
            .unwrap()
            .expect("the inbox row");
        assert_eq!(found, inbox);
        let state = $m::outbox_state::Entity::find_by_id(outbox_id)
            .on(&tables)
            .unwrap()
            .one(db)
            .await
            .unwrap()
            .expect("the outbox state");
        assert_eq!(state.created, received);
        let messages = $m::outbox_message::Entity::find()
            .filter($m::outbox_message::Column::InboxMessageId.eq(message_id))
            .order_by_asc($m::outbox_message::Column::SequenceNumber)
            .on(&tables)
            .unwrap()
            .all(db)
            .await
            .unwrap();
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].inbox_consumer_id, Some(consumer_id));
        assert_eq!(
            $m::outbox_message::Entity::find()
                .on(&tables)
                .unwrap()
                .count(db)
                .await
                .unwrap(),
            2
        );

        // Update and delete.
        let updated = $m::inbox_state::Entity::update_many()
            .col_expr(
                $m::inbox_state::Column::Delivered,
                sea_orm::sea_query::Expr::value(received),
            )
            .filter($m::inbox_state::Column::Id.eq(inbox.id))
            .on(&tables)
            .unwrap()
            .exec(db)
            .await
            .unwrap();
        assert_eq!(updated.rows_affected, 1);
        let deleted = $m::outbox_message::Entity::delete_many()
            .filter($m::outbox_message::Column::OutboxId.eq(outbox_id))
            .on(&tables)
            .unwrap()
            .exec(db)
            .await
            .unwrap();
        assert_eq!(deleted.rows_affected, 1);
        let mut active: $m::outbox_state::ActiveModel = state.into();
        active.last_sequence_number = Set(Some(7));
        $m::outbox_state::Entity::update(active)
            .validate()
            .unwrap()
            .on(&tables)
            .unwrap()
            .exec(db)
            .await
            .unwrap();
        assert_eq!(tdb.rows("message").await, 1);

        // A row ferrybus's bus outbox wrote, read through the entity.
        let storage = tdb.storage().await;
        let factory = MessageFactory::new(HostAddress::new("rabbitmq", "localhost", None, "/"));
        let outbox = BusOutbox::new(&storage, &factory);
        let txn = db.begin().await.unwrap();
        let order_id = Uuid::new_v4();
        outbox
            .on(&txn)
            .publish(&OrderPlaced { order_id })
            .await
            .unwrap();
        txn.commit().await.unwrap();
        let written = $m::outbox_message::Entity::find()
            .filter($m::outbox_message::Column::OutboxId.is_not_null())
            .on(&tables)
            .unwrap()
            .one(db)
            .await
            .unwrap()
            .expect("the bus-outbox row");
        assert!(
            written.body.contains(&order_id.to_string()),
            "{}",
            written.body
        );
        assert_eq!(
            written.message_type,
            "urn:message:Billing.Contracts:OrderPlaced"
        );
        let status = status::outbox_status(db, &tables).await.unwrap();
        assert_eq!(
            (status.bus_outbox.outboxes, status.bus_outbox.messages),
            (2, 1)
        );
        assert_eq!((status.inbox.rows, status.consumer_outbox.messages), (1, 1));
    }};
}

async fn entities_on_their_tables(shape: Shape) {
    let tdb = TestSchema::new(shape).await;
    match shape.naming() {
        ferrybus_sea_orm::NamingStyle::SnakeCase => {
            use ferrybus_sea_orm::entity as m;
            exercise_entities!(m, &tdb)
        }
        ferrybus_sea_orm::NamingStyle::PascalCase => {
            use ferrybus_sea_orm::entity::dotnet as m;
            exercise_entities!(m, &tdb)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snake_case_entities() {
    entities_on_their_tables(Shape::Snake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pascal_case_entities() {
    entities_on_their_tables(Shape::Pascal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snake_case_entities_on_the_dotnet_fixture() {
    entities_on_their_tables(Shape::BookwormFixture).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pascal_case_entities_on_the_dotnet_fixture() {
    entities_on_their_tables(Shape::CanonicalFixture).await;
}

/// The default entities need no retargeting on the default tables, and refuse tables of the
/// other naming with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn entities_refuse_the_other_naming() {
    let error = inbox_state::Entity::find()
        .on(&Tables::dotnet_default())
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Config);
    let error = dotnet::outbox_state::Entity::delete_many()
        .on(&Tables::new())
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Config);
    assert!(outbox_state::Entity::find().on(&Tables::new()).is_ok());
    assert!(outbox_message::Entity::find()
        .on(&Tables::new().schema("elsewhere"))
        .is_ok());
}

/// `now() - <ago>` as this shape's time columns hold it (UTC wall-clock time for Npgsql's legacy
/// `timestamp without time zone`).
fn ago(shape: Shape, ago: &str) -> String {
    match shape {
        Shape::BookwormLegacy | Shape::CanonicalLegacy => {
            format!("(now() AT TIME ZONE 'UTC') - interval '{ago}'")
        }
        _ => format!("now() - interval '{ago}'"),
    }
}

/// The whole seconds from `at` to the status's snapshot.
fn secs(status: &status::OutboxStatus, at: Option<chrono::DateTime<Utc>>) -> i64 {
    status.age(at).expect("a time").num_seconds()
}

/// Every figure of the status, with the default and other windows, a delivery service's row
/// locks, and the ages of the oldest rows (read as UTC on the legacy shapes too).
async fn status_counts_what_waits(shape: Shape) {
    let tdb = TestSchema::new(shape).await;
    let tables = tdb.tables();
    let c = |name: &str| tdb.c(name);
    let (inbox, state, message) = (tdb.t("inbox"), tdb.t("state"), tdb.t("message"));
    let (pending, done) = (Uuid::new_v4(), Uuid::new_v4());
    let consumer = Uuid::new_v4();
    let [stranded, fresh, expired, recent, unconsumed] = [(); 5].map(|()| Uuid::new_v4());
    let row = |id: Uuid, consumed: Option<&str>, delivered: Option<&str>| {
        let at = |t: Option<&str>| t.map_or("NULL".to_owned(), |t| ago(shape, t));
        format!(
            "('{id}', '{consumer}', '{}', {}, 0, {}, {})",
            Uuid::new_v4(),
            ago(shape, "3 hours"),
            at(consumed),
            at(delivered)
        )
    };
    tdb.exec(&format!(
        "INSERT INTO {state} ({}, {}, {}, {}) VALUES ('{pending}', '{}', {}, NULL), ('{done}', '{}', {}, {});
         INSERT INTO {message} ({}, {}, {}, {}, {}, {}) SELECT {}, gen_random_uuid(), 'application/vnd.masstransit+json', 'urn:message:A:B', '{{}}', '{pending}' FROM generate_series(1, 2);
         INSERT INTO {inbox} ({}, {}, {}, {}, {}, {}, {}) VALUES {}, {}, {}, {}, {};
         INSERT INTO {message} ({}, {}, {}, {}, {}, {}, {}) VALUES ({}, gen_random_uuid(), 'application/vnd.masstransit+json', 'urn:message:A:C', '{{}}', '{stranded}', '{consumer}')",
        c("OutboxId"), c("LockId"), c("Created"), c("Delivered"),
        Uuid::nil(), ago(shape, "3 minutes"), Uuid::nil(), ago(shape, "9 minutes"), ago(shape, "1 minute"),
        c("SentTime"), c("MessageId"), c("ContentType"), c("MessageType"), c("Body"), c("OutboxId"),
        ago(shape, "4 minutes"),
        c("MessageId"), c("ConsumerId"), c("LockId"), c("Received"), c("ReceiveCount"), c("Consumed"), c("Delivered"),
        row(stranded, Some("10 minutes"), None),
        row(fresh, Some("1 minute"), None),
        row(expired, Some("2 hours"), Some("2 hours")),
        row(recent, Some("1 minute"), Some("1 minute")),
        row(unconsumed, None, None),
        c("SentTime"), c("MessageId"), c("ContentType"), c("MessageType"), c("Body"), c("InboxMessageId"), c("InboxConsumerId"),
        ago(shape, "10 minutes"),
    ))
    .await;

    // A delivery service at work: a transaction holding the outbox states' row locks.
    let mut options = ConnectOptions::new(database_url());
    options.max_connections(1).sqlx_logging(false);
    let deliverer = Database::connect(options).await.unwrap();
    let txn = deliverer.begin().await.unwrap();
    txn.execute_unprepared("SET LOCAL application_name = 'status-test-delivery'")
        .await
        .unwrap();
    txn.execute_unprepared(&format!("SELECT {} FROM {state} FOR UPDATE", c("OutboxId")))
        .await
        .unwrap();

    // Read in a session whose time zone is not UTC (sqlx's sessions are): the ages must not
    // move. One connection, so the session setting stays.
    let mut options = ConnectOptions::new(database_url());
    options
        .max_connections(1)
        .min_connections(1)
        .sqlx_logging(false);
    let db = Database::connect(options).await.unwrap();
    db.execute_unprepared("SET TIME ZONE 'America/St_Johns'")
        .await
        .unwrap();
    let zone = db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT current_setting('TimeZone') AS z",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(zone.try_get::<String>("", "z").unwrap(), "America/St_Johns");

    let status = status::outbox_status(&db, &tables).await.unwrap();
    assert_eq!(status.windows, status::Windows::default());
    let bus = &status.bus_outbox;
    assert_eq!(
        (bus.outboxes, bus.messages),
        (1, 2),
        "the delivered outbox is not pending"
    );
    assert!(
        (170..300).contains(&secs(&status, bus.oldest_outbox)),
        "{bus:?}"
    );
    assert!(
        (230..360).contains(&secs(&status, bus.oldest_message)),
        "{bus:?}"
    );
    let [holder] = &bus.being_delivered[..] else {
        panic!("one session delivers: {bus:?}")
    };
    assert_eq!(holder.application.as_deref(), Some("status-test-delivery"));
    assert_eq!(holder.outboxes, 2, "it locked both states");
    assert_eq!(holder.user.as_deref(), Some("postgres"));
    assert!(secs(&status, holder.transaction_start) >= 0);
    let consumer_outbox = &status.consumer_outbox;
    assert_eq!(consumer_outbox.messages, 1);
    assert!((590..720).contains(&secs(&status, consumer_outbox.oldest_message)));
    assert_eq!(consumer_outbox.pending_inbox_rows, 2);
    assert_eq!(
        consumer_outbox.stranded, 1,
        "consumed 10 minutes ago, stranded after 5"
    );
    assert!((590..720).contains(&secs(&status, consumer_outbox.oldest_pending)));
    let inbox_status = &status.inbox;
    assert_eq!(inbox_status.rows, 5);
    assert_eq!(inbox_status.delivered, 2);
    assert_eq!(inbox_status.not_consumed, 1);
    assert_eq!(
        inbox_status.past_cleanup_window, 1,
        "delivered 2 hours ago, window 30 min"
    );
    assert!((7190..7320).contains(&secs(&status, inbox_status.oldest_delivered)));
    txn.rollback().await.unwrap();

    let hour = std::time::Duration::from_secs(3600);
    let windows = status::Windows::default()
        .stranded_after(hour)
        .cleanup_window(hour * 3);
    let status = status::outbox_status_with(&db, &tables, windows)
        .await
        .unwrap();
    assert_eq!(status.windows, windows);
    assert_eq!(status.consumer_outbox.stranded, 0);
    assert_eq!(status.inbox.past_cleanup_window, 0);
    assert_eq!(status.bus_outbox.being_delivered, [], "the locks are gone");
    let windows = status::Windows::default()
        .stranded_after(std::time::Duration::from_secs(30))
        .cleanup_window(std::time::Duration::from_secs(30));
    let status = status::outbox_status_with(&db, &tables, windows)
        .await
        .unwrap();
    assert_eq!(status.consumer_outbox.stranded, 2);
    assert_eq!(status.inbox.past_cleanup_window, 2);
    db.close().await.unwrap();
}

ferrybus_testing::on_every_shape!(status_counts_what_waits);

/// The schema of the user's migrator below (its `migrations()` is a static function).
static APP_SCHEMA: OnceLock<String> = OnceLock::new();

/// A user's own migration: an `invoices` table beside ferrybus's tables.
struct CreateInvoices;

impl MigrationName for CreateInvoices {
    fn name(&self) -> &str {
        "m20250101_000001_create_invoices"
    }
}

#[allow(elided_lifetimes_in_paths)] // as sea-orm-migration's trait is written
#[async_trait::async_trait]
impl MigrationTrait for CreateInvoices {
    async fn up(&self, manager: &SchemaManager) -> Result<(), sea_orm::DbErr> {
        let schema = APP_SCHEMA.get().unwrap();
        manager
            .create_table(
                Table::create()
                    .table((Alias::new(schema), Alias::new("invoices")))
                    .col(ColumnDef::new(Alias::new("order_id")).uuid().primary_key())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), sea_orm::DbErr> {
        let schema = APP_SCHEMA.get().unwrap();
        manager
            .drop_table(
                Table::drop()
                    .table((Alias::new(schema), Alias::new("invoices")))
                    .to_owned(),
            )
            .await
    }
}

/// A user's `Migrator`: ferrybus's migrations first, then the user's own.
struct AppMigrator;

impl MigratorTrait for AppMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let tables = Tables::new().schema(APP_SCHEMA.get().unwrap());
        let mut migrations = migrate::migrations(&tables);
        migrations.push(Box::new(CreateInvoices));
        migrations
    }
}

/// ferrybus's migrations run from a user's sea-orm-migration `Migrator`: recorded in its
/// history, applied once, rolled back by `down`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrations_run_from_a_users_migrator() {
    // An empty schema of the test's own; sea-orm-migration's history table goes there too (the
    // connection's search_path), so parallel runs do not see each other's history.
    let tdb = TestSchema::new(Shape::Snake).await;
    let schema = tdb.schema.clone();
    tdb.exec(&format!(
        "DROP TABLE \"{schema}\".outbox_message, \"{schema}\".outbox_state, \"{schema}\".inbox_state"
    ))
    .await;
    APP_SCHEMA.set(schema.clone()).unwrap();
    let mut options = ConnectOptions::new(database_url());
    options
        .max_connections(2)
        .sqlx_logging(false)
        .set_schema_search_path(schema.clone());
    let db = Database::connect(options).await.unwrap();
    let tables = Tables::new().schema(&schema);
    assert!(matches!(
        migrate::check(&db, &tables).await.unwrap().problems[..],
        [migrate::SchemaProblem::MissingTable { .. }, _, _]
    ));

    AppMigrator::up(&db, None).await.unwrap();
    let report = migrate::check(&db, &tables).await.unwrap();
    assert!(report.is_complete(), "{:?}", report.problems);
    let history: Vec<String> = AppMigrator::get_applied_migrations(&db)
        .await
        .unwrap()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    assert_eq!(
        history,
        [
            format!("m0001_ferrybus_outbox_tables_{schema}"),
            "m20250101_000001_create_invoices".to_owned()
        ]
    );
    // Applied once: a second `up` has nothing to do.
    assert!(AppMigrator::get_pending_migrations(&db)
        .await
        .unwrap()
        .is_empty());
    AppMigrator::up(&db, None).await.unwrap();
    // The storage runs on the tables the user's migrator created.
    let storage = ferrybus_sea_orm::PostgresStorage::new(db.clone()).tables(tables.clone());
    ferrybus_core::storage::Storage::prepare(&storage)
        .await
        .unwrap();

    AppMigrator::down(&db, None).await.unwrap();
    let report = migrate::check(&db, &tables).await.unwrap();
    assert_eq!(report.problems.len(), 3, "{:?}", report.problems);
    db.execute_unprepared("SELECT 1").await.unwrap();
}
