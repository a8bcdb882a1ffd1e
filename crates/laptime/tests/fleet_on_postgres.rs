//! Two gateway processes on one PostgreSQL database behave as one gateway: a request served by
//! A reads back through B (REST and GraphQL), a token made on A works on B, a token revoked on
//! B is refused by A within a second, and `usage` answers the same from both. Both start on an
//! empty database at once: both come up, the migrations are applied once, one admin token is
//! made. Real binaries, real sockets, the real PostgreSQL server (a schema of its own).

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tokio::time::Instant;

use laptime_store::testing::PgSchema;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_laptime");
const TOKEN: &str = "lt_f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee";

struct Running {
    child: Child,
    base: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `laptime serve` on `config`; returns once it listens.
fn start(config: &Path) -> Running {
    let mut child = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("LAPTIME_STORE_URL")
        .env("LAPTIME_BOOTSTRAP_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the gateway never listened"));
        if line.contains("laptime listening on") {
            break line;
        }
    };
    std::thread::spawn(move || while rx.recv().is_ok() {});
    Running {
        child,
        base: line.rsplit(' ').next().unwrap().to_string(),
    }
}

fn config(dir: &Path, name: &str, url: &str) -> std::path::PathBuf {
    let data = dir.join(name);
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {data:?}\n\n\
             [store]\nurl = {url:?}\n\n\
             [[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"sim-fast\"]\n"
        ),
    )
    .unwrap();
    path
}

async fn gql(http: &reqwest::Client, base: &str, token: &str, query: &str, vars: Value) -> Value {
    let resp = http
        .post(format!("{base}/graphql"))
        .bearer_auth(token)
        .json(&json!({"query": query, "variables": vars}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert!(v.get("errors").is_none(), "{v}");
    v["data"].clone()
}

async fn chat(http: &reqwest::Client, base: &str, token: &str) -> reqwest::Response {
    http.post(format!("{base}/v1/chat/completions"))
        .bearer_auth(token)
        .json(&json!({"model": "sim-fast", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
}

/// Polls `url` on a gateway until it answers 200 (the record is written by then).
async fn stored(http: &reqwest::Client, url: String) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
        if resp.status() == 200 {
            return resp.json().await.unwrap();
        }
        assert!(Instant::now() < deadline, "{url} never answered 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_gateways_on_one_database_are_one_gateway() {
    let schema = PgSchema::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cb) = (
        config(dir.path(), "a", schema.url()),
        config(dir.path(), "b", schema.url()),
    );
    // Both on the empty database at once.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| start(&ca));
        let b = s.spawn(|| start(&cb));
        (a.join().unwrap(), b.join().unwrap())
    });
    let http = reqwest::Client::new();

    // A request through A reads back through B, by REST and by GraphQL.
    let resp = chat(&http, &a.base, TOKEN).await;
    assert_eq!(resp.status(), 200);
    let id = resp.headers()["x-laptime-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let row = stored(&http, format!("{}/api/requests/{id}", b.base)).await;
    assert_eq!(row["request_id"], id, "{row}");
    assert_eq!(row["model"], "sim-fast", "{row}");
    let q = "query($r: ID!) { request(workspaceId: \"default\", requestId: $r) { requestId outcome outputTokens } }";
    let via_b = gql(&http, &b.base, TOKEN, q, json!({"r": id})).await;
    let via_a = gql(&http, &a.base, TOKEN, q, json!({"r": id})).await;
    assert_eq!(via_b["request"]["requestId"], id);
    assert_eq!(via_b["request"]["outcome"], "completed");
    assert_eq!(via_a, via_b);

    // A token made on A works on B at once.
    let made = gql(
        &http,
        &a.base,
        TOKEN,
        "mutation { createToken(workspaceId: \"default\", scope: PROXY) { token keyId workspaceId } }",
        json!({}),
    )
    .await;
    let token = made["createToken"]["token"].as_str().unwrap().to_string();
    assert_eq!(chat(&http, &b.base, &token).await.status(), 200);
    // A knows it too (and now remembers it), then B revokes it: A refuses it within a second.
    assert_eq!(chat(&http, &a.base, &token).await.status(), 200);
    let revoked = gql(
        &http,
        &b.base,
        TOKEN,
        "mutation($w: ID!, $k: ID!) { revokeToken(workspaceId: $w, keyId: $k) }",
        json!({"w": made["createToken"]["workspaceId"], "k": made["createToken"]["keyId"]}),
    )
    .await;
    assert_eq!(revoked["revokeToken"], true);
    let at = Instant::now();
    assert_eq!(
        chat(&http, &b.base, &token).await.status(),
        401,
        "B at once"
    );
    let refused_after = loop {
        if chat(&http, &a.base, &token).await.status() == 401 {
            break at.elapsed();
        }
        assert!(at.elapsed() < Duration::from_secs(5), "A never refused it");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    // The principal cache's 1 s, plus the request that finds out.
    assert!(
        refused_after < Duration::from_millis(1_500),
        "{refused_after:?}"
    );

    // Usage over one fixed window is the same answer from either instance.
    let now = time::OffsetDateTime::now_utc();
    let fmt = &time::format_description::well_known::Rfc3339;
    let window = json!({
        "from": (now - time::Duration::hours(1)).format(fmt).unwrap(),
        "to": (now + time::Duration::minutes(5)).format(fmt).unwrap(),
    });
    let uq = "query($win: WindowInput) { usage(workspaceId: \"default\", window: $win, groupBy: [OUTCOME]) {
        window { from to } rollup { requestCount errorCount latencyMs { p50 p95 count nullCount } }
        groups { key { dimension value } rollup { requestCount } } } }";
    // Every request the two served so far is written before comparing.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (ua, ub) = loop {
        let ua = gql(&http, &a.base, TOKEN, uq, json!({"win": window})).await;
        let ub = gql(&http, &b.base, TOKEN, uq, json!({"win": window})).await;
        // Four chats answered 200, the refused ones are recorded too.
        if ua["usage"]["rollup"]["requestCount"].as_u64() >= Some(6) && ua == ub {
            break (ua, ub);
        }
        assert!(Instant::now() < deadline, "usage never agreed: {ua}\n{ub}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ua, ub);

    // The migrations ran once, and one admin token was made for the two.
    drop((a, b));
    let store = laptime_store::Store::open_postgres(schema.url())
        .await
        .unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        store.known_schema_version()
    );
    let ws = store.workspace("default").await.unwrap();
    let admins = store
        .list_tokens(&ws.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.scope == laptime_store::auth::Scope::Admin)
        .count();
    assert_eq!(admins, 1);
}
