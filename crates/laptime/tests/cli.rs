//! The binary as an operator runs it: real processes, real sockets, real SQLite files.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_laptime");

/// A running `laptime` process whose stdout lines arrive on a channel and whose stderr is kept.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout_seen: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Proc {
    fn spawn(args: &[&str], envs: &[(&str, &str)]) -> Proc {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        cmd.env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("LAPTIME_BOOTSTRAP_TOKEN");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Proc {
            child,
            lines: rx,
            stdout_seen: Vec::new(),
            stderr,
        }
    }

    /// Waits for a stdout line starting with `prefix`; returns the rest of it.
    fn wait_line(&mut self, prefix: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no line {prefix:?}; saw {:?}", self.stdout_seen));
            self.stdout_seen.push(line.clone());
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_string();
            }
        }
    }

    fn term(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits for exit; returns (exit code, all stdout, all stderr).
    fn wait(mut self) -> (Option<i32>, String, String) {
        let mut status = None;
        for _ in 0..300 {
            if let Some(s) = self.child.try_wait().unwrap() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let status = match status {
            Some(s) => s,
            None => {
                let _ = self.child.kill();
                panic!("process did not exit within 15 s");
            }
        };
        self.stdout_seen.extend(self.lines.try_iter());
        let stderr = self.stderr.join().unwrap();
        (status.code(), self.stdout_seen.join("\n"), stderr)
    }
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn count_rows(dir: &Path) -> i64 {
    let store = laptime_store::Store::open_dir(dir).unwrap();
    store
        .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?))
        .unwrap()
}

fn chat_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test(flavor = "multi_thread")]
async fn first_start_prints_the_admin_token_once_and_sigterm_drains_streams_and_flushes_records() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let mut gw = Proc::spawn(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", data],
        &[],
    );
    gw.wait_line("First start: admin token");
    let token = gw.wait_line("");
    assert!(token.starts_with("lt_") && token.len() == 67, "{token}");
    let base = gw.wait_line("laptime listening on");
    let http = reqwest::Client::new();
    for stream in [false, true] {
        let r = http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(&token)
            .json(&chat_body("sim-fast", stream))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    // `laptime channels` reads the running gateway's live channel state.
    let (b, t) = (base.clone(), token.clone());
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || run(&["channels", "--url", &b, "--token", &t]))
            .await
            .unwrap();
    assert!(ok, "{err}");
    let sim_row = out
        .lines()
        .find(|l| l.starts_with("sim "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(sim_row.contains("closed"), "{sim_row}");
    let (b2, bad) = (base.clone(), format!("lt_{}", "0".repeat(64)));
    let (ok, _, err) =
        tokio::task::spawn_blocking(move || run(&["channels", "--url", &b2, "--token", &bad]))
            .await
            .unwrap();
    assert!(!ok && err.contains("missing or invalid token"), "{err}");
    // A one-second stream is in flight when SIGTERM arrives: it must finish, not be cut.
    let mut slow = chat_body("sim-fast", true);
    slow["laptime_sim"] = json!({"first_text_ms": 100, "text_tokens": 10, "tokens_per_s": 10.0});
    let mut resp = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(&token)
        .json(&slow)
        .send()
        .await
        .unwrap();
    let first = resp.chunk().await.unwrap().unwrap();
    gw.term();
    let mut text = String::from_utf8_lossy(&first).to_string();
    while let Some(c) = resp.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&c));
    }
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "the in-flight stream was cut: {text}"
    );
    assert!(text.contains("x-laptime-timing"));
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || gw.wait())
        .await
        .unwrap();
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(
        stdout.matches(&token).count(),
        1,
        "the token is printed exactly once"
    );
    assert!(
        !stderr.contains(&token),
        "the token must not reach the logs"
    );
    assert_eq!(
        count_rows(dir.path()),
        3,
        "every request was recorded before exit"
    );

    // A second start on the same store prints no token.
    let mut again = Proc::spawn(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", data],
        &[],
    );
    again.wait_line("laptime listening on");
    again.term();
    let (code, stdout, _) = tokio::task::spawn_blocking(move || again.wait())
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    assert!(!stdout.contains("admin token"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_keys_and_tokens_never_reach_logs_errors_the_api_or_the_store() {
    const OPENAI_CANARY: &str = "sk-canary-openai-5b1d0c7e";
    const ANTHROPIC_CANARY: &str = "sk-ant-canary-93e1f2aa";
    let bootstrap = format!("lt_{}", "ab".repeat(32));
    let dir = tempfile::tempdir().unwrap();
    let mut sim = Proc::spawn(&["sim", "--listen", "127.0.0.1:0"], &[]);
    let sim_base = sim.wait_line("laptime sim listening on");
    let config = dir.path().join("laptime.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
data_dir = "{data}"

[[channels]]
name = "oa"
provider = "openai"
base_url = "{sim_base}/v1"
api_key_env = "CANARY_OPENAI_KEY"
models = {{ "gpt-canary" = "sim-fast" }}

[[channels]]
name = "an"
provider = "anthropic"
base_url = "{sim_base}"
api_key_env = "CANARY_ANTHROPIC_KEY"
models = {{ "claude-canary" = "sim-fast" }}
"#,
            data = dir.path().join("data").display()
        ),
    )
    .unwrap();
    let envs = [
        ("CANARY_OPENAI_KEY", OPENAI_CANARY),
        ("CANARY_ANTHROPIC_KEY", ANTHROPIC_CANARY),
        ("LAPTIME_BOOTSTRAP_TOKEN", bootstrap.as_str()),
        ("RUST_LOG", "debug"),
    ];
    let mut gw = Proc::spawn(&["serve", "--config", config.to_str().unwrap()], &envs);
    let base = gw.wait_line("laptime listening on");
    let http = reqwest::Client::new();
    let mut seen = String::new();
    let calls = [
        ("/v1/chat/completions", chat_body("gpt-canary", true)),
        ("/v1/chat/completions", chat_body("gpt-canary", false)),
        (
            "/v1/responses",
            json!({"model": "gpt-canary", "input": "hi", "stream": true}),
        ),
        (
            "/v1/messages",
            json!({"model": "claude-canary", "max_tokens": 5, "messages": [], "stream": true}),
        ),
        (
            "/v1/messages",
            json!({"model": "claude-canary", "max_tokens": 5, "messages": [], "laptime_sim": {"end": "status", "status": 500}}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "gpt-canary", "laptime_sim": {"end": "error_event"}, "stream": true}),
        ),
        ("/v1/chat/completions", json!({"model": "no-such-model"})),
        (
            "/v1/chat/completions",
            json!({"model": "gpt-canary", "api_base": "http://127.0.0.1:1", "base_url": "http://127.0.0.1:1"}),
        ),
    ];
    for (path, body) in calls {
        let r = http
            .post(format!("{base}{path}"))
            .bearer_auth(&bootstrap)
            .json(&body)
            .send()
            .await
            .unwrap();
        seen.push_str(&format!("{:?}", r.headers()));
        seen.push_str(&r.text().await.unwrap());
    }
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth("lt_wrong")
        .json(&chat_body("gpt-canary", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    seen.push_str(&r.text().await.unwrap());
    // The sim saw the keys, so the canaries really went upstream.
    let upstream_seen = http
        .get(format!("{sim_base}/sim/requests"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(upstream_seen.contains(OPENAI_CANARY) && upstream_seen.contains(ANTHROPIC_CANARY));
    assert!(
        !upstream_seen.contains(&bootstrap),
        "the client's token must not go upstream"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api = http
        .get(format!("{base}/api/requests?limit=500"))
        .bearer_auth(&bootstrap)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rows: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(rows["requests"].as_array().unwrap().len(), 8, "{api}");
    seen.push_str(&api);
    let check = Command::new(BIN)
        .args(["check-config", "--config", config.to_str().unwrap()])
        .envs(envs)
        .output()
        .unwrap();
    assert!(check.status.success());
    seen.push_str(&String::from_utf8_lossy(&check.stdout));
    gw.term();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || gw.wait())
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("DEBUG") || stderr.contains("INFO"),
        "logs were captured"
    );
    sim.term();
    let _ = tokio::task::spawn_blocking(move || sim.wait()).await;
    let mut store_bytes = Vec::new();
    for entry in std::fs::read_dir(dir.path().join("data")).unwrap() {
        store_bytes.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    let store_text = String::from_utf8_lossy(&store_bytes);
    for secret in [OPENAI_CANARY, ANTHROPIC_CANARY, bootstrap.as_str()] {
        for (place, text) in [
            ("responses", seen.as_str()),
            ("stdout", stdout.as_str()),
            ("logs", stderr.as_str()),
            ("store", &*store_text),
        ] {
            assert!(!text.contains(secret), "{secret} leaked into {place}");
        }
    }
}

#[test]
fn requests_and_usage_on_a_directory_without_a_store_say_where_they_looked_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("never-served");
    let data_s = data.to_str().unwrap();
    for args in [
        vec!["requests", "--data-dir", data_s],
        vec!["usage", "--data-dir", data_s],
    ] {
        let (ok, _, err) = run(&args);
        assert!(!ok, "{args:?} must fail");
        assert!(err.contains("no store at"), "{err}");
        assert!(
            err.contains(data_s),
            "{args:?}: names where it looked: {err}"
        );
    }
    assert!(!data.exists(), "nothing was created");
}

#[test]
fn workspace_token_and_requests_commands_work_on_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (ok, out, err) = run(&["workspace", "create", "team", "--data-dir", data]);
    assert!(ok, "{err}");
    assert!(out.contains("workspace team created"));
    let (ok, _, err) = run(&["workspace", "create", "team", "--data-dir", data]);
    assert!(!ok);
    assert!(err.contains("already exists"), "{err}");
    let (ok, out, _) = run(&[
        "token",
        "create",
        "--workspace",
        "team",
        "--scope",
        "read",
        "--data-dir",
        data,
    ]);
    assert!(ok);
    let token = out.lines().last().unwrap();
    assert!(token.starts_with("lt_") && token.len() == 67);
    let (ok, _, err) = run(&[
        "token",
        "create",
        "--workspace",
        "nope",
        "--scope",
        "read",
        "--data-dir",
        data,
    ]);
    assert!(!ok);
    assert!(err.contains("not found"), "{err}");
    let (ok, _, err) = run(&[
        "token",
        "create",
        "--workspace",
        "team",
        "--scope",
        "root",
        "--data-dir",
        data,
    ]);
    assert!(!ok);
    assert!(err.contains("proxy"), "{err}");
    // Groups: only one some configured channel is in (the embedded default has `default`).
    let (ok, _, err) = run(&[
        "workspace",
        "set-group",
        "team",
        "premium",
        "--data-dir",
        data,
    ]);
    assert!(!ok);
    assert!(
        err.contains("no channel in the configuration is in group \"premium\""),
        "{err}"
    );
    let (ok, out, err) = run(&[
        "workspace",
        "set-group",
        "team",
        "default",
        "--data-dir",
        data,
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("workspace team now uses group default"),
        "{out}"
    );
    let (ok, out, err) = run(&[
        "workspace",
        "create",
        "batch",
        "--group",
        "default",
        "--data-dir",
        data,
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("group default"), "{out}");
    let (ok, _, err) = run(&[
        "token",
        "create",
        "--workspace",
        "team",
        "--scope",
        "proxy",
        "--group",
        "x y",
        "--data-dir",
        data,
    ]);
    assert!(!ok);
    assert!(err.contains("group"), "{err}");
    let (ok, out, _) = run(&["requests", "--workspace", "team", "--data-dir", data]);
    assert!(ok);
    assert!(out.starts_with("request_id"), "{out}");
    let (ok, out, err) = run(&[
        "usage",
        "--last",
        "1h",
        "--by",
        "model",
        "--workspace",
        "team",
        "--data-dir",
        data,
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("all requests: 0 requests") && out.contains("nearest-rank"),
        "{out}"
    );
    // Filters print the population they describe; a bucket that is not one says which are.
    let (ok, out, err) = run(&[
        "usage",
        "--where",
        "stream=true",
        "--where",
        "input_bucket=1k-4k",
        "--workspace",
        "team",
        "--data-dir",
        data,
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("stream=true, input_bucket=1k-4k: 0 requests"),
        "{out}"
    );
    let (ok, _, err) = run(&["usage", "--where", "input_bucket=1k", "--data-dir", data]);
    assert!(!ok);
    assert!(
        err.contains("inputBucket") && err.contains("16k-64k"),
        "{err}"
    );
    let (ok, _, err) = run(&["usage", "--last", "soon", "--data-dir", data]);
    assert!(!ok);
    assert!(err.contains("window.last"), "{err}");
    let (ok, out, _) = run(&["graphql-schema"]);
    assert!(ok);
    assert!(out.contains("type Query") && out.contains("recentRequests"));
}

#[test]
fn limits_and_budgets_are_set_merged_shown_and_reset_from_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let with = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--data-dir", data]);
        run(&all)
    };
    assert!(with(&["workspace", "create", "team"]).0);
    let (ok, out, err) = with(&["limits", "set", "--workspace", "team", "--rpm", "10"]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "workspace team: rpm 10 tpm none concurrent none"
    );
    // A limit not given keeps its value; `none` removes one.
    let (_, out, _) = with(&["limits", "set", "--workspace", "team", "--concurrent", "3"]);
    assert_eq!(out.trim(), "workspace team: rpm 10 tpm none concurrent 3");
    let (_, out, _) = with(&["limits", "set", "--workspace", "team", "--rpm", "none"]);
    assert_eq!(out.trim(), "workspace team: rpm none tpm none concurrent 3");
    let (ok, _, err) = with(&["limits", "set", "--workspace", "team", "--rpm", "0"]);
    assert!(!ok && err.contains("at least 1"), "{err}");
    let (ok, _, err) = with(&[
        "limits",
        "set",
        "--workspace",
        "team",
        "--token",
        "key_x",
        "--tpm",
        "5",
    ]);
    assert!(!ok && err.contains("token key_x"), "{err}");
    let (_, out, _) = with(&["limits", "show"]);
    assert_eq!(
        out.trim(),
        "workspace team: rpm none tpm none concurrent 3\nno spend today or this month (UTC)"
    );
    assert!(with(&["limits", "reset", "--workspace", "team"]).0);
    assert!(with(&["limits", "show"])
        .1
        .starts_with("no limits are set\n"));
    // Spend is shown per token with or without a budget: a token that spent $0.25 today.
    let key = {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = laptime_store::Store::open_dir(dir.path()).unwrap();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as i64;
            let ws = store.workspace("team").await.unwrap();
            let t = store
                .create_token("team", laptime_store::auth::Scope::Proxy, None, now)
                .await
                .unwrap();
            // As the recorder sums a row of $0.25 (the sums themselves are proved in the
            // store's conformance suite).
            let utc = laptime_core::limit::Zone::utc();
            store
                .with_conn(|c| {
                    for key in ["", t.key_id.as_str()] {
                        for p in laptime_core::limit::Period::ALL {
                            c.execute(
                                "INSERT INTO spend VALUES (?1, ?2, ?3, ?4, 250000000)",
                                (&ws.id, key, p.as_str(), p.start_us(now, &utc)),
                            )?;
                        }
                    }
                    Ok(())
                })
                .unwrap();
            t.key_id
        })
    };
    let (_, out, _) = with(&["limits", "show", "--workspace", "team"]);
    assert_eq!(
        out.trim(),
        format!(
            "no limits are set\n\
             workspace team: spent $0.250000 today, $0.250000 this month (UTC)\n\
             workspace team token {key}: spent $0.250000 today, $0.250000 this month (UTC)"
        )
    );

    let (ok, _, err) = with(&[
        "budget",
        "set",
        "--workspace",
        "team",
        "--usd",
        "2.5",
        "--period",
        "month",
        "--mode",
        "soft",
    ]);
    assert!(ok, "{err}");
    let (_, out, _) = with(&["budget", "show", "--workspace", "team"]);
    let mut lines = out.lines();
    let budget = lines.next().unwrap();
    assert!(
        budget
            .starts_with("workspace team: month budget $2.500000 (soft), spent $0.250000, resets ")
            && budget.ends_with("-01T00:00:00Z (UTC)"),
        "{out}"
    );
    assert_eq!(
        lines.collect::<Vec<_>>(),
        [
            "workspace team: spent $0.250000 today, $0.250000 this month (UTC)".to_string(),
            format!(
                "workspace team token {key}: spent $0.250000 today, $0.250000 this month (UTC)"
            ),
        ],
        "the token has no budget and its spend is shown"
    );
    let (ok, _, err) = with(&[
        "budget",
        "set",
        "--workspace",
        "team",
        "--usd",
        "-1",
        "--period",
        "day",
    ]);
    assert!(!ok && err.contains("--usd"), "{err}");
    assert!(with(&["budget", "reset", "--workspace", "team"]).0);
    assert!(with(&["budget", "show"])
        .1
        .starts_with("no budgets are set\n"));
    // Nothing in the log: nothing without a price.
    let (ok, out, _) = with(&["prices", "check"]);
    assert!(ok);
    assert!(
        out.contains("every model seen in the last 30d has a price"),
        "{out}"
    );
}

#[test]
fn a_bad_config_reports_every_problem_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[server]\nlisten = \"nowhere\"\n[[channels]]\nname = \"x\"\nprovider = \"openai\"\nmodels = []\n").unwrap();
    let (ok, _, err) = run(&["check-config", "--config", config.to_str().unwrap()]);
    assert!(!ok);
    for key in [
        "server.listen",
        "channels[0].base_url",
        "channels[0].api_key_env",
        "channels[0].models",
    ] {
        assert!(err.contains(key), "{key} missing in {err}");
    }
}

#[test]
fn check_config_prints_a_proxy_without_its_password_and_names_each_egress_problem() {
    let dir = tempfile::tempdir().unwrap();
    let channel = |extra: &str| {
        format!(
            "[[channels]]\nname = \"internal\"\nprovider = \"sim\"\nbase_url = \"https://models.internal:8443\"\nmodels = [\"m\"]\n{extra}\n"
        )
    };
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        channel("proxy_url = \"http://egress:canary-pw-93@proxy.internal:3128\""),
    )
    .unwrap();
    let (ok, out, err) = run(&["check-config", "--config", good.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("proxy_url = \"http://egress:***@proxy.internal:3128\""),
        "{out}"
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        channel(
            "proxy_url = \"http://egress:canary-pw-93@proxy.internal\"\nca_file = \"/nonexistent/ca.pem\"\nclient_cert_file = \"/nonexistent/client.pem\"",
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config", "--config", bad.to_str().unwrap()])
        .env("HTTPS_PROXY", "socks5://u:canary-pw-94@proxy:1080")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for key in [
        "channels[0].proxy_url: \"http://egress:***@proxy.internal\" needs a port",
        "channels[0].ca_file: cannot read /nonexistent/ca.pem",
        "channels[0].client_key_file: required with client_cert_file",
        "environment HTTPS_PROXY: \"socks5://u:***@proxy:1080\"",
    ] {
        assert!(err.contains(key), "{key} missing in {err}");
    }
    let printed = format!("{out:?}{err}");
    assert!(!printed.contains("canary-pw"), "{printed}");
}

/// A port free on 127.0.0.1 a moment ago, for a config file that must name its listen address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn check_config_prints_the_default_route_and_keeps_the_sim_for_a_server_only_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server-only.toml");
    std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:18080\"\n").unwrap();
    let (ok, out, err) = run(&["check-config", "--config", config.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(!out.contains("routes = []"), "{out}");
    for want in [
        "listen = \"127.0.0.1:18080\"",
        "[[channels]]\nname = \"sim\"\nprovider = \"sim\"",
        "\"sim-trace-b\"",
        "[[routes]]\nmodel = \"*\"",
        "[routes.failover]\nmax_attempts = 3",
        "[routes.timeouts]\nheaders_ms = 15000",
        "idle_ms = 30000",
        "[routes.translation]\ndefault_max_tokens = 4096",
        "[thresholds]\nupstream_headers_ms = 2000.0",
        "[store]\nretention_days = 30\nretention_interval_s = 3600",
        "recorder_queue = 20000",
        "connect_timeout_ms = 10000",
        "observe = true",
    ] {
        assert!(out.contains(want), "{want:?} missing in\n{out}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_with_only_server_keys_serves_the_embedded_sim() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server-only.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\n",
            free_port(),
            data.display()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_string();
    let mut gw = Proc::spawn(&["serve", "--config", &config], &[]);
    gw.wait_line("First start: admin token");
    let token = gw.wait_line("");
    let base = gw.wait_line("laptime listening on");
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(&token)
        .json(&chat_body("sim-fast", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the sim channel serves sim-fast");
    // `laptime channels` finds the gateway from the same --config, without --url.
    let (c, t) = (config.clone(), token.clone());
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || run(&["channels", "--config", &c, "--token", &t]))
            .await
            .unwrap();
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l.starts_with("sim ")), "{out}");
    gw.term();
    let (code, _, stderr) = tokio::task::spawn_blocking(move || gw.wait())
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn partial_inline_tables_are_taken_everywhere_and_unknown_keys_refused_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, route: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("[[routes]]\nmodel = \"*\"\n{route}\n")).unwrap();
        path.to_str().unwrap().to_string()
    };
    let partial = write(
        "partial.toml",
        "cache = { ttl_s = 60 }\ntimeouts = { idle_ms = 5000 }\nhedge = { after_ms = 800 }\nfailover = { max_attempts = 2 }",
    );
    let (ok, out, err) = run(&["check-config", "--config", &partial]);
    assert!(ok, "{err}");
    for want in [
        "[routes.cache]\nttl_s = 60\nmax_entries = 10000",
        "idle_ms = 5000",
        "headers_ms = 15000",
        "max_attempts = 2",
    ] {
        assert!(out.contains(want), "{want:?} missing in\n{out}");
    }
    for (route, want) in [
        (
            "cache = { ttl = 60 }",
            "bad.toml:3: routes[0].cache.ttl: unknown field `ttl`",
        ),
        (
            "timeouts = { idle = 5000 }",
            "bad.toml:3: routes[0].timeouts.idle: unknown field `idle`",
        ),
        (
            "failover = { tries = 2 }",
            "bad.toml:3: routes[0].failover.tries: unknown field `tries`",
        ),
    ] {
        let bad = write("bad.toml", route);
        let (ok, _, err) = run(&["check-config", "--config", &bad]);
        assert!(!ok);
        assert!(err.contains(want), "{want:?} missing in {err}");
    }
}

#[test]
fn type_errors_in_several_sections_are_reported_at_once_with_the_semantic_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "[server]\nmax_body_bytes = \"32 MiB\"\n\n[thresholds]\nmin_tps = \"fast\"\n\n[[channels]]\nname = \"x\"\nprovider = \"openai\"\nmodels = [\"m\"]\n\n[[routes]]\nmodel = \"*\"\ncache = { ttl_s = \"1m\" }\n",
    )
    .unwrap();
    let (ok, _, err) = run(&["check-config", "--config", config.to_str().unwrap()]);
    assert!(!ok);
    let c = config.display();
    for want in [
        format!("{c}:2: server.max_body_bytes: invalid type: string \"32 MiB\""),
        format!("{c}:5: thresholds.min_tps: invalid type: string \"fast\""),
        format!("{c}:14: routes[0].cache.ttl_s: invalid type: string \"1m\""),
        format!("{c}:7: channels[0].base_url: required for provider openai"),
    ] {
        assert!(err.contains(&want), "{want:?} missing in {err}");
    }
}

#[test]
fn requests_and_usage_explain_their_columns_in_help() {
    let (ok, out, _) = run(&["requests", "--help"]);
    assert!(ok);
    for column in [
        "request_id",
        "dialect",
        "outcome",
        "status",
        "hdrs_ms",
        "first_ms",
        "text_ms",
        "total_ms",
        "tok/s",
        "classification",
    ] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(column)),
            "{column} has no legend line in\n{out}"
        );
    }
    let (ok, out, _) = run(&["usage", "--help"]);
    assert!(ok);
    for column in ["metric", "p50 p95 p99", "n ", "nulls"] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(column)),
            "{column} has no legend line in\n{out}"
        );
    }
}
