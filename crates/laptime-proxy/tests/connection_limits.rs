//! Held connections cannot lock real requests out, over real sockets on 127.0.0.1: while a
//! client holds as many idle connections as this machine's file limit allows (20,000 where it
//! can), the gateway keeps at most its cap open, closes the oldest idle ones to make room, and
//! answers real requests; a head trickled byte by byte is cut at the head timeout.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A metric's value from the exposition.
fn metric(text: &str, name: &str) -> f64 {
    let found = text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok());
    assert!(found.is_some(), "no {name} in /metrics");
    found.unwrap_or_default()
}

async fn metrics(h: &Harness) -> String {
    let r = h
        .http
        .get(h.url("/metrics"))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

async fn real_request(h: &Harness) -> u16 {
    // A client of its own: a new connection, as a real client arriving now would open.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let r = client
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(&h.token)
        .json(&body_for("chat", "sim-fast", false))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let v: Value = r.json().await.unwrap();
    assert!(v["choices"][0]["message"].is_object(), "{v}");
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_beyond_the_cap_make_room_and_real_requests_are_served() {
    // The gateway raises the soft open-file limit to the hard one at start; the test's own
    // sockets and the gateway's share this process's limit.
    let soft = laptime_proxy::listen::raise_fd_limit();
    let held_count = 20_000.min(usize::try_from(soft.saturating_sub(1_500) / 2).unwrap());
    assert!(held_count >= 400, "fd limit {soft} too low for this test");
    let cap = held_count / 4;
    let h = start_with(|cfg, _| {
        cfg.server.max_connections = cap;
        cfg.server.header_read_timeout_ms = 120_000;
    })
    .await;
    let mut held = Vec::with_capacity(held_count);
    for _ in 0..held_count {
        held.push(TcpStream::connect(h.addr).await.unwrap());
    }
    for _ in 0..5 {
        assert_eq!(real_request(&h).await, 200);
    }
    let m = metrics(&h).await;
    let open = metric(&m, "laptime_connections_open");
    assert!(open <= cap as f64, "{open} open");
    let evicted = metric(&m, "laptime_connections_evicted_total");
    assert!(evicted >= (held_count - cap) as f64, "{evicted} evicted");
    assert_eq!(metric(&m, "laptime_connections_refused_total"), 0.0);
    // The oldest held connections were closed by the gateway.
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), held[0].read(&mut byte)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    drop(held);
    h.stop().await;
}

#[tokio::test]
async fn a_head_trickled_byte_by_byte_is_cut_and_requests_meanwhile_are_served() {
    let h = start_with(|cfg, _| cfg.server.header_read_timeout_ms = 300).await;
    let mut slow = TcpStream::connect(h.addr).await.unwrap();
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaa";
    let trickle = async {
        for (sent, b) in head.iter().enumerate() {
            if slow.write_all(&[*b]).await.is_err() {
                return Some(sent);
            }
            assert_eq!(real_request(&h).await, 200);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    };
    // The head would take over 6 s to arrive: the gateway closes the connection long before
    // the trickle ends (a write fails once the close is seen).
    let cut = tokio::time::timeout(Duration::from_secs(30), trickle)
        .await
        .unwrap();
    let sent = cut.expect("the trickled connection was never closed");
    assert!(sent < head.len() / 2, "cut only after {sent} bytes");
    h.stop().await;
}
