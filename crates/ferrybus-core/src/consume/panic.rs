//! Panics as errors: a panicking consumer (or layer) fails its message like any error, on every
//! transport alike, and the process lives.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use crate::error::ConsumeError;

/// The text of a panic payload: the message of `panic!("…")`, else a fixed description.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("index {} out of range", 3)).unwrap_err();
/// assert_eq!(ferrybus_core::consume::panic_message(&*payload), "index 3 out of range");
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a consumer panicked (the payload is not a string)".to_owned())
}

/// Runs `future`; a panic in it becomes a [`ConsumeError`] of type `Panic` whose message is the
/// panic message. The one guard around each consumer ([`ConsumerService`](super::ConsumerService)
/// and the batch consumer service), inside retry, so that retry sees a panic as a failure.
///
/// ```
/// use ferrybus_core::consume::catch_panic;
/// # futures::executor::block_on(async {
/// let result: Result<(), _> = catch_panic(async { panic!("boom") }).await;
/// assert_eq!(result.unwrap_err().to_string(), "boom");
/// # });
/// ```
///
/// A combinator, not an `async fn`: an `async fn` would hold `future` twice (before and while it
/// runs), and a consumer's future is kilobytes.
pub fn catch_panic<T>(
    future: impl Future<Output = Result<T, ConsumeError>>,
) -> impl Future<Output = Result<T, ConsumeError>> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .map(|caught| match caught {
            Ok(result) => result,
            Err(payload) => Err(ConsumeError::panic(panic_message(&*payload))),
        })
}
