//! The default of every [`PostgresStorage`](crate::PostgresStorage) setting and of the
//! [`status`](crate::status) thresholds, each written once: the storage, `status`, the
//! `ferrybus` tool and the docs take them from here.
//!
//! ```
//! use std::time::Duration;
//! use ferrybus_sea_orm::defaults;
//! // The figures docs/inbox-outbox.md and docs/operations.md quote:
//! assert_eq!(defaults::DUPLICATE_WINDOW, Duration::from_secs(30 * 60));
//! assert_eq!(defaults::SWEEP_AFTER, Duration::from_secs(1));
//! assert_eq!(defaults::STRANDED_AFTER, Duration::from_secs(5 * 60));
//! assert_eq!(defaults::POLL_INTERVAL, Duration::from_secs(1));
//! assert_eq!(
//!     (defaults::DELIVERY_WORKERS, defaults::OUTBOXES_PER_CLAIM, defaults::MESSAGES_PER_OUTBOX),
//!     (4, 64, 100)
//! );
//! assert_eq!(
//!     (defaults::DELIVERY_BACKOFF_INITIAL, defaults::DELIVERY_BACKOFF_MAX),
//!     (Duration::from_secs(1), Duration::from_secs(60))
//! );
//! assert_eq!(defaults::SWEEP_INTERVAL, Duration::from_millis(250));
//! assert_eq!(
//!     (defaults::SEND_ATTEMPTS, defaults::SET_ASIDE_RETRY),
//!     (5, Duration::from_secs(600))
//! );
//! assert_eq!(
//!     (defaults::CLEANUP_BATCH_SIZE, defaults::CLEANUP_INTERVAL),
//!     (100, Duration::from_secs(10))
//! );
//! ```
//!
//! Two ages of a consumed, undelivered inbox row are easy to confuse:
//!
//! * [`SWEEP_AFTER`] (1 s) is how long the **sweeper** leaves such a row to whoever sends its
//!   messages normally (the after-commit sender, a redelivered copy) before it sends them itself,
//!   if no one holds the row;
//! * [`STRANDED_AFTER`] (5 min) is the age past which **`outbox status`** calls such a row
//!   stranded: far past [`SWEEP_AFTER`], so the sweeper did not deliver it — no instance runs the
//!   outbox delivery, or its sends keep failing. A threshold to alert on, not a setting of the
//!   storage.

use std::time::Duration;

/// How long delivered inbox rows are kept, so that later copies are recognised as duplicates
/// (MassTransit's `DuplicateDetectionWindow`): 30 min.
/// [`PostgresStorage::duplicate_window`](crate::PostgresStorage::duplicate_window), and the
/// cleanup window [`status`](crate::status) counts with.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(30 * 60);

/// How long the sweeper leaves a consumed, undelivered inbox row that no delivery holds to its
/// own delivery before it sends the row's messages itself: 1 s.
/// [`PostgresStorage::sweep_after`](crate::PostgresStorage::sweep_after).
pub const SWEEP_AFTER: Duration = Duration::from_secs(1);

/// How often the sweeper looks for such rows: 250 ms.
/// [`PostgresStorage::sweep_interval`](crate::PostgresStorage::sweep_interval).
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// The age past which [`status`](crate::status) reports a consumed, undelivered inbox row as
/// stranded: 5 min, far past [`SWEEP_AFTER`], so the sweeper has not delivered it (see the
/// [module docs](self)).
/// [`status::Windows::stranded_after`](crate::status::Windows::stranded_after),
/// `ferrybus outbox status --stranded-after`.
pub const STRANDED_AFTER: Duration = Duration::from_secs(5 * 60);

/// How often the outbox delivery looks for rows when no notification arrives: 1 s.
/// [`PostgresStorage::poll_interval`](crate::PostgresStorage::poll_interval).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The delivery workers of one instance, and the delivery passes one outbox table runs at once
/// across instances: 4.
/// [`PostgresStorage::delivery_workers`](crate::PostgresStorage::delivery_workers).
pub const DELIVERY_WORKERS: usize = 4;

/// The outboxes one delivery pass claims: 64.
/// [`PostgresStorage::outboxes_per_claim`](crate::PostgresStorage::outboxes_per_claim).
pub const OUTBOXES_PER_CLAIM: u64 = 64;

/// The messages of one outbox one delivery pass sends: 100.
/// [`PostgresStorage::messages_per_outbox`](crate::PostgresStorage::messages_per_outbox).
pub const MESSAGES_PER_OUTBOX: u64 = 100;

/// The first back-off of an outbox whose send failed: 1 s, doubling up to
/// [`DELIVERY_BACKOFF_MAX`].
/// [`PostgresStorage::delivery_backoff`](crate::PostgresStorage::delivery_backoff).
pub const DELIVERY_BACKOFF_INITIAL: Duration = Duration::from_secs(1);

/// The longest back-off of an outbox whose sends keep failing: 60 s.
pub const DELIVERY_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// How many times one entry's send is tried, with the delivery back-off between tries, before
/// it is given up on: a delivery that sends its own messages after commit then acknowledges and
/// leaves them to the sweeper; the sweeper and the bus-outbox relay set the entry aside (an error
/// log, `ferrybus.outbox.set_aside`, `ferrybus outbox status`) and try it again only every
/// [`SET_ASIDE_RETRY`]: 5.
/// [`PostgresStorage::send_attempts`](crate::PostgresStorage::send_attempts).
pub const SEND_ATTEMPTS: u32 = 5;

/// How long an entry the sweeper or the relay set aside waits before it is tried once more (a
/// fixed topology then gets it out without a restart): 10 min.
pub const SET_ASIDE_RETRY: Duration = Duration::from_secs(10 * 60);

/// The inbox rows the cleanup deletes per statement: 100.
/// [`PostgresStorage::cleanup_batch_size`](crate::PostgresStorage::cleanup_batch_size).
pub const CLEANUP_BATCH_SIZE: u64 = 100;

/// The pause between cleanup runs: 10 s.
/// [`PostgresStorage::cleanup_interval`](crate::PostgresStorage::cleanup_interval).
pub const CLEANUP_INTERVAL: Duration = Duration::from_secs(10);
