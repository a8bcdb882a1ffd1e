//! The in-band timing a request's record reports is what the client's bytes contained: the
//! gateway notes the carrier as it hands it over, and REST and GraphQL answer from that stored
//! fact. Each case reads the client's bytes and compares them with both APIs.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod common;

use common::*;
use laptime_proxy::config::{CacheConfig, RouteConfig};
use serde_json::{json, Value};

const QUERY: &str = "query($w: ID!, $r: ID!) {
  request(workspaceId: $w, requestId: $r) { outcome inBand { carrier trailers line note derived } } }";

/// The timing line the client's stream carried, if any.
fn comment_in(client_bytes: &str) -> Option<String> {
    client_bytes
        .lines()
        .find(|l| l.starts_with(": x-laptime-timing"))
        .map(str::to_string)
}

/// Posts `body` to the Chat endpoint; returns the request id, the `Server-Timing` header and
/// the body the client got.
async fn call(h: &Harness, body: &Value) -> (String, Option<String>, String) {
    let r = h.post("/v1/chat/completions", body).await;
    let id = request_id(&r);
    let timing = r
        .headers()
        .get("server-timing")
        .map(|v| format!("Server-Timing: {}", v.to_str().unwrap()));
    (id, timing, r.text().await.unwrap())
}

/// Asserts REST and GraphQL both report `carrier` with exactly `line`, as stored (not derived),
/// and returns the REST row.
async fn api_says(h: &Harness, id: &str, carrier: &str, line: Option<&str>) -> Value {
    let row = h.row(id).await;
    let b = &row["in_band"];
    assert_eq!(b["carrier"], carrier, "{row}");
    assert_eq!(
        b["line"].as_str(),
        line,
        "the line the client read, byte for byte"
    );
    assert_eq!(
        (&b["derived"], &b["trailers"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(
        b["note"].is_null(),
        line.is_some(),
        "a note only when nothing was sent"
    );
    let (_, v) = h
        .gql(&h.token, QUERY, json!({"w": "default", "r": id}))
        .await;
    let g = &v["data"]["request"]["inBand"];
    assert_eq!(g["carrier"], carrier, "{v}");
    assert_eq!(g["line"].as_str(), line);
    assert_eq!(g["derived"], false);
    row
}

fn chat(model: &str, stream: bool, script: Option<Value>) -> Value {
    let mut body = json!({"model": model, "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]});
    if let Some(s) = script {
        body["laptime_sim"] = s;
    }
    body
}

#[tokio::test]
async fn a_chat_stream_ending_with_an_error_event_reports_the_comment_its_client_got() {
    let h = start().await;
    let (id, _, bytes) = call(&h, &chat("sim-overloaded-in-band", true, None)).await;
    assert!(bytes.contains("server_is_overloaded"), "{bytes}");
    assert!(bytes.ends_with("data: [DONE]\n\n"), "{bytes}");
    // Chat's [DONE] follows the error event, and the comment goes before it.
    let line = comment_in(&bytes).unwrap();
    let row = api_says(&h, &id, "sse_comment", Some(&line)).await;
    assert_eq!(row["outcome"], "upstream_error");
    assert_eq!(row["error_class"], "stream_error");
    h.stop().await;
}

#[tokio::test]
async fn a_cut_stream_reports_no_line_because_its_client_got_none() {
    let h = start().await;
    let script = json!({"first_text_ms": 20, "text_tokens": 6, "tokens_per_s": 200,
        "cut_after": 2, "end": "close"});
    let (id, _, bytes) = call(&h, &chat("sim-fast", true, Some(script))).await;
    assert_eq!(comment_in(&bytes), None, "{bytes}");
    let row = api_says(&h, &id, "none", None).await;
    assert_eq!(row["outcome"], "upstream_closed_early");
    h.stop().await;
}

#[tokio::test]
async fn a_completed_stream_reports_the_comment_its_client_got() {
    let h = start().await;
    let (id, timing, bytes) = call(&h, &chat("sim-fast", true, None)).await;
    assert_eq!(timing, None, "a stream has no Server-Timing");
    let line = comment_in(&bytes).unwrap();
    let row = api_says(&h, &id, "sse_comment", Some(&line)).await;
    assert_eq!(row["outcome"], "completed");
    h.stop().await;
}

#[tokio::test]
async fn a_non_streamed_answer_reports_its_server_timing_header() {
    let h = start().await;
    let (id, timing, bytes) = call(&h, &chat("sim-fast", false, None)).await;
    assert_eq!(comment_in(&bytes), None);
    let timing = timing.unwrap();
    api_says(&h, &id, "server_timing", Some(&timing)).await;
    h.stop().await;
}

#[tokio::test]
async fn a_cache_hit_reports_no_line_because_its_client_got_none() {
    let h = start_with(|cfg, _| {
        cfg.routes.push(RouteConfig {
            model: "sim-fast".into(),
            failover: Default::default(),
            timeouts: Default::default(),
            cache: Some(CacheConfig {
                ttl_s: 60,
                max_entries: 100,
                max_bytes: 1 << 20,
                max_entry_bytes: 1 << 16,
                shared: false,
            }),
            hedge: None,
            translation: Default::default(),
            context_fallback: None,
        });
    })
    .await;
    for stream in [true, false] {
        let body = chat("sim-fast", stream, None);
        let (first, _, _) = call(&h, &body).await;
        h.row(&first).await;
        let (id, timing, bytes) = call(&h, &body).await;
        assert_eq!((timing, comment_in(&bytes)), (None, None), "{bytes}");
        let row = api_says(&h, &id, "none", None).await;
        assert_eq!(row["outcome"], "cache_hit", "stream={stream}");
    }
    h.stop().await;
}
