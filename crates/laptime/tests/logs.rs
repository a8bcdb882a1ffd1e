//! The gateway's log, read from the real binary's stderr: `--log-format json` writes one JSON
//! object per line (a refused reload's reasons included); a failover names the channel that failed and its error class; shutdown
//! says how many streams were in flight and how many the drain deadline cut; a second SIGINT
//! forces the exit while a stream is open.

mod process;

use std::time::Duration;

use process::{laptime, sim_channel, Gateway, PROMPT, TOKEN};
use serde_json::{json, Value};

/// A stream of about 100 s: only a drain deadline or a forced exit ends it within a test.
fn long_stream() -> Value {
    json!({"first_text_ms": 10, "text_tokens": 200, "tokens_per_s": 2.0})
}

#[tokio::test(flavor = "multi_thread")]
async fn json_log_lines_parse_and_a_failover_names_the_failed_channel_and_its_class() {
    // Nothing listens on `down`'s port: its attempt fails to connect, `sim` answers.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let channels = format!(
        "[[channels]]\nname = \"down\"\nprovider = \"sim\"\nbase_url = \"http://127.0.0.1:{port}\"\n\
         proxy_url = \"\"\nmodels = [\"sim-fast\"]\npriority = 0\n\n{}priority = 1\n",
        sim_channel("sim", "\"sim-fast\"")
    );
    let mut gw = Gateway::start("", &channels, &["--log-format", "json"]);
    let answered = gw.chat("sim-fast", json!({})).await;
    assert_eq!(answered.status(), 200);
    let record = gw.record(&answered).await;
    assert_eq!(record["channel"], "sim");
    assert_eq!(record["failover_count"], 1);

    let line = gw.wait_log("failing over");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["level"], "WARN");
    assert_eq!(v["fields"]["message"], "attempt failed; failing over");
    assert_eq!(v["fields"]["failed_channel"], "down");
    assert_eq!(v["fields"]["next_channel"], "sim");
    assert_eq!(
        v["fields"]["error_class"],
        record["attempts"][0]["error_class"]
    );
    assert!(v["fields"]["error_class"].is_string(), "{line}");
    assert_eq!(v["fields"]["request_id"], record["request_id"]);

    // A refused reload is one JSON line too, with its reasons.
    gw.rewrite(
        "",
        "[[routes]]\nmodel = \"sim-fast\"\nfailover = { max_attempts = \"two\" }\n",
    );
    let (status, _, _) = laptime(&["reload", "--url", &gw.base, "--token", TOKEN]);
    assert_eq!(status.code(), Some(1));
    let line = gw.wait_log("config reload refused");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["level"], "ERROR");
    assert!(v["fields"]["errors"]
        .as_str()
        .unwrap()
        .contains("max_attempts"));
    assert_eq!(
        gw.metric("laptime_config_reloads_total{result=\"refused\"}")
            .await,
        Some(1.0)
    );

    gw.signal("TERM");
    gw.wait_log("drained");
    assert!(gw.exit_within(Duration::from_secs(20)).success());
    for line in gw.drain_log() {
        let parsed: Result<Value, _> = serde_json::from_str(line);
        assert!(parsed.is_ok(), "not JSON: {line}");
        assert!(!line.contains(PROMPT), "the prompt in the log: {line}");
        assert!(!line.contains(TOKEN), "a token in the log: {line}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_says_how_many_streams_were_in_flight_and_how_many_the_deadline_cut() {
    let mut gw = Gateway::start("drain_s = 1", &sim_channel("sim", "\"sim-fast\""), &[]);
    let mut open = gw.chat("sim-fast", long_stream()).await;
    assert_eq!(open.status(), 200);
    open.chunk().await.unwrap().unwrap();

    gw.signal("TERM");
    let line = gw.wait_log("shutting down");
    assert!(line.contains("streams_in_flight=1"), "{line}");
    let line = gw.wait_log("drained");
    assert!(line.contains("cut_at_drain_deadline=1"), "{line}");
    assert!(gw.exit_within(Duration::from_secs(20)).success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigint_forces_the_exit_while_a_stream_is_open() {
    let mut gw = Gateway::start("drain_s = 600", &sim_channel("sim", "\"sim-fast\""), &[]);
    let mut open = gw.chat("sim-fast", long_stream()).await;
    assert_eq!(open.status(), 200);
    open.chunk().await.unwrap().unwrap();

    gw.signal("INT");
    gw.wait_log("shutting down");
    gw.signal("INT");
    let line = gw.wait_log("forcing the exit");
    assert!(line.contains("streams_in_flight=1"), "{line}");
    assert_eq!(gw.exit_within(Duration::from_secs(10)).code(), Some(1));
}
