//! Stream translation cost per event, for every (upstream, client) pair: a realistic stream of
//! 1,000 events per upstream dialect (reasoning deltas, text deltas, one tool call, usage and
//! the terminal; Gemini's tool call is one whole chunk), fed in reads of 1–3 events with every fourth read cut inside an event,
//! through a fresh `StreamTranslator` (scan, decode, encode), as the proxy does for one request.
//!
//! Run: `cargo bench -p laptime-core --bench translate_stream`. Each figure is per stream; the
//! items/s throughput counts upstream events, so time per event = time / 1,000.

use std::collections::VecDeque;
use std::fmt;
use std::hint::black_box;

use divan::counter::ItemsCount;
use divan::Bencher;
use laptime_core::observe::BodyEnd;
use laptime_core::relay::Piece;
use laptime_core::translate::stream::{ClientStreamOptions, StreamTranslator};
use laptime_core::Dialect;

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

/// Events per stream.
const EVENTS: usize = 1000;
/// Reasoning deltas, then one tool call's argument fragments; the rest is text.
const REASONING: usize = 100;
const TOOL_FRAGMENTS: usize = 20;

const WORDS: [&str; 8] = [
    " the",
    " quick",
    " brown",
    " fox",
    "\\n\\n",
    " \\\"lazy\\\"",
    " dog",
    " — ",
];

#[derive(Clone, Copy)]
struct Pair(Dialect, Dialect);

impl fmt::Display for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}->{}", self.0, self.1)
    }
}

const PAIRS: [Pair; 16] = {
    use Dialect::{Chat, Gemini, Messages, Responses};
    [
        Pair(Gemini, Chat),
        Pair(Gemini, Messages),
        Pair(Chat, Gemini),
        Pair(Messages, Gemini),
        Pair(Responses, Gemini),
        Pair(Gemini, Responses),
        Pair(Gemini, Gemini),
        Pair(Chat, Messages),
        Pair(Chat, Responses),
        Pair(Messages, Chat),
        Pair(Messages, Responses),
        Pair(Responses, Chat),
        Pair(Responses, Messages),
        Pair(Chat, Chat),
        Pair(Messages, Messages),
        Pair(Responses, Responses),
    ]
};

/// The upstream events of one stream, exactly `EVENTS` of them.
fn events(dialect: Dialect) -> Vec<String> {
    let text = EVENTS - REASONING - TOOL_FRAGMENTS;
    let mut out = Vec::with_capacity(EVENTS);
    match dialect {
        Dialect::Chat => {
            let head = r#""id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741570283,"model":"deepseek-reasoner","system_fingerprint":"fp_fc9f1d7035""#;
            let chunk = |delta: &str, finish: &str| {
                format!(
                    r#"data: {{{head},"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}],"usage":null}}"#
                )
            };
            out.push(chunk(r#"{"role":"assistant","content":""}"#, "null"));
            for i in 0..REASONING - 1 {
                out.push(chunk(
                    &format!(r#"{{"reasoning_content":"{}"}}"#, WORDS[i % 8]),
                    "null",
                ));
            }
            for i in 0..text - 4 {
                out.push(chunk(
                    &format!(r#"{{"content":"{}"}}"#, WORDS[i % 8]),
                    "null",
                ));
            }
            out.push(chunk(r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}"#, "null"));
            for _ in 0..TOOL_FRAGMENTS {
                out.push(chunk(
                    r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"c\":1}"}}]}"#,
                    "null",
                ));
            }
            out.push(chunk("{}", r#""tool_calls""#));
            out.push(format!(r#"data: {{{head},"choices":[],"usage":{{"prompt_tokens":1017,"completion_tokens":996,"total_tokens":2013,"prompt_tokens_details":{{"cached_tokens":896}},"completion_tokens_details":{{"reasoning_tokens":120}}}}}}"#));
            out.push("data: [DONE]".to_owned());
        }
        Dialect::Responses => {
            let mut seq = 0;
            let mut push = |kind: &str, rest: &str| {
                out.push(format!(
                    "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{seq},{rest}}}"
                ));
                seq += 1;
            };
            let response = |status: &str, usage: &str| {
                format!(
                    r#""response":{{"id":"resp_68c1f0a2","object":"response","created_at":1757540514,"status":"{status}","error":null,"incomplete_details":null,"model":"gpt-5","output":[],"usage":{usage}}}"#
                )
            };
            push("response.created", &response("in_progress", "null"));
            push(
                "response.output_item.added",
                r#""output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}"#,
            );
            for i in 0..REASONING - 3 {
                push(
                    "response.reasoning_summary_text.delta",
                    &format!(
                        r#""item_id":"rs_1","output_index":0,"summary_index":0,"delta":"{}","obfuscation":"Jm3t""#,
                        WORDS[i % 8]
                    ),
                );
            }
            push(
                "response.output_item.done",
                r#""output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}"#,
            );
            push(
                "response.content_part.added",
                r#""item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}"#,
            );
            for i in 0..text - 3 {
                push(
                    "response.output_text.delta",
                    &format!(
                        r#""item_id":"msg_1","output_index":1,"content_index":0,"delta":"{}","logprobs":[],"obfuscation":"Jm3t""#,
                        WORDS[i % 8]
                    ),
                );
            }
            push(
                "response.content_part.done",
                r#""item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}"#,
            );
            push(
                "response.output_item.added",
                r#""output_index":2,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"get_weather"}"#,
            );
            for _ in 0..TOOL_FRAGMENTS - 2 {
                push(
                    "response.function_call_arguments.delta",
                    r#""item_id":"fc_1","output_index":2,"delta":"{\"c\":1}""#,
                );
            }
            push(
                "response.output_item.done",
                r#""output_index":2,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"","call_id":"call_1","name":"get_weather"}"#,
            );
            push(
                "response.completed",
                &response(
                    "completed",
                    r#"{"input_tokens":1017,"input_tokens_details":{"cached_tokens":896},"output_tokens":992,"output_tokens_details":{"reasoning_tokens":120},"total_tokens":2009}"#,
                ),
            );
        }
        Dialect::Messages => {
            let ev = |name: &str, rest: &str| {
                format!("event: {name}\ndata: {{\"type\":\"{name}\",{rest}}}")
            };
            out.push(ev("message_start", r#""message":{"id":"msg_01X","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":121,"cache_creation_input_tokens":0,"cache_read_input_tokens":896,"output_tokens":1}}"#));
            out.push(ev(
                "content_block_start",
                r#""index":0,"content_block":{"type":"thinking","thinking":"","signature":""}"#,
            ));
            for i in 0..REASONING - 4 {
                out.push(ev(
                    "content_block_delta",
                    &format!(
                        r#""index":0,"delta":{{"type":"thinking_delta","thinking":"{}"}}"#,
                        WORDS[i % 8]
                    ),
                ));
            }
            out.push(ev(
                "content_block_delta",
                r#""index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}"#,
            ));
            out.push(ev("content_block_stop", r#""index":0"#));
            out.push(ev(
                "content_block_start",
                r#""index":1,"content_block":{"type":"text","text":""}"#,
            ));
            for i in 0..text - 2 {
                out.push(ev(
                    "content_block_delta",
                    &format!(
                        r#""index":1,"delta":{{"type":"text_delta","text":"{}"}}"#,
                        WORDS[i % 8]
                    ),
                ));
            }
            out.push(ev("content_block_stop", r#""index":1"#));
            out.push(ev("content_block_start", r#""index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}"#));
            for _ in 0..TOOL_FRAGMENTS - 4 {
                out.push(ev(
                    "content_block_delta",
                    r#""index":2,"delta":{"type":"input_json_delta","partial_json":"{\"c\":1}"}"#,
                ));
            }
            out.push(ev("content_block_stop", r#""index":2"#));
            out.push(ev("message_delta", r#""delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":994}"#));
            out.push(ev("message_stop", ""));
            let last = out.len() - 1;
            out[last] = "event: message_stop\ndata: {\"type\":\"message_stop\"}".to_owned();
        }
        Dialect::Gemini => {
            // Gemini sends a tool call whole: its fragments' share of events is text here.
            let chunk = |parts: &str, finish: &str, usage: &str| {
                format!(
                    r#"data: {{"candidates": [{{"content": {{"parts": [{parts}],"role": "model"}}{finish},"index": 0}}],"usageMetadata": {{{usage}}},"modelVersion": "gemini-2.5-flash","responseId": "8hW3aNqLHMSe1dkPw9_Y4QY"}}"#
                )
            };
            let usage = r#""promptTokenCount": 1017,"cachedContentTokenCount": 896,"totalTokenCount": 1200,"thoughtsTokenCount": 120"#;
            for i in 0..REASONING {
                let part = format!(r#"{{"text": "{}","thought": true}}"#, WORDS[i % 8]);
                out.push(chunk(&part, "", usage));
            }
            for i in 0..EVENTS - REASONING - 2 {
                let part = format!(r#"{{"text": "{}"}}"#, WORDS[i % 8]);
                out.push(chunk(&part, "", usage));
            }
            out.push(chunk(
                r#"{"functionCall": {"name": "get_weather","args": {"city": "Paris","unit": "celsius"}}}"#,
                "",
                usage,
            ));
            let last = r#""promptTokenCount": 1017,"cachedContentTokenCount": 896,"candidatesTokenCount": 876,"totalTokenCount": 2013,"thoughtsTokenCount": 120"#;
            out.push(chunk(r#"{"text": ""}"#, r#","finishReason": "STOP""#, last));
        }
    }
    assert_eq!(out.len(), EVENTS, "{dialect}");
    out
}

/// Deterministic pseudo-random numbers (same stream every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(self.0 >> 33).unwrap_or(0) % below.max(1)
    }
}

/// The stream's bytes as upstream reads deliver them.
fn chunks(dialect: Dialect) -> Vec<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut ends = Vec::with_capacity(EVENTS);
    for event in events(dialect) {
        bytes.extend_from_slice(event.as_bytes());
        bytes.extend_from_slice(b"\n\n");
        ends.push(bytes.len());
    }
    let mut rng = Lcg(0x5eed);
    let (mut chunks, mut from, mut next) = (Vec::new(), 0, 0);
    while next < ends.len() {
        next = (next + 1 + rng.next(3)).min(ends.len());
        let mut to = ends[next - 1];
        if rng.next(4) == 0 && next < ends.len() {
            to += 1 + rng.next(ends[next] - to - 1);
        }
        chunks.push(bytes[from..to].to_vec());
        from = to;
    }
    if from < bytes.len() {
        chunks.push(bytes[from..].to_vec());
    }
    chunks
}

#[divan::bench(args = PAIRS)]
fn translate(bencher: Bencher<'_, '_>, pair: Pair) {
    let chunks = chunks(pair.0);
    let opts = ClientStreamOptions {
        model: Some("client-model".to_owned()),
        id: "req_0123456789".to_owned(),
        created: 1_750_000_000,
        include_usage: true,
        timing_comment: true,
    };
    bencher
        .counter(ItemsCount::new(EVENTS))
        .with_inputs(|| VecDeque::with_capacity(64))
        .bench_refs(|out: &mut VecDeque<Piece>| {
            let mut t = StreamTranslator::new(pair.0, pair.1, &opts);
            let mut bytes = 0;
            for chunk in &chunks {
                t.push(black_box(chunk), out);
                // The proxy hands each piece on as it comes.
                for piece in out.drain(..) {
                    if let Piece::Bytes(b) = piece {
                        bytes += b.len();
                    }
                }
            }
            t.finish(BodyEnd::Eof, out);
            assert!(t.terminal_seen());
            black_box(bytes)
        });
}
