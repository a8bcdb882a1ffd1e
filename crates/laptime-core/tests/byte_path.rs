//! The byte path against the full parse, event by event: every event the byte path decides
//! must get the classification the full parse gives it, and an observer on the byte path must
//! give the same chunk plans, marks, counts, tokens (the tokenizer's estimate included), finish
//! and errors as one that parses every event in full, after every chunk, however the stream is
//! cut. The corpus: every dialect's stream fixtures, hand-written streams with the tricky cases
//! (needles inside string content, escaped quotes, usage in the middle, several choices, tool
//! calls, reasoning, errors, duplicate keys, odd shapes), and random mutations of all of them.
//! The sim's wire output is checked the same way in `laptime-sim`'s tests.

use std::time::Duration;

use laptime_core::classify::{classify_body, classify_event, read_body_quick, read_event_quick};
use laptime_core::observe::{BodyEnd, StreamObserver};
use laptime_core::sse::{SseItem, SseScanner};
use laptime_core::Dialect;
use proptest::prelude::*;

macro_rules! fixture {
    ($dialect:ident, $name:literal) => {
        (
            Dialect::$dialect,
            include_str!(concat!("../src/translate/stream/fixtures/", $name, ".sse")),
        )
    };
}

/// Recorded-shape streams of every dialect (the translation fixtures).
const FIXTURES: [(Dialect, &str); 28] = [
    fixture!(Chat, "chat_cache"),
    fixture!(Chat, "chat_max_tokens"),
    fixture!(Chat, "chat_overload"),
    fixture!(Chat, "chat_parallel"),
    fixture!(Chat, "chat_reasoning"),
    fixture!(Chat, "chat_text"),
    fixture!(Chat, "chat_tool"),
    fixture!(Gemini, "gemini_cache"),
    fixture!(Gemini, "gemini_max_tokens"),
    fixture!(Gemini, "gemini_overload"),
    fixture!(Gemini, "gemini_parallel"),
    fixture!(Gemini, "gemini_reasoning"),
    fixture!(Gemini, "gemini_text"),
    fixture!(Gemini, "gemini_tool"),
    fixture!(Messages, "messages_cache"),
    fixture!(Messages, "messages_max_tokens"),
    fixture!(Messages, "messages_overload"),
    fixture!(Messages, "messages_parallel"),
    fixture!(Messages, "messages_reasoning"),
    fixture!(Messages, "messages_text"),
    fixture!(Messages, "messages_tool"),
    fixture!(Responses, "responses_cache"),
    fixture!(Responses, "responses_max_tokens"),
    fixture!(Responses, "responses_overload"),
    fixture!(Responses, "responses_parallel"),
    fixture!(Responses, "responses_reasoning"),
    fixture!(Responses, "responses_text"),
    fixture!(Responses, "responses_tool"),
];

const CHAT_HEAD: &str =
    r#""id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m""#;

/// Hand-written streams with the cases a needle search gets wrong.
fn tricky() -> Vec<(Dialect, String)> {
    let chat = |events: &[&str]| {
        let mut s = String::new();
        for e in events {
            s.push_str("data: ");
            s.push_str(&e.replace("HEAD", CHAT_HEAD));
            s.push_str("\n\n");
        }
        s
    };
    let sse = |events: &[(&str, &str)]| {
        let mut s = String::new();
        for (name, data) in events {
            s.push_str(&format!("event: {name}\ndata: {data}\n\n"));
        }
        s
    };
    vec![
        (
            Dialect::Chat,
            chat(&[
                r#"{HEAD,"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
                // Needles inside string content, escaped quotes and backslashes.
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"\"usage\":{\"prompt_tokens\":9},\"finish_reason\":\"length\",\"error\":{}"},"finish_reason":null}],"usage":null}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"a \\\" b \\\\\" \u00e9 \/ \n"},"finish_reason":null}]}"#,
                // Usage in the middle (vLLM continuous usage), on a content chunk.
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":" mid"},"finish_reason":null}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}"#,
                // Several choices, one cut short.
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null},{"index":1,"delta":{"reasoning_content":"y"},"finish_reason":null}]}"#,
                r#"{HEAD,"choices":[{"index":1,"delta":{},"finish_reason":"length"},{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                // Tool calls: header (envelope), arguments, legacy function_call.
                r#"{HEAD,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Paris\"}"}},{"index":1,"function":{"arguments":"{}"}}]}}]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"function_call":{"arguments":"{\"a\":1}"},"content":"after"}}]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"function_call":null,"tool_calls":null,"content":null}}]}"#,
                // Reasoning (both names), refusal, content parts (Mistral).
                r#"{HEAD,"choices":[{"index":0,"delta":{"reasoning":"hmm","reasoning_content":""}}]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"refusal":"no"}}]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"t"}]},{"type":"text","text":"v"}]}}]}"#,
                // Odd shapes: a duplicate field, a number where a string goes, a struct as an array.
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":7}]}"#,
                r#"{HEAD,"choices":[[{"content":"a"},null]]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":5,"refusal":{}}}],"usage":"odd"}"#,
                r#"{HEAD,"choices":"unexpected"}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"\ud83d\ude00"}}]}"#,
                r#"{"\u0063hoices":[{"delta":{"content":"escaped key"}}]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"st\u006fp"}]}"#,
                r#"{HEAD,"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":3}},"error":null}"#,
                r#"{"error":{"message":"boom \"choices\":[{\"delta\":{\"content\":\"x\"}}]","type":"server_error"}}"#,
                "[DONE]",
            ]),
        ),
        (
            Dialect::Chat,
            // Invalid JSON after text: the stream breaks there.
            chat(&[
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"ok"}}]}"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"cut"}}]"#,
                r#"{HEAD,"choices":[{"index":0,"delta":{"content":"never read"}}]}"#,
                "[DONE]",
            ]),
        ),
        (
            Dialect::Chat,
            // A data field over two lines (a raw newline inside a string: not JSON).
            format!(
                "data: {{{CHAT_HEAD},\"choices\":[{{\"delta\":{{\"content\":\"a\ndata: b\"}}}}]}}\n\ndata: {{{CHAT_HEAD},\"choices\":[{{\"delta\":{{\"content\":\"\tc\"}}}}]}}\n\n"
            ),
        ),
        (
            Dialect::Messages,
            sse(&[
                ("message_start", r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"output_tokens":1}}}"#),
                ("ping", r#"{"type": "ping"}"#),
                ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"x"}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\"type\":\"message_stop\" \\\" "}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"t"}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}"#),
                ("content_block_delta", r#"{"index":0,"delta":{"type":"text_delta","text":"no type: the event name decides"}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","usage":{"output_tokens":3},"delta":{"type":"text_delta","text":"usage in the middle"}}"#),
                ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":7}}"#),
                ("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            ]),
        ),
        (
            Dialect::Responses,
            sse(&[
                ("response.created", r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","usage":null,"store":true}}"#),
                ("response.output_text.delta", r#"{"type":"response.output_text.delta","sequence_number":1,"delta":"\"type\":\"response.completed\"","obfuscation":"x"}"#),
                ("response.output_text.delta", r#"{"type":"response.output_text.delta","sequence_number":2,"delta":"","obfuscation":"xy"}"#),
                ("response.reasoning_summary_text.delta", r#"{"type":"response.reasoning_summary_text.delta","delta":"r"}"#),
                ("response.function_call_arguments.delta", r#"{"type":"response.function_call_arguments.delta","delta":"{\"a\":"}"#),
                ("response.new_thing.delta", r#"{"type":"response.new_thing.delta","delta":"z"}"#),
                ("response.image_generation_call.partial_image", r#"{"type":"response.image_generation_call.partial_image","partial_image_b64":"AAAA"}"#),
                ("keepalive", r#"{"type":"keepalive","sequence_number":3}"#),
                ("response.output_text.delta", r#"{"delta":"typeless: the event name decides"}"#),
                ("response.output_text.delta", r#"{"type":"response.output_text.delta","delta":"a","error":{"x":1}}"#),
                ("error", r#"{"type":"error","code":"server_error","message":"boom"}"#),
                ("response.incomplete", r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":9}}}"#),
            ]),
        ),
        (
            Dialect::Gemini,
            [
                r#"{"candidates": [{"content": {"parts": [{"text": "hm","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 9,"totalTokenCount": 13,"thoughtsTokenCount": 4}}"#,
                r#"{"candidates": [{"content": {"parts": [{"text": "\"finishReason\": \"SAFETY\""}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 9,"candidatesTokenCount": 1,"totalTokenCount": 14}}"#,
                r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f","args": {"a": 1}}}],"role": "model"},"index": 0},{"content": {"parts": [{"inlineData": {"mimeType": "image/png","data": "AA"}}]},"index": 1}]}"#,
                r#"{"candidates": [{"content": {"parts": [{"text": ""}],"role": "model"},"index": 0}],"promptFeedback": {"blockReason": null}}"#,
                r#"{"candidates": [{"content": {"parts": [{"text": " you"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 9,"cachedContentTokenCount": 5,"candidatesTokenCount": 2,"totalTokenCount": 15,"thoughtsTokenCount": 4}}"#,
            ]
            .iter()
            .map(|d| format!("data: {d}\r\n\r\n"))
            .collect(),
        ),
    ]
}

/// The events of a stream: (SSE event name, data).
fn events(stream: &str) -> Vec<(Option<String>, String)> {
    let mut scanner = SseScanner::new();
    let mut out = Vec::new();
    scanner.feed(stream.as_bytes(), &mut |item| {
        if let SseItem::Event { event, data, .. } = item {
            out.push((event.map(str::to_owned), data.to_owned()));
        }
    });
    scanner.finish();
    out
}

/// Checks one event; whether the byte path decided it.
fn check_event(dialect: Dialect, event: Option<&str>, data: &str) -> bool {
    let Some(quick) = read_event_quick(dialect, event, data) else {
        return false;
    };
    assert_eq!(
        quick.classification,
        classify_event(dialect, event, data),
        "{dialect:?} {event:?} {data}"
    );
    assert!(
        serde_json::from_str::<serde::de::IgnoredAny>(data).is_ok(),
        "the byte path decided invalid JSON: {data}"
    );
    true
}

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn observer(dialect: Dialect, estimating: bool) -> StreamObserver {
    let o = StreamObserver::new(dialect, Some(at(0)));
    if estimating {
        o.estimating_output()
    } else {
        o
    }
}

/// Feeds the same chunks to an observer on the byte path and one on the full parse and
/// compares what they say after every chunk and at the end; a Chat stream both with its
/// output estimated and without (as when its upstream reports usage).
fn check_stream(dialect: Dialect, chunks: &[&[u8]]) {
    check_stream_as(dialect, chunks, true);
    if dialect == Dialect::Chat {
        check_stream_as(dialect, chunks, false);
    }
}

fn check_stream_as(dialect: Dialect, chunks: &[&[u8]], estimating: bool) {
    let mut quick = observer(dialect, estimating);
    let mut full = observer(dialect, estimating).with_full_parse();
    for (i, chunk) in chunks.iter().enumerate() {
        let t = at(1 + i as u64);
        assert_eq!(
            quick.on_chunk(t, chunk),
            full.on_chunk(t, chunk),
            "{dialect:?} chunk {i}"
        );
        assert_eq!(quick.summary(), full.summary(), "{dialect:?} chunk {i}");
        assert_eq!(quick.response_id(), full.response_id());
        assert_eq!(quick.malformed(), full.malformed());
    }
    let end = at(2 + chunks.len() as u64);
    quick.on_end(end, BodyEnd::Eof);
    full.on_end(end, BodyEnd::Eof);
    assert_eq!(quick.summary(), full.summary(), "{dialect:?} at the end");
}

/// Every way of cutting the stream in two, byte by byte, and whole.
fn check_cuts(dialect: Dialect, stream: &str) {
    let b = stream.as_bytes();
    check_stream(dialect, &[b]);
    for cut in 1..b.len() {
        check_stream(dialect, &[&b[..cut], &b[cut..]]);
    }
    let bytes: Vec<&[u8]> = b.chunks(1).collect();
    check_stream(dialect, &bytes);
}

fn corpus() -> Vec<(Dialect, String)> {
    let mut all: Vec<(Dialect, String)> = FIXTURES
        .iter()
        .map(|(d, s)| (*d, (*s).to_owned()))
        .collect();
    all.extend(tricky());
    all
}

#[test]
fn the_byte_path_classifies_every_corpus_event_as_the_full_parse_does() {
    let mut decided = std::collections::HashMap::<Dialect, (usize, usize)>::new();
    for (dialect, stream) in corpus() {
        for (event, data) in events(&stream) {
            let seen = decided.entry(dialect).or_default();
            seen.1 += 1;
            if check_event(dialect, event.as_deref(), &data) {
                seen.0 += 1;
            }
        }
    }
    // Not vacuous: the byte path decides most events of every dialect (it leaves the few
    // lifecycle, usage, finish and error events, and the odd shapes, to the full parse).
    for (dialect, (quick, all)) in decided {
        eprintln!("{dialect:?}: {quick} of {all} events decided on the byte path");
        assert!(quick * 2 > all, "{dialect:?}: {quick} of {all} decided");
    }
}

#[test]
fn observers_on_both_paths_agree_after_every_chunk_however_the_stream_is_cut() {
    assert!(laptime_core::estimate::warm());
    for (dialect, stream) in corpus() {
        check_cuts(dialect, &stream);
    }
}

/// What a mutation inserts: needles, quotes, escapes, structure, duplicate fields.
const INSERTS: [&str; 24] = [
    "\"usage\"",
    ",\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}",
    ",\"usage\":null",
    "\"finish_reason\":\"length\"",
    ",\"finish_reason\":\"stop\"",
    ",\"error\":{\"message\":\"x\"}",
    ",\"error\":null",
    ",\"content\":\"dup\"",
    ",\"choices\":[]",
    ",\"delta\":{\"content\":\"d\"}",
    ",\"type\":\"message_stop\"",
    ",\"finishReason\":\"MAX_TOKENS\"",
    ",\"usageMetadata\":{\"promptTokenCount\":1}",
    "\\\"",
    "\"",
    "\\",
    "\\u00e9",
    "\\ud800",
    "\t",
    "\n",
    "null",
    "{",
    "]",
    ",",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn mutated_events_get_the_same_classification_on_both_paths(
        pick in any::<prop::sample::Index>(),
        at_byte in any::<prop::sample::Index>(),
        insert in 0..INSERTS.len(),
        cut in 0usize..4,
    ) {
        let all: Vec<(Dialect, Option<String>, String)> = corpus()
            .into_iter()
            .flat_map(|(d, s)| events(&s).into_iter().map(move |(e, data)| (d, e, data)))
            .collect();
        let (dialect, event, data) = pick.get(&all);
        let mut pos = at_byte.index(data.len() + 1);
        while !data.is_char_boundary(pos) {
            pos -= 1;
        }
        let mut mutated = data.clone();
        mutated.insert_str(pos, INSERTS[insert]);
        // Sometimes also drop a few bytes after it (a cut inside a token or a string).
        let end = (pos + INSERTS[insert].len() + cut).min(mutated.len());
        if cut > 0 && mutated.is_char_boundary(end) {
            mutated.replace_range(pos + INSERTS[insert].len()..end, "");
        }
        check_event(*dialect, event.as_deref(), &mutated);
        // And the observers, with the mutated event amid its stream's neighbours.
        let stream = match dialect {
            Dialect::Gemini => format!("data: {mutated}\r\n\r\n"),
            _ => match event {
                Some(name) => format!("event: {name}\ndata: {mutated}\n\n"),
                None => format!("data: {mutated}\n\n"),
            },
        };
        let lead = "data: {\"choices\":[{\"delta\":{\"content\":\"lead\"}}]}\n\n";
        let whole = format!("{lead}{stream}{stream}");
        check_stream(*dialect, &[whole.as_bytes()]);
    }
}

/// A Chat text chunk with `text` (raw JSON, quotes included) as its content.
fn chat_chunk(text: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
         \"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text}}},\
         \"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Chunks that repeat the one before but for their text (`classify::repeat`), with each
    /// text mutated by an insert (quotes, escapes, structure that breaks out of the string):
    /// the byte path reads each as the full parse does, counting output or not.
    #[test]
    fn chat_chunks_repeating_the_last_but_for_a_mutated_text_read_as_the_full_parse_does(
        mutations in prop::collection::vec((0..INSERTS.len(), 0usize..6), 1..6),
        estimating in any::<bool>(),
    ) {
        let mut stream = chat_chunk("\"Sure\"");
        for (insert, pos) in mutations {
            let mut text = String::from("ab cd");
            text.insert_str(pos.min(text.len()), INSERTS[insert]);
            stream.push_str(&chat_chunk(&format!("\"{text}\"")));
            stream.push_str(&chat_chunk("\" again\""));
        }
        let chunks: Vec<&[u8]> = stream.split_inclusive("\n\n").map(str::as_bytes).collect();
        let new = |full: bool| {
            let o = observer(Dialect::Chat, estimating);
            if full { o.with_full_parse() } else { o }
        };
        let (mut quick, mut full) = (new(false), new(true));
        for (i, chunk) in chunks.iter().enumerate() {
            let t = at(1 + i as u64);
            prop_assert_eq!(quick.on_chunk(t, chunk), full.on_chunk(t, chunk), "chunk {}", i);
            prop_assert_eq!(quick.summary(), full.summary(), "chunk {}", i);
            prop_assert_eq!(quick.malformed(), full.malformed());
        }
        quick.on_end(at(99), BodyEnd::Eof);
        full.on_end(at(99), BodyEnd::Eof);
        prop_assert_eq!(quick.summary(), full.summary());
    }
}

// === whole answers ===

/// Whole (non-streamed) answers of the dialects with a byte path for them: the translation
/// fixtures and hand-written ones with the cases a shortcut gets wrong.
fn bodies() -> Vec<(Dialect, String)> {
    let fixture = |d, s: &str| (d, s.to_owned());
    let chat = |s: &str| (Dialect::Chat, s.to_owned());
    let messages = |s: &str| (Dialect::Messages, s.to_owned());
    let responses = |s: &str| (Dialect::Responses, s.to_owned());
    vec![
        fixture(
            Dialect::Chat,
            include_str!("../src/translate/stream/fixtures/chat_body_max_tokens.json"),
        ),
        fixture(
            Dialect::Chat,
            include_str!("../src/translate/stream/fixtures/chat_body_parallel.json"),
        ),
        fixture(
            Dialect::Chat,
            include_str!("../src/translate/stream/fixtures/chat_body_reasoning.json"),
        ),
        fixture(
            Dialect::Messages,
            include_str!("../src/translate/stream/fixtures/messages_body_max_tokens.json"),
        ),
        fixture(
            Dialect::Messages,
            include_str!("../src/translate/stream/fixtures/messages_body_parallel.json"),
        ),
        fixture(
            Dialect::Messages,
            include_str!("../src/translate/stream/fixtures/messages_body_reasoning.json"),
        ),
        chat(
            r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello \"usage\": {\"completion_tokens\": 9}","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}"#,
        ),
        chat(
            r#"{"choices":[{"index":0,"message":{"content":""},"finish_reason":"length"},{"index":1,"message":{"content":"b"},"finish_reason":"stop"}]}"#,
        ),
        chat(
            r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        ),
        chat(
            r#"{"choices":[{"message":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"hm"}]},{"type":"text","text":"42"}]},"finish_reason":"stop"}]}"#,
        ),
        chat(
            r#"{"choices":[{"message":{"content":"x"},"finish_reason":"content_filter"}],"usage":{"prompt_tokens":-1,"completion_tokens":3.0}}"#,
        ),
        chat(r#"{"choices":null,"usage":null,"error":null}"#),
        chat(
            r#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        ),
        chat(r#"{"error":"flat"}"#),
        chat(r#"{"choices":[{"message":{"content":"a"},"finish_reason":"st\u006fp"}]}"#),
        chat(
            r#"{"choices":[{"message":"odd"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
        ),
        chat(r#"{"choices":[{"message":{"content":"a","content":"b"}}]}"#),
        chat(
            r#"  {"choices" : [ {"message" : {"content" : "x" } } ] , "pad" : [1, {"a": null}] }  "#,
        ),
        chat("[1, 2]"),
        messages(
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hi \"type\":\"error\""}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2}}"#,
        ),
        messages(
            r#"{"type":"message","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"tool_use","id":"t","name":"f","input":{"text":"not text"}}],"stop_reason":"tool_use"}"#,
        ),
        messages(
            r#"{"type":"message","content":[{"type":"text","text":""}],"stop_reason":"max_tokens","usage":{"input_tokens":1,"output_tokens":"many"}}"#,
        ),
        messages(
            r#"{"type":"message","content":[{"text":"x","type":"text"}],"stop_reason":"refusal"}"#,
        ),
        messages(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
        messages(
            r#"{"type":"message","content":null,"stop_reason":null,"usage":null,"error":null}"#,
        ),
        messages(r#"{"type":"message","content":[{"type":"t\u0065xt","text":"x"}]}"#),
        messages(r#"{"type":"message","content":[{"type":"text","text":"x","text":"y"}]}"#),
        messages(r#"{"type":"message","content":"flat"}"#),
        fixture(
            Dialect::Responses,
            include_str!("../src/translate/stream/fixtures/responses_body_max_tokens.json"),
        ),
        fixture(
            Dialect::Responses,
            include_str!("../src/translate/stream/fixtures/responses_body_parallel.json"),
        ),
        fixture(
            Dialect::Responses,
            include_str!("../src/translate/stream/fixtures/responses_body_reasoning.json"),
        ),
        responses(
            r#"{"id":"resp_1","object":"response","status":"completed","error":null,"incomplete_details":null,"output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi \"status\":\"failed\"","annotations":[]}]}],"usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":1},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":12}}"#,
        ),
        responses(
            r#"{"status":"incomplete","incomplete_details":{"reason":"content_filter"},"output":[{"type":"message","content":[{"type":"output_text","text":""},{"type":"refusal","refusal":"no"}]}]}"#,
        ),
        responses(
            r#"{"status":"incomplete","incomplete_details":{"reason":"something_new"},"output":[]}"#,
        ),
        responses(
            r#"{"incomplete_details":{"reason":"max_output_tokens"},"status":"incomplete","output":null,"usage":null}"#,
        ),
        responses(
            r#"{"status":"failed","error":{"code":"server_error","message":"x"},"output":[]}"#,
        ),
        responses(
            r#"{"status":"completed","output":[{"type":"function_call","name":"f","arguments":"{\"text\":\"x\"}"}],"usage":{"input_tokens":"odd"}}"#,
        ),
        responses(r#"{"status":"completed","output":[{"type":"message","content":"flat"}]}"#),
        responses(
            r#"{"status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"a","text":"b"}]}]}"#,
        ),
        responses(r#"{"status":"in_progress","incomplete_details":"odd"}"#),
    ]
}

/// Checks one body; whether the byte path decided it.
fn check_body(dialect: Dialect, body: &str) -> bool {
    let Some(quick) = read_body_quick(dialect, body.as_bytes()) else {
        return false;
    };
    assert_eq!(
        quick,
        classify_body(dialect, body.as_bytes()),
        "{dialect:?} {body}"
    );
    assert!(
        serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok(),
        "the byte path decided invalid JSON: {body}"
    );
    true
}

#[test]
fn the_byte_path_summarises_every_corpus_answer_as_the_full_parse_does() {
    let mut decided = std::collections::HashMap::<Dialect, (usize, usize)>::new();
    for (dialect, body) in bodies() {
        let seen = decided.entry(dialect).or_default();
        seen.1 += 1;
        if check_body(dialect, &body) {
            seen.0 += 1;
        }
        // Every cut of it too: JSON cut short is never summarised as a whole answer.
        for cut in 1..body.len() {
            if body.is_char_boundary(cut) {
                check_body(dialect, &body[..cut]);
            }
        }
    }
    // Not vacuous: the byte path decides most answers of each dialect (it leaves escapes,
    // duplicates and odd shapes to the full parse).
    for (dialect, (quick, all)) in decided {
        eprintln!("{dialect:?}: {quick} of {all} answers decided on the byte path");
        assert!(quick * 3 > all * 2, "{dialect:?}: {quick} of {all} decided");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn mutated_answers_get_the_same_summary_on_both_paths(
        pick in any::<prop::sample::Index>(),
        at_byte in any::<prop::sample::Index>(),
        insert in 0..INSERTS.len(),
        cut in 0usize..4,
    ) {
        let all = bodies();
        let (dialect, body) = pick.get(&all);
        let mut pos = at_byte.index(body.len() + 1);
        while !body.is_char_boundary(pos) {
            pos -= 1;
        }
        let mut mutated = body.clone();
        mutated.insert_str(pos, INSERTS[insert]);
        let end = (pos + INSERTS[insert].len() + cut).min(mutated.len());
        if cut > 0 && mutated.is_char_boundary(end) {
            mutated.replace_range(pos + INSERTS[insert].len()..end, "");
        }
        check_body(*dialect, &mutated);
    }
}
