//! Auth: bearer token (or `x-api-key`) → principal. Lookups go to the store on a blocking
//! thread and are cached for a few seconds, so the hot path costs a hash and a map lookup.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use http::HeaderMap;
use laptime_store::auth::{self, Principal};
use laptime_store::Store;
use tokio::time::Instant;

/// How long a looked-up token is trusted without asking the store again.
const CACHE_TTL: Duration = Duration::from_secs(2);
const CACHE_MAX: usize = 10_000;

/// The presented credential: `Authorization: Bearer …`, else `x-api-key` (Anthropic clients).
pub fn credential(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(http::header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        let (scheme, token) = v.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| token.trim());
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Token hash → what the store said (a principal, or no such token) and when it was asked.
type AuthCache = HashMap<[u8; 32], (Option<Principal>, Instant)>;

pub struct Authenticator {
    store: Store,
    cache: Mutex<AuthCache>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator")
    }
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
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Drops every cached lookup, so a revocation takes effect on the next request.
    pub fn forget_cached(&self) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.clear();
        }
    }

    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthFailure> {
        let token = credential(headers).ok_or(AuthFailure::Missing)?;
        if !auth::looks_like_token(token) {
            return Err(AuthFailure::Invalid);
        }
        let hash = auth::hash_token(token);
        let now = Instant::now();
        if let Ok(cache) = self.cache.lock() {
            if let Some((p, at)) = cache.get(&hash) {
                if now.saturating_duration_since(*at) < CACHE_TTL {
                    return p.clone().ok_or(AuthFailure::Invalid);
                }
            }
        }
        let store = self.store.clone();
        let token = token.to_string();
        let looked =
            tokio::task::spawn_blocking(move || store.with_conn(|c| auth::authenticate(c, &token)))
                .await
                .map_err(|_| AuthFailure::Unavailable)?
                .map_err(|e| {
                    tracing::error!(error = %e, "token lookup failed");
                    AuthFailure::Unavailable
                })?;
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(hash, (looked.clone(), now));
        }
        looked.ok_or(AuthFailure::Invalid)
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
    }
}
