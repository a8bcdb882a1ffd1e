//! What rate-limit admission costs a request: `admit` (every limit a token and its workspace
//! can have: requests and tokens per minute, requests in flight, for both scopes), the
//! settlement of the token estimate and the release of the place in flight, against the same
//! call for a principal without limits (the request path's case when none are set).
//!
//! `with_every_limit_shared_redis` is the same with the windows in Redis
//! (`LAPTIME_BENCH_REDIS_URL`, by default the local server on 127.0.0.1:6379): one script call
//! per admission, and the settlement sent off the request path.
//!
//! Run: `cargo bench -p laptime-proxy --bench admission`.

#![expect(clippy::unwrap_used, reason = "a benchmark fails loudly")]

use std::hint::black_box;
use std::sync::Arc;

use laptime_core::limit::{Applicable, Limits};
use laptime_proxy::limits::{Ask, Limiter};
use tokio::time::Instant;

fn main() {
    divan::main();
}

/// The request path's kind of runtime: one thread.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn every_limit() -> Applicable {
    // Large enough that no request is ever refused: the admitted path is the measured one.
    let l = Limits {
        rpm: Some(u64::MAX / 2),
        tpm: Some(u64::MAX / 2),
        concurrent: Some(u64::MAX / 2),
    };
    Applicable {
        workspace: l,
        token: l,
    }
}

fn admit_settle_release(rt: &tokio::runtime::Runtime, limiter: &Arc<Limiter>, limits: &Applicable) {
    let ask = Ask {
        workspace_id: "ws_0123456789abcdef",
        key_id: "key_0123456789abcdef",
        limits,
        tokens: 1_500,
    };
    rt.block_on(async {
        let now = Instant::now();
        if let Some(ticket) = limiter.admit(black_box(ask), now).await.unwrap() {
            ticket.settle(black_box(420), now);
        }
    });
}

#[divan::bench]
fn with_every_limit(b: divan::Bencher) {
    let rt = runtime();
    let limiter = Arc::new(Limiter::new());
    let limits = every_limit();
    b.bench_local(|| admit_settle_release(&rt, &limiter, &limits));
}

#[divan::bench]
fn with_every_limit_shared_redis(b: divan::Bencher) {
    let rt = runtime();
    let url = std::env::var("LAPTIME_BENCH_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let windows = laptime_proxy::shared_limits::SharedWindows::new(&url, "laptime-bench").unwrap();
    let fallbacks = prometheus::IntCounter::new("fallbacks", "Redis did not answer").unwrap();
    let limiter = Arc::new(Limiter::new().with_shared(Arc::new(windows), fallbacks.clone()));
    let limits = every_limit();
    b.bench_local(|| admit_settle_release(&rt, &limiter, &limits));
    assert_eq!(fallbacks.get(), 0, "every admission was Redis'");
}

#[divan::bench]
fn without_limits(b: divan::Bencher) {
    let rt = runtime();
    let limiter = Arc::new(Limiter::new());
    let limits = Applicable::default();
    b.bench_local(|| admit_settle_release(&rt, &limiter, &limits));
}
