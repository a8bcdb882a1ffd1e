//! Every gateway of a fleet shows every live instance's requests in flight: slow streams held
//! open through A appear in B's `/api/instances`, GraphQL `instances` and `laptime channels`,
//! through the shared PostgreSQL store when there is no Redis, and through Redis when it is
//! configured; a killed instance drops out once its heartbeat is stale. Real binaries, real
//! sockets, the real PostgreSQL (a schema of its own) and Redis (a key prefix of its own).

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use laptime_store::testing::PgSchema;
use serde_json::{json, Value};
use tokio::time::Instant;

const TOKEN: &str = "lt_1257a1257a1257a1257a1257a1257a1257a1257a1257a1257a1257a1257a1257";
const BIN: &str = env!("CARGO_BIN_EXE_laptime");

mod fleet;

/// A gateway of its own data dir, on the shared store `store_url` (else its own SQLite), with
/// `[shared]` Redis when given.
fn config(dir: &Path, name: &str, store_url: Option<&str>, redis: Option<(&str, &str)>) -> PathBuf {
    let store = store_url.map_or(String::new(), |url| format!("[store]\nurl = {url:?}\n\n"));
    let shared = redis.map_or(String::new(), |(url, prefix)| {
        format!("[shared]\nredis_url = {url:?}\nkey_prefix = {prefix:?}\n\n")
    });
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\n\n{store}{shared}\
             [[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"sim-fast\"]\n\n\
             [[channels]]\nname = \"idle\"\nprovider = \"sim\"\nmodels = [\"sim-idle\"]\n",
            dir.join(name)
        ),
    )
    .unwrap();
    path
}

/// The port a gateway listens on: its instance name ends with it.
fn port(base: &str) -> String {
    base.rsplit(':').next().unwrap().to_string()
}

async fn instances(http: &reqwest::Client, base: &str) -> Vec<Value> {
    let v: Value = http
        .get(format!("{base}/api/instances"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["instances"].as_array().cloned().unwrap_or_default()
}

fn of<'a>(list: &'a [Value], base: &str) -> Option<&'a Value> {
    let suffix = format!(":{}", port(base));
    list.iter()
        .find(|i| i["instance"].as_str().is_some_and(|n| n.ends_with(&suffix)))
}

/// Polls B's list until `want` holds of it (at most 15 s).
async fn until(
    http: &reqwest::Client,
    base: &str,
    what: &str,
    want: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let at = Instant::now();
    loop {
        let list = instances(http, base).await;
        if want(&list) {
            return list;
        }
        assert!(
            at.elapsed() < Duration::from_secs(15),
            "{what}: {}",
            Value::from(list)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens `n` streams through `base` that send their first event and then nothing for a minute.
async fn hold_streams(http: &reqwest::Client, base: &str, n: usize) -> Vec<reqwest::Response> {
    let mut held = Vec::new();
    for _ in 0..n {
        let mut r = http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(TOKEN)
            .json(&json!({"model": "sim-fast", "stream": true,
                "messages": [{"role": "user", "content": "hi"}],
                "laptime_sim": {"headers_ms": 10, "first_event_ms": 20, "first_text_ms": 60_000}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.chunk().await.unwrap().is_some());
        held.push(r);
    }
    held
}

/// The whole story on one pair of gateways: A's held streams seen through B (REST, GraphQL,
/// the CLI), then A killed and gone from B's list.
async fn a_seen_from_b(a: fleet::Running, b: &fleet::Running) {
    let http = reqwest::Client::new();
    // Both list each other once their first heartbeats are written.
    until(&http, &b.base, "B never listed A", |l| {
        of(l, &a.base).is_some() && of(l, &b.base).is_some()
    })
    .await;

    let held = hold_streams(&http, &a.base, 3).await;
    let list = until(&http, &b.base, "B never saw A's 3 streams", |l| {
        of(l, &a.base).is_some_and(|i| i["in_flight"] == 3)
    })
    .await;
    let seen = of(&list, &a.base).unwrap();
    assert_eq!(
        seen["channels"],
        json!([{"name": "sim", "in_flight": 3}, {"name": "idle", "in_flight": 0}]),
        "{seen}"
    );
    assert_eq!(
        of(&list, &b.base).unwrap()["in_flight"],
        0,
        "B runs nothing"
    );

    let v: Value = http
        .post(format!("{}/graphql", b.base))
        .bearer_auth(TOKEN)
        .json(&json!({"query": "{ instances { instance inFlight updatedAt ageMs channels { name inFlight } } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let gql = v["data"]["instances"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"));
    let a_row = of(gql, &a.base).unwrap_or_else(|| panic!("{v}"));
    assert_eq!(a_row["inFlight"], 3, "{v}");
    assert_eq!(a_row["channels"][0], json!({"name": "sim", "inFlight": 3}));
    assert!(a_row["ageMs"].as_f64().unwrap() < 6_000.0, "{v}");

    // `laptime channels` against B prints A's line in its instances section.
    let (url, a_port) = (b.base.clone(), port(&a.base));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(BIN)
            .args(["channels", "--url", &url, "--token", TOKEN])
            .env_remove("LAPTIME_TOKEN")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|n| n.ends_with(&format!(":{a_port}")))
        })
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[1], "3", "{line}");
    assert!(line.contains("sim=3") && line.contains("idle=0"), "{line}");

    // Killed (no clean shutdown): it drops out of B's list once its heartbeat is stale.
    let a_base = a.base.clone();
    drop(a);
    drop(held);
    until(&http, &b.base, "A never went from B's list", |l| {
        of(l, &a_base).is_none() && of(l, &b.base).is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_redis_the_shared_store_carries_each_instances_in_flight_counts() {
    let schema = PgSchema::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = fleet::start(&config(dir.path(), "a", Some(schema.url()), None), TOKEN);
    let b = fleet::start(&config(dir.path(), "b", Some(schema.url()), None), TOKEN);
    a_seen_from_b(a, &b).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_redis_each_instances_in_flight_counts_are_shared_through_it() {
    let url =
        std::env::var("LAPTIME_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("lt_test_instances_{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    // Each on its own SQLite file: only Redis can tell them about each other.
    let a = fleet::start(&config(dir.path(), "a", None, Some((&url, &prefix))), TOKEN);
    let b = fleet::start(&config(dir.path(), "b", None, Some((&url, &prefix))), TOKEN);
    a_seen_from_b(a, &b).await;
}
