//! `laptime bench` as a user runs it: the real binary against the scripted upstream
//! (`laptime_sim::spawn_local`, in this process) and against a real gateway (`laptime serve`),
//! over real loopback sockets.
//!
//! Timing checks take the **median** over a few requests, so that one request delayed by a
//! loaded machine (this is a shared 2-core box) cannot fail them; every single request must
//! still be causal (never earlier than scripted). The tests hold one lock so that their loads
//! never overlap.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_laptime");
/// Scripted marks are met within this many milliseconds (median over the requests).
const TOLERANCE_MS: f64 = 2.0;
/// How much later than the tolerance a median may come on a loaded machine. These tests run on
/// real time, beside the rest of the suite on two cores: a scheduler delay makes a mark later,
/// never earlier, so the lower bound stays exact and only the upper one gets this slack.
const LOADED_SLACK_MS: f64 = 8.0;

/// One load at a time: timing tests must not share the two cores with another test's load.
static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn sim() -> SocketAddr {
    let (addr, _task) = laptime_sim::spawn_local(laptime_sim::Sim::new())
        .await
        .unwrap();
    addr
}

/// A precise player of sim scripts: the exact bytes and instants `laptime_sim::schedule` gives
/// for the request's `laptime_sim` script, written by a plain thread that sleeps with the
/// kernel's high-resolution timer. The sim server itself waits on tokio's millisecond timer,
/// which rounds every deadline up (0–2 ms late by design), so this player is what shows the
/// bench's own accuracy; the real sim is checked too, with that granularity added.
fn precise_upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            std::thread::spawn(move || play(conn));
        }
    });
    addr
}

fn play(mut conn: std::net::TcpStream) {
    use std::io::{Read, Write};
    conn.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    loop {
        // One HTTP/1.1 request: head, then a Content-Length body.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 65536];
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let start = tokio::time::Instant::now();
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let path = head.split(' ').nth(1).unwrap_or_default().to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 65536];
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body_bytes = length;
        let body: Value = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
        buf.drain(..head_end + length);
        let dialect = laptime_core::Dialect::ALL
            .into_iter()
            .find(|d| d.path() == path)
            .unwrap();
        let script: laptime_sim::Script =
            serde_json::from_value(body["laptime_sim"].clone()).unwrap();
        let plan = laptime_sim::schedule(
            dialect,
            &script,
            "m",
            (
                body["stream"] == true,
                body.pointer("/stream_options/include_usage") == Some(&json!(true)),
            ),
            body_bytes,
        );
        let wait = |at: Duration| {
            let due = start + at;
            let now = tokio::time::Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        };
        wait(plan.head_at);
        let head = format!(
            "HTTP/1.1 {} X\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\n\r\n",
            plan.status, plan.content_type
        );
        if conn.write_all(head.as_bytes()).is_err() {
            return;
        }
        for step in &plan.steps {
            wait(step.at);
            let mut frame = format!("{:x}\r\n", step.bytes.len()).into_bytes();
            frame.extend_from_slice(&step.bytes);
            frame.extend_from_slice(b"\r\n");
            if conn.write_all(&frame).is_err() {
                return;
            }
        }
        assert_eq!(
            plan.finish,
            laptime_sim::Finish::Eof,
            "the player ends cleanly only"
        );
        if conn.write_all(b"0\r\n\r\n").is_err() {
            return;
        }
    }
}

/// Runs `laptime bench ARGS --out DIR --no-progress`; returns report.json and stdout.
async fn bench(dir: &Path, args: &[&str]) -> (Value, String) {
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    all.extend([
        "--out".into(),
        dir.display().to_string(),
        "--no-progress".into(),
    ]);
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .arg("bench")
            .args(&all)
            .env_remove("LAPTIME_BENCH_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "laptime bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for f in ["report.json", "report.md", "report.svg"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    (report, stdout)
}

fn measured(report: &Value) -> Vec<&Value> {
    report["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["warmup"] == false)
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn field(records: &[&Value], name: &str) -> Vec<f64> {
    records
        .iter()
        .map(|r| {
            r[name]
                .as_f64()
                .unwrap_or_else(|| panic!("{name} absent in {r}"))
        })
        .collect()
}

/// Every request at or after the scripted instant (causality), the median within tolerance.
fn assert_scripted(records: &[&Value], name: &str, scripted: f64, context: &str) {
    assert_scripted_within(records, name, scripted, TOLERANCE_MS, context);
}

fn assert_scripted_within(
    records: &[&Value],
    name: &str,
    scripted: f64,
    tolerance: f64,
    context: &str,
) {
    let v = field(records, name);
    for x in &v {
        assert!(
            *x >= scripted - 0.05,
            "{context}: {name} = {x} ms is earlier than the scripted {scripted} ms"
        );
    }
    let m = median(v.clone());
    assert!(
        m >= scripted - tolerance && m <= scripted + tolerance + LOADED_SLACK_MS,
        "{context}: median {name} = {m} ms, scripted {scripted} ms (values {v:?})"
    );
}

/// The chat example of the issue: headers 50, first event 80, first text 120, 10 tokens at
/// 100 tok/s: text deltas at 120, 130, …, 210, the terminal at 220.
fn chat_example() -> Value {
    json!({"laptime_sim": {"headers_ms": 50, "first_event_ms": 80,
        "first_text_ms": 120, "text_tokens": 10, "tokens_per_s": 100}})
}

const CHAT_MARKS: [(&str, f64); 6] = [
    ("headers_ms", 50.0),
    ("first_event_ms", 80.0),
    ("first_effective_ms", 120.0),
    ("first_visible_ms", 120.0),
    ("last_effective_ms", 210.0),
    ("end_ms", 220.0),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_stream_timings_come_out_as_scripted_in_every_dialect() {
    let _one = LOCK.lock().await;
    let player = precise_upstream();
    let tmp = tempfile::tempdir().unwrap();

    let base = format!("http://{player}/v1");
    let (report, stdout) = bench(
        tmp.path(),
        &[
            "--target",
            &base,
            "--dialect",
            "chat",
            "--model",
            "m",
            "--stream",
            "--requests",
            "5",
            "--warmup",
            "1",
            "--extra-body",
            &chat_example().to_string(),
        ],
    )
    .await;
    let rs = measured(&report);
    assert_eq!(rs.len(), 5);
    for r in &rs {
        assert_eq!(r["outcome"], "completed", "{r}");
        assert_eq!(r["status"], 200);
        assert_eq!(r["output_tokens"], 10);
        assert_eq!(r["output_tokens_source"], "usage");
        assert_eq!(r["text_delta_count"], 10);
    }
    for (name, at) in CHAT_MARKS {
        assert_scripted(&rs, name, at, "chat");
    }
    // ITL = (last effective − first effective) / (10 − 1) = 10 ms: marks within the
    // tolerance move it by at most 2 × 2 / 9 ms.
    let itl = median(field(&rs, "itl_ms"));
    assert!(
        (itl - 10.0).abs() <= 2.0 * (TOLERANCE_MS + LOADED_SLACK_MS) / 9.0,
        "itl {itl}"
    );
    let speed = median(field(&rs, "output_tps_per_user"));
    assert!((speed - 100.0).abs() <= 10.0, "per-user speed {speed}");
    let summary = &report["summary"]["targets"][0];
    assert_eq!(summary["succeeded"], 5);
    assert_eq!(summary["metrics"]["first_visible_ms"]["n"], 5);
    assert!(stdout.contains("first_visible_ms") && stdout.contains("p99"));

    // Responses and Messages, with reasoning first: first effective (100) is not first
    // visible (120); usage counts 10 text + 1 reasoning tokens, so
    // ITL = (210 − 100) / (11 − 1) = 11 ms.
    let script = json!({"laptime_sim": {"headers_ms": 50, "first_event_ms": 80,
        "first_effective": {"kind": "reasoning", "at_ms": 100}, "reasoning_deltas": 1,
        "first_text_ms": 120, "text_tokens": 10, "tokens_per_s": 100}});
    for (dialect, base) in [
        ("responses", format!("http://{player}/v1")),
        ("messages", format!("http://{player}")),
    ] {
        let dir = tmp.path().join(dialect);
        let (report, _) = bench(
            &dir,
            &[
                "--target",
                &base,
                "--dialect",
                dialect,
                "--model",
                "m",
                "--stream",
                "--requests",
                "5",
                "--warmup",
                "1",
                "--extra-body",
                &script.to_string(),
            ],
        )
        .await;
        let rs = measured(&report);
        assert_eq!(rs.len(), 5);
        for r in &rs {
            assert_eq!(r["outcome"], "completed", "{dialect}: {r}");
            assert_eq!(r["output_tokens"], 11, "{dialect}");
        }
        for (name, at) in [
            ("headers_ms", 50.0),
            ("first_event_ms", 80.0),
            ("first_effective_ms", 100.0),
            ("first_visible_ms", 120.0),
            ("last_effective_ms", 210.0),
            ("end_ms", 220.0),
        ] {
            assert_scripted(&rs, name, at, dialect);
        }
        let itl = median(field(&rs, "itl_ms"));
        assert!(
            (itl - 11.0).abs() <= 2.0 * (TOLERANCE_MS + LOADED_SLACK_MS) / 10.0,
            "{dialect}: itl {itl}"
        );
    }

    // The real sim server (in process): the same figures, plus its own timer granularity
    // (tokio rounds each deadline up to the next millisecond, and its park up to another).
    let addr = sim().await;
    let (report, _) = bench(
        &tmp.path().join("sim"),
        &[
            "--target",
            &format!("http://{addr}/v1"),
            "--dialect",
            "chat",
            "--model",
            "m",
            "--stream",
            "--requests",
            "5",
            "--warmup",
            "1",
            "--extra-body",
            &chat_example().to_string(),
        ],
    )
    .await;
    let rs = measured(&report);
    for (name, at) in CHAT_MARKS {
        assert_scripted_within(&rs, name, at, TOLERANCE_MS + 2.0, "sim server");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streamed_answers_have_no_stream_marks_and_missing_usage_is_counted_by_the_tokenizer() {
    let _one = LOCK.lock().await;
    let player = precise_upstream();
    let tmp = tempfile::tempdir().unwrap();

    // Non-streamed: head and body together at the scripted end (60 + 4 / 100 s = 100 ms).
    let script = json!({"laptime_sim": {"headers_ms": 10, "first_text_ms": 60,
        "text_tokens": 4, "tokens_per_s": 100}});
    let (report, _) = bench(
        &tmp.path().join("json"),
        &[
            "--target",
            &format!("http://{player}/v1"),
            "--dialect",
            "chat",
            "--model",
            "m",
            "--requests",
            "3",
            "--warmup",
            "1",
            "--extra-body",
            &script.to_string(),
        ],
    )
    .await;
    let rs = measured(&report);
    assert_scripted(&rs, "headers_ms", 100.0, "non-streamed");
    assert_scripted(&rs, "end_ms", 100.0, "non-streamed");
    for r in &rs {
        assert_eq!(r["streamed"], false);
        assert_eq!(r["output_tokens"], 4);
        assert_eq!(r["output_tokens_source"], "usage");
        // Absent is never zero.
        for mark in [
            "first_event_ms",
            "first_effective_ms",
            "first_visible_ms",
            "itl_ms",
        ] {
            assert!(r[mark].is_null(), "{mark} should be null: {r}");
        }
    }
    let m = &report["summary"]["targets"][0]["metrics"];
    assert_eq!(m["first_visible_ms"]["n"], 0);
    assert_eq!(m["first_visible_ms"]["absent"], 3);

    // A Chat stream without include_usage has no usage: the tokenizer counts, flagged.
    let addr = sim().await;
    let script = json!({"stream_options": {"include_usage": false},
        "laptime_sim": {"text_tokens": 6}});
    let (report, _) = bench(
        &tmp.path().join("nousage"),
        &[
            "--target",
            &format!("http://{addr}/v1"),
            "--dialect",
            "chat",
            "--model",
            "m",
            "--stream",
            "--requests",
            "2",
            "--warmup",
            "0",
            "--extra-body",
            &script.to_string(),
        ],
    )
    .await;
    for r in measured(&report) {
        assert_eq!(r["output_tokens_source"], "tokenizer", "{r}");
        assert!(r["output_tokens"].as_u64().unwrap() >= 1);
    }
    assert_eq!(
        report["summary"]["targets"][0]["throughput"]["output_tokens_estimated"],
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_counted_by_kind_and_never_dropped() {
    let _one = LOCK.lock().await;
    let addr = sim().await;
    let base = format!("http://{addr}/v1");
    let tmp = tempfile::tempdir().unwrap();

    for (script, kind, marks_reached) in [
        (
            json!({"end": "status", "status": 500}),
            "http_500",
            "headers_ms",
        ),
        (
            json!({"end": "close", "text_tokens": 3}),
            "closed_early",
            "first_visible_ms",
        ),
        (
            json!({"end": "error_event", "text_tokens": 3}),
            "stream_error",
            "first_visible_ms",
        ),
        (
            json!({"end": "reset", "text_tokens": 3}),
            "reset",
            "first_visible_ms",
        ),
    ] {
        let dir = tmp.path().join(kind);
        let body = json!({ "laptime_sim": script }).to_string();
        let (report, stdout) = bench(
            &dir,
            &[
                "--target",
                &base,
                "--dialect",
                "chat",
                "--model",
                "m",
                "--stream",
                "--requests",
                "4",
                "--warmup",
                "0",
                "--extra-body",
                &body,
            ],
        )
        .await;
        let rs = measured(&report);
        assert_eq!(rs.len(), 4, "{kind}: every request is listed");
        for r in &rs {
            assert_eq!(r["outcome"], "failed", "{kind}: {r}");
            assert_eq!(r["failure"], kind, "{r}");
            assert!(r["error"].is_string());
            assert!(r[marks_reached].is_number(), "{kind}: marks kept: {r}");
        }
        let t = &report["summary"]["targets"][0];
        assert_eq!(t["requests"], 4);
        assert_eq!(t["failed"], 4);
        assert_eq!(t["succeeded"], 0);
        assert_eq!(t["failures"][kind], 4, "{t}");
        // Failures are left out of the latency figures, and the report says so.
        assert_eq!(t["metrics"]["headers_ms"]["n"], 0);
        assert!(stdout.contains(&format!("{kind}=4")), "{stdout}");
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("failed requests (HTTP status >= 400"), "{md}");
        assert!(report["contract"]["exclusions"].as_array().unwrap().len() >= 3);
    }

    // Mixed in one run: B refuses connections, A answers. Both are counted.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (report, _) = bench(
        &tmp.path().join("mixed"),
        &[
            "--target",
            &base,
            "--compare",
            &format!("http://{closed}/v1"),
            "--dialect",
            "chat",
            "--model",
            "sim-fast",
            "--requests",
            "6",
            "--warmup",
            "1",
        ],
    )
    .await;
    let [a, b] = report["summary"]["targets"].as_array().unwrap().as_slice() else {
        panic!("two targets");
    };
    assert_eq!(
        (a["succeeded"].as_u64(), a["failed"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(
        (b["succeeded"].as_u64(), b["failed"].as_u64()),
        (Some(0), Some(3))
    );
    assert_eq!(b["failures"]["connect"], 3);
    assert_eq!(a["metrics"]["headers_ms"]["n"], 3);
    assert_eq!(report["summary"]["warmup"]["failed"], 1);
    assert_eq!(report["summary"]["compare"]["failure_rate_b"], 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_interleaves_a_b_a_b_and_reports_ratios() {
    let _one = LOCK.lock().await;
    let (a, b) = (sim().await, sim().await);
    let tmp = tempfile::tempdir().unwrap();
    let script = json!({"laptime_sim": {"headers_ms": 20, "first_event_ms": 25,
        "first_text_ms": 30, "text_tokens": 5, "tokens_per_s": 500}});
    let (report, stdout) = bench(
        tmp.path(),
        &[
            "--target",
            &format!("http://{a}/v1"),
            "--compare",
            &format!("http://{b}/v1"),
            "--dialect",
            "chat",
            "--model",
            "m",
            "--stream",
            "--requests",
            "8",
            "--warmup",
            "1",
            "--extra-body",
            &script.to_string(),
        ],
    )
    .await;
    let mut rs = measured(&report);
    assert_eq!(rs.len(), 8);
    rs.sort_by(|x, y| {
        x["start_ms"]
            .as_f64()
            .unwrap()
            .total_cmp(&y["start_ms"].as_f64().unwrap())
    });
    let order: Vec<&str> = rs.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(order, ["A", "B", "A", "B", "A", "B", "A", "B"]);
    for r in &rs {
        let even = r["index"].as_u64().unwrap() % 2 == 0;
        assert_eq!(r["target"], if even { "A" } else { "B" });
    }
    // Each upstream got its half, warm-up included.
    for addr in [a, b] {
        let stats: Value = reqwest::get(format!("http://{addr}/sim/stats"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(stats["requests"], 5, "{addr}: {stats}");
    }
    let cmp = &report["summary"]["compare"];
    assert!(cmp["basis"].as_str().unwrap().starts_with("B / A"));
    for metric in ["headers_ms", "first_visible_ms", "end_ms"] {
        let r = cmp["metrics"][metric]["p50"].as_f64().unwrap();
        // Same script on both: the ratio is 1 within a couple of milliseconds.
        assert!((0.85..=1.15).contains(&r), "{metric} ratio {r}");
    }
    assert!(cmp["output_tokens_per_s"].as_f64().is_some());
    assert!(stdout.contains("compare, B / A"));
    assert_eq!(report["contract"]["targets"].as_array().unwrap().len(), 2);
    assert!(report["contract"]["interleave"]
        .as_str()
        .unwrap()
        .contains("A B A B"));
    let svg = std::fs::read_to_string(tmp.path().join("report.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("CDF of time to first visible text"));
    assert!(svg.contains("milliseconds from t0") && svg.contains("Per-stage spread"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_round_trips_and_replays_the_same_workload() {
    let _one = LOCK.lock().await;
    let addr = sim().await;
    let base = format!("http://{addr}/v1");
    let tmp = tempfile::tempdir().unwrap();
    let extra = json!({"laptime_sim": {"text_tokens": 3}, "tools": [{"type": "function",
        "function": {"name": "f", "parameters": {"type": "object"}}}]});
    let (first, _) = bench(
        &tmp.path().join("one"),
        &[
            "--target",
            &base,
            "--dialect",
            "responses",
            "--model",
            "sim-fast",
            "--stream",
            "--rate",
            "40",
            "--poisson",
            "--max-inflight",
            "8",
            "--requests",
            "6",
            "--input-tokens",
            "64:8",
            "--max-output-tokens",
            "32",
            "--temperature",
            "0.5",
            "--top-p",
            "0.9",
            "--reasoning-effort",
            "low",
            "--warmup",
            "0",
            "--seed",
            "42",
            "--group",
            "g1",
            "--timeout-s",
            "5",
            "--connect-timeout-s",
            "2",
            "--tokenizer",
            "cl100k_base",
            "--extra-body",
            &extra.to_string(),
        ],
    )
    .await;
    let c = &first["contract"];
    assert_eq!(c["dialect"], "responses");
    assert_eq!(c["model"], "sim-fast");
    assert_eq!(c["stream"], true);
    assert_eq!(c["targets"][0]["url"], format!("{base}/responses"));
    assert_eq!(
        c["load"],
        json!({"mode": "open_loop", "rate_per_s": 40.0, "arrivals": "poisson", "max_inflight": 8})
    );
    assert_eq!(c["stop"], json!({"by": "requests", "requests": 6}));
    assert_eq!(c["input_tokens"]["mean"], 64);
    assert_eq!(c["input_tokens"]["sd"], 8.0);
    assert_eq!(c["input_tokens"]["tokenizer"], "cl100k_base");
    assert_eq!(c["output_tokens"]["max_output_tokens"], 32);
    assert_eq!(c["output_tokens"]["request_field"], "max_output_tokens");
    assert_eq!(c["sampling"], json!({"temperature": 0.5, "top_p": 0.9}));
    assert_eq!(c["reasoning_effort"], "low");
    assert_eq!(c["tools"], 1);
    assert_eq!(c["group"], "g1");
    assert_eq!(c["seed"], 42);
    assert_eq!(c["timeouts"], json!({"request_s": 5.0, "connect_s": 2.0}));
    assert_eq!(c["warmup_requests_per_target"], 0);
    assert!(c["retries"].as_str().unwrap().starts_with("none"));
    assert!(c["percentile_method"]
        .as_str()
        .unwrap()
        .contains("linear interpolation"));
    assert!(c["definitions"]["itl_ms"]
        .as_str()
        .unwrap()
        .contains("output_tokens - 1"));
    // Open loop: every request has its due time, and is never sent before it.
    for r in measured(&first) {
        assert!(r["scheduled_ms"].is_number());
        assert!(r["schedule_lag_ms"].as_f64().unwrap() >= 0.0, "{r}");
        assert_eq!(r["outcome"], "completed", "{r}");
    }

    // Replay from the written report: the same contract, and the same prompts (same seed).
    let (second, _) = bench(
        &tmp.path().join("two"),
        &[
            "--contract",
            tmp.path().join("one/report.json").to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(second["contract"], first["contract"]);
    let lengths = |r: &Value| -> Vec<u64> {
        measured(r)
            .iter()
            .map(|q| q["prompt_tokens"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(lengths(&first), lengths(&second));
    assert!(
        lengths(&first).iter().any(|&n| n != 64),
        "sd 8 varies the length"
    );

    // A flag given with --contract overrides it, and only that.
    let (third, _) = bench(
        &tmp.path().join("three"),
        &[
            "--contract",
            tmp.path().join("two/report.json").to_str().unwrap(),
            "--requests",
            "2",
            "--concurrency",
            "1",
        ],
    )
    .await;
    let mut expected = first["contract"].clone();
    expected["stop"] = json!({"by": "requests", "requests": 2});
    expected["load"] = json!({"mode": "closed_loop", "concurrency": 1});
    assert_eq!(third["contract"], expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duration_run_stops_issuing_on_time_and_counts_every_request() {
    let _one = LOCK.lock().await;
    let addr = sim().await;
    let tmp = tempfile::tempdir().unwrap();
    let script = json!({"laptime_sim": {"headers_ms": 5, "first_text_ms": 10, "text_tokens": 2}});
    let (report, _) = bench(
        tmp.path(),
        &[
            "--target",
            &format!("http://{addr}/v1"),
            "--dialect",
            "chat",
            "--model",
            "m",
            "--stream",
            "--duration",
            "0.5",
            "--concurrency",
            "2",
            "--warmup",
            "0",
            "--extra-body",
            &script.to_string(),
        ],
    )
    .await;
    let rs = measured(&report);
    // Two clients, ~10 ms per request, for 0.5 s.
    assert!(rs.len() >= 10, "{} requests", rs.len());
    for r in &rs {
        assert!(r["start_ms"].as_f64().unwrap() < 500.0 + 1.0, "{r}");
    }
    let t = &report["summary"]["targets"][0];
    assert_eq!(t["requests"].as_u64().unwrap() as usize, rs.len());
    assert_eq!(
        report["contract"]["stop"],
        json!({"by": "duration", "duration_s": 0.5})
    );
}

/// A `laptime serve` process on 127.0.0.1 with its embedded simulated upstream.
struct Gateway {
    child: Child,
    base: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gateway(data: &Path, token: &str) -> Gateway {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .env("LAPTIME_BOOTSTRAP_TOKEN", token)
        .env("RUST_LOG", "warn")
        // The scripted instants are checked within 2 ms: tokio's timer alone lets the sim's
        // frames leave up to 2 ms late (see laptime-sim's clock), which made these tests fail
        // on a busy machine for the sim's slack, not for what the bench measured.
        .env("LAPTIME_SIM_TIMER", "fine")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut gw = Gateway {
        child,
        base: String::new(),
    };
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("laptime serve did not start");
        if let Some(url) = line.strip_prefix("laptime listening on ") {
            gw.base = url.trim().to_string();
            return gw;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_gateway_its_timing_is_read_and_client_minus_gateway_is_not_negative() {
    let _one = LOCK.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let token = format!("lt_{}", "5a".repeat(32));
    let gw = gateway(&tmp.path().join("data"), &token);
    let script = json!({"laptime_sim": {"headers_ms": 20, "first_event_ms": 30,
        "first_text_ms": 40, "text_tokens": 5, "tokens_per_s": 250}});

    for (dialect, base, stream) in [
        ("chat", format!("{}/v1", gw.base), true),
        ("messages", gw.base.clone(), true),
        ("chat", format!("{}/v1", gw.base), false),
    ] {
        let dir = tmp.path().join(format!("{dialect}-{stream}"));
        let mut args = vec![
            "--target",
            &base,
            "--dialect",
            dialect,
            "--model",
            "sim-fast",
            "--token",
            &token,
            "--requests",
            "4",
            "--warmup",
            "1",
        ];
        let body = script.to_string();
        args.extend(["--extra-body", &body]);
        if stream {
            args.push("--stream");
        }
        let (report, stdout) = bench(&dir, &args).await;
        let rs = measured(&report);
        assert_eq!(rs.len(), 4);
        for r in &rs {
            assert_eq!(r["outcome"], "completed", "{dialect}: {r}");
            let g = &r["gateway"];
            assert!(g["request_id"].as_str().unwrap().starts_with("req_"), "{g}");
            let end = g["end_minus_upstream_ms"].as_f64().unwrap();
            assert!(
                end >= 0.0,
                "{dialect}: client end before gateway's upstream end: {g}"
            );
            assert!(g["upstream_ms"].as_f64().unwrap() > 0.0);
            if stream {
                assert_eq!(g["source"], "sse_comment", "{g}");
                assert!(g["ttft_ms"].as_f64().unwrap() > 0.0);
                let first = g["first_byte_minus_ttft_ms"].as_f64().unwrap();
                assert!(first >= 0.0, "{dialect}: {g}");
                assert!(g["hedge"].is_string());
            } else {
                assert_eq!(g["source"], "server_timing", "{g}");
            }
        }
        let t = &report["summary"]["targets"][0];
        assert_eq!(t["gateway_timed"], 4);
        assert_eq!(t["metrics"]["gateway_end_minus_upstream_ms"]["n"], 4);
        assert!(stdout.contains("gateway_end_minus_upstream_ms"));
        // The token is never written.
        let json = std::fs::read_to_string(dir.join("report.json")).unwrap();
        assert!(!json.contains(&token));
    }
    drop(gw);
}
