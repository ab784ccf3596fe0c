//! The receive loop of one endpoint: declare, consume, hand each delivery to the endpoint
//! service, settle; start over on a new connection after a loss.

use bytes::Bytes;
use ferrybus_core::integration::Endpoint;
use ferrybus_core::pause::{Dependency, EndpointControl, EndpointState, PauseCause, Resume};
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::Channel;
use std::sync::Arc;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::connection::{Connector, Live};
use crate::convert::inbound;
use crate::delay::DelayMode;
use crate::error::{RabbitMqError, Result};
use crate::event::{Event, Events};
use crate::publish::Publisher;
use crate::settle::{settle, SettleContext};
use crate::shutdown::{Shutdown, CANCEL_GRACE, CLOSE_TIMEOUT};
use crate::topology::{short, EndpointTopology};

/// Everything one endpoint needs to run.
pub(crate) struct EndpointRunner {
    pub(crate) topology: EndpointTopology,
    pub(crate) prefetch: u16,
    pub(crate) concurrency: usize,
    pub(crate) service: Endpoint,
    pub(crate) pipeline_cancel: CancellationToken,
    pub(crate) connector: Arc<Connector>,
    pub(crate) publisher: Publisher,
    pub(crate) events: Events,
    pub(crate) delay_mode: DelayMode,
    pub(crate) stop: CancellationToken,
    pub(crate) shutdown: Shutdown,
}

/// Why one consume session ended.
enum SessionEnd {
    /// The endpoint was asked to stop.
    Stopped,
    /// The channel or connection went away.
    Lost,
    /// The endpoint was paused (see [`EndpointControl`]).
    Paused,
}

/// The state kept across consume sessions.
struct Session {
    limit: Arc<Semaphore>,
    in_flight: JoinSet<()>,
    channels: Vec<Channel>,
    ready: Option<oneshot::Sender<Result<()>>>,
}

impl SessionEnd {
    fn paused(self) -> Self {
        match self {
            SessionEnd::Stopped => SessionEnd::Paused,
            other => other,
        }
    }
}

impl EndpointRunner {
    /// Runs until stopped. `ready` gets the outcome of the first setup (and a failed first setup
    /// ends the endpoint); without it every failed setup is retried after a back-off.
    pub(crate) async fn run(self, ready: Option<oneshot::Sender<Result<()>>>) {
        let this = Arc::new(self);
        let mut session = Session {
            limit: Arc::new(Semaphore::new(this.concurrency)),
            in_flight: JoinSet::new(),
            channels: Vec::new(),
            ready,
        };
        let mut backoff = this.connector.backoff();
        loop {
            let live = tokio::select! {
                live = this.connector.wait_live() => live,
                () = this.stop.cancelled() => None,
            };
            let Some(live) = live else { break };
            if this.control().is_paused() {
                if this.pause(&mut session).await.is_break() {
                    break;
                }
                continue;
            }
            session.channels.retain(|c| c.status().connected());
            match this.consume(&live, &mut session).await {
                Ok(SessionEnd::Stopped) => break,
                Ok(SessionEnd::Lost) => backoff.reset(),
                Ok(SessionEnd::Paused) => {
                    if this.pause(&mut session).await.is_break() {
                        break;
                    }
                    backoff.reset();
                    continue;
                }
                Err(error) => {
                    tracing::error!(target: "ferrybus::rabbitmq", queue = %this.topology.queue().name, %error, "endpoint setup failed");
                    this.events.emit(Event::EndpointFailed {
                        queue: this.topology.queue().name.clone(),
                        reason: error.to_string(),
                    });
                    if let Some(ready) = session.ready.take() {
                        let _ = ready.send(Err(error));
                        break;
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                () = this.stop.cancelled() => break,
            }
        }
        this.drain(&mut session).await;
        this.events.emit(Event::EndpointStopped {
            queue: this.topology.queue().name.clone(),
        });
    }

    async fn setup(&self, live: &Live) -> Result<(Channel, lapin::Consumer)> {
        let channel = live.create_channel().await?;
        channel
            .basic_qos(self.prefetch, BasicQosOptions { global: false })
            .await
            .map_err(|e| RabbitMqError::amqp("setting the prefetch count", e))?;
        live.topology
            .endpoint(live.declarer(), &self.topology)
            .await?;
        let tag = format!("ferrybus-{}", uuid::Uuid::now_v7().simple());
        let consumer = channel
            .basic_consume(
                short(&self.topology.queue().name)?,
                tag.into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| {
                RabbitMqError::amqp(
                    format!("consuming queue {:?}", self.topology.queue().name),
                    e,
                )
            })?;
        Ok((channel, consumer))
    }

    async fn consume(
        self: &Arc<Self>,
        live: &Arc<Live>,
        session: &mut Session,
    ) -> Result<SessionEnd> {
        let (channel, mut consumer) = self.setup(live).await?;
        session.channels.push(channel.clone());
        tracing::info!(target: "ferrybus::rabbitmq", queue = %self.topology.queue().name, generation = live.generation, "consuming");
        self.events.emit(Event::EndpointReady {
            queue: self.topology.queue().name.clone(),
            generation: live.generation,
        });
        if let Some(ready) = session.ready.take() {
            let _ = ready.send(Ok(()));
        }
        let control = self.control();
        loop {
            let permit = tokio::select! {
                biased;
                () = self.stop.cancelled() => return Ok(self.cancel(&channel, &consumer).await),
                () = control.paused() => return Ok(self.cancel(&channel, &consumer).await.paused()),
                permit = session.limit.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            };
            let next = tokio::select! {
                biased;
                () = self.stop.cancelled() => return Ok(self.cancel(&channel, &consumer).await),
                () = control.paused() => return Ok(self.cancel(&channel, &consumer).await.paused()),
                next = consumer.next() => next,
            };
            match next {
                Some(Ok(delivery)) => {
                    let runner = self.clone();
                    let live = live.clone();
                    // Boxed: the delivery's future (pipeline, inbox, consumer) is kilobytes,
                    // and tokio moves a task's future by value when it spawns, completes and
                    // reads it; a box moves as one pointer.
                    let handle =
                        Box::pin(async move { runner.handle(live, delivery, permit).await });
                    session.in_flight.spawn(handle);
                }
                Some(Err(error)) => {
                    tracing::warn!(target: "ferrybus::rabbitmq", queue = %self.topology.queue().name, %error, "consumer failed");
                    return Ok(SessionEnd::Lost);
                }
                None => return Ok(SessionEnd::Lost),
            }
            while session.in_flight.try_join_next().is_some() {}
        }
    }

    fn control(&self) -> &EndpointControl {
        self.service.control()
    }

    /// While paused: lets the deliveries in flight finish, up to the shutdown timeout (what still
    /// runs then is abandoned: its task is dropped), closes the channels (the broker requeues what
    /// was prefetched and not started, and what was abandoned), waits until the endpoint resumes
    /// (the dependency answers, the kill switch's timeout …). `Break` when the bus stops
    /// meanwhile.
    async fn pause(&self, session: &mut Session) -> std::ops::ControlFlow<()> {
        let control = self.control();
        let (cause, reason) = match control.state() {
            EndpointState::Paused(paused) => (paused.cause, paused.reason),
            _ => return std::ops::ControlFlow::Continue(()),
        };
        tracing::warn!(target: "ferrybus::rabbitmq", queue = %self.topology.queue().name, cause = cause.as_str(), %reason, "endpoint paused: not taking deliveries");
        self.events.emit(Event::EndpointPaused {
            queue: self.topology.queue().name.clone(),
            cause: cause.as_str().to_owned(),
            reason,
        });
        let deadline = tokio::time::Instant::now() + self.shutdown.timeout();
        tokio::select! {
            finished = finish_until(&mut session.in_flight, deadline) => if !finished {
                self.abandon(session, "endpoint paused");
            },
            () = self.stop.cancelled() => return std::ops::ControlFlow::Break(()),
        }
        close_channels(session, "endpoint paused").await;
        let paused_for = tokio::select! {
            paused_for = control.until_resumed() => paused_for,
            () = self.stop.cancelled() => return std::ops::ControlFlow::Break(()),
        };
        tracing::info!(target: "ferrybus::rabbitmq", queue = %self.topology.queue().name, ?paused_for, "endpoint resumed");
        self.events.emit(Event::EndpointResumed {
            queue: self.topology.queue().name.clone(),
            paused_for,
        });
        std::ops::ControlFlow::Continue(())
    }

    /// Gives up on the deliveries still in flight: their tasks are dropped (a consumer stuck
    /// for good frees its concurrency slot), and their messages go back to the queue when the
    /// channels close.
    fn abandon(&self, session: &mut Session, why: &str) {
        let left = session.in_flight.len();
        tracing::warn!(target: "ferrybus::rabbitmq", queue = %self.topology.queue().name, left, timeout = ?self.shutdown.timeout(), "{why}: deliveries still running after the shutdown timeout are abandoned; the broker redelivers them");
        // Dropping the set aborts its tasks without waiting for them.
        drop(std::mem::take(&mut session.in_flight));
    }

    /// Stops the broker's deliveries to `consumer` (`basic.cancel`), waiting at most
    /// [`CLOSE_TIMEOUT`] for its answer.
    async fn cancel(&self, channel: &Channel, consumer: &lapin::Consumer) -> SessionEnd {
        let cancel = channel.basic_cancel(consumer.tag(), BasicCancelOptions::default());
        match tokio::time::timeout(CLOSE_TIMEOUT, cancel).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(target: "ferrybus::rabbitmq", %error, "basic.cancel failed");
            }
            Err(_) => {
                tracing::warn!(target: "ferrybus::rabbitmq", queue = %self.topology.queue().name, "the broker did not answer basic.cancel (is the connection blocked by an alarm?); going on");
            }
        }
        SessionEnd::Stopped
    }

    async fn handle(
        self: Arc<Self>,
        live: Arc<Live>,
        mut delivery: Delivery,
        permit: OwnedSemaphorePermit,
    ) {
        let body = Bytes::from(std::mem::take(&mut delivery.data));
        let Ok(settlement) = self
            .service
            .clone()
            .oneshot(inbound(&delivery, body.clone()))
            .await;
        let ctx = SettleContext {
            live: &live,
            topology: &self.topology,
            delay_mode: self.delay_mode,
            publisher: &self.publisher,
            events: &self.events,
        };
        match settle(&ctx, &delivery, &body, settlement).await {
            // A move that failed (the broker refused it, no confirm): the delivery went back to
            // the queue; pause instead of taking it again at once.
            Err(error) => {
                self.control().pause(
                    PauseCause::Transient(Dependency::Broker),
                    format!("moving a message failed: {error}"),
                    Resume::WhenAvailable(Dependency::Broker),
                );
            }
            Ok(true) => self.control().settled(),
            Ok(false) => {}
        }
        drop(permit);
    }

    /// Lets in-flight deliveries finish until the shutdown deadline; then cancels them, and
    /// after a short grace abandons the rest unacknowledged (the broker requeues them when the
    /// channel closes).
    async fn drain(&self, session: &mut Session) {
        let deadline = self.shutdown.deadline();
        if !finish_until(&mut session.in_flight, deadline).await {
            tracing::warn!(target: "ferrybus::rabbitmq", queue = %self.topology.queue().name, "shutdown deadline reached; cancelling in-flight messages");
            self.pipeline_cancel.cancel();
            if !finish_until(&mut session.in_flight, deadline + CANCEL_GRACE).await {
                self.abandon(session, "stopping");
            }
        }
        close_channels(session, "endpoint stopped").await;
    }
}

/// Waits for the deliveries in `in_flight` to finish, until `deadline`; whether they all did.
async fn finish_until(in_flight: &mut JoinSet<()>, deadline: tokio::time::Instant) -> bool {
    let all = async { while in_flight.join_next().await.is_some() {} };
    tokio::time::timeout_at(deadline, all).await.is_ok()
}

/// Closes the session's channels; the broker requeues what was delivered on them and not
/// settled. The closes wait for the broker's answers at most [`CLOSE_TIMEOUT`] (a connection
/// blocked by a memory or disk alarm answers nothing).
async fn close_channels(session: &mut Session, why: &'static str) {
    let until = tokio::time::Instant::now() + CLOSE_TIMEOUT;
    for channel in session.channels.drain(..) {
        if channel.status().connected() {
            let close = channel.close(200, why.into());
            let _ = tokio::time::timeout_at(until, close).await;
        }
    }
}
