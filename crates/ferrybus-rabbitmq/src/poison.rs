//! [`DeliveryLimit`]: a quorum queue's delivery limit, kept by ferrybus before the broker keeps
//! it, so that a message delivered too often ends in `<queue>_error` with its fault instead of
//! being dropped.
//!
//! A quorum queue counts how often each message was delivered and not settled (returned by a
//! `basic.nack` with requeue, or left unacknowledged on a channel that closed: a consumer that
//! crashed) and tells it in the `x-delivery-count` header. Past its `x-delivery-limit`
//! (RabbitMQ 4.x: 20 unless configured) the broker drops the message, or dead-letters it without
//! any fault. A poison message that kills the process every time it is consumed would vanish.
//! So the endpoint takes a delivery whose count has reached the limit out of the pipeline: it is
//! moved to `<queue>_error` with MassTransit's fault headers (`MT-Fault-Message`: delivered N
//! times without being settled) and a `ReceiveFault` is published, without running the
//! consumer once more.

use std::sync::Arc;

use ferrybus_core::{
    fault_headers, ConsumeError, ExceptionInfo, Faulted, HostInfo, MessageFactory, MessageOrigin,
    QueueOptions, QueueType, ReceiveFault, SendOptions, Settlement,
};
use lapin::message::Delivery;
use lapin::types::AMQPValue;

/// The delivery limit of an endpoint's quorum queue.
#[derive(Clone)]
pub(crate) struct DeliveryLimit {
    pub(crate) limit: u32,
    pub(crate) input_address: String,
    pub(crate) factory: Arc<MessageFactory>,
    pub(crate) publish_faults: bool,
}

/// Why a delivery went to the error queue without running.
#[derive(Debug, thiserror::Error)]
#[error("delivered {count} times without being settled (the queue's delivery limit is {limit}): moved to the error queue without running the consumer again")]
pub(crate) struct DeliveryLimitReached {
    count: u32,
    limit: u32,
}

impl DeliveryLimit {
    /// The settlement of a delivery seen `limit` times already, else `None`.
    pub(crate) fn exceeded(&self, delivery: &Delivery) -> Option<Settlement> {
        let count = delivery_count(delivery)?;
        if count < self.limit {
            return None;
        }
        let error = ConsumeError::permanent(DeliveryLimitReached {
            count,
            limit: self.limit,
        });
        tracing::error!(target: "ferrybus::rabbitmq", message_id = ?delivery.properties.message_id(), count, limit = self.limit, "delivery limit reached; moving the message to the error queue");
        let exception = ExceptionInfo::from_error(&error, "ferrybus");
        let fault = self
            .publish_faults
            .then(|| self.fault(delivery, &exception))
            .flatten();
        Some(Settlement::Fault(Box::new(Faulted {
            headers: fault_headers(&error, &self.input_address, None),
            fault,
            exception,
            receive_fault: true,
        })))
    }

    fn fault(
        &self,
        delivery: &Delivery,
        exception: &ExceptionInfo,
    ) -> Option<ferrybus_core::OutgoingMessage> {
        let envelope: serde_json::Value =
            serde_json::from_slice(&delivery.data).unwrap_or_default();
        let fault = ReceiveFault {
            fault_id: Some(uuid::Uuid::now_v7()),
            timestamp: Some(chrono::Utc::now()),
            faulted_message_id: envelope["messageId"]
                .as_str()
                .and_then(|id| uuid::Uuid::parse_str(id).ok()),
            exceptions: vec![exception.clone()],
            host: Some(HostInfo::current().clone()),
            fault_message_types: envelope["messageType"]
                .as_array()
                .map(|types| {
                    types
                        .iter()
                        .filter_map(|t| t.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            content_type: delivery
                .properties
                .content_type()
                .as_ref()
                .map(|c| c.to_string()),
        };
        let origin = MessageOrigin {
            source_address: Some(self.input_address.clone()),
            ..MessageOrigin::default()
        };
        self.factory
            .publish(&fault, &origin, SendOptions::new())
            .map_err(|error| tracing::warn!(target: "ferrybus::rabbitmq", %error, "could not build the fault"))
            .ok()
    }
}

/// The `x-delivery-count` header a quorum queue sets on redeliveries.
pub(crate) fn delivery_count(delivery: &Delivery) -> Option<u32> {
    let headers = delivery.properties.headers().as_ref()?;
    let value = headers.inner().get("x-delivery-count")?;
    let count = match value {
        AMQPValue::LongLongInt(n) => *n,
        AMQPValue::LongInt(n) => i64::from(*n),
        AMQPValue::ShortInt(n) => i64::from(*n),
        AMQPValue::LongUInt(n) => i64::from(*n),
        AMQPValue::ShortUInt(n) => i64::from(*n),
        AMQPValue::ShortShortInt(n) => i64::from(*n),
        AMQPValue::ShortShortUInt(n) => i64::from(*n),
        _ => return None,
    };
    u32::try_from(count).ok()
}

/// RabbitMQ 4.x's delivery limit of quorum queues when none is configured.
pub(crate) const DEFAULT_QUORUM_DELIVERY_LIMIT: u32 = 20;

/// The delivery limit ferrybus keeps for a queue: the `x-delivery-limit` argument of a quorum
/// queue, else RabbitMQ 4.x's default of 20; none for classic queues (no `x-delivery-count`).
pub(crate) fn delivery_limit(options: &QueueOptions) -> Option<u32> {
    if options.kind() != QueueType::Quorum {
        return None;
    }
    let configured = options
        .arguments()
        .iter()
        .find(|(name, _)| name == "x-delivery-limit")
        .and_then(|(_, value)| value.as_u64())
        .and_then(|n| u32::try_from(n).ok());
    Some(configured.unwrap_or(DEFAULT_QUORUM_DELIVERY_LIMIT))
}
