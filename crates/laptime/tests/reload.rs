//! Config reload without a restart, against the real binary on 127.0.0.1: SIGHUP and
//! `laptime reload` put a changed file in force for new requests while a stream in flight
//! finishes on the channel it started on; a file that fails validation is refused whole and the
//! running config keeps serving; restart-only keys are named and kept; the reload is counted in
//! `/metrics` and said in the log (never in colour into a pipe).

mod process;

use std::time::Duration;

use process::{laptime, sim_channel, Gateway, TOKEN};
use serde_json::json;

/// A stream of about two seconds: 20 deltas at 10 per second.
fn paced() -> serde_json::Value {
    json!({"first_text_ms": 10, "text_tokens": 20, "tokens_per_s": 10.0})
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_routes_new_requests_by_the_new_file_while_a_stream_finishes_on_the_old_channel() {
    let mut gw = Gateway::start("", &sim_channel("old", "\"sim-fast\""), &[]);
    let before = gw.chat("sim-fast", json!({})).await;
    assert_eq!(gw.record(&before).await["channel"], "old");

    // A stream is in flight on `old` when the file changes and the gateway is told.
    let mut streaming = gw.chat("sim-fast", paced()).await;
    assert_eq!(streaming.status(), 200);
    streaming.chunk().await.unwrap().unwrap();
    gw.rewrite("", &sim_channel("new", "\"sim-fast\""));
    gw.signal("HUP");
    let line = gw.wait_log("config reloaded");
    assert!(line.contains("channels added: new"), "{line}");
    assert!(line.contains("channels removed: old"), "{line}");

    let after = gw.chat("sim-fast", json!({})).await;
    assert_eq!(after.status(), 200);
    assert_eq!(gw.record(&after).await["channel"], "new");

    // The stream started before the reload ends whole, on the channel it started on.
    let mut rest = Vec::new();
    while let Some(c) = streaming.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    assert!(String::from_utf8_lossy(&rest).contains("data: [DONE]"));
    let old = gw.record(&streaming).await;
    assert_eq!(old["channel"], "old");
    assert_eq!(old["outcome"], "completed");

    assert_eq!(
        gw.metric("laptime_config_reloads_total{result=\"applied\"}")
            .await,
        Some(1.0)
    );
    gw.signal("TERM");
    assert!(gw.exit_within(Duration::from_secs(20)).success());
    // Text logs into a pipe carry no colour codes.
    let log = gw.drain_log().join("\n");
    assert!(!log.contains("\u{1b}["), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_fails_validation_is_refused_whole_and_the_running_config_keeps_serving() {
    let mut gw = Gateway::start("", &sim_channel("old", "\"sim-fast\""), &[]);
    // Refused: a new channel beside a route whose max_attempts is not a number; none of it
    // applies.
    let broken = format!(
        "{}[[routes]]\nmodel = \"sim-fast\"\nfailover = {{ max_attempts = \"two\" }}\n",
        sim_channel("new", "\"sim-fast\"")
    );
    gw.rewrite("", &broken);
    let (status, out, err) = laptime(&["reload", "--url", &gw.base, "--token", TOKEN]);
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert!(err.contains("config refused"), "{err}");
    assert!(err.contains("max_attempts"), "{err}");
    let line = gw.wait_log("config reload refused");
    assert!(line.contains("max_attempts"), "{line}");
    // check-config tells the same reason.
    let (status, _, err) = laptime(&["check-config", "--config", gw.config.to_str().unwrap()]);
    assert!(!status.success());
    assert!(err.contains("max_attempts"), "{err}");
    let served = gw.chat("sim-fast", json!({})).await;
    assert_eq!(served.status(), 200);
    assert_eq!(gw.record(&served).await["channel"], "old");
    assert_eq!(
        gw.metric("laptime_config_reloads_total{result=\"refused\"}")
            .await,
        Some(1.0)
    );

    // Fixed, with a restart-only key changed too: the channel applies, the key is named and
    // kept (the gateway still answers on its address, its drain time unchanged).
    gw.rewrite(
        "drain_s = 3",
        &format!(
            "{}[[routes]]\nmodel = \"sim-fast\"\nfailover = {{ max_attempts = 2 }}\n",
            sim_channel("new", "\"sim-fast\"")
        ),
    );
    let (status, out, err) = laptime(&["reload", "--url", &gw.base, "--token", TOKEN]);
    assert!(status.success(), "{out}{err}");
    assert!(out.contains("config reloaded"), "{out}");
    assert!(out.contains("channels added: new"), "{out}");
    assert!(out.contains("routes"), "{out}");
    assert!(out.contains("needs a restart"), "{out}");
    assert!(out.contains("server.drain_s"), "{out}");
    gw.wait_log("server.drain_s");
    let served = gw.chat("sim-fast", json!({})).await;
    assert_eq!(gw.record(&served).await["channel"], "new");

    // The same file again changes nothing.
    let (status, out, _) = laptime(&["reload", "--url", &gw.base, "--token", TOKEN]);
    assert!(status.success());
    assert!(out.contains("config unchanged"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn laptime_reload_finds_the_gateway_from_the_config_file_serve_reads() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = format!("listen = \"{}\"", free.local_addr().unwrap());
    drop(free);
    let mut gw = Gateway::start(&listen, &sim_channel("old", "\"sim-fast\""), &[]);
    gw.rewrite(&listen, &sim_channel("new", "\"sim-fast\""));
    let config = gw.config.to_str().unwrap().to_string();
    let (status, out, err) = laptime(&["reload", "--config", &config, "--token", TOKEN]);
    assert!(status.success(), "{out}{err}");
    assert!(out.contains("channels added: new"), "{out}");
    gw.wait_log("config reloaded");
}

#[tokio::test(flavor = "multi_thread")]
async fn reload_needs_an_admin_token() {
    let gw = Gateway::start("", &sim_channel("old", "\"sim-fast\""), &[]);
    let (status, _, err) = laptime(&["reload", "--url", &gw.base, "--token", "lt_nope"]);
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("401"), "{err}");
    let unauthenticated = reqwest::Client::new()
        .post(format!("{}/api/admin/reload", gw.base))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
}
