//! What the three classifier targets share: the classifier of one dialect, alone on one event
//! and inside the whole stream observer, never panics; an effective event has a non-empty
//! delta; and the observer concludes the same from any split of the stream, its marks in
//! timeline order.

use std::time::Duration;

use laptime_core::classify::{classify_body, classify_event, EventClass};
use laptime_core::observe::{BodyEnd, StreamObserver, StreamSummary};
use laptime_core::Dialect;

/// One fuzz input: an event's name and data, a stream, where to cut it, whether it broke.
pub type ClassifierInput = (Option<String>, String, Vec<u8>, Vec<u16>, bool);

fn observe(dialect: Dialect, chunks: &[&[u8]], step_ms: u64, end: BodyEnd) -> StreamSummary {
    let mut obs = StreamObserver::new(dialect, Some(Duration::ZERO));
    for (i, chunk) in chunks.iter().enumerate() {
        let _ = obs.on_chunk(Duration::from_millis(1 + step_ms * i as u64), chunk);
    }
    obs.on_end(
        Duration::from_millis(2 + step_ms * chunks.len() as u64),
        end,
    );
    obs.summary()
}

/// Checks `dialect`'s classifier and observer on one input.
pub fn classifier(dialect: Dialect, input: ClassifierInput) {
    let (event, data, stream, cuts, broke) = input;
    let c = classify_event(dialect, event.as_deref(), &data);
    if let EventClass::Effective(_) = c.class {
        assert!(!data.is_empty());
    }
    let _ = classify_body(dialect, data.as_bytes());

    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| *c as usize % (stream.len() + 1))
        .collect();
    at.sort_unstable();
    at.dedup();
    let mut chunks = Vec::new();
    let mut from = 0;
    for a in at.into_iter().chain([stream.len()]) {
        chunks.push(&stream[from..a]);
        from = a;
    }
    let end = if broke { BodyEnd::Error } else { BodyEnd::Eof };
    assert_eq!(
        observe(dialect, &[&stream], 0, end),
        observe(dialect, &chunks, 0, end)
    );
    let s = observe(dialect, &chunks, 10, end);
    let m = s.marks;
    assert!(s.text_delta_count <= s.event_count);
    assert!(s.outcome.is_some());
    if let Some(fv) = m.first_visible {
        assert!(m.first_effective.is_some_and(|fe| fe <= fv));
    }
    if let Some(fe) = m.first_effective {
        assert!(m.first_event.is_some_and(|ev| ev <= fe));
    }
}
