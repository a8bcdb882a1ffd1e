//! Auth: bearer token (or `x-api-key`, `x-goog-api-key`, a Gemini client's `?key=`) → principal, looked up by the token's SHA-256 in the
//! store and remembered. A change made through this gateway (revoking a token, moving a
//! workspace to another group) forgets every remembered principal at once, so it applies from
//! the next request. A change made by another process sharing the store (the CLI, another
//! instance of a fleet) moves the store's auth epoch (triggers on the tables a principal is read
//! from), which [`watch_epoch`] reads every [`EPOCH_EVERY`]: a moved epoch forgets every
//! principal, so such a change applies within about [`EPOCH_EVERY`], and never later than
//! [`FRESH_FOR`]. Only valid tokens are remembered: a new token works at once. While the epoch
//! cannot be read, a known token is taken as remembered (for at most
//! [`STALE_IF_UNREADABLE_FOR`]) without a lookup that would wait on a store not answering.
//!
//! Why the epoch and not only a short memory: a token used less often than the memory lasts was
//! looked up on every request, and the lookup waits on the store on the request path (0.25–0.35
//! ms of a request's ~0.4 ms on SQLite after an idle second, measured from the log's `auth_ms`;
//! on PostgreSQL a round trip to the server). With the epoch, a known token is looked up again
//! only after [`REMEMBER_AT_MOST`], or after a change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use http::HeaderMap;
use laptime_store::auth::{self, Principal};
use laptime_store::Store;
use tokio::time::Instant;

/// How long a looked-up principal is trusted without asking the store again when no read of
/// the epoch vouches for it (no [`watch_epoch`] running): then this is how late a change made
/// elsewhere may apply. While the epoch is read, a read of it at most this old vouches for
/// every principal remembered since.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// How often [`watch_epoch`] reads the store's auth epoch: one indexed read of one row.
pub const EPOCH_EVERY: Duration = Duration::from_millis(250);

/// How long a read of the epoch may take before it counts as failed: a store that hangs (a
/// network blip, a server stopped) is then known to be away without waiting on it.
pub const EPOCH_READ_LIMIT: Duration = Duration::from_millis(500);

/// The longest a principal is used without a lookup, even while the epoch stays: a bound on
/// how long a change the epoch cannot see (the tables edited with their triggers dropped) is
/// served. A token in use is then looked up once a minute instead of once a second.
pub const REMEMBER_AT_MOST: Duration = Duration::from_secs(60);

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
    memory: RwLock<Memory>,
    /// Bumped whenever every principal is forgotten; a principal from an older generation is
    /// stale.
    generation: AtomicU64,
}

#[derive(Default)]
struct Memory {
    remembered: HashMap<[u8; 32], Remembered>,
    /// The auth epoch last read, and when the read that found it began.
    epoch: Option<(i64, Instant)>,
    /// The last read of the epoch failed: the store is not answering.
    unreadable: bool,
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
            memory: RwLock::new(Memory::default()),
            generation: AtomicU64::new(0),
        }
    }

    /// Forgets every remembered principal: call after any change to tokens or workspaces.
    pub fn forget_all(&self) {
        if let Ok(mut m) = self.memory.write() {
            self.forget_all_in(&mut m);
        } else {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn forget_all_in(&self, m: &mut Memory) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        m.remembered.clear();
    }

    /// Takes a read of the store's auth epoch, begun at `began`: an epoch other than the last
    /// one read (or the first one read, which cannot say what changed before it) forgets every
    /// principal; either way the read vouches for those remembered from now on.
    pub fn epoch_read(&self, epoch: i64, began: Instant) {
        let Ok(mut m) = self.memory.write() else {
            return;
        };
        if m.epoch.map(|(e, _)| e) != Some(epoch) {
            self.forget_all_in(&mut m);
        }
        m.epoch = Some((epoch, began));
        m.unreadable = false;
    }

    /// Takes a read of the epoch that failed: until one succeeds, a known token is not looked
    /// up (the lookup would wait on a store that is not answering, up to its pool's wait, on
    /// the request path) but taken as remembered, within [`STALE_IF_UNREADABLE_FOR`].
    pub fn epoch_unreadable(&self) {
        if let Ok(mut m) = self.memory.write() {
            m.unreadable = true;
        }
    }

    /// The principal remembered for `hash` if it was looked up less than `within` ago; or, while
    /// a read of the epoch less than [`FRESH_FOR`] old found it unmoved, less than
    /// [`REMEMBER_AT_MOST`] ago; or, while the last read of the epoch failed, less than
    /// [`STALE_IF_UNREADABLE_FOR`] ago.
    fn recall(&self, hash: &[u8; 32], within: Duration) -> Option<Principal> {
        let generation = self.generation.load(Ordering::SeqCst);
        let m = self.memory.read().ok()?;
        let r = m.remembered.get(hash)?;
        let age = r.at.elapsed();
        let vouched = m
            .epoch
            .is_some_and(|(_, began)| began.elapsed() < FRESH_FOR)
            && age < REMEMBER_AT_MOST;
        let away = m.unreadable && age < STALE_IF_UNREADABLE_FOR;
        let fresh = age < within || vouched || away;
        (r.generation == generation && fresh).then(|| r.principal.clone())
    }

    fn remember(&self, hash: [u8; 32], principal: &Principal, generation: u64) {
        if let Ok(mut m) = self.memory.write() {
            let m = &mut m.remembered;
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

/// Reads the store's auth epoch every [`EPOCH_EVERY`] into `auth` until `auth` is dropped. A
/// failing read is said once per change of state; meanwhile nothing vouches for remembered
/// principals: a known token is taken as remembered within [`STALE_IF_UNREADABLE_FOR`] without
/// a lookup, and an unknown one is looked up (and refused as the gateway's fault if that fails).
pub async fn watch_epoch(auth: std::sync::Weak<Authenticator>) {
    let mut every = tokio::time::interval(EPOCH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        every.tick().await;
        let Some(auth) = auth.upgrade() else { return };
        let began = Instant::now();
        let read = tokio::time::timeout(EPOCH_READ_LIMIT, auth.store.auth_epoch()).await;
        match read.unwrap_or_else(|_| {
            Err(laptime_store::StoreError::Unavailable(format!(
                "no answer within {EPOCH_READ_LIMIT:?}"
            )))
        }) {
            Ok(epoch) => {
                auth.epoch_read(epoch, began);
                if failing {
                    failing = false;
                    tracing::info!("the auth epoch is read again");
                }
            }
            Err(e) => {
                auth.epoch_unreadable();
                if !failing {
                    failing = true;
                    tracing::warn!(error = %e, "the store's auth epoch could not be read; known tokens are taken as last looked up, for at most {STALE_IF_UNREADABLE_FOR:?}");
                }
            }
        }
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
        // No epoch read (no watcher): a remembered principal is trusted for FRESH_FOR only.
        let (_dir, store, now, t, t2) = store_with_tokens();
        let a = Authenticator::new(store.clone());
        assert!(a.authenticate(&bearer(&t.token)).await.is_ok());
        // As the CLI would: straight in the store, so this gateway is not told.
        let revoked = store
            .with_conn(|c| laptime_store::manage::revoke_token(c, &t.workspace.id, &t.key_id, now))
            .unwrap();
        assert!(revoked);
        tokio::time::advance(FRESH_FOR - Duration::from_millis(1)).await;
        assert!(
            a.authenticate(&bearer(&t.token)).await.is_ok(),
            "remembered for FRESH_FOR"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            a.authenticate(&bearer(&t.token)).await,
            Err(AuthFailure::Invalid)
        );
        // A change made through this gateway applies on the next request.
        assert!(a.authenticate(&bearer(&t2.token)).await.is_ok());
        store
            .with_conn(|c| laptime_store::manage::revoke_token(c, &t.workspace.id, &t2.key_id, now))
            .unwrap();
        a.forget_all();
        assert_eq!(
            a.authenticate(&bearer(&t2.token)).await,
            Err(AuthFailure::Invalid)
        );
    }

    /// A store with its bootstrap admin token and a read token of the same workspace, and the
    /// wall-clock time they were made at.
    fn store_with_tokens() -> (
        tempfile::TempDir,
        Store,
        i64,
        auth::NewToken,
        auth::NewToken,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let now = crate::clock::now_unix_us();
        let admin = store
            .with_conn(|c| auth::bootstrap(c, None, now))
            .unwrap()
            .unwrap();
        let read = store
            .with_conn(|c| auth::create_token(c, "default", auth::Scope::Read, now))
            .unwrap();
        (dir, store, now, admin, read)
    }

    /// Revokes `t` straight in the store with the trigger that would move the epoch dropped:
    /// only a lookup can tell it is revoked.
    fn revoke_unseen_by_the_epoch(store: &Store, t: &auth::NewToken, now: i64) {
        store
            .with_conn(|c| {
                c.execute_batch("DROP TRIGGER IF EXISTS tokens_update_epoch")?;
                laptime_store::manage::revoke_token(c, &t.workspace.id, &t.key_id, now)
            })
            .unwrap();
    }

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", format!("Bearer {t}").parse().unwrap());
        h
    }

    async fn read_epoch(a: &Authenticator, store: &Store) {
        a.epoch_read(store.auth_epoch().await.unwrap(), Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn while_the_epoch_stays_a_known_token_is_not_looked_up_again_for_up_to_a_minute() {
        let (_dir, store, now, t, _) = store_with_tokens();
        let a = Authenticator::new(store.clone());
        read_epoch(&a, &store).await;
        assert!(a.authenticate(&bearer(&t.token)).await.is_ok());
        // A revocation the epoch cannot see (its trigger dropped): a lookup would refuse the
        // token, so every acceptance below was answered from memory.
        revoke_unseen_by_the_epoch(&store, &t, now);
        let reads = (REMEMBER_AT_MOST.as_millis() / EPOCH_EVERY.as_millis()) as u32;
        for i in 1..reads {
            tokio::time::advance(EPOCH_EVERY).await;
            read_epoch(&a, &store).await;
            assert!(
                a.authenticate(&bearer(&t.token)).await.is_ok(),
                "read {i}: vouched for by the epoch"
            );
        }
        tokio::time::advance(EPOCH_EVERY).await;
        read_epoch(&a, &store).await;
        assert_eq!(
            a.authenticate(&bearer(&t.token)).await,
            Err(AuthFailure::Invalid),
            "looked up again after REMEMBER_AT_MOST"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_made_elsewhere_applies_at_the_next_epoch_read_and_without_reads_after_fresh_for(
    ) {
        let (_dir, store, now, admin, t) = store_with_tokens();
        let a = Authenticator::new(store.clone());
        read_epoch(&a, &store).await;
        assert!(a.authenticate(&bearer(&t.token)).await.is_ok());
        assert!(a.authenticate(&bearer(&admin.token)).await.is_ok());
        // Revoked as the CLI would, straight in the store: its trigger moves the epoch.
        store
            .with_conn(|c| laptime_store::manage::revoke_token(c, &t.workspace.id, &t.key_id, now))
            .unwrap();
        assert!(
            a.authenticate(&bearer(&t.token)).await.is_ok(),
            "not read yet"
        );
        read_epoch(&a, &store).await;
        assert_eq!(
            a.authenticate(&bearer(&t.token)).await,
            Err(AuthFailure::Invalid),
            "the moved epoch forgot it"
        );
        assert!(a.authenticate(&bearer(&admin.token)).await.is_ok());
        // The epoch no longer read (a store that stopped answering it): the last read vouches
        // for FRESH_FOR, then a known token is looked up again, as without the epoch.
        revoke_unseen_by_the_epoch(&store, &admin, now);
        tokio::time::advance(FRESH_FOR - Duration::from_millis(1)).await;
        assert!(a.authenticate(&bearer(&admin.token)).await.is_ok());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            a.authenticate(&bearer(&admin.token)).await,
            Err(AuthFailure::Invalid)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_epoch_watcher_vouches_for_known_tokens_and_applies_a_change_made_elsewhere_within_one_read(
    ) {
        let (_dir, store, now, t, _) = store_with_tokens();
        let a = std::sync::Arc::new(Authenticator::new(store.clone()));
        let watcher = tokio::spawn(watch_epoch(std::sync::Arc::downgrade(&a)));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(a.authenticate(&bearer(&t.token)).await.is_ok());
        // Revoked where the epoch cannot see it: a lookup would refuse the token, so it is
        // accepted from memory, long past FRESH_FOR, because the watcher keeps reading.
        revoke_unseen_by_the_epoch(&store, &t, now);
        tokio::time::sleep(FRESH_FOR * 3).await;
        assert!(a.authenticate(&bearer(&t.token)).await.is_ok());
        // Any change the epoch sees (here the workspace's group, straight in the store) forgets
        // every principal; the token's lookup then finds it revoked.
        let revoked_at = Instant::now();
        store
            .with_conn(|c| Ok(c.execute_batch("UPDATE workspaces SET grp = 'batch'")?))
            .unwrap();
        let mut refused_after = None;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if a.authenticate(&bearer(&t.token)).await == Err(AuthFailure::Invalid) {
                refused_after = Some(revoked_at.elapsed());
                break;
            }
        }
        let refused_after = refused_after.expect("refused within a second");
        assert!(
            refused_after <= EPOCH_EVERY + Duration::from_millis(20),
            "{refused_after:?}"
        );
        // The watcher ends with the authenticator.
        drop(a);
        tokio::time::sleep(EPOCH_EVERY * 2).await;
        assert!(watcher.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn while_the_epoch_cannot_be_read_a_known_token_is_taken_as_remembered_without_a_lookup()
    {
        let (_dir, store, now, t, unseen) = store_with_tokens();
        let a = std::sync::Arc::new(Authenticator::new(store.clone()));
        let _watcher = tokio::spawn(watch_epoch(std::sync::Arc::downgrade(&a)));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(a.authenticate(&bearer(&t.token)).await.is_ok());
        let looked_up = Instant::now();
        // Only a lookup can tell `t` is revoked; and the epoch can no longer be read.
        revoke_unseen_by_the_epoch(&store, &t, now);
        store
            .with_conn(|c| Ok(c.execute_batch("ALTER TABLE auth_epoch RENAME TO auth_epoch_gone")?))
            .unwrap();
        tokio::time::sleep(FRESH_FOR * 3).await;
        assert!(
            a.authenticate(&bearer(&t.token)).await.is_ok(),
            "taken as remembered: no lookup"
        );
        assert!(
            a.authenticate(&bearer(&unseen.token)).await.is_ok(),
            "a token never seen is still looked up"
        );
        tokio::time::sleep_until(looked_up + STALE_IF_UNREADABLE_FOR).await;
        assert_eq!(
            a.authenticate(&bearer(&t.token)).await,
            Err(AuthFailure::Invalid),
            "for a bounded time only, then looked up"
        );
    }

    /// Real time and the real PostgreSQL: a read that hangs (a lock held by another session)
    /// is what a network blip looks like, and only a real server makes it.
    #[tokio::test]
    async fn an_epoch_read_that_hangs_counts_as_failed_and_known_tokens_are_not_looked_up() {
        let schema = laptime_store::testing::PgSchema::create().await.unwrap();
        let store = Store::open_postgres(schema.url()).await.unwrap();
        let now = crate::clock::now_unix_us();
        let t = store.bootstrap(None, now).await.unwrap().unwrap();
        let a = std::sync::Arc::new(Authenticator::new(store.clone()));
        let _watcher = tokio::spawn(watch_epoch(std::sync::Arc::downgrade(&a)));
        // After the watcher's first read, which forgets whatever was remembered before it.
        for _ in 0..100 {
            if a.memory.read().unwrap().epoch.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(a.authenticate(&bearer(&t.token)).await.is_ok());
        let (other, conn) = tokio_postgres::connect(schema.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        // Only a lookup can tell `t` is revoked.
        other
            .batch_execute("DROP TRIGGER tokens_auth_epoch ON tokens")
            .await
            .unwrap();
        assert!(store
            .revoke_token(&t.workspace.id, &t.key_id, now)
            .await
            .unwrap());
        other
            .batch_execute("BEGIN; LOCK TABLE auth_epoch IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        // Past FRESH_FOR nothing vouches for `t`; the hung reads have counted as failed.
        tokio::time::sleep(FRESH_FOR + EPOCH_READ_LIMIT * 2).await;
        // A lookup would wait behind the lock (and then refuse the revoked token).
        let answer =
            tokio::time::timeout(Duration::from_secs(5), a.authenticate(&bearer(&t.token))).await;
        assert!(
            matches!(answer, Ok(Ok(_))),
            "taken as remembered, not looked up: {answer:?}"
        );
        other.batch_execute("ROLLBACK").await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_cannot_be_read_keeps_known_tokens_working_for_a_bounded_time() {
        let (_dir, store, _, known, unseen) = store_with_tokens();
        let a = Authenticator::new(store.clone());
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
