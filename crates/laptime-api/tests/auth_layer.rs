//! The assembled router without a socket (`oneshot`), over a real SQLite store in a tempdir:
//! every route off the unauthenticated list refuses a request without a token, and refusals
//! come in each route's own error shape (the dialect's on proxy routes, which also record them).

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::time::Duration;

use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use laptime_api::routes::{routes, unauthenticated, Kind, UNAUTHENTICATED};
use laptime_proxy::config::Config;
use laptime_proxy::server::Gateway;
use laptime_store::auth::{self, Scope};
use laptime_store::{manage, Store};
use serde_json::Value;
use tower::ServiceExt;

struct Fixture {
    router: axum::Router,
    store: Store,
    admin: String,
    _gateway: Gateway,
    _dir: tempfile::TempDir,
}

async fn fixture(tweak: impl FnOnce(&mut Config)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let admin = store
        .with_conn(|c| auth::bootstrap(c, None, laptime_proxy::clock::now_unix_us()))
        .unwrap()
        .unwrap()
        .token;
    let mut cfg = Config::embedded_default(&|_| None);
    // Never called: every request here is refused before routing, or lists models.
    cfg.channels[0].base_url = Some("http://127.0.0.1:9".into());
    cfg.server.data_dir = dir.path().to_path_buf();
    tweak(&mut cfg);
    cfg.validate(&|_| None).unwrap();
    let gateway = Gateway::start(cfg, store.clone(), &|_| None).await.unwrap();
    let router = laptime_api::router(gateway.app.clone());
    Fixture {
        router,
        store,
        admin,
        _gateway: gateway,
        _dir: dir,
    }
}

/// A concrete path for a routed one (`{id}` → `x`, `{file}` → `app.js`).
fn concrete(path: &str) -> String {
    path.replace("{id}", "x").replace("{file}", "app.js")
}

async fn call(
    router: &axum::Router,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, Value) {
    let mut req = Request::builder().method(method.clone()).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = if method == Method::POST {
        req = req.header("content-type", "application/json");
        Body::from(
            r#"{"model":"sim-fast","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"input":"hi","query":"{ me { scope } }"}"#,
        )
    } else {
        Body::empty()
    };
    let resp = router
        .clone()
        .oneshot(req.body(body).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts.status, parts.headers, json)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test]
async fn every_route_off_the_unauthenticated_list_answers_401_without_a_token() {
    let f = fixture(|_| {}).await;
    let table = routes();
    assert!(table.len() >= 14, "the whole table is walked");
    for r in &table {
        let path = concrete(r.path);
        let bogus = bearer("lt_0000000000000000000000000000000000000000000000000000000000000000");
        for headers in [vec![], vec![("authorization", bogus.as_str())]] {
            let (status, h, body) = call(&f.router, r.method.clone(), &path, &headers).await;
            if UNAUTHENTICATED.contains(&r.key().as_str()) {
                assert_eq!(status, StatusCode::OK, "{} is open", r.key());
                continue;
            }
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{} {headers:?}: {body}",
                r.key()
            );
            let message = match r.kind {
                Kind::Graphql => &body["errors"][0]["message"],
                Kind::Rest | Kind::Proxy | Kind::Pipeline => &body["error"]["message"],
            };
            assert!(
                message.as_str().is_some_and(|m| !m.is_empty()),
                "{}: {body}",
                r.key()
            );
            if !matches!(r.kind, Kind::Proxy | Kind::Pipeline) {
                assert_eq!(h["www-authenticate"], "Bearer", "{}", r.key());
            }
        }
    }
}

#[tokio::test]
async fn metrics_public_opens_metrics_and_nothing_else() {
    let f = fixture(|cfg| cfg.server.metrics_public = true).await;
    let open = unauthenticated(&f._gateway.app.live().config);
    for r in routes() {
        let (status, _, _) = call(&f.router, r.method.clone(), &concrete(r.path), &[]).await;
        if open.contains(&r.key().as_str()) {
            assert_eq!(status, StatusCode::OK, "{}", r.key());
        } else {
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{}", r.key());
        }
    }
}

/// (path, whether the dialect is Anthropic's)
const PROXY_ROUTES: [(&str, bool); 3] = [
    ("/v1/chat/completions", false),
    ("/v1/responses", false),
    ("/v1/messages", true),
];

/// The stored (outcome, status, error_class, auth_us) of a request, waiting for the recorder.
async fn stored(store: &Store, request_id: &str) -> (String, u16, Option<String>, Option<i64>) {
    for _ in 0..300 {
        let id = request_id.to_string();
        let record = store
            .with_conn(move |c| laptime_store::records::stored(c, &id))
            .unwrap();
        if let Some(r) = record {
            return (
                r.outcome.as_str().to_string(),
                r.status,
                r.error_class.map(|c| c.as_str().to_string()),
                r.marks.auth.map(|a| a.as_micros() as i64),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no row for {request_id}");
}

fn assert_dialect_shape(anthropic: bool, body: &Value, code: &str, an_type: &str) {
    if anthropic {
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], an_type, "{body}");
    } else {
        assert_eq!(body["error"]["code"], code, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    }
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn missing_invalid_and_revoked_tokens_on_proxy_routes_get_401_in_the_dialects_shape_and_a_row(
) {
    let f = fixture(|_| {}).await;
    let revoked = f
        .store
        .with_conn(|c| {
            let t = auth::create_token(
                c,
                "default",
                Scope::Proxy,
                laptime_proxy::clock::now_unix_us(),
            )?;
            manage::revoke_token(
                c,
                &t.workspace.id,
                &t.key_id,
                laptime_proxy::clock::now_unix_us(),
            )?;
            Ok(t.token)
        })
        .unwrap();
    let unknown = "lt_0000000000000000000000000000000000000000000000000000000000000000";
    // Rows of calls without a principal are sampled: the first this many always get one.
    let mut calls = 0;
    for (path, anthropic) in PROXY_ROUTES {
        for token in [
            None,
            Some("not-a-token"),
            Some(unknown),
            Some(revoked.as_str()),
        ] {
            let auth_header = token.map(bearer);
            let headers: Vec<(&str, &str)> = match &auth_header {
                // Anthropic clients send x-api-key; OpenAI clients a bearer header.
                Some(_) if anthropic => vec![("x-api-key", token.unwrap_or_default())],
                Some(h) => vec![("authorization", h.as_str())],
                None => vec![],
            };
            let (status, h, body) = call(&f.router, Method::POST, path, &headers).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} {token:?}: {body}");
            assert_dialect_shape(anthropic, &body, "invalid_api_key", "authentication_error");
            calls += 1;
            if calls > laptime_proxy::record::UNAUTHENTICATED_ROWS_PER_S {
                continue;
            }
            let id = h["x-laptime-request-id"].to_str().unwrap();
            let (outcome, status, class, auth_us) = stored(&f.store, id).await;
            assert_eq!(
                (outcome.as_str(), status),
                ("rejected", 401),
                "{path} {token:?}"
            );
            assert_eq!(class.as_deref(), Some("unauthorized"));
            assert!(
                auth_us.is_some(),
                "the auth phase is timed on a refusal too"
            );
        }
    }
}

#[tokio::test]
async fn a_token_without_the_needed_scope_gets_403_in_the_routes_own_shape() {
    let f = fixture(|_| {}).await;
    let (read, proxy) = f
        .store
        .with_conn(|c| {
            Ok((
                auth::create_token(
                    c,
                    "default",
                    Scope::Read,
                    laptime_proxy::clock::now_unix_us(),
                )?
                .token,
                auth::create_token(
                    c,
                    "default",
                    Scope::Proxy,
                    laptime_proxy::clock::now_unix_us(),
                )?
                .token,
            ))
        })
        .unwrap();
    for (path, anthropic) in PROXY_ROUTES {
        let h = bearer(&read);
        let (status, headers, body) = call(
            &f.router,
            Method::POST,
            path,
            &[("authorization", h.as_str())],
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert_dialect_shape(anthropic, &body, "insufficient_scope", "permission_error");
        let id = headers["x-laptime-request-id"].to_str().unwrap();
        let (outcome, status, class, _) = stored(&f.store, id).await;
        assert_eq!((outcome.as_str(), status), ("rejected", 403));
        assert_eq!(class.as_deref(), Some("forbidden"));
    }
    // A read token cannot list models; a proxy token cannot read the log or the metrics.
    let cases = [
        (&read, "/v1/models"),
        (&proxy, "/api/requests"),
        (&proxy, "/api/usage"),
        (&proxy, "/api/requests/x"),
        (&read, "/metrics"),
        (&proxy, "/metrics"),
    ];
    for (token, path) in cases {
        let h = bearer(token);
        let (status, _, body) = call(
            &f.router,
            Method::GET,
            path,
            &[("authorization", h.as_str())],
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert!(body["error"]["message"].as_str().is_some(), "{body}");
    }
    // GraphQL answers a proxy token's read with a GraphQL error.
    let req = Request::post("/graphql")
        .header("authorization", bearer(&proxy))
        .header("content-type", "application/json")
        .body(Body::from(r#"{"query":"{ channels { name } }"}"#))
        .unwrap();
    let resp = f.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("proxy token cannot read")),
        "{body}"
    );
}

#[tokio::test]
async fn an_admin_token_passes_the_layer_on_every_route() {
    let f = fixture(|_| {}).await;
    let h = bearer(&f.admin);
    for (method, path) in [
        (Method::GET, "/api/requests"),
        (Method::GET, "/api/usage"),
        (Method::GET, "/metrics"),
        (Method::GET, "/v1/models"),
        (Method::POST, "/graphql"),
    ] {
        let (status, _, body) =
            call(&f.router, method, path, &[("authorization", h.as_str())]).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    let (status, _, _) = call(
        &f.router,
        Method::GET,
        "/api/requests/x",
        &[("authorization", h.as_str())],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_model_is_retrieved_in_the_clients_shape_and_an_unreachable_one_is_404() {
    let f = fixture(|_| {}).await;
    let h = bearer(&f.admin);
    let auth = [("authorization", h.as_str())];
    let (status, _, listed) = call(&f.router, Method::GET, "/v1/models", &auth).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let first = listed["data"][0].clone();
    let id = first["id"].as_str().unwrap();
    let path = format!("/v1/models/{id}");

    let (status, _, one) = call(&f.router, Method::GET, &path, &auth).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one, first, "the retrieved model is the listed one");

    let anthropic = [
        ("x-api-key", f.admin.as_str()),
        ("anthropic-version", "2023-06-01"),
    ];
    let (status, _, one) = call(&f.router, Method::GET, &path, &anthropic).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(
        (one["type"].as_str(), one["id"].as_str()),
        (Some("model"), Some(id))
    );

    let (status, _, missing) =
        call(&f.router, Method::GET, "/v1/models/no-such-model", &auth).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(missing["error"]["code"], "model_not_found", "{missing}");
    let (status, _, missing) = call(
        &f.router,
        Method::GET,
        "/v1/models/no-such-model",
        &anthropic,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(missing["error"]["type"], "not_found_error", "{missing}");

    let (status, _, _) = call(&f.router, Method::GET, &path, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
