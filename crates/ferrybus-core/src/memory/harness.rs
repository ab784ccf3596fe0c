//! [`TestHarness`]: publish, then wait until a message was consumed, faulted or skipped — no
//! sleeps.

use std::time::Duration;

use uuid::Uuid;

use crate::envelope::Envelope;
use crate::memory::broker::{InMemoryBroker, StoredMessage};
use crate::memory::bus::{BusEvent, InMemoryBus};
use crate::message::Message;
use crate::outgoing::SendOptions;
use crate::pipeline::EndpointConfig;
use crate::BoxError;

/// Waiting took longer than the harness timeout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {0:?} waiting for {1}")]
pub struct HarnessTimeout(Duration, String);

/// A test harness over an [`InMemoryBus`]: the way to test consumers without a broker.
///
/// ```
/// use ferrybus_core::memory::TestHarness;
/// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, EndpointConfig};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// #[message(namespace = "Bookstore.Contracts")]
/// struct OrderPlaced { total: String }
///
/// # tokio_test_block(async {
/// let harness = TestHarness::start([EndpointConfig::new("billing").consumer(consumer_fn(
///     "InvoiceConsumer",
///     |_ctx: ConsumeContext<OrderPlaced>| async { Ok::<_, ConsumeError>(()) },
/// ))]);
/// let id = harness.publish(&OrderPlaced { total: "12.00".into() }).await.unwrap();
/// harness.consumed(id).await.unwrap();
/// harness.stop().await;
/// # });
/// # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
pub struct TestHarness {
    bus: InMemoryBus,
    timeout: Duration,
}

impl TestHarness {
    /// Starts a bus with these endpoints.
    pub fn start(endpoints: impl IntoIterator<Item = EndpointConfig>) -> Self {
        let bus = endpoints
            .into_iter()
            .fold(InMemoryBus::builder(), |b, e| b.receive_endpoint(e))
            .start();
        Self {
            bus,
            timeout: Duration::from_secs(10),
        }
    }

    /// Sets how long `wait_*` methods wait (10 s by default).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The bus.
    pub fn bus(&self) -> &InMemoryBus {
        &self.bus
    }

    /// The broker, to look into queues (`<queue>_error`, `<queue>_skipped`).
    pub fn broker(&self) -> &InMemoryBroker {
        self.bus.broker()
    }

    /// Publishes a message; returns its id.
    pub async fn publish<M: Message>(&self, message: &M) -> Result<Uuid, BoxError> {
        self.bus.publish(message).await
    }

    /// Publishes with options; returns its id.
    pub async fn publish_with<M: Message>(
        &self,
        message: &M,
        options: SendOptions,
    ) -> Result<Uuid, BoxError> {
        self.bus.publish_with(message, options).await
    }

    /// Sends to an address; returns the message id.
    pub async fn send<M: Message>(&self, address: &str, message: &M) -> Result<Uuid, BoxError> {
        self.bus.send(address, message).await
    }

    /// Puts a raw body on exchange `exchange` (a queue's own exchange has its name).
    pub fn publish_raw(&self, exchange: &str, message: StoredMessage) {
        self.bus.publish_raw(exchange, message);
    }

    /// Waits until message `id` was consumed by every consumer on its endpoint.
    pub async fn consumed(&self, id: Uuid) -> Result<(), HarnessTimeout> {
        let id = Some(id.to_string());
        self.wait_for(
            "the message to be consumed",
            |e| matches!(e, BusEvent::Consumed { message_id, .. } if *message_id == id),
        )
        .await
        .map(drop)
    }

    /// Waits until message `id` was moved to an error queue; returns the queue's endpoint name.
    pub async fn faulted(&self, id: Uuid) -> Result<String, HarnessTimeout> {
        let id = Some(id.to_string());
        let event = self
            .wait_for(
                "the message to fault",
                |e| matches!(e, BusEvent::Faulted { message_id, .. } if *message_id == id),
            )
            .await?;
        Ok(match event {
            BusEvent::Faulted { queue, .. } => queue,
            _ => unreachable!("the predicate matched a fault"),
        })
    }

    /// Waits until a message with id property `id` (any text) was moved to a skipped queue.
    pub async fn skipped(&self, id: &str) -> Result<(), HarnessTimeout> {
        self.wait_for("the message to be skipped", |e| {
            matches!(e, BusEvent::Skipped { message_id, .. } if message_id.as_deref() == Some(id))
        })
        .await
        .map(drop)
    }

    /// Waits until a message with id property `id` was moved to an error queue.
    pub async fn faulted_raw(&self, id: &str) -> Result<(), HarnessTimeout> {
        self.wait_for("the message to fault", |e| {
            matches!(e, BusEvent::Faulted { message_id, .. } if message_id.as_deref() == Some(id))
        })
        .await
        .map(drop)
    }

    /// Waits until a message of type `M` was sent or published, and returns its envelope.
    pub async fn sent<M: Message>(&self) -> Result<Envelope, HarnessTimeout> {
        let urn = M::message_type().urn().to_owned();
        let event = self
            .wait_for(&format!("a {urn} to be sent"), |e| {
                matches!(e, BusEvent::Sent(m) if m.message_type.first().is_some_and(|t| t.eq_ignore_ascii_case(&urn)))
            })
            .await?;
        match event {
            BusEvent::Sent(m) => {
                Ok(Envelope::from_slice(&m.body).expect("ferrybus wrote a valid envelope"))
            }
            _ => unreachable!("the predicate matched a sent message"),
        }
    }

    /// Every message of type `M` sent so far, as envelopes.
    pub fn sent_now<M: Message>(&self) -> Vec<Envelope> {
        let urn = M::message_type().urn().to_owned();
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                BusEvent::Sent(m)
                    if m.message_type
                        .first()
                        .is_some_and(|t| t.eq_ignore_ascii_case(&urn)) =>
                {
                    Envelope::from_slice(&m.body).ok()
                }
                _ => None,
            })
            .collect()
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<BusEvent> {
        self.bus.events().snapshot()
    }

    /// Waits until an event matching `predicate` happened (including before the call).
    pub async fn wait_for(
        &self,
        what: &str,
        predicate: impl Fn(&BusEvent) -> bool,
    ) -> Result<BusEvent, HarnessTimeout> {
        let log = self.bus.events();
        let mut changes = log.subscribe();
        let search = async {
            loop {
                if let Some(event) = log.snapshot().into_iter().find(|e| predicate(e)) {
                    return event;
                }
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(self.timeout, search)
            .await
            .map_err(|_| HarnessTimeout(self.timeout, what.to_owned()))
    }

    /// Stops the bus, letting in-flight messages finish.
    pub async fn stop(self) {
        self.bus.stop().await;
    }
}
