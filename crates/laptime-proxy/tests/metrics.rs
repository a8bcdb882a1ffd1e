#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

//! `GET /metrics` over real sockets: requests through the sim in all three dialects (streamed and
//! not), a scripted slow one, an upstream that closes early, an unknown model and a refused
//! upstream, then the exposition is parsed and checked metric by metric.

pub mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use laptime_store::auth::{self, Scope};
use serde_json::json;

/// One sample line of the text exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the text format (label values here never hold `"`, `,` or `\`).
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap(),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series.to_string(), BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').unwrap();
                    let labels = body
                        .split(',')
                        .map(|kv| {
                            let (k, v) = kv.split_once('=').unwrap();
                            (k.to_string(), v.trim_matches('"').to_string())
                        })
                        .collect();
                    (name.to_string(), labels)
                }
            };
            Sample {
                name,
                labels,
                value,
            }
        })
        .collect()
}

/// The samples named `name` whose labels include every pair of `filter`.
fn matching<'a>(samples: &'a [Sample], name: &str, filter: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && filter
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    matching(samples, name, filter)
        .iter()
        .map(|s| s.value)
        .sum()
}

async fn scrape(h: &Harness, token: Option<&str>) -> reqwest::Response {
    let mut req = h.http.get(h.url("/metrics"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

/// Scrapes until `laptime_requests_total` counts `requests` and the recorder wrote them (a
/// request is observed when its response body ends, just after the client has the last byte).
async fn scrape_settled(h: &Harness, requests: f64) -> (String, Vec<Sample>) {
    for _ in 0..300 {
        let resp = scrape(h, Some(&h.token)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let text = resp.text().await.unwrap();
        let samples = parse(&text);
        if sum(&samples, "laptime_requests_total", &[]) >= requests
            && sum(&samples, "laptime_recorder_written_total", &[]) >= requests
        {
            return (text, samples);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the metrics never counted {requests} requests");
}

#[tokio::test]
async fn every_metric_is_exposed_with_the_right_counts_labels_and_buckets() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let h = start_with(|cfg, _| cfg.channels.push(channel("dead", &dead, &["dead-model"]))).await;
    let mut ids = Vec::new();

    // 6 completed: three dialects, streamed and not.
    for dialect in DIALECTS {
        for stream in [true, false] {
            let resp = h
                .post(path_for(dialect), &body_for(dialect, "sim-fast", stream))
                .await;
            assert_eq!(resp.status(), 200, "{dialect} stream={stream}");
            ids.push(request_id(&resp));
            resp.bytes().await.unwrap();
        }
    }
    // 1 completed, scripted: headers, first event and first text at 200 ms, 3 tokens (so the
    // marks land in (0.16, 0.32] with 120 ms of slack for a loaded CI machine).
    let mut body = body_for("chat", "sim-trace-b", true);
    body["laptime_sim"] = json!({
        "headers_ms": 200, "first_event_ms": 200, "first_text_ms": 200, "text_tokens": 3
    });
    let resp = h.post(path_for("chat"), &body).await;
    assert_eq!(resp.status(), 200);
    ids.push(request_id(&resp));
    resp.bytes().await.unwrap();
    // 1 upstream_closed_early (streamed, no terminal event, no usage).
    let mut body = body_for("chat", "sim-trace-c", true);
    body["laptime_sim"] = json!({"text_tokens": 5, "end": "close"});
    let resp = h.post(path_for("chat"), &body).await;
    assert_eq!(resp.status(), 200);
    ids.push(request_id(&resp));
    resp.bytes().await.unwrap();
    // 1 rejected before routing: unknown model.
    let resp = h
        .post(path_for("chat"), &body_for("chat", "no-such-model", false))
        .await;
    assert_eq!(resp.status(), 404);
    ids.push(request_id(&resp));
    resp.bytes().await.unwrap();
    // 1 upstream_error: the channel's upstream refuses the connection.
    let resp = h
        .post(
            path_for("messages"),
            &body_for("messages", "dead-model", true),
        )
        .await;
    assert_eq!(resp.status(), 502);
    ids.push(request_id(&resp));
    resp.bytes().await.unwrap();

    let (text, s) = scrape_settled(&h, 10.0).await;

    // Every metric named in the issue is there.
    for name in [
        "gen_ai_server_time_to_first_token_seconds",
        "gen_ai_server_request_duration_seconds",
        "gen_ai_client_token_usage",
        "gen_ai_server_time_per_output_token_seconds",
        "laptime_upstream_headers_seconds",
        "laptime_first_event_seconds",
        "laptime_first_effective_seconds",
        "laptime_first_visible_seconds",
        "laptime_upstream_done_seconds",
        "laptime_handler_seconds",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} histogram")),
            "{name} missing in\n{text}"
        );
    }
    for name in [
        "laptime_requests_total",
        "laptime_tokens_total",
        "laptime_recorder_dropped_total",
        "laptime_recorder_written_total",
        "laptime_recorder_batches_total",
        "laptime_recorder_batch_seconds_total",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} counter")),
            "{name} missing"
        );
    }
    for name in ["laptime_channel_inflight", "laptime_recorder_queue_depth"] {
        assert!(
            text.contains(&format!("# TYPE {name} gauge")),
            "{name} missing"
        );
    }

    // laptime_requests_total, per outcome and with its labels.
    let requests = "laptime_requests_total";
    assert_eq!(sum(&s, requests, &[]), 10.0);
    assert_eq!(sum(&s, requests, &[("outcome", "completed")]), 7.0);
    assert_eq!(
        sum(
            &s,
            requests,
            &[
                ("outcome", "completed"),
                ("status", "200"),
                ("provider", "sim"),
                ("channel", "sim")
            ]
        ),
        7.0
    );
    for dialect in DIALECTS {
        assert_eq!(
            sum(
                &s,
                requests,
                &[
                    ("dialect", dialect),
                    ("model", "sim-fast"),
                    ("outcome", "completed")
                ]
            ),
            2.0,
            "{dialect}"
        );
    }
    assert_eq!(
        sum(
            &s,
            requests,
            &[
                ("outcome", "upstream_closed_early"),
                ("classification", "failed"),
                ("model", "sim-trace-c"),
                ("fault", "upstream"),
            ]
        ),
        1.0
    );
    // Whose fault: none for the completed, the client's for the unknown model.
    assert_eq!(
        sum(&s, requests, &[("outcome", "completed"), ("fault", "none")]),
        7.0
    );
    assert_eq!(
        sum(&s, requests, &[("status", "404"), ("fault", "client")]),
        1.0
    );
    assert_eq!(
        sum(
            &s,
            requests,
            &[
                ("outcome", "rejected"),
                ("status", "404"),
                ("model", "_unrouted"),
                ("channel", "_none"),
                ("provider", "_none"),
                ("dialect", "chat"),
            ]
        ),
        1.0
    );
    assert_eq!(
        sum(
            &s,
            requests,
            &[
                ("outcome", "upstream_error"),
                ("status", "502"),
                ("model", "dead-model"),
                ("channel", "dead"),
                ("dialect", "messages"),
            ]
        ),
        1.0
    );
    let labels: Vec<&str> = matching(&s, requests, &[])[0]
        .labels
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        labels,
        [
            "channel",
            "classification",
            "dialect",
            "fault",
            "model",
            "outcome",
            "provider",
            "status"
        ]
    );

    // Stage histograms count exactly the requests that had the marks.
    // headers/done: 7 completed + closed early; first event/effective/visible: the 5 streamed
    // answers (3 sim-fast, the scripted one, the closed one); handler: all 10.
    for (name, n) in [
        ("laptime_upstream_headers_seconds", 8.0),
        ("laptime_first_event_seconds", 5.0),
        ("laptime_first_effective_seconds", 5.0),
        ("laptime_first_visible_seconds", 5.0),
        ("laptime_upstream_done_seconds", 8.0),
        ("laptime_handler_seconds", 10.0),
    ] {
        assert_eq!(sum(&s, &format!("{name}_count"), &[]), n, "{name}");
        assert_eq!(
            sum(&s, &format!("{name}_bucket"), &[("le", "+Inf")]),
            n,
            "{name}"
        );
        let l: Vec<&str> = matching(&s, &format!("{name}_count"), &[])[0]
            .labels
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(l, ["channel", "dialect", "model"], "{name}");
    }
    // The request rejected before routing has only the handler histogram.
    assert_eq!(
        sum(
            &s,
            "laptime_handler_seconds_count",
            &[("model", "_unrouted"), ("channel", "_none")]
        ),
        1.0
    );
    assert!(matching(
        &s,
        "laptime_upstream_headers_seconds_count",
        &[("model", "_unrouted")]
    )
    .is_empty());
    // The refused upstream has no headers mark at all: absent, not 0.
    assert!(matching(
        &s,
        "laptime_upstream_headers_seconds_count",
        &[("channel", "dead")]
    )
    .is_empty());
    assert_eq!(
        sum(&s, "laptime_handler_seconds_count", &[("channel", "dead")]),
        1.0
    );

    // Bucket placement of the scripted request (marks at 200 ms).
    let scripted = [("model", "sim-trace-b")];
    let bucket = |name: &str, le: &str| {
        let mut f = scripted.to_vec();
        f.push(("le", le));
        sum(&s, &format!("{name}_bucket"), &f)
    };
    assert_eq!(bucket("laptime_upstream_headers_seconds", "0.32"), 1.0);
    assert_eq!(bucket("laptime_upstream_headers_seconds", "0.16"), 0.0);
    for name in [
        "laptime_first_event_seconds",
        "laptime_first_effective_seconds",
        "laptime_first_visible_seconds",
    ] {
        assert_eq!(bucket(name, "0.32"), 1.0, "{name}");
        assert_eq!(bucket(name, "0.16"), 0.0, "{name}");
    }
    // Exactly the OTel duration boundaries.
    let les: Vec<String> = matching(
        &s,
        "laptime_handler_seconds_bucket",
        &[("model", "sim-trace-b")],
    )
    .iter()
    .map(|s| s.labels["le"].clone())
    .collect();
    assert_eq!(
        les,
        [
            "0.01", "0.02", "0.04", "0.08", "0.16", "0.32", "0.64", "1.28", "2.56", "5.12",
            "10.24", "20.48", "40.96", "81.92", "+Inf"
        ]
    );

    // OTel GenAI.
    let gen_ai = [
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_provider_name", "sim"),
    ];
    // TTFT: successful streamed requests (3 sim-fast + the scripted one).
    let ttft = "gen_ai_server_time_to_first_token_seconds";
    assert_eq!(sum(&s, &format!("{ttft}_count"), &gen_ai), 4.0);
    assert_eq!(sum(&s, &format!("{ttft}_count"), &[]), 4.0);
    let ttft_scripted = |le: &str| {
        sum(
            &s,
            &format!("{ttft}_bucket"),
            &[("gen_ai_request_model", "sim-trace-b"), ("le", le)],
        )
    };
    assert_eq!(ttft_scripted("0.25"), 1.0);
    assert_eq!(ttft_scripted("0.1"), 0.0);
    assert!(!text.contains(&format!("{ttft}_count{{error_type")));
    // Request duration (t6 − t1): the 7 successes without error_type, the closed one with it.
    let duration = "gen_ai_server_request_duration_seconds_count";
    assert_eq!(sum(&s, duration, &[]), 8.0);
    assert_eq!(
        sum(
            &s,
            duration,
            &[
                ("error_type", "closed_early"),
                ("gen_ai_request_model", "sim-trace-c")
            ]
        ),
        1.0
    );
    assert_eq!(
        matching(&s, duration, &[])
            .iter()
            .filter(|m| !m.labels.contains_key("error_type"))
            .map(|m| m.value)
            .sum::<f64>(),
        7.0
    );
    assert_eq!(
        sum(
            &s,
            duration,
            &[
                ("gen_ai_request_model", "sim-fast"),
                ("gen_ai_provider_name", "sim")
            ]
        ),
        6.0
    );
    // Token usage: the 7 answers with upstream usage (the closed stream reported none).
    let usage = "gen_ai_client_token_usage";
    assert_eq!(
        sum(
            &s,
            &format!("{usage}_count"),
            &[("gen_ai_token_type", "input")]
        ),
        7.0
    );
    assert_eq!(
        sum(
            &s,
            &format!("{usage}_count"),
            &[("gen_ai_token_type", "output")]
        ),
        7.0
    );
    assert_eq!(
        sum(
            &s,
            &format!("{usage}_sum"),
            &[("gen_ai_token_type", "output")]
        ),
        6.0 * 16.0 + 3.0
    );
    // 16 output tokens land in le="16", not le="4"; the scripted 3 in le="4".
    let usage_bucket = |model: &str, le: &str| {
        sum(
            &s,
            &format!("{usage}_bucket"),
            &[
                ("gen_ai_token_type", "output"),
                ("gen_ai_request_model", model),
                ("le", le),
            ],
        )
    };
    assert_eq!(usage_bucket("sim-fast", "16"), 6.0);
    assert_eq!(usage_bucket("sim-fast", "4"), 0.0);
    assert_eq!(usage_bucket("sim-trace-b", "4"), 1.0);
    // Time per output token: streamed answers with t4, t6 and ≥ 2 output tokens.
    let tpot = "gen_ai_server_time_per_output_token_seconds_count";
    assert_eq!(sum(&s, tpot, &[]), 4.0);
    assert_eq!(
        sum(&s, tpot, &[("gen_ai_request_model", "sim-trace-b")]),
        1.0
    );

    // Tokens by type, from upstream usage.
    let input = sum(&s, "laptime_tokens_total", &[("type", "input")]);
    let output = sum(&s, "laptime_tokens_total", &[("type", "output")]);
    assert_eq!(
        input,
        sum(
            &s,
            &format!("{usage}_sum"),
            &[("gen_ai_token_type", "input")]
        )
    );
    assert_eq!(output, 6.0 * 16.0 + 3.0);
    for kind in ["input", "output", "cache_read", "cache_write", "reasoning"] {
        assert!(
            !matching(
                &s,
                "laptime_tokens_total",
                &[("type", kind), ("model", "sim-fast")]
            )
            .is_empty(),
            "{kind}"
        );
    }

    // Scrape-time values.
    assert_eq!(
        sum(&s, "laptime_channel_inflight", &[("channel", "sim")]),
        0.0
    );
    assert_eq!(
        matching(&s, "laptime_channel_inflight", &[("channel", "dead")]).len(),
        1
    );
    assert_eq!(sum(&s, "laptime_recorder_dropped_total", &[]), 0.0);
    assert!(sum(&s, "laptime_recorder_written_total", &[]) >= 10.0);
    assert!(sum(&s, "laptime_recorder_batches_total", &[]) >= 1.0);
    assert!(sum(&s, "laptime_recorder_batch_seconds_total", &[]) > 0.0);
    assert_eq!(matching(&s, "laptime_recorder_queue_depth", &[]).len(), 1);

    // No per-request or per-tenant values as labels.
    for id in &ids {
        assert!(
            !text.contains(id.as_str()),
            "request id {id} in the metrics"
        );
    }
    let row = h.row(&ids[0]).await;
    let workspace = row["workspace_id"].as_str().unwrap();
    assert!(!text.contains(workspace), "workspace id in the metrics");
    assert!(!text.contains(&h.token));
    h.stop().await;
}

#[tokio::test]
async fn an_in_flight_stream_shows_in_the_channel_gauge() {
    let h = start().await;
    let mut body = body_for("chat", "sim-fast", true);
    body["laptime_sim"] =
        json!({"headers_ms": 0, "first_text_ms": 0, "text_tokens": 4, "tokens_per_s": 2.0});
    let resp = h.post(path_for("chat"), &body).await;
    assert_eq!(resp.status(), 200);
    let text = scrape(&h, Some(&h.token)).await.text().await.unwrap();
    let s = parse(&text);
    assert_eq!(
        sum(&s, "laptime_channel_inflight", &[("channel", "sim")]),
        1.0,
        "{text}"
    );
    resp.bytes().await.unwrap();
    let (_, s) = scrape_settled(&h, 1.0).await;
    assert_eq!(
        sum(&s, "laptime_channel_inflight", &[("channel", "sim")]),
        0.0
    );
    h.stop().await;
}

#[tokio::test]
async fn metrics_need_an_admin_token_because_they_span_every_workspace() {
    let h = start().await;
    assert_eq!(scrape(&h, None).await.status(), 401);
    let bogus = format!("lt_{}", "0".repeat(64));
    assert_eq!(scrape(&h, Some(&bogus)).await.status(), 401);
    assert_eq!(scrape(&h, Some(&h.token)).await.status(), 200);
    let read = h
        .store
        .with_conn(|c| {
            auth::create_token(
                c,
                "default",
                Scope::Read,
                laptime_proxy::clock::now_unix_us(),
            )
        })
        .unwrap()
        .token;
    assert_eq!(scrape(&h, Some(&read)).await.status(), 403);
    let proxy = h
        .store
        .with_conn(|c| {
            auth::create_token(
                c,
                "default",
                Scope::Proxy,
                laptime_proxy::clock::now_unix_us(),
            )
        })
        .unwrap()
        .token;
    assert_eq!(scrape(&h, Some(&proxy)).await.status(), 403);
    h.stop().await;
}

#[tokio::test]
async fn metrics_public_serves_without_a_token_and_lists_the_route() {
    let mut cfg = laptime_proxy::config::Config::embedded_default(&|_| None);
    assert!(!laptime_api::routes::unauthenticated(&cfg).contains(&"GET /metrics"));
    cfg.server.metrics_public = true;
    assert_eq!(
        laptime_api::routes::unauthenticated(&cfg),
        [
            "GET /healthz",
            "GET /readyz",
            "GET /graphql",
            "GET /",
            "GET /assets/{file}",
            "GET /metrics"
        ]
    );
    let parsed =
        laptime_proxy::config::Config::from_toml("[server]\nmetrics_public = true\n", "test.toml")
            .unwrap();
    assert!(parsed.server.metrics_public);

    let h = start_with(|cfg, _| cfg.server.metrics_public = true).await;
    let resp = scrape(&h, None).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("# TYPE laptime_recorder_queue_depth gauge"),
        "{text}"
    );
    h.stop().await;
}
