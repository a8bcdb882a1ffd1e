//! What the fleet tests share: a `laptime serve` process on a config of the test's, with the
//! bootstrap token `token`, and no store or Redis from the caller's environment.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_laptime");

/// A running gateway, killed when dropped.
pub(crate) struct Running {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `laptime serve --config config`; returns once it listens.
pub(crate) fn start(config: &Path, token: &str) -> Running {
    let mut child = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("LAPTIME_STORE_URL")
        .env_remove("LAPTIME_REDIS_URL")
        .env("LAPTIME_BOOTSTRAP_TOKEN", token)
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
    // Keep stdout drained so the child never blocks on a full pipe.
    std::thread::spawn(move || while rx.recv().is_ok() {});
    Running {
        child,
        base: line.rsplit(' ').next().unwrap().to_string(),
    }
}
