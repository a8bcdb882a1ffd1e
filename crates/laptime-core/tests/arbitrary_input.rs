//! Arbitrary upstream bytes through the core's entry points (the CI smoke of `fuzz/`'s targets,
//! a few hundred cases each): the SSE scanner over any bytes (not only the alphabet of its own
//! property tests), each dialect's classifier and the whole stream observer, and the
//! whole-answer rule. None may panic, and each keeps its invariants: the observer concludes the
//! same from any split of the bytes, marks come in timeline order, and a whole answer's outcome
//! follows from its status, its end and whether its body is JSON.

use std::time::Duration;

use laptime_core::classify::{classify_body, classify_event, EventClass};
use laptime_core::observe::{whole_answer, BodyEnd, StreamObserver};
use laptime_core::sse::{SseItem, SseScanner};
use laptime_core::timeline::{ErrorClass, Outcome};
use laptime_core::Dialect;
use proptest::prelude::*;

/// Pieces an upstream stream is made of, in all four dialects, and pieces of broken ones.
const PIECES: &[&str] = &[
    "data: ",
    "data:",
    "event: ",
    "id: 7",
    "retry: 10",
    ": keep-alive",
    "\n",
    "\r\n",
    "\r",
    "\n\n",
    "\u{feff}",
    "[DONE]",
    "{",
    "}",
    "\"",
    "null",
    "\u{e9}",
    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}"#,
    r#"{"error":{"message":"overloaded"}}"#,
    "response.output_text.delta",
    "response.completed",
    "response.failed",
    r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
    r#"{"type":"response.reasoning_summary_text.delta","delta":"x"}"#,
    r#"{"type":"response.custom_tool_call_input.delta","delta":"x"}"#,
    r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":4,"output_tokens":9}}}"#,
    r#"{"type":"response.incomplete","response":{"status":"incomplete"}}"#,
    "message_start",
    "content_block_delta",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    r#"{"type":"message_start","message":{"usage":{"input_tokens":3,"cache_read_input_tokens":100}}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"t"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
    r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":12}}"#,
    r#"{"type":"message_stop"}"#,
    r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
    r#"{"candidates":[{"content":{"parts":[{"text":"hm","thought":true}],"role":"model"},"index":0}]}"#,
    r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}]}"#,
    r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{}}}]},"index":0}]}"#,
    r#"{"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2,"thoughtsTokenCount":3}}"#,
    r#"{"candidates":[{"finishReason":"SAFETY","index":0}]}"#,
    r#"{"promptFeedback":{"blockReason":"OTHER"}}"#,
    r#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#,
];

fn dialect() -> impl Strategy<Value = Dialect> {
    prop::sample::select(Dialect::ALL.to_vec())
}

/// A stream: pieces from [`PIECES`] mixed with arbitrary bytes.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(PIECES).prop_map(|p| p.as_bytes().to_vec()),
            1 => prop::collection::vec(any::<u8>(), 0..8),
        ],
        0..48,
    )
    .prop_map(|parts| parts.concat())
}

/// Cuts `bytes` at the given (sorted, deduplicated) indices.
fn split<'a>(bytes: &'a [u8], cuts: &[prop::sample::Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    let mut from = 0;
    for a in at.into_iter().chain([bytes.len()]) {
        out.push(&bytes[from..a]);
        from = a;
    }
    out
}

/// What the scanner reported: owned events with absolute end offsets, and the discard flag.
fn scan(chunks: &[&[u8]]) -> (Vec<(Option<String>, String, usize)>, bool) {
    let mut s = SseScanner::new();
    let mut out = Vec::new();
    let mut base = 0;
    for chunk in chunks {
        s.feed(chunk, &mut |item| match item {
            SseItem::Event {
                event, data, end, ..
            } => out.push((event.map(str::to_string), data.to_string(), base + end)),
            SseItem::Comment | SseItem::Boundary { .. } => {}
        });
        base += chunk.len();
    }
    (out, s.finish())
}

fn observe(dialect: Dialect, chunks: &[&[u8]], step_ms: u64, end: BodyEnd) -> StreamObserver {
    let mut obs = StreamObserver::new(dialect, Some(Duration::ZERO));
    for (i, chunk) in chunks.iter().enumerate() {
        let _ = obs.on_chunk(Duration::from_millis(1 + step_ms * i as u64), chunk);
    }
    let at = Duration::from_millis(2 + step_ms * chunks.len() as u64);
    obs.on_end(at, end);
    obs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_scanner_reports_the_same_events_for_any_split_of_arbitrary_bytes(
        bytes in stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        let whole = scan(&[&bytes]);
        let pieces = scan(&split(&bytes, &cuts));
        prop_assert_eq!(&whole, &pieces);
        let mut last = 0;
        for (_, data, end) in &whole.0 {
            prop_assert!(*end > last && *end <= bytes.len());
            prop_assert!(!data.contains('\r'), "a CR is a line end, never data");
            last = *end;
        }
    }

    #[test]
    fn the_observer_concludes_the_same_from_any_split_and_keeps_its_marks_in_order(
        dialect in dialect(),
        bytes in stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..16),
        broke in any::<bool>(),
    ) {
        let end = if broke { BodyEnd::Error } else { BodyEnd::Eof };
        // At one instant, the split cannot show in the marks: everything must be equal.
        let whole = observe(dialect, &[&bytes], 0, end).summary();
        let pieces = observe(dialect, &split(&bytes, &cuts), 0, end).summary();
        prop_assert_eq!(whole, pieces);
        // With time passing between chunks, the marks keep the timeline's order.
        let s = observe(dialect, &split(&bytes, &cuts), 10, end).summary();
        let m = s.marks;
        prop_assert!(s.text_delta_count <= s.event_count);
        prop_assert!(s.outcome.is_some(), "an ended stream has an outcome");
        prop_assert!(m.upstream_done.is_some());
        if let Some(fv) = m.first_visible {
            prop_assert!(m.first_effective.is_some_and(|fe| fe <= fv));
        }
        if let Some(fe) = m.first_effective {
            prop_assert!(m.first_event.is_some_and(|ev| ev <= fe));
            prop_assert!(m.last_effective.is_some_and(|le| fe <= le));
        }
        if let Some(ev) = m.first_event {
            prop_assert!(m.first_byte.is_some_and(|fb| fb <= ev));
            prop_assert!(m.upstream_done.is_some_and(|d| ev <= d));
        }
        if s.event_count == 0 {
            prop_assert_eq!(m.first_event, None);
        }
    }

    #[test]
    fn each_classifier_takes_any_event_without_panicking_and_judges_it_alike_twice(
        dialect in dialect(),
        event in prop::option::of(prop_oneof![
            prop::sample::select(PIECES).prop_map(str::to_string),
            ".{0,12}",
        ]),
        data in prop_oneof![
            prop::sample::select(PIECES).prop_map(str::to_string),
            prop::collection::vec(prop::sample::select(PIECES), 0..6).prop_map(|p| p.concat()),
            ".{0,40}",
        ],
    ) {
        let c = classify_event(dialect, event.as_deref(), &data);
        prop_assert_eq!(c, classify_event(dialect, event.as_deref(), &data));
        if let EventClass::Effective(_) = c.class {
            prop_assert!(!data.is_empty(), "an effective event carries a non-empty delta");
        }
        let _ = classify_body(dialect, data.as_bytes());
    }

    #[test]
    fn a_whole_answer_is_judged_by_its_end_status_and_body(
        dialect in dialect(),
        status in prop_oneof![Just(200u16), Just(201), Just(429), Just(400), Just(503), 100u16..600],
        broke in any::<bool>(),
        body in prop_oneof![
            stream(),
            prop::sample::select(PIECES).prop_map(|p| p.as_bytes().to_vec()),
            prop::collection::vec(any::<u8>(), 0..64),
        ],
    ) {
        let end = if broke { BodyEnd::Error } else { BodyEnd::Eof };
        let w = whole_answer(dialect, status, end, &body);
        let json = serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok();
        if broke {
            prop_assert_eq!((w.outcome, w.error_class), (Outcome::UpstreamClosedEarly, Some(ErrorClass::BodyError)));
        } else if let Some(class) = ErrorClass::from_status(status) {
            prop_assert_eq!((w.outcome, w.error_class), (Outcome::UpstreamError, Some(class)));
        } else if !json {
            prop_assert_eq!(w.outcome, Outcome::UpstreamError);
            prop_assert!(w.error_class.is_some());
        }
        if matches!(w.outcome, Outcome::Completed | Outcome::Incomplete) {
            prop_assert!(json && !broke && status < 400);
            prop_assert_eq!(w.error_class, None);
        }
    }
}
