//! laptime's request path: the proxy handlers and what they need. The read-back API, the
//! dashboard and the route table with its auth layer are `laptime-api`'s; the binary assembles
//! the router and hands it to [`server::Gateway::serve`].
//!
//! Modules in the order a request meets them:
//! - [`config`]: the typed, validated configuration; [`live`]: the part in force now, read
//!   once per request, and reloading it; [`clock`]: the wall clock.
//! - [`ingress`]: request and trace ids, the borrowed parse of the body's top-level fields.
//! - [`auth`]: bearer token → principal (called once per request, by the router's auth layer).
//! - [`routing`]: model + dialect → channel; [`cache`]: the opt-in response cache, in memory
//!   or ([`shared_cache`]) in Redis.
//! - [`attempt`]: one upstream call, the only place one is made, with its typed error;
//!   [`connect`]: its connections (TCP and TLS, or in-process pipes for paused-time tests);
//!   [`egress`]: each channel's way out (its proxy, trust and client certificate) and the
//!   connector that opens it, stamping TCP, tunnel and TLS.
//! - [`strategy`]: which attempts a request makes: hedging and failover over [`attempt`].
//! - [`observe`]: the bodies that stamp marks as bytes arrive (one observer per attempt, held
//!   until the client is committed to it) and record exactly once.
//! - [`continuation`]: when a committed stream is cut, another channel asked to continue it.
//! - [`respond`]: the last phase: commit to a stream, read a whole answer, error shapes.
//! - [`record`]: assembling the record; [`inflight`]: every request from ingress until its
//!   record is committed, and the journal a restart after a crash records them from.
//! - [`pipeline`]: the proxy handler: one function per phase, called in order.
//! - [`models`]: `GET /v1/models` for the SDKs.
//! - [`server`]: starting the gateway, serving a router, shutdown and retention.
//! - [`metrics`]: the registry, observed once per finished record.
//! - [`heartbeat`]: each instance's requests in flight, published to the fleet every second.
//! - [`traces`]: each finished record as OTLP spans, exported off the request path.

pub mod affinity;
pub mod attempt;
pub mod auth;
pub mod budget;
pub mod budgets;
pub mod cache;
pub mod clock;
pub mod config;
pub mod connect;
pub mod continuation;
pub mod drive;
pub mod egress;
pub mod endpoints;
pub mod heartbeat;
pub mod inflight;
pub mod ingress;
pub mod lanes;
pub mod limits;
pub mod listen;
pub mod live;
pub mod metrics;
pub mod model_health;
pub mod models;
pub mod observe;
pub mod outbody;
pub mod pipeline;
pub mod pool;
pub mod record;
pub mod respond;
pub mod routing;
pub mod server;
pub mod shared;
pub mod shared_cache;
pub mod shared_limits;
pub mod spread;
pub mod strategy;
pub mod traces;

use std::sync::Arc;

use laptime_store::auth::Principal;
use laptime_store::recorder::Recorder;
use laptime_store::Store;

use crate::auth::Authenticator;
use crate::config::DEFAULT_GROUP;
use crate::metrics::Metrics;

/// Shared state of a running gateway.
pub struct App {
    /// The channels, routes, prices and the rest of the configuration in force: see
    /// [`App::live`], read once per request; swapped whole by [`App::reload`].
    live: std::sync::RwLock<Arc<live::Live>>,
    /// Where [`App::reload`] reads the configuration (set by the binary).
    reload_source: std::sync::OnceLock<Box<dyn live::ReloadSource>>,
    /// Held by the reload running now: reloads run one at a time.
    reloading: tokio::sync::Mutex<()>,
    /// Shares channel health through Redis (absent without `[shared] redis_url`); a reload
    /// hands it the new channels.
    fleet: Option<shared::Fleet>,
    pub auth: Arc<Authenticator>,
    /// The ways out built at start (a file or proxy problem stops the start): the default one
    /// is what channels without a proxy or files of their own use; each channel holds its own
    /// (rebuilt, files read again, by a reload). Each serving thread has its own clients along
    /// them, see [`App::upstream_for`].
    pub egress: egress::Egress,
    /// In-process upstreams instead of the network, for tests under paused time: every attempt
    /// uses this client.
    pub memory_upstream: Option<pool::Http1Pool>,
    pub recorder: Recorder,
    /// Every request from ingress until the store has its record (snapshotted to the journal).
    pub inflight: Arc<inflight::Inflight>,
    pub store: Store,
    /// Observed once per finished request (the Finisher holds a handle).
    pub metrics: Arc<Metrics>,
    /// Set when the drain time after SIGINT/SIGTERM is over: streams still open end in-band.
    pub drain_over: tokio::sync::watch::Sender<bool>,
    /// Where every request's finished record goes: the recorder, the metrics, the sample of
    /// unauthenticated refusals given a row, affinity and traces.
    pub sinks: Arc<record::Sinks>,
    /// Every open client connection, under the connection cap.
    pub connections: Arc<listen::Connections>,
    /// Bytes of request bodies held now, over every request in flight.
    pub body_budget: budget::BodyBudget,
    /// Requests on hedged routes, and hedges sent: the budget's two counters.
    pub hedge_requests: std::sync::atomic::AtomicU64,
    pub hedges_sent: std::sync::atomic::AtomicU64,
    /// The rate limits' windows and in-flight counts of this instance.
    pub limiter: Arc<limits::Limiter>,
    /// The budgets with their spend, re-read every second.
    pub budgets: budgets::BudgetBook,
    /// Which channel holds each provider object a workspace created.
    pub affinity: Arc<affinity::Affinity>,
    /// This instance's name and the fleet's in-flight heartbeats as last read.
    pub instances: heartbeat::Instances,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("live", &self.live())
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// This thread's upstream clients by connect timeout (ms) and way out (the egress
    /// profile's id; every channel without a proxy or files of its own has the default's). A
    /// pooled connection's task runs on the thread that opened it, so each serving thread
    /// keeps its own pool and a request never waits on a wake-up from another thread.
    static CLIENTS: std::cell::RefCell<std::collections::HashMap<(u64, usize), CachedClient>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// A thread's client along one way out, and the profile it was made for, held weakly: once no
/// configuration snapshot names the profile (a reload replaced it), the entry goes, with its
/// pool, instead of staying for the life of the thread.
struct CachedClient {
    profile: std::sync::Weak<egress::Profile>,
    /// The client's own copy of the profile, so that holding the client does not keep the
    /// snapshot's profile alive.
    own: std::sync::Arc<egress::Profile>,
    timeout: std::time::Duration,
    /// Idle connections kept per upstream (`server.upstream_idle_per_thread`).
    idle: usize,
    /// The thread's HTTP/1.1 connections to upstreams without lanes.
    pool: pool::Http1Pool,
    /// The lanes to each upstream that may answer over HTTP/2, by scheme and authority.
    lanes: std::collections::HashMap<(bool, http::uri::Authority), lanes::Lanes>,
}

impl CachedClient {
    fn new(
        profile: &std::sync::Arc<egress::Profile>,
        (timeout, idle): (std::time::Duration, usize),
    ) -> Self {
        let own = std::sync::Arc::new(egress::Profile::clone(profile));
        CachedClient {
            profile: std::sync::Arc::downgrade(profile),
            pool: attempt::pool_along(own.clone(), (timeout, idle)),
            own,
            timeout,
            idle,
            lanes: std::collections::HashMap::new(),
        }
    }

    fn upstream(&mut self, uri: &http::Uri) -> lanes::Pick {
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let multiplexed = match self.own.http {
            config::UpstreamHttp::Http2 => true,
            config::UpstreamHttp::Auto => https,
            config::UpstreamHttp::Http1 => false,
        };
        match uri.authority().filter(|_| multiplexed) {
            Some(authority) => self
                .lanes
                .entry((https, authority.clone()))
                .or_insert_with(|| {
                    // The host and port only: an authority may hold credentials.
                    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
                    let upstream = format!("{}:{port}", authority.host());
                    lanes::Lanes::new(upstream, self.own.clone(), (self.timeout, self.idle))
                })
                .pick(),
            None => lanes::Pick::Go(lanes::Upstream {
                client: lanes::Client::Http1(self.pool.clone()),
                slot: None,
            }),
        }
    }
}

/// Drops the entries whose profile no snapshot holds any more.
fn forget_replaced(clients: &mut std::collections::HashMap<(u64, usize), CachedClient>) {
    clients.retain(|_, c| c.profile.strong_count() > 0);
}

impl App {
    /// This thread's client for a request to `uri` with the connect timeout `ms` (the route's
    /// `timeouts.connect_ms`, else the server's), along the channel's way out (`None`: the
    /// default), with the stream it holds on its lane when the upstream may answer over HTTP/2
    /// (after waiting for a new connection to say how many streams it takes, see
    /// [`lanes`]). Cheap: a client is a handle to its pool.
    pub async fn upstream_for(
        &self,
        ms: u64,
        egress: Option<&std::sync::Arc<egress::Profile>>,
        uri: &http::Uri,
    ) -> lanes::Upstream {
        loop {
            match self.pick_upstream(ms, egress, uri) {
                lanes::Pick::Go(upstream) => return upstream,
                lanes::Pick::Wait(lane) => lane.changed().await,
            }
        }
    }

    fn pick_upstream(
        &self,
        ms: u64,
        egress: Option<&std::sync::Arc<egress::Profile>>,
        uri: &http::Uri,
    ) -> lanes::Pick {
        if let Some(c) = &self.memory_upstream {
            return lanes::Pick::Go(lanes::Upstream {
                client: lanes::Client::Http1(c.clone()),
                slot: None,
            });
        }
        let profile = egress.unwrap_or(self.egress.default_profile());
        CLIENTS.with(|clients| {
            let mut clients = clients.borrow_mut();
            if let Some(c) = clients.get_mut(&(ms, profile.id)) {
                return c.upstream(uri);
            }
            forget_replaced(&mut clients);
            // `[server]` is read at start only: every client of the process keeps one cap.
            let idle = self.live().config.server.upstream_idle_per_thread;
            let mut cached =
                CachedClient::new(profile, (std::time::Duration::from_millis(ms), idle));
            let upstream = cached.upstream(uri);
            clients.insert((ms, profile.id), cached);
            upstream
        })
    }

    /// The routing group a principal's requests use: its token's, else its workspace's, else
    /// `default`.
    pub fn group_of<'p>(&self, principal: &'p Principal) -> &'p str {
        principal.group.as_deref().unwrap_or(DEFAULT_GROUP)
    }
}

pub type SharedApp = Arc<App>;

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_client_whose_profile_no_snapshot_holds_is_forgotten() {
        let kept = Arc::new(egress::Profile::direct().unwrap());
        let replaced = Arc::new(egress::Profile::direct().unwrap());
        let mut clients = HashMap::new();
        for p in [&kept, &replaced] {
            let cached = CachedClient::new(
                p,
                (
                    std::time::Duration::from_secs(1),
                    config::UPSTREAM_IDLE_PER_THREAD,
                ),
            );
            clients.insert((1000, p.id), cached);
        }
        forget_replaced(&mut clients);
        assert_eq!(clients.len(), 2, "both profiles are still held");
        let replaced_id = replaced.id;
        // The client's own copy does not keep the snapshot's profile alive.
        drop(replaced);
        forget_replaced(&mut clients);
        assert!(clients.contains_key(&(1000, kept.id)));
        assert!(!clients.contains_key(&(1000, replaced_id)));
    }

    #[tokio::test]
    async fn lanes_count_the_streams_of_upstreams_that_may_answer_over_http2_only() {
        let uri = |u: &str| u.parse::<http::Uri>().unwrap();
        let go = |c: &mut CachedClient, u: &str| match c.upstream(&uri(u)) {
            lanes::Pick::Go(upstream) => upstream,
            lanes::Pick::Wait(_) => panic!("{u} waits"),
        };
        let mut auto = CachedClient::new(
            &Arc::new(egress::Profile::direct().unwrap()),
            (
                std::time::Duration::from_secs(1),
                config::UPSTREAM_IDLE_PER_THREAD,
            ),
        );
        assert!(go(&mut auto, "http://127.0.0.1:8080/v1").slot.is_none());
        let held = [
            go(&mut auto, "https://a.example/v1"),
            go(&mut auto, "https://b.example/v1"),
        ];
        assert!(held.iter().all(|u| u.slot.is_some()));
        let streams =
            |c: &CachedClient, host: &str| c.lanes[&(true, host.parse().unwrap())].streams();
        assert_eq!(streams(&auto, "a.example"), [1]);
        assert_eq!(streams(&auto, "b.example"), [1]);
        drop(held);
        assert_eq!(streams(&auto, "a.example"), [0]);

        for (http, plain, tls) in [
            (config::UpstreamHttp::Http2, true, true),
            (config::UpstreamHttp::Http1, false, false),
        ] {
            let mut profile = egress::Profile::direct().unwrap();
            profile.http = http;
            let mut c = CachedClient::new(
                &Arc::new(profile),
                (
                    std::time::Duration::from_secs(1),
                    config::UPSTREAM_IDLE_PER_THREAD,
                ),
            );
            assert_eq!(go(&mut c, "http://127.0.0.1:8080/").slot.is_some(), plain);
            assert_eq!(go(&mut c, "https://a.example/").slot.is_some(), tls);
        }
    }
}
