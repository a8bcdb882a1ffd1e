//! The real `laptime serve` as a child process on 127.0.0.1, for the tests of its operator
//! behaviour (reload, logs, signals): its config file in a temporary directory, its log lines as
//! they come, signals, and the calls a test makes to it.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_laptime");
/// The prompt of every call: a test can look for it where it must never be (the log).
pub(crate) const PROMPT: &str = "the prompt 5d1e0c7a, never in a log";
pub(crate) const TOKEN: &str =
    "lt_4e104de04e104de04e104de04e104de04e104de04e104de04e104de04e104de0";

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

/// The config file of a gateway whose data dir is under `dir`, listening on an ephemeral port
/// of 127.0.0.1 unless `server` names its `listen`.
fn config_text(dir: &std::path::Path, server: &str, rest: &str) -> String {
    let listen = if server.contains("listen") {
        ""
    } else {
        "listen = \"127.0.0.1:0\"\n"
    };
    format!(
        "[server]\n{listen}data_dir = {:?}\n{server}\n{rest}",
        dir.join("data")
    )
}

/// A running `laptime serve`.
pub(crate) struct Gateway {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    pub(crate) config: PathBuf,
    stderr: mpsc::Receiver<String>,
    /// Every stderr line read so far.
    pub(crate) log: Vec<String>,
    dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    /// Starts `laptime serve --config FILE ARGS…`, the file being `[server]` (loopback, an
    /// ephemeral port, a data dir of its own, then `server`'s lines) and `rest`.
    pub(crate) fn start(server: &str, rest: &str, args: &[&str]) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("laptime.toml");
        std::fs::write(&config, config_text(dir.path(), server, rest)).unwrap();
        let mut child = Command::new(BIN)
            .args(["serve", "--config", config.to_str().unwrap()])
            .args(args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("NO_COLOR")
            .env("LAPTIME_BOOTSTRAP_TOKEN", TOKEN)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        let listening = loop {
            let line = stdout
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("the gateway did not say where it listens"));
            if line.contains("laptime listening on") {
                break line;
            }
        };
        Gateway {
            child,
            base: listening.rsplit(' ').next().unwrap().to_string(),
            config,
            stderr,
            log: Vec::new(),
            dir,
        }
    }

    /// Replaces the config file with `[server]` and `rest`, as [`Gateway::start`] wrote it.
    pub(crate) fn rewrite(&self, server: &str, rest: &str) {
        std::fs::write(&self.config, config_text(self.dir.path(), server, rest)).unwrap();
    }

    /// Waits for a log line containing `needle` (30 s at most); returns it.
    pub(crate) fn wait_log(&mut self, needle: &str) -> String {
        if let Some(line) = self.log.iter().find(|l| l.contains(needle)) {
            return line.clone();
        }
        loop {
            let line = self
                .stderr
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no log line with {needle:?}; saw {:#?}", self.log));
            self.log.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Every log line written so far.
    pub(crate) fn drain_log(&mut self) -> &[String] {
        self.log.extend(self.stderr.try_iter());
        &self.log
    }

    /// Sends `signal` (`HUP`, `TERM`, `INT`) to the gateway.
    pub(crate) fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// The exit status, polled for at most `within`; fails (killing it) when it is still there.
    pub(crate) fn exit_within(&mut self, within: Duration) -> std::process::ExitStatus {
        for _ in 0..within.as_millis() / 50 {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("still running {within:?} later");
    }

    /// A streamed Chat call for `model` with the sim's script.
    pub(crate) async fn chat(&self, model: &str, script: Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", self.base))
            .bearer_auth(TOKEN)
            .json(&json!({"model": model, "stream": true,
                "messages": [{"role": "user", "content": PROMPT}], "laptime_sim": script}))
            .send()
            .await
            .unwrap()
    }

    /// The stored record of `response`'s request, waited for (10 s at most).
    pub(crate) async fn record(&self, response: &reqwest::Response) -> Value {
        let id = response.headers()["x-laptime-request-id"]
            .to_str()
            .unwrap()
            .to_string();
        let http = reqwest::Client::new();
        for _ in 0..200 {
            let got = http
                .get(format!("{}/api/requests/{id}", self.base))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            if got.status() == 200 {
                return got.json().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no record of {id}");
    }

    /// The value of the `/metrics` line that starts with `series`.
    pub(crate) async fn metric(&self, series: &str) -> Option<f64> {
        let text = reqwest::Client::new()
            .get(format!("{}/metrics", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

/// `laptime ARGS…` to completion: its status, stdout and stderr.
pub(crate) fn laptime(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("LAPTIME_TOKEN")
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A sim channel (the embedded sim) named `name` serving `models`.
pub(crate) fn sim_channel(name: &str, models: &str) -> String {
    format!("[[channels]]\nname = \"{name}\"\nprovider = \"sim\"\nmodels = [{models}]\n")
}
