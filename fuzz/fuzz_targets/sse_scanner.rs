//! The SSE scanner over arbitrary bytes: never panics, and any split of the bytes (cut where the
//! input's first bytes say) reports the same events at the same absolute offsets.
#![no_main]

use laptime_core::sse::{SseItem, SseScanner};
use libfuzzer_sys::fuzz_target;

type Seen = (Vec<(Option<String>, String, usize)>, usize, bool);

fn scan(chunks: &[&[u8]]) -> Seen {
    let mut s = SseScanner::new();
    let (mut events, mut comments, mut base) = (Vec::new(), 0, 0);
    for chunk in chunks {
        s.feed(chunk, &mut |item| match item {
            SseItem::Event {
                event, data, end, ..
            } => events.push((event.map(str::to_string), data.to_string(), base + end)),
            SseItem::Comment => comments += 1,
            SseItem::Boundary { .. } => {}
        });
        base += chunk.len();
    }
    (events, comments, s.finish())
}

fuzz_target!(|input: (Vec<u8>, Vec<u16>)| {
    let (bytes, cuts) = input;
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| *c as usize % (bytes.len() + 1))
        .collect();
    at.sort_unstable();
    at.dedup();
    let mut chunks = Vec::new();
    let mut from = 0;
    for a in at.into_iter().chain([bytes.len()]) {
        chunks.push(&bytes[from..a]);
        from = a;
    }
    let whole = scan(&[&bytes]);
    assert_eq!(whole, scan(&chunks));
    let mut last = 0;
    for (_, data, end) in &whole.0 {
        assert!(*end > last && *end <= bytes.len());
        assert!(!data.contains('\r'));
        last = *end;
    }
});
