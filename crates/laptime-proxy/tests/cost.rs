//! What requests cost, over real sockets: each kind of token at its own price (one-hour cache
//! writes apart), estimated tokens flagged, a model without a price null (never $0) and counted
//! as unpriced in the usage sums, a request nobody billed $0, a price taking effect on its own
//! day, and the cost counter in `/metrics`.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod common;

use common::*;
use laptime_proxy::config::PriceConfig;
use serde_json::{json, Value};

fn price(model: &str, day: &str, input: f64, output: f64) -> PriceConfig {
    PriceConfig {
        model: model.into(),
        channel: None,
        input_per_mtok: input,
        output_per_mtok: output,
        cache_read_per_mtok: None,
        cache_write_per_mtok: None,
        cache_write_1h_per_mtok: None,
        reasoning_per_mtok: None,
        effective_from: day.into(),
    }
}

async fn priced_gateway() -> Harness {
    start_with(|cfg, _| {
        cfg.prices = vec![
            PriceConfig {
                cache_read_per_mtok: Some(0.1),
                cache_write_per_mtok: Some(1.25),
                cache_write_1h_per_mtok: Some(2.0),
                ..price("sim-fast", "2026-01-01", 1.0, 2.0)
            },
            // Not in force yet: requests today keep the price above.
            price("sim-fast", "2999-01-01", 100.0, 100.0),
            price("sim-long", "2026-01-01", 1.0, 2.0),
        ];
    })
    .await
}

/// Sends `body` to `path` and reads the whole answer; returns the request id.
async fn call(h: &Harness, path: &str, body: &Value) -> String {
    let r = h.post(path, body).await;
    let id = request_id(&r);
    r.text().await.unwrap();
    id
}

fn near(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-12)
}

#[tokio::test]
async fn each_kind_of_token_is_charged_at_its_price_and_the_hour_long_cache_writes_apart() {
    let h = priced_gateway().await;
    let body = json!({
        "model": "sim-fast", "stream": true, "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello"}],
        "laptime_sim": {"usage": {"input_tokens": 100, "cache_read_tokens": 1000,
            "cache_write_tokens": 300, "cache_write_1h_tokens": 100, "output_tokens": 50}}
    });
    let id = call(&h, "/v1/messages", &body).await;
    let row = h.row(&id).await;
    // 100 uncached × $1 + 1000 read × $0.10 + 200 five-minute writes × $1.25 + 100 one-hour
    // writes × $2 + 50 output × $2, per million tokens.
    let expected = (100.0 + 100.0 + 250.0 + 200.0 + 100.0) / 1e6;
    assert!(near(&row["cost_usd"], expected), "{}", row["cost_usd"]);
    assert_eq!(row["cost_estimated"], false);
    assert_eq!(row["cache_write_tokens"], 300);
    assert_eq!(row["cache_write_1h_tokens"], 100);
    assert_eq!(row["refused_by"], Value::Null);
    assert_eq!(row["other"]["timing"]["admission_ms"], Value::Null);
    h.stop().await;
}

#[tokio::test]
async fn a_chat_stream_without_usage_is_charged_on_estimates_and_says_so() {
    let h = priced_gateway().await;
    // No `stream_options.include_usage`: the provider reports no tokens at all.
    let body = json!({"model": "sim-fast", "stream": true,
        "messages": [{"role": "user", "content": "hello"}]});
    let sent = serde_json::to_vec(&body).unwrap().len() as f64;
    let id = call(&h, "/v1/chat/completions", &body).await;
    let row = h.row(&id).await;
    assert_eq!(row["input_tokens"], Value::Null, "no usage came");
    assert_eq!(row["cost_estimated"], true);
    assert_eq!(row["output_tokens"], Value::Null, "no usage came");
    let output = row["estimated_output_tokens"].as_f64().unwrap();
    assert!(output > 0.0);
    // Input: the body's bytes ÷ 4, rounded up; output: the gateway's tokenizer count.
    let expected = ((sent / 4.0).ceil() * 1.0 + output * 2.0) / 1e6;
    assert!(
        near(&row["cost_usd"], expected),
        "{} vs {expected}",
        row["cost_usd"]
    );
    h.stop().await;
}

#[tokio::test]
async fn an_unpriced_model_costs_null_and_is_counted_apart_in_the_usage_sums() {
    let h = priced_gateway().await;
    let priced = call(
        &h,
        "/v1/chat/completions",
        &body_for("chat", "sim-long", true),
    )
    .await;
    let unpriced = call(
        &h,
        "/v1/chat/completions",
        &body_for("chat", "sim-echo", true),
    )
    .await;
    // Refused before any upstream: nothing was billed, so it costs a known $0.
    let refused = call(
        &h,
        "/v1/chat/completions",
        &body_for("chat", "no-such-model", true),
    )
    .await;
    let priced_row = h.row(&priced).await;
    let unpriced_row = h.row(&unpriced).await;
    let refused_row = h.row(&refused).await;
    let priced_cost = priced_row["cost_usd"].as_f64().unwrap();
    assert!(priced_cost > 0.0);
    assert_eq!(unpriced_row["cost_usd"], Value::Null);
    assert_eq!(unpriced_row["cost_estimated"], Value::Null);
    assert_eq!(
        unpriced_row["output_tokens"], 8,
        "the tokens are known, the price is not"
    );
    assert_eq!(refused_row["status"], 404);
    assert!(near(&refused_row["cost_usd"], 0.0));

    let ws = h.gql(&h.token, "{ me { workspaceId } }", json!({})).await.1["data"]["me"]
        ["workspaceId"]
        .clone();
    let (status, v) = h
        .gql(
            &h.token,
            "query($ws: ID!) { usage(workspaceId: $ws, window: {last: \"1h\"}, groupBy: [MODEL]) {
                rollup { requestCount costUsd costUnpricedCount costEstimatedCount }
                groups { key { value } rollup { costUsd costUnpricedCount } } } }",
            json!({"ws": ws}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let usage = &v["data"]["usage"];
    assert_eq!(usage["rollup"]["requestCount"], 3);
    assert!(near(&usage["rollup"]["costUsd"], priced_cost));
    assert_eq!(usage["rollup"]["costUnpricedCount"], 1);
    assert_eq!(usage["rollup"]["costEstimatedCount"], 0);
    let group = |model: &str| {
        usage["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["key"][0]["value"] == model)
            .unwrap_or_else(|| panic!("no group {model}: {usage}"))["rollup"]
            .clone()
    };
    assert_eq!(group("sim-echo")["costUsd"], Value::Null);
    assert_eq!(group("sim-echo")["costUnpricedCount"], 1);
    assert!(near(&group("sim-long")["costUsd"], priced_cost));

    // The same sums in the metrics.
    let metrics = h.metrics().await;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("laptime_cost_usd_total{model=\"sim-long\"}"))
        .unwrap_or_else(|| panic!("no cost line in\n{metrics}"));
    let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((value - priced_cost).abs() < 1e-12, "{line}");
    assert!(
        metrics.contains("laptime_cost_unpriced_total{model=\"sim-echo\"} 1"),
        "{metrics}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_price_for_an_unknown_channel_or_a_bad_day_is_refused_at_start() {
    let mut cfg = laptime_proxy::config::Config::embedded_default(&|_| None);
    cfg.prices = vec![
        PriceConfig {
            channel: Some("nope".into()),
            ..price("sim-fast", "2026-01-01", 1.0, 1.0)
        },
        price("sim-long", "2026-02-30", 1.0, 1.0),
        price("sim-echo", "2026-01-01", -1.0, 1.0),
    ];
    let errs = cfg.validate(&|_| None).unwrap_err().to_string();
    for expected in [
        "prices[0].channel: no channel is named \"nope\"",
        "prices[1].effective_from: \"2026-02-30\" is not a YYYY-MM-DD day",
        "prices[2] (sim-echo): every price must be a number of USD ≥ 0",
    ] {
        assert!(errs.contains(expected), "{expected:?} not in {errs}");
    }
}
