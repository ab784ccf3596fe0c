//! Consumer identity behind the inbox: two consumers of one message whose Rust types share a
//! short name (in two modules, or one generic type with two arguments) are two consumers, with
//! an inbox row each, as .NET's namespace-qualified names make them; a configuration where two
//! consumers would still share an inbox consumer id is refused before anything runs.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{OrderPlaced, TestDb};
use ferrybus_core::memory::TestHarness;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Consumer, Publish};
use ferrybus_testing::{wait_settled, Shape, WAIT};
use uuid::Uuid;

const QUEUE: &str = "billing-identity";

mod billing {
    use super::*;

    /// Counts the orders it handled.
    pub(crate) struct Handler(pub(crate) Arc<AtomicUsize>);

    impl Consumer<OrderPlaced> for Handler {
        async fn consume(&self, _ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
}

mod audit {
    use super::*;

    /// Counts the orders it handled.
    pub(crate) struct Handler(pub(crate) Arc<AtomicUsize>);

    impl Consumer<OrderPlaced> for Handler {
        async fn consume(&self, _ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
}

/// Forwards orders to one of two places, told apart by its type argument only.
struct Forward<T>(Arc<AtomicUsize>, std::marker::PhantomData<fn(T)>);

struct ToWarehouse;
struct ToLedger;

impl<T: 'static> Consumer<OrderPlaced> for Forward<T> {
    async fn consume(&self, _ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn order() -> OrderPlaced {
    OrderPlaced {
        order_id: Uuid::now_v7(),
    }
}

/// The inbox rows of `message_id`, one per consumer that handled it.
async fn inbox_rows(tdb: &TestDb, message_id: Uuid) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM {} WHERE {} = $1",
        tdb.t("inbox"),
        tdb.c("MessageId")
    );
    tdb.count(&sql, vec![message_id.into()]).await
}

#[tokio::test]
async fn consumers_with_one_short_name_are_two_consumers() {
    let tdb = TestDb::new(Shape::Snake).await;
    let counts: [Arc<AtomicUsize>; 4] = Default::default();
    let [billing, audit, warehouse, ledger] = counts.clone();
    let harness = TestHarness::builder()
        .storage(
            tdb.storage()
                .await
                .outbox_delivery(false)
                .inbox_cleanup(false),
        )
        .timeout(WAIT)
        .receive_endpoint(QUEUE, |e| {
            e.inbox()
                .consumer(billing::Handler(billing))
                .consumer(audit::Handler(audit))
                .consumer(Forward::<ToWarehouse>(warehouse, Default::default()))
                .consumer(Forward::<ToLedger>(ledger, Default::default()))
        })
        .start()
        .await
        .expect("starts");
    let id = harness.publish(&order()).await.unwrap();
    wait_settled(&harness, id, 1).await;
    for (n, count) in counts.iter().enumerate() {
        assert_eq!(count.load(Ordering::SeqCst), 1, "consumer {n} ran once");
    }
    assert_eq!(inbox_rows(&tdb, id).await, 4, "an inbox row per consumer");
    harness.stop().await;
}

#[tokio::test]
async fn two_consumers_that_would_share_an_inbox_id_are_refused() {
    let handler = || {
        consumer_fn("Handler", |_: ConsumeContext<OrderPlaced>| async {
            Ok::<_, ConsumeError>(())
        })
    };
    let started = TestHarness::builder()
        .receive_endpoint(QUEUE, |e| e.consumer(handler()).consumer(handler()))
        .start()
        .await;
    let Err(error) = started else {
        panic!("two consumers with one inbox consumer id started");
    };
    let error = error.to_string();
    assert!(error.contains("share the inbox consumer id"), "{error}");
    assert!(error.contains("\"Handler\""), "{error}");
}
