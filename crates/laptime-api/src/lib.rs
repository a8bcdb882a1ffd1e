//! laptime's operator surface and the gateway's route table: everything that is not the request
//! path itself.
//!
//! - [`routes`]: the table of every route (the proxy's and these), the constant list of routes
//!   that answer without a token, and the one auth layer over all the others.
//! - [`rest`]: the request log and usage as JSON; [`graphql`]: the usage API; [`reports`]: the
//!   read-back shapes the two share, so they cannot drift.
//! - [`metrics`]: `GET /metrics` (the registry itself is the proxy's: the request path observes
//!   each finished record into it); [`health`]: `GET /healthz`, `GET /readyz`.
//! - [`dashboard`]: the static dashboard at `/`; [`query_page`]: the GraphQL query page at
//!   `GET /graphql`. Both are compiled in and load nothing from another origin.

pub mod dashboard;
pub mod graphql;
pub mod health;
pub mod metrics;
pub mod query_page;
pub mod reports;
pub mod rest;
pub mod routes;

use std::sync::Arc;

use laptime_proxy::App;

/// What the handlers of this crate share: the running gateway and the GraphQL schema (built
/// once; the app and the principal are attached per request). One `Arc`, because axum clones a
/// route's state for every request it serves, on every serving thread: one shared count to
/// move, not one per field.
#[derive(Clone)]
pub struct ApiState(Arc<Shared>);

/// The fields of [`ApiState`].
pub struct Shared {
    pub app: Arc<App>,
    pub schema: graphql::LaptimeSchema,
    /// `/readyz`'s store probe, shared so that probes do not pile up.
    pub readiness: health::Readiness,
}

impl std::ops::Deref for ApiState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").finish_non_exhaustive()
    }
}

impl ApiState {
    pub fn new(app: Arc<App>) -> ApiState {
        ApiState(Arc::new(Shared {
            app,
            schema: graphql::schema(),
            readiness: health::Readiness::default(),
        }))
    }
}

/// The whole HTTP surface of a gateway: see [`routes::router`].
pub fn router(app: Arc<App>) -> axum::Router {
    routes::router(ApiState::new(app))
}
