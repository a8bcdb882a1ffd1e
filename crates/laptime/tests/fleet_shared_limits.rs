//! With `[shared] redis_url`, a token's requests-per-minute window is the fleet's: two gateway
//! processes on one PostgreSQL database and one Redis admit, together, what one would (a
//! minute's allowance at once, then the limit's rate) under twice the limit of offered load
//! split between them. Real binaries, real sockets, the real PostgreSQL and Redis servers.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::Path;
use std::time::Duration;

use laptime_store::testing::PgSchema;
use serde_json::{json, Value};
use tokio::time::Instant;

const TOKEN: &str = "lt_5a4ed5a4ed5a4ed5a4ed5a4ed5a4ed5a4ed5a4ed5a4ed5a4ed5a4ed5a4ed5a4e";

mod fleet;

fn config_file(dir: &Path, name: &str, url: &str, redis: &str, prefix: &str) -> std::path::PathBuf {
    let data = dir.join(name);
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {data:?}\n\n\
             [store]\nurl = {url:?}\n\n\
             [shared]\nredis_url = {redis:?}\nkey_prefix = {prefix:?}\n\n\
             [[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"sim-fast\"]\n"
        ),
    )
    .unwrap();
    path
}

async fn chat(http: &reqwest::Client, base: &str) -> u16 {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "sim-fast", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    r.bytes().await.unwrap();
    status
}

#[tokio::test(flavor = "multi_thread")]
async fn two_gateways_sharing_redis_admit_one_limit_between_them() {
    let redis =
        std::env::var("LAPTIME_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!(
        "laptime-test-limits-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let schema = PgSchema::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = fleet::start(
        &config_file(dir.path(), "a", schema.url(), &redis, &prefix),
        TOKEN,
    );
    let b = fleet::start(
        &config_file(dir.path(), "b", schema.url(), &redis, &prefix),
        TOKEN,
    );
    let http = reqwest::Client::new();

    // 60 requests a minute for the admin token both gateways know.
    let me: Value = http
        .post(format!("{}/graphql", a.base))
        .bearer_auth(TOKEN)
        .json(&json!({"query": "{ me { keyId workspaceId } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let set: Value = http
        .post(format!("{}/graphql", a.base))
        .bearer_auth(TOKEN)
        .json(&json!({
            "query": "mutation($ws: ID!, $key: ID!) { setLimits(workspaceId: $ws, keyId: $key, rpm: 60) { rpm } }",
            "variables": {"ws": me["data"]["me"]["workspaceId"], "key": me["data"]["me"]["keyId"]},
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(set["data"]["setLimits"]["rpm"], 60, "{set}");
    // B reads principals through a cache of a second.
    tokio::time::sleep(Duration::from_millis(1_100)).await;

    // The minute's allowance, at once, alternating between the gateways: 60 between them (a
    // gateway of its own would admit 60 each). The window refills one request a second, so a
    // burst that takes longer on a loaded machine may admit one more per second it took; the
    // admitted rate itself is proved on simulated time in laptime-core's limit tests.
    let started = Instant::now();
    let mut burst = 0;
    for i in 0..200 {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        match chat(&http, base).await {
            200 => burst += 1,
            429 => {}
            s => panic!("status {s}"),
        }
    }
    let refilled = started.elapsed().as_secs() + 1;
    assert!(
        burst >= 60 && burst <= 60 + refilled,
        "admitted {burst} of the burst in {:?}",
        started.elapsed()
    );

    let client = redis::Client::open(redis.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "the window lives in Redis");
    let _: i64 = redis::cmd("DEL")
        .arg(keys)
        .query_async(&mut conn)
        .await
        .unwrap();
}
