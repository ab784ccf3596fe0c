//! The endpoint: one tower [`Service`](tower::Service) per receive endpoint, taking a
//! [`Delivery`] and answering the [`Settlement`] the transport carries out, like axum's `Router`
//! answers every request with a response (`Error = Infallible`).
//!
//! ```text
//! Delivery ─▶ [endpoint layers: see the whole delivery and its Settlement]
//!               ─▶ read ─▶ route ─▶ per consumer: [retry] ▶ [inbox] ▶ [consumer layers] ▶ consumer
//!                                                      (panics caught, on every transport alike)
//!          ◀─ Settlement: Ack | Duplicate | Redeliver | Fault (+ the fault to publish) | Skip | Abandon
//! ```
//!
//! A transport builds each endpoint once ([`EndpointConfig::build`]), calls it per delivery and
//! settles in one place: acknowledge, redeliver, or move to `<queue>_error` and then publish the
//! fault — once — or move to `<queue>_skipped`.
//!
//! An endpoint layer is any tower layer over [`BoxEndpointService`]:
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use ferrybus_core::{BoxEndpointService, Delivery, EndpointConfig, Settlement, SettlementKind};
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

mod config;
mod delivery;
mod queue;
mod read;
mod run;
mod service;
mod settlement;

pub use config::{
    BoxEndpointLayer, BoxEndpointService, EndpointConfig, EndpointContext, DEFAULT_MAX_BODY_SIZE,
    DEFAULT_TRANSIENT_STRIKES,
};
pub use delivery::Delivery;
pub use queue::{QueueOptions, QueueType};
pub use run::Endpoint;
pub use settlement::{Faulted, Redelivery, Settlement, SettlementKind};
