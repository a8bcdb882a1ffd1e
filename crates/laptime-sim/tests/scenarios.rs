//! The translation-test presets over real sockets, in every dialect, streamed and whole: each
//! answer is read back the way an SDK reconstructs it (text, reasoning, tool calls, stop
//! reason, usage, in-band error) and compared with what the preset promises.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

pub mod common;

use common::{sse, Harness};
use laptime_core::Dialect;
use serde_json::{json, Value};

/// The dialects whose model and stream flag are in the body, which `request` writes. Gemini's
/// presets are read back over sockets in `laptime-proxy`'s `gemini_relay` and `translation`
/// tests.
const BODY_DIALECTS: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

/// What a client rebuilds from one answer.
#[derive(Debug, Default, PartialEq)]
struct Answer {
    text: String,
    reasoning: String,
    /// (id, name, parsed arguments), in order.
    calls: Vec<(String, String, Value)>,
    /// The dialect's own stop word: Chat `finish_reason`, Messages `stop_reason`, Responses
    /// the response `status` (with `:<reason>` for an incomplete one).
    stop: Option<String>,
    usage: Option<Usage>,
    /// The in-band error object (Chat `error`, Responses `error` event, Messages `error`).
    error: Option<Value>,
    /// Whether a Messages thinking block carried a signature.
    signed: bool,
    /// SSE events after the in-band error (none for a stream that ends there).
    after_error: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Usage {
    input_total: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
    /// `None` for Messages, which does not report reasoning tokens.
    reasoning: Option<u64>,
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn usage_of(dialect: Dialect, u: &Value) -> Usage {
    match dialect {
        Dialect::Chat => Usage {
            input_total: n(&u["prompt_tokens"]),
            cache_read: n(&u["prompt_tokens_details"]["cached_tokens"]),
            cache_write: n(&u["prompt_tokens_details"]["cache_write_tokens"]),
            output: n(&u["completion_tokens"]),
            reasoning: Some(n(&u["completion_tokens_details"]["reasoning_tokens"])),
        },
        Dialect::Responses => Usage {
            input_total: n(&u["input_tokens"]),
            cache_read: n(&u["input_tokens_details"]["cached_tokens"]),
            cache_write: n(&u["input_tokens_details"]["cache_write_tokens"]),
            output: n(&u["output_tokens"]),
            reasoning: Some(n(&u["output_tokens_details"]["reasoning_tokens"])),
        },
        Dialect::Messages => Usage {
            input_total: n(&u["input_tokens"])
                + n(&u["cache_read_input_tokens"])
                + n(&u["cache_creation_input_tokens"]),
            cache_read: n(&u["cache_read_input_tokens"]),
            cache_write: n(&u["cache_creation_input_tokens"]),
            output: n(&u["output_tokens"]),
            reasoning: None,
        },
        Dialect::Gemini => {
            unreachable!("the presets are read back here in the body-model dialects")
        }
    }
}

fn args(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("arguments {s:?} are not JSON: {e}"))
}

fn responses_stop(r: &Value) -> String {
    match r["incomplete_details"]["reason"].as_str() {
        Some(reason) => format!("{}:{reason}", r["status"].as_str().unwrap()),
        None => r["status"].as_str().unwrap().to_owned(),
    }
}

/// Rebuilds a whole (non-streamed) answer.
fn whole(dialect: Dialect, b: &Value) -> Answer {
    let mut a = Answer::default();
    match dialect {
        Dialect::Chat => {
            let m = &b["choices"][0]["message"];
            a.text = m["content"].as_str().unwrap_or("").to_owned();
            a.reasoning = m["reasoning_content"].as_str().unwrap_or("").to_owned();
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                assert_eq!(c["type"], "function");
                a.calls.push((
                    c["id"].as_str().unwrap().to_owned(),
                    c["function"]["name"].as_str().unwrap().to_owned(),
                    args(c["function"]["arguments"].as_str().unwrap()),
                ));
            }
            a.stop = b["choices"][0]["finish_reason"].as_str().map(str::to_owned);
            a.usage = Some(usage_of(dialect, &b["usage"]));
        }
        Dialect::Responses => {
            for item in b["output"].as_array().unwrap() {
                match item["type"].as_str().unwrap() {
                    "reasoning" => {
                        for s in item["summary"].as_array().unwrap() {
                            a.reasoning.push_str(s["text"].as_str().unwrap());
                        }
                    }
                    "message" => {
                        for c in item["content"].as_array().unwrap() {
                            a.text.push_str(c["text"].as_str().unwrap());
                        }
                    }
                    "function_call" => a.calls.push((
                        item["call_id"].as_str().unwrap().to_owned(),
                        item["name"].as_str().unwrap().to_owned(),
                        args(item["arguments"].as_str().unwrap()),
                    )),
                    other => panic!("unexpected output item {other}"),
                }
            }
            a.stop = Some(responses_stop(b));
            a.usage = Some(usage_of(dialect, &b["usage"]));
        }
        Dialect::Messages => {
            for block in b["content"].as_array().unwrap() {
                match block["type"].as_str().unwrap() {
                    "text" => a.text.push_str(block["text"].as_str().unwrap()),
                    "thinking" => {
                        a.reasoning.push_str(block["thinking"].as_str().unwrap());
                        a.signed = !block["signature"].as_str().unwrap().is_empty();
                    }
                    "tool_use" => a.calls.push((
                        block["id"].as_str().unwrap().to_owned(),
                        block["name"].as_str().unwrap().to_owned(),
                        block["input"].clone(),
                    )),
                    other => panic!("unexpected block {other}"),
                }
            }
            a.stop = b["stop_reason"].as_str().map(str::to_owned);
            a.usage = Some(usage_of(dialect, &b["usage"]));
        }
        Dialect::Gemini => {
            unreachable!("the presets are read back here in the body-model dialects")
        }
    }
    a
}

/// Rebuilds a streamed answer event by event, as the SDKs' accumulators do.
fn streamed(dialect: Dialect, body: &str) -> Answer {
    let mut a = Answer::default();
    // Argument text per call, keyed by the dialect's index (Chat index, Responses output
    // index, Messages block index).
    let mut open: Vec<(u64, String, String, String)> = Vec::new();
    for ev in sse(body) {
        if a.error.is_some() {
            a.after_error.push(ev.data.clone());
            continue;
        }
        if ev.data == "[DONE]" {
            continue;
        }
        let j = ev.json();
        match dialect {
            Dialect::Chat => {
                if let Some(e) = j.get("error") {
                    a.error = Some(e.clone());
                    continue;
                }
                if let Some(u) = j.get("usage").filter(|u| !u.is_null()) {
                    a.usage = Some(usage_of(dialect, u));
                }
                for c in j["choices"].as_array().unwrap() {
                    let d = &c["delta"];
                    a.text.push_str(d["content"].as_str().unwrap_or(""));
                    a.reasoning
                        .push_str(d["reasoning_content"].as_str().unwrap_or(""));
                    for t in d["tool_calls"].as_array().into_iter().flatten() {
                        let index = t["index"].as_u64().unwrap();
                        if let Some(id) = t["id"].as_str() {
                            let name = t["function"]["name"].as_str().unwrap();
                            open.push((index, id.to_owned(), name.to_owned(), String::new()));
                        }
                        let call = open.iter_mut().find(|c| c.0 == index).unwrap();
                        call.3
                            .push_str(t["function"]["arguments"].as_str().unwrap_or(""));
                    }
                    if let Some(f) = c["finish_reason"].as_str() {
                        a.stop = Some(f.to_owned());
                    }
                }
            }
            Dialect::Responses => match j["type"].as_str().unwrap() {
                "response.reasoning_summary_text.delta" => {
                    a.reasoning.push_str(j["delta"].as_str().unwrap());
                }
                "response.output_text.delta" => a.text.push_str(j["delta"].as_str().unwrap()),
                "response.output_item.added" if j["item"]["type"] == "function_call" => {
                    open.push((
                        j["output_index"].as_u64().unwrap(),
                        j["item"]["call_id"].as_str().unwrap().to_owned(),
                        j["item"]["name"].as_str().unwrap().to_owned(),
                        String::new(),
                    ));
                }
                "response.function_call_arguments.delta" => {
                    let index = j["output_index"].as_u64().unwrap();
                    let call = open.iter_mut().find(|c| c.0 == index).unwrap();
                    call.3.push_str(j["delta"].as_str().unwrap());
                }
                "response.function_call_arguments.done" => {
                    let index = j["output_index"].as_u64().unwrap();
                    let call = open.iter().find(|c| c.0 == index).unwrap();
                    assert_eq!(j["arguments"].as_str().unwrap(), call.3, "done = deltas");
                }
                "response.completed" | "response.incomplete" => {
                    a.stop = Some(responses_stop(&j["response"]));
                    a.usage = Some(usage_of(dialect, &j["response"]["usage"]));
                }
                "error" => a.error = Some(j["error"].clone()),
                _ => {}
            },
            Dialect::Messages => match j["type"].as_str().unwrap() {
                "message_start" => a.usage = Some(usage_of(dialect, &j["message"]["usage"])),
                "content_block_start" if j["content_block"]["type"] == "tool_use" => {
                    let b = &j["content_block"];
                    open.push((
                        j["index"].as_u64().unwrap(),
                        b["id"].as_str().unwrap().to_owned(),
                        b["name"].as_str().unwrap().to_owned(),
                        String::new(),
                    ));
                }
                "content_block_delta" => {
                    let d = &j["delta"];
                    match d["type"].as_str().unwrap() {
                        "text_delta" => a.text.push_str(d["text"].as_str().unwrap()),
                        "thinking_delta" => a.reasoning.push_str(d["thinking"].as_str().unwrap()),
                        "signature_delta" => {
                            a.signed = !d["signature"].as_str().unwrap().is_empty();
                        }
                        "input_json_delta" => {
                            let index = j["index"].as_u64().unwrap();
                            let call = open.iter_mut().find(|c| c.0 == index).unwrap();
                            call.3.push_str(d["partial_json"].as_str().unwrap());
                        }
                        other => panic!("unexpected delta {other}"),
                    }
                }
                "message_delta" => {
                    a.stop = j["delta"]["stop_reason"].as_str().map(str::to_owned);
                    if let Some(u) = a.usage.as_mut() {
                        u.output = n(&j["usage"]["output_tokens"]);
                    }
                }
                "error" => a.error = Some(j["error"].clone()),
                _ => {}
            },
            Dialect::Gemini => {
                unreachable!("the presets are read back here in the body-model dialects")
            }
        }
    }
    a.calls = open
        .into_iter()
        .map(|(_, id, name, arguments)| (id, name, args(&arguments)))
        .collect();
    a
}

fn request(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
    })
}

/// Asks for `model` in `dialect`; returns the status, the retry-after header and the answer
/// as a client rebuilds it (or, for an error status, the error body).
async fn ask(h: &Harness, dialect: Dialect, body: &Value) -> (u16, Option<String>, Answer, Value) {
    let stream = body["stream"] == true;
    let resp = h.post(dialect.path(), body).await;
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap();
    if status != 200 {
        return (
            status,
            retry_after,
            Answer::default(),
            serde_json::from_str(&text).unwrap(),
        );
    }
    let answer = if stream {
        streamed(dialect, &text)
    } else {
        whole(dialect, &serde_json::from_str(&text).unwrap())
    };
    (status, retry_after, answer, Value::Null)
}

fn usage(
    input_total: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
    reasoning: u64,
) -> impl Fn(Dialect) -> Usage {
    move |dialect| Usage {
        input_total,
        cache_read,
        cache_write,
        output,
        reasoning: (dialect != Dialect::Messages).then_some(reasoning),
    }
}

fn stop_word(dialect: Dialect, chat: &str, responses: &str, messages: &str) -> Option<String> {
    Some(
        match dialect {
            Dialect::Chat => chat,
            Dialect::Responses => responses,
            Dialect::Messages => messages,
            Dialect::Gemini => {
                unreachable!("the presets are read back here in the body-model dialects")
            }
        }
        .to_owned(),
    )
}

fn call_ids(dialect: Dialect, k: usize) -> String {
    let prefix = if dialect == Dialect::Messages {
        "toolu_laptimesim"
    } else {
        "call_laptimesim"
    };
    format!("{prefix}{k:04}")
}

#[tokio::test]
async fn sim_reasoning_sends_reasoning_then_text_in_every_dialect() {
    let h = Harness::start().await;
    let expected_usage = usage(20 + 8 + 4, 8, 4, 10, 4);
    for dialect in BODY_DIALECTS {
        for stream in [true, false] {
            let at = format!("{dialect} stream={stream}");
            let (status, _, a, _) = ask(&h, dialect, &request("sim-reasoning", stream)).await;
            assert_eq!(status, 200, "{at}");
            assert_eq!(a.reasoning, "Let me think about", "{at}");
            assert_eq!(a.text, "Sure, here is the short", "{at}");
            assert!(a.calls.is_empty(), "{at}");
            assert_eq!(
                a.stop,
                stop_word(dialect, "stop", "completed", "end_turn"),
                "{at}"
            );
            assert_eq!(a.usage, Some(expected_usage(dialect)), "{at}");
            assert_eq!(
                a.signed,
                dialect == Dialect::Messages,
                "{at}: thinking is signed"
            );
        }
    }
}

#[tokio::test]
async fn sim_reasoning_streams_its_reasoning_in_each_dialects_own_events() {
    let h = Harness::start().await;
    for (dialect, needle) in [
        (Dialect::Chat, "\"reasoning_content\":\"Let\""),
        (
            Dialect::Responses,
            "event: response.reasoning_summary_text.delta\n",
        ),
        (Dialect::Messages, "\"type\":\"signature_delta\""),
    ] {
        let body = h
            .post(dialect.path(), &request("sim-reasoning", true))
            .await
            .text()
            .await
            .unwrap();
        assert!(body.contains(needle), "{dialect}: {needle} in {body}");
    }
}

#[tokio::test]
async fn sim_tool_call_sends_one_call_in_fragments_and_stops_for_it() {
    let h = Harness::start().await;
    let expected_usage = usage(30 + 16, 16, 0, 4, 0);
    for dialect in BODY_DIALECTS {
        for stream in [true, false] {
            let at = format!("{dialect} stream={stream}");
            let (status, _, a, _) = ask(&h, dialect, &request("sim-tool-call", stream)).await;
            assert_eq!(status, 200, "{at}");
            assert_eq!(
                a.calls,
                vec![(
                    call_ids(dialect, 1),
                    "get_weather".to_owned(),
                    json!({"query": "weather in Paris tomorrow"})
                )],
                "{at}"
            );
            assert_eq!((a.text.as_str(), a.reasoning.as_str()), ("", ""), "{at}");
            assert_eq!(
                a.stop,
                stop_word(dialect, "tool_calls", "completed", "tool_use"),
                "{at}"
            );
            assert_eq!(a.usage, Some(expected_usage(dialect)), "{at}");
        }
    }
}

#[tokio::test]
async fn sim_tool_call_streams_its_arguments_in_four_fragments() {
    let h = Harness::start().await;
    for dialect in BODY_DIALECTS {
        let body = h
            .post(dialect.path(), &request("sim-tool-call", true))
            .await
            .text()
            .await
            .unwrap();
        let fragments: Vec<String> = sse(&body)
            .iter()
            .filter(|e| e.data != "[DONE]")
            .filter_map(|e| {
                let j = e.json();
                let f = match dialect {
                    Dialect::Chat => j["choices"][0]["delta"]["tool_calls"][0]["function"]
                        ["arguments"]
                        .as_str()
                        .map(str::to_owned),
                    Dialect::Responses => (j["type"] == "response.function_call_arguments.delta")
                        .then(|| j["delta"].as_str().unwrap().to_owned()),
                    Dialect::Messages => j["delta"]["partial_json"].as_str().map(str::to_owned),
                    Dialect::Gemini => {
                        unreachable!("the presets are read back here in the body-model dialects")
                    }
                };
                f.filter(|f| !f.is_empty())
            })
            .collect();
        assert_eq!(
            fragments,
            ["{\"query\":\"weather", " in", " Paris", " tomorrow\"}"],
            "{dialect}"
        );
    }
}

#[tokio::test]
async fn sim_parallel_tools_sends_two_calls_each_with_its_own_id_name_and_arguments() {
    let h = Harness::start().await;
    let expected_usage = usage(36 + 12, 0, 12, 6, 0);
    for dialect in BODY_DIALECTS {
        for stream in [true, false] {
            let at = format!("{dialect} stream={stream}");
            let (status, _, a, _) = ask(&h, dialect, &request("sim-parallel-tools", stream)).await;
            assert_eq!(status, 200, "{at}");
            assert_eq!(
                a.calls,
                vec![
                    (
                        call_ids(dialect, 1),
                        "get_weather".to_owned(),
                        json!({"query": "weather in Paris"})
                    ),
                    (
                        call_ids(dialect, 2),
                        "get_time".to_owned(),
                        json!({"location": "Tokyo, Japan local"})
                    ),
                ],
                "{at}"
            );
            assert_eq!(a.text, "", "{at}");
            assert_eq!(
                a.stop,
                stop_word(dialect, "tool_calls", "completed", "tool_use"),
                "{at}"
            );
            assert_eq!(a.usage, Some(expected_usage(dialect)), "{at}");
        }
    }
}

#[tokio::test]
async fn sim_max_tokens_is_cut_by_the_token_limit() {
    let h = Harness::start().await;
    let expected_usage = usage(12 + 4, 4, 0, 8, 0);
    for dialect in BODY_DIALECTS {
        for stream in [true, false] {
            let at = format!("{dialect} stream={stream}");
            let (status, _, a, _) = ask(&h, dialect, &request("sim-max-tokens", stream)).await;
            assert_eq!(status, 200, "{at}");
            assert_eq!(a.text, "Sure, here is the short answer:", "{at}");
            assert_eq!(
                a.stop,
                stop_word(
                    dialect,
                    "length",
                    "incomplete:max_output_tokens",
                    "max_tokens"
                ),
                "{at}"
            );
            assert_eq!(a.usage, Some(expected_usage(dialect)), "{at}");
        }
    }
}

#[tokio::test]
async fn sim_rate_limited_answers_429_with_the_dialects_error_and_retry_after() {
    let h = Harness::start().await;
    for dialect in BODY_DIALECTS {
        for stream in [true, false] {
            let at = format!("{dialect} stream={stream}");
            let (status, retry_after, _, body) =
                ask(&h, dialect, &request("sim-rate-limited", stream)).await;
            assert_eq!(status, 429, "{at}");
            assert_eq!(retry_after.as_deref(), Some("1"), "{at}");
            if dialect == Dialect::Messages {
                assert_eq!(body["type"], "error", "{at}");
                assert_eq!(body["error"]["type"], "rate_limit_error", "{at}");
            } else {
                assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{at}");
                assert_eq!(body["error"]["type"], "requests", "{at}");
            }
        }
    }
}

#[tokio::test]
async fn sim_overloaded_in_band_sends_text_then_an_overload_error_and_no_terminal() {
    let h = Harness::start().await;
    for dialect in BODY_DIALECTS {
        let (status, _, a, _) = ask(&h, dialect, &request("sim-overloaded-in-band", true)).await;
        assert_eq!(status, 200, "{dialect}");
        assert_eq!(a.text, "Sure, here is the", "{dialect}");
        assert_eq!(
            a.stop, None,
            "{dialect}: no finish reason, completed or message_delta"
        );
        let error = a.error.unwrap();
        match dialect {
            Dialect::Messages => {
                assert_eq!(error["type"], "overloaded_error");
                assert_eq!(error["message"], "Overloaded");
                assert!(a.after_error.is_empty(), "the stream ends at the error");
            }
            Dialect::Chat => {
                assert_eq!(error["type"], "server_error");
                assert_eq!(error["code"], "server_is_overloaded");
                // OpenAI and vLLM end the stream with [DONE] after the error chunk.
                assert_eq!(a.after_error, ["[DONE]"]);
            }
            Dialect::Responses => {
                assert_eq!(error["type"], "server_error");
                assert_eq!(error["code"], "server_is_overloaded");
                assert_eq!(a.after_error.len(), 1, "only response.failed follows");
                let failed: Value = serde_json::from_str(&a.after_error[0]).unwrap();
                assert_eq!(failed["type"], "response.failed");
                assert_eq!(failed["response"]["status"], "failed");
            }
            Dialect::Gemini => {
                unreachable!("the presets are read back here in the body-model dialects")
            }
        }
    }
}

#[tokio::test]
async fn sim_overloaded_in_band_not_streamed_is_a_529_with_the_error_body() {
    let h = Harness::start().await;
    for dialect in BODY_DIALECTS {
        let (status, _, _, body) =
            ask(&h, dialect, &request("sim-overloaded-in-band", false)).await;
        assert_eq!(status, 529, "{dialect}");
        if dialect == Dialect::Messages {
            assert_eq!(body["error"]["type"], "overloaded_error");
        } else {
            assert_eq!(body["error"]["type"], "server_error");
            assert_eq!(body["error"]["code"], "server_is_overloaded");
        }
    }
}

/// An echo answer's text, parsed.
async fn echo(h: &Harness, dialect: Dialect, body: Value) -> Value {
    let (status, _, a, _) = ask(h, dialect, &body).await;
    assert_eq!(status, 200, "{dialect}");
    assert_eq!(a.usage.map(|u| u.output), Some(8), "8 text deltas");
    serde_json::from_str(&a.text).unwrap_or_else(|e| panic!("{dialect}: {e}: {}", a.text))
}

#[tokio::test]
async fn sim_echo_summarises_a_messages_request_streamed_or_not() {
    let h = Harness::start().await;
    for stream in [true, false] {
        let body = json!({
            "model": "sim-echo", "stream": stream, "max_tokens": 64, "temperature": 0.5,
            "system": [{"type": "text", "text": "Be brief."}],
            "stop_sequences": ["END"],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
            "metadata": {"user_id": "u1"},
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in these?"},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"q": "Paris"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "is_error": true, "content": "boom"},
                ]},
            ],
        });
        let summary = echo(&h, Dialect::Messages, body).await;
        assert_eq!(
            summary,
            json!({
                "dialect": "messages", "model": "sim-echo", "stream": stream,
                "system": "Be brief.",
                "turns": [
                    {"role": "user", "parts": ["text", "image:url", "image:base64"]},
                    {"role": "assistant", "parts": ["tool_call:get_weather:call_1"]},
                    {"role": "user", "parts": ["tool_result:call_1:error"]},
                ],
                "tools": ["get_weather"], "tool_choice": "auto", "parallel_tool_calls": false,
                "max_tokens": 64, "temperature": 0.5, "top_p": null, "stop": ["END"],
                "response_format": null, "reasoning": "budget_tokens:1024",
                "include_usage": null, "other": ["metadata"],
            })
        );
    }
}

#[tokio::test]
async fn sim_echo_summarises_a_chat_request() {
    let h = Harness::start().await;
    let body = json!({
        "model": "sim-echo", "stream": true, "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "22 C"},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        "tool_choice": "required", "parallel_tool_calls": true,
        "max_completion_tokens": 32, "top_p": 0.9, "stop": "END",
        "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": {}}},
        "reasoning_effort": "low", "seed": 7,
    });
    let summary = echo(&h, Dialect::Chat, body).await;
    assert_eq!(
        summary,
        json!({
            "dialect": "chat", "model": "sim-echo", "stream": true, "system": "Be brief.",
            "turns": [
                {"role": "user", "parts": ["text", "image:url", "image:base64"]},
                {"role": "assistant", "parts": ["tool_call:get_weather:call_1"]},
                {"role": "tool", "parts": ["tool_result:call_1"]},
                {"role": "user", "parts": ["text"]},
            ],
            "tools": ["get_weather"], "tool_choice": "required", "parallel_tool_calls": true,
            "max_tokens": 32, "temperature": null, "top_p": 0.9, "stop": ["END"],
            "response_format": "json_schema:weather", "reasoning": "effort:low",
            "include_usage": true, "other": ["seed"],
        })
    );
}

#[tokio::test]
async fn sim_echo_summarises_a_responses_request() {
    let h = Harness::start().await;
    let body = json!({
        "model": "sim-echo", "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Use metric units."},
            {"role": "user", "content": [
                {"type": "input_text", "text": "What is in these?"},
                {"type": "input_image", "image_url": "https://example.com/a.png"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            ]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "22 C"},
        ],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {}}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 48, "temperature": 0.2,
        "text": {"format": {"type": "json_object"}},
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
    });
    let summary = echo(&h, Dialect::Responses, body).await;
    assert_eq!(
        summary,
        json!({
            "dialect": "responses", "model": "sim-echo", "stream": false,
            "system": "Be brief.\n\nUse metric units.",
            "turns": [
                {"role": "user", "parts": ["text", "image:url", "image:base64"]},
                {"item": "function_call", "parts": ["tool_call:get_weather:call_1"]},
                {"item": "function_call_output", "parts": ["tool_result:call_1"]},
            ],
            "tools": ["get_weather"], "tool_choice": "function:get_weather",
            "parallel_tool_calls": null, "max_tokens": 48, "temperature": 0.2, "top_p": null,
            "stop": null, "response_format": "json_object",
            "reasoning": "effort:medium,summary:auto", "include_usage": null,
            "other": ["store"],
        })
    );
}

#[tokio::test]
async fn sim_echo_names_shapes_it_cannot_read_instead_of_failing() {
    let h = Harness::start().await;
    let body = json!({
        "model": "sim-echo", "system": 5, "messages": "not a list", "tools": {},
        "tool_choice": "auto", "stop_sequences": [1],
    });
    let summary = echo(&h, Dialect::Messages, body).await;
    assert_eq!(summary["system"], "invalid:number");
    assert_eq!(summary["turns"], "invalid:string");
    assert_eq!(summary["tools"], "invalid:object");
    assert_eq!(summary["tool_choice"], "invalid:string");
    assert_eq!(summary["stop"], "invalid:array");

    let body = json!({"model": "sim-echo", "input": [7, {"type": "web_search_call"}],
                      "messages": [{"role": "user", "content": [{"type": "video"}]}]});
    let summary = echo(&h, Dialect::Responses, body).await;
    assert_eq!(
        summary["turns"],
        json!([{"item": null, "parts": "invalid:number"},
               {"item": "web_search_call", "parts": ["unknown:web_search_call"]}])
    );
    assert_eq!(summary["other"], json!(["messages"]));
}

#[tokio::test]
async fn sim_echo_splits_its_text_into_eight_deltas_that_rebuild_the_whole_answer() {
    let h = Harness::start().await;
    for dialect in BODY_DIALECTS {
        let body = request("sim-echo", true);
        let streamed = h.post(dialect.path(), &body).await.text().await.unwrap();
        let deltas = match dialect {
            Dialect::Chat => streamed.matches("\"delta\":{\"content\":").count(),
            Dialect::Responses => streamed
                .matches("event: response.output_text.delta\n")
                .count(),
            Dialect::Messages => streamed.matches("\"type\":\"text_delta\"").count(),
            Dialect::Gemini => {
                unreachable!("the presets are read back here in the body-model dialects")
            }
        };
        assert_eq!(deltas, 8, "{dialect}");
        let mut whole_body = body.clone();
        whole_body["stream"] = json!(false);
        let (_, _, whole_answer, _) = ask(&h, dialect, &whole_body).await;
        let (_, _, streamed_answer, _) = ask(&h, dialect, &body).await;
        // The summary differs only in `stream`.
        let mut a: Value = serde_json::from_str(&streamed_answer.text).unwrap();
        let b: Value = serde_json::from_str(&whole_answer.text).unwrap();
        assert_eq!((&a["stream"], &b["stream"]), (&json!(true), &json!(false)));
        a["stream"] = json!(false);
        assert_eq!(a, b, "{dialect}");
    }
}

#[tokio::test]
async fn sim_echo_reads_the_shapes_translation_writes() {
    let h = Harness::start().await;
    // Anthropic's is_error becomes an `Error: ` text in the OpenAI dialects.
    let body = json!({"model": "sim-echo", "messages": [
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Error: no such city"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "fine"}]},
    ]});
    let summary = echo(&h, Dialect::Chat, body).await;
    assert_eq!(
        summary["turns"][1]["parts"],
        json!(["tool_result:c1:error"])
    );
    assert_eq!(summary["turns"][2]["parts"], json!(["tool_result:c2"]));
    let body = json!({"model": "sim-echo", "input": [
        {"type": "function_call_output", "call_id": "c1", "output": "Error: no such city"},
    ]});
    let summary = echo(&h, Dialect::Responses, body).await;
    assert_eq!(
        summary["turns"][0]["parts"],
        json!(["tool_result:c1:error"])
    );
    // Messages' newer output_config carries the format and the effort.
    let body = json!({"model": "sim-echo", "max_tokens": 10, "messages": [],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {}}}});
    let summary = echo(&h, Dialect::Messages, body).await;
    assert_eq!(summary["reasoning"], "adaptive,effort:high");
    assert_eq!(summary["response_format"], "json_schema");
    assert_eq!(summary["other"], json!([]));
}
