//! A client of one dialect answered by a channel of another, over real sockets: the client gets
//! its own dialect's stream (one timing comment, before its terminal frame) or body, the text
//! the upstream sent, and the record says which two dialects met, with the upstream's marks.
//! A field the upstream cannot carry is a 400 in the client's dialect that names it. Gemini is
//! on both sides: its calls name the model and the stream in the URL, and a Gemini client gets
//! no timing comment (its SDKs fail on one) unless `gemini_timing_comment` is set.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use common::{body_for, cut_comment, path_for, terminal_for, Harness};
use laptime_core::Dialect;
use serde_json::{json, Value};

/// Every dialect, Gemini included.
const DIALECTS: [&str; 4] = ["chat", "responses", "messages", "gemini"];

/// The path of a call: Gemini's names the model and the method.
fn path(client: &str, model: &str, stream: bool) -> String {
    match Dialect::parse(client) {
        Some(Dialect::Gemini) => Dialect::Gemini.target(model, stream),
        _ => path_for(client).to_owned(),
    }
}

/// A client's body for `model`: Gemini's has neither model nor stream.
fn body(client: &str, model: &str, stream: bool) -> Value {
    match client {
        "gemini" => json!({
            "contents": [{"role": "user", "parts": [{"text": "hello"}]}],
            "generationConfig": {"maxOutputTokens": 64}
        }),
        _ => body_for(client, model, stream),
    }
}

/// `POST` of `client`'s call to `via-<upstream>`, with `body`.
async fn call(
    h: &Harness,
    client: &str,
    upstream: &str,
    stream: bool,
    b: &Value,
) -> reqwest::Response {
    h.post(&path(client, &format!("via-{upstream}"), stream), b)
        .await
}

/// A gateway with one sim channel pinned to each dialect: model `via-<dialect>` is `sim-fast`
/// called in that dialect.
async fn pinned() -> Harness {
    common::start_with(|cfg, sim| {
        // Only the pinned channels, and one attempt: an upstream's error status is the answer.
        cfg.channels.clear();
        let mut once = laptime_proxy::config::RouteConfig {
            model: "*".into(),
            failover: Default::default(),
            timeouts: Default::default(),
            cache: None,
            hedge: None,
            translation: Default::default(),
            context_fallback: None,
        };
        once.failover.max_attempts = 1;
        cfg.routes = vec![once];
        for d in DIALECTS {
            let mut c = common::channel(&format!("sim-{d}"), sim, &[]);
            c.models = laptime_proxy::config::Models::Map(
                [(format!("via-{d}"), "sim-fast".to_string())].into(),
            );
            c.dialect = Dialect::parse(d);
            // The error cases must reach the upstream every time, not an open circuit.
            c.circuit.consecutive_failures = 1_000;
            c.circuit.min_requests = 1_000;
            cfg.channels.push(c);
        }
    })
    .await
}

/// The visible text of a client stream, read the way each dialect's SDK reads it.
fn stream_text(dialect: &str, sse: &str) -> String {
    let mut text = String::new();
    for data in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let piece = match dialect {
            "chat" => v["choices"][0]["delta"]["content"].as_str(),
            "responses" if v["type"] == "response.output_text.delta" => v["delta"].as_str(),
            "messages" if v["type"] == "content_block_delta" => v["delta"]["text"].as_str(),
            "gemini" => {
                text.push_str(&gemini_text(&v));
                None
            }
            _ => None,
        };
        text.push_str(piece.unwrap_or_default());
    }
    text
}

/// The answer text of a Gemini response: its non-thought text parts.
fn gemini_text(v: &Value) -> String {
    v["candidates"][0]["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["thought"] != true)
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// The visible text of a whole answer.
fn body_text(dialect: &str, v: &Value) -> String {
    match dialect {
        "chat" => v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        "gemini" => gemini_text(v),
        "responses" => v["output"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
            .filter(|c| c["type"] == "output_text")
            .filter_map(|c| c["text"].as_str().map(str::to_string))
            .collect(),
        _ => v["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["type"] == "text")
            .filter_map(|c| c["text"].as_str().map(str::to_string))
            .collect(),
    }
}

#[tokio::test]
async fn every_client_dialect_streams_from_every_other_with_its_own_events_and_the_upstreams_marks()
{
    let h = pinned().await;
    for client in DIALECTS {
        // The control: the same sim answer, untranslated.
        let model = format!("via-{client}");
        let control = call(&h, client, client, true, &body(client, &model, true)).await;
        let control = control.text().await.unwrap();
        let want = stream_text(client, &control);
        assert!(!want.is_empty(), "{client} control has text");
        for upstream in DIALECTS.into_iter().filter(|u| *u != client) {
            let pair = format!("{client} → {upstream}");
            let model = format!("via-{upstream}");
            let r = call(&h, client, upstream, true, &body(client, &model, true)).await;
            assert_eq!(r.status(), 200, "{pair}");
            let id = common::request_id(&r);
            let text = r.text().await.unwrap();
            assert_eq!(stream_text(client, &text), want, "{pair}: text\n{text}");
            if client == "gemini" {
                assert!(
                    !text.contains(": x-laptime-timing"),
                    "{pair}: no comment:\n{text}"
                );
                assert!(
                    text.ends_with("\r\n\r\n") && text.contains("\"finishReason\":\"STOP\""),
                    "{pair}: Google's framing, the finish reason last:\n{text}"
                );
            } else {
                let (_, comment, after) = cut_comment(&text);
                assert!(
                    after.starts_with(terminal_for(client)),
                    "{pair}: the comment precedes the client's terminal frame, got {after:?}"
                );
                assert!(comment.contains("ttft_ms="), "{pair}: {comment}");
            }

            let row = h.row(&id).await;
            assert_eq!(row["client_dialect"], client, "{pair}");
            assert_eq!(row["upstream_dialect"], upstream, "{pair}");
            assert_eq!(row["translated"], true, "{pair}");
            assert_eq!(row["outcome"], "completed", "{pair}: {row}");
            assert_eq!(
                row["output_tokens"], 16,
                "{pair}: usage in the upstream's terms"
            );
            // sim-fast counts the (translated) body it was sent, a token per four bytes.
            let sent = h.last_sim_request().await["body_bytes"].as_u64().unwrap();
            assert_eq!(row["input_tokens"], sent.div_ceil(4), "{pair}");
            let timing = &row["other"]["timing"];
            for mark in [
                "first_sse_event_ms",
                "first_response_ms",
                "first_text_delta_ms",
            ] {
                assert!(timing[mark].is_number(), "{pair}: {mark} in {timing}");
            }
        }
    }
    h.stop().await;
}

/// The model a whole answer names (Gemini: `modelVersion`).
fn model_of<'v>(dialect: &str, v: &'v Value) -> &'v Value {
    match dialect {
        "gemini" => &v["modelVersion"],
        _ => &v["model"],
    }
}

#[tokio::test]
async fn whole_answers_are_translated_with_server_timing() {
    let h = pinned().await;
    for client in DIALECTS {
        let model = format!("via-{client}");
        let control: Value = call(&h, client, client, false, &body(client, &model, false))
            .await
            .json()
            .await
            .unwrap();
        let want = body_text(client, &control);
        assert!(!want.is_empty(), "{client} control: {control}");
        assert_eq!(
            model_of(client, &control),
            "sim-fast",
            "{client} control: {control}"
        );
        for upstream in DIALECTS.into_iter().filter(|u| *u != client) {
            let pair = format!("{client} → {upstream}");
            let model = format!("via-{upstream}");
            let r = call(&h, client, upstream, false, &body(client, &model, false)).await;
            assert_eq!(r.status(), 200, "{pair}");
            assert!(r.headers().contains_key("server-timing"), "{pair}");
            let id = common::request_id(&r);
            let v: Value = r.json().await.unwrap();
            assert_eq!(body_text(client, &v), want, "{pair}: {v}");
            // The model the upstream answered as, as an untranslated answer shows it.
            assert_eq!(
                model_of(client, &v),
                model_of(client, &control),
                "{pair}: {v}"
            );
            let row = h.row(&id).await;
            assert_eq!(row["translated"], true, "{pair}");
            assert_eq!(row["output_tokens"], 16, "{pair}");
        }
    }
    h.stop().await;
}

#[tokio::test]
async fn a_field_the_upstream_cannot_carry_is_a_400_in_the_clients_dialect_naming_it() {
    let h = pinned().await;
    let cases = [
        (
            "chat",
            "via-messages",
            json!({"model": "via-messages", "n": 2,
                "messages": [{"role": "user", "content": "hi"}]}),
            "n",
        ),
        (
            "responses",
            "via-messages",
            json!({"model": "via-messages", "input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            "messages",
            "via-chat",
            json!({"model": "via-chat", "max_tokens": 16,
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
                "messages": [{"role": "user", "content": "hi"}]}),
            "tools[0]",
        ),
        (
            "gemini",
            "via-messages",
            json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"googleSearch": {}}]}),
            "tools[0].googleSearch",
        ),
        (
            "chat",
            "via-gemini",
            json!({"model": "via-gemini", "verbosity": "low",
                "messages": [{"role": "user", "content": "hi"}]}),
            "verbosity",
        ),
    ];
    for (client, model, body, field) in cases {
        let r = h.post(&path(client, model, false), &body).await;
        assert_eq!(r.status(), 400, "{client} → {model}");
        let v: Value = r.json().await.unwrap();
        let message = if client == "gemini" {
            assert_eq!(v["error"]["status"], "INVALID_ARGUMENT", "{v}");
            assert_eq!(v["error"]["code"], 400, "{v}");
            v["error"]["message"].as_str().unwrap().to_string()
        } else if client == "messages" {
            assert_eq!(v["type"], "error", "{v}");
            assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            v["error"]["message"].as_str().unwrap().to_string()
        } else {
            assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            v["error"]["message"].as_str().unwrap().to_string()
        };
        assert!(
            message.contains(&format!("`{field}")),
            "{client} → {model}: names {field}: {message}"
        );
    }
    // Nothing reached the sim.
    let stats = h.sim_stats().await;
    assert_eq!(stats["requests"], 0, "{stats}");
    h.stop().await;
}

/// A client's body with a sim script, for `via-<upstream>`.
fn scripted(client: &str, upstream: &str, stream: bool, script: Value) -> Value {
    let mut body = body(client, &format!("via-{upstream}"), stream);
    body["laptime_sim"] = script;
    body
}

#[tokio::test]
async fn an_upstream_error_status_becomes_the_clients_error_of_the_same_kind() {
    let h = pinned().await;
    for client in DIALECTS {
        for upstream in DIALECTS {
            let pair = format!("{client} → {upstream}");
            for stream in [false, true] {
                let script = json!({"end": "status", "status": 429});
                let b = scripted(client, upstream, stream, script);
                let r = call(&h, client, upstream, stream, &b).await;
                let status = r.status();
                let v: Value = r.json().await.unwrap();
                assert_eq!(status, 429, "{pair}: {v}");
                if client == "gemini" {
                    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED", "{pair}: {v}");
                    assert_eq!(v["error"]["code"], 429, "{pair}: {v}");
                } else if client == "messages" {
                    assert_eq!(v["type"], "error", "{pair}: {v}");
                    assert_eq!(v["error"]["type"], "rate_limit_error", "{pair}: {v}");
                } else {
                    assert!(v["error"]["message"].is_string(), "{pair}: {v}");
                    assert!(v.get("type").is_none(), "{pair}: OpenAI shape: {v}");
                }
            }
        }
    }
    h.stop().await;
}

#[tokio::test]
async fn a_refusal_of_the_request_keeps_its_kind_through_translation() {
    let h = pinned().await;
    for client in DIALECTS {
        for upstream in DIALECTS {
            let pair = format!("{client} → {upstream}");
            for (refusal, class, code) in [
                (
                    "context_length",
                    "context_length_exceeded",
                    "context_length_exceeded",
                ),
                ("content_filter", "content_filtered", "content_filter"),
            ] {
                let script = json!({"end": "status", "status": 400, "refusal": refusal});
                let b = scripted(client, upstream, false, script);
                let r = call(&h, client, upstream, false, &b).await;
                let id = common::request_id(&r);
                assert_eq!(r.status(), 400, "{pair}");
                let v: Value = r.json().await.unwrap();
                match client {
                    "gemini" => assert_eq!(v["error"]["status"], "INVALID_ARGUMENT", "{pair}: {v}"),
                    "messages" => {
                        assert_eq!(v["error"]["type"], "invalid_request_error", "{pair}: {v}")
                    }
                    // The OpenAI SDKs and clients tell these apart by the code.
                    _ => assert_eq!(v["error"]["code"], code, "{pair}: {v}"),
                }
                assert!(v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()));
                let row = h.row(&id).await;
                assert_eq!(row["error_class"], class, "{pair}: {row}");
                assert_eq!(row["outcome"], "upstream_error", "{pair}");
            }
        }
    }
    h.stop().await;
}

/// A streamed call of `script` from `client` through the channel pinned to `upstream`: the
/// request id and the client's bytes.
async fn streamed(h: &Harness, client: &str, upstream: &str, script: Value) -> (String, String) {
    let b = scripted(client, upstream, true, script);
    let r = call(h, client, upstream, true, &b).await;
    let id = common::request_id(&r);
    (id, r.text().await.unwrap())
}

#[tokio::test]
async fn endings_keep_their_meaning_through_translation() {
    let h = pinned().await;
    for client in DIALECTS {
        for upstream in DIALECTS.into_iter().filter(|u| *u != client) {
            let pair = format!("{client} → {upstream}");
            // Cut by max tokens: incomplete, in the client's words.
            let (id, text) = streamed(&h, client, upstream, json!({"end": "incomplete"})).await;
            let said = match client {
                "chat" => text.contains("\"finish_reason\":\"length\""),
                "responses" => text.contains("event: response.incomplete"),
                "gemini" => text.contains("\"finishReason\":\"MAX_TOKENS\""),
                _ => text.contains("\"stop_reason\":\"max_tokens\""),
            };
            assert!(said, "{pair}: incomplete in the client's words:\n{text}");
            assert_eq!(h.row(&id).await["outcome"], "incomplete", "{pair}");

            // Stopped by the content filter: the reason reaches the client in its words.
            let (id, text) = streamed(&h, client, upstream, json!({"end": "filtered"})).await;
            let said = match client {
                "chat" => text.contains("\"finish_reason\":\"content_filter\""),
                "responses" => text.contains("\"reason\":\"content_filter\""),
                "gemini" => text.contains("\"finishReason\":\"SAFETY\""),
                _ => text.contains("\"stop_reason\":\"refusal\""),
            };
            assert!(said, "{pair}: filtered in the client's words:\n{text}");
            // Judged in the upstream's words: a filter stop is incomplete, Anthropic's
            // `refusal` is the model's own (complete) answer.
            let outcome = if upstream == "messages" {
                "completed"
            } else {
                "incomplete"
            };
            assert_eq!(h.row(&id).await["outcome"], outcome, "{pair}");

            // Cut by the upstream: the client is told in-band, never a clean end.
            let (id, text) = streamed(&h, client, upstream, json!({"end": "close"})).await;
            let tail = &text[text.len().saturating_sub(600)..];
            let completed = match client {
                "chat" => "\"finish_reason\":\"stop\"",
                "responses" => "event: response.completed",
                "gemini" => "\"finishReason\":\"STOP\"",
                _ => "\"stop_reason\":\"end_turn\"",
            };
            assert!(
                !text.contains(completed),
                "{pair}: a cut is never a completion, the stream ends:\n{tail}"
            );
            let error_at = text
                .find("error")
                .unwrap_or_else(|| panic!("{pair}: no in-band error:\n{tail}"));
            // Gemini has no terminal frame to check the order of.
            assert!(
                client == "gemini" || text.find(terminal_for(client)).is_none_or(|t| t > error_at),
                "{pair}: a terminal frame only after the error:\n{tail}"
            );
            assert_eq!(
                h.row(&id).await["outcome"],
                "upstream_closed_early",
                "{pair}"
            );
        }
    }
    h.stop().await;
}

#[tokio::test]
async fn other_clients_reach_a_provider_gemini_channel_and_a_gemini_client_may_ask_for_the_comment()
{
    let h = common::start_with(|cfg, sim| {
        cfg.channels.clear();
        cfg.server.gemini_timing_comment = true;
        let mut c = common::channel("google", sim, &[]);
        c.provider = laptime_proxy::config::Provider::Gemini;
        c.api_key_env = Some("CANARY_KEY".into());
        c.models = laptime_proxy::config::Models::Map(
            [("via-google".to_string(), "sim-fast".to_string())].into(),
        );
        cfg.channels.push(c);
        let mut chat = common::channel("sim-chat", sim, &[]);
        chat.models = laptime_proxy::config::Models::Map(
            [("via-chat".to_string(), "sim-fast".to_string())].into(),
        );
        chat.dialect = Some(Dialect::Chat);
        cfg.channels.push(chat);
    })
    .await;
    for client in ["chat", "responses", "messages"] {
        let r = call(
            &h,
            client,
            "google",
            true,
            &body(client, "via-google", true),
        )
        .await;
        assert_eq!(r.status(), 200, "{client} → provider gemini");
        let id = common::request_id(&r);
        let text = r.text().await.unwrap();
        assert!(!stream_text(client, &text).is_empty(), "{client}:\n{text}");
        let row = h.row(&id).await;
        assert_eq!(row["upstream_dialect"], "gemini", "{client}");
        assert_eq!(row["outcome"], "completed", "{client}: {row}");
    }
    // A Gemini client translated from Chat, with the comment asked for: after the last chunk.
    let r = call(
        &h,
        "gemini",
        "chat",
        true,
        &body("gemini", "via-chat", true),
    )
    .await;
    let text = r.text().await.unwrap();
    let (_, comment, after) = cut_comment(&text);
    assert!(comment.contains("ttft_ms="), "{comment}");
    assert_eq!(after, "", "the comment is the last thing:\n{text}");
    h.stop().await;
}

#[tokio::test]
async fn hints_a_translation_leaves_out_are_named_to_the_client_and_none_when_untranslated() {
    let h = pinned().await;
    let hinted = |model: &str| {
        json!({"model": model, "max_tokens": 16, "stream": false, "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}]})
    };
    let r = h.post("/v1/messages", &hinted("via-chat")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-laptime-translation-omitted"],
        "messages[0].content[0].cache_control"
    );
    // Relayed untouched to a Messages channel: nothing was left out.
    let r = h.post("/v1/messages", &hinted("via-messages")).await;
    assert_eq!(r.status(), 200);
    assert!(!r.headers().contains_key("x-laptime-translation-omitted"));
    h.stop().await;
}
