//! The README's example timing line and request row are what `sim-trace-b` produces: its
//! `ttft_ms` is the first body byte (the 310 ms event), not the 240 ms headers, and the row
//! agrees with the in-band line.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

const README: &str = include_str!("../../../README.md");

/// The number after `key` (`ttft_ms=315.041` or `"ttft_ms":315.041`) in `text`.
fn figure(text: &str, key: &str) -> f64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("{key} not in {text}"));
    text[at + key.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect::<String>()
        .parse()
        .unwrap()
}

#[test]
fn the_readme_example_of_sim_trace_b_has_the_sims_own_figures() {
    let script = laptime_sim::script::preset("sim-trace-b").unwrap();
    let line = README
        .lines()
        .find(|l| l.starts_with(": x-laptime-timing "))
        .unwrap();
    let ttft = figure(line, "ttft_ms=");
    let upstream = figure(line, "upstream_ms=");
    // Loopback and scheduling add a few milliseconds, never remove any.
    let first_event = script.first_event_ms as f64;
    assert!(
        (first_event..first_event + 20.0).contains(&ttft),
        "ttft_ms {ttft} is the first body byte, at {first_event} ms in the sim"
    );
    assert!((10_200.0..10_220.0).contains(&upstream), "{upstream}");
    let row_at = README.find("{\"request_id\":\"req_…\"").unwrap();
    let row = &README[row_at..];
    assert_eq!(
        figure(row, "\"ttft_ms\":"),
        ttft,
        "the row and the line agree"
    );
    assert_eq!(figure(row, "\"upstream_ms\":"), upstream);
    let headers = figure(row, "\"upstream_headers_ms\":");
    assert!((script.headers_ms as f64..script.headers_ms as f64 + 20.0).contains(&headers));
    assert!(headers < ttft, "headers come before the first body byte");
}
