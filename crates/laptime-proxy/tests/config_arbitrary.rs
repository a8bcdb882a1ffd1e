//! Arbitrary config text (the CI smoke of `fuzz/`'s config target): reading and validating any
//! TOML, well-formed or not, never panics, and a config that validates prints an effective
//! config (`laptime check-config`) that reads back as the same config.

use laptime_proxy::config::Config;
use proptest::prelude::*;

const LINES: &[&str] = &[
    "[server]",
    "[store]",
    "[thresholds]",
    "[[channels]]",
    "[[routes]]",
    "[channels.circuit]",
    "listen = \"127.0.0.1:0\"",
    "listen = \"not an address\"",
    "data_dir = \"./d\"",
    "max_body_bytes = 0",
    "max_body_bytes = 1024",
    "drain_s = 30",
    "metrics_public = true",
    "threads = 2",
    "upstream_idle_per_thread = 0",
    "recorder_queue = 0",
    "recorder_queue = 10",
    "retention_days = 7",
    "retention_interval_s = 0",
    "name = \"sim\"",
    "name = \"\"",
    "name = \"a\"",
    "provider = \"sim\"",
    "provider = \"openai\"",
    "provider = \"gemini\"",
    "base_url = \"http://127.0.0.1:9\"",
    "base_url = \"ftp://x\"",
    "api_key_env = \"KEY\"",
    "models = [\"*\"]",
    "models = [\"sim-fast\", \"sim-fast\"]",
    "models = { fast = \"sim-fast\" }",
    "models = []",
    "group = \"batch\"",
    "priority = -1",
    "weight = 0",
    "weight = 3",
    "circuit = { consecutive_failures = 0 }",
    "circuit = { error_rate = 1.5, window_s = 30 }",
    "model = \"*\"",
    "model = \"sim-fast\"",
    "failover = { max_attempts = 0, on_status = [429, 700] }",
    "failover = { max_attempts = 2 }",
    "timeouts = { headers_ms = 0 }",
    "timeouts = { headers_ms = 100, total_ms = 10 }",
    "cache = { ttl_s = 0, max_entries = 0 }",
    "cache = { ttl_s = 60, max_entries = 10 }",
    "hedge = { after_ms = 800 }",
    "hedge = { after = \"p95\", budget = 0.1 }",
    "hedge = { after = \"p42\" }",
    "[telemetry]",
    "otlp_endpoint = \"http://127.0.0.1:4318\"",
    "otlp_endpoint = \"ftp://x\"",
    "otlp_protocol = \"grpc\"",
    "otlp_protocol = \"http/json\"",
    "sampling_ratio = 0.25",
    "sampling_ratio = 1.5",
    "service_name = \"edge\"",
    "headers_env = \"KEY\"",
    "resource_attributes = { \"deployment.environment\" = \"prod\" }",
    "max_queue_size = 0",
    "max_export_batch_size = 4096",
    "unknown_key = 1",
    "= broken",
    "[[",
    "x = \"unterminated",
];

const BASE: &str = "[[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"*\"]\n";

fn text() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop::collection::vec(
            prop_oneof![
                6 => prop::sample::select(LINES).prop_map(str::to_string),
                1 => ".{0,24}",
            ],
            0..14,
        ),
    )
        .prop_map(|(base, lines)| {
            let mut t = if base {
                BASE.to_string()
            } else {
                String::new()
            };
            for l in lines {
                t.push_str(&l);
                t.push('\n');
            }
            t
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_config_text_is_read_or_refused_and_a_valid_one_prints_what_reads_back(text in text()) {
        let Ok(cfg) = Config::from_toml(&text, "fuzz.toml") else {
            return Ok(());
        };
        let env = |name: &str| (name == "KEY").then(|| "secret".to_string());
        if cfg.validate(&env).is_err() {
            return Ok(());
        }
        let printed = cfg.to_toml();
        prop_assert!(!printed.contains("secret"), "a key's value is never printed");
        let back = Config::from_toml(&printed, "printed");
        prop_assert!(back.is_ok(), "{printed}\n{back:?}");
        prop_assert_eq!(back.ok(), Some(cfg));
    }
}
