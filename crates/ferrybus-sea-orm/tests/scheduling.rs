//! A message scheduled from a consumer behind the inbox goes through the consumer outbox, on the
//! real PostgreSQL and RabbitMQ: it leaves only if the consumer's transaction commits, and then
//! waits its delay in the broker.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestDb;
use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Message, MessageType, Publish};
use ferrybus_rabbitmq::RabbitMqBus;
use ferrybus_testing::{amqp_url, eventually, unique, Probe, Shape, WAIT};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Remind {
    n: u32,
    fail: bool,
}

impl Message for Remind {
    fn message_type() -> MessageType {
        MessageType::parse("Billing.Contracts.Scheduling:Remind").unwrap()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Reminder {
    n: u32,
}

impl Message for Reminder {
    fn message_type() -> MessageType {
        MessageType::parse("Billing.Contracts.Scheduling:Reminder").unwrap()
    }
}

const DELAY: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_scheduled_behind_the_inbox_leaves_only_when_the_consumer_commits() {
    let tdb = TestDb::new(Shape::Snake).await;
    let probe = Probe::connect(&amqp_url()).await;
    let (input, target) = (unique("remind"), unique("reminders"));
    probe.track_endpoint(&input);
    probe.track_endpoint(&target);
    probe.track(&[&format!("{target}_delay_{}", DELAY.as_millis())], &[]);
    let address = format!("queue:{target}");
    let scheduler = consumer_fn("RemindConsumer", move |ctx: ConsumeContext<Remind>| {
        let address = address.clone();
        async move {
            let Remind { n, fail } = *ctx.message();
            ctx.schedule_send(&address, DELAY, &Reminder { n }).await?;
            if fail {
                return Err(ConsumeError::permanent("failed after scheduling"));
            }
            Ok(())
        }
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let reminders = consumer_fn("ReminderConsumer", move |ctx: ConsumeContext<Reminder>| {
        s.lock().unwrap().push((ctx.message().n, Instant::now()));
        async { Ok::<_, ConsumeError>(()) }
    });
    let bus = RabbitMqBus::builder(&amqp_url())
        .storage(tdb.storage().await)
        .receive_endpoint(&input, |e| e.inbox().consumer(scheduler))
        .receive_endpoint(&target, |e| e.consumer(reminders))
        .start()
        .await
        .unwrap();
    let input_address = format!("queue:{input}");
    let rolled_back = bus
        .send(&input_address, &Remind { n: 1, fail: true })
        .await
        .unwrap();
    probe.wait_get(&format!("{input}_error")).await;
    let sent = Instant::now();
    bus.send(&input_address, &Remind { n: 2, fail: false })
        .await
        .unwrap();
    let at = eventually("the committed reminder", WAIT, || async {
        let seen = seen.lock().unwrap();
        seen.iter().find(|(n, _)| *n == 2).map(|(_, at)| *at)
    })
    .await;
    assert!(at - sent >= DELAY, "arrived after {:?}", at - sent);
    let numbers: Vec<u32> = seen.lock().unwrap().iter().map(|(n, _)| *n).collect();
    assert_eq!(
        numbers,
        [2],
        "the reminder scheduled by the failed consumer ({rolled_back}) never left"
    );
    bus.stop().await;
    probe.cleanup().await;
}
