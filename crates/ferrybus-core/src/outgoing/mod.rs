//! Outgoing messages: what a publish, send or respond produces ([`OutgoingMessage`]), built by a
//! [`MessageFactory`] with [`SendOptions`] and a [`MessageOrigin`].

mod factory;
mod message;
mod options;
mod publish;
mod raw;
mod schedule;

pub use factory::{set_trace_stamp, MessageFactory, TraceStamp, TransportProperties};
pub use message::OutgoingMessage;
pub use options::{MessageOrigin, SendOptions};
pub use publish::{MessageSink, Publish, SharedSink};
pub use raw::{RawSerializerOptions, Serializer};
pub use schedule::{CancelledSchedules, ScheduledMessage, DELAY_PROPERTY, SCHEDULING_TOKEN_ID};
