//! The slow-request classifier: which stage of a request was slow.
//!
//! Stages are judged in a fixed order, from the upstream boundary toward the local phases; a
//! stage whose marks are absent is not judged. `flags` lists every stage over its threshold,
//! `classification` is the first of them, `ok` when there is none and `failed` for an unsuccessful
//! outcome (the flags are still listed).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::timeline::{between, Marks, Outcome};

/// Thresholds, in milliseconds unless named otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    pub upstream_headers_ms: f64,
    pub first_event_ms: f64,
    pub effective_output_ms: f64,
    pub visible_text_ms: f64,
    pub min_tps: f64,
    /// Output speed is judged only from this many output tokens on.
    pub min_tps_tokens: u64,
    pub local_overhead_ms: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            upstream_headers_ms: 2000.0,
            first_event_ms: 2000.0,
            effective_output_ms: 3000.0,
            visible_text_ms: 3000.0,
            min_tps: 15.0,
            min_tps_tokens: 50,
            local_overhead_ms: 100.0,
        }
    }
}

pub const OK: &str = "ok";
pub const FAILED: &str = "failed";

/// Output tokens per second over the visible window (first visible text to upstream done).
/// Absent without the marks, without output tokens, or without a positive window.
pub fn visible_output_tps(marks: &Marks, output_tokens: Option<u64>) -> Option<f64> {
    let window = between(marks.first_visible, marks.upstream_done)?;
    let tokens = output_tokens?;
    if window.is_zero() {
        return None;
    }
    Some(tokens as f64 / window.as_secs_f64())
}

fn over(d: Option<Duration>, limit_ms: f64) -> bool {
    d.is_some_and(|d| d.as_secs_f64() * 1000.0 > limit_ms)
}

/// Judges a request: returns (classification, flags).
pub fn classify(
    marks: &Marks,
    output_tokens: Option<u64>,
    outcome: Outcome,
    t: &Thresholds,
) -> (String, Vec<String>) {
    let mut flags = Vec::new();
    if over(
        between(marks.upstream_start, marks.upstream_headers),
        t.upstream_headers_ms,
    ) {
        flags.push("upstream_headers_slow");
    }
    if over(
        between(marks.upstream_headers, marks.first_event),
        t.first_event_ms,
    ) {
        flags.push("first_event_slow");
    }
    if over(
        between(marks.first_event, marks.first_effective),
        t.effective_output_ms,
    ) {
        flags.push("effective_output_slow");
    }
    if over(
        between(marks.first_effective, marks.first_visible),
        t.visible_text_ms,
    ) {
        flags.push("visible_text_late");
    }
    if output_tokens.is_some_and(|n| n >= t.min_tps_tokens)
        && visible_output_tps(marks, output_tokens).is_some_and(|tps| tps < t.min_tps)
    {
        flags.push("generation_slow_tps");
    }
    let local = [marks.auth, marks.distribution, marks.body_read]
        .into_iter()
        .flatten()
        .sum::<Duration>();
    if local.as_secs_f64() * 1000.0 > t.local_overhead_ms {
        flags.push("local_overhead_slow");
    }
    let classification = if !outcome.is_success() {
        FAILED
    } else {
        flags.first().copied().unwrap_or(OK)
    };
    (
        classification.to_string(),
        flags.into_iter().map(str::to_string).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Option<Duration> {
        Some(Duration::from_millis(v))
    }

    #[test]
    fn absent_stages_are_not_judged() {
        let marks = Marks {
            upstream_start: ms(0),
            ..Marks::default()
        };
        let (c, flags) = classify(&marks, None, Outcome::Completed, &Thresholds::default());
        assert_eq!(c, OK);
        assert!(flags.is_empty());
    }

    #[test]
    fn first_flag_in_stage_order_wins_and_all_flags_are_listed() {
        let marks = Marks {
            upstream_start: ms(0),
            upstream_headers: ms(2500),
            first_event: ms(5000),
            first_effective: ms(5100),
            first_visible: ms(5200),
            upstream_done: ms(6200),
            ..Marks::default()
        };
        let (c, flags) = classify(
            &marks,
            Some(100),
            Outcome::Completed,
            &Thresholds::default(),
        );
        assert_eq!(c, "upstream_headers_slow");
        assert_eq!(flags, vec!["upstream_headers_slow", "first_event_slow"]);
    }

    #[test]
    fn failed_outcome_is_failed_but_keeps_flags() {
        let marks = Marks {
            upstream_start: ms(0),
            upstream_headers: ms(3000),
            ..Marks::default()
        };
        let (c, flags) = classify(
            &marks,
            None,
            Outcome::UpstreamClosedEarly,
            &Thresholds::default(),
        );
        assert_eq!(c, FAILED);
        assert_eq!(flags, vec!["upstream_headers_slow"]);
    }

    #[test]
    fn slow_tps_needs_enough_tokens() {
        let marks = Marks {
            first_visible: ms(0),
            upstream_done: ms(10_000),
            ..Marks::default()
        };
        let t = Thresholds::default();
        assert_eq!(classify(&marks, Some(49), Outcome::Completed, &t).0, OK);
        assert_eq!(
            classify(&marks, Some(50), Outcome::Completed, &t).0,
            "generation_slow_tps"
        );
    }

    #[test]
    fn local_overhead_sums_the_three_local_phases() {
        let marks = Marks {
            auth: ms(40),
            distribution: ms(30),
            body_read: ms(31),
            ..Marks::default()
        };
        let (c, _) = classify(&marks, None, Outcome::Completed, &Thresholds::default());
        assert_eq!(c, "local_overhead_slow");
    }

    #[test]
    fn tps_is_absent_without_a_positive_window() {
        let marks = Marks {
            first_visible: ms(5),
            upstream_done: ms(5),
            ..Marks::default()
        };
        assert_eq!(visible_output_tps(&marks, Some(10)), None);
        assert_eq!(visible_output_tps(&Marks::default(), Some(10)), None);
    }
}
