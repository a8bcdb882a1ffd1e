//! Auth: bearer token (or `x-api-key`, `x-goog-api-key`, a Gemini client's `?key=`) → principal, looked up by the token's SHA-256 in the
//! store and remembered for at most [`FRESH_FOR`]. A change made through this gateway (revoking
//! a token, moving a workspace to another group) forgets every remembered principal at once, so
//! it applies from the next request; a change made by another process sharing the store (the
//! CLI) applies within [`FRESH_FOR`]. Only valid tokens are remembered: a new token works at
//! once. The lookup itself is a few tens of microseconds of the ~150 µs the gateway adds to a
//! request (measured in `benchmarks/`), which is why it is remembered at all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use http::HeaderMap;
use laptime_store::auth::{self, Principal};
use laptime_store::Store;
use tokio::time::Instant;

/// How long a looked-up principal is trusted without asking the store again.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// How long a principal looked up before stays usable while the store cannot be read (a
/// PostgreSQL restart, a network blip): the token was valid when last asked, and refusing every
/// request of an outage would turn a store blip into an outage of the gateway. A revocation made
/// meanwhile applies once the store answers again.
pub const STALE_IF_UNREADABLE_FOR: Duration = Duration::from_secs(300);

/// Principals remembered at most; beyond it the memory is cleared and refilled.
const MAX_REMEMBERED: usize = 10_000;

/// The presented credential: `Authorization: Bearer …`, else `x-api-key` (Anthropic clients),
/// else `x-goog-api-key` (Gemini clients).
pub fn credential(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(http::header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        let (scheme, token) = v.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| token.trim());
    }
    ["x-api-key", "x-goog-api-key"]
        .into_iter()
        .find_map(|name| headers.get(name))
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The credential of a Gemini client that sends its key in the URL (`?key=…`), when no header
/// carries one. Only the request's own query is read; it is never forwarded nor logged.
pub fn query_credential(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("key="))
        .filter(|token| !token.is_empty())
}

pub struct Authenticator {
    store: Store,
    remembered: RwLock<HashMap<[u8; 32], Remembered>>,
    /// Bumped by [`Authenticator::forget_all`]; a principal from an older generation is stale.
    generation: AtomicU64,
}

struct Remembered {
    principal: Principal,
    at: Instant,
    generation: u64,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator")
    }
}

/// What the router's auth layer found, put in the request's extensions for the proxy handler:
/// the pipeline records a refused call (with its auth duration) and answers it in the dialect's
/// error shape, so the layer passes the failure on instead of answering it.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// When the layer had the request head: the request's t0.
    pub received: Instant,
    pub result: Result<Principal, AuthFailure>,
    /// The lookup and check (the `auth` phase).
    pub took: Duration,
}

/// Why authentication did not produce a principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    Missing,
    Invalid,
    /// The store could not be read: the gateway's fault.
    Unavailable,
}

impl Authenticator {
    pub fn new(store: Store) -> Self {
        Authenticator {
            store,
            remembered: RwLock::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }

    /// Forgets every remembered principal: call after any change to tokens or workspaces.
    pub fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut m) = self.remembered.write() {
            m.clear();
        }
    }

    /// The principal remembered for `hash` if it was looked up less than `within` ago.
    fn recall(&self, hash: &[u8; 32], within: Duration) -> Option<Principal> {
        let generation = self.generation.load(Ordering::SeqCst);
        let m = self.remembered.read().ok()?;
        let r = m.get(hash)?;
        (r.generation == generation && r.at.elapsed() < within).then(|| r.principal.clone())
    }

    fn remember(&self, hash: [u8; 32], principal: &Principal, generation: u64) {
        if let Ok(mut m) = self.remembered.write() {
            if m.len() >= MAX_REMEMBERED {
                m.clear();
            }
            m.insert(
                hash,
                Remembered {
                    principal: principal.clone(),
                    at: Instant::now(),
                    generation,
                },
            );
        }
    }

    /// Authenticates and times it, from now (the request's t0 when called on its head).
    pub async fn check(&self, headers: &HeaderMap) -> Authenticated {
        self.check_with_query(headers, None).await
    }

    /// As [`Authenticator::check`], also taking a Gemini client's `?key=` when no header
    /// carries a credential.
    pub async fn check_with_query(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Authenticated {
        let received = Instant::now();
        let token = credential(headers).or_else(|| query_credential(query));
        let result = self.authenticate_token(token).await;
        Authenticated {
            received,
            result,
            took: received.elapsed(),
        }
    }

    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthFailure> {
        self.authenticate_token(credential(headers)).await
    }

    async fn authenticate_token(&self, token: Option<&str>) -> Result<Principal, AuthFailure> {
        let token = token.ok_or(AuthFailure::Missing)?;
        // Malformed tokens are refused before any lookup.
        if !auth::looks_like_token(token) {
            return Err(AuthFailure::Invalid);
        }
        let hash = auth::hash_token(token);
        if let Some(p) = self.recall(&hash, FRESH_FOR) {
            return Ok(p);
        }
        // Read before the lookup: a change that lands during it makes this result stale.
        let generation = self.generation.load(Ordering::SeqCst);
        // Inline, not on a blocking thread: the lookup is one indexed read of a WAL database
        // (readers never wait for the writer), while a hand-off to the blocking pool costs two
        // thread wake-ups per request (measured in benchmarks/). `Store::authenticate` is the
        // store's one inline method for this reason.
        let looked = match self.store.authenticate(token).await {
            Ok(looked) => looked,
            Err(e) => {
                tracing::error!(error = %e, "token lookup failed");
                // Kept as it was remembered: its `at` does not move, so the outage is bounded.
                return self
                    .recall(&hash, STALE_IF_UNREADABLE_FOR)
                    .ok_or(AuthFailure::Unavailable);
            }
        };
        let principal = looked.ok_or(AuthFailure::Invalid)?;
        self.remember(hash, &principal, generation);
        Ok(principal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_wins_and_x_api_key_is_accepted() {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "lt_b".parse().unwrap());
        assert_eq!(credential(&h), Some("lt_b"));
        h.insert("authorization", "Bearer lt_a".parse().unwrap());
        assert_eq!(credential(&h), Some("lt_a"));
        h.insert("authorization", "Basic xyz".parse().unwrap());
        assert_eq!(credential(&h), None);
        let mut g = HeaderMap::new();
        g.insert("x-goog-api-key", "lt_g".parse().unwrap());
        assert_eq!(credential(&g), Some("lt_g"));
        g.insert("x-api-key", "lt_b".parse().unwrap());
        assert_eq!(credential(&g), Some("lt_b"));
    }

    #[test]
    fn a_gemini_key_in_the_query_is_found_among_other_parameters() {
        assert_eq!(query_credential(Some("alt=sse&key=lt_q")), Some("lt_q"));
        assert_eq!(query_credential(Some("key=lt_q")), Some("lt_q"));
        assert_eq!(query_credential(Some("alt=sse&key=")), None);
        assert_eq!(query_credential(Some("monkey=x")), None);
        assert_eq!(query_credential(None), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_revocation_made_by_another_process_applies_when_the_remembered_principal_expires() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let now = crate::clock::now_unix_us();
        let t = store
            .with_conn(|c| auth::bootstrap(c, None, now))
            .unwrap()
            .unwrap();
        let a = Authenticator::new(store.clone());
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            format!("Bearer {}", t.token).parse().unwrap(),
        );
        assert!(a.authenticate(&h).await.is_ok());
        // As the CLI would: straight in the store, so this gateway is not told.
        let revoked = store
            .with_conn(|c| laptime_store::manage::revoke_token(c, &t.workspace.id, &t.key_id, now))
            .unwrap();
        assert!(revoked);
        tokio::time::advance(FRESH_FOR - Duration::from_millis(1)).await;
        assert!(a.authenticate(&h).await.is_ok(), "remembered for FRESH_FOR");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(a.authenticate(&h).await, Err(AuthFailure::Invalid));
        // A change made through this gateway applies on the next request.
        let t2 = store
            .with_conn(|c| auth::create_token(c, "default", auth::Scope::Read, now))
            .unwrap();
        h.insert(
            "authorization",
            format!("Bearer {}", t2.token).parse().unwrap(),
        );
        assert!(a.authenticate(&h).await.is_ok());
        store
            .with_conn(|c| laptime_store::manage::revoke_token(c, &t.workspace.id, &t2.key_id, now))
            .unwrap();
        a.forget_all();
        assert_eq!(a.authenticate(&h).await, Err(AuthFailure::Invalid));
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_cannot_be_read_keeps_known_tokens_working_for_a_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let now = crate::clock::now_unix_us();
        let known = store
            .with_conn(|c| auth::bootstrap(c, None, now))
            .unwrap()
            .unwrap();
        let unseen = store
            .with_conn(|c| auth::create_token(c, "default", auth::Scope::Read, now))
            .unwrap();
        let a = Authenticator::new(store.clone());
        let bearer = |t: &str| {
            let mut h = HeaderMap::new();
            h.insert("authorization", format!("Bearer {t}").parse().unwrap());
            h
        };
        assert!(a.authenticate(&bearer(&known.token)).await.is_ok());
        // Every lookup fails from now on, as with a store that is down.
        store
            .with_conn(|c| Ok(c.execute_batch("ALTER TABLE tokens RENAME TO tokens_gone")?))
            .unwrap();
        tokio::time::advance(FRESH_FOR).await;
        assert!(
            a.authenticate(&bearer(&known.token)).await.is_ok(),
            "a token seen valid keeps working while the store cannot say otherwise"
        );
        assert_eq!(
            a.authenticate(&bearer(&unseen.token)).await,
            Err(AuthFailure::Unavailable),
            "one never seen is the gateway's fault, never a guess"
        );
        tokio::time::advance(STALE_IF_UNREADABLE_FOR - FRESH_FOR).await;
        assert_eq!(
            a.authenticate(&bearer(&known.token)).await,
            Err(AuthFailure::Unavailable),
            "for a bounded time only"
        );
        // The store answers again: lookups are fresh again.
        store
            .with_conn(|c| Ok(c.execute_batch("ALTER TABLE tokens_gone RENAME TO tokens")?))
            .unwrap();
        assert!(a.authenticate(&bearer(&known.token)).await.is_ok());
    }
}
