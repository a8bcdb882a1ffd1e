//! A gateway killed with SIGKILL leaves its requests visible: the in-flight list shows a slow
//! stream while it runs, the journal beside the store holds it, and the next start on the same
//! data dir records it `gateway_crashed` with the marks it had reached (no end marks), while
//! every request the client got an answer for is recorded exactly once, those whose records
//! were not committed yet when the process died included. Real binary, real sockets, real
//! SQLite files.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_laptime");
const TOKEN: &str = "lt_c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5c0a5";

fn lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

fn wait_for(rx: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) -> String {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no line with {needle:?}; saw {seen:?}"));
        seen.push(line.clone());
        if line.contains(needle) {
            return line;
        }
    }
}

struct Running {
    child: Child,
    base: String,
    stderr: mpsc::Receiver<String>,
    err_seen: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &Path) -> Running {
    let mut child = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env("LAPTIME_BOOTSTRAP_TOKEN", TOKEN)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = lines(child.stdout.take().unwrap());
    let stderr = lines(child.stderr.take().unwrap());
    let mut out_seen = Vec::new();
    let base = wait_for(&stdout, "laptime listening on", &mut out_seen)
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    // Keep stdout drained so the child never blocks on a full pipe.
    std::thread::spawn(move || while stdout.recv().is_ok() {});
    Running {
        child,
        base,
        stderr,
        err_seen: Vec::new(),
    }
}

async fn get(http: &reqwest::Client, url: String) -> Value {
    let resp = http.get(url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// The journal's entries (state, record), or none yet.
fn journal(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_gateway_records_its_requests_in_flight_as_crashed_on_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("laptime.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {data:?}\ninflight_snapshot_ms = 20\n\n\
             [[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"sim-fast\"]\n"
        ),
    )
    .unwrap();
    let journal_path = data.join("inflight.journal");
    let mut gw = start(&config);
    let http = reqwest::Client::new();
    let chat = |base: &str, stream: bool, script: Value| {
        http.post(format!("{base}/v1/chat/completions"))
            .bearer_auth(TOKEN)
            .json(&json!({"model": "sim-fast", "stream": stream,
                "messages": [{"role": "user", "content": "hi"}], "laptime_sim": script}))
            .send()
    };
    let id_of = |r: &reqwest::Response| {
        r.headers()["x-laptime-request-id"]
            .to_str()
            .unwrap()
            .to_string()
    };

    // Fast requests, each answered in full.
    let mut answered = Vec::new();
    for stream in [false, true, false] {
        let r = chat(&gw.base, stream, json!({})).await.unwrap();
        assert_eq!(r.status(), 200);
        let id = id_of(&r);
        assert!(!r.text().await.unwrap().is_empty());
        answered.push(id);
    }
    // Written: the request log lists them (bounded wait).
    for n in 0..250 {
        let log = get(&http, format!("{}/api/requests", gw.base)).await;
        let listed = log["requests"].as_array().unwrap().len();
        if listed == answered.len() {
            break;
        }
        assert!(n < 249, "{log}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another connection holds the store's write lock (as another process could): the next
    // answered requests' records wait in the recorder, uncommitted, when the gateway dies.
    let blocker = laptime_store::Store::open_dir(&data)
        .unwrap()
        .connect()
        .unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut uncommitted = Vec::new();
    for stream in [true, false, true] {
        let r = chat(&gw.base, stream, json!({})).await.unwrap();
        assert_eq!(r.status(), 200);
        let id = id_of(&r);
        assert!(!r.text().await.unwrap().is_empty());
        uncommitted.push(id);
    }
    // A slow stream: head at 50 ms, its first event at 100 ms, then nothing for a minute.
    let mut slow = chat(
        &gw.base,
        true,
        json!({"headers_ms": 50, "first_event_ms": 100, "first_text_ms": 60_000}),
    )
    .await
    .unwrap();
    assert_eq!(slow.status(), 200);
    let slow_id = id_of(&slow);
    let first = slow.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("data:"));

    // The in-flight list shows it, with the marks it reached and none it did not.
    let listed = get(&http, format!("{}/api/requests/inflight", gw.base)).await;
    let rows = listed["requests"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|r| r["request_id"] == slow_id.as_str())
        .unwrap_or_else(|| panic!("{slow_id} not listed in flight: {listed}"));
    assert_eq!(row["state"], "running");
    assert_eq!(row["status"], 200);
    assert_eq!(row["outcome"], Value::Null);
    assert_eq!(row["stream"], true);
    assert_eq!(row["channel"], "sim");
    assert!(
        row["timing"]["upstream_headers_ms"].as_f64().is_some(),
        "{row}"
    );
    assert!(
        row["timing"]["first_sse_event_ms"].as_f64().unwrap() >= 100.0,
        "{row}"
    );
    assert_eq!(row["timing"]["first_text_delta_ms"], Value::Null, "{row}");
    assert_eq!(row["timing"]["total_handler_ms"], Value::Null, "{row}");
    // Oldest first, at most `limit`.
    let first = get(&http, format!("{}/api/requests/inflight?limit=1", gw.base)).await;
    assert_eq!(first["requests"].as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first["requests"][0]["request_id"], rows[0]["request_id"]);
    assert!(rows
        .windows(2)
        .all(|w| w[0]["created_at"].as_str() <= w[1]["created_at"].as_str()));
    let refused = http
        .get(format!("{}/api/requests/inflight?limit=0", gw.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let gql: Value = http
        .post(format!("{}/graphql", gw.base))
        .bearer_auth(TOKEN)
        .json(&json!({"query": "{ inflightRequests(workspaceId: \"default\") { requestId state status timing { firstSseEventMs totalHandlerMs } } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let g = gql["data"]["inflightRequests"]
        .as_array()
        .unwrap_or_else(|| panic!("{gql}"))
        .iter()
        .find(|r| r["requestId"] == slow_id.as_str())
        .unwrap_or_else(|| panic!("{gql}"))
        .clone();
    assert_eq!(g["state"], "running");
    assert!(g["timing"]["firstSseEventMs"].as_f64().is_some());
    assert_eq!(g["timing"]["totalHandlerMs"], Value::Null);
    // The answered requests whose records are not committed are listed too, finished.
    for id in &uncommitted {
        let row = rows
            .iter()
            .find(|r| r["request_id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} not listed: {listed}"));
        assert_eq!(row["state"], "finished", "{row}");
        assert_eq!(row["outcome"], "completed", "{row}");
        assert!(
            row["timing"]["total_handler_ms"].as_f64().is_some(),
            "{row}"
        );
    }

    // The registry's size is a gauge: the slow stream and the three uncommitted records.
    let metrics = http
        .get(format!("{}/metrics", gw.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let entries: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("laptime_inflight_entries "))
        .unwrap_or_else(|| panic!("{metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(entries, 4.0, "{metrics}");
    assert!(
        metrics.contains("laptime_inflight_untracked_total 0"),
        "{metrics}"
    );

    // The journal holds the slow stream with its first event (bounded wait: snapshots every
    // 20 ms, only after a change).
    let mut in_journal = false;
    for _ in 0..250 {
        let entries = journal(&journal_path);
        let has = |id: &str, state: &str| {
            entries
                .iter()
                .any(|e| e["record"]["request_id"] == id && e["state"] == state)
        };
        in_journal = entries.iter().any(|e| {
            e["record"]["request_id"] == slow_id.as_str()
                && e["state"] == "running"
                && !e["record"]["marks"]["first_event"].is_null()
        }) && uncommitted.iter().all(|id| has(id, "finished"));
        if in_journal {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(in_journal, "{:?}", journal(&journal_path));

    // SIGKILL: no drain, no flush, no clean shutdown.
    gw.child.kill().unwrap();
    let status = gw.child.wait().unwrap();
    assert!(!status.success());
    assert!(journal_path.exists(), "a killed gateway leaves its journal");
    drop(gw);
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    let mut rest = Vec::new();
    while let Ok(Some(c)) = slow.chunk().await {
        rest.extend_from_slice(&c);
    }
    assert!(!String::from_utf8_lossy(&rest).contains("[DONE]"));

    // The next start on the same data dir records what was in flight, then serves.
    let mut gw = start(&config);
    let line = wait_for(&gw.stderr, "in-flight journal", &mut gw.err_seen);
    assert!(
        line.contains("recovered 4 requests")
            && line.contains("1 recorded gateway_crashed, 3 finished records written"),
        "{line}"
    );
    assert!(!journal_path.exists() || journal(&journal_path).is_empty());

    let row = get(&http, format!("{}/api/requests/{slow_id}", gw.base)).await;
    assert_eq!(row["outcome"], "gateway_crashed", "{row}");
    assert_eq!(row["fault"], "gateway", "{row}");
    assert_eq!(row["classification"], "failed", "{row}");
    assert_eq!(row["status"], 200, "the client had its head: {row}");
    let timing = &row["other"]["timing"];
    assert!(timing["upstream_headers_ms"].as_f64().is_some(), "{row}");
    assert!(
        timing["first_sse_event_ms"].as_f64().unwrap() >= 100.0,
        "{row}"
    );
    for end in [
        "first_response_ms",
        "first_text_delta_ms",
        "upstream_done_ms",
        "total_handler_ms",
    ] {
        assert_eq!(timing[end], Value::Null, "{end} invented: {row}");
    }
    assert_eq!(row["latency_ms"], Value::Null, "{row}");
    assert!(row["ttft_ms"].as_f64().is_some(), "{row}");
    let attempt = &row["attempts"][0];
    assert_eq!(attempt["won"], true, "{row}");
    assert!(attempt["first_byte_ms"].as_f64().is_some(), "{row}");
    assert_eq!(attempt["end_ms"], Value::Null, "{row}");

    let log = get(&http, format!("{}/api/requests?limit=500", gw.base)).await;
    let ids: Vec<&str> = log["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    for id in answered.iter().chain(&uncommitted).chain([&slow_id]) {
        assert_eq!(
            ids.iter().filter(|i| **i == id.as_str()).count(),
            1,
            "{id} recorded once: {ids:?}"
        );
    }
    for id in answered.iter().chain(&uncommitted) {
        let r = get(&http, format!("{}/api/requests/{id}", gw.base)).await;
        assert_eq!(r["outcome"], "completed", "{r}");
    }
    // The usage rollup counts it as a failure, with its latency left out (null, never 0).
    let usage = get(&http, format!("{}/api/usage?last=1h", gw.base)).await;
    let rollup = &usage["rollup"];
    assert_eq!(rollup["request_count"], 7, "{usage}");
    assert_eq!(rollup["error_count"], 1, "{usage}");
    assert_eq!(rollup["latency_ms"]["count"], 6, "{usage}");
    assert_eq!(rollup["latency_ms"]["null_count"], 1, "{usage}");
    // Nothing of the old process is in flight in the new one.
    let listed = get(&http, format!("{}/api/requests/inflight", gw.base)).await;
    assert!(
        listed["requests"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["request_id"] != slow_id.as_str()),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clean_shutdown_leaves_no_journal_and_the_next_start_recovers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("laptime.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {data:?}\ninflight_snapshot_ms = 20\n\n\
             [[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"sim-fast\"]\n"
        ),
    )
    .unwrap();
    let mut gw = start(&config);
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/chat/completions", gw.base))
        .bearer_auth(TOKEN)
        .json(&json!({"model": "sim-fast", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    // Let a snapshot happen, so there is a journal to remove.
    for _ in 0..100 {
        if data.join("inflight.journal").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(data.join("inflight.journal").exists());
    let ok = Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = gw.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!data.join("inflight.journal").exists());
    gw.err_seen.extend(gw.stderr.try_iter());
    drop(gw);
    let mut gw = start(&config);
    let log = get(&http, format!("{}/api/requests", gw.base)).await;
    assert_eq!(log["requests"].as_array().unwrap().len(), 1);
    gw.err_seen.extend(gw.stderr.try_iter());
    assert!(
        !gw.err_seen.iter().any(|l| l.contains("recovered")),
        "{:?}",
        gw.err_seen
    );
}
