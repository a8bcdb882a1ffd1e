//! Round trips through the hub: every upstream fixture, translated to every client dialect and
//! decoded again, says the same thing; the client's stream is one the classifier reads as
//! well-formed; any split of the upstream bytes gives the same client bytes.

use std::collections::VecDeque;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;

use super::translator::decode_body;
use super::*;
use crate::observe::{whole_answer, BodyEnd, StreamObserver};
use crate::sse::{SseItem, SseScanner};
use crate::timeline::Outcome;
use crate::usage::Tokens;
use crate::Dialect;

const COMMENT: &str = ": x-laptime-timing test\n\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Text,
    Reasoning,
    Tool,
    Parallel,
    MaxTokens,
    Cache,
    Overload,
}

const SCENARIOS: [Scenario; 7] = [
    Scenario::Text,
    Scenario::Reasoning,
    Scenario::Tool,
    Scenario::Parallel,
    Scenario::MaxTokens,
    Scenario::Cache,
    Scenario::Overload,
];

macro_rules! fixtures {
    ($d:ident, $($s:ident => $f:literal),*) => {
        match $d {
            $(Scenario::$s => include_str!(concat!("fixtures/", $f)),)*
        }
    };
}

fn fixture(dialect: Dialect, s: Scenario) -> &'static str {
    match dialect {
        Dialect::Chat => fixtures!(s, Text => "chat_text.sse", Reasoning => "chat_reasoning.sse",
            Tool => "chat_tool.sse", Parallel => "chat_parallel.sse",
            MaxTokens => "chat_max_tokens.sse", Cache => "chat_cache.sse",
            Overload => "chat_overload.sse"),
        Dialect::Responses => fixtures!(s, Text => "responses_text.sse",
            Reasoning => "responses_reasoning.sse", Tool => "responses_tool.sse",
            Parallel => "responses_parallel.sse", MaxTokens => "responses_max_tokens.sse",
            Cache => "responses_cache.sse", Overload => "responses_overload.sse"),
        Dialect::Messages => fixtures!(s, Text => "messages_text.sse",
            Reasoning => "messages_reasoning.sse", Tool => "messages_tool.sse",
            Parallel => "messages_parallel.sse", MaxTokens => "messages_max_tokens.sse",
            Cache => "messages_cache.sse", Overload => "messages_overload.sse"),
        Dialect::Gemini => fixtures!(s, Text => "gemini_text.sse",
            Reasoning => "gemini_reasoning.sse", Tool => "gemini_tool.sse",
            Parallel => "gemini_parallel.sse", MaxTokens => "gemini_max_tokens.sse",
            Cache => "gemini_cache.sse", Overload => "gemini_overload.sse"),
    }
}

fn body_fixtures(dialect: Dialect) -> [&'static str; 3] {
    match dialect {
        Dialect::Chat => [
            include_str!("fixtures/chat_body_reasoning.json"),
            include_str!("fixtures/chat_body_parallel.json"),
            include_str!("fixtures/chat_body_max_tokens.json"),
        ],
        Dialect::Responses => [
            include_str!("fixtures/responses_body_reasoning.json"),
            include_str!("fixtures/responses_body_parallel.json"),
            include_str!("fixtures/responses_body_max_tokens.json"),
        ],
        Dialect::Messages => [
            include_str!("fixtures/messages_body_reasoning.json"),
            include_str!("fixtures/messages_body_parallel.json"),
            include_str!("fixtures/messages_body_max_tokens.json"),
        ],
        Dialect::Gemini => [
            include_str!("fixtures/gemini_body_reasoning.json"),
            include_str!("fixtures/gemini_body_parallel.json"),
            include_str!("fixtures/gemini_body_max_tokens.json"),
        ],
    }
}

fn opts() -> ClientStreamOptions {
    ClientStreamOptions {
        model: Some("client-model".to_owned()),
        id: "lt0001".to_owned(),
        created: 1_750_000_000,
        include_usage: true,
        timing_comment: true,
    }
}

// === what an answer says, compared across dialects ===

#[derive(Debug, Clone, PartialEq)]
struct Said {
    text: String,
    reasoning: String,
    /// (id, name, parsed arguments).
    tools: Vec<(String, String, Value)>,
    stop: Option<StopReason>,
    usage: Tokens,
    error: Option<ErrorKind>,
    ended: bool,
}

fn unescape(s: &str) -> String {
    serde_json::from_str(&format!("\"{s}\"")).unwrap()
}

fn said(answer: &Answer) -> Said {
    let mut s = Said {
        text: String::new(),
        reasoning: String::new(),
        tools: Vec::new(),
        stop: answer.stop,
        usage: answer.usage,
        error: answer.error.as_ref().map(|(k, _)| *k),
        ended: answer.ended,
    };
    for b in &answer.blocks {
        assert!(
            b.stopped || answer.error.is_some(),
            "block never stopped: {b:?}"
        );
        match &b.kind {
            BlockKind::Text => s.text.push_str(&unescape(&b.text)),
            BlockKind::Reasoning => s.reasoning.push_str(&unescape(&b.text)),
            BlockKind::RedactedReasoning { .. } => {}
            BlockKind::ToolCall { id, name } => {
                let args = unescape(&b.text);
                let args = if args.is_empty() {
                    Value::Object(Default::default())
                } else {
                    serde_json::from_str(&args).unwrap()
                };
                s.tools
                    .push((unescape(id.raw()), unescape(name.raw()), args));
            }
        }
    }
    s
}

fn decode_stream(dialect: Dialect, bytes: &str) -> Answer {
    super::read_stream(dialect, bytes.as_bytes())
}

/// The scenario's answer, as the fixtures of every dialect spell it.
fn expected(s: Scenario) -> Said {
    let tool = |id: &str, name: &str, args: &str| {
        (
            id.to_owned(),
            name.to_owned(),
            serde_json::from_str::<Value>(args).unwrap(),
        )
    };
    let base = Said {
        text: String::new(),
        reasoning: String::new(),
        tools: Vec::new(),
        stop: Some(StopReason::EndTurn),
        usage: Tokens::default(),
        error: None,
        ended: true,
    };
    match s {
        Scenario::Text => Said {
            text: "Hello, \"world\"!\nBye.".to_owned(),
            ..base
        },
        Scenario::Reasoning => Said {
            text: "The answer is 42.".to_owned(),
            reasoning: "Let me think: 6×7.".to_owned(),
            ..base
        },
        Scenario::Tool => Said {
            tools: vec![tool("W1", "get_weather", r#"{"city":"Paris"}"#)],
            stop: Some(StopReason::ToolUse),
            ..base
        },
        Scenario::Parallel => Said {
            tools: vec![
                tool("W1", "get_weather", r#"{"city":"Paris"}"#),
                tool("T2", "get_time", r#"{"tz":"Europe/Paris"}"#),
            ],
            stop: Some(StopReason::ToolUse),
            ..base
        },
        Scenario::MaxTokens => Said {
            text: "Once upon a time".to_owned(),
            stop: Some(StopReason::MaxTokens),
            ..base
        },
        Scenario::Cache => Said {
            text: "Cached.".to_owned(),
            ..base
        },
        Scenario::Overload => Said {
            text: "Partial".to_owned(),
            stop: None,
            error: Some(ErrorKind::Overloaded),
            ended: false,
            ..base
        },
    }
}

/// The counts each fixture reports, as the hub normalises them: OpenAI sends the cache-read
/// and reasoning details (0 when none) but no cache writes; Anthropic sends both cache fields
/// (0 when none) but no reasoning count; Google leaves zero counts out and has no cache writes.
fn expected_usage(s: Scenario, dialect: Dialect) -> Tokens {
    let (input, output, reasoning, cache_read, cache_write) = match s {
        Scenario::Text => (12, 6, 0, 0, None),
        Scenario::Reasoning => (20, 30, 18, 0, None),
        Scenario::Tool => (30, 15, 0, 0, None),
        Scenario::Parallel => (40, 25, 0, 0, None),
        Scenario::MaxTokens => (8, 4, 0, 0, None),
        Scenario::Cache => (1200, 3, 0, 1000, Some(150)),
        // Anthropic's start reports input before the error; OpenAI reports nothing.
        Scenario::Overload => {
            return match dialect {
                Dialect::Messages => Tokens {
                    input: Some(9),
                    cache_read: Some(0),
                    cache_write: Some(0),
                    cache_write_1h: Some(0),
                    ..Tokens::default()
                },
                // Google's usage rides on the text chunk before the error.
                Dialect::Gemini => Tokens {
                    input: Some(9),
                    ..Tokens::default()
                },
                _ => Tokens::default(),
            };
        }
    };
    match dialect {
        Dialect::Chat | Dialect::Responses => Tokens {
            input: Some(input),
            output: Some(output),
            reasoning: Some(reasoning),
            cache_read: Some(cache_read),
            cache_write,
            cache_write_1h: None,
            estimated_output: None,
        },
        Dialect::Messages => Tokens {
            input: Some(input),
            output: Some(output),
            reasoning: None,
            cache_read: Some(cache_read),
            cache_write: Some(cache_write.unwrap_or(0)),
            cache_write_1h: Some(0),
            estimated_output: None,
        },
        Dialect::Gemini => Tokens {
            input: Some(input),
            output: Some(output),
            reasoning: Some(reasoning).filter(|&n| n > 0),
            cache_read: Some(cache_read).filter(|&n| n > 0),
            cache_write: None,
            cache_write_1h: None,
            estimated_output: None,
        },
    }
}

/// Whether `client` says the same counts as `upstream`: every known count is the same, and an
/// unknown one is still unknown, or 0 where the client dialect requires the field.
fn same_counts(upstream: &Tokens, client: &Tokens, dialect: Dialect, stream: bool) {
    let required = |field: &str| match dialect {
        Dialect::Chat => matches!(field, "input" | "output"),
        Dialect::Responses => matches!(field, "input" | "output" | "cache_read" | "reasoning"),
        // message_start's input and message_delta's output.
        Dialect::Messages => matches!(field, "input" | "output") || !stream && field == "input",
        Dialect::Gemini => false,
    };
    // Gemini has no field for cache writes (its prompt count includes them).
    let carried = |field: &str| !(dialect == Dialect::Gemini && field == "cache_write");
    for (field, up, got) in [
        ("input", upstream.input, client.input),
        ("output", upstream.output, client.output),
        ("cache_read", upstream.cache_read, client.cache_read),
        ("cache_write", upstream.cache_write, client.cache_write),
        ("reasoning", upstream.reasoning, client.reasoning),
    ] {
        match up {
            Some(_) if !carried(field) => assert_eq!(got, None, "{field} to {dialect}"),
            Some(_) => assert_eq!(got, up, "{field} to {dialect}"),
            None if required(field) => {
                assert!(
                    matches!(got, None | Some(0)),
                    "{field} to {dialect}: {got:?}"
                )
            }
            None => assert_eq!(got, None, "{field} to {dialect}"),
        }
    }
}

fn same_answer(upstream: &Said, client: &Said, dialect: Dialect, stream: bool) {
    assert_eq!(client.text, upstream.text, "text to {dialect}");
    assert_eq!(
        client.reasoning, upstream.reasoning,
        "reasoning to {dialect}"
    );
    assert_eq!(client.tools, upstream.tools, "tools to {dialect}");
    assert_eq!(client.error, upstream.error, "error to {dialect}");
    assert_eq!(client.ended, upstream.ended, "end to {dialect}");
    if upstream.error.is_none() {
        assert_eq!(client.stop, upstream.stop, "stop to {dialect}");
        same_counts(&upstream.usage, &client.usage, dialect, stream);
    }
}

// === translating ===

fn render(pieces: VecDeque<crate::relay::Piece>) -> String {
    let mut out = Vec::new();
    for p in pieces {
        match p {
            crate::relay::Piece::Bytes(b) => out.extend_from_slice(&b),
            crate::relay::Piece::TimingComment => out.extend_from_slice(COMMENT.as_bytes()),
        }
    }
    String::from_utf8(out).unwrap()
}

/// Translates `upstream` bytes cut at `cuts`, and returns the client's bytes.
fn translate(up: Dialect, client: Dialect, bytes: &str, cuts: &[usize]) -> String {
    let mut t = StreamTranslator::new(up, client, &opts());
    let mut out = VecDeque::new();
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    bounds.push(bytes.len());
    bounds.sort_unstable();
    let mut from = 0;
    for to in bounds {
        t.push(&bytes.as_bytes()[from..to], &mut out);
        from = to;
    }
    t.finish(BodyEnd::Eof, &mut out);
    render(out)
}

/// The observer's reading of a stream of `dialect`.
fn observe(dialect: Dialect, bytes: &str) -> crate::observe::StreamSummary {
    let mut obs = StreamObserver::new(dialect, Some(Duration::ZERO));
    obs.on_chunk(Duration::from_millis(1), bytes.as_bytes());
    obs.on_end(Duration::from_millis(2), BodyEnd::Eof);
    obs.summary()
}

/// The events of a client stream, with whether the timing comment came right before each.
fn events(bytes: &str) -> Vec<(Option<String>, String, bool)> {
    let mut out = Vec::new();
    let mut comment = false;
    SseScanner::new().feed(bytes.as_bytes(), &mut |item| match item {
        SseItem::Comment => comment = true,
        SseItem::Event { event, data, .. } => {
            out.push((event.map(str::to_owned), data.to_owned(), comment));
            comment = false;
        }
        SseItem::Boundary { .. } => {}
    });
    out
}

/// Every check of one translated stream.
fn check_pair(up: Dialect, client: Dialect, s: Scenario) {
    let upstream = fixture(up, s);
    let up_said = said(&decode_stream(up, upstream));
    let got = translate(up, client, upstream, &[]);
    let client_said = said(&decode_stream(client, &got));
    same_answer(&up_said, &client_said, client, true);

    // One comment, right before the terminal frame, which ends the stream; Gemini has no
    // terminal frame, and its comment follows the last chunk.
    assert_eq!(
        got.matches(COMMENT).count(),
        1,
        "{up}→{client} {s:?}:\n{got}"
    );
    let evs = events(&got);
    let frames: Vec<_> = evs
        .iter()
        .map(|(e, d, _)| crate::classify::classify_event(client, e.as_deref(), d))
        .collect();
    let last = frames.len() - 1;
    assert!(
        frames[last].terminal_frame,
        "{up}→{client} {s:?}: last is not terminal"
    );
    assert_eq!(frames.iter().filter(|c| c.terminal_frame).count(), 1);
    if client == Dialect::Gemini {
        assert!(
            !evs[last].2 && got.ends_with(COMMENT),
            "{up}→{client} {s:?}:\n{got}"
        );
    } else {
        assert!(
            evs[last].2,
            "{up}→{client} {s:?}: comment not before the terminal"
        );
    }
    if client == Dialect::Messages {
        assert_eq!(evs[0].0.as_deref(), Some("message_start"), "{got}");
        for (e, d, _) in &evs {
            let json: Value = serde_json::from_str(d).unwrap();
            assert_eq!(json["type"].as_str(), e.as_deref(), "event line = type");
        }
    }
    if client == Dialect::Responses {
        let seqs: Vec<u64> = evs
            .iter()
            .map(|(_, d, _)| {
                serde_json::from_str::<Value>(d).unwrap()["sequence_number"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    }

    // The classifier's reading: effective output of the right kinds, the right outcome, and
    // the same normalised counts as it reads from the upstream's own stream.
    use crate::classify::{EffectiveKind, EventClass};
    let kinds = |k: EffectiveKind| {
        frames
            .iter()
            .filter(|c| c.class == EventClass::Effective(k))
            .count()
    };
    assert_eq!(
        kinds(EffectiveKind::Text) > 0,
        !up_said.text.is_empty(),
        "{up}→{client} {s:?}"
    );
    assert_eq!(
        kinds(EffectiveKind::Reasoning) > 0,
        !up_said.reasoning.is_empty()
    );
    assert_eq!(
        kinds(EffectiveKind::ToolArgs) > 0,
        !up_said.tools.is_empty()
    );
    let outcome = match s {
        Scenario::MaxTokens => Outcome::Incomplete,
        Scenario::Overload => Outcome::UpstreamError,
        _ => Outcome::Completed,
    };
    let client_obs = observe(client, &got);
    assert_eq!(client_obs.outcome, Some(outcome), "{up}→{client} {s:?}");
    let up_obs = observe(up, upstream);
    assert_eq!(up_obs.outcome, Some(outcome), "{up} fixture {s:?}");
    if s != Scenario::Overload {
        same_counts(&up_obs.tokens, &client_obs.tokens, client, true);
    }
}

fn check_scenario(s: Scenario) {
    for up in Dialect::ALL {
        let mut e = expected(s);
        e.usage = expected_usage(s, up);
        let mut got = said(&decode_stream(up, fixture(up, s)));
        // Tool ids differ by dialect (call_W1, toolu_01W1); their tail is the scenario's.
        for (id, _, _) in &mut got.tools {
            *id = id[id.len() - 2..].to_owned();
        }
        assert_eq!(got, e, "{up} fixture {s:?}");
        for client in Dialect::ALL {
            check_pair(up, client, s);
        }
    }
}

#[test]
fn plain_text_crosses_every_pair() {
    check_scenario(Scenario::Text);
}

#[test]
fn reasoning_then_text_crosses_every_pair() {
    check_scenario(Scenario::Reasoning);
}

#[test]
fn a_tool_call_crosses_every_pair() {
    check_scenario(Scenario::Tool);
}

#[test]
fn two_parallel_tool_calls_cross_every_pair() {
    check_scenario(Scenario::Parallel);
}

#[test]
fn a_max_tokens_stop_stays_incomplete_in_every_pair() {
    check_scenario(Scenario::MaxTokens);
}

#[test]
fn cache_reads_and_writes_cross_every_pair() {
    check_scenario(Scenario::Cache);
}

#[test]
fn an_in_band_overload_stays_an_overload_in_every_pair() {
    check_scenario(Scenario::Overload);
}

// === exact wire values ===

fn json_events(bytes: &str) -> Vec<Value> {
    events(bytes)
        .into_iter()
        .filter(|(_, d, _)| d != "[DONE]")
        .map(|(_, d, _)| serde_json::from_str(&d).unwrap())
        .collect()
}

#[test]
fn cache_counts_are_written_once_in_each_dialects_terms() {
    let chat = fixture(Dialect::Chat, Scenario::Cache);
    // To Anthropic: input_tokens excludes both cache counts.
    let got = json_events(&translate(Dialect::Chat, Dialect::Messages, chat, &[]));
    let delta = got.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["usage"]["input_tokens"], 50);
    assert_eq!(delta["usage"]["cache_read_input_tokens"], 1000);
    assert_eq!(delta["usage"]["cache_creation_input_tokens"], 150);
    assert_eq!(delta["usage"]["output_tokens"], 3);
    // The start knew no input yet: 0, the field being required.
    assert_eq!(got[0]["message"]["usage"]["input_tokens"], 0);

    let messages = fixture(Dialect::Messages, Scenario::Cache);
    let got = json_events(&translate(
        Dialect::Messages,
        Dialect::Messages,
        messages,
        &[],
    ));
    assert_eq!(got[0]["message"]["usage"]["input_tokens"], 50);
    assert_eq!(got[0]["message"]["usage"]["cache_read_input_tokens"], 1000);
    let got = json_events(&translate(Dialect::Messages, Dialect::Chat, messages, &[]));
    let usage = &got.last().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], 1200);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 1000);
    assert_eq!(usage["prompt_tokens_details"]["cache_write_tokens"], 150);
    assert_eq!(usage["completion_tokens"], 3);
    assert_eq!(usage["total_tokens"], 1203);
    assert!(
        usage.get("completion_tokens_details").is_none(),
        "unknown reasoning is left out"
    );
    let got = json_events(&translate(
        Dialect::Messages,
        Dialect::Responses,
        messages,
        &[],
    ));
    let usage = &got.last().unwrap()["response"]["usage"];
    assert_eq!(usage["input_tokens"], 1200);
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 1000);
    assert_eq!(usage["input_tokens_details"]["cache_write_tokens"], 150);
    assert_eq!(usage["total_tokens"], 1203);
}

#[test]
fn the_chat_usage_chunk_comes_only_when_the_client_asked_for_it() {
    let up = fixture(Dialect::Messages, Scenario::Text);
    let mut t = StreamTranslator::new(
        Dialect::Messages,
        Dialect::Chat,
        &ClientStreamOptions {
            include_usage: false,
            timing_comment: true,
            ..opts()
        },
    );
    let mut out = VecDeque::new();
    t.push(up.as_bytes(), &mut out);
    let got = render(out);
    assert!(!got.contains("\"usage\""), "{got}");
    assert!(got.ends_with(&format!("{COMMENT}data: [DONE]\n\n")));
    let with = translate(Dialect::Messages, Dialect::Chat, up, &[]);
    let last = json_events(&with).pop().unwrap();
    assert_eq!(last["choices"], Value::Array(vec![]));
    assert_eq!(last["usage"]["prompt_tokens"], 12);
}

#[test]
fn chat_chunks_have_the_shape_the_openai_sdk_accumulates() {
    let got = json_events(&translate(
        Dialect::Messages,
        Dialect::Chat,
        fixture(Dialect::Messages, Scenario::Parallel),
        &[],
    ));
    assert_eq!(got[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(
        got[0]["model"], "claude-sonnet-4-5-20250929",
        "the upstream's own name"
    );
    assert_eq!(got[0]["id"], "chatcmpl-lt0001");
    let headers: Vec<&Value> = got
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]
                .get("id")
                .map(|_| &c["choices"][0]["delta"]["tool_calls"][0])
        })
        .collect();
    assert_eq!(headers.len(), 2);
    assert_eq!(headers[1]["index"], 1);
    assert_eq!(headers[1]["type"], "function");
    assert_eq!(headers[1]["function"]["name"], "get_time");
    assert_eq!(headers[1]["function"]["arguments"], "");
    let finish: Vec<&Value> = got
        .iter()
        .filter_map(|c| {
            c["choices"][0]
                .get("finish_reason")
                .filter(|f| !f.is_null())
        })
        .collect();
    assert_eq!(finish, [&Value::from("tool_calls")]);
}

#[test]
fn an_anthropic_signature_survives_the_hub_to_an_anthropic_client() {
    let up = fixture(Dialect::Messages, Scenario::Reasoning);
    let answer = decode_stream(
        Dialect::Messages,
        &translate(Dialect::Messages, Dialect::Messages, up, &[]),
    );
    assert_eq!(
        answer.blocks[0].signature.as_deref(),
        Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds")
    );
}

#[test]
fn reasoning_state_crosses_as_signature_and_encrypted_content() {
    let sig = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds";
    let up = fixture(Dialect::Messages, Scenario::Reasoning);
    let got = json_events(&translate(Dialect::Messages, Dialect::Responses, up, &[]));
    let done = got
        .iter()
        .find(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "reasoning")
        .unwrap();
    assert_eq!(done["item"]["encrypted_content"], sig);
    let completed = &got.last().unwrap()["response"]["output"][0];
    assert_eq!(completed["encrypted_content"], sig);
    // And back: a Responses upstream's encrypted reasoning is an Anthropic signature.
    let up = fixture(Dialect::Responses, Scenario::Reasoning);
    let answer = decode_stream(
        Dialect::Messages,
        &translate(Dialect::Responses, Dialect::Messages, up, &[]),
    );
    assert_eq!(answer.blocks[0].signature.as_deref(), Some("gAAAAABo-enc"));
}

#[test]
fn summary_parts_are_a_blank_line_apart() {
    let ev =
        |seq: u32, body: &str| format!("event: x\ndata: {{\"sequence_number\":{seq},{body}}}\n\n");
    let stream = [
        ev(0, r#""type":"response.created","response":{"id":"r","output":[]}"#),
        ev(1, r#""type":"response.output_item.added","output_index":0,"item":{"type":"reasoning","summary":[]}"#),
        ev(2, r#""type":"response.reasoning_summary_part.added","output_index":0,"summary_index":0"#),
        ev(3, r#""type":"response.reasoning_summary_text.delta","output_index":0,"summary_index":0,"delta":"One.""#),
        ev(4, r#""type":"response.reasoning_summary_part.added","output_index":0,"summary_index":1"#),
        ev(5, r#""type":"response.reasoning_summary_text.delta","output_index":0,"summary_index":1,"delta":"Two.""#),
        ev(6, r#""type":"response.output_item.done","output_index":0,"item":{"type":"reasoning"}"#),
        ev(7, r#""type":"response.completed","response":{"id":"r","status":"completed"}"#),
    ]
    .concat();
    assert_eq!(
        said(&decode_stream(Dialect::Responses, &stream)).reasoning,
        "One.\n\nTwo."
    );
}

#[test]
fn a_cut_stream_gets_no_terminal_frame_and_no_comment() {
    for up in Dialect::ALL {
        let whole = fixture(up, Scenario::Text);
        // Cut inside the text, before any end.
        let cut = &whole[..whole.find("Bye").unwrap()];
        for client in Dialect::ALL {
            let mut t = StreamTranslator::new(up, client, &opts());
            let mut out = VecDeque::new();
            t.push(cut.as_bytes(), &mut out);
            t.finish(BodyEnd::Error, &mut out);
            assert!(!t.terminal_seen());
            let got = render(out);
            assert!(!got.contains(COMMENT), "{up}→{client}: {got}");
            let obs = observe(client, &got);
            assert_eq!(
                obs.outcome,
                Some(Outcome::UpstreamClosedEarly),
                "{up}→{client}"
            );
            assert!(
                obs.marks.first_visible.is_some(),
                "the text so far was relayed"
            );
        }
    }
}

#[test]
fn a_failed_stream_ends_in_the_clients_dialect_and_takes_nothing_more() {
    for up in Dialect::ALL {
        let whole = fixture(up, Scenario::Text);
        let (cut, rest) = whole.split_at(whole.find("Bye").unwrap());
        for client in Dialect::ALL {
            let mut t = StreamTranslator::new(up, client, &opts());
            let mut out = VecDeque::new();
            t.push(cut.as_bytes(), &mut out);
            t.fail(ErrorKind::Timeout, "no output for \"30 s\"", &mut out);
            t.push(rest.as_bytes(), &mut out);
            t.finish(BodyEnd::Eof, &mut out);
            let got = render(out);
            assert_eq!(got.matches(COMMENT).count(), 1, "{up}→{client}");
            assert!(!got.contains("Bye"), "{up}→{client}");
            let answer = decode_stream(client, &got);
            assert_eq!(answer.error.as_ref().map(|e| e.0), Some(ErrorKind::Timeout));
            assert_eq!(observe(client, &got).outcome, Some(Outcome::UpstreamError));
        }
        // After the terminal, there is nothing to fail.
        let mut t = StreamTranslator::new(up, Dialect::Chat, &opts());
        let mut out = VecDeque::new();
        t.push(whole.as_bytes(), &mut out);
        let before = out.len();
        t.fail(ErrorKind::Timeout, "late", &mut out);
        assert_eq!(out.len(), before);
    }
}

#[test]
fn keep_alives_reach_the_client_as_its_own_kind_of_keep_alive() {
    // Each text fixture carries one upstream keep-alive: a Chat comment, a Responses
    // `keepalive`, an Anthropic `ping`. Gemini has none to send, and none is written to a
    // Gemini client (its SDKs fail on a comment).
    for up in Dialect::ALL {
        let upstream = fixture(up, Scenario::Text);
        for client in Dialect::ALL {
            let got = translate(up, client, upstream, &[]);
            let pings = got.matches("event: ping\n").count();
            let comments = got.matches(": keep-alive\n\n").count();
            let expected = usize::from(up != Dialect::Gemini && client != Dialect::Gemini);
            assert_eq!(pings + comments, expected, "{up}→{client}:\n{got}");
            if client != Dialect::Messages {
                assert_eq!(pings, 0);
            }
            let start = got.find("message_start");
            let ping = got.find("event: ping");
            assert!(
                ping.is_none() || ping > start,
                "no event before message_start"
            );
        }
    }
}

#[test]
fn mistral_content_parts_are_text_and_reasoning() {
    let chunk =
        |delta: &str| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n");
    let stream = [
        chunk(r#"{"role":"assistant","content":""}"#),
        chunk(r#"{"content":[{"type":"thinking","thinking":[{"type":"text","text":"Hmm, "}]}]}"#),
        chunk(r#"{"content":[{"type":"thinking","thinking":[{"type":"text","text":"yes."}]},{"type":"text","text":"3"}]}"#),
        chunk(r#"{"content":[{"type":"text","text":" apples"}]}"#),
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let s = said(&decode_stream(Dialect::Chat, &stream));
    assert_eq!(s.reasoning, "Hmm, yes.");
    assert_eq!(s.text, "3 apples");
    let got = said(&decode_stream(
        Dialect::Messages,
        &translate(Dialect::Chat, Dialect::Messages, &stream, &[]),
    ));
    assert_eq!((got.reasoning, got.text), (s.reasoning, s.text));
}

#[test]
fn a_chat_upstream_without_done_completes_only_on_a_clean_end() {
    let whole = fixture(Dialect::Chat, Scenario::Text);
    let no_done = whole.strip_suffix("data: [DONE]\n\n").unwrap();
    for (end, complete) in [(BodyEnd::Eof, true), (BodyEnd::Error, false)] {
        let mut t = StreamTranslator::new(Dialect::Chat, Dialect::Messages, &opts());
        let mut out = VecDeque::new();
        t.push(no_done.as_bytes(), &mut out);
        assert!(!t.terminal_seen());
        t.finish(end, &mut out);
        assert_eq!(t.terminal_seen(), complete);
        assert_eq!(render(out).contains("message_stop"), complete);
    }
}

#[test]
fn every_event_is_translated_in_the_push_that_completes_it() {
    let up = fixture(Dialect::Messages, Scenario::Text);
    let first_delta_end = up.find("\"Hello\"}}\n\n").unwrap() + "\"Hello\"}}\n\n".len();
    let mut t = StreamTranslator::new(Dialect::Messages, Dialect::Chat, &opts());
    let mut out = VecDeque::new();
    t.push(&up.as_bytes()[..first_delta_end], &mut out);
    let got = render(std::mem::take(&mut out));
    assert!(got.contains("\"content\":\"Hello\""), "{got}");
    // One byte short of the next event's end gives nothing new.
    let next_end = up[first_delta_end..].find("\n\n").unwrap() + first_delta_end + 2;
    t.push(&up.as_bytes()[first_delta_end..next_end - 1], &mut out);
    assert!(out.is_empty());
    t.push(&up.as_bytes()[next_end - 1..next_end], &mut out);
    assert!(render(out).contains("world"));
}

// === whole bodies ===

fn decode_whole(dialect: Dialect, body: &[u8]) -> Answer {
    let mut answer = Answer::default();
    decode_body(dialect, body, &mut |ev| answer.apply(&ev)).unwrap();
    answer
}

#[test]
fn whole_bodies_cross_every_pair() {
    for up in Dialect::ALL {
        for (i, body) in body_fixtures(up).into_iter().enumerate() {
            let up_said = said(&decode_whole(up, body.as_bytes()));
            let up_whole = whole_answer(up, 200, BodyEnd::Eof, body.as_bytes());
            for client in Dialect::ALL {
                let got = translate_body(up, client, body.as_bytes(), &opts()).unwrap();
                let client_said = said(&decode_whole(client, &got));
                same_answer(&up_said, &client_said, client, false);
                let whole = whole_answer(client, 200, BodyEnd::Eof, &got);
                assert_eq!(whole.outcome, up_whole.outcome, "{up}→{client} body {i}");
                assert_eq!(whole.has_text, up_whole.has_text, "{up}→{client} body {i}");
                same_counts(&up_whole.tokens, &whole.tokens, client, false);
            }
        }
    }
}

#[test]
fn body_fixtures_decode_to_what_they_say() {
    for up in Dialect::ALL {
        let [reasoning, parallel, max] =
            body_fixtures(up).map(|b| said(&decode_whole(up, b.as_bytes())));
        assert_eq!(reasoning.text, "The answer is 42.");
        assert_eq!(reasoning.reasoning, "Let me think: 6×7.");
        assert_eq!(reasoning.usage.input, Some(1200), "{up}");
        assert_eq!(reasoning.usage.cache_read, Some(1000), "{up}");
        // Google reports no cache writes.
        let writes = Some(150).filter(|_| up != Dialect::Gemini);
        assert_eq!(reasoning.usage.cache_write, writes, "{up}");
        assert_eq!(parallel.tools.len(), 2);
        assert_eq!(parallel.tools[1].2["tz"], "Europe/Paris");
        assert_eq!(parallel.stop, Some(StopReason::ToolUse));
        assert_eq!(max.stop, Some(StopReason::MaxTokens));
        assert_eq!(max.text, "Once upon a time");
    }
}

#[test]
fn cut_tool_arguments_cannot_become_an_anthropic_input() {
    let body = br#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"city\":\"Par"}}]},"finish_reason":"length"}]}"#;
    assert_eq!(
        translate_body(Dialect::Chat, Dialect::Messages, body, &opts()),
        Err(TranslateError::ToolArgumentsNotAnObject { block: 0 })
    );
    // OpenAI clients carry arguments as text, so they get them as they came.
    assert!(translate_body(Dialect::Chat, Dialect::Responses, body, &opts()).is_ok());
    assert_eq!(
        translate_body(Dialect::Chat, Dialect::Messages, b"<html>", &opts()),
        Err(TranslateError::NotAnAnswer)
    );
}

// === errors ===

#[test]
fn error_responses_keep_their_kind_in_every_dialect() {
    let anthropic =
        |t: &str| format!(r#"{{"type":"error","error":{{"type":"{t}","message":"m"}}}}"#);
    let openai = |t: &str, c: &str| {
        format!(r#"{{"error":{{"message":"m","type":"{t}","param":null,"code":{c}}}}}"#)
    };
    let cases: Vec<(Dialect, u16, String, u16, &str, u16, &str)> = vec![
        // upstream, status, body, Anthropic client status + type, OpenAI client status + type
        (
            Dialect::Messages,
            529,
            anthropic("overloaded_error"),
            529,
            "overloaded_error",
            503,
            "server_error",
        ),
        (
            Dialect::Chat,
            503,
            openai("server_error", "null"),
            529,
            "overloaded_error",
            503,
            "server_error",
        ),
        (
            Dialect::Chat,
            429,
            openai("requests", "\"rate_limit_exceeded\""),
            429,
            "rate_limit_error",
            429,
            "requests",
        ),
        (
            Dialect::Messages,
            429,
            anthropic("rate_limit_error"),
            429,
            "rate_limit_error",
            429,
            "requests",
        ),
        (
            Dialect::Responses,
            400,
            openai("invalid_request_error", "null"),
            400,
            "invalid_request_error",
            400,
            "invalid_request_error",
        ),
        (
            Dialect::Chat,
            401,
            openai("invalid_request_error", "\"invalid_api_key\""),
            401,
            "authentication_error",
            401,
            "invalid_request_error",
        ),
        (
            Dialect::Messages,
            403,
            anthropic("permission_error"),
            403,
            "permission_error",
            403,
            "invalid_request_error",
        ),
        (
            Dialect::Messages,
            404,
            anthropic("not_found_error"),
            404,
            "not_found_error",
            404,
            "invalid_request_error",
        ),
        (
            Dialect::Chat,
            500,
            openai("server_error", "null"),
            500,
            "api_error",
            500,
            "server_error",
        ),
        (
            Dialect::Messages,
            500,
            "<html>oops</html>".to_owned(),
            500,
            "api_error",
            500,
            "server_error",
        ),
        // A 4xx the status names only broadly takes the body's kind, and keeps its status.
        (
            Dialect::Messages,
            400,
            anthropic("rate_limit_error"),
            400,
            "rate_limit_error",
            400,
            "requests",
        ),
    ];
    for (up, status, body, a_status, a_type, o_status, o_type) in cases {
        let (s, b) = translate_error(up, Dialect::Messages, status, body.as_bytes());
        let b: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            (s, b["error"]["type"].as_str()),
            (a_status, Some(a_type)),
            "{up} {status}"
        );
        assert_eq!(b["type"], "error");
        for client in [Dialect::Chat, Dialect::Responses] {
            let (s, b) = translate_error(up, client, status, body.as_bytes());
            let b: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(
                (s, b["error"]["type"].as_str()),
                (o_status, Some(o_type)),
                "{up} {status}"
            );
            assert!(b["error"]["message"].is_string());
        }
    }
    let (_, b) = translate_error(
        Dialect::Messages,
        Dialect::Chat,
        529,
        anthropic("overloaded_error").as_bytes(),
    );
    let b: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(b["error"]["message"], "m");
    assert_eq!(b["error"]["code"], "server_is_overloaded");
}

#[test]
fn an_in_band_error_becomes_each_dialects_error_frames() {
    let up = fixture(Dialect::Messages, Scenario::Overload);
    let chat = translate(Dialect::Messages, Dialect::Chat, up, &[]);
    assert!(
        chat.ends_with(&format!("{COMMENT}data: [DONE]\n\n")),
        "{chat}"
    );
    let err = json_events(&chat).pop().unwrap();
    assert_eq!(err["error"]["code"], "server_is_overloaded");
    let responses = json_events(&translate(Dialect::Messages, Dialect::Responses, up, &[]));
    let n = responses.len();
    assert_eq!(responses[n - 2]["type"], "error");
    assert_eq!(responses[n - 1]["type"], "response.failed");
    assert_eq!(responses[n - 1]["response"]["status"], "failed");
    assert_eq!(
        responses[n - 1]["response"]["error"]["code"],
        "server_is_overloaded"
    );
    let messages = translate(
        Dialect::Chat,
        Dialect::Messages,
        fixture(Dialect::Chat, Scenario::Overload),
        &[],
    );
    assert!(
        messages.contains(&format!("{COMMENT}event: error\n")),
        "{messages}"
    );
    let err = json_events(&messages).pop().unwrap();
    assert_eq!(err["error"]["type"], "overloaded_error");
}

// === any split ===

fn dialects() -> impl Strategy<Value = Dialect> {
    prop_oneof![
        Just(Dialect::Chat),
        Just(Dialect::Responses),
        Just(Dialect::Messages),
        Just(Dialect::Gemini)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_split_of_the_upstream_gives_the_same_client_bytes_and_answer(
        up in dialects(),
        client in dialects(),
        s in 0..SCENARIOS.len(),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let upstream = fixture(up, SCENARIOS[s]);
        let whole = translate(up, client, upstream, &[]);
        let split = translate(up, client, upstream, &cuts);
        prop_assert_eq!(&split, &whole);
        let up_said = said(&decode_stream(up, upstream));
        same_answer(&up_said, &said(&decode_stream(client, &split)), client, true);
    }
}

#[test]
fn the_model_reported_is_the_upstreams_own_else_the_one_it_was_asked_for() {
    let nameless = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n\
        data: [DONE]\n\n";
    let got = json_events(&translate(Dialect::Chat, Dialect::Messages, nameless, &[]));
    assert_eq!(got[0]["message"]["model"], "client-model", "{got:?}");
    let named = fixture(Dialect::Chat, Scenario::Cache);
    let got = json_events(&translate(Dialect::Chat, Dialect::Messages, named, &[]));
    let upstream_model = json_events(named)[0]["model"].clone();
    assert!(upstream_model.is_string());
    assert_eq!(got[0]["message"]["model"], upstream_model);
}

// === Gemini ===

fn gemini_chunk(parts: &str, tail: &str) -> String {
    format!(
        "data: {{\"candidates\": [{{\"content\": {{\"parts\": [{parts}],\"role\": \"model\"}}{tail},\"index\": 0}}]}}\r\n\r\n"
    )
}

#[test]
fn gemini_calls_without_ids_get_one_each_and_end_as_tool_use() {
    let up = gemini_chunk(
        r#"{"functionCall": {"name": "a", "args": {"x": 1}}},{"functionCall": {"name": "b"}}"#,
        r#","finishReason": "STOP""#,
    );
    for client in Dialect::ALL {
        let got = said(&decode_stream(
            client,
            &translate(Dialect::Gemini, client, &up, &[]),
        ));
        let ids: Vec<&str> = got.tools.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(ids, ["call_0", "call_1"], "{client}");
        assert_eq!(got.tools[0].2, serde_json::json!({"x": 1}));
        assert_eq!(got.stop, Some(StopReason::ToolUse), "{client}");
    }
}

#[test]
fn gemini_odd_ends_become_the_hubs() {
    let malformed = gemini_chunk(
        r#"{"text": ""}"#,
        r#","finishReason": "MALFORMED_FUNCTION_CALL""#,
    );
    let a = decode_stream(Dialect::Gemini, &malformed);
    assert_eq!(a.error.as_ref().map(|e| e.0), Some(ErrorKind::Server));
    assert!(a.error.unwrap().1.contains("MALFORMED_FUNCTION_CALL"));
    let blocked = "data: {\"promptFeedback\": {\"blockReason\": \"SAFETY\"},\"usageMetadata\": {\"promptTokenCount\": 5}}\r\n\r\n";
    let a = decode_stream(Dialect::Gemini, blocked);
    assert_eq!((a.stop, a.ended), (Some(StopReason::ContentFilter), true));
    assert_eq!(a.usage.input, Some(5));
    let recitation = gemini_chunk(r#"{"text": "x"}"#, r#","finishReason": "RECITATION""#);
    assert_eq!(
        decode_stream(Dialect::Gemini, &recitation).stop,
        Some(StopReason::ContentFilter)
    );
    let in_band = "data: {\"error\": {\"code\": 429,\"message\": \"slow\",\"status\": \"RESOURCE_EXHAUSTED\"}}\r\n\r\n";
    let a = decode_stream(Dialect::Gemini, in_band);
    assert_eq!(a.error, Some((ErrorKind::RateLimited, "slow".to_owned())));
    // The code decides where it is precise (529 is named INTERNAL by google.rpc.Code).
    let overloaded =
        "data: {\"error\": {\"code\": 529,\"message\": \"o\",\"status\": \"INTERNAL\"}}\r\n\r\n";
    let a = decode_stream(Dialect::Gemini, overloaded);
    assert_eq!(a.error.map(|e| e.0), Some(ErrorKind::Overloaded));
    let refined =
        "data: {\"error\": {\"code\": 500,\"message\": \"o\",\"status\": \"UNAVAILABLE\"}}\r\n\r\n";
    let a = decode_stream(Dialect::Gemini, refined);
    assert_eq!(a.error.map(|e| e.0), Some(ErrorKind::Overloaded));
}

#[test]
fn cache_counts_cross_gemini_in_googles_terms() {
    let messages = fixture(Dialect::Messages, Scenario::Cache);
    let got = json_events(&translate(
        Dialect::Messages,
        Dialect::Gemini,
        messages,
        &[],
    ));
    let last = got.last().unwrap();
    assert_eq!(
        last["usageMetadata"],
        serde_json::json!({"promptTokenCount": 1200, "cachedContentTokenCount": 1000,
            "candidatesTokenCount": 3, "totalTokenCount": 1203}),
        "Anthropic reports no reasoning count, so none is written"
    );
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    let reasoning = fixture(Dialect::Chat, Scenario::Reasoning);
    let got = json_events(&translate(Dialect::Chat, Dialect::Gemini, reasoning, &[]));
    let usage = &got.last().unwrap()["usageMetadata"];
    assert_eq!(
        usage["candidatesTokenCount"], 12,
        "thoughts are outside candidates"
    );
    assert_eq!(usage["thoughtsTokenCount"], 18);
    assert!(got
        .iter()
        .any(|e| e["candidates"][0]["content"]["parts"][0]["thought"] == true));
    // And back: Anthropic's input_tokens leaves the cache out.
    let gemini = fixture(Dialect::Gemini, Scenario::Cache);
    let got = json_events(&translate(Dialect::Gemini, Dialect::Messages, gemini, &[]));
    let delta = got.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["usage"]["input_tokens"], 200);
    assert_eq!(delta["usage"]["cache_read_input_tokens"], 1000);
}

#[test]
fn a_gemini_client_gets_no_timing_comment_unless_asked() {
    let up = fixture(Dialect::Chat, Scenario::Text);
    let quiet = ClientStreamOptions {
        timing_comment: false,
        ..opts()
    };
    let mut t = StreamTranslator::new(Dialect::Chat, Dialect::Gemini, &quiet);
    let mut out = VecDeque::new();
    t.push(up.as_bytes(), &mut out);
    t.finish(BodyEnd::Eof, &mut out);
    assert!(out
        .iter()
        .all(|p| !matches!(p, crate::relay::Piece::TimingComment)));
    let got = render(out);
    assert!(
        got.lines().all(|l| l.is_empty() || l.starts_with("data: ")),
        "{got}"
    );
    assert!(!got.contains('\n') || got.contains("\r\n"), "CRLF framing");
}

#[test]
fn cut_arguments_cannot_become_a_gemini_call() {
    let up = fixture(Dialect::Chat, Scenario::Tool);
    let cut = up.replace(r#"\"Paris\"}"#, r#"\"Par"#);
    let got = translate(Dialect::Chat, Dialect::Gemini, &cut, &[]);
    let a = decode_stream(Dialect::Gemini, &got);
    assert_eq!(
        a.error.as_ref().map(|e| e.0),
        Some(ErrorKind::Server),
        "{got}"
    );
    assert!(a.blocks.is_empty(), "no call was sent: {got}");
    let body = br#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"city\":\"Par"}}]},"finish_reason":"length"}]}"#;
    assert_eq!(
        translate_body(Dialect::Chat, Dialect::Gemini, body, &opts()),
        Err(TranslateError::ToolArgumentsNotAnObject { block: 0 })
    );
}

#[test]
fn errors_cross_gemini_in_googles_shape() {
    let openai = br#"{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    let (status, body) = translate_error(Dialect::Chat, Dialect::Gemini, 429, openai);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 429);
    assert_eq!(
        v,
        serde_json::json!({"error": {"code": 429, "message": "slow down",
                                     "status": "RESOURCE_EXHAUSTED"}})
    );
    for (status, word) in [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
    ] {
        let (got, body) = translate_error(Dialect::Messages, Dialect::Gemini, status, b"{}");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((got, v["error"]["status"].as_str()), (status, Some(word)));
    }
    let google = br#"{"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}"#;
    let (status, body) = translate_error(Dialect::Gemini, Dialect::Messages, 503, google);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, v["error"]["type"].as_str()),
        (529, Some("overloaded_error"))
    );
    assert_eq!(v["error"]["message"], "overloaded");
    // A 400 whose status names the kind more precisely keeps it.
    let denied = br#"{"error": {"code": 400, "message": "m", "status": "FAILED_PRECONDITION"}}"#;
    let (status, _) = translate_error(Dialect::Gemini, Dialect::Chat, 400, denied);
    assert_eq!(status, 400);
}
