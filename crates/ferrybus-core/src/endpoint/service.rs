//! [`EndpointService`]: what an endpoint does with one delivery, as a tower service — read the
//! body, route it to the consumers of its message types, run their stacks, and let the
//! [decider](super::decide) settle it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{join_all, BoxFuture};
use tower::{Service, ServiceExt};

use super::decide::Decider;
use super::delivery::Delivery;
use super::read::read;
use super::settlement::Settlement;
use crate::consume::{
    BoxConsumeService, ConsumeOutcome, ConsumeRequest, ConsumerInfo, ReceivedMessage,
};
use crate::envelope::RAW_JSON_CONTENT_TYPE;
use crate::error::ConsumeError;
use crate::outgoing::{Serializer, SharedSink};

/// One consumer on a built endpoint: who it is and its composed stack.
#[derive(Clone)]
pub(crate) struct Registered {
    pub(crate) info: Arc<ConsumerInfo>,
    pub(crate) service: BoxConsumeService,
}

/// How an endpoint reads its deliveries.
pub(crate) struct Reading {
    pub(crate) serializer: Serializer,
    pub(crate) max_body_size: usize,
    /// Deliveries the transport counted this often without a settlement are faulted unread.
    pub(crate) delivery_limit: Option<u32>,
}

/// The innermost endpoint service. The endpoint's layers wrap it; the [`Endpoint`](super::Endpoint)
/// guards the whole.
#[derive(Clone)]
pub(crate) struct EndpointService {
    inner: Arc<Inner>,
}

struct Inner {
    consumers: Box<[Registered]>,
    reading: Reading,
    decider: Decider,
    sink: SharedSink,
}

impl EndpointService {
    pub(crate) fn new(
        consumers: Vec<Registered>,
        reading: Reading,
        decider: Decider,
        sink: SharedSink,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                consumers: consumers.into(),
                reading,
                decider,
                sink,
            }),
        }
    }
}

impl Service<Delivery> for EndpointService {
    type Response = Settlement;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Settlement, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        Box::pin(self.handle(delivery))
    }
}

impl EndpointService {
    /// Handles `delivery`, unboxed (the [`Endpoint`](super::Endpoint) boxes it once, with its
    /// panic guard).
    pub(crate) fn handle(
        &self,
        delivery: Delivery,
    ) -> impl std::future::Future<Output = Result<Settlement, Infallible>> + Send + 'static {
        let inner = self.inner.clone();
        async move { Ok(inner.handle(delivery).await) }
    }
}

impl Inner {
    async fn handle(&self, mut delivery: Delivery) -> Settlement {
        let reading = &self.reading;
        let read = match read(&delivery, reading.serializer, reading.max_body_size) {
            Ok(read) => read,
            Err(error) => return self.decider.unreadable(&delivery, error),
        };
        let received = ReceivedMessage {
            envelope: read.envelope,
            input_address: self.decider.input_address.clone(),
            redelivered: delivery.redelivered,
            transport_headers: std::mem::take(&mut delivery.headers),
            content_type: read.content_type.to_owned(),
            priority: delivery.priority,
            reply_to: delivery.reply_to.take(),
            sequence_number: delivery.sequence_number,
        };
        if let (Some(limit), Some(count)) = (reading.delivery_limit, delivery.delivery_count) {
            if let Some(settlement) = self.decider.over_limit(&received, count, limit) {
                return settlement;
            }
        }
        // A raw message carries its scheduling token as a transport header only.
        let cancelled = self.decider.factory.cancelled_schedules();
        if cancelled.take_from(&received.envelope.headers)
            || cancelled.take_from(&received.transport_headers)
        {
            tracing::debug!(target: "ferrybus", message_id = ?received.envelope.message_id, "scheduled message cancelled: acknowledged unconsumed");
            return Settlement::Ack;
        }
        let received = Arc::new(received);
        let matching: Vec<&Registered> = self
            .consumers
            .iter()
            .filter(|c| matches(&received, c))
            .collect();
        if matching.is_empty() {
            return self.decider.unhandled(&received);
        }
        let outcomes = join_all(matching.iter().map(|c| self.run(c, &received))).await;
        let answered = matching.iter().map(|c| &*c.info).zip(outcomes);
        self.decider.settle(&received, answered)
    }

    async fn run(
        &self,
        consumer: &Registered,
        received: &Arc<ReceivedMessage>,
    ) -> Result<ConsumeOutcome, ConsumeError> {
        let request = ConsumeRequest::new(
            received.clone(),
            consumer.info.clone(),
            self.sink.clone(),
            self.decider.factory.clone(),
            self.decider.cancellation.clone(),
        );
        consumer.service.clone().oneshot(request).await
    }
}

/// Whether `consumer` handles `received`: one of its message types is the consumer's, or the
/// message is raw JSON without types (it goes to every consumer of the endpoint).
fn matches(received: &ReceivedMessage, consumer: &Registered) -> bool {
    let no_types = received.envelope.message_type.is_empty();
    (no_types && received.content_type == RAW_JSON_CONTENT_TYPE)
        || received
            .envelope
            .has_message_type(consumer.info.message_type().urn())
}
