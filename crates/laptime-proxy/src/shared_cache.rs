//! A route's response cache in Redis (`cache = { shared = true }` with `[shared] redis_url`),
//! so that an answer one instance stored answers the same request on every instance. The same
//! rules as the memory cache ([`crate::cache`]): keys are the SHA-256 content hashes (workspace,
//! target, canonical body), entries live for the route's TTL (Redis' own `PX`), an answer over
//! `max_entry_bytes` is never written, and the route's `max_entries` and `max_bytes` bound what
//! it holds in Redis (a script keeps a sorted index and a byte count beside the entries and
//! removes the entries that expire first while over either; Redis' `maxmemory` is not relied
//! on). Content goes to Redis only, never to the store or a log.
//!
//! The request path never waits long on Redis: a lookup has [`LOOKUP_WAIT`] (`[shared]
//! cache_lookup_ms`), then it is a miss; a store is a task of its own, given up (and counted)
//! while [`QUEUED_BYTES`] of answers already wait for Redis. A Redis that cannot be reached
//! makes every lookup a miss (said once per change in the log), never a failed request.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;

use crate::cache::{Bounds, CacheKey, CachedAnswer};

/// Bytes of answers waiting to be written to Redis at most, over all shared caches.
pub const QUEUED_BYTES: usize = 16 * 1024 * 1024;

static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// Answers not written to Redis because [`QUEUED_BYTES`] already waited, over every shared cache
/// this process has had (a reload builds new caches; the metric must not start again at 0).
static DROPPED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Answers no shared cache of this process wrote because too many bytes already waited
/// (`laptime_shared_cache_dropped_total`).
pub fn dropped_total() -> u64 {
    DROPPED_TOTAL.load(Ordering::Relaxed)
}

/// The longest a connection or a store may take.
const WRITE_WAIT: Duration = Duration::from_secs(1);

/// Stores `ARGV[3]` as entry `ARGV[2]` of the cache under prefix `ARGV[1]` for `ARGV[4]` ms,
/// then removes the entries that expire first while more than `ARGV[5]` entries or `ARGV[6]`
/// bytes are held. Returns the bytes held.
const STORE: &str = r"
local p = ARGV[1]
local index, sizes, total = p .. ':index', p .. ':sizes', p .. ':bytes'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, m in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now)) do
  redis.call('DECRBY', total, tonumber(redis.call('HGET', sizes, m) or '0'))
  redis.call('HDEL', sizes, m)
  redis.call('ZREM', index, m)
end
local m, value, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local old = redis.call('HGET', sizes, m)
if old then redis.call('DECRBY', total, tonumber(old)) end
redis.call('SET', p .. ':e:' .. m, value, 'PX', ttl)
redis.call('ZADD', index, now + ttl, m)
redis.call('HSET', sizes, m, string.len(value))
local bytes = redis.call('INCRBY', total, string.len(value))
local max_entries, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
while redis.call('ZCARD', index) > max_entries or bytes > max_bytes do
  local first = redis.call('ZPOPMIN', index)
  if #first == 0 then break end
  local size = tonumber(redis.call('HGET', sizes, first[1]) or '0')
  redis.call('HDEL', sizes, first[1])
  redis.call('DEL', p .. ':e:' .. first[1])
  bytes = redis.call('DECRBY', total, size)
end
for _, k in ipairs({index, sizes, total}) do redis.call('PEXPIRE', k, ttl + 1000) end
return bytes
";

/// One route's entries in Redis.
pub struct SharedCache {
    client: redis::Client,
    /// `{key_prefix}:cache:{route model}`.
    prefix: String,
    ttl: Duration,
    bounds: Bounds,
    lookup_wait: Duration,
    conn: Arc<Mutex<Option<redis::aio::MultiplexedConnection>>>,
    connecting: Arc<AtomicBool>,
    reachable: Arc<AtomicBool>,
    store: redis::Script,
    /// Answers not written because too many bytes already waited for Redis.
    dropped: AtomicU64,
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Where a shared cache lives.
#[derive(Debug, Clone)]
pub struct Place<'a> {
    pub redis_url: &'a str,
    pub key_prefix: &'a str,
    pub route: &'a str,
    pub lookup_wait: Duration,
}

impl SharedCache {
    /// Starts connecting at once (when in a runtime), so that the first lookups can hit.
    pub fn new(place: &Place<'_>, ttl: Duration, bounds: Bounds) -> Result<SharedCache, String> {
        let client =
            redis::Client::open(place.redis_url).map_err(|e| format!("shared.redis_url: {e}"))?;
        let cache = SharedCache {
            client,
            prefix: format!("{}:cache:{}", place.key_prefix, place.route),
            ttl,
            bounds,
            lookup_wait: place.lookup_wait,
            conn: Arc::new(Mutex::new(None)),
            connecting: Arc::new(AtomicBool::new(false)),
            reachable: Arc::new(AtomicBool::new(true)),
            store: redis::Script::new(STORE),
            dropped: AtomicU64::new(0),
        };
        cache.connect_in_background();
        Ok(cache)
    }

    /// Answers not stored because too many bytes already waited for Redis.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn entry_key(&self, member: &str) -> String {
        format!("{}:e:{member}", self.prefix)
    }

    fn held(&self) -> Option<redis::aio::MultiplexedConnection> {
        self.conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn forget_connection(&self, why: &str) {
        *self.conn.lock().unwrap_or_else(PoisonError::into_inner) = None;
        note(&self.reachable, false, why);
    }

    /// Opens a connection in a task of its own (one at a time); lookups miss meanwhile.
    fn connect_in_background(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let (client, conn, connecting, reachable) = (
            self.client.clone(),
            self.conn.clone(),
            self.connecting.clone(),
            self.reachable.clone(),
        );
        rt.spawn(async move {
            let opened =
                tokio::time::timeout(WRITE_WAIT, client.get_multiplexed_async_connection()).await;
            match opened {
                Ok(Ok(c)) => {
                    *conn.lock().unwrap_or_else(PoisonError::into_inner) = Some(c);
                    note(&reachable, true, "");
                }
                Ok(Err(e)) => note(&reachable, false, &e.to_string()),
                Err(_) => note(&reachable, false, "no connection within 1 s"),
            }
            connecting.store(false, Ordering::Release);
        });
    }

    /// The stored answer, if Redis has one and says so within the lookup wait.
    pub async fn get(&self, key: &CacheKey) -> Option<CachedAnswer> {
        let Some(mut conn) = self.held() else {
            self.connect_in_background();
            return None;
        };
        let mut get = redis::cmd("GET");
        get.arg(self.entry_key(&hex(key)));
        let ask = get.query_async::<Option<Vec<u8>>>(&mut conn);
        match tokio::time::timeout(self.lookup_wait, ask).await {
            Ok(Ok(found)) => found.and_then(|v| decode(&v)),
            Ok(Err(e)) => {
                self.forget_connection(&e.to_string());
                None
            }
            // Slow, not broken: this lookup misses, the connection stays.
            Err(_) => None,
        }
    }

    /// Stores an answer in a task of its own, unless it is over the entry cap or too many
    /// bytes already wait for Redis.
    pub fn insert(self: &Arc<Self>, key: CacheKey, answer: &CachedAnswer) {
        if answer.body.len() > self.bounds.entry_bytes {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let value = encode(answer);
        let size = value.len();
        if QUEUED.fetch_add(size, Ordering::AcqRel) + size > QUEUED_BYTES {
            QUEUED.fetch_sub(size, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            DROPPED_TOTAL.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let cache = self.clone();
        rt.spawn(async move {
            let written = tokio::time::timeout(WRITE_WAIT, cache.write(&hex(&key), value)).await;
            QUEUED.fetch_sub(size, Ordering::AcqRel);
            match written {
                Ok(Ok(())) => note(&cache.reachable, true, ""),
                Ok(Err(e)) => cache.forget_connection(&e),
                Err(_) => cache.forget_connection("no answer within 1 s"),
            }
        });
    }

    async fn write(&self, member: &str, value: Vec<u8>) -> Result<(), String> {
        let mut conn = match self.held() {
            Some(c) => c,
            None => {
                let c = self
                    .client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?;
                *self.conn.lock().unwrap_or_else(PoisonError::into_inner) = Some(c.clone());
                c
            }
        };
        let ttl_ms = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.store
            .arg(&self.prefix)
            .arg(member)
            .arg(value)
            .arg(ttl_ms)
            .arg(self.bounds.entries)
            .arg(self.bounds.bytes)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Logs a change between reachable and not, once per change.
fn note(reachable: &AtomicBool, now: bool, why: &str) {
    if reachable.swap(now, Ordering::Relaxed) == now {
        return;
    }
    if now {
        tracing::info!("shared response cache: Redis reachable again");
    } else {
        tracing::warn!(
            error = why,
            "shared response cache: Redis unreachable; shared routes miss until it is back"
        );
    }
}

fn hex(key: &CacheKey) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Status (2 bytes), stream (1), content type's length (2) and bytes, then the body.
fn encode(a: &CachedAnswer) -> Vec<u8> {
    let ct = a.content_type.as_deref().unwrap_or("").as_bytes();
    let ct = &ct[..ct.len().min(usize::from(u16::MAX))];
    let mut v = Vec::with_capacity(5 + ct.len() + a.body.len());
    v.extend_from_slice(&a.status.to_be_bytes());
    v.push(u8::from(a.stream));
    v.extend_from_slice(&u16::try_from(ct.len()).unwrap_or(0).to_be_bytes());
    v.extend_from_slice(ct);
    v.extend_from_slice(&a.body);
    v
}

fn decode(v: &[u8]) -> Option<CachedAnswer> {
    let status = u16::from_be_bytes([*v.first()?, *v.get(1)?]);
    let stream = *v.get(2)? != 0;
    let ct_len = usize::from(u16::from_be_bytes([*v.get(3)?, *v.get(4)?]));
    let ct = v.get(5..5 + ct_len)?;
    let body = v.get(5 + ct_len..)?;
    Some(CachedAnswer {
        status,
        content_type: (!ct.is_empty()).then(|| String::from_utf8_lossy(ct).into_owned()),
        body: Bytes::copy_from_slice(body),
        stream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_back_as_it_was_stored() {
        let a = CachedAnswer {
            status: 200,
            content_type: Some("text/event-stream".into()),
            body: Bytes::from_static(b"data: {}\n\n"),
            stream: true,
        };
        assert_eq!(decode(&encode(&a)), Some(a.clone()));
        let bare = CachedAnswer {
            content_type: None,
            stream: false,
            ..a
        };
        assert_eq!(decode(&encode(&bare)), Some(bare));
        assert_eq!(decode(&[0, 200, 0, 0]), None);
        assert_eq!(hex(&[0xab; 32]).len(), 64);
    }
}
