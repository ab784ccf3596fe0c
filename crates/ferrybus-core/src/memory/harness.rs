//! [`TestHarness`]: publish, then wait until a message was consumed, faulted or skipped — no
//! sleeps.

use std::time::Duration;

use uuid::Uuid;

use super::broker::{InMemoryBroker, StoredMessage};
use super::bus::{BusEvent, InMemoryBus, InMemoryBusBuilder};
use crate::bus::BusConfig;
use crate::endpoint::{EndpointConfig, SettlementKind};
use crate::envelope::Envelope;
use crate::error::BoxError;
use crate::error::PublishError;
use crate::message::Message;
use crate::outgoing::Publish;
use crate::outgoing::{MessageFactory, MessageOrigin, OutgoingMessage, SendOptions};
use crate::storage::Storage;

/// Waiting took longer than the harness timeout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {0:?} waiting for {1}")]
pub struct HarnessTimeout(Duration, String);

/// A test harness over an [`InMemoryBus`]: the way to test consumers without a broker. It
/// publishes through [`Publish`] and waits for outcomes.
///
/// ```
/// use ferrybus_core::memory::TestHarness;
/// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError, Publish};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Debug, Serialize, Deserialize, ferrybus_core::Message)]
/// #[message(namespace = "Bookstore.Contracts")]
/// struct OrderPlaced { total: String }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let harness = TestHarness::builder()
///     .receive_endpoint("billing", |e| {
///         e.consumer(consumer_fn("InvoiceConsumer", |_ctx: ConsumeContext<OrderPlaced>| async {
///             Ok::<_, ConsumeError>(())
///         }))
///     })
///     .start()
///     .await
///     .unwrap();
/// let id = harness.publish(&OrderPlaced { total: "12.00".into() }).await.unwrap();
/// harness.consumed(id).await.unwrap();
/// harness.stop().await;
/// # });
/// ```
pub struct TestHarness {
    bus: InMemoryBus,
    timeout: Duration,
}

/// Builds a [`TestHarness`]: the bus configuration, and how long waits wait.
#[derive(Debug)]
pub struct TestHarnessBuilder {
    bus: InMemoryBusBuilder,
    timeout: Duration,
}

impl TestHarnessBuilder {
    /// Adds a receive endpoint named `name`, configured by `configure`.
    pub fn receive_endpoint(
        mut self,
        name: impl Into<String>,
        configure: impl FnOnce(EndpointConfig) -> EndpointConfig,
    ) -> Self {
        self.bus = self.bus.receive_endpoint(name, configure);
        self
    }

    /// Sets the storage (e.g. a `PostgresStorage`, to test consumers behind the inbox).
    pub fn storage(mut self, storage: impl Storage) -> Self {
        self.bus = self.bus.storage(storage);
        self
    }

    /// Changes the bus configuration directly (layers on every endpoint, see
    /// [`InMemoryBusBuilder::configure`]).
    pub fn configure(mut self, configure: impl FnOnce(BusConfig) -> BusConfig) -> Self {
        self.bus = self.bus.configure(configure);
        self
    }

    /// Sets how long the `wait` methods wait (10 s by default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Starts the bus.
    pub async fn start(self) -> Result<TestHarness, BoxError> {
        Ok(TestHarness {
            bus: self.bus.start().await?,
            timeout: self.timeout,
        })
    }
}

impl TestHarness {
    /// A builder.
    pub fn builder() -> TestHarnessBuilder {
        TestHarnessBuilder {
            bus: InMemoryBus::builder(),
            timeout: Duration::from_secs(10),
        }
    }

    /// The bus.
    pub fn bus(&self) -> &InMemoryBus {
        &self.bus
    }

    /// The broker, to look into queues (`<queue>_error`, `<queue>_skipped`).
    pub fn broker(&self) -> &InMemoryBroker {
        self.bus.broker()
    }

    /// Puts a raw body on exchange `exchange` (a queue's own exchange has its name).
    pub fn publish_raw(&self, exchange: &str, message: StoredMessage) {
        self.bus.publish_raw(exchange, message);
    }

    /// Waits until message `id` was consumed (acknowledged, or acknowledged as a duplicate) by
    /// every consumer on its endpoint.
    pub async fn consumed(&self, id: Uuid) -> Result<(), HarnessTimeout> {
        self.settled_as(
            &id.to_string(),
            &[SettlementKind::Ack, SettlementKind::Duplicate],
        )
        .await
        .map(drop)
    }

    /// Waits until message `id` was moved to an error queue; returns the endpoint's name.
    pub async fn faulted(&self, id: Uuid) -> Result<String, HarnessTimeout> {
        self.faulted_raw(&id.to_string()).await
    }

    /// Waits until a message with id property `id` (any text) was moved to an error queue;
    /// returns the endpoint's name.
    pub async fn faulted_raw(&self, id: &str) -> Result<String, HarnessTimeout> {
        match self.settled_as(id, &[SettlementKind::Fault]).await? {
            BusEvent::Settled { queue, .. } => Ok(queue),
            BusEvent::Sent(_) => unreachable!("the predicate matched a settlement"),
        }
    }

    /// Waits until a message with id property `id` (any text) was moved to a skipped queue.
    pub async fn skipped(&self, id: &str) -> Result<(), HarnessTimeout> {
        self.settled_as(id, &[SettlementKind::Skip]).await.map(drop)
    }

    /// Waits until message `id` was settled in any way; returns how.
    pub async fn settled(&self, id: Uuid) -> Result<SettlementKind, HarnessTimeout> {
        let id = id.to_string();
        let event = self
            .wait_for(
                "the message to be settled",
                |e| matches!(e, BusEvent::Settled { message_id: Some(m), .. } if *m == id),
            )
            .await?;
        match event {
            BusEvent::Settled { settlement, .. } => Ok(settlement),
            BusEvent::Sent(_) => unreachable!("the predicate matched a settlement"),
        }
    }

    async fn settled_as(
        &self,
        id: &str,
        kinds: &[SettlementKind],
    ) -> Result<BusEvent, HarnessTimeout> {
        let what = format!("message {id} to be settled as one of {kinds:?}");
        self.wait_for(&what, |e| e.settles(id, kinds)).await
    }

    /// Waits until a message of type `M` was sent or published, and returns its envelope.
    pub async fn sent<M: Message>(&self) -> Result<Envelope, HarnessTimeout> {
        let urn = M::message_type().urn().to_owned();
        let event = self
            .wait_for(&format!("a {urn} to be sent"), |e| is_sent(e, &urn))
            .await?;
        match event {
            BusEvent::Sent(m) => {
                Ok(Envelope::from_slice(&m.body).expect("ferrybus wrote a valid envelope"))
            }
            BusEvent::Settled { .. } => unreachable!("the predicate matched a sent message"),
        }
    }

    /// Every message of type `M` sent so far, as envelopes.
    pub fn sent_now<M: Message>(&self) -> Vec<Envelope> {
        let urn = M::message_type().urn().to_owned();
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                BusEvent::Sent(m) if is_type(&m, &urn) => Envelope::from_slice(&m.body).ok(),
                _ => None,
            })
            .collect()
    }

    /// Sends `request` to `address` as a request client does (`requestId`, `responseAddress` =
    /// the harness's bus, `MT-Request-AcceptType` = `Res`, time to live = the harness timeout)
    /// and waits for the answer: the `Res` and its envelope, or an error for a `Fault<Req>`
    /// (its exception message), a response that does not bind, or no answer in time
    /// ([`HarnessTimeout`]).
    ///
    /// ```
    /// use ferrybus_core::memory::TestHarness;
    /// use ferrybus_core::{consumer_fn, ConsumeContext, ConsumeError};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize, ferrybus_core::Message)]
    /// #[message(namespace = "Shop")]
    /// struct CheckStock { sku: String }
    /// #[derive(Serialize, Deserialize, ferrybus_core::Message)]
    /// #[message(namespace = "Shop")]
    /// struct InStock { count: u32 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let harness = TestHarness::builder()
    ///     .receive_endpoint("stock", |e| {
    ///         e.consumer(consumer_fn("StockConsumer", |ctx: ConsumeContext<CheckStock>| async move {
    ///             ctx.respond(&InStock { count: 3 }).await?;
    ///             Ok::<_, ConsumeError>(())
    ///         }))
    ///     })
    ///     .start()
    ///     .await
    ///     .unwrap();
    /// let check = CheckStock { sku: "B-1".into() };
    /// let (stock, _envelope) = harness.get_response::<_, InStock>("queue:stock", &check).await.unwrap();
    /// assert_eq!(stock.count, 3);
    /// harness.stop().await;
    /// # });
    /// ```
    pub async fn get_response<Req: Message, Res: Message>(
        &self,
        address: &str,
        request: &Req,
    ) -> Result<(Res, Envelope), BoxError> {
        let request_id = Uuid::now_v7();
        let (accept, fault) = (Res::message_type(), Req::message_type().fault());
        let options = SendOptions::new()
            .request_id(request_id)
            .response_address(self.message_factory().host().entity_address("bus"))
            .time_to_live(self.timeout)
            .header("MT-Request-AcceptType", serde_json::json!([accept.urn()]));
        self.send_with(address, request, options).await?;
        let answers = |e: &BusEvent| {
            matches!(e, BusEvent::Sent(m) if m.request_id == Some(request_id)
                && (is_type(m, accept.urn()) || is_type(m, fault.urn())))
        };
        let what = format!("a response to request {request_id}");
        let BusEvent::Sent(answer) = self.wait_for(&what, answers).await? else {
            unreachable!("the predicate matched a sent message")
        };
        let envelope = Envelope::from_slice(&answer.body)?;
        if is_type(&answer, fault.urn()) {
            let text = envelope.message["exceptions"][0]["message"].as_str();
            return Err(format!("request {request_id} faulted: {}", text.unwrap_or("")).into());
        }
        Ok((envelope.message.bind()?, envelope))
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

impl Publish for TestHarness {
    fn message_factory(&self) -> &MessageFactory {
        self.bus.message_factory()
    }

    fn message_origin(&self) -> &MessageOrigin {
        self.bus.message_origin()
    }

    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        self.bus.deliver(message).await
    }
}

fn is_type(message: &OutgoingMessage, urn: &str) -> bool {
    message
        .message_type
        .first()
        .is_some_and(|t| t.eq_ignore_ascii_case(urn))
}

fn is_sent(event: &BusEvent, urn: &str) -> bool {
    matches!(event, BusEvent::Sent(m) if is_type(m, urn))
}
