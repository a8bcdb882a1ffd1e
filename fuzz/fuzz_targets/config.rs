//! Config text: any input is read or refused without a panic, and a config that validates
//! prints an effective config that reads back as the same config.
#![no_main]

use laptime_proxy::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(cfg) = Config::from_toml(text, "fuzz.toml") else {
        return;
    };
    if cfg.validate(&|_| None).is_err() {
        return;
    }
    let back = Config::from_toml(&cfg.to_toml(), "printed").ok();
    assert_eq!(back, Some(cfg));
});
