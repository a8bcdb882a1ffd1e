//! The translation hub over the sim's corpus: every preset's stream in every dialect, split
//! anywhere, translated to every other client dialect and read back, says the same text,
//! reasoning, tool calls (names and parsed arguments), stop reason and token counts as the
//! upstream's stream (for a stream that ends in an error or is cut before its stop, all but the
//! token counts), and the client's bytes do not depend on the split.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::collections::VecDeque;

use laptime_core::observe::BodyEnd;
use laptime_core::relay::Piece;
use laptime_core::translate::stream::{
    read_stream, Answer, BlockKind, ClientStreamOptions, StreamTranslator,
};
use laptime_core::Dialect;
use proptest::prelude::*;
use serde_json::Value;

/// The presets that answer with a stream (the others answer with an error status).
fn streamed_presets() -> Vec<&'static str> {
    laptime_sim::PRESET_NAMES
        .into_iter()
        .filter(|p| laptime_sim::preset(p).is_some_and(|s| s.end != laptime_sim::End::Status))
        .collect()
}

fn upstream_bytes(dialect: Dialect, preset: &str) -> Vec<u8> {
    let script = laptime_sim::preset(preset).unwrap();
    let schedule = laptime_sim::schedule(dialect, &script, preset, (true, true), 0);
    schedule
        .steps
        .iter()
        .flat_map(|s| s.bytes.to_vec())
        .collect()
}

fn translate(upstream: Dialect, client: Dialect, bytes: &[u8], cuts: &[usize]) -> Vec<u8> {
    let opts = ClientStreamOptions {
        model: Some("m".into()),
        id: "req".into(),
        created: 1,
        include_usage: true,
        timing_comment: true,
    };
    let mut t = StreamTranslator::new(upstream, client, &opts);
    let mut out = VecDeque::new();
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    bounds.push(bytes.len());
    bounds.sort_unstable();
    let mut from = 0;
    for to in bounds {
        t.push(&bytes[from..to], &mut out);
        from = to;
    }
    t.finish(BodyEnd::Eof, &mut out);
    let mut client_bytes = Vec::new();
    for p in out {
        match p {
            Piece::Bytes(b) => client_bytes.extend_from_slice(&b),
            Piece::TimingComment => client_bytes.extend_from_slice(b": x-laptime-timing\n\n"),
        }
    }
    client_bytes
}

/// What both dialects can say about an answer, unescaped.
#[derive(Debug, PartialEq)]
struct Said {
    text: String,
    reasoning: String,
    tools: Vec<(String, Value)>,
    stop: Option<String>,
    tokens: (Option<u64>, Option<u64>, Option<u64>),
    error: bool,
}

fn plain(escaped: &str) -> String {
    serde_json::from_str(&format!("\"{escaped}\"")).unwrap()
}

fn said(a: &Answer) -> Said {
    let mut s = Said {
        text: String::new(),
        reasoning: String::new(),
        tools: Vec::new(),
        // A safety stop is Anthropic's `refusal` and every other dialect's content filter:
        // one meaning, two names.
        stop: a
            .stop
            .map(|r| format!("{r:?}").replace("Refusal", "ContentFilter")),
        // A dialect that requires a count (Anthropic's message_start input, Responses'
        // cached_tokens) writes an unknown one as 0: a zero and an absent count say the same here.
        tokens: (
            a.usage.input.filter(|&n| n > 0),
            a.usage.output.filter(|&n| n > 0),
            a.usage.cache_read.filter(|&n| n > 0),
        ),
        error: a.error.is_some(),
    };
    if s.error || s.stop.is_none() {
        // A stream that ends in an error, or is cut before its stop (`sim-cut-after-40`,
        // `sim-stall-after-20`), carries usage only where its dialect says it early
        // (Anthropic's message_start, Gemini's running usageMetadata); the final usage (Chat's
        // usage chunk, Responses' completed response) never comes. Not compared.
        s.tokens = (None, None, None);
    }
    for b in &a.blocks {
        match &b.kind {
            BlockKind::Text => s.text.push_str(&plain(&b.text)),
            BlockKind::Reasoning => s.reasoning.push_str(&plain(&b.text)),
            BlockKind::ToolCall { name, .. } => {
                let args = plain(&b.text);
                s.tools.push((
                    plain(name.raw()),
                    serde_json::from_str(&args).unwrap_or(Value::String(args)),
                ));
            }
            BlockKind::RedactedReasoning { .. } => {}
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn every_preset_survives_every_pair_at_any_split(
        cuts in proptest::collection::vec(0usize..100_000, 0..12),
    ) {
        for preset in streamed_presets() {
            for upstream in Dialect::ALL {
                let bytes = upstream_bytes(upstream, preset);
                let want = said(&read_stream(upstream, &bytes));
                prop_assert!(
                    !want.text.is_empty() || !want.tools.is_empty() || want.error,
                    "{preset} over {upstream} says something"
                );
                for client in Dialect::ALL.into_iter().filter(|c| *c != upstream) {
                    let whole = translate(upstream, client, &bytes, &[]);
                    let split = translate(upstream, client, &bytes, &cuts);
                    prop_assert_eq!(&whole, &split, "{} {}→{}: split-independent", preset, upstream, client);
                    let got = said(&read_stream(client, &split));
                    prop_assert_eq!(&got, &want, "{} {}→{}", preset, upstream, client);
                }
            }
        }
    }
}
