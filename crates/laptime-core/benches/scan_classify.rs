//! Scan + classify throughput: a realistic 1,000-event stream per dialect (Gemini's framed
//! with CRLF, as Google sends it), fed in realistic
//! chunks (1–3 events per read, every fourth read cut inside an event), through a fresh
//! `SseScanner` and `classify_event`, as the observer does for one request.
//!
//! Run: `cargo bench -p laptime-core --bench scan_classify`. Each figure is per stream (one
//! request); the items/s throughput counts events, so time per event = time / 1,000. The
//! allocation profiler shows allocations per stream.
//!
//! `full` classifies every event with the full parse (`classify_event`); `bytes` as the
//! observer does, with the byte path first (`read_event_quick`) and the full parse for what it
//! leaves. `observe_20` is a whole stream of 20 text deltas per dialect (plus its envelopes,
//! usage and terminal; one event per read) through a `StreamObserver`, on the byte path and
//! with every event parsed in full (`full_20`); the Chat stream has no usage, so its output is
//! counted with the tokenizer, as for a client that did not ask for usage. `whole_bytes` and
//! `whole_full` summarise one whole (non-streamed) answer, byte path first or full parse alone.

use std::hint::black_box;
use std::time::Duration;

use divan::counter::ItemsCount;
use divan::Bencher;
use laptime_core::classify::{classify_event, read_event_quick, EventClass};
use laptime_core::observe::{BodyEnd, StreamObserver};
use laptime_core::sse::{SseItem, SseScanner};
use laptime_core::Dialect;

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

/// Events per stream.
const EVENTS: usize = 1000;

/// Token-sized text pieces, a few with JSON escapes (newlines, quotes) as real answers have.
const WORDS: [&str; 12] = [
    " the",
    " quick",
    " brown",
    " fox",
    ",",
    " jumps",
    " over",
    "\\n\\n",
    " \\\"lazy\\\"",
    " dog",
    " — ",
    ".",
];

/// Deterministic pseudo-random numbers (no dependency, same stream every run).
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

/// The SSE events of one stream of the dialect: a start envelope, text deltas, the usage and
/// the terminal, exactly `EVENTS` of them.
fn events(dialect: Dialect) -> Vec<String> {
    events_n(dialect, EVENTS)
}

/// The same stream with `n` events in all.
fn events_n(dialect: Dialect, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    match dialect {
        Dialect::Chat => {
            let head = r#""id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_fc9f1d7035""#;
            out.push(format!(
                r#"data: {{{head},"choices":[{{"index":0,"delta":{{"role":"assistant","content":"","refusal":null}},"logprobs":null,"finish_reason":null}}],"usage":null,"obfuscation":"Ao9o8bhF"}}"#
            ));
            for i in 0..n - 4 {
                let word = WORDS[i % WORDS.len()];
                out.push(format!(
                    r#"data: {{{head},"choices":[{{"index":0,"delta":{{"content":"{word}"}},"logprobs":null,"finish_reason":null}}],"usage":null,"obfuscation":"x7Kq2"}}"#
                ));
            }
            out.push(format!(
                r#"data: {{{head},"choices":[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"stop"}}],"usage":null,"obfuscation":"qd"}}"#
            ));
            out.push(format!(
                r#"data: {{{head},"choices":[],"usage":{{"prompt_tokens":1017,"completion_tokens":996,"total_tokens":2013,"prompt_tokens_details":{{"cached_tokens":896,"audio_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}},"obfuscation":"hN"}}"#
            ));
            out.push("data: [DONE]".to_owned());
        }
        Dialect::Responses => {
            let response = |status: &str, usage: &str| {
                format!(
                    r#"{{"id":"resp_68c1f0a2b3c48190a1b2c3d4e5f60718","object":"response","created_at":1757540514,"status":"{status}","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{{"effort":"minimal","summary":null}},"service_tier":"auto","store":true,"temperature":1.0,"text":{{"format":{{"type":"text"}},"verbosity":"medium"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{usage},"user":null,"metadata":{{}}}}"#
                )
            };
            let mut seq = 0;
            let mut push = |kind: &str, rest: String| {
                out.push(format!(
                    "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{seq},{rest}}}"
                ));
                seq += 1;
            };
            push(
                "response.created",
                format!(r#""response":{}"#, response("in_progress", "null")),
            );
            push(
                "response.in_progress",
                format!(r#""response":{}"#, response("in_progress", "null")),
            );
            push(
                "response.output_item.added",
                r#""output_index":0,"item":{"id":"msg_68c1f0a3c4d58190","type":"message","status":"in_progress","content":[],"role":"assistant"}"#.to_owned(),
            );
            push(
                "response.content_part.added",
                r#""item_id":"msg_68c1f0a3c4d58190","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}"#.to_owned(),
            );
            for i in 0..n - 8 {
                let word = WORDS[i % WORDS.len()];
                push(
                    "response.output_text.delta",
                    format!(
                        r#""item_id":"msg_68c1f0a3c4d58190","output_index":0,"content_index":0,"delta":"{word}","logprobs":[],"obfuscation":"Jm3tq9w""#
                    ),
                );
            }
            push(
                "response.output_text.done",
                r#""item_id":"msg_68c1f0a3c4d58190","output_index":0,"content_index":0,"text":"The quick brown fox.","logprobs":[]"#.to_owned(),
            );
            push(
                "response.content_part.done",
                r#""item_id":"msg_68c1f0a3c4d58190","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"The quick brown fox."}"#.to_owned(),
            );
            push(
                "response.output_item.done",
                r#""output_index":0,"item":{"id":"msg_68c1f0a3c4d58190","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"The quick brown fox."}],"role":"assistant"}"#.to_owned(),
            );
            push(
                "response.completed",
                format!(
                    r#""response":{}"#,
                    response(
                        "completed",
                        r#"{"input_tokens":1017,"input_tokens_details":{"cached_tokens":896},"output_tokens":992,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":2009}"#
                    )
                ),
            );
        }
        Dialect::Messages => {
            out.push(r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":121,"cache_creation_input_tokens":0,"cache_read_input_tokens":896,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}"#.to_owned());
            out.push(
                r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
                    .to_owned(),
            );
            out.push("event: ping\ndata: {\"type\": \"ping\"}".to_owned());
            for i in 0..n - 6 {
                let word = WORDS[i % WORDS.len()];
                out.push(format!(
                    r#"event: content_block_delta
data: {{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{word}"}}}}"#
                ));
            }
            out.push(
                r#"event: content_block_stop
data: {"type":"content_block_stop","index":0}"#
                    .to_owned(),
            );
            out.push(r#"event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":994}}"#.to_owned());
            out.push("event: message_stop\ndata: {\"type\":\"message_stop\"}".to_owned());
        }
        Dialect::Gemini => {
            // Every chunk repeats usageMetadata with the counts so far, as Google sends them.
            let tail = |n: usize| {
                format!(
                    r#""usageMetadata": {{"promptTokenCount": 1017,"candidatesTokenCount": {n},"totalTokenCount": {},"cachedContentTokenCount": 896,"promptTokensDetails": [{{"modality": "TEXT","tokenCount": 1017}}],"thoughtsTokenCount": 64}},"modelVersion": "gemini-2.5-flash","responseId": "8hW3aNqLHMSe1dkPw9_Y4QY""#,
                    1017 + 64 + n
                )
            };
            out.push(format!(
                r#"data: {{"candidates": [{{"content": {{"parts": [{{"text": "**Reading the question**","thought": true}}],"role": "model"}},"index": 0}}],{}}}"#,
                tail(0)
            ));
            for i in 0..n - 2 {
                let word = WORDS[i % WORDS.len()];
                out.push(format!(
                    r#"data: {{"candidates": [{{"content": {{"parts": [{{"text": "{word}"}}],"role": "model"}},"index": 0}}],{}}}"#,
                    tail(i + 1)
                ));
            }
            out.push(format!(
                r#"data: {{"candidates": [{{"content": {{"parts": [{{"text": "."}}],"role": "model"}},"finishReason": "STOP","index": 0}}],{}}}"#,
                tail(n - 1)
            ));
        }
    }
    assert_eq!(out.len(), n);
    out
}

/// The stream's bytes as the upstream reads deliver them: 1–3 events per read, and every
/// fourth read ends inside the next event.
fn chunks(dialect: Dialect) -> Vec<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut ends = Vec::with_capacity(EVENTS);
    // Google's generativelanguage API ends its events with CRLF; the others with LF.
    let blank: &[u8] = match dialect {
        Dialect::Gemini => b"\r\n\r\n",
        Dialect::Chat | Dialect::Responses | Dialect::Messages => b"\n\n",
    };
    for event in events(dialect) {
        bytes.extend_from_slice(event.as_bytes());
        bytes.extend_from_slice(blank);
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

/// What one stream added up to (kept so the work cannot be optimised away).
#[derive(Default)]
struct Tally {
    events: usize,
    effective: usize,
    terminal: usize,
    usage: usize,
}

fn scan_and_classify(dialect: Dialect, chunks: &[Vec<u8>], quick: bool) -> Tally {
    let mut scanner = SseScanner::new();
    let mut tally = Tally::default();
    for chunk in chunks {
        scanner.feed(chunk, &mut |item| {
            if let SseItem::Event { event, data, .. } = item {
                let c = quick
                    .then(|| read_event_quick(dialect, event, data))
                    .flatten()
                    .map_or_else(
                        || classify_event(dialect, event, data),
                        |q| q.classification,
                    );
                tally.events += 1;
                tally.effective += usize::from(matches!(c.class, EventClass::Effective(_)));
                tally.terminal += usize::from(c.terminal_frame);
                tally.usage += usize::from(c.usage.is_some());
            }
        });
    }
    scanner.finish();
    tally
}

fn bench(bencher: Bencher, dialect: Dialect, quick: bool) {
    let chunks = chunks(dialect);
    let check = scan_and_classify(dialect, &chunks, quick);
    assert_eq!(check.events, EVENTS);
    assert_eq!(check.terminal, 1);
    assert!(check.effective >= EVENTS - 8 && check.usage >= 1);
    bencher
        .counter(ItemsCount::new(EVENTS))
        .bench_local(|| scan_and_classify(dialect, black_box(&chunks), quick));
}

/// Every event with the full parse.
mod full {
    use super::*;

    #[divan::bench]
    fn chat(bencher: Bencher) {
        bench(bencher, Dialect::Chat, false);
    }

    #[divan::bench]
    fn responses(bencher: Bencher) {
        bench(bencher, Dialect::Responses, false);
    }

    #[divan::bench]
    fn messages(bencher: Bencher) {
        bench(bencher, Dialect::Messages, false);
    }

    #[divan::bench]
    fn gemini(bencher: Bencher) {
        bench(bencher, Dialect::Gemini, false);
    }
}

/// The byte path first, the full parse for what it leaves (as the observer reads).
mod bytes {
    use super::*;

    #[divan::bench]
    fn chat(bencher: Bencher) {
        bench(bencher, Dialect::Chat, true);
    }

    #[divan::bench]
    fn responses(bencher: Bencher) {
        bench(bencher, Dialect::Responses, true);
    }

    #[divan::bench]
    fn messages(bencher: Bencher) {
        bench(bencher, Dialect::Messages, true);
    }

    #[divan::bench]
    fn gemini(bencher: Bencher) {
        bench(bencher, Dialect::Gemini, true);
    }
}

/// Text deltas in the whole-stream cases.
const TEXT_DELTAS: usize = 20;

/// One stream of 20 text deltas, one event per read (a Chat stream without its usage event).
fn stream_20(dialect: Dialect) -> Vec<Vec<u8>> {
    // Each dialect's envelopes around its text deltas (Gemini's last text rides on its end).
    let around = match dialect {
        Dialect::Chat => 4,
        Dialect::Responses => 8,
        Dialect::Messages => 6,
        Dialect::Gemini => 1,
    };
    let mut events = events_n(dialect, TEXT_DELTAS + around);
    let blank = match dialect {
        Dialect::Gemini => "\r\n\r\n",
        Dialect::Chat | Dialect::Responses | Dialect::Messages => "\n\n",
    };
    if dialect == Dialect::Chat {
        // No usage chunk: the output is counted with the tokenizer.
        events.remove(events.len() - 2);
    }
    events
        .into_iter()
        .map(|e| format!("{e}{blank}").into_bytes())
        .collect()
}

fn observe(dialect: Dialect, reads: &[Vec<u8>], full: bool) -> (u32, Option<u64>) {
    let mut obs = StreamObserver::new(dialect, Some(Duration::ZERO)).estimating_output();
    if full {
        obs = obs.with_full_parse();
    }
    for (i, read) in reads.iter().enumerate() {
        obs.on_chunk(Duration::from_micros(i as u64 + 1), read);
    }
    obs.on_end(Duration::from_millis(1), BodyEnd::Eof);
    let s = obs.summary();
    (
        s.text_delta_count,
        s.tokens.output.or(s.tokens.estimated_output),
    )
}

fn bench_stream(bencher: Bencher, dialect: Dialect, full: bool) {
    assert!(laptime_core::estimate::warm());
    let reads = stream_20(dialect);
    let (texts, tokens) = observe(dialect, &reads, full);
    assert!(texts as usize >= TEXT_DELTAS && tokens.is_some());
    bencher.bench_local(|| observe(dialect, black_box(&reads), full));
}

/// A whole 20-delta stream through the observer, on the byte path.
mod observe_20 {
    use super::*;

    #[divan::bench]
    fn chat(bencher: Bencher) {
        bench_stream(bencher, Dialect::Chat, false);
    }

    #[divan::bench]
    fn responses(bencher: Bencher) {
        bench_stream(bencher, Dialect::Responses, false);
    }

    #[divan::bench]
    fn messages(bencher: Bencher) {
        bench_stream(bencher, Dialect::Messages, false);
    }

    #[divan::bench]
    fn gemini(bencher: Bencher) {
        bench_stream(bencher, Dialect::Gemini, false);
    }
}

/// The same stream with every event parsed in full.
mod full_20 {
    use super::*;

    #[divan::bench]
    fn chat(bencher: Bencher) {
        bench_stream(bencher, Dialect::Chat, true);
    }

    #[divan::bench]
    fn responses(bencher: Bencher) {
        bench_stream(bencher, Dialect::Responses, true);
    }

    #[divan::bench]
    fn messages(bencher: Bencher) {
        bench_stream(bencher, Dialect::Messages, true);
    }

    #[divan::bench]
    fn gemini(bencher: Bencher) {
        bench_stream(bencher, Dialect::Gemini, true);
    }
}

/// A whole (non-streamed) answer of each dialect with a byte path for them: the translation
/// fixtures (`*_body_max_tokens.json`: text, usage, a stop reason).
fn whole_answer(dialect: Dialect) -> &'static [u8] {
    match dialect {
        Dialect::Messages => {
            include_bytes!("../src/translate/stream/fixtures/messages_body_max_tokens.json")
        }
        Dialect::Responses => {
            include_bytes!("../src/translate/stream/fixtures/responses_body_max_tokens.json")
        }
        _ => include_bytes!("../src/translate/stream/fixtures/chat_body_max_tokens.json"),
    }
}

fn bench_whole(bencher: Bencher, dialect: Dialect, full: bool) {
    use laptime_core::classify::{classify_body, read_body_quick};
    let body = whole_answer(dialect);
    let summarise = |body: &[u8]| match full {
        true => classify_body(dialect, body),
        false => read_body_quick(dialect, body).unwrap_or_else(|| classify_body(dialect, body)),
    };
    // The byte path decides these answers, and as the full parse does.
    assert_eq!(
        read_body_quick(dialect, body),
        Some(classify_body(dialect, body))
    );
    assert!(summarise(body).has_text && summarise(body).stop.is_some());
    bencher.bench_local(|| summarise(black_box(body)));
}

/// A whole answer summarised as the gateway does: the byte path first.
mod whole_bytes {
    use super::*;

    #[divan::bench]
    fn chat(bencher: Bencher) {
        bench_whole(bencher, Dialect::Chat, false);
    }

    #[divan::bench]
    fn messages(bencher: Bencher) {
        bench_whole(bencher, Dialect::Messages, false);
    }

    #[divan::bench]
    fn responses(bencher: Bencher) {
        bench_whole(bencher, Dialect::Responses, false);
    }
}

/// The same answers with the full parse alone.
mod whole_full {
    use super::*;

    #[divan::bench]
    fn chat(bencher: Bencher) {
        bench_whole(bencher, Dialect::Chat, true);
    }

    #[divan::bench]
    fn messages(bencher: Bencher) {
        bench_whole(bencher, Dialect::Messages, true);
    }

    #[divan::bench]
    fn responses(bencher: Bencher) {
        bench_whole(bencher, Dialect::Responses, true);
    }
}
