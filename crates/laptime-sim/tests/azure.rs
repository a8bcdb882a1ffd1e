//! Azure OpenAI's URL shapes over real sockets: deployments (the deployment as the model), the
//! dated data-plane paths, the v1 paths, Azure's own 404 without `api-version`, and the request
//! log showing the URL and the `api-key` header byte for byte.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use common::{multipart, sse, Harness};
use laptime_core::Dialect;
use laptime_sim::{preset, schedule};
use serde_json::{json, Value};

const VERSION: &str = "api-version=2024-10-21";

async fn azure_post(h: &Harness, path: &str, body: &Value) -> reqwest::Response {
    h.client
        .post(h.url(path))
        .header("api-key", "azure-key-1")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_deployment_streams_chat_exactly_as_openai_with_the_deployment_as_model() {
    let h = Harness::start().await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "stream": true,
                      "stream_options": {"include_usage": true}});
    let path = format!("/openai/deployments/sim-fast/chat/completions?{VERSION}");
    let resp = azure_post(&h, &path, &body).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().contains_key("x-request-id"));
    let text = resp.text().await.unwrap();
    // sim-fast counts the body it was sent as its input.
    let sent = body.to_string().len();
    let expected: String = schedule(
        Dialect::Chat,
        &preset("sim-fast").unwrap(),
        "sim-fast",
        (true, true),
        sent,
    )
    .steps
    .iter()
    .map(|s| std::str::from_utf8(&s.bytes).unwrap())
    .collect();
    assert_eq!(text, expected);

    let logged = &h.sim.requests()[0];
    assert_eq!(logged.method, "POST");
    assert_eq!(logged.path, "/openai/deployments/sim-fast/chat/completions");
    assert_eq!(logged.path_and_query, path);
    assert_eq!(logged.api_key.as_deref(), Some("azure-key-1"));
    assert!(logged.authorization.is_none());
    assert_eq!(logged.model.as_deref(), Some("sim-fast"));
    assert_eq!(logged.content_type.as_deref(), Some("application/json"));
    assert_eq!(logged.body_bytes, body.to_string().len() as u64);
    let log = h.get_json("/sim/requests").await;
    assert_eq!(log[0]["api_key"], "azure-key-1");
    assert_eq!(log[0]["path_and_query"], path.as_str());
    assert_eq!(log[0]["method"], "POST");
    assert_eq!(log[0]["body_bytes"], body.to_string().len());
}

#[tokio::test]
async fn without_api_version_azure_answers_its_own_404() {
    let h = Harness::start().await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    for path in [
        "/openai/deployments/sim-fast/chat/completions",
        "/openai/deployments/sim-fast/no-such-operation?api-version=2024-10-21",
    ] {
        let resp = azure_post(&h, path, &body).await;
        assert_eq!(resp.status(), 404, "{path}");
        let e: Value = resp.json().await.unwrap();
        assert_eq!(
            e,
            json!({"error": {"code": "404", "message": "Resource not found"}}),
            "{path}"
        );
    }
    let resp = azure_post(
        &h,
        "/openai/deployments/sim-fast/chat/completions?api-version=soon",
        &body,
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(h.sim.requests().len(), 3, "refused URLs are logged too");
}

#[tokio::test]
async fn the_other_deployment_operations_answer_as_openais() {
    let h = Harness::start().await;
    let emb: Value = azure_post(
        &h,
        &format!("/openai/deployments/text-embedding-3-large/embeddings?{VERSION}"),
        &json!({"input": "x"}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(emb["model"], "text-embedding-3-large");
    assert_eq!(emb["data"][0]["embedding"].as_array().unwrap().len(), 3072);
    let completion: Value = azure_post(
        &h,
        &format!("/openai/deployments/sim-fast/completions?{VERSION}"),
        &json!({"prompt": "x"}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(completion["model"], "sim-fast");
    assert_eq!(completion["object"], "text_completion");
    let image: Value = azure_post(
        &h,
        &format!("/openai/deployments/gpt-image-1/images/generations?{VERSION}"),
        &json!({"prompt": "x"}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert!(image["data"][0]["b64_json"].is_string());
    let speech = azure_post(
        &h,
        &format!("/openai/deployments/tts/audio/speech?{VERSION}"),
        &json!({"input": "hi", "voice": "alloy"}),
    )
    .await;
    assert_eq!(speech.headers()["content-type"], "audio/mpeg");
    let boundary = "azure-boundary";
    let transcription: Value = h
        .client
        .post(h.url(&format!(
            "/openai/deployments/whisper/audio/transcriptions?{VERSION}"
        )))
        .header("api-key", "azure-key-1")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(multipart(
            boundary,
            &[],
            Some(("a.wav", b"RIFF....".as_slice())),
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(transcription["text"], "The sim heard 8 bytes of a.wav.");
    assert_eq!(
        h.sim.requests().last().unwrap().model.as_deref(),
        Some("whisper")
    );
}

#[tokio::test]
async fn the_v1_and_dated_paths_serve_responses_and_files_owned_by_the_api_key() {
    let h = Harness::start().await;
    let made: Value = azure_post(
        &h,
        "/openai/v1/responses",
        &json!({"model": "sim-fast", "input": "hi"}),
    )
    .await
    .json()
    .await
    .unwrap();
    let id = made["id"].as_str().unwrap();
    let get =
        |key: &'static str, path: String| h.client.get(h.url(&path)).header("api-key", key).send();
    let stored = get("azure-key-1", format!("/openai/v1/responses/{id}"))
        .await
        .unwrap();
    assert_eq!(stored.status(), 200);
    assert_eq!(stored.json::<Value>().await.unwrap(), made);
    // The dated data-plane path reaches the same store.
    let dated = get(
        "azure-key-1",
        format!("/openai/responses/{id}?api-version=2025-04-01-preview"),
    )
    .await
    .unwrap();
    assert_eq!(dated.status(), 200);
    // Another key is another resource.
    let other = get("azure-key-2", format!("/openai/v1/responses/{id}"))
        .await
        .unwrap();
    assert_eq!(other.status(), 404);

    let streamed = azure_post(
        &h,
        "/openai/v1/chat/completions",
        &json!({"model": "sim-fast", "stream": true}),
    )
    .await;
    let events = sse(&streamed.text().await.unwrap());
    assert_eq!(events.last().unwrap().data, "[DONE]");

    let boundary = "b";
    let uploaded: Value = h
        .client
        .post(h.url("/openai/v1/files"))
        .header("api-key", "azure-key-1")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(multipart(
            boundary,
            &[("purpose", "batch")],
            Some(("in.jsonl", b"{}\n")),
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let file_id = uploaded["id"].as_str().unwrap();
    let listed: Value = get("azure-key-1", format!("/openai/files?{VERSION}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["data"][0]["id"], file_id);
    let none: Value = get("azure-key-2", "/openai/v1/files".to_owned())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(none["data"], json!([]));
}

#[tokio::test]
async fn a_deployment_is_the_model_unless_the_body_names_a_preset() {
    let h = Harness::start().await;
    let path = format!("/openai/deployments/sim-max-tokens/chat/completions?{VERSION}");
    // Azure ignores the body's model: the deployment's script answers.
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let answer: Value = azure_post(&h, &path, &body).await.json().await.unwrap();
    assert_eq!(answer["model"], "sim-max-tokens");
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    // A preset in the body still picks its script.
    let body = json!({"model": "sim-fast", "messages": [{"role": "user", "content": "hi"}]});
    let answer: Value = azure_post(&h, &path, &body).await.json().await.unwrap();
    assert_eq!(answer["model"], "sim-fast");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
}
