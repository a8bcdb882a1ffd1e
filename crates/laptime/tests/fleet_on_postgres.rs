//! Two gateway processes on one PostgreSQL database behave as one gateway: a request served by
//! A reads back through B (REST and GraphQL), a token made on A works on B, a token revoked on
//! B is refused by A (within the principal cache's second, proved under paused time in
//! laptime-proxy's auth tests), and `usage` answers the same from both. Both start on an
//! empty database at once: both come up, the migrations are applied once, one admin token is
//! made. A store outage under load loses nothing; a retention pass packs a finished day into
//! blocks, which read back. Real binaries, real sockets, the real PostgreSQL server (a schema of its
//! own).

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use laptime_store::testing::PgSchema;
use serde_json::{json, Value};

const TOKEN: &str = "lt_f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee7f1ee";

mod fleet;

fn start_with(config: &Path) -> fleet::Running {
    fleet::start(config, TOKEN)
}

fn config_file(dir: &Path, name: &str, url: &str) -> std::path::PathBuf {
    config_file_with(dir, name, url, "")
}

/// A gateway's config on the store at `url`, with `store` lines added to its `[store]`.
fn config_file_with(dir: &Path, name: &str, url: &str, store: &str) -> std::path::PathBuf {
    let data = dir.join(name);
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {data:?}\n\n\
             [store]\nurl = {url:?}\n{store}\n\
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
        config_file(dir.path(), "a", schema.url()),
        config_file(dir.path(), "b", schema.url()),
    );
    // Both on the empty database at once.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| start_with(&ca));
        let b = s.spawn(|| start_with(&cb));
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
    // Named after its host and port: which member of the fleet served it.
    let a_port = a.base.rsplit(':').next().unwrap();
    assert!(
        row["instance"]
            .as_str()
            .is_some_and(|i| i.ends_with(&format!(":{a_port}"))),
        "{row}"
    );
    let q = "query($r: ID!) { request(workspaceId: \"default\", requestId: $r) { requestId outcome outputTokens instance } }";
    let via_b = gql(&http, &b.base, TOKEN, q, json!({"r": id})).await;
    let via_a = gql(&http, &a.base, TOKEN, q, json!({"r": id})).await;
    assert_eq!(via_b["request"]["requestId"], id);
    assert_eq!(via_b["request"]["outcome"], "completed");
    assert_eq!(via_b["request"]["instance"], row["instance"]);
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
    // How soon is the auth epoch's (proved under paused time in laptime-proxy's auth tests);
    // here only that A does refuse it, with a bound against hanging. The answers A still gave
    // before it refused are counted: usage below must count them all.
    let mut answered = 3;
    loop {
        match chat(&http, &a.base, &token).await.status().as_u16() {
            401 => break,
            200 => answered += 1,
            other => panic!("A answered {other}"),
        }
        assert!(at.elapsed() < Duration::from_secs(10), "A never refused it");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

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
        // Every chat answered 200 is the default workspace's (a refused token names none).
        if ua["usage"]["rollup"]["requestCount"].as_u64() >= Some(answered) && ua == ub {
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

/// A TCP forwarder to the PostgreSQL server that can be cut: while down it closes every
/// connection it carries and every new one at once, as a restarting server or a network blip
/// does to the gateway.
struct Cuttable {
    port: u16,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    carried: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Cuttable {
    async fn start(target: String) -> Cuttable {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let carried = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (d, c) = (down.clone(), carried.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if d.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                c.lock().unwrap().push(task.abort_handle());
            }
        });
        Cuttable {
            port,
            down,
            carried,
        }
    }

    fn cut(&self) {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in self.carried.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    fn mend(&self) {
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `url` with its `host:port` replaced by 127.0.0.1:`port`.
fn through(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
    format!(
        "{scheme}://{}127.0.0.1:{port}{path}",
        user.unwrap_or_default()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_outage_of_five_seconds_under_200_requests_per_second_loses_nothing() {
    let schema = PgSchema::create().await.unwrap();
    let config: tokio_postgres::Config = schema.url().parse().unwrap();
    let target = match (config.get_hosts().first(), config.get_ports().first()) {
        (Some(tokio_postgres::config::Host::Tcp(h)), Some(p)) => format!("{h}:{p}"),
        other => panic!("a TCP server is needed: {other:?}"),
    };
    let cuttable = Cuttable::start(target).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_file(dir.path(), "a", &through(schema.url(), cuttable.port));
    let gw = start_with(&cfg);
    let http = reqwest::Client::new();
    assert_eq!(chat(&http, &gw.base, TOKEN).await.status(), 200);

    // 200 requests/s for 11 s; the store is cut from 3 s to 8 s.
    let mut sent = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let started = Instant::now();
    let mut cut = false;
    let mut mended = false;
    let mut probe = None;
    for _ in 0..2_200 {
        tick.tick().await;
        let elapsed = started.elapsed();
        if !cut && elapsed >= Duration::from_secs(3) {
            cuttable.cut();
            cut = true;
        }
        if probe.is_none() && elapsed >= Duration::from_secs(7) {
            let (http, url) = (http.clone(), format!("{}/readyz", gw.base));
            probe = Some(tokio::spawn(async move {
                let r = http.get(url).send().await.unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            }));
        }
        if cut && !mended && elapsed >= Duration::from_secs(8) {
            cuttable.mend();
            mended = true;
        }
        let (http, base) = (http.clone(), gw.base.clone());
        sent.spawn(async move {
            let r = chat(&http, &base, TOKEN).await;
            let status = r.status().as_u16();
            let id = r.headers()["x-laptime-request-id"]
                .to_str()
                .unwrap()
                .to_string();
            (id, status)
        });
    }
    assert!(mended);
    // The cut reached the gateway: it said so while it lasted.
    let (status, why) = probe.unwrap().await.unwrap();
    assert_eq!(status, 503, "{why}");
    assert!(
        why.starts_with("degraded") || why.starts_with("store"),
        "{why}"
    );
    let mut seen = Vec::new();
    while let Some(r) = sent.join_next().await {
        seen.push(r.unwrap());
    }
    assert!(
        seen.iter().all(|(_, status)| *status == 200),
        "known tokens keep working while the store is down: {:?}",
        seen.iter()
            .filter(|(_, s)| *s != 200)
            .take(5)
            .collect::<Vec<_>>()
    );

    // Every request the clients saw is stored, exactly once, once the store is back.
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let want: std::collections::HashSet<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(want.len(), seen.len());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = client
            .query(
                "SELECT request_id, count(*) FROM requests GROUP BY request_id",
                &[],
            )
            .await
            .unwrap();
        // The store holds each id as bytes (`stored_id::pg_key`).
        let id = |r: &tokio_postgres::Row| laptime_store::stored_id::pg_id_of(r.get(0)).unwrap();
        let twice: Vec<String> = rows
            .iter()
            .filter(|r| r.get::<_, i64>(1) > 1)
            .map(id)
            .collect();
        assert!(twice.is_empty(), "stored more than once: {twice:?}");
        let stored: std::collections::HashSet<String> = rows.iter().map(id).collect();
        let missing = want.iter().filter(|id| !stored.contains(**id)).count();
        if missing == 0 {
            // The one request before the load, and every one of it.
            assert_eq!(stored.len(), want.len() + 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} answered requests never stored",
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The usage rollups agree with the rows.
    let total: i64 = client
        .query_one("SELECT count(*) FROM requests", &[])
        .await
        .unwrap()
        .get(0);
    let store = laptime_store::Store::open_postgres(schema.url())
        .await
        .unwrap();
    let ws = store.workspace("default").await.unwrap();
    let usage = store
        .usage(
            &ws.id,
            (0, i64::MAX / 2),
            laptime_store::usage::UsageFilter::default(),
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(usage.total.requests, total as u64);
}

/// A gateway's retention pass packs a day that has ended into blocks (its partition rewritten,
/// marked done), leaves the day still being written alone, and the request log reads a packed
/// request back as it was.
#[tokio::test(flavor = "multi_thread")]
async fn the_retention_pass_packs_a_finished_day_into_blocks_that_read_back() {
    let schema = PgSchema::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_file_with(dir.path(), "a", schema.url(), "retention_interval_s = 1\n");
    let gw = start_with(&cfg);
    let http = reqwest::Client::new();
    let resp = chat(&http, &gw.base, TOKEN).await;
    assert_eq!(resp.status(), 200);
    let id = resp.headers()["x-laptime-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let served = stored(&http, format!("{}/api/requests/{id}", gw.base)).await;

    // The same request three days back (the time in its id with it), in that day's partition,
    // made in one transaction so that no pass finds the day empty first.
    let config: tokio_postgres::Config = schema.url().parse().unwrap();
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let day_us: i64 = 86_400_000_000;
    let now = time::OffsetDateTime::now_utc();
    let day = now.unix_timestamp() / 86_400 - 3;
    let date = (now - time::Duration::days(3)).date();
    let old = format!(
        "requests_p{:04}{:02}{:02}",
        date.year(),
        u8::from(date.month()),
        date.day()
    );
    let shift = 3 * day_us;
    client
        .batch_execute(&format!(
            "BEGIN;
             CREATE TABLE {old} PARTITION OF requests FOR VALUES FROM ({}) TO ({});
             CREATE TEMP TABLE moved AS SELECT * FROM requests;
             UPDATE moved SET created_at_us = created_at_us - {shift},
                 request_id = '\\x00'::bytea
                     || substring(int8send(('x' || encode(substring(request_id FROM 2 FOR 6),
                            'hex'))::bit(48)::int8 - {shift} / 1000) FROM 3 FOR 6)
                     || substring(request_id FROM 8);
             INSERT INTO requests SELECT * FROM moved;
             COMMIT;",
            day * day_us,
            (day + 1) * day_us
        ))
        .await
        .unwrap();
    let ms = i64::from_str_radix(&id[4..16], 16).unwrap() - shift / 1000;
    let moved = format!("req_{ms:012x}{}", &id[16..]);

    let comment = |table: String| {
        let client = &client;
        async move {
            client
                .query_one(
                    "SELECT obj_description(to_regclass($1), 'pg_class')",
                    &[&table],
                )
                .await
                .unwrap()
                .get::<_, Option<String>>(0)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while comment(old.clone()).await.as_deref() != Some("laptime: blocks, rewritten") {
        assert!(Instant::now() < deadline, "{old} was never packed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let count = |sql: String| {
        let client = &client;
        async move { client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(count(format!("SELECT count(*) FROM {old}")).await, 0);
    assert_eq!(
        count("SELECT sum(n)::int8 FROM request_blocks".into()).await,
        1
    );
    let packed = stored(&http, format!("{}/api/requests/{moved}", gw.base)).await;
    assert_eq!(packed["request_id"], moved.as_str(), "{packed}");
    for field in ["model", "outcome", "output_tokens", "instance", "status"] {
        assert_eq!(packed[field], served[field], "{field}: {packed} {served}");
    }
    let today = client
        .query_one(
            "SELECT string_agg(obj_description(c.oid, 'pg_class'), ',')
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'requests'::regclass AND c.relname <> $1",
            &[&old],
        )
        .await
        .unwrap()
        .get::<_, Option<String>>(0);
    assert_eq!(today, None, "only the finished day is packed");
    drop(gw);
}
