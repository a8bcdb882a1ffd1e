//! A route's response cache with `shared = true` lives in Redis: a repeat through B is answered
//! from the entry A stored, only within the workspace that stored it and the TTL; an answer
//! over `max_entry_bytes` is never written; and with Redis down every request still succeeds,
//! as a miss. Real binaries, real sockets, one PostgreSQL store (a schema of its own: a
//! workspace's id, which the cache key holds, is the fleet's only on a shared store), the real
//! Redis on 127.0.0.1:6379 (`LAPTIME_TEST_REDIS_URL`), keys under a prefix of this test's own.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

const TOKEN: &str = "lt_cac4ecac4ecac4ecac4ecac4ecac4ecac4ecac4ecac4ecac4ecac4ecac4ecac4";

mod fleet;

/// A gateway on the store `store_url` (else its own SQLite file) whose `sim-fast` route caches
/// in Redis at `redis_url`. The lookup wait is 100 ms, not the default 5 ms, so that a loaded
/// test machine still hits.
fn config(
    dir: &Path,
    name: &str,
    store_url: Option<&str>,
    redis_url: &str,
    prefix: &str,
) -> PathBuf {
    let store = store_url.map_or(String::new(), |url| format!("[store]\nurl = {url:?}\n\n"));
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\n\n{store}\
             [shared]\nredis_url = {redis_url:?}\nkey_prefix = {prefix:?}\ncache_lookup_ms = 100\n\n\
             [[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"sim-fast\"]\n\n\
             [[routes]]\nmodel = \"sim-fast\"\n\
             cache = {{ ttl_s = 3, max_entry_bytes = 4000, shared = true }}\n",
            dir.join(name)
        ),
    )
    .unwrap();
    path
}

async fn chat(http: &reqwest::Client, base: &str, token: &str, body: &Value) -> (bool, String) {
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let hit = r
        .headers()
        .get("x-laptime-cache")
        .is_some_and(|v| v == "hit");
    (hit, r.text().await.unwrap())
}

fn ask(content: &str, extra: Value) -> Value {
    let mut body = json!({"model": "sim-fast",
        "messages": [{"role": "user", "content": content}]});
    if let Value::Object(m) = extra {
        body.as_object_mut().unwrap().extend(m);
    }
    body
}

async fn entries(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{prefix}:cache:sim-fast:e:*"))
        .query_async(conn)
        .await
        .unwrap()
}

/// Waits (at most 10 s) until the route holds `n` entries in Redis.
async fn until_entries(conn: &mut redis::aio::MultiplexedConnection, prefix: &str, n: usize) {
    let at = Instant::now();
    loop {
        let now = entries(conn, prefix).await;
        if now.len() == n {
            return;
        }
        assert!(
            at.elapsed() < Duration::from_secs(10),
            "never {n} entries: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn gql(http: &reqwest::Client, base: &str, query: &str) -> Value {
    let v: Value = http
        .post(format!("{base}/graphql"))
        .bearer_auth(TOKEN)
        .json(&json!({"query": query}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v.get("errors").is_none(), "{v}");
    v["data"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeat_through_another_instance_is_answered_from_redis_within_its_workspace_and_ttl() {
    let url =
        std::env::var("LAPTIME_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("lt_test_cache_{}", std::process::id());
    let schema = laptime_store::testing::PgSchema::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = fleet::start(
        &config(dir.path(), "a", Some(schema.url()), &url, &prefix),
        TOKEN,
    );
    let b = fleet::start(
        &config(dir.path(), "b", Some(schema.url()), &url, &prefix),
        TOKEN,
    );
    let http = reqwest::Client::new();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();

    // A answers from the upstream and stores the answer in Redis; B answers the repeat from it.
    let body = ask("what is a fleet?", json!({}));
    let (hit, from_upstream) = chat(&http, &a.base, TOKEN, &body).await;
    assert!(!hit);
    until_entries(&mut conn, &prefix, 1).await;
    let (hit, from_cache) = chat(&http, &b.base, TOKEN, &body).await;
    assert!(hit, "B did not answer from A's entry");
    assert_eq!(from_cache, from_upstream);

    // Another workspace's identical request is not answered from it.
    let ws = gql(
        &http,
        &b.base,
        "mutation { createWorkspace(name: \"other\") { id } }",
    )
    .await;
    let made = gql(
        &http,
        &b.base,
        &format!(
            "mutation {{ createToken(workspaceId: {:?}, scope: PROXY) {{ token }} }}",
            ws["createWorkspace"]["id"].as_str().unwrap()
        ),
    )
    .await;
    let other = made["createToken"]["token"].as_str().unwrap();
    let (hit, _) = chat(&http, &a.base, other, &body).await;
    assert!(!hit, "another workspace was answered from this one's entry");
    until_entries(&mut conn, &prefix, 2).await;

    // An answer over max_entry_bytes is relayed, never written: the small request after it
    // is the only new entry.
    let big = ask("a long one", json!({"laptime_sim": {"text_tokens": 3000}}));
    let (hit, text) = chat(&http, &a.base, TOKEN, &big).await;
    assert!(!hit && text.len() > 4000, "{}", text.len());
    let small = ask("a short one", json!({}));
    chat(&http, &a.base, TOKEN, &small).await;
    until_entries(&mut conn, &prefix, 3).await;
    let (hit, _) = chat(&http, &b.base, TOKEN, &big).await;
    assert!(!hit, "the oversized answer was cached");
    assert!(chat(&http, &b.base, TOKEN, &small).await.0);

    // After the TTL the entries are gone from Redis, and the repeat goes upstream again.
    until_entries(&mut conn, &prefix, 0).await;
    let (hit, _) = chat(&http, &b.base, TOKEN, &body).await;
    assert!(!hit, "answered from an expired entry");

    let mut stale: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    stale.push(format!("{prefix}:unused"));
    let _: i64 = redis::cmd("DEL")
        .arg(stale)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn with_redis_down_a_shared_cache_route_still_answers_every_request() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1.
    let gw = fleet::start(
        &config(
            dir.path(),
            "down",
            None,
            "redis://127.0.0.1:1",
            "lt_test_down",
        ),
        TOKEN,
    );
    let http = reqwest::Client::new();
    let body = ask("is anyone there?", json!({}));
    for _ in 0..3 {
        let (hit, text) = chat(&http, &gw.base, TOKEN, &body).await;
        assert!(!hit && !text.is_empty());
    }
}
