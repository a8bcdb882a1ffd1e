//! `GET /graphql` serves the built-in query page: its page and assets come from this origin
//! only, under a strict Content-Security-Policy.

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use laptime_proxy::config::Config;
use laptime_proxy::server::Gateway;
use laptime_store::Store;
use tower::ServiceExt;

#[tokio::test]
async fn the_query_page_and_its_assets_reference_no_external_url_and_carry_the_csp() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let mut cfg = Config::embedded_default(&|_| None);
    cfg.channels[0].base_url = Some("http://127.0.0.1:9".into());
    cfg.server.data_dir = dir.path().to_path_buf();
    let gateway = Gateway::start(cfg, store, &|_| None).await.unwrap();
    let router = laptime_api::router(gateway.app.clone());
    for (path, content_type) in [
        ("/graphql", "text/html; charset=utf-8"),
        ("/assets/query.js", "text/javascript; charset=utf-8"),
        ("/assets/query.css", "text/css; charset=utf-8"),
    ] {
        let resp = router
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let h = resp.headers();
        assert_eq!(h["content-type"], content_type, "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert_eq!(csp, laptime_api::query_page::CSP);
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {directive}");
        }
        let text = String::from_utf8(
            resp.into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap();
        assert!(!text.is_empty());
        for external in ["http://", "https://", "//cdn", "unpkg", "jsdelivr"] {
            assert!(!text.contains(external), "{path} references {external}");
        }
    }
    let page = router
        .oneshot(Request::get("/graphql").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let text = page.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(text.to_vec()).unwrap();
    assert!(text.contains(r#"id="token""#), "a token field");
    assert!(text.contains(r#"src="/assets/query.js""#));
}
