//! Same-dialect Gemini end to end over real sockets (gateway + sim on 127.0.0.1, real SQLite):
//! the stream relayed byte for byte, marks and usage as scripted, Google's incomplete and
//! filtered ends, errors in Google's shape, and a `provider = "gemini"` channel.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use common::*;
use laptime_proxy::config::{ChannelConfig, Models, Provider};
use serde_json::{json, Value};

const STREAM: &str = "/v1beta/models/sim-fast:streamGenerateContent?alt=sse";
const WHOLE: &str = "/v1beta/models/sim-fast:generateContent";

/// A Gemini request body with a sim script: three thoughts at 40, 60, 80 ms, five text
/// tokens at 100..140 ms, the finishReason chunk at 150 ms.
fn body(end: &str) -> Value {
    json!({
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"maxOutputTokens": 64, "thinkingConfig": {"includeThoughts": true}},
        "laptime_sim": {
            "headers_ms": 20,
            "first_event_ms": 40,
            "first_effective": {"kind": "reasoning", "at_ms": 40},
            "reasoning_deltas": 3,
            "first_text_ms": 100,
            "text_tokens": 5,
            "tokens_per_s": 100,
            "usage": {"input_tokens": 30, "cache_read_tokens": 20},
            "end": end,
            "status": 429,
        },
    })
}

/// POSTs as a Gemini client does: the gateway token in `x-goog-api-key`.
async fn gemini_post(h: &Harness, path: &str, body: &Value) -> reqwest::Response {
    h.http
        .post(h.url(path))
        .header("x-goog-api-key", &h.token)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn direct(h: &Harness, path: &str, body: &Value) -> String {
    let resp = h
        .http
        .post(h.sim_url(path))
        .json(body)
        .send()
        .await
        .unwrap();
    resp.text().await.unwrap()
}

/// The row's marks against the script's instants (ms from the sim's arrival, which is after
/// t0): none is early, and the gaps between them are the script's, within what a loaded machine
/// adds to two local hops.
fn marks_follow(row: &Value, scripted: &[(&str, f64)]) {
    let got = |field: &str| row["other"]["timing"][field].as_f64().unwrap();
    for (field, at) in scripted {
        assert!(got(field) >= at - 1.0, "{field} before {at}: {row}");
    }
    for pair in scripted.windows(2) {
        let ((a, at_a), (b, at_b)) = (pair[0], pair[1]);
        let gap = got(b) - got(a);
        assert!(
            (gap - (at_b - at_a)).abs() < 30.0,
            "{a} → {b}: {gap} ms, scripted {}: {row}",
            at_b - at_a
        );
    }
}

#[tokio::test]
async fn a_gemini_stream_is_relayed_untouched_with_the_scripts_marks_and_normalised_usage() {
    let h = start().await;
    let body = body("terminal");
    let upstream = direct(&h, STREAM, &body).await;
    let resp = gemini_post(&h, STREAM, &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let id = request_id(&resp);
    let text = resp.text().await.unwrap();
    // Off by default for Gemini: the official SDKs fail on any line that is not `data:`.
    assert_eq!(text, upstream, "the bytes are the upstream's, untouched");
    assert!(text.ends_with("\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 50,\"candidatesTokenCount\": 5,\"totalTokenCount\": 58,\"cachedContentTokenCount\": 20,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 50}],\"thoughtsTokenCount\": 3},\"modelVersion\": \"sim-fast\",\"responseId\": \"laptimeSimGeminiResp01\"}\r\n\r\n"), "{text}");

    let row = h.row(&id).await;
    assert_eq!(row["dialect"], "gemini");
    assert_eq!(row["model"], "sim-fast");
    assert_eq!(row["stream"], true);
    assert_eq!(row["outcome"], "completed", "{row}");
    // No envelope in Gemini: the first event is the first thought part.
    marks_follow(
        &row,
        &[
            ("first_sse_event_ms", 40.0),
            ("first_response_ms", 40.0),
            ("first_text_delta_ms", 100.0),
            ("upstream_done_ms", 150.0),
        ],
    );
    // promptTokenCount already holds the cached tokens; output = candidates + thoughts.
    assert_eq!(row["input_tokens"], 50);
    assert_eq!(row["cache_read_tokens"], 20);
    assert!(row["cache_write_tokens"].is_null());
    assert_eq!(row["output_tokens"], 8);
    assert_eq!(row["reasoning_tokens"], 3);
    assert_eq!(row["text_delta_count"], 5);
    assert_eq!(row["event_count"], 9);
    h.stop().await;
}

#[tokio::test]
async fn with_the_comment_on_it_follows_the_finish_reason_event() {
    let h = start_with(|c, _| c.server.gemini_timing_comment = true).await;
    let body = body("terminal");
    let upstream = direct(&h, STREAM, &body).await;
    let resp = gemini_post(&h, STREAM, &body).await;
    let id = request_id(&resp);
    let text = resp.text().await.unwrap();
    let (without, comment, after) = cut_comment(&text);
    assert_eq!(without, upstream);
    assert_eq!(after, "", "the comment is the last thing in the stream");
    assert!(text[..text.find(": x-laptime").unwrap()].ends_with("}\r\n\r\n"));
    let row = h.row(&id).await;
    let pairs: std::collections::HashMap<String, String> =
        laptime_core::views::parse_comment(&comment)
            .unwrap()
            .into_iter()
            .collect();
    assert!(same_number(pairs.get("upstream_ms"), &row["upstream_ms"]));
    assert!(same_number(
        pairs.get("cached_tokens"),
        &row["cache_read_tokens"]
    ));
    h.stop().await;
}

#[tokio::test]
async fn max_tokens_and_safety_ends_are_incomplete() {
    let h = start().await;
    for (end, reason) in [("incomplete", "MAX_TOKENS"), ("filtered", "SAFETY")] {
        let resp = gemini_post(&h, STREAM, &body(end)).await;
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        assert!(
            text.contains(&format!("\"finishReason\": \"{reason}\"")),
            "{text}"
        );
        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "incomplete", "{end}: {row}");
        assert!(row["error_class"].is_null(), "{end}");
        marks_follow(
            &row,
            &[("first_text_delta_ms", 100.0), ("upstream_done_ms", 150.0)],
        );
        assert_eq!(row["output_tokens"], 8, "{end}");
        // The whole answer says the same.
        let resp = gemini_post(&h, WHOLE, &body(end)).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.headers()["server-timing"]
            .to_str()
            .unwrap()
            .starts_with("upstream;dur="));
        let id = request_id(&resp);
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["candidates"][0]["finishReason"], reason);
        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "incomplete", "whole {end}: {row}");
        assert_eq!(row["stream"], false);
        assert_eq!(
            (&row["input_tokens"], &row["output_tokens"]),
            (&json!(50), &json!(8))
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn an_upstream_429_answers_the_gemini_client_a_429_in_googles_shape() {
    let h = start().await;
    let resp = gemini_post(&h, STREAM, &body("status")).await;
    assert_eq!(resp.status(), 429);
    let id = request_id(&resp);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["code"], 429);
    assert_eq!(error["error"]["status"], "RESOURCE_EXHAUSTED");
    assert!(error["error"]["message"].is_string());
    let row = h.row(&id).await;
    assert_eq!(row["status"], 429);
    assert_eq!(row["outcome"], "upstream_error");
    // An in-stream error chunk is a terminal error.
    let resp = gemini_post(&h, STREAM, &body("error_event")).await;
    let id = request_id(&resp);
    let text = resp.text().await.unwrap();
    assert!(
        text.ends_with("\"status\": \"RESOURCE_EXHAUSTED\"}}\r\n\r\n"),
        "{text}"
    );
    let row = h.row(&id).await;
    assert_eq!(row["outcome"], "upstream_error");
    assert_eq!(row["error_class"], "stream_error");
    h.stop().await;
}

#[tokio::test]
async fn the_gateways_own_errors_take_googles_shape_and_the_key_may_come_in_the_query() {
    let h = start().await;
    let plain = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let google = |v: &Value| {
        (
            v["error"]["code"].as_u64().unwrap(),
            v["error"]["status"].as_str().unwrap().to_string(),
        )
    };
    let no_key = h
        .http
        .post(h.url(STREAM))
        .json(&plain)
        .send()
        .await
        .unwrap();
    assert_eq!(no_key.status(), 401);
    let v: Value = no_key.json().await.unwrap();
    assert_eq!(google(&v), (401, "UNAUTHENTICATED".into()));

    let in_query = h
        .http
        .post(h.url(&format!("{WHOLE}?key={}", h.token)))
        .json(&plain)
        .send()
        .await
        .unwrap();
    assert_eq!(in_query.status(), 200, "?key= is the gateway token");

    // google-genai 3.x calls /v1/models/… by default: served the same way.
    let v1 = gemini_post(&h, "/v1/models/sim-fast:generateContent", &plain).await;
    assert_eq!(v1.status(), 200);
    let answer: Value = v1.json().await.unwrap();
    assert_eq!(answer["candidates"][0]["finishReason"], "STOP");

    let not_sse = gemini_post(&h, "/v1beta/models/sim-fast:streamGenerateContent", &plain).await;
    assert_eq!(not_sse.status(), 400);
    let v: Value = not_sse.json().await.unwrap();
    assert_eq!(google(&v), (400, "INVALID_ARGUMENT".into()));
    assert!(v["error"]["message"].as_str().unwrap().contains("alt=sse"));

    let unknown = gemini_post(&h, "/v1beta/models/gemini-nope:generateContent", &plain).await;
    assert_eq!(unknown.status(), 404);
    let v: Value = unknown.json().await.unwrap();
    assert_eq!(google(&v), (404, "NOT_FOUND".into()));

    let method = gemini_post(&h, "/v1beta/models/sim-fast:generateAnswer", &plain).await;
    assert_eq!(method.status(), 404);
    let bad_model = gemini_post(&h, "/v1beta/models/sim%2Ffast:generateContent", &plain).await;
    assert_eq!(bad_model.status(), 400);
    h.stop().await;
}

#[tokio::test]
async fn a_gemini_channel_sends_its_key_as_x_goog_api_key_and_names_the_upstream_model() {
    let h = start_with(|c, sim| {
        c.channels.push(ChannelConfig {
            name: "google".into(),
            provider: Provider::Gemini,
            base_url: Some(sim.into()),
            api_key_env: Some("CANARY_KEY".into()),
            models: Models::Map([("gemini-public".to_string(), "sim-fast".to_string())].into()),
            ..ChannelConfig::default()
        });
    })
    .await;
    let plain = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let resp = gemini_post(
        &h,
        "/v1beta/models/gemini-public:streamGenerateContent?alt=sse",
        &plain,
    )
    .await;
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    let text = resp.text().await.unwrap();
    assert!(text.contains("\"finishReason\": \"STOP\""));
    let row = h.row(&id).await;
    assert_eq!(row["channel"], "google");
    assert_eq!(row["outcome"], "completed");
    assert_eq!(row["output_tokens"], 16);
    let last = h.last_sim_request().await;
    assert_eq!(
        last["path"],
        "/v1beta/models/sim-fast:streamGenerateContent"
    );
    assert_eq!(last["x_goog_api_key"], "sk-canary-7f3a9e");
    assert!(
        last["authorization"].is_null(),
        "the client's token stays here"
    );
    h.stop().await;
}
