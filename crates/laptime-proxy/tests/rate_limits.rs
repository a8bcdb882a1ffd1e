//! Rate limits of tokens and workspaces over real sockets: each kind refuses with 429 in the
//! client's dialect (status, `Retry-After`, the dialect's own headers, body shape), records
//! `rate_limited` with the limit that refused, never reaches an upstream, and a token estimate
//! charged at admission is settled with what the request used.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod common;

use std::time::Duration;

use common::*;
use laptime_core::limit::Limits;
use laptime_store::auth;
use serde_json::{json, Value};

async fn default_workspace(h: &Harness) -> String {
    h.store.workspace(auth::DEFAULT_WORKSPACE).await.unwrap().id
}

/// One call in `dialect` with `token` (Gemini's key in its own header): the response.
async fn call(h: &Harness, dialect: &str, token: &str, body: &Value) -> reqwest::Response {
    let req = if dialect == "gemini" {
        h.http
            .post(h.url("/v1beta/models/sim-fast:generateContent"))
            .header("x-goog-api-key", token)
    } else {
        h.http.post(h.url(path_for(dialect))).bearer_auth(token)
    };
    req.json(body).send().await.unwrap()
}

fn body_in(dialect: &str, model: &str, stream: bool) -> Value {
    match dialect {
        "gemini" => json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}),
        d => body_for(d, model, stream),
    }
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn a_request_over_a_tokens_requests_per_minute_is_refused_in_each_dialects_shape() {
    let h = start().await;
    let ws = default_workspace(&h).await;
    for dialect in ["chat", "responses", "messages", "gemini"] {
        let (key, token) = h.proxy_token();
        let one = Limits {
            rpm: Some(1),
            ..Limits::default()
        };
        h.store
            .set_limits(&ws, Some(&key), one, laptime_proxy::clock::now_unix_us())
            .await
            .unwrap();
        let body = body_in(dialect, "sim-fast", false);
        let first = call(&h, dialect, &token, &body).await;
        assert_eq!(first.status(), 200, "{dialect}");
        first.text().await.unwrap();
        let upstream_before = h.sim_stats().await["requests"].clone();

        let refused = call(&h, dialect, &token, &body).await;
        assert_eq!(refused.status(), 429, "{dialect}");
        // One request a minute: the next fits in a minute.
        let after: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
        assert!((59..=60).contains(&after), "{dialect}: retry-after {after}");
        match dialect {
            "chat" | "responses" => {
                assert_eq!(header(&refused, "x-ratelimit-limit-requests"), Some("1"));
                assert_eq!(
                    header(&refused, "x-ratelimit-remaining-requests"),
                    Some("0")
                );
                let reset = header(&refused, "x-ratelimit-reset-requests").unwrap();
                assert!(reset.ends_with('s') && reset.len() > 1, "{reset}");
            }
            "messages" => {
                assert_eq!(
                    header(&refused, "anthropic-ratelimit-requests-limit"),
                    Some("1")
                );
                assert_eq!(
                    header(&refused, "anthropic-ratelimit-requests-remaining"),
                    Some("0")
                );
                let reset = header(&refused, "anthropic-ratelimit-requests-reset").unwrap();
                assert!(reset.ends_with('Z') && reset.contains('T'), "{reset}");
            }
            _ => assert_eq!(header(&refused, "x-ratelimit-limit-requests"), None),
        }
        let id = header(&refused, "x-laptime-request-id")
            .unwrap()
            .to_string();
        let v: Value = refused.json().await.unwrap();
        match dialect {
            "chat" | "responses" => {
                assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
                assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{v}");
            }
            "messages" => {
                assert_eq!(v["type"], "error");
                assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
            }
            _ => {
                assert_eq!(v["error"]["code"], 429, "{v}");
                assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED", "{v}");
            }
        }
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("token_rpm"), "{message}");

        let row = h.row(&id).await;
        assert_eq!(row["outcome"], "rate_limited", "{dialect}");
        assert_eq!(row["status"], 429);
        assert_eq!(row["error_class"], "over_limit");
        assert_eq!(row["fault"], "client");
        assert_eq!(row["refused_by"], "token_rpm");
        assert_eq!(row["cost_usd"], 0.0);
        assert!(row["other"]["timing"]["admission_ms"].as_f64().is_some());
        assert_eq!(row["attempts"], json!([]));
        assert_eq!(
            h.sim_stats().await["requests"],
            upstream_before,
            "{dialect}: a refusal reaches no upstream"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn a_workspace_limit_binds_every_token_and_a_token_may_be_tighter() {
    let h = start().await;
    let ws = default_workspace(&h).await;
    let (_, a) = h.proxy_token();
    let (b_key, b) = h.proxy_token();
    let now = laptime_proxy::clock::now_unix_us();
    let three = Limits {
        rpm: Some(3),
        ..Limits::default()
    };
    let one = Limits {
        rpm: Some(1),
        ..Limits::default()
    };
    h.store.set_limits(&ws, None, three, now).await.unwrap();
    h.store
        .set_limits(&ws, Some(&b_key), one, now)
        .await
        .unwrap();
    let body = body_for("chat", "sim-fast", false);
    let mut statuses = Vec::new();
    for token in [&b, &b, &a, &a, &a] {
        let r = call(&h, "chat", token, &body).await;
        let refused_by = if r.status() == 429 {
            let id = header(&r, "x-laptime-request-id").unwrap().to_string();
            Some(h.row(&id).await["refused_by"].as_str().unwrap().to_string())
        } else {
            r.text().await.unwrap();
            None
        };
        statuses.push(refused_by);
    }
    assert_eq!(
        statuses,
        [
            None,
            Some("token_rpm".into()),
            None,
            None,
            // B's refusal took nothing from the workspace: A got the other two of its three.
            Some("workspace_rpm".into()),
        ]
    );
    h.stop().await;
}

#[tokio::test]
async fn requests_in_flight_are_limited_and_a_place_frees_when_one_ends() {
    let h = start().await;
    let ws = default_workspace(&h).await;
    let (key, token) = h.proxy_token();
    let one = Limits {
        concurrent: Some(1),
        ..Limits::default()
    };
    h.store
        .set_limits(&ws, Some(&key), one, laptime_proxy::clock::now_unix_us())
        .await
        .unwrap();
    // A stream that stalls after its 20th delta: in flight until the client leaves.
    let held = call(
        &h,
        "chat",
        &token,
        &body_for("chat", "sim-stall-after-20", true),
    )
    .await;
    assert_eq!(held.status(), 200);
    let refused = call(&h, "chat", &token, &body_for("chat", "sim-fast", false)).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after"), Some("1"));
    let v: Value = refused.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("token_concurrent"),
        "{v}"
    );
    drop(held);
    // The client left: once the gateway has recorded it, its place is free.
    let mut admitted = false;
    for _ in 0..200 {
        let r = call(&h, "chat", &token, &body_for("chat", "sim-fast", false)).await;
        if r.status() == 200 {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted, "the place was never given back");
    h.stop().await;
}

#[tokio::test]
async fn a_token_estimate_is_settled_with_the_real_usage_and_an_oversized_one_never_fits() {
    let h = start().await;
    let ws = default_workspace(&h).await;
    let (key, token) = h.proxy_token();
    let tpm = Limits {
        tpm: Some(3_000),
        ..Limits::default()
    };
    h.store
        .set_limits(&ws, Some(&key), tpm, laptime_proxy::clock::now_unix_us())
        .await
        .unwrap();
    // Each asks for up to 2,000 output tokens and uses about 26 (sim-fast: 10 in, 16 out).
    let mut body = body_for("messages", "sim-fast", false);
    body["max_tokens"] = json!(2_000);
    for i in 0..4 {
        let r = call(&h, "messages", &token, &body).await;
        assert_eq!(r.status(), 200, "request {i}: the estimate was given back");
        let id = header(&r, "x-laptime-request-id").unwrap().to_string();
        r.text().await.unwrap();
        // Settled when recorded: wait for the row so the next admission sees it.
        h.row(&id).await;
    }
    // More than a minute's worth on its own never fits: no retry time is promised.
    body["max_tokens"] = json!(5_000);
    let never = call(&h, "messages", &token, &body).await;
    assert_eq!(never.status(), 429);
    assert_eq!(header(&never, "retry-after"), None, "it never fits");
    assert_eq!(
        header(&never, "anthropic-ratelimit-tokens-limit"),
        Some("3000")
    );
    let v: Value = never.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceed this token's limit of 3000 tokens per minute"),
        "{v}"
    );
    h.stop().await;
}

#[tokio::test]
async fn limits_set_through_graphql_apply_at_once_and_read_back() {
    let h = start().await;
    let ws = default_workspace(&h).await;
    let (key, token) = h.proxy_token();
    let body = body_for("chat", "sim-fast", false);
    // Used once without limits: the gateway has the token's principal cached.
    call(&h, "chat", &token, &body).await.text().await.unwrap();
    let (status, v) = h
        .gql(
            &h.token,
            "mutation($ws: ID!, $key: ID!) { setLimits(workspaceId: $ws, keyId: $key, rpm: 1) {
                keyId rpm tpm concurrent } }",
            json!({"ws": ws, "key": key}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["setLimits"]["rpm"], 1, "{v}");
    assert_eq!(v["data"]["setLimits"]["tpm"], Value::Null);
    let r = call(&h, "chat", &token, &body).await;
    assert_eq!(r.status(), 200);
    r.text().await.unwrap();
    assert_eq!(call(&h, "chat", &token, &body).await.status(), 429);

    // Left out keeps, null removes.
    let (_, v) = h
        .gql(
            &h.token,
            "mutation($ws: ID!, $key: ID!) { setLimits(workspaceId: $ws, keyId: $key, concurrent: 4) { rpm concurrent } }",
            json!({"ws": ws, "key": key}),
        )
        .await;
    assert_eq!(v["data"]["setLimits"], json!({"rpm": 1, "concurrent": 4}));
    let (_, v) = h
        .gql(
            &h.token,
            "query($ws: ID!) { limits(workspaceId: $ws) { keyId rpm concurrent } }",
            json!({"ws": ws}),
        )
        .await;
    assert_eq!(
        v["data"]["limits"],
        json!([{"keyId": key, "rpm": 1, "concurrent": 4}])
    );
    let (_, v) = h
        .gql(
            &h.token,
            "mutation($ws: ID!, $key: ID!) { setLimits(workspaceId: $ws, keyId: $key, rpm: null) { rpm concurrent } }",
            json!({"ws": ws, "key": key}),
        )
        .await;
    assert_eq!(
        v["data"]["setLimits"],
        json!({"rpm": null, "concurrent": 4})
    );
    let (_, v) = h
        .gql(
            &h.token,
            "mutation($ws: ID!) { setLimits(workspaceId: $ws, rpm: 0) { rpm } }",
            json!({"ws": ws}),
        )
        .await;
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("at least 1"),
        "{v}"
    );
    // A proxy token reads no limits, and a read token of another workspace sees none of these.
    let (_, v) = h
        .gql(
            &token,
            "query($ws: ID!) { limits(workspaceId: $ws) { rpm } }",
            json!({"ws": ws}),
        )
        .await;
    assert!(v["errors"].is_array(), "{v}");
    h.stop().await;
}

#[tokio::test]
async fn every_answer_a_limit_applies_to_carries_the_dialects_headers_streamed_or_not() {
    let h = start().await;
    let ws = default_workspace(&h).await;
    for dialect in ["chat", "responses", "messages", "gemini"] {
        let (key, token) = h.proxy_token();
        let limits = Limits {
            rpm: Some(10),
            tpm: Some(100_000),
            ..Limits::default()
        };
        h.store
            .set_limits(&ws, Some(&key), limits, laptime_proxy::clock::now_unix_us())
            .await
            .unwrap();
        for (i, stream) in [false, true].into_iter().enumerate() {
            let r = call(&h, dialect, &token, &body_in(dialect, "sim-fast", stream)).await;
            assert_eq!(r.status(), 200, "{dialect} stream={stream}");
            let left = (9 - i).to_string();
            let tokens_left = |v: Option<&str>| -> u64 { v.unwrap().parse().unwrap() };
            match dialect {
                "chat" | "responses" => {
                    assert_eq!(header(&r, "x-ratelimit-limit-requests"), Some("10"));
                    assert_eq!(
                        header(&r, "x-ratelimit-remaining-requests"),
                        Some(left.as_str()),
                        "{dialect} stream={stream}"
                    );
                    assert!(header(&r, "x-ratelimit-reset-requests").is_some());
                    assert_eq!(header(&r, "x-ratelimit-limit-tokens"), Some("100000"));
                    let t = tokens_left(header(&r, "x-ratelimit-remaining-tokens"));
                    // Charged the input's tokens and the configured output estimate.
                    assert!((90_000..100_000 - 1_024).contains(&t), "{dialect}: {t}");
                    assert!(header(&r, "x-ratelimit-reset-tokens").is_some());
                }
                "messages" => {
                    assert_eq!(header(&r, "anthropic-ratelimit-requests-limit"), Some("10"));
                    assert_eq!(
                        header(&r, "anthropic-ratelimit-requests-remaining"),
                        Some(left.as_str())
                    );
                    assert!(header(&r, "anthropic-ratelimit-requests-reset")
                        .is_some_and(|v| v.ends_with('Z')));
                    assert_eq!(
                        header(&r, "anthropic-ratelimit-tokens-limit"),
                        Some("100000")
                    );
                    let t = tokens_left(header(&r, "anthropic-ratelimit-tokens-remaining"));
                    assert!(t < 100_000, "{t}");
                    assert!(header(&r, "anthropic-ratelimit-tokens-reset").is_some());
                }
                // Google sends no rate-limit headers, and neither does the gateway in its
                // dialect.
                _ => {
                    assert_eq!(header(&r, "x-ratelimit-limit-requests"), None);
                    assert_eq!(header(&r, "anthropic-ratelimit-requests-limit"), None);
                }
            }
            r.bytes().await.unwrap();
        }
    }
    // A token without limits gets none of them.
    let (_, free) = h.proxy_token();
    let r = call(&h, "chat", &free, &body_in("chat", "sim-fast", false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-ratelimit-limit-requests"), None);
    h.stop().await;
}

#[tokio::test]
async fn admissions_redis_did_not_answer_are_counted_and_decided_here() {
    // Port 1 on the loopback: nothing listens, every connection is refused at once.
    let h = start_with(|cfg, _| cfg.shared.redis_url = Some("redis://127.0.0.1:1".into())).await;
    let ws = default_workspace(&h).await;
    assert!(h
        .metrics()
        .await
        .contains("\nlaptime_limits_shared_fallback_total 0\n"));
    let (key, token) = h.proxy_token();
    let one = Limits {
        rpm: Some(1),
        ..Limits::default()
    };
    h.store
        .set_limits(&ws, Some(&key), one, laptime_proxy::clock::now_unix_us())
        .await
        .unwrap();
    let body = body_in("chat", "sim-fast", false);
    assert_eq!(call(&h, "chat", &token, &body).await.status(), 200);
    // This instance's own window still limits.
    assert_eq!(call(&h, "chat", &token, &body).await.status(), 429);
    let metrics = h.metrics().await;
    assert!(
        metrics.contains("\nlaptime_limits_shared_fallback_total 2\n"),
        "{metrics}"
    );
    h.stop().await;
}
