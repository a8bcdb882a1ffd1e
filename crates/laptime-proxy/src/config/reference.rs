//! The config reference (`docs/config.md`) held to the config's keys: every key a config can
//! have is listed there, and every key listed there exists.

use std::collections::BTreeSet;

use super::{
    CacheConfig, ChannelConfig, Config, HedgeAfter, HedgeConfig, PriceConfig, RouteConfig,
    UpstreamHttp,
};

const REFERENCE: &str = include_str!("../../../../docs/config.md");

/// Keys whose value is a table of the operator's own keys (header names, model names,
/// attribute names): listed themselves, not their entries.
const FREE_TABLES: [&str; 4] = [
    "channels[].headers",
    "channels[].header_envs",
    "channels[].models",
    "telemetry.resource_attributes",
];

/// A config with every optional key given, so that serializing it names every key.
fn filled() -> Config {
    let mut cfg = Config::embedded_default(&|_| None);
    cfg.server.region = Some("eu".into());
    cfg.server.instance = Some("web-1:8080".into());
    cfg.store.url = Some("postgres://laptime@127.0.0.1:5432/test".into());
    cfg.shared.redis_url = Some("redis://127.0.0.1:6379".into());
    cfg.telemetry.otlp_endpoint = Some("http://127.0.0.1:4318".into());
    cfg.telemetry.headers_env = Some("OTLP_HEADERS".into());
    cfg.channels = vec![ChannelConfig {
        name: "c".into(),
        base_url: Some("http://127.0.0.1:9".into()),
        api_key_env: Some("K".into()),
        dialect: Some(laptime_core::Dialect::Chat),
        prefill: Some(true),
        api_key_envs: vec!["K1".into()],
        api_version: Some("2024-10-21".into()),
        headers: [("X-A".to_string(), "a".to_string())].into(),
        header_envs: [("X-B".to_string(), "B".to_string())].into(),
        objects: true,
        proxy_url: Some(String::new()),
        ca_file: Some("ca.pem".into()),
        client_cert_file: Some("cert.pem".into()),
        client_key_file: Some("key.pem".into()),
        // Written only when it is not the default.
        usage_in_stream: false,
        http_version: UpstreamHttp::Http2,
        ..ChannelConfig::default()
    }];
    let mut route = RouteConfig {
        model: "*".into(),
        cache: Some(CacheConfig::default()),
        hedge: Some(HedgeConfig {
            after_ms: Some(800),
            after: Some(HedgeAfter::P95),
            budget: 0.1,
        }),
        context_fallback: Some("bigger".into()),
        ..super::DEFAULT_ROUTE.clone()
    };
    route.timeouts.connect_ms = Some(1000);
    cfg.routes = vec![route];
    cfg.prices = vec![PriceConfig {
        model: "*".into(),
        channel: Some("c".into()),
        input_per_mtok: 1.0,
        output_per_mtok: 1.0,
        cache_read_per_mtok: Some(1.0),
        cache_write_per_mtok: Some(1.0),
        cache_write_1h_per_mtok: Some(1.0),
        reasoning_per_mtok: Some(1.0),
        effective_from: "2026-01-01".into(),
    }];
    cfg
}

/// Every leaf key under `value`, arrays of tables as `name[]`.
fn keys(prefix: &str, value: &toml::Value, out: &mut BTreeSet<String>) {
    match value {
        toml::Value::Table(t) if !t.is_empty() && !FREE_TABLES.contains(&prefix) => {
            for (k, v) in t {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                keys(&path, v, out);
            }
        }
        toml::Value::Array(items)
            if items.iter().all(toml::Value::is_table) && !items.is_empty() =>
        {
            for item in items {
                keys(&format!("{prefix}[]"), item, out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

/// The keys the reference's tables list: the first cell of each row, `` `server.listen` ``.
fn listed() -> BTreeSet<String> {
    REFERENCE
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_config_key_is_in_the_reference_and_every_listed_key_exists() {
    let value = toml::Value::try_from(filled()).unwrap_or_else(|e| panic!("{e}"));
    let mut all = BTreeSet::new();
    keys("", &value, &mut all);
    assert!(all.len() > 90, "the walk found the keys: {all:?}");
    let listed = listed();
    let missing: Vec<_> = all.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "keys missing from docs/config.md: {missing:?}"
    );
    let unknown: Vec<_> = listed.difference(&all).collect();
    assert!(
        unknown.is_empty(),
        "docs/config.md lists keys that do not exist: {unknown:?}"
    );
}

#[test]
fn the_filled_config_reads_back_as_itself() {
    // The reader takes each section on its own: a section it forgot would not read back.
    let cfg = filled();
    assert_eq!(Config::from_toml(&cfg.to_toml(), "filled"), Ok(cfg));
}
