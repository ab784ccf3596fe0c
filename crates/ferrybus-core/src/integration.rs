//! What transports, storages and add-ons build on, in one place: the types an application never
//! names but a crate that plugs into ferrybus does (as `axum-core` is for axum's integrators).
//!
//! | you write | you implement or use |
//! |---|---|
//! | a transport | [`EndpointContext`] → [`Endpoint`] per receive endpoint, settling each [`Settlement`](crate::Settlement) in one place; a [`MessageSink`]; [`MessageFactory`] for its host |
//! | a storage | [`Storage`] with its inbox layer over [`ConsumeRequest`]s, its [`Background`] services, [`add_on`] parts |
//! | an add-on | a [`ConsumerRegistration`] built from a [`ConsumerBuild`], or layers every endpoint gets ([`BusConfig::endpoint_layer`](crate::BusConfig::endpoint_layer)) |
//!
//! Every item here is also reachable at its defining module's path.

pub use crate::address::{EndpointAddress, HostAddress};
pub use crate::consume::{
    catch_panic, BoxConsumeLayer, BoxConsumeService, ConsumeOutcome, ConsumeRequest, ConsumerInfo,
    ConsumerService, ReceivedMessage, RetryLayer,
};
pub use crate::endpoint::{
    BoxEndpointLayer, BoxEndpointService, ConsumerBuild, ConsumerRegistration,
    DeliveryLimitReached, Endpoint, EndpointContext, Faulted, Redelivery,
};
pub use crate::error::BoxError;
pub use crate::fault::{fault_headers, skipped_headers, ExceptionInfo};
pub use crate::outgoing::{
    set_trace_stamp, MessageFactory, MessageOrigin, MessageSink, OutgoingMessage, SharedSink,
    TraceStamp,
};
pub use crate::pause::{EndpointControl, Guarded, TransientGuardLayer};
pub use crate::shared_text::TextCache;
pub use crate::storage::{add_on, Background, Storage};
