//! What the fake tells a test about what it received: `x-sim-body-sha256`,
//! `x-sim-request-id`, `/sim/requests` and the request counter.

pub mod common;

use common::Harness;
use serde_json::json;
use sha2::{Digest, Sha256};

#[tokio::test]
async fn every_response_carries_the_sha256_of_the_exact_body_it_received() {
    let h = Harness::start().await;
    // Odd spacing on purpose: the digest is of the bytes, not of a re-encoding.
    for (path, body) in [
        (
            "/v1/chat/completions",
            "{ \"model\" : \"sim-fast\",\n \"stream\": true }",
        ),
        ("/v1/messages", "{\"model\":\"sim-fast\",\"max_tokens\":1}"),
        ("/v1/responses", "{\"model\":\"no-such-model\"}"),
        ("/v1/chat/completions", "not json"),
    ] {
        let resp = h.client.post(h.url(path)).body(body).send().await.unwrap();
        let expected = hex::encode(Sha256::digest(body.as_bytes()));
        assert_eq!(
            resp.headers()["x-sim-body-sha256"],
            expected.as_str(),
            "{path} {body}"
        );
        assert!(resp.headers()["x-sim-request-id"]
            .to_str()
            .unwrap()
            .starts_with("simreq_"));
    }
}

#[tokio::test]
async fn sim_requests_shows_the_headers_and_model_received() {
    let h = Harness::start().await;
    let body = json!({"model": "sim-fast"}).to_string();
    h.client
        .post(h.url("/v1/chat/completions"))
        .header("authorization", "Bearer sk-upstream-key")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .body(body.clone())
        .send()
        .await
        .unwrap();
    h.client
        .post(h.url("/v1/messages"))
        .header("x-api-key", "sk-ant-upstream")
        .header("anthropic-version", "2023-06-01")
        .body(body.clone())
        .send()
        .await
        .unwrap();

    let log = h.get_json("/sim/requests").await;
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0]["path"], "/v1/chat/completions");
    assert_eq!(log[0]["model"], "sim-fast");
    assert_eq!(log[0]["authorization"], "Bearer sk-upstream-key");
    assert!(log[0]["x_api_key"].is_null());
    assert_eq!(
        log[0]["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    assert_eq!(
        log[0]["body_sha256"],
        hex::encode(Sha256::digest(body.as_bytes()))
    );
    assert_eq!(log[1]["path"], "/v1/messages");
    assert!(log[1]["authorization"].is_null());
    assert_eq!(log[1]["x_api_key"], "sk-ant-upstream");
    assert_eq!(log[1]["anthropic_version"], "2023-06-01");
    assert_eq!(h.sim.requests().len(), 2, "the same log in process");
}

#[tokio::test]
async fn the_request_log_keeps_the_last_hundred_and_the_counter_counts_all() {
    let h = Harness::start().await;
    for i in 0..105 {
        h.client
            .post(h.url("/v1/chat/completions"))
            .body(json!({"model": "sim-fast", "n": i}).to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    }
    let log = h.sim.requests();
    assert_eq!(log.len(), 100);
    let first = json!({"model": "sim-fast", "n": 5}).to_string();
    assert_eq!(
        log[0].body_sha256,
        hex::encode(Sha256::digest(first.as_bytes()))
    );
    let stats = h.get_json("/sim/stats").await;
    assert_eq!(stats["requests"], 105, "/sim/* requests are not counted");
    assert_eq!(h.sim.stats().requests, 105);
}

#[tokio::test]
async fn a_request_is_logged_on_arrival_before_its_answer_plays() {
    let h = Harness::start().await;
    let body = common::scripted(true, json!({"headers_ms": 5000}));
    let pending = tokio::spawn(
        h.client
            .post(h.url("/v1/responses"))
            .body(body.to_string())
            .send(),
    );
    let start = tokio::time::Instant::now();
    while h.sim.requests().is_empty() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "not logged"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(h.sim.requests()[0].model.as_deref(), Some("custom-model"));
    pending.abort();
}

#[tokio::test]
async fn sim_timing_counts_timed_sends_and_never_reports_them_early() {
    let h = Harness::start().await;
    let body = json!({"model": "m", "stream": true,
        "laptime_sim": {"headers_ms": 5, "first_event_ms": 10, "first_text_ms": 15,
                        "text_tokens": 3, "tokens_per_s": 200}});
    let text = h
        .post("/v1/chat/completions", &body)
        .await
        .text()
        .await
        .unwrap();
    assert!(text.contains("[DONE]"));
    let t = h.get_json("/sim/timing").await;
    assert_eq!(t["timer"], "tokio", "the fine timer is opt-in");
    assert_eq!(t["head"]["n"], 1);
    // Envelope, 3 deltas, finish, [DONE]: every frame is scripted after the arrival.
    assert!(t["frame"]["n"].as_u64().unwrap() >= 5, "{t}");
    assert!(t["frame"]["p50_ms"].as_f64().unwrap() >= 0.0);
    // An untimed answer (everything at 0 ms) adds nothing.
    h.post("/v1/chat/completions", &json!({"model": "sim-fast"}))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(h.get_json("/sim/timing").await["head"]["n"], 1);
}
