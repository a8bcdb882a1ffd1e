//! Whole answers over real sockets: streams in each dialect, non-streamed bodies, scripted
//! statuses and the fake's own request errors.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use std::time::Duration;

use common::{scripted, sse, target, Harness};
use laptime_core::Dialect;
use laptime_sim::{preset, schedule};
use serde_json::{json, Value};

fn sim_fast(stream: bool) -> Value {
    json!({
        "model": "sim-fast",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
    })
}

/// The input sim-fast reports for the streamed body [`stream_sim_fast`] sends: that body, a
/// token per four bytes rounded up (the preset pins no input).
fn sim_fast_input() -> usize {
    sim_fast(true).to_string().len().div_ceil(4)
}

/// Streams sim-fast in `dialect`, checks the bytes are exactly the schedule's, and returns the
/// events.
async fn stream_sim_fast(h: &Harness, dialect: Dialect) -> Vec<common::Sse> {
    let body = sim_fast(true);
    // sim-fast counts the body it was sent as its input, a token per four bytes.
    let sent = body.to_string().len();
    let resp = h.post(&target(dialect, &body), &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    assert!(resp.headers().get("content-length").is_none());
    let body = resp.text().await.unwrap();
    let expected = schedule(
        dialect,
        &preset("sim-fast").unwrap(),
        "sim-fast",
        (true, true),
        sent,
    );
    let expected: String = expected
        .steps
        .iter()
        .map(|s| std::str::from_utf8(&s.bytes).unwrap())
        .collect();
    assert_eq!(body, expected, "the wire bytes are the schedule's bytes");
    sse(&body)
}

#[tokio::test]
async fn a_sim_fast_chat_stream_arrives_whole_and_ends_with_done() {
    let h = Harness::start().await;
    let events = stream_sim_fast(&h, Dialect::Chat).await;
    let (done, rest) = events.split_last().unwrap();
    assert_eq!(done.data, "[DONE]");
    let chunks: Vec<Value> = rest.iter().map(common::Sse::json).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(text.starts_with("Sure, here is"), "{text}");
    let deltas = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert_eq!(deltas, 16);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], sim_fast_input());
    assert_eq!(usage["completion_tokens"], 16);
}

#[tokio::test]
async fn a_sim_fast_responses_stream_arrives_whole_and_ends_with_response_completed() {
    let h = Harness::start().await;
    let events = stream_sim_fast(&h, Dialect::Responses).await;
    assert_eq!(events[0].event.as_deref(), Some("response.created"));
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("response.completed"));
    let usage = &last.json()["response"]["usage"];
    assert_eq!(usage["input_tokens"], sim_fast_input());
    assert_eq!(usage["output_tokens"], 16);
    let deltas = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("response.output_text.delta"))
        .count();
    assert_eq!(deltas, 16);
}

#[tokio::test]
async fn a_sim_fast_messages_stream_arrives_whole_and_ends_with_message_stop() {
    let h = Harness::start().await;
    let events = stream_sim_fast(&h, Dialect::Messages).await;
    assert_eq!(events[0].event.as_deref(), Some("message_start"));
    assert_eq!(
        events[0].json()["message"]["usage"]["input_tokens"],
        sim_fast_input()
    );
    let names: Vec<&str> = events.iter().filter_map(|e| e.event.as_deref()).collect();
    assert_eq!(
        &names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let delta = events
        .iter()
        .find(|e| e.event.as_deref() == Some("message_delta"))
        .unwrap();
    assert_eq!(delta.json()["usage"]["output_tokens"], 16);
    assert_eq!(delta.json()["delta"]["stop_reason"], "end_turn");
}

#[tokio::test]
async fn non_streamed_answers_are_valid_json_with_usage() {
    let h = Harness::start().await;
    for dialect in Dialect::ALL {
        let body = sim_fast(false);
        // The body sent, a token per four bytes rounded up.
        let sent_tokens = body.to_string().len().div_ceil(4);
        let resp = h.post(&target(dialect, &body), &body).await;
        assert_eq!(resp.status(), 200, "{dialect}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        assert!(resp.headers().get("content-length").is_some(), "{dialect}");
        let body: Value = resp.json().await.unwrap();
        let (input, output) = match dialect {
            Dialect::Chat => {
                assert_eq!(body["object"], "chat.completion");
                (
                    &body["usage"]["prompt_tokens"],
                    &body["usage"]["completion_tokens"],
                )
            }
            Dialect::Responses => {
                assert_eq!(body["status"], "completed");
                (
                    &body["usage"]["input_tokens"],
                    &body["usage"]["output_tokens"],
                )
            }
            Dialect::Messages => {
                assert_eq!(body["type"], "message");
                (
                    &body["usage"]["input_tokens"],
                    &body["usage"]["output_tokens"],
                )
            }
            Dialect::Gemini => {
                assert_eq!(body["candidates"][0]["finishReason"], "STOP");
                (
                    &body["usageMetadata"]["promptTokenCount"],
                    &body["usageMetadata"]["candidatesTokenCount"],
                )
            }
        };
        assert_eq!(
            (input, output),
            (&json!(sent_tokens), &json!(16)),
            "{dialect}"
        );
    }
}

#[tokio::test]
async fn end_status_answers_the_status_with_the_dialects_error_body() {
    let h = Harness::start().await;
    for dialect in Dialect::ALL {
        let body = scripted(
            true,
            json!({"end": "status", "status": 429, "headers_ms": 20}),
        );
        let resp = h.post(&target(dialect, &body), &body).await;
        assert_eq!(resp.status(), 429, "{dialect}");
        let error: Value = resp.json().await.unwrap();
        if dialect == Dialect::Messages {
            assert_eq!(error["type"], "error");
            assert_eq!(error["error"]["type"], "rate_limit_error");
        } else if dialect == Dialect::Gemini {
            assert_eq!(error["error"]["code"], 429);
            assert_eq!(error["error"]["status"], "RESOURCE_EXHAUSTED");
            assert!(error["error"]["message"].is_string());
        } else {
            assert_eq!(error["error"]["code"], "rate_limit_exceeded");
            assert!(error["error"]["message"].is_string());
            assert!(error["error"]["param"].is_null());
        }
    }
}

#[tokio::test]
async fn an_unknown_model_is_a_404_in_the_dialects_error_shape() {
    let h = Harness::start().await;
    for dialect in Dialect::ALL {
        let body = json!({"model": "gpt-nonexistent"});
        let resp = h.post(&target(dialect, &body), &body).await;
        assert_eq!(resp.status(), 404, "{dialect}");
        let error: Value = resp.json().await.unwrap();
        if dialect == Dialect::Messages {
            assert_eq!(error["error"]["type"], "not_found_error");
        } else if dialect == Dialect::Gemini {
            assert_eq!(error["error"]["status"], "NOT_FOUND");
        } else {
            assert_eq!(error["error"]["code"], "model_not_found");
        }
    }
}

#[tokio::test]
async fn invalid_json_and_invalid_scripts_are_a_400() {
    let h = Harness::start().await;
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");

    let resp = h
        .post("/v1/messages", &scripted(true, json!({"headers": 5})))
        .await;
    assert_eq!(resp.status(), 400);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("headers"));

    let resp = h
        .post("/v1/responses", &scripted(true, json!({"tokens_per_s": 0})))
        .await;
    assert_eq!(resp.status(), 400);
}

#[tokio::test]
async fn models_are_listed_in_openai_and_anthropic_shapes() {
    let h = Harness::start().await;
    let openai = h.get_json("/v1/models").await;
    assert_eq!(openai["object"], "list");
    let ids: Vec<&str> = openai["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, laptime_sim::PRESET_NAMES);

    let resp = h
        .client
        .get(h.url("/v1/models"))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    let anthropic: Value = resp.json().await.unwrap();
    assert_eq!(anthropic["data"][0]["type"], "model");
    assert_eq!(anthropic["has_more"], false);
}

#[tokio::test]
async fn the_head_and_the_terminal_keep_their_scripted_instants() {
    let h = Harness::start().await;
    let script = json!({"headers_ms": 150, "first_event_ms": 200, "first_text_ms": 250,
                        "text_tokens": 4, "tokens_per_s": 20});
    let start = tokio::time::Instant::now();
    let mut resp = h.post("/v1/messages", &scripted(true, script)).await;
    let head = start.elapsed();
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    let end = start.elapsed();
    // Not a timing benchmark: only that the fake never sends early (its schedule itself is
    // checked under paused time).
    assert!(head >= Duration::from_millis(150), "{head:?}");
    assert!(end >= Duration::from_millis(450), "{end:?}");
    assert!(String::from_utf8(body)
        .unwrap()
        .ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
}

#[tokio::test]
async fn h2c_with_prior_knowledge_streams_the_same_bytes() {
    let h = Harness::start().await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let resp = client
        .post(h.url("/v1/chat/completions"))
        .body(sim_fast(true).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.ends_with("data: [DONE]\n\n"));
    assert_eq!(sse(&body).len(), 16 + 4);
}

#[tokio::test]
async fn a_gemini_stream_takes_model_and_stream_from_the_path_and_ends_on_its_finish_reason() {
    let h = Harness::start().await;
    let events = stream_sim_fast(&h, Dialect::Gemini).await;
    let chunks: Vec<Value> = events.iter().map(common::Sse::json).collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert!(text.starts_with("Sure, here is"), "{text}");
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 16);
    assert_eq!(last["modelVersion"], "sim-fast");
    assert!(chunks.iter().all(|c| c.get("usageMetadata").is_some()));
    let logged = h.sim.requests();
    assert_eq!(logged[0].model.as_deref(), Some("sim-fast"));
}

#[tokio::test]
async fn a_gemini_stream_without_alt_sse_is_a_400_in_googles_shape() {
    let h = Harness::start().await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let resp = h
        .post("/v1beta/models/sim-fast:streamGenerateContent", &body)
        .await;
    assert_eq!(resp.status(), 400);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["status"], "INVALID_ARGUMENT");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("alt=sse"));
    // A method the fake does not serve, on a model path, is not found in Google's shape
    // (`:countTokens` and the embeddings are served now; `:generateAnswer` is not).
    let resp = h
        .post("/v1beta/models/sim-fast:generateAnswer", &body)
        .await;
    assert_eq!(resp.status(), 404);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["status"], "NOT_FOUND");
}
