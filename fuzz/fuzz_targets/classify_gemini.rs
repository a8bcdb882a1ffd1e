//! The Gemini classifier, alone on one event and inside the whole stream observer (see
//! `laptime_fuzz::classifier`).
#![no_main]

use laptime_core::Dialect;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: laptime_fuzz::ClassifierInput| {
    laptime_fuzz::classifier(Dialect::Gemini, input);
});
