//! The endpoint: one tower [`Service`](tower::Service) per receive endpoint, taking a
//! [`Delivery`] and answering the [`Settlement`] the transport carries out, like axum's `Router`
//! answers every request with a response (`Error = Infallible`).
//!
#![doc = include_str!("../../../../docs/pipeline.md")]
//!
//! A transport builds each endpoint once ([`EndpointConfig::build`]), calls it per delivery and
//! settles in one place: acknowledge, redeliver, or move to `<queue>_error` and then publish the
//! fault — once — or move to `<queue>_skipped`. What each delivery becomes is decided in one place
//! too (`decide.rs`): every fault, whatever its cause, is built the same way.
//!
//! An endpoint layer is any tower layer over [`BoxEndpointService`]:
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use ferrybus_core::endpoint::BoxEndpointService;
//! use ferrybus_core::{Delivery, EndpointConfig, Settlement, SettlementKind};
//! use tower::ServiceExt;
//!
//! /// Counts faults.
//! #[derive(Clone, Default)]
//! struct Faults(Arc<AtomicUsize>);
//!
//! impl tower::Layer<BoxEndpointService> for Faults {
//!     type Service = BoxEndpointService;
//!     fn layer(&self, inner: BoxEndpointService) -> BoxEndpointService {
//!         let faults = self.0.clone();
//!         BoxEndpointService::new(tower::service_fn(move |delivery: Delivery| {
//!             let (inner, faults) = (inner.clone(), faults.clone());
//!             async move {
//!                 let settlement = inner.oneshot(delivery).await?;
//!                 if settlement.kind() == SettlementKind::Fault {
//!                     faults.fetch_add(1, Ordering::Relaxed);
//!                 }
//!                 Ok::<Settlement, Infallible>(settlement)
//!             }
//!         }))
//!     }
//! }
//!
//! let endpoint = EndpointConfig::new("billing-invoice").layer(Faults::default());
//! # let _ = endpoint;
//! ```

mod boundary;
mod boxed;
mod config;
mod decide;
mod delivery;
mod error;
mod names;
mod read;
mod registration;
mod service;
mod settlement;

pub use boundary::Endpoint;
pub use boundary::EndpointFuture;
pub use boxed::{BoxEndpointLayer, BoxEndpointService};
pub use config::{
    EndpointConfig, EndpointContext, DEFAULT_MAX_BODY_SIZE, DEFAULT_TRANSIENT_STRIKES,
};
pub use delivery::Delivery;
pub use error::DeliveryLimitReached;
pub use ferrybus_dotnet::EndpointNameFormatter;
pub use names::{error_queue_name, skipped_queue_name, ERROR_QUEUE_SUFFIX, SKIPPED_QUEUE_SUFFIX};
pub use registration::{ConsumerBuild, ConsumerRegistration};
pub use settlement::{Faulted, Redelivery, Settlement, SettlementKind};
