//! Request/response (masstransit-wire §7): a [`RequestClient`] sends requests with `requestId`,
//! `responseAddress` = the bus address, a TTL and `MT-Request-AcceptType`; responses and
//! `Fault<TRequest>` come back on the bus's temporary queue.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::properties::DIRECT_REPLY_TO;
use ferrybus_core::integration::OutgoingMessage;
use ferrybus_core::outgoing::{MessageOrigin, Serializer};
use ferrybus_core::{ConsumeContext, Envelope, Message, Publish, SendOptions};
use futures::StreamExt;
use lapin::options::BasicConsumeOptions;
use lapin::types::FieldTable;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::bus::RabbitMqBus;
use crate::connection::{Connector, Live};
use crate::error::{ErrorKind, RabbitMqError, Result};
use crate::publish::Publisher;
use crate::queue::QueueOptions;
use crate::topology::{short, EndpointTopology};

type Pending = Arc<Mutex<HashMap<Uuid, oneshot::Sender<Envelope>>>>;

/// The bus's temporary endpoint: exchange `<bus-queue>` (non-durable, auto-delete) bound to the
/// exclusive queue `<bus-queue>` (`x-expires=60000`), as MassTransit declares it. Responses are
/// matched to waiting requests by `requestId`; unmatched ones are discarded.
pub(crate) struct ResponseEndpoint {
    pending: Pending,
    stop: CancellationToken,
    /// The channel consuming `amq.rabbitmq.reply-to` for direct reply-to clients, per connection
    /// generation (opened on first use).
    direct: tokio::sync::Mutex<Option<(u64, lapin::Channel)>>,
    /// The bus's serializer: a raw JSON bus reads `application/json` responses as raw JSON.
    serializer: Serializer,
}

impl ResponseEndpoint {
    pub(crate) async fn start(
        connector: Arc<Connector>,
        queue: String,
        serializer: Serializer,
    ) -> Result<Arc<Self>> {
        let this = Arc::new(Self {
            pending: Arc::default(),
            stop: CancellationToken::new(),
            direct: tokio::sync::Mutex::new(None),
            serializer,
        });
        let decl = bus_queue(&queue);
        let live = connector.live(connector.publish_timeout()).await?;
        let consumer = consume(&live, &decl).await?;
        tokio::spawn(receive(
            connector,
            decl,
            (this.pending.clone(), serializer),
            this.stop.clone(),
            live,
            consumer,
        ));
        Ok(this)
    }

    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Publishes a direct reply-to request on the channel that consumes the replies (RabbitMQ
    /// routes a reply only to the channel that published the request).
    async fn send_direct(&self, connector: &Connector, message: &OutgoingMessage) -> Result<()> {
        let live = connector.live(connector.publish_timeout()).await?;
        let channel = self.direct_channel(&live).await?;
        Publisher::send_on(&live, &channel, message).await
    }

    async fn direct_channel(&self, live: &Arc<Live>) -> Result<lapin::Channel> {
        let mut slot = self.direct.lock().await;
        if let Some((generation, channel)) = slot.as_ref() {
            if *generation == live.generation && channel.status().connected() {
                return Ok(channel.clone());
            }
        }
        let channel = live.create_confirm_channel().await?;
        let options = BasicConsumeOptions {
            no_ack: true,
            ..BasicConsumeOptions::default()
        };
        let consumer = channel
            .basic_consume(
                DIRECT_REPLY_TO.into(),
                "".into(),
                options,
                FieldTable::default(),
            )
            .await
            .map_err(|e| RabbitMqError::amqp("consuming amq.rabbitmq.reply-to", e))?;
        tokio::spawn(receive_direct(
            (self.pending.clone(), self.serializer),
            self.stop.clone(),
            live.clone(),
            consumer,
        ));
        *slot = Some((live.generation, channel.clone()));
        Ok(channel)
    }

    /// Waits for the response to `request_id` until the [`Waiting`] is dropped.
    fn register(&self, request_id: Uuid) -> Waiting<'_> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(request_id, tx);
        Waiting {
            responses: self,
            request_id,
            response: rx,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, oneshot::Sender<Envelope>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A request waiting for its response. Dropping it forgets the request, however the wait ended:
/// answered, timed out, failed to send, or abandoned by its caller (the future dropped).
struct Waiting<'a> {
    responses: &'a ResponseEndpoint,
    request_id: Uuid,
    response: oneshot::Receiver<Envelope>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.responses.lock().remove(&self.request_id);
    }
}

/// The bus endpoint: temporary (not durable, auto-delete) and expiring after a minute unused.
fn bus_queue(name: &str) -> EndpointTopology {
    let options = QueueOptions::default()
        .durable(false)
        .auto_delete(true)
        .expires(Duration::from_secs(60));
    EndpointTopology::new(name, &options, Vec::<String>::new())
}

async fn consume(live: &Live, decl: &EndpointTopology) -> Result<lapin::Consumer> {
    live.topology.endpoint(live.declarer(), decl).await?;
    let channel = live.create_channel().await?;
    let options = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    channel
        .basic_consume(
            short(decl.queue().name())?,
            "".into(),
            options,
            FieldTable::default(),
        )
        .await
        .map_err(|e| RabbitMqError::amqp("consuming the bus queue", e))
}

async fn receive(
    connector: Arc<Connector>,
    decl: EndpointTopology,
    pending: (Pending, Serializer),
    stop: CancellationToken,
    live: Arc<Live>,
    mut consumer: lapin::Consumer,
) {
    // Keeps the connection generation the consumer belongs to alive.
    let mut _live = live;
    let mut backoff = connector.backoff();
    loop {
        loop {
            let next = tokio::select! {
                next = consumer.next() => next,
                () = stop.cancelled() => return,
            };
            let Some(Ok(delivery)) = next else { break };
            dispatch(&pending, &delivery);
        }
        loop {
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                () = stop.cancelled() => return,
            }
            let Some(next) = connector.wait_live().await else {
                return;
            };
            if let Ok(c) = consume(&next, &decl).await {
                _live = next;
                consumer = c;
                backoff.reset();
                break;
            }
        }
    }
}

/// Dispatches direct reply-to responses until the channel closes (the next request opens a new
/// one) or the bus stops.
async fn receive_direct(
    pending: (Pending, Serializer),
    stop: CancellationToken,
    live: Arc<Live>,
    mut consumer: lapin::Consumer,
) {
    let _live = live;
    loop {
        let next = tokio::select! {
            next = consumer.next() => next,
            () = stop.cancelled() => return,
        };
        let Some(Ok(delivery)) = next else { return };
        dispatch(&pending, &delivery);
    }
}

/// Hands a response to its request, read by content type as the bus's endpoints read.
fn dispatch((pending, serializer): &(Pending, Serializer), delivery: &lapin::message::Delivery) {
    let body = bytes::Bytes::copy_from_slice(&delivery.data);
    let Ok(envelope) = crate::convert::inbound(delivery, body).read_envelope(*serializer) else {
        tracing::warn!(target: "ferrybus::rabbitmq", "discarding an unreadable response");
        return;
    };
    let waiter = envelope.request_id.and_then(|id| {
        pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
    });
    match waiter {
        Some(tx) => {
            let _ = tx.send(envelope);
        }
        None => {
            tracing::debug!(target: "ferrybus::rabbitmq", request_id = ?envelope.request_id, "discarding an unmatched response")
        }
    }
}

/// A response: the message and its envelope.
#[derive(Debug)]
pub struct Response<T> {
    /// The response message.
    pub message: T,
    /// Its envelope (ids, headers, host).
    pub envelope: Envelope,
}

/// The answer to a request that accepts two response types
/// ([`RequestClient::get_either_response`]; MassTransit's `Response<T1, T2>`): the responder's
/// message type decides which.
#[derive(Debug)]
pub enum EitherResponse<A, B> {
    /// The first response type answered (`T1`, e.g. the accepted case).
    First(Response<A>),
    /// The second response type answered (`T2`, e.g. the rejected case).
    Second(Response<B>),
}

/// Sends requests of type `Req` and waits for responses, like MassTransit's `IRequestClient<T>`.
///
/// The timeout bounds the whole request: reaching the broker, sending (the publisher confirm
/// included) and waiting for the answer; past it the request fails with
/// [`ErrorKind::Timeout`]. It is also the request's time to live.
///
/// ```no_run
/// # use ferrybus_core::{Message, MessageType};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct CheckOrder { id: u32 }
/// # impl Message for CheckOrder { fn message_type() -> MessageType { MessageType::parse("Shop:CheckOrder").unwrap() } }
/// # #[derive(serde::Serialize, serde::Deserialize)] struct OrderStatus { status: String }
/// # impl Message for OrderStatus { fn message_type() -> MessageType { MessageType::parse("Shop:OrderStatus").unwrap() } }
/// # async fn run(bus: ferrybus_rabbitmq::RabbitMqBus) -> Result<(), ferrybus_rabbitmq::RabbitMqError> {
/// let client = bus.request_client::<CheckOrder>("queue:order-status");
/// let response = client.get_response::<OrderStatus>(&CheckOrder { id: 7 }).await?;
/// println!("{}", response.message.status);
/// # Ok(()) }
/// ```
pub struct RequestClient<Req> {
    bus: RabbitMqBus,
    address: Option<String>,
    timeout: Duration,
    direct_reply_to: bool,
    /// What a request made inside a consumer inherits from the consumed message.
    origin: Option<MessageOrigin>,
    _request: PhantomData<fn(Req)>,
}

impl<Req> std::fmt::Debug for RequestClient<Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestClient")
            .field("address", &self.address)
            .field("timeout", &self.timeout)
            .field("direct_reply_to", &self.direct_reply_to)
            .finish_non_exhaustive()
    }
}

impl RabbitMqBus {
    /// A client sending `Req` requests to `address`, with a 30 s timeout.
    pub fn request_client<Req: Message>(&self, address: &str) -> RequestClient<Req> {
        RequestClient {
            bus: self.clone(),
            address: Some(address.to_owned()),
            timeout: Duration::from_secs(30),
            direct_reply_to: false,
            origin: None,
            _request: PhantomData,
        }
    }

    /// A client publishing `Req` requests (to whichever endpoint consumes them).
    pub fn publish_request_client<Req: Message>(&self) -> RequestClient<Req> {
        RequestClient {
            address: None,
            ..self.request_client::<Req>("")
        }
    }

    /// How many requests of this bus's request clients are waiting for a response now (for
    /// health checks and tests: it grows with requests in flight, and goes back to 0 once each is
    /// answered, timed out or cancelled).
    pub fn pending_requests(&self) -> usize {
        self.inner
            .responses
            .get()
            .map_or(0, |responses| responses.lock().len())
    }

    async fn responses(&self) -> Result<Arc<ResponseEndpoint>> {
        let inner = &self.inner;
        inner
            .responses
            .get_or_try_init(|| {
                ResponseEndpoint::start(
                    inner.connector.clone(),
                    inner.bus_queue.clone(),
                    inner.factory.serializer(),
                )
            })
            .await
            .cloned()
    }
}

impl<Req: Message> RequestClient<Req> {
    /// Sets the request timeout (also the request's time to live).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Receives responses through RabbitMQ's direct reply-to (`amq.rabbitmq.reply-to`) instead
    /// of the bus's temporary queue, as MassTransit's `CreateReplyToClientFactory` /
    /// `SetRabbitMqReplyToRequestClientFactory` do (`RabbitMqRequestClientExtensions.cs`): the
    /// response address is `…/amq.rabbitmq.reply-to`, the request carries the AMQP `reply_to`,
    /// and requests go out on the channel that consumes the replies. A responder (ferrybus or
    /// .NET) routes its response by that `reply_to`. Replies are not durable: a response sent
    /// while the connection is being re-opened is lost, and the request times out.
    ///
    /// ```no_run
    /// # use ferrybus_core::{Message, MessageType};
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct CheckOrder { id: u32 }
    /// # impl Message for CheckOrder { fn message_type() -> MessageType { MessageType::parse("Shop:CheckOrder").unwrap() } }
    /// # async fn run(bus: ferrybus_rabbitmq::RabbitMqBus) {
    /// let client = bus.request_client::<CheckOrder>("queue:order-status").direct_reply_to();
    /// # let _ = client; }
    /// ```
    pub fn direct_reply_to(mut self) -> Self {
        self.direct_reply_to = true;
        self
    }

    /// Sends `request` and waits for a `Res`. A `Fault<Req>` answer is an [`ErrorKind::Fault`]
    /// error; no answer within the timeout is an [`ErrorKind::Timeout`] error.
    pub async fn get_response<Res: Message>(&self, request: &Req) -> Result<Response<Res>> {
        let envelope = self.request(request, &[Res::message_type().urn()]).await?;
        if envelope.has_message_type(Res::message_type().urn()) {
            return read(envelope);
        }
        Err(not_a_response::<Req>(&envelope))
    }

    /// Sends `request` and waits for an `A` or a `B`, as MassTransit's
    /// `GetResponse<T1, T2>` (`src/MassTransit/Clients/RequestClient.cs`): both are accepted
    /// (`MT-Request-AcceptType` lists them in that order) and the responder's message type decides
    /// which comes back. A `Fault<Req>` answer is an [`ErrorKind::Fault`] error.
    ///
    /// ```no_run
    /// use ferrybus_rabbitmq::EitherResponse;
    /// # use ferrybus_core::{Message, MessageType};
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct CheckOrder { id: u32 }
    /// # impl Message for CheckOrder { fn message_type() -> MessageType { MessageType::parse("Shop:CheckOrder").unwrap() } }
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct OrderFound { status: String }
    /// # impl Message for OrderFound { fn message_type() -> MessageType { MessageType::parse("Shop:OrderFound").unwrap() } }
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct OrderNotFound { id: u32 }
    /// # impl Message for OrderNotFound { fn message_type() -> MessageType { MessageType::parse("Shop:OrderNotFound").unwrap() } }
    /// # async fn run(bus: ferrybus_rabbitmq::RabbitMqBus) -> Result<(), ferrybus_rabbitmq::RabbitMqError> {
    /// let client = bus.request_client::<CheckOrder>("queue:order-status");
    /// match client.get_either_response::<OrderFound, OrderNotFound>(&CheckOrder { id: 7 }).await? {
    ///     EitherResponse::First(found) => println!("{}", found.message.status),
    ///     EitherResponse::Second(missing) => println!("no order {}", missing.message.id),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get_either_response<A: Message, B: Message>(
        &self,
        request: &Req,
    ) -> Result<EitherResponse<A, B>> {
        let (a, b) = (A::message_type(), B::message_type());
        let envelope = self.request(request, &[a.urn(), b.urn()]).await?;
        if envelope.has_message_type(a.urn()) {
            return read(envelope).map(EitherResponse::First);
        }
        if envelope.has_message_type(b.urn()) {
            return read(envelope).map(EitherResponse::Second);
        }
        Err(not_a_response::<Req>(&envelope))
    }

    /// Sends `request` accepting `accept`, and waits for its answer, all within the timeout.
    async fn request(&self, request: &Req, accept: &[&str]) -> Result<Envelope> {
        let request_id = Uuid::now_v7();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let timed_out = |what: &str| {
            let timeout = self.timeout;
            RabbitMqError::new(
                ErrorKind::Timeout,
                format!("request {request_id}: {what} within {timeout:?}"),
            )
        };
        let responses = tokio::time::timeout_at(deadline, self.bus.responses())
            .await
            .map_err(|_| timed_out("the response endpoint not ready"))??;
        let response_address = if self.direct_reply_to {
            self.bus.host().entity_address(DIRECT_REPLY_TO)
        } else {
            self.bus.address().to_owned()
        };
        let options = SendOptions::new()
            .request_id(request_id)
            .response_address(response_address)
            .time_to_live(self.timeout)
            .header("MT-Request-AcceptType", serde_json::json!(accept));
        let mut waiting = responses.register(request_id);
        tokio::time::timeout_at(deadline, self.send(&responses, request, options))
            .await
            .map_err(|_| timed_out("not sent"))??;
        match tokio::time::timeout_at(deadline, &mut waiting.response).await {
            Ok(Ok(envelope)) => Ok(envelope),
            Ok(Err(_)) => Err(RabbitMqError::new(ErrorKind::Stopped, "the bus stopped")),
            Err(_) => Err(timed_out("no response")),
        }
    }

    async fn send(
        &self,
        responses: &ResponseEndpoint,
        request: &Req,
        options: SendOptions,
    ) -> Result<()> {
        let factory = self.bus.message_factory();
        let origin = self
            .origin
            .as_ref()
            .unwrap_or_else(|| self.bus.message_origin());
        let mut message = match &self.address {
            Some(address) => factory.send(address, request, origin, options),
            None => factory.publish(request, origin, options),
        }?;
        if !self.direct_reply_to {
            return Ok(self.bus.deliver(message).await?);
        }
        message
            .properties
            .insert("RMQ-ReplyTo".into(), DIRECT_REPLY_TO.into());
        responses
            .send_direct(&self.bus.inner.connector, &message)
            .await
    }
}

/// Makes request clients inside a consumer (MassTransit's request client created with the
/// consume context, `src/MassTransit/Clients/RequestSendEndpoint.cs` and
/// `ConsumeSendPipeAdapter.cs`): the request continues the consumed message's conversation,
/// its initiator is the consumed message's correlation id (else its request id), its source
/// address is the consumer's endpoint, and its non-`MT-` headers are carried over. As in
/// MassTransit, the request goes straight to the broker, not through the consumer outbox
/// (a request held until the consumer returns could never be answered in time).
///
/// Works on the endpoints of a [`RabbitMqBus`]; elsewhere it fails with [`ErrorKind::Config`].
///
/// ```no_run
/// use ferrybus_core::{ConsumeContext, ConsumeError};
/// use ferrybus_rabbitmq::ConsumeContextRequestExt;
/// # use ferrybus_core::{Message, MessageType};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct OrderPlaced { id: u32 }
/// # impl Message for OrderPlaced { fn message_type() -> MessageType { MessageType::parse("Shop:OrderPlaced").unwrap() } }
/// # #[derive(serde::Serialize, serde::Deserialize)] struct CheckStock { id: u32 }
/// # impl Message for CheckStock { fn message_type() -> MessageType { MessageType::parse("Shop:CheckStock").unwrap() } }
/// # #[derive(serde::Serialize, serde::Deserialize)] struct InStock { count: u32 }
/// # impl Message for InStock { fn message_type() -> MessageType { MessageType::parse("Shop:InStock").unwrap() } }
/// async fn consume(ctx: ConsumeContext<OrderPlaced>) -> Result<(), ConsumeError> {
///     let client = ctx.request_client::<CheckStock>("queue:stock")?;
///     let stock = client
///         .get_response::<InStock>(&CheckStock { id: ctx.message().id })
///         .await?;
///     println!("{} in stock", stock.message.count);
///     Ok(())
/// }
/// ```
pub trait ConsumeContextRequestExt {
    /// A client sending `Req` requests to `address` on this consumer's bus, carrying this
    /// consume context, with a 30 s timeout.
    fn request_client<Req: Message>(&self, address: &str) -> Result<RequestClient<Req>>;
}

impl<M: Message> ConsumeContextRequestExt for ConsumeContext<M> {
    fn request_client<Req: Message>(&self, address: &str) -> Result<RequestClient<Req>> {
        let bus = self
            .extensions()
            .get::<BusHandle>()
            .and_then(BusHandle::bus)
            .ok_or_else(|| {
                RabbitMqError::new(
                    ErrorKind::Config,
                    "request_client: this consumer does not run on a RabbitMQ bus (or it stopped)",
                )
            })?;
        let origin = MessageOrigin {
            reply_to: None,
            ..Publish::message_origin(self).clone()
        };
        Ok(RequestClient {
            origin: Some(origin),
            ..bus.request_client::<Req>(address)
        })
    }
}

/// The bus, as its endpoints hand it to their consumers (weakly: a running delivery does not
/// keep a dropped bus alive).
#[derive(Clone)]
pub(crate) struct BusHandle(pub(crate) std::sync::Weak<crate::bus::Inner>);

impl BusHandle {
    fn bus(&self) -> Option<RabbitMqBus> {
        self.0.upgrade().map(|inner| RabbitMqBus { inner })
    }
}

fn read<T: Message>(envelope: Envelope) -> Result<Response<T>> {
    let message = envelope.message.bind().map_err(|e| {
        RabbitMqError::with_source(ErrorKind::Serialization, "reading the response", e)
    })?;
    Ok(Response { message, envelope })
}

/// The error for an answer that is none of the accepted types: a `Fault<Req>`, or unexpected.
fn not_a_response<Req: Message>(envelope: &Envelope) -> RabbitMqError {
    if envelope.has_message_type(Req::message_type().fault().urn()) {
        let text = envelope.message["exceptions"][0]["message"]
            .as_str()
            .unwrap_or("the request faulted");
        return RabbitMqError::new(ErrorKind::Fault, text.to_owned());
    }
    RabbitMqError::new(
        ErrorKind::Serialization,
        format!("unexpected response type {:?}", envelope.message_type),
    )
}
