//! Every route of the gateway in one table ([`routes`]), and the one auth layer over them.
//!
//! A route answers without a token only when [`unauthenticated`] lists it: the constant
//! [`UNAUTHENTICATED`] (health, and the static pages that hold no data) plus the configured
//! extra (`GET /metrics` when `server.metrics_public = true`). Every other route gets the auth
//! layer ([`authenticate`]), which looks the token up once and puts what it found in the
//! request's extensions, so a route added to the table is authenticated by default; handlers
//! check the scope they need. The tests walk this same table, so they cannot miss a route.
//! The exception is [`Kind::Pipeline`], the dialects' own model calls: the pipeline looks the
//! token up itself when no layer did, and the layer's per-request state, boxes and extension
//! map were a few percent of such a call's CPU (benchmarks/README, item 17).
//!
//! How the layer answers a failure depends on the route's [`Kind`]: the proxy routes get an
//! [`Authenticated`] whatever the outcome, because the pipeline records a refused call (with its
//! auth duration) and answers it in the dialect's own error shape; the others are answered here,
//! 401 (500 when the store could not be read) in their own error shape.

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use http::{Method, StatusCode};
use laptime_core::Dialect;
use laptime_proxy::auth::{AuthFailure, Authenticated};
use laptime_proxy::config::Config;
use laptime_proxy::{endpoints, models, pipeline};
use laptime_store::auth::Principal;

use crate::{dashboard, graphql, health, metrics, query_page, rest, ApiState};

/// Routes that always answer without a token, as `"METHOD /path"` (the path as routed).
/// `GET /graphql` is the static query page and `GET /`, `GET /assets/{file}` the dashboard's
/// page, script and style: they hold no data, and the pages query `POST /graphql` with the
/// user's token. Health says nothing about traffic.
pub const UNAUTHENTICATED: [&str; 5] = [
    "GET /healthz",
    "GET /readyz",
    "GET /graphql",
    "GET /",
    "GET /assets/{file}",
];

/// Every route that answers without a token under `config`: [`UNAUTHENTICATED`], plus
/// `GET /metrics` when `server.metrics_public` is set.
pub fn unauthenticated(config: &Config) -> Vec<&'static str> {
    let mut routes = UNAUTHENTICATED.to_vec();
    if config.server.metrics_public {
        routes.push(METRICS_ROUTE);
    }
    routes
}

const METRICS_ROUTE: &str = "GET /metrics";

/// What a route is, for the auth layer: who answers a refused token, and in which shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A proxied call: the pipeline records and answers the failure (dialect's shape).
    Proxy,
    /// A dialect's model call at its own path: as [`Kind::Proxy`], but without the layer, since
    /// `pipeline::proxy` authenticates a request that reaches it unauthenticated.
    Pipeline,
    /// JSON answered here as `{"error": {"message": …}}`.
    Rest,
    /// GraphQL answered here as `{"errors": [{"message": …}]}`.
    Graphql,
}

/// One route: method, path, kind and handler.
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub kind: Kind,
    pub handler: MethodRouter<ApiState>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.key())
    }
}

impl Route {
    /// `"METHOD /path"`, as [`UNAUTHENTICATED`] names routes.
    pub fn key(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

fn route(method: Method, path: &'static str, kind: Kind, handler: MethodRouter<ApiState>) -> Route {
    Route {
        method,
        path,
        kind,
        handler,
    }
}

/// Gemini's calls: `{model}:generateContent` and `{model}:streamGenerateContent` under
/// `/v1beta/models`, and under `/v1/models` (google-genai 3.x's default); the pipeline reads the
/// segment (and answers an unknown method itself).
pub const GEMINI_ROUTES: [&str; 2] = ["/v1beta/models/{call}", "/v1/models/{call}"];

/// The provider endpoints besides the model calls (method, path), served by
/// `laptime_proxy::endpoints` like a model call: authenticated, routed, recorded.
pub const ENDPOINT_ROUTES: [(Method, &str); 22] = [
    (Method::POST, "/v1/embeddings"),
    (Method::POST, "/v1/moderations"),
    (Method::POST, "/v1/messages/count_tokens"),
    (Method::POST, "/v1/images/generations"),
    (Method::POST, "/v1/images/edits"),
    (Method::POST, "/v1/images/variations"),
    (Method::POST, "/v1/audio/speech"),
    (Method::POST, "/v1/audio/transcriptions"),
    (Method::POST, "/v1/audio/translations"),
    (Method::POST, "/v1/files"),
    (Method::GET, "/v1/files"),
    (Method::GET, "/v1/files/{id}"),
    (Method::DELETE, "/v1/files/{id}"),
    (Method::GET, "/v1/files/{id}/content"),
    (Method::POST, "/v1/batches"),
    (Method::GET, "/v1/batches"),
    (Method::GET, "/v1/batches/{id}"),
    (Method::POST, "/v1/batches/{id}/cancel"),
    (Method::GET, "/v1/responses/{id}"),
    (Method::DELETE, "/v1/responses/{id}"),
    (Method::POST, "/v1/responses/{id}/cancel"),
    (Method::GET, "/v1/responses/{id}/input_items"),
];

fn endpoint_route(method: Method, path: &'static str) -> Route {
    let handler =
        move |State(s): State<ApiState>, req: Request| endpoints::serve(s.app.clone(), req);
    let handler = match method {
        Method::GET => get(handler),
        Method::DELETE => axum::routing::delete(handler),
        _ => post(handler),
    };
    route(method, path, Kind::Proxy, handler)
}

/// The route of a dialect's model call at its own path. A gateway's serving threads answer
/// these calls without the router (`laptime_proxy::listen::Front`), by the same function.
fn proxy_route(dialect: Dialect) -> Route {
    route(
        Method::POST,
        dialect.path(),
        Kind::Pipeline,
        post(move |State(s): State<ApiState>, req: Request| {
            pipeline::proxy(s.app.clone(), dialect, req)
        }),
    )
}

/// The table: every route the gateway serves.
pub fn routes() -> Vec<Route> {
    let endpoints = ENDPOINT_ROUTES
        .into_iter()
        .map(|(method, path)| endpoint_route(method, path));
    let mut table: Vec<Route> = pipeline::MODEL_CALLS.map(proxy_route).into();
    table.extend([
        // Gemini's model calls and its other methods (`:embedContent`, `:countTokens`) share
        // the `{model}:{method}` paths.
        endpoint_route(Method::POST, GEMINI_ROUTES[0]),
        endpoint_route(Method::POST, GEMINI_ROUTES[1]),
        route(
            Method::GET,
            "/v1/models",
            Kind::Rest,
            get(|State(s): State<ApiState>, req: Request| async move {
                match req.extensions().get::<Principal>() {
                    Some(p) => models::list(&s.app, p, req.headers()),
                    None => rejection(Kind::Rest, &AuthFailure::Missing),
                }
            }),
        ),
        // One model, for the SDKs' `models.retrieve`; the path is Gemini's model-call path (POST),
        // so its parameter keeps that name.
        route(
            Method::GET,
            GEMINI_ROUTES[1],
            Kind::Rest,
            get(
                |State(s): State<ApiState>,
                 axum::extract::Path(id): axum::extract::Path<String>,
                 req: Request| async move {
                    match req.extensions().get::<Principal>() {
                        Some(p) => models::retrieve(&s.app, p, req.headers(), &id),
                        None => rejection(Kind::Rest, &AuthFailure::Missing),
                    }
                },
            ),
        ),
        route(Method::GET, "/api/requests", Kind::Rest, get(rest::list)),
        route(
            Method::GET,
            "/api/requests/inflight",
            Kind::Rest,
            get(rest::inflight),
        ),
        route(
            Method::GET,
            "/api/instances",
            Kind::Rest,
            get(rest::instances),
        ),
        route(
            Method::GET,
            "/api/requests/{id}",
            Kind::Rest,
            get(rest::one),
        ),
        route(
            Method::POST,
            "/api/admin/reload",
            Kind::Rest,
            post(rest::reload),
        ),
        route(
            Method::GET,
            "/api/usage",
            Kind::Rest,
            get(rest::usage_report),
        ),
        route(
            Method::GET,
            metrics::PATH,
            Kind::Rest,
            get(metrics::handler),
        ),
        route(
            Method::POST,
            "/graphql",
            Kind::Graphql,
            post(graphql::handle),
        ),
        route(Method::GET, "/graphql", Kind::Rest, get(query_page::index)),
        route(Method::GET, "/", Kind::Rest, get(dashboard::index)),
        route(
            Method::GET,
            "/assets/{file}",
            Kind::Rest,
            get(dashboard::asset),
        ),
        route(Method::GET, "/healthz", Kind::Rest, get(health::healthz)),
        route(Method::GET, "/readyz", Kind::Rest, get(health::readyz)),
    ]);
    table.extend(endpoints);
    table
}

/// The router: the table, with the auth layer on every route not on the unauthenticated list.
pub fn router(state: ApiState) -> axum::Router {
    let open = unauthenticated(&state.app.live().config);
    let mut router = axum::Router::new();
    for r in routes() {
        let handler = if open.contains(&r.key().as_str()) || r.kind == Kind::Pipeline {
            r.handler
        } else {
            r.handler.route_layer(middleware::from_fn_with_state(
                (state.clone(), r.kind),
                authenticate,
            ))
        };
        router = router.route(r.path, handler);
    }
    router
        .fallback(|method: Method, uri: http::Uri| async move { no_route(&method, &uri, false) })
        .method_not_allowed_fallback(|method: Method, uri: http::Uri| async move {
            no_route(&method, &uri, true)
        })
        .with_state(state)
}

/// A path (or a method on a path) no route serves: 404 (405) in the error shape of the API the
/// path belongs to, so an SDK reports it as it would the provider's: Google's under `/v1beta/`
/// and for a `…/models/{m}:method` call, Anthropic's under `/v1/messages`, OpenAI's under any
/// other `/v1/`, the REST shape elsewhere. Answered without a token: it says nothing about
/// traffic. The path is quoted at most 200 bytes long.
fn no_route(method: &Method, uri: &http::Uri, known: bool) -> Response {
    let path = uri.path();
    let mut shown: String = path.chars().take(200).collect();
    if shown.len() < path.len() {
        shown.push('…');
    }
    let status = if known {
        StatusCode::METHOD_NOT_ALLOWED
    } else {
        StatusCode::NOT_FOUND
    };
    let message = if known {
        format!("{method} is not allowed on {shown}")
    } else {
        format!("Invalid URL ({method} {shown})")
    };
    let gemini = path.starts_with("/v1beta/") || (path.starts_with("/v1/") && path.contains(':'));
    let body = if gemini {
        serde_json::json!({"error": {
            "code": status.as_u16(),
            "message": message,
            "status": if known { "INVALID_ARGUMENT" } else { "NOT_FOUND" },
        }})
    } else if path.starts_with("/v1/messages") {
        serde_json::json!({"type": "error", "error": {
            "type": if known { "invalid_request_error" } else { "not_found_error" },
            "message": message,
        }})
    } else if path.starts_with("/v1/") {
        serde_json::json!({"error": {
            "message": message,
            "type": "invalid_request_error",
            "param": null,
            "code": if known { "method_not_allowed" } else { "unknown_url" },
        }})
    } else {
        return rest::api_error(status, &message).into_response();
    };
    (status, axum::Json(body)).into_response()
}

/// The auth layer: one lookup per request (the proxy's remembering [`laptime_proxy::auth`]
/// keeps it fast); see the module docs for who answers a failure.
pub async fn authenticate(
    State((state, kind)): State<(ApiState, Kind)>,
    mut req: Request,
    next: Next,
) -> Response {
    // A Gemini client may send its key as `?key=`; no other route takes a key in its URL.
    let path = req.uri().path();
    let gemini = kind == Kind::Proxy
        && laptime_proxy::ingress::GEMINI_COLLECTIONS
            .iter()
            .any(|c| path.starts_with(c));
    let query = req.uri().query().filter(|_| gemini);
    let found = state.app.auth.check_with_query(req.headers(), query).await;
    if kind == Kind::Proxy {
        req.extensions_mut().insert(found);
        return next.run(req).await;
    }
    let Authenticated { result, .. } = found;
    match result {
        Ok(p) => {
            req.extensions_mut().insert(p);
            next.run(req).await
        }
        Err(e) => rejection(kind, &e),
    }
}

/// A refused token on a route answered here: 500 when the store could not be read (the
/// gateway's fault), else 401 with `WWW-Authenticate: Bearer`.
fn rejection(kind: Kind, failure: &AuthFailure) -> Response {
    let (status, message) = match failure {
        AuthFailure::Unavailable => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "credentials could not be checked",
        ),
        AuthFailure::Missing | AuthFailure::Invalid => {
            (StatusCode::UNAUTHORIZED, "missing or invalid token")
        }
    };
    let mut response = match kind {
        Kind::Graphql => graphql::errors(status, message),
        Kind::Rest | Kind::Proxy | Kind::Pipeline => {
            rest::api_error(status, message).into_response()
        }
    };
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unauthenticated_entry_names_a_route_of_the_table() {
        let keys: Vec<String> = routes().iter().map(Route::key).collect();
        for open in UNAUTHENTICATED.iter().chain([&METRICS_ROUTE]) {
            assert!(keys.iter().any(|k| k == open), "{open} is not a route");
        }
    }

    #[test]
    fn the_pipeline_routes_are_the_model_calls_the_serving_threads_answer_directly() {
        let table = routes();
        let direct: Vec<String> = table
            .iter()
            .filter(|r| pipeline::model_call(&r.method, r.path).is_some())
            .map(Route::key)
            .collect();
        let pipeline: Vec<String> = table
            .iter()
            .filter(|r| r.kind == Kind::Pipeline)
            .map(Route::key)
            .collect();
        assert_eq!(direct, pipeline);
        assert_eq!(direct.len(), pipeline::MODEL_CALLS.len());
    }

    #[test]
    fn no_route_is_listed_twice() {
        let mut keys: Vec<String> = routes().iter().map(Route::key).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n);
    }
}
