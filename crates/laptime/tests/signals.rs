//! Signals to the real binary: a second SIGTERM during the graceful drain forces the exit, with
//! the records already queued flushed and a non-zero status. Real process, real sockets, real
//! SQLite files.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_laptime");
const TOKEN: &str = "lt_5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f5e1f";

/// The lines a child writes to one of its pipes, as they come.
fn lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits for a line containing `needle`; returns it. Every line seen goes into `seen`.
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

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Polls for the exit for at most `within`; kills the process and fails when it is still there.
fn exit_within(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    for _ in 0..within.as_millis() / 50 {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("still running {within:?} after the second SIGTERM");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigterm_during_the_drain_forces_the_exit_after_flushing_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    // A drain far longer than the test: only a forced exit ends it in time.
    let config = dir.path().join("laptime.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\ndrain_s = 600\n\n\
             [[channels]]\nname = \"sim\"\nprovider = \"sim\"\nmodels = [\"sim-fast\"]\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
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
    let (mut out_seen, mut err_seen) = (Vec::new(), Vec::new());
    let base = wait_for(&stdout, "laptime listening on", &mut out_seen)
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let http = reqwest::Client::new();
    let chat = |script: serde_json::Value| {
        http.post(format!("{base}/v1/chat/completions"))
            .bearer_auth(TOKEN)
            .json(&json!({"model": "sim-fast", "stream": true,
                "messages": [{"role": "user", "content": "hi"}], "laptime_sim": script}))
            .send()
    };
    // One request finishes before the signals: its record is queued (or written) by then.
    let done = chat(json!({})).await.unwrap();
    assert_eq!(done.status(), 200);
    done.bytes().await.unwrap();
    // A stream of about 100 s is in flight.
    let mut long = chat(json!({"first_text_ms": 10, "text_tokens": 200, "tokens_per_s": 2.0}))
        .await
        .unwrap();
    assert_eq!(long.status(), 200);
    long.chunk().await.unwrap().unwrap();

    sigterm(&child);
    wait_for(&stderr, "shutting down", &mut err_seen);
    // The drain is waiting on the long stream; the operator asks again.
    sigterm(&child);
    let status = tokio::task::spawn_blocking(move || {
        let s = exit_within(&mut child, Duration::from_secs(20));
        (s, child)
    })
    .await
    .unwrap()
    .0;
    assert!(
        !status.success(),
        "a forced exit must not look like a clean one: {status:?}"
    );
    assert_eq!(status.code(), Some(1));
    err_seen.extend(stderr.iter());
    let log = err_seen.join("\n");
    assert!(log.contains("forcing the exit"), "{log}");
    assert!(log.contains("forced exit"), "{log}");
    // The long stream was cut, not finished.
    let mut rest = Vec::new();
    while let Ok(Some(c)) = long.chunk().await {
        rest.extend_from_slice(&c);
    }
    assert!(!String::from_utf8_lossy(&rest).contains("[DONE]"));
    // The finished request's record was flushed before the exit.
    let store = laptime_store::Store::open_dir(&dir.path().join("data")).unwrap();
    let rows: i64 = store
        .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?))
        .unwrap();
    assert!(rows >= 1, "{log}");
}
