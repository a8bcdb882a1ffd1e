//! Auth: bearer token (or `x-api-key`) → principal. Every request asks the store (an indexed
//! lookup of the token's SHA-256): nothing is cached, so a revocation takes effect on the next
//! request on every instance that shares the store.

use http::HeaderMap;
use laptime_store::auth::{self, Principal};
use laptime_store::Store;

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

pub struct Authenticator {
    store: Store,
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
        Authenticator { store }
    }

    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthFailure> {
        let token = credential(headers).ok_or(AuthFailure::Missing)?;
        // Malformed tokens are refused before any lookup.
        if !auth::looks_like_token(token) {
            return Err(AuthFailure::Invalid);
        }
        // Inline, not on a blocking thread: the lookup is one indexed read of a WAL database
        // (readers never wait for the writer), a few microseconds, while a hand-off to the
        // blocking pool costs two thread wake-ups per request (measured in benchmarks/).
        let looked = self
            .store
            .with_conn(|c| auth::authenticate(c, token))
            .map_err(|e| {
                tracing::error!(error = %e, "token lookup failed");
                AuthFailure::Unavailable
            })?;
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
