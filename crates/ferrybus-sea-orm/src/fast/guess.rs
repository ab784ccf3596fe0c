//! [`PublishGuess`]: whether the next delivery of an endpoint will publish, guessed from its last.

use std::sync::atomic::{AtomicBool, Ordering};

/// What the last delivery through one inbox layer did: published messages or not.
///
/// The inbox inserts a delivery's inbox row before its consumer runs, already as it should be
/// left: consumed and delivered for a consumer that publishes nothing, consumed and not
/// delivered (MassTransit's "messages waiting") for one that publishes. The row only becomes
/// visible at commit, so when the guess is right it is written once; a wrong guess costs one
/// more write of the row in the same transaction. Consumers mostly do the same thing every
/// time, so the last delivery is the guess.
#[derive(Debug, Default)]
pub(crate) struct PublishGuess(AtomicBool);

impl PublishGuess {
    /// Whether the next delivery is expected to publish.
    pub(crate) fn publishes(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Records what a delivery did.
    pub(crate) fn learn(&self, published: bool) {
        self.0.store(published, Ordering::Relaxed);
    }
}
