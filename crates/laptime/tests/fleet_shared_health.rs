//! With `[shared] redis_url`, channel health is the fleet's: a circuit one gateway opens is
//! open on every gateway sharing the Redis, and a gateway without it keeps its own. Real
//! binaries, real sockets, the real Redis on 127.0.0.1:6379 (`LAPTIME_TEST_REDIS_URL`), keys
//! under a prefix of this test's own.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use tokio::time::Instant;

const TOKEN: &str = "lt_5a5ed5a5ed5a5ed5a5ed5a5ed5a5ed5a5ed5a5ed5a5ed5a5ed5a5ed5a5ed5a5e";

mod fleet;

fn start_with(config: &Path) -> fleet::Running {
    fleet::start(config, TOKEN)
}

/// A gateway of its own data dir; sharing through `redis` when given.
fn config(dir: &Path, name: &str, redis: Option<(&str, &str)>) -> PathBuf {
    let shared = redis.map_or(String::new(), |(url, prefix)| {
        format!("[shared]\nredis_url = {url:?}\nkey_prefix = {prefix:?}\n\n")
    });
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\n\n{shared}\
             [[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"sim-fast\"]\n\
             circuit = {{ consecutive_failures = 2, open_s = 60, first_probe_s = 60 }}\n",
            dir.join(name)
        ),
    )
    .unwrap();
    path
}

async fn circuit(http: &reqwest::Client, base: &str) -> String {
    let v: Value = http
        .post(format!("{base}/graphql"))
        .bearer_auth(TOKEN)
        .json(&json!({"query": "{ channels { name circuit } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["data"]["channels"][0]["circuit"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_circuit_one_gateway_opens_is_open_on_every_gateway_sharing_its_redis() {
    let url =
        std::env::var("LAPTIME_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("lt_test_{}_{}", std::process::id(), rand_suffix());
    let dir = tempfile::tempdir().unwrap();
    let a = start_with(&config(dir.path(), "a", Some((&url, &prefix))));
    let b = start_with(&config(dir.path(), "b", Some((&url, &prefix))));
    let alone = start_with(&config(dir.path(), "c", None));
    let http = reqwest::Client::new();
    for gw in [&a, &b, &alone] {
        assert_eq!(circuit(&http, &gw.base).await, "closed");
    }

    // Two upstream failures through A open A's circuit.
    for _ in 0..2 {
        let r = http
            .post(format!("{}/v1/chat/completions", a.base))
            .bearer_auth(TOKEN)
            .json(
                &json!({"model": "sim-fast", "messages": [{"role": "user", "content": "hi"}],
                "laptime_sim": {"end": "status", "status": 500}}),
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_server_error(), "{}", r.status());
    }
    assert_eq!(circuit(&http, &a.base).await, "open");

    // B, which saw no failure, has it open within a few polls; the gateway alone does not.
    let at = Instant::now();
    while circuit(&http, &b.base).await != "open" {
        assert!(
            at.elapsed() < Duration::from_secs(5),
            "B never saw A's open circuit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(circuit(&http, &alone.base).await, "closed");
    // While the fleet holds it open, B sends its requests no upstream call.
    let r = http
        .post(format!("{}/v1/chat/completions", b.base))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "sim-fast", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let metrics = http
        .get(format!("{}/metrics", b.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("laptime_shared_dropped_total 0"),
        "sharing is on and dropped nothing"
    );

    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{prefix}:health"))
        .query_async(&mut conn)
        .await
        .unwrap();
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()))
}
