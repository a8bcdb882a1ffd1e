//! The whole-answer rule over any body, status and end: never panics, and the outcome follows
//! from them (a broken body is closed early, an error status an upstream error, a 2xx body that
//! is not JSON an upstream error; only a JSON 2xx body that ended cleanly completes).
#![no_main]

use laptime_core::observe::{whole_answer, BodyEnd};
use laptime_core::timeline::{ErrorClass, Outcome};
use laptime_core::Dialect;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u8, u16, bool, Vec<u8>)| {
    let (d, status, broke, body) = input;
    let dialect = Dialect::ALL[d as usize % Dialect::ALL.len()];
    let end = if broke { BodyEnd::Error } else { BodyEnd::Eof };
    let w = whole_answer(dialect, status, end, &body);
    let json = serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok();
    if broke {
        assert_eq!(w.outcome, Outcome::UpstreamClosedEarly);
    } else if let Some(class) = ErrorClass::from_status(status) {
        assert_eq!(
            (w.outcome, w.error_class),
            (Outcome::UpstreamError, Some(class))
        );
    } else if !json {
        assert_eq!(w.outcome, Outcome::UpstreamError);
    }
    if matches!(w.outcome, Outcome::Completed | Outcome::Incomplete) {
        assert!(json && !broke && w.error_class.is_none());
    }
});
