//! The sink the inbox swaps in: it keeps what the consumer publishes, sends and responds.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferrybus_core::error::PublishErrorKind;
use ferrybus_core::outgoing::MessageSink;
use ferrybus_core::outgoing::OutgoingMessage;
use ferrybus_core::PublishError;

use crate::telemetry::count_outbox_write;

/// Buffers outgoing messages until the consumer returns; closed afterwards, so a message sent
/// from a task that outlived the consumer fails instead of being lost.
#[derive(Clone, Default)]
pub(crate) struct CaptureSink(Arc<Mutex<Option<Vec<OutgoingMessage>>>>);

impl CaptureSink {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Mutex::new(Some(Vec::new()))))
    }

    /// Closes the sink and returns what it captured.
    pub(crate) fn take(&self) -> Vec<OutgoingMessage> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default()
    }
}

#[async_trait]
impl MessageSink for CaptureSink {
    async fn deliver(&self, message: OutgoingMessage) -> Result<(), PublishError> {
        match self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(buffer) => {
                count_outbox_write(&message);
                buffer.push(message);
                Ok(())
            }
            None => Err(PublishError::new(
                PublishErrorKind::Closed,
                "the consumer outbox is closed: the consumer already returned",
            )),
        }
    }
}
