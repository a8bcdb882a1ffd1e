//! The relay end to end over real sockets: gateway + sim in all three dialects, streamed and
//! not, checked byte for byte and against the stored row.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn comment_pairs(line: &str) -> HashMap<String, String> {
    laptime_core::views::parse_comment(line)
        .unwrap()
        .into_iter()
        .collect()
}

#[tokio::test]
async fn streamed_bytes_are_the_upstream_bytes_plus_one_comment_before_the_terminal_frame() {
    let h = start().await;
    for dialect in DIALECTS {
        let body = body_for(dialect, "sim-fast", true);
        let direct = h
            .http
            .post(h.sim_url(path_for(dialect)))
            .json(&body)
            .send()
            .await
            .unwrap();
        let direct = direct.text().await.unwrap();
        let resp = h.post(path_for(dialect), &body).await;
        assert_eq!(resp.status(), 200, "{dialect}");
        assert_eq!(
            resp.headers()["content-type"],
            "text/event-stream",
            "{dialect}"
        );
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        let (without, comment, after) = cut_comment(&text);
        assert_eq!(
            unnumbered(&without),
            unnumbered(&direct),
            "{dialect}: relayed bytes differ from the upstream's"
        );
        assert!(
            after.starts_with(terminal_for(dialect)),
            "{dialect}: comment not before the terminal frame"
        );

        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "completed", "{dialect}");
        assert_eq!(row["dialect"], dialect);
        assert_eq!(row["stream"], true);
        let pairs = comment_pairs(&comment);
        assert!(
            same_number(pairs.get("upstream_ms"), &row["upstream_ms"]),
            "{dialect}: {comment} vs {row}"
        );
        assert!(
            same_number(pairs.get("ttft_ms"), &row["ttft_ms"]),
            "{dialect}"
        );
        assert!(
            same_number(pairs.get("cached_tokens"), &row["cache_read_tokens"]),
            "{dialect}"
        );
        assert!(
            same_number(pairs.get("cache_write_tokens"), &row["cache_write_tokens"]),
            "{dialect}"
        );
        assert_eq!(pairs.get("hedge").map(String::as_str), Some("none"));
        assert_eq!(row["output_tokens"], 16, "{dialect}");
        assert_eq!(row["text_delta_count"], 16, "{dialect}");
        assert!(
            row["other"]["timing"]["first_text_delta_ms"].is_number(),
            "{dialect}"
        );
        assert_eq!(row["attempts"][0]["won"], true);
        assert_eq!(
            row["bytes_out"],
            text.len(),
            "{dialect}: every byte the client got"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn with_observation_off_the_bytes_pass_blind_and_the_row_says_so() {
    let h = start_with(|c, _| c.server.observe = false).await;
    for dialect in DIALECTS {
        let body = body_for(dialect, "sim-fast", true);
        let direct = h
            .http
            .post(h.sim_url(path_for(dialect)))
            .json(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let resp = h.post(path_for(dialect), &body).await;
        assert_eq!(resp.status(), 200, "{dialect}");
        let id = request_id(&resp);
        assert_eq!(
            unnumbered(&resp.text().await.unwrap()),
            unnumbered(&direct),
            "{dialect}: no comment"
        );
        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "completed", "{dialect}");
        assert!(row["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("unobserved")));
        assert!(row["ttft_ms"].is_null(), "{dialect}: {row}");
        assert!(row["upstream_ms"].is_number(), "{dialect}: {row}");
        assert!(row["other"]["timing"]["first_text_delta_ms"].is_null());
        assert_eq!(row["event_count"], 0, "{dialect}");
    }
    h.stop().await;
}

#[tokio::test]
async fn non_streamed_answers_are_relayed_whole_with_server_timing() {
    let h = start().await;
    for dialect in DIALECTS {
        let body = body_for(dialect, "sim-fast", false);
        let direct = h
            .http
            .post(h.sim_url(path_for(dialect)))
            .json(&body)
            .send()
            .await
            .unwrap();
        let direct = direct.bytes().await.unwrap();
        let resp = h.post(path_for(dialect), &body).await;
        assert_eq!(resp.status(), 200);
        let id = request_id(&resp);
        let timing = resp.headers()["server-timing"]
            .to_str()
            .unwrap()
            .to_string();
        let got = resp.bytes().await.unwrap();
        assert_eq!(
            unnumbered(&String::from_utf8_lossy(&got)),
            unnumbered(&String::from_utf8_lossy(&direct)),
            "{dialect}"
        );
        let row = h.row(&id).await;
        let dur = timing
            .strip_prefix("upstream;dur=")
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        assert!(
            same_number(Some(&dur.to_string()), &row["upstream_ms"]),
            "{timing} vs {}",
            row["upstream_ms"]
        );
        assert_eq!(row["outcome"], "completed");
        assert_eq!(row["stream"], false);
        assert_eq!(row["output_tokens"], 16);
        assert_eq!(row["bytes_out"], got.len(), "{dialect}");
        assert!(row["other"]["timing"]["first_sse_event_ms"].is_null());
    }
    h.stop().await;
}

#[tokio::test]
async fn trailers_carry_the_comment_values_when_the_client_sends_te_trailers() {
    use http_body_util::BodyExt;
    let h = start().await;
    let stream = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let body = body_for("messages", "sim-fast", true).to_string();
    let req = http::Request::post("/v1/messages")
        .header("host", h.addr.to_string())
        .header("authorization", format!("Bearer {}", h.token))
        .header("content-type", "application/json")
        .header("te", "trailers")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().expect("trailers were sent");
    let text = String::from_utf8(collected.to_bytes().to_vec()).unwrap();
    let (_, comment, _) = cut_comment(&text);
    let pairs = comment_pairs(&comment);
    assert_eq!(
        trailers["x-laptime-upstream-ms"].to_str().unwrap(),
        pairs["upstream_ms"]
    );
    assert_eq!(
        trailers["x-laptime-ttft-ms"].to_str().unwrap(),
        pairs["ttft_ms"]
    );
    assert_eq!(trailers["x-laptime-hedge"].to_str().unwrap(), "none");
    h.stop().await;
}

#[tokio::test]
async fn a_refused_upstream_connection_is_a_502_with_null_ttft_and_upstream() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let h = start_with(|cfg, _| {
        let mut dead = channel("dead", &dead, &["dead-model"]);
        // Each request asks the only channel three times: keep the circuit out of this test.
        dead.circuit.consecutive_failures = 1000;
        cfg.channels.push(dead)
    })
    .await;
    for dialect in DIALECTS {
        let resp = h
            .post(path_for(dialect), &body_for(dialect, "dead-model", true))
            .await;
        assert_eq!(resp.status(), 502, "{dialect}");
        let id = request_id(&resp);
        let err: Value = resp.json().await.unwrap();
        if dialect == "messages" {
            assert_eq!(err["type"], "error");
            assert_eq!(err["error"]["type"], "api_error");
        } else {
            assert_eq!(err["error"]["type"], "api_error");
        }
        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "upstream_error");
        assert!(row["ttft_ms"].is_null(), "{row}");
        assert!(row["upstream_ms"].is_null(), "{row}");
        // The only channel was asked again after a backoff, up to max_attempts.
        let attempts = row["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 3, "{row}");
        assert!(attempts
            .iter()
            .all(|a| a["error_class"] == "connect_failed" && a["channel"] == "dead"));
        assert_eq!(row["classification"], "failed");
    }
    h.stop().await;
}

#[tokio::test]
async fn a_close_without_terminal_event_is_told_in_band_and_recorded_as_closed_early() {
    let h = start().await;
    for dialect in DIALECTS {
        let mut body = body_for(dialect, "sim-fast", true);
        body["laptime_sim"] = json!({"text_tokens": 5, "end": "close"});
        let resp = h.post(path_for(dialect), &body).await;
        let id = request_id(&resp);
        let text = resp.text().await.unwrap();
        assert!(
            !text.contains("x-laptime-timing"),
            "{dialect}: no terminal frame, no comment"
        );
        // The deltas as sent, then the dialect's error event as the last thing before the close.
        let last = text.trim_end().rsplit("\n\n").next().unwrap();
        assert!(
            last.contains("\"upstream_closed_early\"")
                || last.contains("closed the stream before it was complete"),
            "{dialect}: {text}"
        );
        assert_eq!(text.matches("closed the stream before").count(), 1);
        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "upstream_closed_early", "{dialect}");
        assert_eq!(row["error_class"], "closed_early");
        assert!(row["upstream_ms"].is_number());
        assert_eq!(row["classification"], "failed");
    }
    h.stop().await;
}

#[tokio::test]
async fn an_upstream_reset_is_told_in_band_and_recorded() {
    let h = start().await;
    let mut body = body_for("chat", "sim-fast", true);
    body["laptime_sim"] = json!({"text_tokens": 5, "end": "reset"});
    let resp = h.post(path_for("chat"), &body).await;
    let id = request_id(&resp);
    // The client must see the break: the dialect's error event ends the stream.
    let text = resp.text().await.unwrap();
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("data: {\"error\""), "{text}");
    assert!(last.contains("connection broke"), "{text}");
    let row = h.row(&id).await;
    assert_eq!(row["outcome"], "upstream_closed_early");
    assert_eq!(row["error_class"], "body_error");
    h.stop().await;
}

#[tokio::test]
async fn a_client_leaving_mid_stream_is_cancelled_and_the_upstream_call_is_dropped() {
    let h = start().await;
    for dialect in DIALECTS {
        let before = h.sim_stats().await["streams_dropped"].as_u64().unwrap();
        let mut resp = h
            .post(path_for(dialect), &body_for(dialect, "sim-trace-c", true))
            .await;
        let id = request_id(&resp);
        // Wait for real output, then go away.
        let mut seen = String::new();
        while !seen.contains("delta") {
            let chunk = resp.chunk().await.unwrap().expect("stream open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        drop(resp);
        // The gateway drops the upstream call (its connection closed, not pooled): the sim sees
        // its stream dropped. That it happens at the same instant is proved under paused time
        // (exact_deadlines.rs); here, over real sockets, only that it happens.
        let left = tokio::time::Instant::now();
        let mut dropped = before;
        while dropped == before && left.elapsed() < Duration::from_secs(2) {
            dropped = h.sim_stats().await["streams_dropped"].as_u64().unwrap();
        }
        assert!(
            dropped > before,
            "{dialect}: the upstream stream was not dropped"
        );
        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "client_cancelled", "{dialect}");
        assert!(
            row["upstream_ms"].is_null(),
            "{dialect}: no terminal event, no upstream done"
        );
        assert!(row["ttft_ms"].is_number());
        assert!(
            row["event_count"].as_u64().unwrap() >= 1,
            "the counts seen so far are kept"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn bad_input_gets_the_dialects_error_shape_and_a_row() {
    let h = start_with(|cfg, _| cfg.server.max_body_bytes = 4096).await;
    let cases: Vec<(&str, Option<&str>, Vec<u8>, u16)> = vec![
        (
            "chat",
            None,
            body_for("chat", "sim-fast", false).to_string().into_bytes(),
            401,
        ),
        (
            "messages",
            Some("lt_0000000000000000000000000000000000000000000000000000000000000000"),
            body_for("messages", "sim-fast", false)
                .to_string()
                .into_bytes(),
            401,
        ),
        (
            "chat",
            Some("T"),
            body_for("chat", "no-such-model", false)
                .to_string()
                .into_bytes(),
            404,
        ),
        (
            "messages",
            Some("T"),
            body_for("messages", "no-such-model", false)
                .to_string()
                .into_bytes(),
            404,
        ),
        ("responses", Some("T"), b"{not json".to_vec(), 400),
        ("chat", Some("T"), b"{\"stream\":true}".to_vec(), 400),
        ("messages", Some("T"), vec![b' '; 5000], 413),
    ];
    for (dialect, token, body, status) in cases {
        let mut req = h
            .http
            .post(h.url(path_for(dialect)))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            let t = if t == "T" {
                h.token.clone()
            } else {
                t.to_string()
            };
            req = req.header("x-api-key", t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), status, "{dialect} {status}");
        let id = request_id(&resp);
        let err: Value = resp.json().await.unwrap();
        let message = if dialect == "messages" {
            assert_eq!(err["type"], "error", "{err}");
            err["error"]["message"].as_str().unwrap().to_string()
        } else {
            err["error"]["message"].as_str().unwrap().to_string()
        };
        assert!(!message.is_empty());
        // Every request gets its row, even one whose token was refused.
        let mut found = None;
        for _ in 0..300 {
            let id2 = id.clone();
            found = h
                .store
                .with_conn(move |c| {
                    Ok(laptime_store::records::stored(c, &id2)?
                        .map(|r| (r.outcome.as_str().to_string(), r.status)))
                })
                .unwrap();
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            found,
            Some(("rejected".to_string(), status)),
            "{dialect} {status}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn nothing_in_the_request_can_redirect_the_upstream_and_the_body_goes_as_sent() {
    let h = start().await;
    let raw = br#"{"model":"sim-fast","api_base":"http://127.0.0.1:1","base_url":"http://127.0.0.1:1","extra":{"base_url":"http://127.0.0.1:1","api_base":"http://127.0.0.1:1"},"messages":[{"role":"user","content":"hi"}]}"#;
    let resp = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(&h.token)
        .header("content-type", "application/json")
        .header("host", "127.0.0.1:1")
        .header("x-forwarded-host", "127.0.0.1:1")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .body(raw.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp_id = request_id(&resp);
    assert_eq!(
        resp.headers()["x-sim-body-sha256"].to_str().unwrap(),
        hex::encode(Sha256::digest(raw))
    );
    let last = h.last_sim_request().await;
    assert_eq!(last["path"], "/v1/chat/completions");
    // The client's trace continues upstream with a new span, and the row keeps the trace id.
    let tp = last["traceparent"].as_str().unwrap();
    assert!(
        tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && !tp.contains("00f067aa0ba902b7"),
        "{tp}"
    );
    let row = h.row(resp_id.as_str()).await;
    assert_eq!(row["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    // The client's own token never goes upstream.
    assert!(!last.to_string().contains(&h.token));
    h.stop().await;
}

#[tokio::test]
async fn a_mapped_model_name_is_the_only_byte_change() {
    let h = start_with(|cfg, sim| {
        let mut c = channel("alias", sim, &[]);
        c.models = laptime_proxy::config::Models::Map(
            [("fast-alias".to_string(), "sim-fast".to_string())].into(),
        );
        cfg.channels.push(c);
    })
    .await;
    let raw = br#"{"model" : "fast-alias", "input":"hi"}"#;
    let resp = h
        .http
        .post(h.url("/v1/responses"))
        .bearer_auth(&h.token)
        .body(raw.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let expected = br#"{"model" : "sim-fast", "input":"hi"}"#;
    assert_eq!(
        resp.headers()["x-sim-body-sha256"].to_str().unwrap(),
        hex::encode(Sha256::digest(expected))
    );
    h.stop().await;
}

#[tokio::test]
async fn h2c_clients_are_served() {
    let h = start().await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let resp = client
        .post(h.url("/v1/messages"))
        .bearer_auth(&h.token)
        .json(&body_for("messages", "sim-fast", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let (_, _, after) = cut_comment(&text);
    assert!(after.starts_with("event: message_stop"));
    h.stop().await;
}

#[tokio::test]
async fn the_request_log_lists_newest_first_and_validates_limit() {
    let h = start().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let resp = h
            .post("/v1/chat/completions", &body_for("chat", "sim-fast", false))
            .await;
        ids.push(request_id(&resp));
        let _ = resp.bytes().await;
    }
    h.row(ids.last().unwrap()).await;
    let list: Value = h
        .http
        .get(h.url("/api/requests?limit=2"))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let got: Vec<&str> = list["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec![ids[2].as_str(), ids[1].as_str()]);
    let row = &list["requests"][0];
    for key in [
        "created_at",
        "latency_ms",
        "ttft_ms",
        "upstream_ms",
        "classification",
        "flags",
        "attempts",
        "channel_inflight",
        "failover_count",
        "cached",
        "hedge",
    ] {
        assert!(row.get(key).is_some(), "missing {key}");
    }
    let bad = h
        .http
        .get(h.url("/api/requests?limit=0"))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let unauth = h.http.get(h.url("/api/requests")).send().await.unwrap();
    assert_eq!(unauth.status(), 401);
    h.stop().await;
}

#[tokio::test]
async fn a_stream_still_open_when_the_drain_time_ends_is_told_in_band_and_recorded_gateway_shutdown(
) {
    let h = start_with(|cfg, _| cfg.server.drain_s = 1).await;
    let store = h.store.clone();
    let mut ids = Vec::new();
    let mut open = Vec::new();
    for dialect in DIALECTS {
        let mut body = body_for(dialect, "sim-fast", true);
        // 100 deltas at 5 a second: 20 s, far past the drain time.
        body["laptime_sim"] = json!({"text_tokens": 100, "tokens_per_s": 5});
        let mut resp = h.post(path_for(dialect), &body).await;
        ids.push(request_id(&resp));
        let first = resp.chunk().await.unwrap().expect("the stream is open");
        open.push((dialect, resp, String::from_utf8_lossy(&first).to_string()));
    }
    let stopping = tokio::spawn(h.stop());
    for (dialect, mut resp, mut text) in open {
        while let Some(chunk) = resp.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        let last = text.trim_end().rsplit("\n\n").next().unwrap();
        assert!(
            last.contains("drain time ran out"),
            "{dialect}: the last event must say the gateway cut it: {text}"
        );
        assert!(
            !text.contains("x-laptime-timing"),
            "{dialect}: no terminal frame"
        );
    }
    stopping.await.unwrap();
    for id in ids {
        let outcome = store
            .with_conn(|c| laptime_store::records::stored(c, &id))
            .unwrap()
            .map(|r| r.outcome.as_str());
        assert_eq!(outcome, Some("gateway_shutdown"), "{id}");
    }
}
