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

/// A stage judged slow, in the order stages are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SlowStage {
    UpstreamHeadersSlow,
    FirstEventSlow,
    EffectiveOutputSlow,
    VisibleTextLate,
    GenerationSlowTps,
    LocalOverheadSlow,
}

impl SlowStage {
    pub const ALL: [SlowStage; 6] = [
        SlowStage::UpstreamHeadersSlow,
        SlowStage::FirstEventSlow,
        SlowStage::EffectiveOutputSlow,
        SlowStage::VisibleTextLate,
        SlowStage::GenerationSlowTps,
        SlowStage::LocalOverheadSlow,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SlowStage::UpstreamHeadersSlow => "upstream_headers_slow",
            SlowStage::FirstEventSlow => "first_event_slow",
            SlowStage::EffectiveOutputSlow => "effective_output_slow",
            SlowStage::VisibleTextLate => "visible_text_late",
            SlowStage::GenerationSlowTps => "generation_slow_tps",
            SlowStage::LocalOverheadSlow => "local_overhead_slow",
        }
    }
}

/// What a request was judged: the first slow stage, `ok`, or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Classification {
    Ok,
    Failed,
    Slow(SlowStage),
}

impl Classification {
    pub fn as_str(self) -> &'static str {
        match self {
            Classification::Ok => "ok",
            Classification::Failed => "failed",
            Classification::Slow(stage) => stage.as_str(),
        }
    }

    pub fn parse(s: &str) -> Option<Classification> {
        match s {
            "ok" => Some(Classification::Ok),
            "failed" => Some(Classification::Failed),
            _ => SlowStage::ALL
                .into_iter()
                .find(|st| st.as_str() == s)
                .map(Classification::Slow),
        }
    }
}

/// One entry of a record's `flags`: a slow stage, or a note on how the request was observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flag {
    Slow(SlowStage),
    /// Relayed without observation (`[server] observe = false`): stream marks are absent.
    Unobserved,
    /// A Chat stream complete but for its `data: [DONE]` (the provider omits the sentinel).
    NoTerminalSentinel,
    /// The answer was cut and another channel continued it: the client got one whole answer
    /// from two attempts (the tokens are the continuation's, its input including the prefill).
    Continued,
    /// Admitted while a soft budget of its token or workspace was spent.
    OverBudget,
}

impl Flag {
    pub fn as_str(self) -> &'static str {
        match self {
            Flag::Slow(stage) => stage.as_str(),
            Flag::Unobserved => "unobserved",
            Flag::NoTerminalSentinel => "no_terminal_sentinel",
            Flag::Continued => "continued",
            Flag::OverBudget => "over_budget",
        }
    }

    pub fn parse(s: &str) -> Option<Flag> {
        match s {
            "unobserved" => Some(Flag::Unobserved),
            "no_terminal_sentinel" => Some(Flag::NoTerminalSentinel),
            "continued" => Some(Flag::Continued),
            "over_budget" => Some(Flag::OverBudget),
            _ => match Classification::parse(s)? {
                Classification::Slow(stage) => Some(Flag::Slow(stage)),
                Classification::Ok | Classification::Failed => None,
            },
        }
    }
}

/// Both travel as their names, as stored and as the APIs show them.
macro_rules! serde_by_name {
    ($t:ty, $what:literal) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = std::borrow::Cow::<str>::deserialize(d)?;
                <$t>::parse(&name).ok_or_else(|| {
                    serde::de::Error::custom(format!(concat!("unknown ", $what, " {:?}"), name))
                })
            }
        }
    };
}

serde_by_name!(Classification, "classification");
serde_by_name!(Flag, "flag");

/// The shortest visible window (first visible text to upstream done) an output speed is
/// computed over. An answer that arrives in one burst (a cached or simulated one, a short
/// answer read from a buffer) has a window of microseconds, and tokens over it read as hundreds
/// of thousands per second: a figure about the network, not the generation, which would
/// dominate every speed percentile.
pub const MIN_TPS_WINDOW: Duration = Duration::from_millis(50);

/// Output tokens per second over the visible window (first visible text to upstream done).
/// Absent without the marks or output tokens, and unless the window means something: at least
/// two output events (an effective output later than the first visible text, so
/// `last_effective` > `first_visible`) and a window of at least [`MIN_TPS_WINDOW`].
pub fn visible_output_tps(marks: &Marks, output_tokens: Option<u64>) -> Option<f64> {
    let window = between(marks.first_visible, marks.upstream_done)?;
    let tokens = output_tokens?;
    let second_output = between(marks.first_visible, marks.last_effective)?;
    if second_output.is_zero() || window < MIN_TPS_WINDOW {
        return None;
    }
    Some(tokens as f64 / window.as_secs_f64())
}

/// A stage's figure: milliseconds for the waits, tokens per second for generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ms,
    TokensPerSecond,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::TokensPerSecond => "tok/s",
        }
    }
}

impl SlowStage {
    /// The `[thresholds]` key that sets this stage's limit.
    pub fn config_key(self) -> &'static str {
        match self {
            SlowStage::UpstreamHeadersSlow => "thresholds.upstream_headers_ms",
            SlowStage::FirstEventSlow => "thresholds.first_event_ms",
            SlowStage::EffectiveOutputSlow => "thresholds.effective_output_ms",
            SlowStage::VisibleTextLate => "thresholds.visible_text_ms",
            SlowStage::GenerationSlowTps => "thresholds.min_tps",
            SlowStage::LocalOverheadSlow => "thresholds.local_overhead_ms",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            SlowStage::GenerationSlowTps => Unit::TokensPerSecond,
            _ => Unit::Ms,
        }
    }

    fn threshold(self, t: &Thresholds) -> f64 {
        match self {
            SlowStage::UpstreamHeadersSlow => t.upstream_headers_ms,
            SlowStage::FirstEventSlow => t.first_event_ms,
            SlowStage::EffectiveOutputSlow => t.effective_output_ms,
            SlowStage::VisibleTextLate => t.visible_text_ms,
            SlowStage::GenerationSlowTps => t.min_tps,
            SlowStage::LocalOverheadSlow => t.local_overhead_ms,
        }
    }
}

/// One stage as the classifier judged it: the figure it measured against its threshold, so a
/// reader sees which limit was crossed and by how much.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judgement {
    pub stage: SlowStage,
    pub measured: f64,
    pub threshold: f64,
    /// Over its threshold (for output speed: under it).
    pub slow: bool,
}

impl Judgement {
    /// How far past the threshold the figure is (positive when slow), in the stage's unit.
    pub fn past_threshold(&self) -> f64 {
        match self.stage.unit() {
            Unit::Ms => self.measured - self.threshold,
            Unit::TokensPerSecond => self.threshold - self.measured,
        }
    }
}

fn ms_of(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Every stage whose marks are present, in the order stages are judged, with its figure; output
/// speed only from `min_tps_tokens` output tokens on.
pub fn judge(marks: &Marks, output_tokens: Option<u64>, t: &Thresholds) -> Vec<Judgement> {
    let local = [marks.auth, marks.distribution, marks.body_read]
        .into_iter()
        .flatten()
        .reduce(|a, b| a + b);
    let wait = |from, to| between(from, to).map(ms_of);
    let tps = output_tokens
        .filter(|n| *n >= t.min_tps_tokens)
        .and_then(|_| visible_output_tps(marks, output_tokens));
    let measured = [
        wait(marks.upstream_start, marks.upstream_headers),
        wait(marks.upstream_headers, marks.first_event),
        wait(marks.first_event, marks.first_effective),
        wait(marks.first_effective, marks.first_visible),
        tps,
        local.map(ms_of),
    ];
    SlowStage::ALL
        .into_iter()
        .zip(measured)
        .filter_map(|(stage, m)| {
            let measured = m?;
            let threshold = stage.threshold(t);
            let slow = match stage.unit() {
                Unit::Ms => measured > threshold,
                Unit::TokensPerSecond => measured < threshold,
            };
            Some(Judgement {
                stage,
                measured,
                threshold,
                slow,
            })
        })
        .collect()
}

/// Judges a request: returns (classification, flags).
pub fn classify(
    marks: &Marks,
    output_tokens: Option<u64>,
    outcome: Outcome,
    t: &Thresholds,
) -> (Classification, Vec<Flag>) {
    let stages: Vec<SlowStage> = judge(marks, output_tokens, t)
        .into_iter()
        .filter_map(|j| j.slow.then_some(j.stage))
        .collect();
    let classification = if !outcome.is_success() {
        Classification::Failed
    } else {
        stages
            .first()
            .map_or(Classification::Ok, |s| Classification::Slow(*s))
    };
    (classification, stages.into_iter().map(Flag::Slow).collect())
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
        assert_eq!(c, Classification::Ok);
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
        assert_eq!(c, Classification::Slow(SlowStage::UpstreamHeadersSlow));
        assert_eq!(
            flags,
            vec![
                Flag::Slow(SlowStage::UpstreamHeadersSlow),
                Flag::Slow(SlowStage::FirstEventSlow)
            ]
        );
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
        assert_eq!(c, Classification::Failed);
        assert_eq!(flags, vec![Flag::Slow(SlowStage::UpstreamHeadersSlow)]);
    }

    #[test]
    fn slow_tps_needs_enough_tokens() {
        let marks = Marks {
            first_visible: ms(0),
            last_effective: ms(9_990),
            upstream_done: ms(10_000),
            ..Marks::default()
        };
        let t = Thresholds::default();
        assert_eq!(
            classify(&marks, Some(49), Outcome::Completed, &t).0,
            Classification::Ok
        );
        assert_eq!(
            classify(&marks, Some(50), Outcome::Completed, &t).0,
            Classification::Slow(SlowStage::GenerationSlowTps)
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
        assert_eq!(c, Classification::Slow(SlowStage::LocalOverheadSlow));
    }

    #[test]
    fn classifications_and_flags_round_trip_their_names() {
        let all = [Classification::Ok, Classification::Failed]
            .into_iter()
            .chain(SlowStage::ALL.into_iter().map(Classification::Slow));
        for c in all {
            assert_eq!(Classification::parse(c.as_str()), Some(c));
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(serde_json::from_str::<Classification>(&json).unwrap(), c);
        }
        for f in SlowStage::ALL
            .map(Flag::Slow)
            .into_iter()
            .chain([Flag::Unobserved])
        {
            assert_eq!(Flag::parse(f.as_str()), Some(f));
        }
        assert_eq!(Flag::parse("ok"), None);
        assert!(serde_json::from_str::<Classification>("\"slowish\"").is_err());
    }

    #[test]
    fn tps_is_absent_without_a_positive_window() {
        let marks = Marks {
            first_visible: ms(5),
            last_effective: ms(5),
            upstream_done: ms(5),
            ..Marks::default()
        };
        assert_eq!(visible_output_tps(&marks, Some(10)), None);
        assert_eq!(visible_output_tps(&Marks::default(), Some(10)), None);
    }

    #[test]
    fn judgements_say_which_threshold_was_crossed_and_by_how_much() {
        let marks = Marks {
            upstream_start: ms(0),
            upstream_headers: ms(2500),
            first_event: ms(2600),
            first_visible: ms(3000),
            last_effective: ms(12_900),
            upstream_done: ms(13_000),
            ..Marks::default()
        };
        let got = judge(&marks, Some(98), &Thresholds::default());
        let stages: Vec<_> = got.iter().map(|j| j.stage).collect();
        assert_eq!(
            stages,
            vec![
                SlowStage::UpstreamHeadersSlow,
                SlowStage::FirstEventSlow,
                SlowStage::GenerationSlowTps
            ],
            "a stage whose marks are absent is not judged"
        );
        assert_eq!((got[0].measured, got[0].threshold), (2500.0, 2000.0));
        assert!(got[0].slow);
        assert_eq!(got[0].past_threshold(), 500.0);
        assert!(!got[1].slow);
        assert_eq!(got[1].past_threshold(), -1900.0);
        // 98 tokens over 10 s: 9.8 tok/s, 5.2 under the 15 tok/s floor.
        assert!(got[2].slow);
        assert!((got[2].past_threshold() - 5.2).abs() < 1e-9);
        assert_eq!(got[2].stage.config_key(), "thresholds.min_tps");
    }

    #[test]
    fn an_instant_answer_has_no_output_speed() {
        // The sim's instant answer: 8 tokens, all events within 45 µs.
        let us = |v: u64| Some(Duration::from_micros(v));
        let instant = Marks {
            first_visible: us(1_000),
            last_effective: us(1_040),
            upstream_done: us(1_045),
            ..Marks::default()
        };
        assert_eq!(visible_output_tps(&instant, Some(8)), None);
        let (c, flags) = classify(
            &instant,
            Some(80),
            Outcome::Completed,
            &Thresholds::default(),
        );
        assert_eq!((c, flags), (Classification::Ok, Vec::new()), "not judged");
    }

    #[test]
    fn output_speed_needs_two_output_events_and_the_minimum_window() {
        let marks = |last: u64, done: u64| Marks {
            first_visible: ms(100),
            last_effective: ms(last),
            upstream_done: ms(done),
            ..Marks::default()
        };
        // One output event, however long the wait for the end: not a speed.
        assert_eq!(visible_output_tps(&marks(100, 2_100), Some(40)), None);
        // Two events, a window just under the minimum, then exactly at it.
        assert_eq!(visible_output_tps(&marks(120, 149), Some(40)), None);
        assert_eq!(visible_output_tps(&marks(120, 150), Some(40)), Some(800.0));
        assert_eq!(
            visible_output_tps(&marks(1_900, 2_100), Some(40)),
            Some(20.0)
        );
        // Without the decode mark (rows written before it) there is no speed either.
        let mut old = marks(1_900, 2_100);
        old.last_effective = None;
        assert_eq!(visible_output_tps(&old, Some(40)), None);
    }
}
