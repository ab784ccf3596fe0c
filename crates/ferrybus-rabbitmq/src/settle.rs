//! Settling a delivery: the one place where acks, nacks, moves and fault publishes happen.

use bytes::Bytes;
use ferrybus_core::integration::Faulted;
use ferrybus_core::{Headers, Settlement};
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use lapin::BasicProperties;

use crate::connection::{Live, PublishTarget};
use crate::convert::merge_headers;
use crate::delay::{schedule, DelayMode};
use crate::error::Result;
use crate::event::{Event, Events};
use crate::publish::Publisher;
use crate::topology::{BoundQueue, EndpointTopology};

/// What a settlement needs besides the delivery: the connection the delivery came on, the
/// endpoint's topology, the delay mode, the publisher (for faults) and the event stream.
pub(crate) struct SettleContext<'a> {
    pub(crate) live: &'a Live,
    pub(crate) topology: &'a EndpointTopology,
    pub(crate) delay_mode: DelayMode,
    pub(crate) publisher: &'a Publisher,
    pub(crate) events: &'a Events,
}

/// What to do with the delivery once the move (if any) is done.
enum Outcome {
    Ack(Event),
    Requeue,
}

/// Carries out a [`Settlement`] for `delivery` (whose body is `body`), as MassTransit's RabbitMQ
/// transport does:
///
/// | settlement | first | then |
/// |-------------|-------|------|
/// | `Ack`, `Duplicate` | — | `basic.ack` |
/// | `Fault` | publish the original body and properties to exchange `<queue>_error` (declared lazily, flags and arguments of the source queue), the fault headers added, `expiration` cleared, original routing key, mandatory, confirmed; **then** publish the `Fault<T>` / `ReceiveFault`, confirmed | `basic.ack` |
/// | `Skip` | the same move to `<queue>_skipped`, `expiration` kept | `basic.ack` |
/// | `Redeliver` | publish the rewritten body with the original properties and `MT-Redelivery-Count` through the delay exchange or TTL queue ([`DelayMode`]), confirmed | `basic.ack` |
/// | `Abandon` | — | `basic.nack(requeue = true)` |
///
/// If the move fails (broker error, no confirm) the delivery is nacked with requeue, so nothing
/// is lost, and no fault is published: the fault goes out once, after the one move that
/// succeeded (MassTransit publishes it before the move, so a failed move there publishes it
/// twice). A fault publish that fails after the move is logged; the delivery is acknowledged
/// anyway, since it is safely in the error queue with its fault headers.
///
/// Acks and nacks go only to the channel the delivery came on: when that channel or its
/// connection is gone, lapin's acker is poisoned, nothing is sent, and the broker redelivers the
/// message on its own. So a delivery whose channel is gone is not moved either, and its fault
/// is not published: the broker took it back (its `consumer_timeout` passed while the consumer
/// ran, or the connection was lost) and hands it to a consumer again, whose settlement counts;
/// a move now would leave a copy in `_error` (and a fault) for a message that is redelivered
/// anyway, once per timeout. The `user_id` property is not copied on moves (the broker would
/// reject it unless it names this connection's user).
///
/// Returns whether the delivery was settled for good (acknowledged), or the error of a move
/// that failed (the delivery was requeued): the endpoint pauses on it rather than taking the
/// message again at once.
pub(crate) async fn settle(
    ctx: &SettleContext<'_>,
    delivery: &Delivery,
    body: &Bytes,
    settlement: Settlement,
) -> Result<bool> {
    let queue = ctx.topology.queue().name.clone();
    let message_id = delivery
        .properties
        .message_id()
        .as_ref()
        .map(ToString::to_string);
    let moves = matches!(
        settlement,
        Settlement::Fault(_) | Settlement::Skip { .. } | Settlement::Redeliver(_)
    );
    if moves && delivery.acker.poisoned() {
        tracing::warn!(target: "ferrybus::rabbitmq", %queue, ?message_id, settlement = settlement.kind().as_str(), "the delivery's channel is gone (the broker's consumer_timeout passed, or the connection was lost): not moving it; the broker redelivers it");
        ctx.events.emit(Event::Returned { queue, message_id });
        return Ok(false);
    }
    let consumed = |duplicate| Event::Consumed {
        queue: queue.clone(),
        message_id: message_id.clone(),
        duplicate,
    };
    // The moves are boxed: their futures are kilobytes, and every delivery's task would carry
    // them (and copy them) although most deliveries are simply acknowledged.
    let outcome = match settlement {
        Settlement::Ack => Ok(Outcome::Ack(consumed(false))),
        Settlement::Duplicate => Ok(Outcome::Ack(consumed(true))),
        Settlement::Fault(faulted) => {
            Box::pin(fault(ctx, delivery, body, *faulted))
                .await
                .map(|()| {
                    Outcome::Ack(Event::Faulted {
                        queue: queue.clone(),
                        message_id: message_id.clone(),
                    })
                })
        }
        Settlement::Skip { headers } => {
            let skipped = ctx.topology.skipped();
            Box::pin(move_to(ctx, delivery, body, skipped, &headers, true))
                .await
                .map(|()| {
                    Outcome::Ack(Event::Skipped {
                        queue: queue.clone(),
                        message_id: message_id.clone(),
                    })
                })
        }
        Settlement::Redeliver(redelivery) => {
            let properties = copy_properties(&delivery.properties, true, &redelivery.headers);
            Box::pin(schedule(
                ctx.live,
                ctx.delay_mode,
                ctx.topology.queue(),
                redelivery.delay,
                &redelivery.body,
                properties,
            ))
            .await
            .map(|()| {
                Outcome::Ack(Event::Redelivered {
                    queue: queue.clone(),
                    message_id: message_id.clone(),
                    count: i64::from(redelivery.count),
                })
            })
        }
        // `Abandon`, and whatever a later version adds: give it back to the broker.
        _ => Ok(Outcome::Requeue),
    };
    let (event, failed) = match outcome {
        Ok(Outcome::Ack(event)) => (ack(delivery).await.then_some(event), None),
        Ok(Outcome::Requeue) => {
            requeue(delivery).await;
            (None, None)
        }
        Err(error) => {
            tracing::error!(target: "ferrybus::rabbitmq", %queue, ?message_id, %error, "could not move the message; requeueing it");
            requeue(delivery).await;
            (None, Some(error))
        }
    };
    let settled = event.is_some();
    ctx.events
        .emit(event.unwrap_or(Event::Returned { queue, message_id }));
    failed.map_or(Ok(settled), Err)
}

/// Moves the delivery to `<queue>_error`, then publishes its fault (once the move succeeded).
async fn fault(
    ctx: &SettleContext<'_>,
    delivery: &Delivery,
    body: &Bytes,
    faulted: Faulted,
) -> Result<()> {
    let error_queue = ctx.topology.error();
    move_to(ctx, delivery, body, error_queue, &faulted.headers, false).await?;
    if let Some(fault) = faulted.fault {
        if let Err(error) = ctx.publisher.send(&fault).await {
            tracing::warn!(target: "ferrybus::rabbitmq", queue = %ctx.topology.queue().name, %error, "the message is in the error queue, but its fault could not be published");
        }
    }
    Ok(())
}

async fn move_to(
    ctx: &SettleContext<'_>,
    delivery: &Delivery,
    body: &[u8],
    target: &BoundQueue,
    headers: &Headers,
    keep_expiration: bool,
) -> Result<()> {
    let live = ctx.live;
    live.topology.bound_queue(live.declarer(), target).await?;
    let target = PublishTarget {
        exchange: target.exchange().name(),
        routing_key: delivery.routing_key.as_str(),
        mandatory: true,
    };
    let properties = || copy_properties(&delivery.properties, keep_expiration, headers);
    let result = live.publish(target, body, properties).await;
    if result.is_err() {
        // The queue may have been deleted behind our back: declare it again next time.
        ctx.live.topology.forget_all();
    }
    result
}

/// A copy of a delivery's properties for re-publishing, with `extra` headers merged in.
fn copy_properties(p: &BasicProperties, keep_expiration: bool, extra: &Headers) -> BasicProperties {
    let mut headers = p.headers().clone().unwrap_or_default();
    merge_headers(&mut headers, extra);
    crate::republish_properties(p, headers, keep_expiration)
}

/// Acks on the delivery's own channel; `false` if that channel is gone.
async fn ack(delivery: &Delivery) -> bool {
    match delivery.acker.ack(BasicAckOptions::default()).await {
        Ok(sent) => sent,
        Err(error) => {
            tracing::warn!(target: "ferrybus::rabbitmq", %error, "ack failed; the broker will redeliver");
            false
        }
    }
}

async fn requeue(delivery: &Delivery) {
    let options = BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    };
    if let Err(error) = delivery.acker.nack(options).await {
        tracing::warn!(target: "ferrybus::rabbitmq", %error, "nack failed; the broker will redeliver");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::AMQPValue;

    #[test]
    fn copies_properties_and_clears_expiration() {
        let original = BasicProperties::default()
            .with_message_id("m".into())
            .with_expiration("5000".into())
            .with_user_id("someone".into())
            .with_delivery_mode(2);
        let mut extra = Headers::new();
        extra.insert("MT-Reason", "fault");
        let copy = copy_properties(&original, false, &extra);
        assert_eq!(copy.message_id().as_ref().map(|s| s.as_str()), Some("m"));
        assert_eq!(copy.expiration(), &None);
        assert_eq!(copy.user_id(), &None);
        assert_eq!(*copy.delivery_mode(), Some(2));
        assert_eq!(
            copy.headers().as_ref().unwrap().inner()["MT-Reason"],
            AMQPValue::LongString("fault".into())
        );
        assert!(copy_properties(&original, true, &extra)
            .expiration()
            .is_some());
    }

    #[test]
    fn copies_leave_the_broker_delivery_count_behind() {
        let mut headers = lapin::types::FieldTable::default();
        headers.insert("x-delivery-count".into(), AMQPValue::LongLongInt(4));
        headers.insert("Tenant".into(), AMQPValue::LongString("acme".into()));
        let original = BasicProperties::default().with_headers(headers);
        for keep_expiration in [false, true] {
            let copy = copy_properties(&original, keep_expiration, &Headers::new());
            let copied = copy.headers().as_ref().unwrap().inner();
            assert!(!copied.contains_key("x-delivery-count"));
            assert!(copied.contains_key("Tenant"));
        }
    }
}
