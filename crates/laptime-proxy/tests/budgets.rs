//! Budgets over real sockets: spend reaching a hard budget exactly refuses the next request
//! with a 429 naming the budget (a stream in flight finishes), a soft budget flags requests
//! and counts its 80 % and 100 % crossings, and GraphQL sets and reads them.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod common;

use common::*;
use laptime_core::limit::{BudgetMode, Period};
use laptime_proxy::config::PriceConfig;
use laptime_store::auth;
use serde_json::{json, Value};

/// Every sim-fast Chat answer here reports 10 input tokens (its script pins them, rather than
/// counting the body): at $1,000 per million input tokens (output free), each costs exactly
/// $0.01.
const ONE_REQUEST_NANO: u64 = 10_000_000;

fn input_price(model: &str, input_per_mtok: f64) -> PriceConfig {
    PriceConfig {
        model: model.into(),
        channel: None,
        input_per_mtok,
        output_per_mtok: 0.0,
        cache_read_per_mtok: None,
        cache_write_per_mtok: None,
        cache_write_1h_per_mtok: None,
        reasoning_per_mtok: None,
        effective_from: "2026-01-01".into(),
    }
}

async fn priced() -> Harness {
    start_with(|cfg, _| {
        cfg.prices = vec![
            input_price("sim-fast", 1_000.0),
            input_price("sim-long", 0.0),
        ];
    })
    .await
}

async fn chat(h: &Harness, token: &str, model: &str, stream: bool) -> reqwest::Response {
    let mut body = body_for("chat", model, stream);
    if model == "sim-fast" {
        // sim-fast's own script, its input pinned.
        body["laptime_sim"] = json!({"usage": {"input_tokens": 10}});
    }
    h.http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// One whole request; waits for its row, then for the gateway to read the new spend.
async fn spend_one(h: &Harness, token: &str) -> Value {
    let r = chat(h, token, "sim-fast", false).await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    r.text().await.unwrap();
    let row = h.row(&id).await;
    laptime_proxy::server::refresh_budgets(&h.app)
        .await
        .unwrap();
    row
}

#[tokio::test]
async fn a_hard_budget_spent_exactly_refuses_the_next_request_and_a_stream_in_flight_finishes() {
    let h = priced().await;
    let ws = h.store.workspace(auth::DEFAULT_WORKSPACE).await.unwrap().id;
    let (key, token) = h.proxy_token();
    h.store
        .set_budget(
            &ws,
            Some(&key),
            Period::Day,
            Some((2 * ONE_REQUEST_NANO, BudgetMode::Hard)),
            laptime_proxy::clock::now_unix_us(),
        )
        .await
        .unwrap();
    laptime_proxy::server::refresh_budgets(&h.app)
        .await
        .unwrap();
    let first = spend_one(&h, &token).await;
    assert_eq!(first["cost_usd"], 0.01);
    assert!(first["other"]["timing"]["admission_ms"].as_f64().is_some());
    // A stream starts while $0.01 of $0.02 is spent, and is still open when the second request
    // spends the rest.
    let stream = chat(&h, &token, "sim-long", true).await;
    assert_eq!(stream.status(), 200);
    spend_one(&h, &token).await;

    let refused = chat(&h, &token, "sim-fast", false).await;
    assert_eq!(refused.status(), 429);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=86_400).contains(&retry), "until the day ends: {retry}");
    let id = request_id(&refused);
    let v: Value = refused.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("this token's daily budget of $0.020000 is spent")
            && message.contains("token_daily_budget"),
        "{message}"
    );
    let row = h.row(&id).await;
    assert_eq!(row["outcome"], "rate_limited");
    assert_eq!(row["refused_by"], "token_daily_budget");

    // The stream admitted before the budget was spent is not cut.
    let text = stream.text().await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    h.stop().await;
}

#[tokio::test]
async fn a_soft_budget_flags_requests_and_counts_its_crossings_once() {
    let h = priced().await;
    let ws = h.store.workspace(auth::DEFAULT_WORKSPACE).await.unwrap().id;
    let (_, token) = h.proxy_token();
    // $0.0125: one request is 80 % of it, two are over.
    h.store
        .set_budget(
            &ws,
            None,
            Period::Month,
            Some((ONE_REQUEST_NANO * 5 / 4, BudgetMode::Soft)),
            laptime_proxy::clock::now_unix_us(),
        )
        .await
        .unwrap();
    laptime_proxy::server::refresh_budgets(&h.app)
        .await
        .unwrap();
    let flags = |row: &Value| row["flags"].as_array().unwrap().clone();
    assert!(!flags(&spend_one(&h, &token).await).contains(&json!("over_budget")));
    assert!(!flags(&spend_one(&h, &token).await).contains(&json!("over_budget")));
    let third = spend_one(&h, &token).await;
    assert!(flags(&third).contains(&json!("over_budget")), "{third}");
    assert_eq!(third["status"], 200, "a soft budget never refuses");

    let metrics = h.metrics().await;
    for threshold in ["80", "100"] {
        let line = format!(
            "laptime_budget_crossings_total{{mode=\"soft\",period=\"month\",scope=\"workspace\",threshold=\"{threshold}\"}} 1"
        );
        assert!(metrics.contains(&line), "{line} not in\n{metrics}");
    }

    let (status, v) = h
        .gql(
            &h.token,
            "query($ws: ID!) { budgets(workspaceId: $ws) { keyId period usd mode spentUsd resetsAt } }",
            json!({"ws": ws}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let b = &v["data"]["budgets"][0];
    assert_eq!(
        (&b["keyId"], &b["period"], &b["usd"], &b["mode"]),
        (
            &Value::Null,
            &json!("MONTH"),
            &json!(0.0125),
            &json!("SOFT")
        )
    );
    assert!(
        (b["spentUsd"].as_f64().unwrap() - 0.03).abs() < 1e-12,
        "{b}"
    );
    assert!(
        b["resetsAt"].as_str().unwrap().ends_with("T00:00:00Z"),
        "{b}"
    );
    h.stop().await;
}

#[tokio::test]
async fn budgets_are_set_and_removed_through_graphql() {
    let h = priced().await;
    let ws = h.store.workspace(auth::DEFAULT_WORKSPACE).await.unwrap().id;
    let (key, token) = h.proxy_token();
    let (status, v) = h
        .gql(
            &h.token,
            "mutation($ws: ID!, $key: ID!) { setBudget(workspaceId: $ws, keyId: $key, usd: 0.005, period: DAY) { usd mode spentUsd } }",
            json!({"ws": ws, "key": key}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["setBudget"],
        json!({"usd": 0.005, "mode": "HARD", "spentUsd": 0.0})
    );
    laptime_proxy::server::refresh_budgets(&h.app)
        .await
        .unwrap();
    spend_one(&h, &token).await;
    assert_eq!(chat(&h, &token, "sim-fast", false).await.status(), 429);
    let (_, v) = h
        .gql(
            &h.token,
            "mutation($ws: ID!, $key: ID!) { setBudget(workspaceId: $ws, keyId: $key, usd: null, period: DAY) { usd } }",
            json!({"ws": ws, "key": key}),
        )
        .await;
    assert_eq!(v["data"]["setBudget"], Value::Null, "{v}");
    laptime_proxy::server::refresh_budgets(&h.app)
        .await
        .unwrap();
    let r = chat(&h, &token, "sim-fast", false).await;
    assert_eq!(r.status(), 200);
    let (_, v) = h
        .gql(
            &h.token,
            "mutation($ws: ID!) { setBudget(workspaceId: $ws, usd: -1, period: MONTH) { usd } }",
            json!({"ws": ws}),
        )
        .await;
    assert!(
        v["errors"][0]["message"].as_str().unwrap().contains("≥ 0"),
        "{v}"
    );
    h.stop().await;
}
