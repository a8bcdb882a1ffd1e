//! The response cache: opt-in per route, exact match on (workspace, dialect, canonical request
//! body), a TTL, and bounds on entries, on bytes held and on one answer's size, with
//! least-recently-used eviction.
//!
//! It is the only place the gateway holds content, so it lives in memory (or, for a route with
//! `shared = true`, in Redis: [`crate::shared_cache`]), never in the store, never in logs, and
//! its keys are SHA-256 hashes. Only completed answers are stored.
//! Written by hand: a map plus a recency index is all an LRU needs here, and it keeps the
//! dependency list short.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

pub type CacheKey = [u8; 32];

/// A stored answer: the upstream's status, content type and body bytes, exactly as relayed
/// (without the gateway's timing comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedAnswer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Bytes,
    pub stream: bool,
}

struct Entry {
    answer: CachedAnswer,
    stored: Instant,
    tick: u64,
}

/// What a cache holds at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub entries: usize,
    /// Body bytes of all entries together.
    pub bytes: usize,
    /// Body bytes of one entry: bigger answers are not cached.
    pub entry_bytes: usize,
}

pub struct ResponseCache {
    ttl: Duration,
    bounds: Bounds,
    inner: Mutex<Lru>,
    /// The route's entries are in Redis instead (`cache.shared`).
    shared: Option<std::sync::Arc<crate::shared_cache::SharedCache>>,
}

#[derive(Default)]
struct Lru {
    map: HashMap<CacheKey, Entry>,
    /// tick → key, oldest first.
    order: BTreeMap<u64, CacheKey>,
    tick: u64,
    /// Body bytes of every entry.
    bytes: usize,
}

impl Lru {
    fn remove(&mut self, key: &CacheKey) {
        if let Some(e) = self.map.remove(key) {
            self.order.remove(&e.tick);
            self.bytes -= e.answer.body.len();
        }
    }
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache")
            .field("ttl", &self.ttl)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

/// The cache key of a request: its workspace, its target ([`laptime_core::Dialect::target`]:
/// the dialect's path, and for Gemini the model and stream-ness the body does not carry) and
/// body with object keys sorted and whitespace removed, so formatting differences hit the same
/// entry. `None` for a body that is not JSON.
pub fn key(workspace_id: &str, target: &str, body: &[u8]) -> Option<CacheKey> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let canonical = serde_json::to_vec(&value).ok()?;
    let mut h = Sha256::new();
    h.update(workspace_id.as_bytes());
    h.update([0]);
    h.update(target.as_bytes());
    h.update([0]);
    h.update(&canonical);
    Some(h.finalize().into())
}

impl ResponseCache {
    pub fn new(ttl: Duration, bounds: Bounds) -> Self {
        ResponseCache {
            ttl,
            bounds: Bounds {
                entries: bounds.entries.max(1),
                entry_bytes: bounds.entry_bytes.min(bounds.bytes),
                ..bounds
            },
            inner: Mutex::new(Lru::default()),
            shared: None,
        }
    }

    /// A cache whose entries are in Redis, under the same bounds.
    pub fn shared(
        ttl: Duration,
        bounds: Bounds,
        place: &crate::shared_cache::Place<'_>,
    ) -> Result<Self, String> {
        let mut cache = ResponseCache::new(ttl, bounds);
        cache.shared = Some(std::sync::Arc::new(crate::shared_cache::SharedCache::new(
            place,
            ttl,
            cache.bounds,
        )?));
        Ok(cache)
    }

    /// The entry for `key`: from memory, or from Redis within the lookup wait (then a miss).
    pub async fn lookup(&self, key: &CacheKey) -> Option<CachedAnswer> {
        match &self.shared {
            Some(shared) => shared.get(key).await,
            None => self.get(key),
        }
    }

    /// Keeps an answer: in memory, or handed to a task that writes it to Redis.
    pub fn keep(&self, key: CacheKey, answer: CachedAnswer) {
        match &self.shared {
            Some(shared) => shared.insert(key, &answer),
            None => self.insert(key, answer),
        }
    }

    /// Largest body stored; a capture gives up past it.
    pub fn max_entry_bytes(&self) -> usize {
        self.bounds.entry_bytes
    }

    pub fn get(&self, key: &CacheKey) -> Option<CachedAnswer> {
        let mut lru = self.inner.lock().ok()?;
        let now = Instant::now();
        let (fresh, old_tick) = {
            let e = lru.map.get(key)?;
            (now.saturating_duration_since(e.stored) < self.ttl, e.tick)
        };
        if !fresh {
            lru.remove(key);
            return None;
        }
        lru.order.remove(&old_tick);
        lru.tick += 1;
        let tick = lru.tick;
        lru.order.insert(tick, *key);
        let e = lru.map.get_mut(key)?;
        e.tick = tick;
        Some(e.answer.clone())
    }

    pub fn insert(&self, key: CacheKey, answer: CachedAnswer) {
        if answer.body.len() > self.bounds.entry_bytes {
            return;
        }
        let Ok(mut lru) = self.inner.lock() else {
            return;
        };
        lru.remove(&key);
        lru.tick += 1;
        let tick = lru.tick;
        lru.bytes += answer.body.len();
        lru.map.insert(
            key,
            Entry {
                answer,
                stored: Instant::now(),
                tick,
            },
        );
        lru.order.insert(tick, key);
        while lru.map.len() > self.bounds.entries || lru.bytes > self.bounds.bytes {
            let Some((_, oldest)) = lru.order.first_key_value().map(|(t, k)| (*t, *k)) else {
                break;
            };
            lru.remove(&oldest);
        }
    }

    /// Body bytes held.
    pub fn bytes(&self) -> usize {
        self.inner.lock().map(|l| l.bytes).unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map(|l| l.map.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laptime_core::Dialect;

    fn answer(body: &'static str) -> CachedAnswer {
        CachedAnswer {
            status: 200,
            content_type: Some("application/json".into()),
            body: Bytes::from_static(body.as_bytes()),
            stream: false,
        }
    }

    fn entries(n: usize) -> Bounds {
        Bounds {
            entries: n,
            bytes: 1 << 20,
            entry_bytes: 1 << 10,
        }
    }

    fn sized(n: usize) -> CachedAnswer {
        CachedAnswer {
            body: Bytes::from(vec![b'x'; n]),
            ..answer("")
        }
    }

    #[test]
    fn bytes_held_stay_within_the_budget_and_big_answers_are_not_kept() {
        let c = ResponseCache::new(
            Duration::from_secs(60),
            Bounds {
                entries: 1000,
                bytes: 10_000,
                entry_bytes: 4_000,
            },
        );
        c.insert([9; 32], sized(4_001));
        assert!(c.is_empty(), "an answer over the entry cap is not cached");
        for i in 0..100u8 {
            c.insert([i; 32], sized(3_000));
            assert!(c.bytes() <= 10_000, "{} bytes after {i}", c.bytes());
        }
        assert_eq!((c.len(), c.bytes()), (3, 9_000));
        assert!(c.get(&[99; 32]).is_some() && c.get(&[96; 32]).is_none());
        // Replacing an entry counts its bytes once.
        c.insert([99; 32], sized(1_000));
        assert_eq!((c.len(), c.bytes()), (3, 7_000));
    }

    #[test]
    fn keys_ignore_formatting_and_separate_workspaces_dialects_and_targets() {
        let a = key(
            "ws",
            Dialect::Chat.path(),
            br#"{"model":"m","temperature":0}"#,
        )
        .unwrap();
        let b = key(
            "ws",
            Dialect::Chat.path(),
            br#"{ "temperature" : 0, "model":"m" }"#,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_ne!(
            a,
            key(
                "other",
                Dialect::Chat.path(),
                br#"{"model":"m","temperature":0}"#
            )
            .unwrap()
        );
        assert_ne!(
            a,
            key(
                "ws",
                Dialect::Responses.path(),
                br#"{"model":"m","temperature":0}"#
            )
            .unwrap()
        );
        assert!(key("ws", Dialect::Chat.path(), b"not json").is_none());
        // Gemini's model and stream-ness are only in the target.
        let body = br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#;
        let gemini = |model: &str, stream: bool| {
            key("ws", &Dialect::Gemini.target(model, stream), body).unwrap()
        };
        assert_ne!(gemini("a", false), gemini("b", false));
        assert_ne!(gemini("a", false), gemini("a", true));
    }

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let c = ResponseCache::new(Duration::from_secs(60), entries(2));
        c.insert([1; 32], answer("one"));
        c.insert([2; 32], answer("two"));
        assert!(c.get(&[1; 32]).is_some());
        c.insert([3; 32], answer("three"));
        assert_eq!(c.len(), 2);
        assert!(c.get(&[2; 32]).is_none(), "2 was the least recently used");
        assert!(c.get(&[1; 32]).is_some() && c.get(&[3; 32]).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_their_ttl() {
        let c = ResponseCache::new(Duration::from_secs(5), entries(10));
        c.insert([1; 32], answer("one"));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(c.get(&[1; 32]).is_some());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(c.get(&[1; 32]).is_none());
        assert!(c.is_empty());
    }
}
