//! `GET /readyz` as an operator's probe sees it, through the assembled router over a real SQLite
//! store: a database held by another connection is a stalled store after the probe's bound
//! (paused time), a database that cannot grow is a full disk, and both are `ready` again once
//! the store answers and a batch is written.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::time::Duration;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use laptime_api::health::{PROBE_BOUND, PROBE_REUSE};
use laptime_proxy::config::Config;
use laptime_proxy::server::Gateway;
use laptime_store::auth::{self, Scope};
use laptime_store::Store;
use tower::ServiceExt;

struct Fixture {
    router: axum::Router,
    store: Store,
    gateway: Gateway,
    _dir: tempfile::TempDir,
}

/// A gateway on a fresh store; `prepare` runs on the store before the recorder opens its
/// connection.
async fn fixture(prepare: impl FnOnce(&Store)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    store
        .with_conn(|c| auth::bootstrap(c, None, laptime_proxy::clock::now_unix_us()))
        .unwrap();
    prepare(&store);
    let mut cfg = Config::embedded_default(&|_| None);
    // Never called: the requests here name a model no channel serves.
    cfg.channels[0].base_url = Some("http://127.0.0.1:9".into());
    cfg.server.data_dir = dir.path().to_path_buf();
    cfg.validate(&|_| None).unwrap();
    let gateway = Gateway::start(cfg, store.clone(), &|_| None).await.unwrap();
    let router = laptime_api::router(gateway.app.clone());
    Fixture {
        router,
        store,
        gateway,
        _dir: dir,
    }
}

async fn readyz(router: &axum::Router) -> (StatusCode, String) {
    let resp = router
        .clone()
        .oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(start_paused = true)]
async fn a_database_held_by_another_connection_is_a_stalled_store_after_the_probe_bound() {
    let f = fixture(|_| {}).await;
    assert_eq!(readyz(&f.router).await, (StatusCode::OK, "ready".into()));
    // Another process takes the write lock and keeps it (a backup, a long migration, a stuck
    // writer). Only explicit `advance` moves the clock while the probe waits on it.
    let blocker = f.store.connect().unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    tokio::time::advance(PROBE_REUSE).await;
    let started = tokio::time::Instant::now();
    let probe = tokio::spawn({
        let router = f.router.clone();
        async move { readyz(&router).await }
    });
    let step = Duration::from_millis(100);
    while !probe.is_finished() {
        assert!(
            started.elapsed() < PROBE_BOUND * 2,
            "the probe never gave up"
        );
        tokio::task::yield_now().await;
        tokio::time::advance(step).await;
        tokio::task::yield_now().await;
    }
    let waited = started.elapsed();
    assert!(
        waited >= PROBE_BOUND && waited <= PROBE_BOUND + step,
        "{waited:?}"
    );
    let (status, reason) = probe.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reason.starts_with("store stalled"), "{reason}");
    // While it stays locked, later probes say so too (they wait on the same probe).
    tokio::time::advance(PROBE_REUSE).await;
    let again = tokio::spawn({
        let router = f.router.clone();
        async move { readyz(&router).await }
    });
    while !again.is_finished() {
        tokio::task::yield_now().await;
        tokio::time::advance(step).await;
    }
    assert!(again.await.unwrap().1.starts_with("store stalled"));
    // The lock goes: the waiting probe gets it, and the next `/readyz` is ready.
    blocker.execute_batch("COMMIT").unwrap();
    let mut answer = (StatusCode::SERVICE_UNAVAILABLE, String::new());
    for _ in 0..100 {
        tokio::time::advance(PROBE_REUSE).await;
        answer = readyz(&f.router).await;
        if answer.0 == StatusCode::OK {
            break;
        }
    }
    assert_eq!(answer, (StatusCode::OK, "ready".into()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_answers_503_until_a_record_batch_is_written_again() {
    let f = fixture(|store| {
        store.cap_pages(16).unwrap();
    })
    .await;
    let token = f
        .store
        .with_conn(|c| auth::create_token(c, "default", Scope::Proxy, 0))
        .unwrap()
        .token;
    // Each refused request (a model no channel serves) is recorded: a row and its rollups.
    // The record is queued when the answer's body is done with (here: dropped).
    let request = |n: usize| {
        Request::post("/v1/chat/completions")
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Body::from(format!(
                r#"{{"model":"no-such-model","messages":[{{"role":"user","content":"hi {n}"}}]}}"#
            )))
            .unwrap()
    };
    // Sends request `n` and checks it was refused (and so recorded).
    let refused = |n: usize| {
        let router = f.router.clone();
        async move {
            let status = router.oneshot(request(n)).await.unwrap().status();
            assert_eq!(status, StatusCode::NOT_FOUND);
        }
    };
    let recorder = &f.gateway.app.recorder;
    let mut sent = 0;
    // Batches of 20 until one fails: a failing batch is written again and again (nothing is
    // lost while the queue has room), so the flush does not complete while the store is full.
    let reason = loop {
        assert!(sent < 20_000, "the capped store never filled up");
        for _ in 0..20 {
            refused(sent).await;
            sent += 1;
        }
        let flushed = recorder.flush(Duration::from_secs(1)).await;
        let (status, said) = readyz(&f.router).await;
        if status != StatusCode::OK {
            assert!(!flushed, "a full store cannot have written every record");
            break said;
        }
    };
    assert!(reason.starts_with("degraded: disk full:"), "{reason}");
    let stats = recorder.stats();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        load(&stats.written) > 0,
        "{sent} sent, none written: the cap left no room at all"
    );
    // Still full after more traffic, and the new record waits too.
    refused(sent).await;
    sent += 1;
    assert!(!recorder.flush(Duration::from_millis(500)).await);
    let (status, reason) = readyz(&f.router).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reason.starts_with("degraded: disk full:"), "{reason}");
    // Room again (the operator frees space; here rows and rollups go, as retention deletes them): the next
    // batch is written and the gateway is ready.
    f.store
        .with_conn(|c| Ok(c.execute_batch("DELETE FROM requests; DELETE FROM rollups")?))
        .unwrap();
    refused(sent).await;
    sent += 1;
    assert!(recorder.flush(Duration::from_secs(10)).await);
    assert_eq!(readyz(&f.router).await, (StatusCode::OK, "ready".into()));
    // Every record kept while the store was full was written once it had room: none lost.
    assert_eq!(load(&stats.written), sent as u64);
    assert_eq!((load(&stats.dropped), load(&stats.given_up)), (0, 0));
}
