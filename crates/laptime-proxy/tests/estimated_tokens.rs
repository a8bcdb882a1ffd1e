//! Output tokens the gateway estimates and output speeds over a meaningful window, through the
//! gateway against the sim over real sockets (real SQLite): a Chat stream sent without
//! `stream_options.include_usage` (the upstream reports no usage) gets its output counted with
//! the tokenizer, stored apart from the provider's count and flagged estimated, with an output
//! speed; an `openai-compatible`-style channel flagged `usage_in_stream = false` gets the same
//! even when the client asked; an instant answer has no output speed at all; and usage filtered
//! by the comparison dimensions says which population its percentiles describe.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod common;

use common::*;
use serde_json::{json, Value};

/// Streams a Chat request and returns its request id once its body has been read whole.
async fn chat_stream(
    h: &Harness,
    model: &str,
    include_usage: Option<bool>,
    extra: Value,
) -> String {
    let mut body = json!({
        "model": model,
        "stream": true,
        "messages": [{"role": "user", "content": "hi"}],
    });
    if let Some(u) = include_usage {
        body["stream_options"] = json!({"include_usage": u});
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let r = h.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let text = r.text().await.unwrap();
    assert!(text.contains("data: [DONE]"), "{text}");
    id
}

#[tokio::test]
async fn a_chat_stream_without_include_usage_gets_estimated_output_tokens_and_a_speed() {
    let h = start().await;
    // The gateway loads the tokenizer in the background at start; a stream before that counts
    // bytes ÷ 4. Wait for it, so that this count is the tokenizer's.
    assert!(laptime_core::estimate::warm());
    // sim-long: 60 text deltas over 300 ms, usage only when asked for.
    let id = chat_stream(&h, "sim-long", None, json!({})).await;
    let row = h.row(&id).await;
    assert_eq!(
        row["output_tokens"],
        Value::Null,
        "the provider reported none"
    );
    let estimated = row["estimated_output_tokens"].as_u64().unwrap();
    // 60 deltas of generated words, one token each as the sim counts them; the tokenizer's
    // count of the same text is close to it.
    assert!(
        (50..=80).contains(&estimated),
        "60 words of generated text, counted: {estimated}"
    );
    let timing = &row["other"]["timing"];
    let tps = timing["visible_output_tps"]
        .as_f64()
        .unwrap_or_else(|| panic!("{row}"));
    assert!(tps > 50.0 && tps < 2_000.0, "{tps}");
    assert_eq!(timing["visible_output_tps_estimated"], true);
    assert_eq!(row["classification"], "ok");

    // GraphQL says the same.
    let (status, d) = h
        .gql(
            &h.token,
            "query($ws: ID!, $id: ID!) { request(workspaceId: $ws, requestId: $id) {
                outputTokens estimatedOutputTokens timing { visibleOutputTps visibleOutputTpsEstimated } } }",
            json!({"ws": "default", "id": id}),
        )
        .await;
    assert_eq!(status, 200, "{d}");
    let r = &d["data"]["request"];
    assert_eq!(r["outputTokens"], Value::Null);
    assert_eq!(r["estimatedOutputTokens"].as_u64(), Some(estimated));
    assert_eq!(r["timing"]["visibleOutputTpsEstimated"], true);

    // Asked for usage: the provider's count, no estimate.
    let id = chat_stream(&h, "sim-long", Some(true), json!({})).await;
    let row = h.row(&id).await;
    assert_eq!(row["output_tokens"], 60);
    assert_eq!(row["estimated_output_tokens"], Value::Null);
    assert_eq!(
        row["other"]["timing"]["visible_output_tps_estimated"],
        false
    );
    let counted_tps = row["other"]["timing"]["visible_output_tps"]
        .as_f64()
        .unwrap();

    // Usage keeps the two speeds apart: the provider-counted percentiles hold only the second
    // request's, the estimated ones only the first's.
    let (status, d) = h
        .gql(
            &h.token,
            "query($ws: ID!) { usage(workspaceId: $ws, window: {last: \"1h\"}) { rollup {
                outputEstimatedCount visibleOutputTps { count nullCount min max }
                estimatedVisibleOutputTps { count nullCount min max } } } }",
            json!({"ws": "default"}),
        )
        .await;
    assert_eq!(status, 200, "{d}");
    let u = &d["data"]["usage"]["rollup"];
    assert_eq!(u["outputEstimatedCount"], 1, "{d}");
    assert_eq!(
        u["visibleOutputTps"],
        json!({"count": 1, "nullCount": 1, "min": counted_tps, "max": counted_tps})
    );
    assert_eq!(
        u["estimatedVisibleOutputTps"],
        json!({"count": 1, "nullCount": 1, "min": tps, "max": tps})
    );
    let rest: Value = h
        .http
        .get(h.url("/api/usage?last=1h"))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        rest["rollup"]["visible_output_tps"]["max"], counted_tps,
        "{rest}"
    );
    assert_eq!(rest["rollup"]["estimated_visible_output_tps"]["max"], tps);
    h.stop().await;
}

#[tokio::test]
async fn a_channel_without_usage_in_stream_is_estimated_even_when_the_client_asked() {
    let h = start_with(|cfg, _| cfg.channels[0].usage_in_stream = false).await;
    let id = chat_stream(&h, "sim-long", Some(true), json!({})).await;
    let row = h.row(&id).await;
    // This sim does report usage: the provider's count wins and the estimate is not kept.
    assert_eq!(row["output_tokens"], 60);
    assert_eq!(row["estimated_output_tokens"], Value::Null);
    let id = chat_stream(&h, "sim-long", Some(false), json!({})).await;
    let row = h.row(&id).await;
    assert!(row["estimated_output_tokens"]
        .as_u64()
        .is_some_and(|n| n > 0));
    h.stop().await;
}

#[tokio::test]
async fn an_instant_answer_has_no_output_speed() {
    let h = start().await;
    // sim-fast: the whole answer at once, usage reported.
    let id = chat_stream(&h, "sim-fast", Some(true), json!({})).await;
    let row = h.row(&id).await;
    assert!(
        row["output_tokens"].as_u64().is_some_and(|n| n > 0),
        "{row}"
    );
    assert_eq!(row["other"]["timing"]["visible_output_tps"], Value::Null);
    h.stop().await;
}

#[tokio::test]
async fn usage_filtered_by_shape_names_the_population_beside_its_figures() {
    let h = start().await;
    chat_stream(
        &h,
        "sim-long",
        Some(true),
        json!({"max_tokens": 2000, "reasoning_effort": "low"}),
    )
    .await;
    chat_stream(&h, "sim-long", Some(true), json!({"max_tokens": 100})).await;
    let id = chat_stream(
        &h,
        "sim-long",
        Some(true),
        json!({"max_tokens": 100, "tools": [{"type": "function", "function": {"name": "f"}}]}),
    )
    .await;
    h.row(&id).await;
    let query = "query($ws: ID!, $f: UsageFilterInput) {
        usage(workspaceId: $ws, filter: $f, groupBy: [TOOLS_PRESENT]) {
            population { description requestCount filters { dimension value } }
            rollup { requestCount firstTextDeltaMs { p95 count } }
            groups { key { dimension value } population { description requestCount } } } }";
    let (status, d) = h
        .gql(
            &h.token,
            query,
            json!({"ws": "default", "f": {"stream": true, "maxOutputBucket": "<256", "reasoningEffort": ""}}),
        )
        .await;
    assert_eq!(status, 200, "{d}");
    let u = &d["data"]["usage"];
    assert_eq!(
        u["population"]["description"],
        "stream=true, reasoning_effort=(none), max_output_bucket=<256"
    );
    assert_eq!(u["population"]["requestCount"], 2);
    assert_eq!(u["rollup"]["requestCount"], 2);
    let groups = u["groups"].as_array().unwrap();
    let descriptions: Vec<&str> = groups
        .iter()
        .map(|g| g["population"]["description"].as_str().unwrap())
        .collect();
    assert_eq!(groups.len(), 2, "{descriptions:?}");
    assert!(descriptions.contains(
        &"stream=true, reasoning_effort=(none), max_output_bucket=<256, tools_present=true"
    ));
    // The bucket asked by name; an unknown one is refused with the names.
    let (_, d) = h
        .gql(
            &h.token,
            query,
            json!({"ws": "default", "f": {"maxOutputBucket": "1k-4k", "reasoningEffort": "low"}}),
        )
        .await;
    assert_eq!(d["data"]["usage"]["rollup"]["requestCount"], 1, "{d}");
    let (_, d) = h
        .gql(
            &h.token,
            query,
            json!({"ws": "default", "f": {"inputBucket": "1k"}}),
        )
        .await;
    let msg = d["errors"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("inputBucket") && msg.contains("1k-4k"),
        "{msg}"
    );

    // REST: the same filters and population.
    let r: Value = h
        .http
        .get(h.url("/api/usage?max_output_bucket=%3C256&tools_present=true"))
        .bearer_auth(&h.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        r["population"]["description"],
        "tools_present=true, max_output_bucket=<256"
    );
    assert_eq!(r["rollup"]["request_count"], 1);
    h.stop().await;
}
