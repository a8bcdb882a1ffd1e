//! Answers that end badly, over real sockets: a clean close without a terminal, a TCP reset, a
//! stall, and a client that leaves mid-stream; and what `/sim/stats` says about each.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use std::time::Duration;

use common::{scripted, Harness};
use serde_json::{json, Value};

/// Reads chunks until the body ends (Ok) or fails (Err), collecting what arrived.
async fn read_all(resp: &mut reqwest::Response) -> (String, Result<(), reqwest::Error>) {
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return (String::from_utf8(body).unwrap(), Ok(())),
            Err(e) => return (String::from_utf8(body).unwrap(), Err(e)),
        }
    }
}

fn is_reset(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionReset {
                return true;
            }
        }
        source = err.source();
    }
    false
}

fn five_tokens(end: &str) -> Value {
    json!({"first_text_ms": 10, "text_tokens": 5, "tokens_per_s": 200, "end": end})
}

#[tokio::test]
async fn end_close_ends_the_body_cleanly_without_a_terminal() {
    let h = Harness::start().await;
    let mut resp = h
        .post(
            "/v1/chat/completions",
            &scripted(true, five_tokens("close")),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let (body, end) = read_all(&mut resp).await;
    assert!(end.is_ok(), "a clean EOF: {end:?}");
    let events = common::sse(&body);
    assert_eq!(events.len(), 1 + 5, "role chunk and five text deltas");
    assert!(!body.contains("[DONE]") && !body.contains("finish_reason\":\"stop"));
    let stats = h.wait_for_stats(|s| s["streams_completed"] == 1).await;
    assert_eq!(stats["streams_dropped"], 0);
}

#[tokio::test]
async fn end_reset_makes_the_client_see_a_connection_reset_mid_body() {
    let h = Harness::start().await;
    let mut resp = h
        .post("/v1/responses", &scripted(true, five_tokens("reset")))
        .await;
    assert_eq!(resp.status(), 200, "the head arrives before the reset");
    let (body, end) = read_all(&mut resp).await;
    let error = end.expect_err("the body must fail, not end");
    assert!(is_reset(&error), "a TCP RST, not a FIN: {error:?}");
    assert!(body.starts_with("event: response.created\n"), "{body}");
    assert!(!body.contains("response.completed"));
}

#[tokio::test]
async fn end_stall_delivers_the_deltas_then_nothing_until_the_client_leaves() {
    let h = Harness::start().await;
    let mut resp = h
        .post("/v1/messages", &scripted(true, five_tokens("stall")))
        .await;
    assert_eq!(resp.status(), 200);
    let mut body = String::new();
    while body.matches("text_delta").count() < 5 {
        let chunk = resp
            .chunk()
            .await
            .unwrap()
            .expect("the stall holds the body open");
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    // Nothing more comes, and the body does not end.
    let more = tokio::time::timeout(Duration::from_millis(300), resp.chunk()).await;
    assert!(more.is_err(), "expected silence, got {more:?}");
    assert_eq!(h.get_json("/sim/stats").await["streams_dropped"], 0);

    drop(resp);
    let stats = h.wait_for_stats(|s| s["streams_dropped"] == 1).await;
    assert_eq!(stats["streams_dropped"], 1, "{stats}");
    assert_eq!(stats["streams_completed"], 0, "{stats}");
}

#[tokio::test]
async fn a_client_leaving_mid_stream_of_trace_c_is_counted_as_dropped() {
    let h = Harness::start().await;
    let request = json!({"model": "sim-trace-c", "stream": true, "messages": []});
    let mut resp = h.post("/v1/chat/completions", &request).await;
    let mut body = String::new();
    // The first text delta of trace C is due at 430 ms; the stream runs to 20.43 s.
    while !body.contains("\"content\":\"Sure\"") {
        let chunk = resp.chunk().await.unwrap().unwrap();
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    drop(resp);
    let stats = h.wait_for_stats(|s| s["streams_dropped"] == 1).await;
    assert_eq!(stats["streams_dropped"], 1, "{stats}");
    assert_eq!(stats["streams_completed"], 0, "{stats}");
}

#[tokio::test]
async fn a_client_leaving_before_the_head_is_counted_as_dropped() {
    let h = Harness::start().await;
    let request = scripted(false, json!({"headers_ms": 5000}));
    let pending = h
        .client
        .post(h.url("/v1/chat/completions"))
        .body(request.to_string())
        .send();
    let gave_up = tokio::time::timeout(Duration::from_millis(150), pending).await;
    assert!(gave_up.is_err());
    let stats = h.wait_for_stats(|s| s["streams_dropped"] == 1).await;
    assert_eq!(stats["streams_dropped"], 1, "{stats}");
}

#[tokio::test]
async fn open_connections_follow_the_sockets() {
    let h = Harness::start().await;
    let client = reqwest::Client::new();
    let resp = client
        .post(h.url("/v1/chat/completions"))
        .body(json!({"model": "sim-fast"}).to_string())
        .send()
        .await
        .unwrap();
    resp.text().await.unwrap();
    // The pooled keep-alive connection is still open.
    let stats = h
        .wait_for_stats(|s| s["open_connections"].as_u64() >= Some(1))
        .await;
    assert!(stats["open_connections"].as_u64() >= Some(1), "{stats}");
    drop(client);
    // Only the harness's own stats connection is left.
    let stats = h.wait_for_stats(|s| s["open_connections"] == 1).await;
    assert_eq!(stats["open_connections"], 1, "{stats}");
    assert_eq!(stats["streams_completed"], 1, "{stats}");
}

#[tokio::test]
async fn serve_returns_after_shutdown_even_with_a_stalled_stream() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(laptime_sim::serve(
        listener,
        laptime_sim::Sim::new(),
        async {
            let _ = stopped.await;
        },
    ));
    let mut resp = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .body(scripted(true, five_tokens("stall")).to_string())
        .send()
        .await
        .unwrap();
    resp.chunk().await.unwrap().unwrap();
    stop.send(()).unwrap();
    let served = tokio::time::timeout(Duration::from_secs(2), server).await;
    assert!(matches!(served, Ok(Ok(Ok(())))), "{served:?}");
}
