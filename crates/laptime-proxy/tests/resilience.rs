//! Routing under failure over real sockets: failover before the commit point, deadlines after
//! it, `Retry-After` cool-downs, and what the record keeps of every attempt.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

pub mod common;

use std::time::Duration;

use common::*;
use laptime_proxy::config::{ChannelConfig, Models, RouteConfig, TimeoutsConfig};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A fake upstream on 127.0.0.1 that reads each request and writes `bytes`, then closes the
/// connection (`close`) or keeps it open and silent.
async fn raw_upstream(bytes: String, close: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bytes: std::sync::Arc<str> = bytes.into();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(bytes.as_bytes()).await;
                if close {
                    let _ = sock.shutdown().await;
                } else {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            });
        }
    });
    format!("http://{addr}")
}

/// Answers every request with `response`, or never answers when it is `None` (a stall before
/// the head).
async fn fixed_upstream(response: Option<&'static str>) -> String {
    raw_upstream(response.unwrap_or_default().into(), response.is_some()).await
}

/// A channel on `base` that serves `model` as the sim's `sim-fast` preset.
fn mapped(name: &str, base: &str, model: &str) -> ChannelConfig {
    let mut c = channel(name, base, &[]);
    c.models = Models::Map([(model.to_string(), "sim-fast".to_string())].into());
    c
}

/// The second-tier channel that answers `model` when the first fails.
fn backup(name: &str, sim: &str, model: &str) -> ChannelConfig {
    let mut c = mapped(name, sim, model);
    c.priority = 1;
    c
}

fn route(model: &str, tweak: impl FnOnce(&mut TimeoutsConfig)) -> RouteConfig {
    let mut timeouts = TimeoutsConfig::default();
    tweak(&mut timeouts);
    RouteConfig {
        model: model.into(),
        failover: Default::default(),
        timeouts,
        cache: None,
        hedge: None,
        translation: Default::default(),
        context_fallback: None,
    }
}

#[tokio::test]
async fn a_refused_connection_fails_over_and_the_answer_is_timed_from_the_winning_attempt() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let h = start_with(|cfg, sim| {
        cfg.channels.push(channel("dead", &dead, &["m"]));
        cfg.channels.push(backup("backup", sim, "m"));
    })
    .await;
    for dialect in DIALECTS {
        let resp = h
            .post(path_for(dialect), &body_for(dialect, "m", true))
            .await;
        assert_eq!(resp.status(), 200, "{dialect}");
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        assert_eq!(text.matches(": x-laptime-timing").count(), 1);
        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "completed");
        assert_eq!(row["failover_count"], 1);
        assert_eq!(row["channel"], "backup");
        let a = row["attempts"].as_array().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(
            (
                a[0]["channel"].as_str(),
                a[0]["won"].as_bool(),
                a[0]["error_class"].as_str()
            ),
            (Some("dead"), Some(false), Some("connect_failed"))
        );
        assert_eq!(
            (a[1]["role"].as_str(), a[1]["won"].as_bool()),
            (Some("failover"), Some(true))
        );
        // ttft and upstream are measured from the winning attempt's dispatch.
        let ttft = row["ttft_ms"].as_f64().unwrap();
        let expected = a[1]["first_byte_ms"].as_f64().unwrap() - a[1]["start_ms"].as_f64().unwrap();
        assert!((ttft - expected).abs() < 0.002, "{ttft} vs {expected}");
    }
    h.stop().await;
}

#[tokio::test]
async fn a_retryable_status_fails_over_and_retry_after_cools_the_channel_down() {
    let busy = fixed_upstream(Some(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 30\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    ))
    .await;
    let h = start_with(|cfg, sim| {
        cfg.channels.push(channel("busy", &busy, &["m"]));
        cfg.channels.push(backup("backup", sim, "m"));
    })
    .await;
    let resp = h
        .post(path_for("chat"), &body_for("chat", "m", false))
        .await;
    assert_eq!(resp.status(), 200);
    let row = h.row(&request_id(&resp)).await;
    let a = row["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(
        (a[0]["status"].as_u64(), a[0]["error_class"].as_str()),
        (Some(429), Some("rate_limited"))
    );
    assert_eq!(row["failover_count"], 1);
    // The next request skips the cooling channel.
    let resp = h
        .post(path_for("chat"), &body_for("chat", "m", false))
        .await;
    let row = h.row(&request_id(&resp)).await;
    assert_eq!(row["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(row["channel"], "backup");
    assert_eq!(row["failover_count"], 0);
    h.stop().await;
}

#[tokio::test]
async fn the_headers_deadline_fails_over_and_when_every_channel_misses_it_the_answer_is_a_504() {
    let stall = fixed_upstream(None).await;
    let h = start_with(|cfg, sim| {
        cfg.channels
            .push(channel("stall", &stall, &["m", "only-stall"]));
        cfg.channels.push(backup("backup", sim, "m"));
        cfg.routes.push(route("*", |t| t.headers_ms = 300));
    })
    .await;
    // Over real sockets; its exact timing is proved under paused time (exact_deadlines.rs).
    let resp = h
        .post(path_for("messages"), &body_for("messages", "m", true))
        .await;
    assert_eq!(resp.status(), 200);
    let row = h.row(&request_id(&resp)).await;
    let a = row["attempts"].as_array().unwrap();
    assert_eq!(a[0]["error_class"], "timeout");
    assert_eq!(row["outcome"], "completed");

    let resp = h
        .post(path_for("chat"), &body_for("chat", "only-stall", false))
        .await;
    assert_eq!(resp.status(), 504);
    let row = h.row(&request_id(&resp)).await;
    assert_eq!(
        (row["outcome"].as_str(), row["timeout_kind"].as_str()),
        (Some("timeout"), Some("headers"))
    );
    assert!(row["ttft_ms"].is_null() && row["upstream_ms"].is_null());
    h.stop().await;
}

#[tokio::test]
async fn after_the_commit_point_a_missed_deadline_is_an_in_band_error_event_never_a_replay() {
    let h = start_with(|cfg, _| {
        cfg.routes.push(route("*", |t| {
            t.idle_ms = 300;
            t.first_event_ms = 400;
        }))
    })
    .await;
    // Idle: two deltas, then silence.
    for dialect in DIALECTS {
        let mut body = body_for(dialect, "sim-fast", true);
        body["laptime_sim"] = json!({"text_tokens": 2, "end": "stall"});
        let resp = h.post(path_for(dialect), &body).await;
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        let row = h.row(&id).await;
        assert_eq!(
            (row["outcome"].as_str(), row["timeout_kind"].as_str()),
            (Some("timeout"), Some("idle")),
            "{dialect}"
        );
        assert!(
            !text.contains("x-laptime-timing"),
            "{dialect}: no terminal frame, no comment"
        );
        let error_event = if dialect == "messages" {
            "\"timeout_error\""
        } else {
            "upstream_timeout"
        };
        assert!(text.contains(error_event), "{dialect}: {text}");
        assert!(
            !text.contains("[DONE]")
                && !text.contains("message_stop")
                && !text.contains("response.completed")
        );
        // The preamble was sent once: no replay on another channel.
        let preamble = match dialect {
            "chat" => "\"role\":\"assistant\"",
            "responses" => "event: response.created",
            _ => "event: message_start",
        };
        assert_eq!(text.matches(preamble).count(), 1, "{dialect}");
        assert_eq!(
            row["text_delta_count"], 2,
            "the marks and counts seen so far are kept"
        );
    }
    // Heartbeats only: they are not events, so the first-event deadline fires.
    let mut body = body_for("messages", "sim-fast", true);
    body["laptime_sim"] =
        json!({"heartbeat_ms": 50, "first_event_ms": 5000, "first_text_ms": 5000});
    let resp = h.post(path_for("messages"), &body).await;
    let id = request_id(&resp);
    let text = resp.text().await.unwrap();
    let row = h.row(&id).await;
    assert_eq!(row["timeout_kind"], "first_event", "{row}");
    assert!(text.contains("event: ping") && text.contains("timeout_error"));
    h.stop().await;
}

#[tokio::test]
async fn when_every_candidate_fails_the_client_gets_one_error_and_the_record_every_attempt() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let h = start_with(|cfg, _| {
        for name in ["d1", "d2", "d3", "d4"] {
            cfg.channels.push(channel(name, &dead, &["m"]));
        }
    })
    .await;
    let resp = h
        .post(path_for("responses"), &body_for("responses", "m", true))
        .await;
    assert_eq!(resp.status(), 502);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["type"], "api_error");
    let row = h.row(&err_id(&h).await).await;
    let a = row["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 3, "failover.max_attempts defaults to 3");
    assert!(a.iter().all(|x| x["won"] == false));
    assert_eq!(row["failover_count"], 2);
    h.stop().await;
}

/// The newest request id of the harness's workspace.
async fn err_id(h: &Harness) -> String {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let list: Value = h
        .http
        .get(h.url("/api/requests?limit=1"))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["requests"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_failing_channel_is_ejected_then_probed_once_after_its_back_off() {
    let broken = fixed_upstream(Some(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    ))
    .await;
    let h = start_with(|cfg, sim| {
        let mut flaky = channel("flaky", &broken, &["m"]);
        flaky.circuit.consecutive_failures = 2;
        flaky.circuit.open_s = 1;
        cfg.channels.push(flaky);
        cfg.channels.push(backup("backup", sim, "m"));
    })
    .await;
    let attempts = |row: &Value| {
        row["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["channel"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    for _ in 0..2 {
        let resp = h
            .post(path_for("chat"), &body_for("chat", "m", false))
            .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            attempts(&h.row(&request_id(&resp)).await),
            ["flaky", "backup"]
        );
    }
    // Open: passed over without an attempt.
    let resp = h
        .post(path_for("chat"), &body_for("chat", "m", false))
        .await;
    assert_eq!(attempts(&h.row(&request_id(&resp)).await), ["backup"]);
    let circuit = |h: &Harness| {
        let req = h
            .http
            .post(h.url("/graphql"))
            .bearer_auth(&h.token)
            .json(&json!({"query": "{ channels { name circuit } }"}));
        async move {
            let v: Value = req.send().await.unwrap().json().await.unwrap();
            v["data"]["channels"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == "flaky")
                .unwrap()["circuit"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    assert_eq!(circuit(&h).await, "open");
    let metrics = h
        .http
        .get(h.url("/metrics"))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("laptime_circuit_state{channel=\"flaky\",state=\"open\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("laptime_circuit_transitions_total{channel=\"flaky\"} 1"),
        "{metrics}"
    );
    // After the back-off one probe goes to the channel; it fails, so the circuit opens again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let resp = h
        .post(path_for("chat"), &body_for("chat", "m", false))
        .await;
    assert_eq!(
        attempts(&h.row(&request_id(&resp)).await),
        ["flaky", "backup"]
    );
    assert_eq!(circuit(&h).await, "open");
    h.stop().await;
}

#[tokio::test]
async fn a_cache_hit_replays_the_same_bytes_without_an_upstream_call_and_reads_back_with_nulls() {
    let h = start_with(|cfg, _| {
        let mut r = route("sim-fast", |_| {});
        r.cache = Some(laptime_proxy::config::CacheConfig {
            ttl_s: 60,
            max_entries: 100,
            max_bytes: 1 << 20,
            max_entry_bytes: 1 << 16,
            shared: false,
        });
        cfg.routes.push(r);
    })
    .await;
    let upstream_calls = |h: &Harness| {
        let req = h.http.get(h.sim_url("/sim/stats"));
        async move {
            req.send().await.unwrap().json::<Value>().await.unwrap()["requests"]
                .as_u64()
                .unwrap()
        }
    };
    for dialect in DIALECTS {
        for stream in [true, false] {
            let body = body_for(dialect, "sim-fast", stream);
            let first = h.post(path_for(dialect), &body).await;
            assert!(first.headers().get("x-laptime-cache").is_none());
            let first_text = first.text().await.unwrap();
            let before = upstream_calls(&h).await;
            let hit = h.post(path_for(dialect), &body).await;
            assert_eq!(
                hit.headers()["x-laptime-cache"],
                "hit",
                "{dialect} stream={stream}"
            );
            assert!(
                hit.headers().get("server-timing").is_none(),
                "no upstream figures on a hit"
            );
            let id = request_id(&hit);
            let hit_text = hit.text().await.unwrap();
            assert_eq!(
                upstream_calls(&h).await,
                before,
                "{dialect}: a hit makes no upstream call"
            );
            let expected = if stream {
                cut_comment(&first_text).0
            } else {
                first_text.clone()
            };
            assert_eq!(
                hit_text, expected,
                "{dialect} stream={stream}: byte-identical replay"
            );
            let row = h.row(&id).await;
            assert_eq!(
                (row["cached"].as_bool(), row["outcome"].as_str()),
                (Some(true), Some("cache_hit"))
            );
            assert!(
                row["ttft_ms"].is_null() && row["upstream_ms"].is_null(),
                "{row}"
            );
            assert_eq!(row["failover_count"], 0);
            assert!(row["attempts"].as_array().unwrap().is_empty());
        }
    }
    // The client can skip the cache, and an answer that did not complete is never stored.
    let body = body_for("chat", "sim-fast", true);
    let before = upstream_calls(&h).await;
    let r = h
        .http
        .post(h.url(path_for("chat")))
        .bearer_auth(&h.token)
        .header("cache-control", "no-cache")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("x-laptime-cache").is_none());
    r.bytes().await.unwrap();
    assert_eq!(upstream_calls(&h).await, before + 1);
    let mut broken = body_for("messages", "sim-fast", true);
    broken["laptime_sim"] = json!({"text_tokens": 3, "end": "close"});
    for _ in 0..2 {
        let r = h.post(path_for("messages"), &broken).await;
        assert!(
            r.headers().get("x-laptime-cache").is_none(),
            "a closed-early answer is not cached"
        );
        r.bytes().await.unwrap();
    }
    h.stop().await;
}

/// Two channels on the same sim, each mapping model `m` to a preset with known timing.
fn hedged(
    primary_preset: &str,
    second_preset: &str,
    after_ms: u64,
    budget: f64,
) -> impl FnOnce(&mut laptime_proxy::config::Config, &str) {
    let (p, s) = (primary_preset.to_string(), second_preset.to_string());
    move |cfg, sim| {
        for (name, preset, priority) in [("first", p, 0), ("second", s, 1)] {
            let mut c = channel(name, sim, &[]);
            c.models = Models::Map([("m".to_string(), preset)].into());
            c.priority = priority;
            cfg.channels.push(c);
        }
        let mut r = route("m", |_| {});
        r.hedge = Some(laptime_proxy::config::HedgeConfig {
            after_ms: Some(after_ms),
            after: None,
            budget,
        });
        cfg.routes.push(r);
    }
}

#[tokio::test]
async fn a_slow_primary_is_hedged_and_the_hedge_wins_with_the_loser_closed() {
    // Primary: first event at 330 ms (sim-trace-c); hedge after 100 ms to an instant channel.
    let h = start_with(hedged("sim-trace-c", "sim-fast", 100, 1.0)).await;
    for dialect in DIALECTS {
        let before = h.sim_stats().await;
        let resp = h
            .post(path_for(dialect), &body_for(dialect, "m", true))
            .await;
        assert_eq!(resp.status(), 200);
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        let (_, comment, _) = cut_comment(&text);
        assert!(comment.ends_with("hedge=hedge"), "{comment}");
        let row = h.row(&id).await;
        assert_eq!(row["hedge"], "hedge", "{dialect}");
        assert_eq!(row["failover_count"], 0, "losing a race is not a failure");
        assert_eq!(row["channel"], "second");
        let a = row["attempts"].as_array().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(
            (a[0]["role"].as_str(), a[0]["won"].as_bool()),
            (Some("primary"), Some(false))
        );
        assert_eq!(
            (a[1]["role"].as_str(), a[1]["won"].as_bool()),
            (Some("hedge"), Some(true))
        );
        let hedge_start = a[1]["start_ms"].as_f64().unwrap() - a[0]["start_ms"].as_f64().unwrap();
        assert!(hedge_start > 0.0, "the hedge went out after the primary");
        // ttft is measured from the primary's dispatch.
        let ttft = row["ttft_ms"].as_f64().unwrap();
        assert!(ttft >= hedge_start, "{ttft} < {hedge_start}");
        assert_eq!(row["outcome"], "completed");
        // The sim saw two requests and the loser's stream dropped.
        let mut after = h.sim_stats().await;
        for _ in 0..100 {
            if after["streams_dropped"].as_u64() > before["streams_dropped"].as_u64() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            after = h.sim_stats().await;
        }
        assert_eq!(
            after["requests"].as_u64().unwrap() - before["requests"].as_u64().unwrap(),
            2
        );
        assert_eq!(
            after["streams_dropped"].as_u64().unwrap()
                - before["streams_dropped"].as_u64().unwrap(),
            1,
            "{dialect}: the loser was closed"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn a_fast_primary_wins_and_a_hedge_sent_too_late_is_cancelled() {
    // Primary first event at 310 ms (sim-trace-b); the hedge after 50 ms goes to a channel whose
    // first event is at 6.3 s (sim-trace-a): the primary wins the race and the hedge is closed.
    let h = start_with(hedged("sim-trace-b", "sim-trace-a", 50, 1.0)).await;
    let before = h.sim_stats().await;
    let mut resp = h.post(path_for("chat"), &body_for("chat", "m", true)).await;
    let id = request_id(&resp);
    // Read until the answer's text starts, then leave (sim-trace-b runs for 10 s).
    let mut seen = String::new();
    while !seen.contains("\"content\":\"") || seen.matches("content").count() < 3 {
        let chunk = resp.chunk().await.unwrap().expect("open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(resp);
    let row = h.row(&id).await;
    assert_eq!(row["hedge"], "primary");
    let a = row["attempts"].as_array().unwrap();
    assert_eq!(
        (a[0]["role"].as_str(), a[0]["won"].as_bool()),
        (Some("primary"), Some(true))
    );
    assert_eq!(
        (a[1]["role"].as_str(), a[1]["won"].as_bool()),
        (Some("hedge"), Some(false))
    );
    let after = h.sim_stats().await;
    assert_eq!(
        after["requests"].as_u64().unwrap() - before["requests"].as_u64().unwrap(),
        2
    );
    // Without a hedge delay passing, no hedge is sent at all.
    let h2 = start_with(hedged("sim-fast", "sim-fast", 300, 1.0)).await;
    let before = h2.sim_stats().await;
    let resp = h2
        .post(path_for("messages"), &body_for("messages", "m", true))
        .await;
    let id = request_id(&resp);
    resp.bytes().await.unwrap();
    let row = h2.row(&id).await;
    assert_eq!(row["hedge"], "none");
    assert_eq!(row["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(
        h2.sim_stats().await["requests"].as_u64().unwrap() - before["requests"].as_u64().unwrap(),
        1
    );
    h.stop().await;
    h2.stop().await;
}

#[tokio::test]
async fn the_hedge_budget_bounds_the_share_of_hedged_requests() {
    let h = start_with(hedged("sim-trace-c", "sim-fast", 20, 0.25)).await;
    let mut hedged_n = 0;
    for _ in 0..8 {
        // The head is enough: the race is decided before it is sent. Leaving early keeps the
        // unhedged (20 s) answers from running out.
        let resp = h.post(path_for("chat"), &body_for("chat", "m", true)).await;
        let id = request_id(&resp);
        drop(resp);
        if h.row(&id).await["hedge"] != "none" {
            hedged_n += 1;
        }
    }
    assert!(
        (1..=2).contains(&hedged_n),
        "{hedged_n} of 8 hedged with a 25 % budget"
    );
    h.stop().await;
}

/// A fake upstream that accepts, reads the request and resets the connection before any head.
async fn resetting_upstream() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = vec![0u8; 65536];
            let _ = sock.read(&mut buf).await;
            let _ = sock.set_zero_linger();
            drop(sock);
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn the_fault_matrix_in_every_dialect() {
    let five_hundred = fixed_upstream(Some(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    ))
    .await;
    let reset = resetting_upstream().await;
    let h = start_with(|cfg, sim| {
        for (model, broken) in [("m500", &five_hundred), ("mreset", &reset)] {
            let mut bad = channel(&format!("bad-{model}"), broken, &[model]);
            bad.circuit.consecutive_failures = 1000;
            cfg.channels.push(bad);
            cfg.channels
                .push(backup(&format!("good-{model}"), sim, model));
        }
        cfg.routes.push(route("*", |t| t.first_event_ms = 300));
    })
    .await;
    for dialect in DIALECTS {
        // 500 and a reset before the head: failover, the answer completes, one failed attempt.
        for (model, class) in [("m500", "upstream_status_5xx"), ("mreset", "body_error")] {
            let resp = h
                .post(path_for(dialect), &body_for(dialect, model, true))
                .await;
            assert_eq!(resp.status(), 200, "{dialect} {model}");
            let id = request_id(&resp);
            let text = resp.text().await.unwrap();
            assert_eq!(text.matches(": x-laptime-timing").count(), 1);
            let row = h.row(&id).await;
            let a = row["attempts"].as_array().unwrap();
            assert_eq!(a.len(), 2, "{dialect} {model}");
            assert_eq!(a[0]["error_class"], class, "{dialect} {model}: {row}");
            assert_eq!(
                (row["failover_count"].as_u64(), row["outcome"].as_str()),
                (Some(1), Some("completed"))
            );
            assert!(row["ttft_ms"].is_number() && row["upstream_ms"].is_number());
        }
        // A stall before the first event (no heartbeats): after the head, so an in-band error.
        let mut body = body_for(dialect, "sim-fast", true);
        body["laptime_sim"] = json!({"first_event_ms": 5000, "first_text_ms": 5000});
        let resp = h.post(path_for(dialect), &body).await;
        assert_eq!(resp.status(), 200);
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        assert!(text.contains("timeout"), "{dialect}: {text}");
        let row = h.row(&id).await;
        assert_eq!(
            (row["outcome"].as_str(), row["timeout_kind"].as_str()),
            (Some("timeout"), Some("first_event"))
        );
        assert!(row["other"]["timing"]["first_sse_event_ms"].is_null());
        assert!(
            row["upstream_ms"].is_number(),
            "the stream was ended at the deadline"
        );
        // A reset after some deltas: the client sees the break (the dialect's error event ends
        // the stream), no replay, closed early.
        let mut body = body_for(dialect, "sim-fast", true);
        body["laptime_sim"] = json!({"text_tokens": 3, "end": "reset"});
        let resp = h.post(path_for(dialect), &body).await;
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        let last = text.trim_end().rsplit("\n\n").next().unwrap();
        assert!(
            last.contains("connection broke before the stream was complete"),
            "{dialect}: the client must see the break: {text}"
        );
        let row = h.row(&id).await;
        assert_eq!(
            (row["outcome"].as_str(), row["error_class"].as_str()),
            (Some("upstream_closed_early"), Some("body_error"))
        );
        assert_eq!(
            row["attempts"].as_array().unwrap().len(),
            1,
            "no replay after the commit point"
        );
        assert_eq!(row["failover_count"], 0);
    }
    h.stop().await;
}

/// A short scripted stream of `model` (a script in the body replaces the preset's timings).
async fn call_as(h: &Harness, token: &str, model: &str) -> (u16, Option<String>, String) {
    let mut body = body_for("chat", model, true);
    body["laptime_sim"] = json!({"text_tokens": 3});
    let r = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let id = r
        .headers()
        .get("x-laptime-request-id")
        .map(|v| v.to_str().unwrap().to_string());
    (status, id, r.text().await.unwrap())
}

#[tokio::test]
async fn a_workspace_or_token_group_picks_the_channels_that_serve_it() {
    let h = start_with(|c, sim| {
        let mut premium = channel("premium", sim, &["sim-fast"]);
        premium.group = "premium".into();
        c.channels.push(premium);
    })
    .await;
    let ws = h
        .gql(&h.token, "{ me { workspaceId group } }", json!({}))
        .await
        .1;
    assert_eq!(ws["data"]["me"]["group"], "default", "{ws}");
    let ws_id = ws["data"]["me"]["workspaceId"]
        .as_str()
        .unwrap()
        .to_string();

    let (status, id, _) = call_as(&h, &h.token, "sim-fast").await;
    assert_eq!(status, 200);
    let row = h.row(&id.unwrap()).await;
    assert_eq!(
        (row["channel"].as_str(), row["group"].as_str()),
        (Some("sim"), Some("default"))
    );

    // The workspace moves to `premium`: its next request goes to that group's channel.
    let set = h.gql(&h.token, "mutation($w: ID!, $g: String) { setWorkspaceGroup(workspaceId: $w, group: $g) { group } }",
        json!({"w": ws_id, "g": "premium"}),
    )
    .await.1;
    assert_eq!(
        set["data"]["setWorkspaceGroup"]["group"], "premium",
        "{set}"
    );
    let (status, id, _) = call_as(&h, &h.token, "sim-fast").await;
    assert_eq!(status, 200);
    let row = h.row(&id.unwrap()).await;
    assert_eq!(
        (row["channel"].as_str(), row["group"].as_str()),
        (Some("premium"), Some("premium"))
    );

    // A model the group's channels do not serve is not found there, and the answer says why.
    let (status, _, text) = call_as(&h, &h.token, "sim-trace-a").await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("in group \\\"premium\\\""), "{text}");
    let models: Value = h
        .http
        .get(h.url("/v1/models"))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["sim-fast"], "{models}");

    // A token of its own group overrides the workspace's.
    let made = h.gql(&h.token, "mutation($w: ID!) { createToken(workspaceId: $w, scope: PROXY, group: \"default\") { token } }",
        json!({"w": ws_id}),
    )
    .await.1;
    let token = made["data"]["createToken"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, id, _) = call_as(&h, &token, "sim-trace-a").await;
    assert_eq!(status, 200);
    let row = h.row(&id.unwrap()).await;
    assert_eq!(
        (row["channel"].as_str(), row["group"].as_str()),
        (Some("sim"), Some("default"))
    );
    let listed = h
        .gql(
            &h.token,
            "query($w: ID!) { tokens(workspaceId: $w) { group } workspaces { group } }",
            json!({"w": ws_id}),
        )
        .await
        .1;
    assert!(
        listed["data"]["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["group"] == "default"),
        "{listed}"
    );
    assert_eq!(listed["data"]["workspaces"][0]["group"], "premium");

    // A group no channel is in is refused: requests there would route nowhere.
    let bad = h.gql(&h.token, "mutation($w: ID!) { setWorkspaceGroup(workspaceId: $w, group: \"nowhere\") { group } }",
        json!({"w": ws_id}),
    )
    .await.1;
    let msg = bad["errors"][0]["message"].as_str().unwrap();
    assert!(msg.contains("no channel is in group \"nowhere\""), "{bad}");
    // Null returns the workspace to the default group.
    let back = h
        .gql(
            &h.token,
            "mutation($w: ID!) { setWorkspaceGroup(workspaceId: $w, group: null) { group } }",
            json!({"w": ws_id}),
        )
        .await
        .1;
    assert!(
        back["data"]["setWorkspaceGroup"]["group"].is_null(),
        "{back}"
    );
    let (status, _, _) = call_as(&h, &h.token, "sim-trace-a").await;
    assert_eq!(status, 200);
    h.stop().await;
}

/// A fake upstream that answers 200 `text/event-stream` with `events`, then stalls (or, with
/// `close`, closes): a stream that never reaches the part the test is about.
async fn sse_upstream(events: &str, close: bool) -> String {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    raw_upstream(format!("{head}{events}"), close).await
}

/// Preamble events that are neither heartbeats nor output, per dialect.
fn preamble(dialect: &str) -> &'static str {
    match dialect {
        "chat" => "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "responses" => "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
        _ => "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n",
    }
}

#[tokio::test]
async fn before_the_last_candidate_stream_deadlines_and_early_error_events_fail_over() {
    let silent = sse_upstream("", false).await;
    let mut preambles = Vec::new();
    for d in DIALECTS {
        preambles.push((d, sse_upstream(preamble(d), false).await));
    }
    let overloaded = sse_upstream(
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        true,
    )
    .await;
    let h = start_with(|cfg, sim| {
        let mut bad = vec![("silent".to_string(), silent.clone())];
        for (d, url) in &preambles {
            bad.push((format!("preamble-{d}"), url.clone()));
        }
        bad.push(("overloaded".to_string(), overloaded.clone()));
        for (model, url) in bad {
            let mut first = channel(&format!("bad-{model}"), &url, &[&model]);
            first.circuit.consecutive_failures = 1000;
            cfg.channels.push(first);
            cfg.channels
                .push(backup(&format!("good-{model}"), sim, &model));
        }
        cfg.routes.push(route("*", |t| {
            t.first_event_ms = 300;
            t.first_output_ms = 400;
        }));
    })
    .await;
    let mut cases: Vec<(&str, String, &str, Option<&str>, f64)> = Vec::new();
    for d in DIALECTS {
        cases.push((d, "silent".into(), "timeout", Some("first_event"), 300.0));
        cases.push((
            d,
            format!("preamble-{d}"),
            "timeout",
            Some("first_output"),
            400.0,
        ));
    }
    cases.push(("messages", "overloaded".into(), "stream_error", None, 0.0));
    for (dialect, model, class, kind, after) in cases {
        let resp = h
            .post(path_for(dialect), &body_for(dialect, &model, true))
            .await;
        assert_eq!(resp.status(), 200, "{dialect} {model}");
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        // Only the backup's stream reached the client: its bytes, one preamble, no error.
        let direct = h
            .http
            .post(h.sim_url(path_for(dialect)))
            .json(&body_for(dialect, "sim-fast", true))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let (without, _, _) = cut_comment(&text);
        assert_eq!(
            without.lines().count(),
            direct.lines().count(),
            "{dialect} {model}: {text}"
        );
        assert!(!text.contains("\"c1\"") && !text.contains("resp_1") && !text.contains("msg_1"));
        assert!(
            !text.contains("timeout") && !text.contains("overloaded"),
            "{text}"
        );
        let row = h.row(&id).await;
        assert_eq!(
            (row["outcome"].as_str(), row["failover_count"].as_u64()),
            (Some("completed"), Some(1)),
            "{dialect} {model}: {row}"
        );
        let a = row["attempts"].as_array().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0]["error_class"], class, "{dialect} {model}: {row}");
        assert_eq!(a[0]["won"], false);
        assert_eq!(
            (a[1]["won"].as_bool(), a[1]["role"].as_str()),
            (Some(true), Some("failover"))
        );
        let waited = a[0]["end_ms"].as_f64().unwrap() - a[0]["start_ms"].as_f64().unwrap();
        // Real sockets on a shared 2-core machine: a deadline never fires early, but the
        // scheduler may make it late. Its exact instant is proved under paused time in
        // exact_deadlines.rs; here the upper bound only says it fired, not hung.
        assert!(
            waited >= after && waited < after + 500.0,
            "{dialect} {model}: {kind:?} fired after {waited} ms"
        );
        if model.starts_with("preamble") {
            assert!(a[0]["first_byte_ms"].is_number(), "{row}");
        }
        // ttft is the winning attempt's, from its own dispatch.
        let ttft = row["ttft_ms"].as_f64().unwrap();
        let own = a[1]["first_byte_ms"].as_f64().unwrap() - a[1]["start_ms"].as_f64().unwrap();
        assert!((ttft - own).abs() < 0.002, "{ttft} vs {own}");
    }
    h.stop().await;
}

#[tokio::test]
async fn a_race_winner_that_then_misses_its_first_output_fails_over_on_a_hedged_route() {
    let stuck = sse_upstream(preamble("chat"), false).await;
    let h = start_with(|cfg, sim| {
        let mut first = channel("stuck", &stuck, &["m"]);
        first.circuit.consecutive_failures = 1000;
        cfg.channels.push(first);
        cfg.channels.push(backup("backup", sim, "m"));
        let mut r = route("m", |t| t.first_output_ms = 300);
        r.hedge = Some(laptime_proxy::config::HedgeConfig {
            after_ms: Some(1_000),
            after: None,
            budget: 1.0,
        });
        cfg.routes.push(r);
    })
    .await;
    let resp = h.post(path_for("chat"), &body_for("chat", "m", true)).await;
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    let text = resp.text().await.unwrap();
    assert!(
        !text.contains("\"c1\"") && !text.contains("timeout"),
        "{text}"
    );
    let row = h.row(&id).await;
    let a = row["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 2, "{row}");
    assert_eq!(
        (
            a[0]["channel"].as_str(),
            a[0]["error_class"].as_str(),
            a[0]["won"].as_bool()
        ),
        (Some("stuck"), Some("timeout"), Some(false))
    );
    assert_eq!(
        (a[1]["channel"].as_str(), a[1]["won"].as_bool()),
        (Some("backup"), Some(true))
    );
    assert_eq!(
        (
            row["outcome"].as_str(),
            row["failover_count"].as_u64(),
            row["hedge"].as_str()
        ),
        (Some("completed"), Some(1), Some("none"))
    );
    h.stop().await;
}

/// A listener whose accept queue is full and never drained: the kernel drops further SYNs, so a
/// connect to it hangs until the client gives up — a connect timeout on 127.0.0.1.
async fn unreachable_upstream() -> (String, tokio::net::TcpListener, Vec<std::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..16 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => held.push(s),
            Err(_) => return (format!("http://{addr}"), listener, held),
        }
    }
    panic!("the accept queue of {addr} never filled");
}

#[tokio::test]
async fn the_connect_timeout_fails_over_and_alone_is_a_504_of_kind_connect() {
    let (hung, _listener, _held) = unreachable_upstream().await;
    let h = start_with(|cfg, sim| {
        let mut first = channel("hung", &hung, &["m", "only-hung"]);
        first.circuit.consecutive_failures = 1000;
        cfg.channels.push(first);
        cfg.channels.push(backup("backup", sim, "m"));
        cfg.routes.push(route("*", |t| t.connect_ms = Some(250)));
    })
    .await;
    let resp = h.post(path_for("chat"), &body_for("chat", "m", true)).await;
    assert_eq!(resp.status(), 200);
    let row = h.row(&request_id(&resp)).await;
    let a = row["attempts"].as_array().unwrap();
    assert_eq!(
        (a[0]["channel"].as_str(), a[0]["error_class"].as_str()),
        (Some("hung"), Some("connect_timeout")),
        "{row}"
    );
    assert_eq!(
        (row["outcome"].as_str(), row["failover_count"].as_u64()),
        (Some("completed"), Some(1))
    );

    let resp = h
        .post(
            path_for("messages"),
            &body_for("messages", "only-hung", true),
        )
        .await;
    assert_eq!(resp.status(), 504);
    let row = h.row(&request_id(&resp)).await;
    assert_eq!(
        (
            row["outcome"].as_str(),
            row["timeout_kind"].as_str(),
            row["error_class"].as_str()
        ),
        (Some("timeout"), Some("connect"), Some("connect_timeout")),
        "{row}"
    );
    assert!(row["ttft_ms"].is_null() && row["upstream_ms"].is_null());
    h.stop().await;
}

#[tokio::test]
async fn a_tls_failure_fails_over_to_the_next_channel() {
    let h = start_with(|cfg, sim| {
        // The sim speaks plain HTTP, so a TLS handshake with it fails.
        let tls = sim.replace("http://", "https://");
        cfg.channels.push(mapped("tls", &tls, "m"));
        cfg.channels.push(backup("backup", sim, "m"));
    })
    .await;
    for dialect in DIALECTS {
        let resp = h
            .post(path_for(dialect), &body_for(dialect, "m", true))
            .await;
        assert_eq!(resp.status(), 200, "{dialect}");
        let row = h.row(&request_id(&resp)).await;
        let a = row["attempts"].as_array().unwrap();
        assert_eq!(
            (a[0]["channel"].as_str(), a[0]["error_class"].as_str()),
            (Some("tls"), Some("tls")),
            "{row}"
        );
        assert_eq!(
            (row["channel"].as_str(), row["failover_count"].as_u64()),
            (Some("backup"), Some(1))
        );
    }
    h.stop().await;
}
