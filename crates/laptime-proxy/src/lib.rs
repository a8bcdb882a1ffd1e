//! laptime's request path and its HTTP edges.
//!
//! Modules in the order a request meets them:
//! - [`config`]: the typed, validated configuration.
//! - [`ingress`]: request and trace ids, the borrowed parse of the body's top-level fields.
//! - [`auth`]: bearer token → principal.
//! - [`routing`]: model + dialect → channel; [`cache`]: the opt-in response cache.
//! - [`attempt`]: one upstream call.
//! - [`observe`]: the bodies that stamp marks as bytes arrive and record exactly once.
//! - [`respond`]: error shapes and relayed headers.
//! - [`record`]: assembling the record.
//! - [`pipeline`]: the proxy handler that runs those stages in order.
//! - [`api`]: reading records back; [`server`]: the router, serving and shutdown.
//! - [`metrics`]: `GET /metrics`, observed once per finished record.
//! - [`graphql`]: the usage API; [`reports`]: the read-back shapes GraphQL and REST share.
//! - [`dashboard`]: the static dashboard page at `/`, which reads the usage API.

pub mod api;
pub mod attempt;
pub mod auth;
pub mod cache;
pub mod config;
pub mod dashboard;
pub mod graphql;
pub mod hedge;
pub mod ingress;
pub mod metrics;
pub mod observe;
pub mod pipeline;
pub mod record;
pub mod reports;
pub mod respond;
pub mod routing;
pub mod server;

use std::sync::Arc;

use laptime_store::auth::Principal;
use laptime_store::recorder::Recorder;
use laptime_store::Store;

use crate::attempt::HttpClient;
use crate::auth::Authenticator;
use crate::config::{Config, DEFAULT_GROUP};
use crate::metrics::Metrics;
use crate::routing::Router;

/// Shared state of a running gateway.
pub struct App {
    pub config: Config,
    pub router: Router,
    pub auth: Authenticator,
    /// The pooled upstream client with the server's connect timeout.
    pub client: HttpClient,
    /// Clients for routes with their own connect timeout, by that timeout in ms.
    pub clients_by_connect_ms: std::collections::HashMap<u64, HttpClient>,
    pub recorder: Recorder,
    pub store: Store,
    /// Observed once per finished request (the Finisher holds a handle).
    pub metrics: Arc<Metrics>,
    /// The usage API's schema; the app and the principal are attached per request.
    pub graphql: graphql::LaptimeSchema,
    /// Response caches by route model (only routes with `cache` have one).
    pub caches: std::collections::HashMap<String, Arc<cache::ResponseCache>>,
    /// Requests on hedged routes, and hedges sent: the budget's two counters.
    pub hedge_requests: std::sync::atomic::AtomicU64,
    pub hedges_sent: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("router", &self.router)
            .finish_non_exhaustive()
    }
}

impl App {
    /// The client whose connect timeout is the route's (`timeouts.connect_ms`), else the server's.
    pub fn client_for(&self, connect_ms: Option<u64>) -> &HttpClient {
        connect_ms
            .and_then(|ms| self.clients_by_connect_ms.get(&ms))
            .unwrap_or(&self.client)
    }

    /// The routing group a principal's requests use: its token's, else its workspace's, else
    /// `default`.
    pub fn group_of<'p>(&self, principal: &'p Principal) -> &'p str {
        principal.group.as_deref().unwrap_or(DEFAULT_GROUP)
    }
}

pub type SharedApp = Arc<App>;
