//! A small time-to-live cache of answers that are expensive to ask for (a list of objects
//! from the API server), with one load per key at a time: requests that arrive together
//! for the same key wait for the one load instead of each asking. A failed load is not
//! kept; the next request asks again.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

struct Slot<V> {
    born: Instant,
    value: Arc<OnceCell<V>>,
}

/// Values by key, each kept `ttl` from when its slot was made, at most `capacity` slots.
pub struct TtlCache<K, V> {
    ttl: Duration,
    capacity: usize,
    slots: Mutex<HashMap<K, Slot<V>>>,
}

impl<K, V> std::fmt::Debug for TtlCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TtlCache").field("ttl", &self.ttl).field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache; a `ttl` of zero keeps nothing (every request loads).
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self { ttl, capacity: capacity.max(1), slots: Mutex::default() }
    }

    /// The value of `key`: a fresh one kept, else what `load` gives (kept when `Ok`).
    pub async fn get_or_load<E, F, Fut>(&self, key: &K, load: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        if self.ttl.is_zero() {
            return load().await;
        }
        let cell = self.slot(key);
        cell.get_or_try_init(load).await.cloned()
    }

    /// The slot of `key`, made anew when missing or past its time; expired slots are
    /// dropped first, then the oldest while the cache is full.
    fn slot(&self, key: &K) -> Arc<OnceCell<V>> {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = slots.get(key)
            && now.duration_since(s.born) < self.ttl
        {
            return s.value.clone();
        }
        slots.retain(|_, s| now.duration_since(s.born) < self.ttl);
        while slots.len() >= self.capacity {
            let Some(oldest) = slots.iter().min_by_key(|(_, s)| s.born).map(|(k, _)| k.clone()) else { break };
            slots.remove(&oldest);
        }
        let value = Arc::new(OnceCell::new());
        slots.insert(key.clone(), Slot { born: now, value: value.clone() });
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn keeps_answers_for_their_time_and_never_a_failure() {
        let loads = AtomicUsize::new(0);
        let cache: TtlCache<&str, usize> = TtlCache::new(Duration::from_millis(200), 8);
        let load = || async { Ok::<_, String>(loads.fetch_add(1, Ordering::SeqCst) + 1) };
        assert_eq!(cache.get_or_load(&"a", load).await, Ok(1));
        assert_eq!(cache.get_or_load(&"a", load).await, Ok(1), "kept");
        assert_eq!(cache.get_or_load(&"b", load).await, Ok(2), "another key loads");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(cache.get_or_load(&"a", load).await, Ok(3), "expired: loaded again");
        let failed: Result<usize, String> = cache.get_or_load(&"c", || async { Err("down".to_owned()) }).await;
        assert_eq!(failed, Err("down".to_owned()));
        assert_eq!(cache.get_or_load(&"c", load).await, Ok(4), "a failure is not kept");
    }

    #[tokio::test]
    async fn requests_together_share_one_load() {
        let loads = Arc::new(AtomicUsize::new(0));
        let cache: Arc<TtlCache<u8, usize>> = Arc::new(TtlCache::new(Duration::from_secs(5), 8));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (cache, loads) = (cache.clone(), loads.clone());
                tokio::spawn(async move {
                    cache
                        .get_or_load(&1, || async {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok::<_, ()>(loads.fetch_add(1, Ordering::SeqCst))
                        })
                        .await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(0));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn full_caches_drop_the_oldest_and_zero_keeps_nothing() {
        let cache: TtlCache<u8, u8> = TtlCache::new(Duration::from_secs(60), 2);
        for k in 0..3 {
            assert_eq!(cache.get_or_load(&k, || async { Ok::<_, ()>(k) }).await, Ok(k));
        }
        assert_eq!(cache.slots.lock().unwrap().len(), 2);
        assert!(!cache.slots.lock().unwrap().contains_key(&0), "the oldest went");
        let none: TtlCache<u8, u8> = TtlCache::new(Duration::ZERO, 2);
        assert_eq!(none.get_or_load(&1, || async { Ok::<_, ()>(1) }).await, Ok(1));
        assert_eq!(none.get_or_load(&1, || async { Ok::<_, ()>(2) }).await, Ok(2));
    }
}
