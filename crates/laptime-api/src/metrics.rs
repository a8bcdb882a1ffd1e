//! `GET /metrics`: the Prometheus exposition of the gateway's registry.
//!
//! The registry, what is observed per request and the rendering stay in `laptime-proxy`'s
//! `metrics` (the request path observes each finished record there, and the scrape-time gauges
//! read the proxy's channels and recorder); this is only the HTTP edge. It needs an `admin`
//! token (the values are instance-wide, so a workspace's `read` token must not see other
//! tenants' traffic) unless `server.metrics_public = true` puts it on the unauthenticated list
//! ([`crate::routes::unauthenticated`]).

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use laptime_store::auth::{Principal, Scope};

use crate::ApiState;

/// The route.
pub const PATH: &str = "/metrics";

/// The Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics`. When the route is not public the auth layer has put the principal in the
/// request; it must be an admin's.
pub async fn handler(State(s): State<ApiState>, req: Request) -> Response {
    if !s.app.live().config.server.metrics_public {
        match req.extensions().get::<Principal>() {
            Some(p) => {
                if let Err(denied) = crate::rest::require(p, Scope::Admin) {
                    return denied.into_response();
                }
            }
            // Only reachable if the route were served without the auth layer: refuse.
            None => {
                return crate::rest::api_error(StatusCode::UNAUTHORIZED, "missing or invalid token")
                    .into_response()
            }
        }
    }
    match s.app.metrics.render(
        &s.app.live().router,
        &s.app.recorder,
        &s.app.connections,
        &s.app.inflight,
    ) {
        Ok(text) => ([(http::header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "rendering metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "metrics could not be rendered",
            )
                .into_response()
        }
    }
}
