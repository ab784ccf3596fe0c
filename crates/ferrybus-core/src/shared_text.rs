//! [`TextCache`]: values computed once per distinct text (an address, a message type), shared.
//!
//! A service sends to a handful of destinations and message types, so what is derived from them
//! (a parsed address, a metric label) is worth computing once; a service whose texts are
//! unbounded (one reply queue per requester) must not grow a cache forever, so a full cache
//! starts afresh: such a service only computes again.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard};

/// How many values a [`TextCache`] keeps before it starts afresh.
const CAPACITY: usize = 1024;

/// Values by the text they were computed from, for `static`s: what is derived from a service's
/// few destinations and message types (a parsed address, a metric label) is computed once; a
/// full cache (1,024 texts) starts afresh, so unbounded texts (one reply queue per requester)
/// never grow it forever.
///
/// ```
/// use ferrybus_core::integration::TextCache;
/// static LABELS: TextCache<std::sync::Arc<str>> = TextCache::new();
/// let label = LABELS.get("Shop.Billing:InvoiceCreated", |t| t.replace(':', "_").into());
/// assert_eq!(&*label, "Shop.Billing_InvoiceCreated");
/// ```
pub struct TextCache<V>(LazyLock<Mutex<HashMap<Box<str>, V>>>);

impl<V: Clone> Default for TextCache<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> std::fmt::Debug for TextCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextCache").finish_non_exhaustive()
    }
}

impl<V: Clone> TextCache<V> {
    /// An empty cache.
    pub const fn new() -> Self {
        Self(LazyLock::new(Default::default))
    }

    fn map(&self) -> MutexGuard<'_, HashMap<Box<str>, V>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `text`: the cached one, else `make(text)`, cached when it succeeds.
    pub fn get_or_try<E>(
        &self,
        text: &str,
        make: impl FnOnce(&str) -> Result<V, E>,
    ) -> Result<V, E> {
        if let Some(value) = self.map().get(text) {
            return Ok(value.clone());
        }
        let value = make(text)?;
        let mut map = self.map();
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(text.into(), value.clone());
        Ok(value)
    }

    /// The value of `text`: the cached one, else `make(text)`, cached.
    pub fn get(&self, text: &str, make: impl FnOnce(&str) -> V) -> V {
        self.get_or_try(text, |text| Ok::<_, std::convert::Infallible>(make(text)))
            .unwrap_or_else(|never| match never {})
    }

    /// How many values are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_made_once_and_failures_are_not_kept() {
        let cache: TextCache<std::sync::Arc<str>> = TextCache::new();
        let first = cache.get("a.b", |t| t.replace('.', "_").into());
        let again = cache.get("a.b", |_| unreachable!("made twice"));
        assert!(std::sync::Arc::ptr_eq(&first, &again));
        assert_eq!(&*first, "a_b");
        let failed: Result<_, &str> = cache.get_or_try("bad", |_| Err("no"));
        assert_eq!(failed, Err("no"));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_full_cache_starts_afresh() {
        let cache: TextCache<usize> = TextCache::new();
        for n in 0..CAPACITY + 10 {
            assert_eq!(
                cache.get(&format!("reply-{n}"), |t| t.len()),
                format!("reply-{n}").len()
            );
        }
        assert!(
            (1..=CAPACITY).contains(&cache.len()),
            "{} kept",
            cache.len()
        );
    }
}
