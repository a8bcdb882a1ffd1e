//! The usage API over real sockets: GraphQL and REST read back what the gateway recorded, and no
//! token ever reads another workspace.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

pub mod common;
pub mod snapshot;

use snapshot::snapshot;

use std::time::Duration;

use common::*;
use laptime_store::auth::{self, Scope};
use serde_json::{json, Value};

struct Tenants {
    a: String,
    b: String,
    a_proxy: String,
    a_read: String,
    a_admin: String,
    b_read: String,
    b_proxy: String,
}

fn tenants(h: &Harness) -> Tenants {
    h.store
        .with_conn(|c| {
            let a = auth::find_workspace(c, auth::DEFAULT_WORKSPACE)?.unwrap();
            let b = auth::create_workspace(c, "team-b", laptime_proxy::clock::now_unix_us())?;
            Ok(Tenants {
                a_proxy: auth::create_token(
                    c,
                    &a.id,
                    Scope::Proxy,
                    laptime_proxy::clock::now_unix_us(),
                )?
                .token,
                a_read: auth::create_token(
                    c,
                    &a.id,
                    Scope::Read,
                    laptime_proxy::clock::now_unix_us(),
                )?
                .token,
                a_admin: h.token.clone(),
                b_read: auth::create_token(
                    c,
                    &b.id,
                    Scope::Read,
                    laptime_proxy::clock::now_unix_us(),
                )?
                .token,
                b_proxy: auth::create_token(
                    c,
                    &b.id,
                    Scope::Proxy,
                    laptime_proxy::clock::now_unix_us(),
                )?
                .token,
                a: a.id,
                b: b.id,
            })
        })
        .unwrap()
}

fn error_of(v: &Value) -> String {
    v["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Makes requests through the gateway with `token`; returns their request ids.
async fn traffic(h: &Harness, token: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let dialect = DIALECTS[i % 3];
        let r = h
            .http
            .post(h.url(path_for(dialect)))
            .bearer_auth(token)
            .json(&body_for(dialect, "sim-fast", i % 2 == 0))
            .send()
            .await
            .unwrap();
        ids.push(request_id(&r));
        r.bytes().await.unwrap();
    }
    ids
}

async fn wait_rows(h: &Harness, token: &str, n: usize) {
    for _ in 0..300 {
        let (_, v) = h
            .gql(
                token,
                "query($w: ID!) { recentRequests(workspaceId: $w, limit: 500) { requestId } }",
                json!({"w": "default"}),
            )
            .await;
        if v["data"]["recentRequests"].as_array().map(|a| a.len()) >= Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("rows did not arrive");
}

const RECENT: &str = "query($w: ID!, $n: Int) { recentRequests(workspaceId: $w, limit: $n) {
    requestId model provider channel group dialect stream status outcome fault classification flags ts
    latencyMs ttftMs upstreamMs cacheReadTokens cacheWriteTokens failoverCount cached inputTokens
    outputTokens reasoningTokens eventCount textDeltaCount channelInflight
    timing { authMs distributionMs bodyReadMs upstreamHeadersMs firstSseEventMs firstResponseMs
      firstTextDeltaMs upstreamDoneMs totalHandlerMs visibleOutputTps }
    attempts { channel role won status errorClass fault startMs headersMs firstByteMs endMs } } }";

const USAGE: &str = "query($w: ID!, $g: [GroupDimension!], $f: UsageFilterInput) {
    usage(workspaceId: $w, window: {last: \"1h\"}, groupBy: $g, filter: $f) {
      window { from to } percentileMethod relativeError
      rollup { requestCount errorCount errorRate cacheHitCount failoverTotal outputTokens
        classifications { classification count }
        latencyMs { p50 p95 p99 min max mean count nullCount }
        ttftMs { p50 count nullCount } upstreamMs { count nullCount } firstTextDeltaMs { count nullCount } }
      groups { key { dimension value } rollup { requestCount errorCount } }
      recent(limit: 5) { requestId ttftMs upstreamMs } } }";

/// Replaces ids, times and measured values with placeholders so the shape can be compared.
fn redact(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let redacted = if k == "requestId" || k == "ts" {
                        json!("<redacted>")
                    } else if (k.ends_with("Ms") || k.ends_with("Tps")) && v.is_number() {
                        json!("<ms>")
                    } else {
                        redact(v)
                    };
                    (k.clone(), redacted)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(redact).collect()),
        other => other.clone(),
    }
}

#[test]
fn the_graphql_schema_matches_its_snapshot() {
    snapshot("schema.graphql", &laptime_api::graphql::sdl());
}

#[tokio::test]
async fn graphql_reads_back_requests_and_usage_with_nulls_left_out() {
    let h = start_with(|cfg, _| {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead = format!("http://{}", closed.local_addr().unwrap());
        cfg.channels.push(channel("dead", &dead, &["dead-model"]));
    })
    .await;
    let ids = traffic(&h, &h.token, 6).await;
    // One failure before any response byte: counted, with null ttft and upstream.
    let r = h
        .post(
            "/v1/chat/completions",
            &body_for("chat", "dead-model", false),
        )
        .await;
    assert_eq!(r.status(), 502);
    wait_rows(&h, &h.token, 7).await;

    let (status, v) = h
        .gql(&h.token, RECENT, json!({"w": "default", "n": 1}))
        .await;
    assert_eq!(status, 200, "{v}");
    let event = &v["data"]["recentRequests"][0];
    assert_eq!(event["outcome"], "upstream_error");
    assert!(event["ttftMs"].is_null() && event["upstreamMs"].is_null());
    let (_, v) = h
        .gql(&h.token, RECENT, json!({"w": "default", "n": 7}))
        .await;
    let sixth = &v["data"]["recentRequests"][1];
    assert_eq!(sixth["requestId"], ids[5].as_str());
    snapshot("recent_request.json", &format!("{:#}\n", redact(sixth)));

    let (_, v) = h.gql(&h.token, "query($w: ID!, $r: ID!) { request(workspaceId: $w, requestId: $r) { requestId outputTokens } }", json!({"w": "default", "r": ids[0]})).await;
    assert_eq!(v["data"]["request"]["outputTokens"], 16);

    let (_, v) = h
        .gql(&h.token, USAGE, json!({"w": "default", "g": ["DIALECT"]}))
        .await;
    let u = &v["data"]["usage"];
    assert!(
        u["percentileMethod"]
            .as_str()
            .unwrap()
            .contains("nearest-rank"),
        "{v}"
    );
    let r = &u["rollup"];
    assert_eq!(r["requestCount"], 7);
    assert_eq!(r["errorCount"], 1);
    assert_eq!(r["outputTokens"], 6 * 16);
    assert_eq!(r["latencyMs"]["count"], 7, "latency is always present");
    assert_eq!(r["ttftMs"]["count"], 6);
    assert_eq!(r["ttftMs"]["nullCount"], 1);
    assert_eq!(
        r["firstTextDeltaMs"]["count"], 3,
        "only the streamed requests have a first text delta"
    );
    assert_eq!(r["firstTextDeltaMs"]["nullCount"], 4);
    assert!(r["latencyMs"]["p50"].as_f64().unwrap() <= r["latencyMs"]["p99"].as_f64().unwrap());
    let groups = u["groups"].as_array().unwrap();
    let chat = groups
        .iter()
        .find(|g| g["key"][0]["value"] == "chat")
        .unwrap();
    assert_eq!(chat["rollup"]["requestCount"], 3);
    assert_eq!(chat["rollup"]["errorCount"], 1);
    assert_eq!(u["recent"].as_array().unwrap().len(), 5);

    let (_, v) = h
        .gql(
            &h.token,
            USAGE,
            json!({"w": "default", "f": {"outcome": "upstream_error"}}),
        )
        .await;
    assert_eq!(v["data"]["usage"]["rollup"]["requestCount"], 1, "{v}");
    assert!(v["data"]["usage"]["recent"][0]["ttftMs"].is_null());
    h.stop().await;
}

#[tokio::test]
async fn no_token_reads_another_workspace_and_the_answer_is_that_of_a_missing_id() {
    let h = start().await;
    let t = tenants(&h);
    let b_ids = traffic(&h, &t.b_proxy, 2).await;
    traffic(&h, &t.a_proxy, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let queries = [
        (
            "recentRequests",
            "query($w: ID!) { recentRequests(workspaceId: $w) { requestId } }",
            json!({}),
        ),
        (
            "request",
            "query($w: ID!, $r: ID!) { request(workspaceId: $w, requestId: $r) { requestId } }",
            json!({"r": b_ids[0]}),
        ),
        (
            "usage",
            "query($w: ID!) { usage(workspaceId: $w) { rollup { requestCount } } }",
            json!({}),
        ),
        (
            "tokens",
            "query($w: ID!) { tokens(workspaceId: $w) { keyId } }",
            json!({}),
        ),
        (
            "createToken",
            "mutation($w: ID!) { createToken(workspaceId: $w, scope: READ) { token } }",
            json!({}),
        ),
        (
            "revokeToken",
            "mutation($w: ID!) { revokeToken(workspaceId: $w, keyId: \"key_x\") }",
            json!({}),
        ),
    ];
    for (name, q, extra) in &queries {
        let with = |w: &str| {
            let mut v = extra.clone();
            v["w"] = json!(w);
            v
        };
        // A read token: B's id answers exactly like an id that does not exist.
        let (_, other) = h.gql(&t.a_read, q, with(&t.b)).await;
        let (_, missing) = h.gql(&t.a_read, q, with("ws_doesnotexist")).await;
        assert!(
            other["data"].is_null() || other["data"][*name].is_null(),
            "{name}: {other}"
        );
        assert_eq!(error_of(&other), error_of(&missing), "{name}");
        assert!(
            !other.to_string().contains(&b_ids[0]),
            "{name} leaked B's data"
        );
        // A proxy token cannot read at all.
        let (_, proxy) = h.gql(&t.a_proxy, q, with(&t.a)).await;
        assert!(!error_of(&proxy).is_empty(), "{name}: {proxy}");
    }
    // Not workspace-scoped, but admin-only: creating workspaces.
    for token in [&t.a_read, &t.a_proxy] {
        let (_, v) = h
            .gql(
                token,
                "mutation { createWorkspace(name: \"evil\") { id } }",
                json!({}),
            )
            .await;
        assert!(error_of(&v).contains("cannot manage"), "{v}");
    }
    let (_, v) = h.gql(&t.a_read, "{ workspaces { id } }", json!({})).await;
    assert_eq!(
        v["data"]["workspaces"],
        json!([{"id": t.a}]),
        "a read token sees only its workspace"
    );
    // B's read token sees its own data.
    let (_, v) = h
        .gql(
            &t.b_read,
            "query($w: ID!) { recentRequests(workspaceId: $w) { requestId } }",
            json!({"w": t.b}),
        )
        .await;
    assert_eq!(v["data"]["recentRequests"].as_array().unwrap().len(), 2);
    // The admin scope manages and reads every workspace, by design.
    let (_, v) = h
        .gql(
            &t.a_admin,
            "query($w: ID!) { recentRequests(workspaceId: $w) { requestId } }",
            json!({"w": t.b}),
        )
        .await;
    assert_eq!(v["data"]["recentRequests"].as_array().unwrap().len(), 2);

    // REST: another workspace's request id is a 404 like a missing one.
    for route in [
        format!("/api/requests/{}", b_ids[0]),
        "/api/requests/req_missing".to_string(),
    ] {
        let r = h
            .http
            .get(h.url(&route))
            .bearer_auth(&t.a_read)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{route}");
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"error": {"message": "no such request"}})
        );
    }
    let list: Value = h
        .http
        .get(h.url("/api/requests"))
        .bearer_auth(&t.a_read)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        list["requests"].as_array().unwrap().len(),
        1,
        "A sees only its own rows"
    );
    let mine: Value = h
        .http
        .get(h.url("/api/usage"))
        .bearer_auth(&t.a_read)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        mine["rollup"]["request_count"], 1,
        "A's usage counts only A's requests"
    );
    for route in ["/api/requests", "/api/usage", "/metrics"] {
        let r = h
            .http
            .get(h.url(route))
            .bearer_auth(&t.a_proxy)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{route}");
    }
    h.stop().await;
}

#[tokio::test]
async fn revoked_and_malformed_tokens_get_401_quickly_with_no_data() {
    let h = start().await;
    let (_, v) = h
        .gql(
            &h.token,
            "mutation { createToken(workspaceId: \"default\", scope: READ) { keyId token } }",
            json!({}),
        )
        .await;
    let key = v["data"]["createToken"]["keyId"]
        .as_str()
        .unwrap()
        .to_string();
    let token = v["data"]["createToken"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, _) = h.gql(&token, "{ me { scope } }", json!({})).await;
    assert_eq!(s, 200);
    let (_, v) = h
        .gql(
            &h.token,
            "mutation($k: ID!) { revokeToken(workspaceId: \"default\", keyId: $k) }",
            json!({"k": key}),
        )
        .await;
    assert_eq!(v["data"]["revokeToken"], true, "{v}");
    let (s, v) = h.gql(&token, "{ me { scope } }", json!({})).await;
    assert_eq!(s, 401, "revocation takes effect on the next request: {v}");
    for bad in [
        "' OR 1=1 --",
        "lt_' OR 1=1 --",
        "",
        "lt_",
        &format!("lt_{}", "0".repeat(64)),
        &"x".repeat(10_000),
    ] {
        let r = h
            .http
            .post(h.url("/graphql"))
            .header("authorization", format!("Bearer {bad}"))
            .json(&json!({"query": "{ me { scope } }"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{bad:?}");
        assert!(!r.text().await.unwrap().contains("data"), "{bad:?}");
        let r = h
            .http
            .get(h.url("/api/requests"))
            .header("authorization", format!("Bearer {bad}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    h.stop().await;
}

#[tokio::test]
async fn deep_queries_are_refused_as_graphql_errors() {
    let h = start().await;
    let deep = "{ __schema { types { fields { type { ofType { ofType { ofType { ofType { ofType { ofType { name } } } } } } } } } } }";
    let (s, v) = h.gql(&h.token, deep, json!({})).await;
    assert_eq!(s, 200);
    assert!(error_of(&v).contains("nested too deep"), "{v}");
    let (_, v) = h
        .gql(
            &h.token,
            "{ recentRequests(workspaceId: \"default\", limit: 501) { requestId } }",
            json!({}),
        )
        .await;
    assert!(error_of(&v).contains("limit"), "{v}");
    let (_, v) = h
        .gql(
            &h.token,
            "{ usage(workspaceId: \"default\", window: {last: \"soon\"}) { window { from } } }",
            json!({}),
        )
        .await;
    assert!(error_of(&v).contains("window.last"), "{v}");
    h.stop().await;
}

#[tokio::test]
async fn rest_filters_and_usage_match_graphql() {
    let h = start().await;
    traffic(&h, &h.token, 6).await;
    wait_rows(&h, &h.token, 6).await;
    let get = |path: &str| {
        let req = h.http.get(h.url(path)).bearer_auth(&h.token);
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (s, v) = get("/api/requests?dialect=messages&stream=true").await;
    assert_eq!(s, 200);
    let rows = v["requests"].as_array().unwrap();
    assert!(
        !rows.is_empty()
            && rows
                .iter()
                .all(|r| r["dialect"] == "messages" && r["stream"] == true),
        "{v}"
    );
    let (s, _) = get("/api/requests?stream=maybe").await;
    assert_eq!(s, 400);
    let (s, v) = get("/api/usage?last=1h&group_by=dialect&recent=2").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["rollup"]["request_count"], 6);
    assert_eq!(v["groups"].as_array().unwrap().len(), 3);
    assert_eq!(v["recent"].as_array().unwrap().len(), 2);
    let (_, g) = h
        .gql(
            &h.token,
            "{ usage(workspaceId: \"default\") { rollup { requestCount latencyMs { p50 p99 } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        g["data"]["usage"]["rollup"]["latencyMs"]["p50"],
        v["rollup"]["latency_ms"]["p50"]
    );
    let (s, _) = get("/api/usage?group_by=colour").await;
    assert_eq!(s, 400);
    h.stop().await;
}

#[tokio::test]
async fn the_retention_job_deletes_rows_older_than_the_window_and_keeps_the_rest() {
    let h = start_with(|cfg, _| {
        cfg.store.retention_days = 30;
        cfg.store.retention_interval_s = 1;
    })
    .await;
    let ids = traffic(&h, &h.token, 2).await;
    wait_rows(&h, &h.token, 2).await;
    let old = ids[0].clone();
    h.store
        .with_conn(move |c| {
            c.execute(
                "UPDATE requests SET created_at_us = created_at_us - 31 * 86400000000 WHERE request_id = ?1",
                [laptime_store::stored_id::key(&old)],
            )?;
            Ok(())
        })
        .unwrap();
    let count = |id: String| {
        h.store
            .with_conn(move |c| {
                Ok(c.query_row(
                    "SELECT count(*) FROM requests WHERE request_id = ?1",
                    [laptime_store::stored_id::key(&id)],
                    |r| r.get::<_, i64>(0),
                )?)
            })
            .unwrap()
    };
    let mut gone = false;
    for _ in 0..40 {
        if count(ids[0].clone()) == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the aged row was not deleted");
    assert_eq!(count(ids[1].clone()), 1, "the recent row stays");
    // Attempts live in their request's row: nothing of the deleted request is left.
    let rows: i64 = h
        .store
        .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?))
        .unwrap();
    assert_eq!(rows, 1, "only the recent row is left");
    h.stop().await;
}

/// REST and GraphQL both return what the store keeps of a request's shape, its region, trace id
/// and last effective output, each classifier stage against its threshold, and exactly what the
/// client got in-band: the comment line it read, or none for a stream cut before its end.
#[tokio::test]
async fn rest_and_graphql_return_the_shape_region_trace_last_output_judgements_and_in_band() {
    let h = start_with(|cfg, _| {
        cfg.server.region = Some("eu-west".into());
        cfg.thresholds.upstream_headers_ms = 100.0;
    })
    .await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let body = json!({
        "model": "sim-fast", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hello"}],
        "max_completion_tokens": 256, "reasoning_effort": "low", "temperature": 0.2, "top_p": 0.9,
        "tools": [{"type": "function", "function": {"name": "a"}},
                  {"type": "function", "function": {"name": "b"}}],
        "tool_choice": "auto", "response_format": {"type": "json_object"},
        "laptime_sim": {"headers_ms": 150, "first_text_ms": 200, "text_tokens": 4, "tokens_per_s": 100}
    });
    let r = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(&h.token)
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let id = request_id(&r);
    let text = r.text().await.unwrap();
    let sent = text
        .lines()
        .find(|l| l.starts_with(": x-laptime-timing"))
        .unwrap()
        .to_string();

    let row = h.row(&id).await;
    assert_eq!(
        row["shape"],
        json!({"max_output_tokens": 256, "reasoning_effort": "low", "tool_count": 2,
            "tool_choice": "auto", "response_format": "json_object", "temperature": 0.2,
            "top_p": 0.9})
    );
    assert_eq!(row["region"], "eu-west");
    assert_eq!(row["trace_id"], trace);
    let timing = &row["other"]["timing"];
    let last = timing["last_effective_ms"].as_f64().unwrap();
    assert!(
        last >= timing["first_text_delta_ms"].as_f64().unwrap()
            && last <= timing["upstream_done_ms"].as_f64().unwrap(),
        "{timing}"
    );
    assert_eq!(row["in_band"]["carrier"], "sse_comment");
    assert_eq!(
        row["in_band"]["line"], sent,
        "the line the client read, byte for byte"
    );
    // The headers took ~150 ms against a 100 ms threshold: crossed, by the difference.
    let headers = &row["judgements"][0];
    assert_eq!(headers["stage"], "upstream_headers_slow");
    assert_eq!(headers["threshold"], 100.0);
    assert_eq!(headers["config_key"], "thresholds.upstream_headers_ms");
    assert_eq!(headers["slow"], true);
    let measured = headers["measured"].as_f64().unwrap();
    assert!(measured >= 150.0, "{headers}");
    assert!((headers["past_threshold"].as_f64().unwrap() - (measured - 100.0)).abs() < 1e-9);
    assert_eq!(row["classification"], "upstream_headers_slow");

    let q = "query($w: ID!, $r: ID!) {
      request(workspaceId: $w, requestId: $r) { traceId region timeoutKind
        shape { maxOutputTokens reasoningEffort toolCount toolChoice responseFormat temperature topP }
        judgements { stage measured threshold pastThreshold slow configKey unit }
        inBand { carrier line note } timing { lastEffectiveMs } }
      recentRequests(workspaceId: $w, limit: 1) { requestId traceId region shape { toolCount }
        timing { lastEffectiveMs } } }";
    let (_, v) = h.gql(&h.token, q, json!({"w": "default", "r": id})).await;
    let g = &v["data"]["request"];
    assert_eq!(
        g["shape"],
        json!({"maxOutputTokens": 256, "reasoningEffort": "low", "toolCount": 2,
            "toolChoice": "auto", "responseFormat": "json_object", "temperature": 0.2, "topP": 0.9}),
        "{v}"
    );
    assert_eq!(
        (&g["traceId"], &g["region"]),
        (&json!(trace), &json!("eu-west"))
    );
    assert!(g["timeoutKind"].is_null());
    assert_eq!(g["timing"]["lastEffectiveMs"], timing["last_effective_ms"]);
    assert_eq!(
        g["inBand"],
        json!({"carrier": "sse_comment", "line": sent, "note": null})
    );
    assert_eq!(
        g["judgements"][0]["pastThreshold"],
        headers["past_threshold"]
    );
    assert_eq!(g["judgements"][0]["unit"], "ms");
    let recent = &v["data"]["recentRequests"][0];
    assert_eq!(recent["requestId"], id.as_str());
    assert_eq!(
        (&recent["traceId"], &recent["shape"]["toolCount"]),
        (&json!(trace), &json!(2))
    );
    assert_eq!(
        recent["timing"]["lastEffectiveMs"],
        timing["last_effective_ms"]
    );

    // A stream the upstream closes mid-answer: the client got an in-band error, no timing line,
    // and both APIs say so.
    let cut = json!({"model": "sim-fast", "stream": true, "messages": [{"role": "user", "content": "hi"}],
        "laptime_sim": {"first_text_ms": 20, "text_tokens": 6, "tokens_per_s": 200, "cut_after": 2, "end": "close"}});
    let r = h.post("/v1/chat/completions", &cut).await;
    let id = request_id(&r);
    let text = r.text().await.unwrap();
    assert!(!text.contains("x-laptime-timing"), "{text}");
    let row = h.row(&id).await;
    assert_eq!(row["outcome"], "upstream_closed_early");
    assert_eq!(row["in_band"]["carrier"], "none");
    assert!(row["in_band"]["line"].is_null());
    assert!(row["in_band"]["note"].as_str().unwrap().contains("cut"));
    let (_, v) = h.gql(&h.token, q, json!({"w": "default", "r": id})).await;
    assert_eq!(v["data"]["request"]["inBand"]["carrier"], "none");
    assert!(v["data"]["request"]["inBand"]["line"].is_null());
    h.stop().await;
}
