//! Snapshots of what clients and scripts parse: every error class's body in every dialect, each
//! dialect's in-band error event, the in-band timing comment and trailers, and `other.timing`.
//! A change to any of them shows up here to be reviewed (`UPDATE_SNAPSHOTS=1` rewrites them).

use std::fmt::Write as _;
use std::time::Duration;

use laptime_core::timeline::{ErrorClass, Hedge, Marks};
use laptime_core::usage::Tokens;
use laptime_core::views::{InBand, TimingView};
use laptime_core::Dialect;
use laptime_proxy::respond::{in_band_error, GatewayError, InBandError};
use snapshot::snapshot;

pub mod snapshot;

const DIALECTS: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

#[test]
fn every_error_class_answers_in_every_dialects_own_error_shape() {
    let mut out = String::new();
    for class in ErrorClass::ALL {
        let e = GatewayError::new(class, format!("message for {}", class.as_str()));
        for dialect in DIALECTS {
            let body = e.body(dialect);
            let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
            // Each body is what the dialect's SDK parses as an error.
            if dialect.is_anthropic() {
                assert_eq!(parsed["type"], "error");
                assert!(parsed["error"]["type"].is_string());
            } else {
                assert!(parsed["error"]["type"].is_string());
            }
            writeln!(
                out,
                "{} {} {} {}",
                class.as_str(),
                dialect,
                e.status().as_u16(),
                String::from_utf8(body.to_vec()).unwrap()
            )
            .unwrap();
        }
    }
    snapshot("error_bodies.txt", &out);
}

#[test]
fn each_dialects_in_band_error_event_keeps_its_shape() {
    let mut out = String::new();
    for dialect in DIALECTS {
        for (why, message) in [
            (
                InBandError::Timeout,
                "the upstream missed the idle deadline",
            ),
            (
                InBandError::UpstreamCut,
                "the upstream closed the stream before it was complete",
            ),
        ] {
            let event = in_band_error(dialect, why, message);
            writeln!(out, "# {dialect} {why:?}").unwrap();
            out.push_str(std::str::from_utf8(&event).unwrap());
        }
    }
    snapshot("in_band_errors.txt", &out);
}

fn trace_b() -> (Marks, Tokens) {
    let at = |us: u64| Some(Duration::from_micros(us));
    let marks = Marks {
        auth: at(35),
        body_read: at(12),
        admission: None,
        distribution: at(4),
        upstream_start: at(100),
        upstream_headers: at(240_300),
        first_byte: at(240_400),
        first_event: at(310_400),
        first_effective: at(2_900_500),
        first_visible: at(8_700_500),
        last_effective: at(10_100_500),
        upstream_done: at(10_200_500),
        handler_done: at(10_200_600),
    };
    let tokens = Tokens {
        input: Some(1_312),
        output: Some(83),
        cache_read: Some(512),
        cache_write: None,
        cache_write_1h: None,
        reasoning: None,
        estimated_output: None,
    };
    (marks, tokens)
}

#[test]
fn the_in_band_timing_comment_and_trailers_keep_their_shape() {
    let (marks, tokens) = trace_b();
    let mut out = String::new();
    for hedge in [Hedge::None, Hedge::Primary, Hedge::Hedge] {
        let inband = InBand::new(&marks, &tokens, hedge);
        out.push_str(&inband.comment());
        for (name, value) in inband.trailers() {
            writeln!(out, "{name}: {value}").unwrap();
        }
        out.push('\n');
    }
    // Absent values are left out, never written as 0.
    let bare = InBand::new(&Marks::default(), &Tokens::default(), Hedge::None);
    out.push_str(&bare.comment());
    snapshot("in_band_timing.txt", &out);
}

#[test]
fn other_timing_keeps_its_shape_with_absent_marks_null() {
    let (marks, tokens) = trace_b();
    let full = serde_json::to_string_pretty(&TimingView::new(&marks, &tokens)).unwrap();
    let failed_early = Marks {
        auth: marks.auth,
        body_read: marks.body_read,
        distribution: marks.distribution,
        upstream_start: marks.upstream_start,
        handler_done: Some(Duration::from_millis(250)),
        ..Marks::default()
    };
    let bare =
        serde_json::to_string_pretty(&TimingView::new(&failed_early, &Tokens::default())).unwrap();
    snapshot("other_timing.json", &format!("{full}\n{bare}\n"));
}
