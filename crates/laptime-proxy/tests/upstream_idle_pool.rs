//! Idle upstream connections a serving thread keeps for later calls: at most
//! `server.upstream_idle_per_thread` per upstream; the others a burst opened close as their
//! answers end, and the kept ones carry the next calls without a new connection.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod common;

use std::time::Duration;

use common::{body_for, start_with, Harness};

/// Answers sent at once, each 320 ms long (`sim-long`), so each holds a connection of its own.
const BURST: u64 = 6;

async fn burst(h: &Harness, n: u64) {
    let body = body_for("chat", "sim-long", false);
    let calls = (0..n).map(|_| h.post("/v1/chat/completions", &body));
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r.status(), 200);
    }
}

/// Connections open at the sim, besides the one this test reads its stats over.
async fn upstream_connections(h: &Harness) -> u64 {
    h.sim_stats().await["open_connections"].as_u64().unwrap() - 1
}

/// Upstream connections once at most `left` remain open: a close reaches the sim when it reads
/// the end of the connection, so this waits for it (bounded, 5 s).
async fn closed_down_to(h: &Harness, left: u64) -> u64 {
    let mut open = upstream_connections(h).await;
    for _ in 0..50 {
        if open <= left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        open = upstream_connections(h).await;
    }
    open
}

/// A one-thread gateway keeping `idle` idle connections per upstream.
async fn keeping(idle: usize) -> Harness {
    start_with(|cfg, _| {
        cfg.server.threads = 1;
        cfg.server.upstream_idle_per_thread = idle;
    })
    .await
}

#[tokio::test]
async fn past_the_idle_cap_a_bursts_connections_close_and_the_kept_ones_carry_the_next_calls() {
    let h = keeping(2).await;
    assert_eq!(upstream_connections(&h).await, 0);
    burst(&h, BURST).await;
    assert_eq!(
        closed_down_to(&h, 2).await,
        2,
        "the cap's two stay open, the other four close"
    );
    let served = h.sim_stats().await["requests"].as_u64().unwrap();
    burst(&h, 2).await;
    let stats = h.sim_stats().await;
    assert_eq!(stats["requests"].as_u64().unwrap(), served + 2);
    assert_eq!(
        upstream_connections(&h).await,
        2,
        "no new connection: {stats:#}"
    );
    h.stop().await;
}

#[tokio::test]
async fn under_the_default_cap_every_connection_of_a_burst_stays_for_the_next() {
    let h = keeping(laptime_proxy::config::UPSTREAM_IDLE_PER_THREAD).await;
    burst(&h, BURST).await;
    // Long enough for closes to reach the sim (they come within milliseconds): none does.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(upstream_connections(&h).await, BURST);
    burst(&h, BURST).await;
    assert_eq!(upstream_connections(&h).await, BURST);
    h.stop().await;
}

#[tokio::test]
async fn with_no_idle_connections_kept_each_call_closes_its_own() {
    let h = keeping(0).await;
    for _ in 0..3 {
        burst(&h, 2).await;
        assert_eq!(
            closed_down_to(&h, 0).await,
            0,
            "a connection stayed open after its answer"
        );
    }
    h.stop().await;
}
