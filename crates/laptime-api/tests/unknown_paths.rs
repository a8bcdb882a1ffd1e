//! A path no route serves answers 404 (a wrong method 405) in the error shape of the API the
//! path belongs to, never an empty body: OpenAI's under `/v1/`, Anthropic's under
//! `/v1/messages`, Google's under `/v1beta/`, the REST shape elsewhere.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use laptime_proxy::config::Config;
use laptime_proxy::server::Gateway;
use laptime_store::Store;
use serde_json::Value;
use tower::ServiceExt;

async fn ask(router: &axum::Router, method: Method, path: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_in_their_apis_error_shape() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let mut cfg = Config::embedded_default(&|_| None);
    cfg.server.data_dir = dir.path().to_path_buf();
    // Never called: no request here reaches a channel.
    cfg.channels[0].base_url = Some("http://127.0.0.1:9".into());
    let gateway = Gateway::start(cfg, store, &|_| None).await.unwrap();
    let router = laptime_api::router(gateway.app.clone());

    let (status, v) = ask(&router, Method::POST, "/v1/embeddingz").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["message"], "Invalid URL (POST /v1/embeddingz)");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["code"], "unknown_url");

    let (status, v) = ask(&router, Method::POST, "/v1/messages/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "not_found_error");

    let (status, v) = ask(&router, Method::POST, "/v1beta/files").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["code"], 404);
    assert_eq!(v["error"]["status"], "NOT_FOUND");

    // A route that exists, with a method it does not take.
    let (status, v) = ask(&router, Method::GET, "/v1/chat/completions").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(v["error"]["code"], "method_not_allowed");
    let (status, v) = ask(&router, Method::DELETE, "/v1/messages").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(v["error"]["type"], "invalid_request_error");

    // Outside the model APIs: the REST shape.
    let (status, v) = ask(&router, Method::GET, "/api/nothing-here").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/api/nothing-here"));

    // A long path is quoted cut short.
    let long = format!("/v1/{}", "a".repeat(5_000));
    let (_, v) = ask(&router, Method::POST, &long).await;
    assert!(v["error"]["message"].as_str().unwrap().len() < 300);
}
