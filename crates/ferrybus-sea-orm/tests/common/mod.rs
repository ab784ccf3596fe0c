//! What only the storage tests share: a [`TestSchema`] with a business `invoices` table, the
//! inbox row of a message, the test messages, a recording sink and a harness waiting helper. The
//! schema per test, the table shapes and the per-shape macro come from `ferrybus_testing`.
#![allow(dead_code, unreachable_pub)]

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use ferrybus_core::error::PublishErrorKind;
use ferrybus_core::outgoing::MessageSink;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::{Message, MessageType, PublishError};
use ferrybus_sea_orm::TimestampType;
use ferrybus_testing::{Shape, TestSchema};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A [`TestSchema`] (MassTransit's tables in one shape, dropped afterwards) with a business
/// table `invoices (order_id uuid PRIMARY KEY)` for consumers to write to.
pub struct TestDb {
    schema: TestSchema,
}

impl Deref for TestDb {
    type Target = TestSchema;

    fn deref(&self) -> &TestSchema {
        &self.schema
    }
}

impl TestDb {
    pub async fn new(shape: Shape) -> TestDb {
        let schema = TestSchema::new(shape).await;
        schema
            .exec(&format!(
                "CREATE TABLE \"{}\".invoices (order_id uuid PRIMARY KEY, created timestamptz NOT NULL DEFAULT now())",
                schema.schema
            ))
            .await;
        TestDb { schema }
    }

    /// The `invoices` table, quoted and schema-qualified.
    pub fn invoices_table(&self) -> String {
        format!("\"{}\".invoices", self.schema.schema)
    }

    /// How many invoices there are.
    pub async fn invoices(&self) -> i64 {
        self.count(
            &format!("SELECT count(*) FROM {}", self.invoices_table()),
            vec![],
        )
        .await
    }

    /// The type of the time columns: the legacy shapes use `timestamp without time zone`.
    pub fn timestamps(&self) -> TimestampType {
        match self.shape {
            Shape::BookwormLegacy | Shape::CanonicalLegacy => TimestampType::WithoutTimeZone,
            _ => TimestampType::WithTimeZone,
        }
    }

    /// `at` as a value for this shape's time columns.
    pub fn ts(&self, at: Option<chrono::DateTime<chrono::Utc>>) -> sea_orm::Value {
        match self.timestamps() {
            TimestampType::WithTimeZone => at.into(),
            TimestampType::WithoutTimeZone => at.map(|t| t.naive_utc()).into(),
        }
    }

    /// (consumed set, delivered set, receive count) of the inbox row of `message_id`.
    pub async fn inbox_row(&self, message_id: Uuid) -> Option<(bool, bool, i32)> {
        let sql = format!(
            "SELECT {} IS NOT NULL AS c, {} IS NOT NULL AS d, {} AS rc FROM {} WHERE {} = $1",
            self.c("Consumed"),
            self.c("Delivered"),
            self.c("ReceiveCount"),
            self.t("inbox"),
            self.c("MessageId")
        );
        let row = self
            .db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                [message_id.into()],
            ))
            .await
            .unwrap()?;
        Some((
            row.try_get("", "c").unwrap(),
            row.try_get("", "d").unwrap(),
            row.try_get("", "rc").unwrap(),
        ))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OrderPlaced {
    pub order_id: Uuid,
}

impl Message for OrderPlaced {
    fn message_type() -> MessageType {
        MessageType::parse("Billing.Contracts:OrderPlaced").unwrap()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InvoiceCreated {
    pub order_id: Uuid,
    pub seq: u32,
}

impl Message for InvoiceCreated {
    fn message_type() -> MessageType {
        MessageType::parse("Billing.Contracts:InvoiceCreated")
            .unwrap()
            .implements(MessageType::parse("Billing.Contracts:IBillingEvent").unwrap())
    }
}

/// A sink that records what it delivers (and when each message was tried), and fails while told
/// to.
#[derive(Clone, Default)]
pub struct RecordingSink {
    pub delivered: Arc<Mutex<Vec<OutgoingMessage>>>,
    pub tried: Arc<Mutex<Vec<(Uuid, Instant)>>>,
    pub attempts: Arc<AtomicUsize>,
    pub failing: Arc<AtomicBool>,
}

impl RecordingSink {
    pub fn messages(&self) -> Vec<OutgoingMessage> {
        self.delivered.lock().unwrap().clone()
    }

    pub fn ids(&self) -> Vec<Uuid> {
        self.messages().iter().map(|m| m.message_id).collect()
    }

    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    pub fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }

    /// When each attempt to send `id` happened, in order.
    pub fn tries_of(&self, id: Uuid) -> Vec<Instant> {
        self.tried
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| *m == id)
            .map(|(_, at)| *at)
            .collect()
    }

    /// The ids of every message tried at least once.
    pub fn tried_ids(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self.tried.lock().unwrap().iter().map(|(m, _)| *m).collect();
        ids.dedup();
        ids
    }
}

#[async_trait]
impl MessageSink for RecordingSink {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.tried
            .lock()
            .unwrap()
            .push((message.message_id, Instant::now()));
        if self.failing.load(Ordering::SeqCst) {
            return Err(PublishError::new(
                PublishErrorKind::NotConnected,
                "broker unavailable",
            ));
        }
        self.delivered.lock().unwrap().push(message);
        Ok(())
    }
}
