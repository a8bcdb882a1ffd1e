//! The response cache: opt-in per route, exact match on (workspace, dialect, canonical request
//! body), a TTL and a bound on entries with least-recently-used eviction.
//!
//! It is the only place the gateway holds content, so it lives in memory only (never in the
//! store, never in logs) and its keys are SHA-256 hashes. Only completed answers are stored.
//! Written by hand: a map plus a recency index is all an LRU needs here, and it keeps the
//! dependency list short.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use laptime_core::Dialect;
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

pub struct ResponseCache {
    ttl: Duration,
    max_entries: usize,
    /// Largest body stored; bigger answers are not cached.
    pub max_body_bytes: usize,
    inner: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    map: HashMap<CacheKey, Entry>,
    /// tick → key, oldest first.
    order: BTreeMap<u64, CacheKey>,
    tick: u64,
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache")
            .field("ttl", &self.ttl)
            .field("max_entries", &self.max_entries)
            .finish_non_exhaustive()
    }
}

/// The cache key of a request: its workspace, dialect and body with object keys sorted and
/// whitespace removed, so formatting differences hit the same entry. `None` for a body that is
/// not JSON.
pub fn key(workspace_id: &str, dialect: Dialect, body: &[u8]) -> Option<CacheKey> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let canonical = serde_json::to_vec(&value).ok()?;
    let mut h = Sha256::new();
    h.update(workspace_id.as_bytes());
    h.update([0]);
    h.update(dialect.path().as_bytes());
    h.update([0]);
    h.update(&canonical);
    Some(h.finalize().into())
}

impl ResponseCache {
    pub fn new(ttl: Duration, max_entries: usize) -> Self {
        ResponseCache {
            ttl,
            max_entries: max_entries.max(1),
            max_body_bytes: 8 * 1024 * 1024,
            inner: Mutex::new(Lru::default()),
        }
    }

    pub fn get(&self, key: &CacheKey) -> Option<CachedAnswer> {
        let mut lru = self.inner.lock().ok()?;
        let now = Instant::now();
        let (fresh, old_tick) = {
            let e = lru.map.get(key)?;
            (now.saturating_duration_since(e.stored) < self.ttl, e.tick)
        };
        lru.order.remove(&old_tick);
        if !fresh {
            lru.map.remove(key);
            return None;
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.order.insert(tick, *key);
        let e = lru.map.get_mut(key)?;
        e.tick = tick;
        Some(e.answer.clone())
    }

    pub fn insert(&self, key: CacheKey, answer: CachedAnswer) {
        if answer.body.len() > self.max_body_bytes {
            return;
        }
        let Ok(mut lru) = self.inner.lock() else {
            return;
        };
        lru.tick += 1;
        let tick = lru.tick;
        if let Some(old) = lru.map.insert(
            key,
            Entry {
                answer,
                stored: Instant::now(),
                tick,
            },
        ) {
            lru.order.remove(&old.tick);
        }
        lru.order.insert(tick, key);
        while lru.map.len() > self.max_entries {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            lru.map.remove(&oldest);
        }
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

    fn answer(body: &'static str) -> CachedAnswer {
        CachedAnswer {
            status: 200,
            content_type: Some("application/json".into()),
            body: Bytes::from_static(body.as_bytes()),
            stream: false,
        }
    }

    #[test]
    fn keys_ignore_formatting_and_separate_workspaces_and_dialects() {
        let a = key("ws", Dialect::Chat, br#"{"model":"m","temperature":0}"#).unwrap();
        let b = key(
            "ws",
            Dialect::Chat,
            br#"{ "temperature" : 0, "model":"m" }"#,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_ne!(
            a,
            key("other", Dialect::Chat, br#"{"model":"m","temperature":0}"#).unwrap()
        );
        assert_ne!(
            a,
            key(
                "ws",
                Dialect::Responses,
                br#"{"model":"m","temperature":0}"#
            )
            .unwrap()
        );
        assert!(key("ws", Dialect::Chat, b"not json").is_none());
    }

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let c = ResponseCache::new(Duration::from_secs(60), 2);
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
        let c = ResponseCache::new(Duration::from_secs(5), 10);
        c.insert([1; 32], answer("one"));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(c.get(&[1; 32]).is_some());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(c.get(&[1; 32]).is_none());
        assert!(c.is_empty());
    }
}
