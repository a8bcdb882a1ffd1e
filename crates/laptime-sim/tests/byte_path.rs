//! The observer's byte path against the full parse over the sim's wire output: every preset's
//! stream in every dialect, with and without usage in the stream, fed as the sim writes it
//! (one piece per scheduled step) and cut anywhere, gives the same chunk plans, marks, counts,
//! tokens (the tokenizer's estimate included), finish and errors after every chunk as an
//! observer that parses every event in full (`laptime-core`'s `tests/byte_path.rs` checks the
//! fixtures, the tricky cases and mutations event by event).

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::time::Duration;

use laptime_core::observe::{BodyEnd, StreamObserver};
use laptime_core::Dialect;
use proptest::prelude::*;

const DIALECTS: [Dialect; 4] = [
    Dialect::Chat,
    Dialect::Responses,
    Dialect::Messages,
    Dialect::Gemini,
];

/// The presets that answer with a stream (the others answer with an error status).
fn streamed_presets() -> Vec<&'static str> {
    laptime_sim::PRESET_NAMES
        .into_iter()
        .filter(|p| laptime_sim::preset(p).is_some_and(|s| s.end != laptime_sim::End::Status))
        .collect()
}

/// The sim's stream as it writes it: one piece per scheduled step.
fn steps(dialect: Dialect, preset: &str, include_usage: bool) -> Vec<Vec<u8>> {
    let script = laptime_sim::preset(preset).unwrap();
    let schedule = laptime_sim::schedule(dialect, &script, preset, (true, include_usage), 0);
    schedule.steps.iter().map(|s| s.bytes.to_vec()).collect()
}

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Feeds the same chunks to an observer on the byte path and one on the full parse, and
/// asserts they agree after every chunk and at the end.
fn check(dialect: Dialect, chunks: &[&[u8]]) {
    let mut quick = StreamObserver::new(dialect, Some(at(0))).estimating_output();
    let mut full = StreamObserver::new(dialect, Some(at(0)))
        .estimating_output()
        .with_full_parse();
    for (i, chunk) in chunks.iter().enumerate() {
        let t = at(1 + i as u64);
        assert_eq!(
            quick.on_chunk(t, chunk),
            full.on_chunk(t, chunk),
            "chunk {i}"
        );
        assert_eq!(quick.summary(), full.summary(), "chunk {i}");
        assert_eq!(quick.response_id(), full.response_id());
    }
    let end = at(2 + chunks.len() as u64);
    quick.on_end(end, BodyEnd::Eof);
    full.on_end(end, BodyEnd::Eof);
    assert_eq!(quick.summary(), full.summary());
}

#[test]
fn every_preset_in_every_dialect_reads_the_same_on_both_paths() {
    assert!(laptime_core::estimate::warm());
    let mut streams = 0;
    for preset in streamed_presets() {
        for dialect in DIALECTS {
            for include_usage in [true, false] {
                let pieces = steps(dialect, preset, include_usage);
                let as_written: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
                check(dialect, &as_written);
                let whole = pieces.concat();
                check(dialect, &[&whole]);
                streams += 1;
            }
        }
    }
    assert!(streams >= 40, "{streams} streams");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn cut_anywhere_the_sims_streams_read_the_same_on_both_paths(
        preset in any::<prop::sample::Index>(),
        dialect in 0usize..4,
        include_usage in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let presets = streamed_presets();
        let name: &&str = preset.get(&presets);
        let whole = steps(DIALECTS[dialect], name, include_usage).concat();
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(whole.len() + 1)).collect();
        bounds.push(whole.len());
        bounds.sort_unstable();
        let mut chunks = Vec::new();
        let mut from = 0;
        for to in bounds {
            chunks.push(&whole[from..to]);
            from = to;
        }
        check(DIALECTS[dialect], &chunks);
    }
}

/// The sim's whole (non-streamed) answers: every preset's that sends its body whole, in Chat,
/// Responses and Messages (the dialects with a byte path for whole answers), is summarised on
/// the byte path, as the full parse does.
#[test]
fn every_presets_whole_answer_reads_the_same_on_both_paths() {
    use laptime_core::classify::{classify_body, read_body_quick};
    use laptime_sim::End;
    let mut bodies = 0;
    for preset in streamed_presets() {
        let script = laptime_sim::preset(preset).unwrap();
        if matches!(script.end, End::Close | End::Reset | End::Stall) {
            continue; // half a body: the byte path must leave it, as the cut tests check
        }
        for dialect in [Dialect::Chat, Dialect::Responses, Dialect::Messages] {
            let schedule = laptime_sim::schedule(dialect, &script, preset, (false, true), 0);
            let body: Vec<u8> = schedule
                .steps
                .iter()
                .flat_map(|s| s.bytes.to_vec())
                .collect();
            let quick = read_body_quick(dialect, &body);
            assert_eq!(
                quick,
                Some(classify_body(dialect, &body)),
                "{preset} {dialect:?}: {}",
                String::from_utf8_lossy(&body)
            );
            bodies += 1;
        }
    }
    assert!(bodies >= 18, "{bodies} answers");
}
