//! Sending outbox rows through a sink, in sequence order.

use ferrybus_core::PublishError;

use ferrybus_core::error::PublishErrorKind;

use ferrybus_core::outgoing::SharedSink;
use futures::stream::{FuturesOrdered, StreamExt};
use futures::FutureExt;

use crate::sql::StoredRow;
use crate::telemetry::{count_outbox_delivery, SendSource};

/// What sending a run of rows achieved.
#[derive(Debug, Default)]
pub(crate) struct SendOutcome {
    /// The highest sequence number processed without a failure before it (sent, or skipped for
    /// having no destination).
    pub(crate) processed_upto: Option<i64>,
    /// How many messages were sent.
    pub(crate) sent: usize,
    /// The first failure; rows from it on were not (reliably) sent.
    pub(crate) error: Option<PublishError>,
}

/// Sends `rows` (sorted by sequence number) through `sink`. In order, awaiting each
/// confirmation; or, `pipelined`, starting every send in order and awaiting them together (only
/// for transports that keep publish order, as one RabbitMQ channel does).
///
/// Pipelined, each send is started (polled for the first time) before the next one is created,
/// so the sink sees them in sequence order; results that are already in are looked at between
/// starts, so a send that fails at once (a closed channel) stops the rest from being started.
/// Sends started before a failure was seen are awaited, and count as not sent.
pub(crate) async fn send_in_order(
    sink: &SharedSink,
    rows: Vec<StoredRow>,
    pipelined: bool,
    source: SendSource,
) -> SendOutcome {
    let mut outcome = SendOutcome::default();
    if pipelined {
        let mut in_flight = FuturesOrdered::new();
        let mut failed = false;
        for row in rows {
            let (seq, has_message) = (row.seq, row.message.is_some());
            in_flight
                .push_back(async move { (seq, has_message, send_row(sink, row, source).await) });
            // Starts the send just pushed, and takes the results that are in, in order.
            while let Some(Some((seq, has_message, result))) = in_flight.next().now_or_never() {
                if !record(&mut outcome, seq, has_message, result) {
                    failed = true;
                    break;
                }
            }
            if failed {
                break;
            }
        }
        while let Some((seq, has_message, result)) = in_flight.next().await {
            if !failed && !record(&mut outcome, seq, has_message, result) {
                failed = true;
            }
        }
    } else {
        for row in rows {
            let (seq, has_message) = (row.seq, row.message.is_some());
            let result = send_row(sink, row, source).await;
            if !record(&mut outcome, seq, has_message, result) {
                break;
            }
        }
    }
    outcome
}

/// Sends one row (a row whose body could not be read fails) and counts it, as MassTransit's
/// `StartOutboxDeliveryInstrument` does; a row without a destination is skipped.
async fn send_row(
    sink: &SharedSink,
    row: StoredRow,
    source: SendSource,
) -> Result<(), PublishError> {
    let destination = row
        .message
        .as_ref()
        .map_or("", |m| m.destination_address.as_str());
    if let Some(reason) = row.unreadable {
        let result = Err(PublishError::new(PublishErrorKind::Serialize, reason));
        count_outbox_delivery(destination, &result, source);
        return result;
    }
    let Some(message) = row.message else {
        tracing::warn!(
            target: "ferrybus::outbox",
            sequence_number = row.seq,
            "outbox message has no destination address; skipping it"
        );
        return Ok(());
    };
    let destination = message.destination_address.clone();
    let result = sink.deliver(message).await;
    count_outbox_delivery(&destination, &result, source);
    result
}

/// Records one result; false once a send failed (stop there).
fn record(
    outcome: &mut SendOutcome,
    seq: i64,
    has_message: bool,
    result: Result<(), PublishError>,
) -> bool {
    match result {
        Ok(()) => {
            outcome.processed_upto = Some(seq);
            if has_message {
                outcome.sent += 1;
            }
            true
        }
        Err(error) => {
            outcome.error = Some(error);
            false
        }
    }
}
