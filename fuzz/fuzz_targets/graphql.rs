//! GraphQL input: any request body (query text and variables, or bytes that are not JSON) sent
//! as an admin to `POST /graphql` of the assembled router over a real SQLite store in a temp
//! dir is answered 200 or 400 with a JSON body, never a 500 or a panic.
#![no_main]

use std::sync::OnceLock;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use laptime_proxy::config::Config;
use laptime_proxy::server::Gateway;
use laptime_store::Store;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

struct Fixture {
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    admin: String,
    _gateway: Gateway,
    _dir: tempfile::TempDir,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (router, admin, gateway) = rt.block_on(async {
            let store = Store::open_dir(dir.path()).unwrap();
            let admin = store
                .bootstrap(None, laptime_proxy::clock::now_unix_us())
                .await
                .unwrap()
                .unwrap()
                .token;
            let mut cfg = Config::embedded_default(&|_| None);
            cfg.channels[0].base_url = Some("http://127.0.0.1:9".into());
            cfg.server.data_dir = dir.path().to_path_buf();
            let gateway = Gateway::start(cfg, store, &|_| None).await.unwrap();
            (laptime_api::router(gateway.app.clone()), admin, gateway)
        });
        Fixture {
            rt,
            router,
            admin,
            _gateway: gateway,
            _dir: dir,
        }
    })
}

fuzz_target!(|input: (&str, &str, bool)| {
    let (query, variables, raw) = input;
    let f = fixture();
    // Either the fuzzer's bytes as the whole body, or a request built from its strings (the
    // variables parsed when they are JSON).
    let body = if raw {
        query.as_bytes().to_vec()
    } else {
        let mut r = serde_json::json!({ "query": query });
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(variables) {
            r["variables"] = v;
        }
        serde_json::to_vec(&r).unwrap()
    };
    let (status, bytes) = f.rt.block_on(async {
        let resp = f
            .router
            .clone()
            .oneshot(
                Request::post("/graphql")
                    .header("authorization", format!("Bearer {}", f.admin))
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = resp.status();
        (status, resp.into_body().collect().await.unwrap().to_bytes())
    });
    assert!(
        status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
        "{status}"
    );
    assert!(serde_json::from_slice::<serde_json::Value>(&bytes).is_ok());
});
