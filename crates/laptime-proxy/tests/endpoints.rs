//! The provider endpoints besides the model calls, over real sockets against the sim: each
//! provider kind's URL and key shape as the sim received them, tokens and bytes in the record,
//! objects (files, batches, stored responses) reached only through the channel and key that
//! created them and only by the workspace that did, listings cut to the caller's objects, and a
//! binary answer relayed as it streams.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

pub mod common;
use common::request_id;

use laptime_proxy::config::{ChannelConfig, Models, Provider};
use laptime_store::auth;
use serde_json::{json, Value};

const KEYS: [(&str, &str); 6] = [
    ("KEY_A", "key-a"),
    ("KEY_B0", "key-b0"),
    ("KEY_B1", "key-b1"),
    ("KEY_AZ", "key-az"),
    ("KEY_AN", "key-an"),
    ("KEY_G", "key-g"),
];

fn models(names: &[&str]) -> Models {
    Models::List(names.iter().map(|m| m.to_string()).collect())
}

/// Five channels on one sim, told apart by their keys (the sim keeps objects per key):
/// `oa-a` (OpenAI, one key, takes the calls naming no model), `oa-b` (OpenAI, two keys),
/// `az` (Azure, deployment URLs), `claude` (Anthropic) and `gem` (Gemini).
async fn gateway() -> common::Harness {
    common::start_with_env(
        |cfg, sim| {
            cfg.channels = vec![
                ChannelConfig {
                    name: "oa-a".into(),
                    provider: Provider::Openai,
                    base_url: Some(format!("{sim}/v1")),
                    api_key_env: Some("KEY_A".into()),
                    models: models(&["text-embedding-3-small", "sim-fast", "tts-1"]),
                    objects: true,
                    ..ChannelConfig::default()
                },
                ChannelConfig {
                    name: "oa-b".into(),
                    provider: Provider::Openai,
                    base_url: Some(format!("{sim}/v1")),
                    api_key_envs: vec!["KEY_B0".into(), "KEY_B1".into()],
                    models: models(&["sim-fast", "whisper-1", "omni-moderation-latest"]),
                    ..ChannelConfig::default()
                },
                ChannelConfig {
                    name: "az".into(),
                    provider: Provider::AzureOpenai,
                    base_url: Some(sim.to_string()),
                    api_key_env: Some("KEY_AZ".into()),
                    api_version: Some("2024-10-21".into()),
                    models: Models::Map([("az-emb".to_string(), "emb-deploy".to_string())].into()),
                    ..ChannelConfig::default()
                },
                ChannelConfig {
                    name: "claude".into(),
                    provider: Provider::Anthropic,
                    base_url: Some(sim.to_string()),
                    api_key_env: Some("KEY_AN".into()),
                    models: models(&["claude-count"]),
                    ..ChannelConfig::default()
                },
                ChannelConfig {
                    name: "gem".into(),
                    provider: Provider::Gemini,
                    base_url: Some(sim.to_string()),
                    api_key_env: Some("KEY_G".into()),
                    models: models(&["text-embedding-004"]),
                    ..ChannelConfig::default()
                },
            ];
        },
        &KEYS,
    )
    .await
}

/// A `multipart/form-data` body of text fields and one file.
fn form(fields: &[(&str, &str)], file: (&str, &str, &[u8])) -> (String, Vec<u8>) {
    let boundary = "laptime-test-boundary";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    let (name, filename, data) = file;
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn upload(h: &common::Harness, token: &str, name: &str, content: &[u8]) -> reqwest::Response {
    let (ct, body) = form(&[("purpose", "batch")], ("file", name, content));
    h.http
        .post(h.url("/v1/files"))
        .bearer_auth(token)
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap()
}

/// A record of another workspace than the harness token's, waiting for the recorder.
async fn stored(
    h: &common::Harness,
    workspace: &str,
    id: &str,
) -> laptime_core::timeline::RequestRecord {
    for _ in 0..300 {
        if let Some(r) = h.store.record(workspace, id).await.unwrap() {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no record {id}");
}

async fn get(h: &common::Harness, token: &str, path: &str) -> reqwest::Response {
    h.http
        .get(h.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn embeddings_reach_the_model_s_channel_and_record_tokens_bytes_and_first_byte() {
    let h = gateway().await;
    let body = json!({"model": "text-embedding-3-small", "input": ["one two", "three"], "encoding_format": "base64", "dimensions": 8});
    let r = h.post("/v1/embeddings", &body).await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let timing = r.headers()["server-timing"].to_str().unwrap().to_string();
    assert!(timing.starts_with("upstream;dur="), "{timing}");
    let text = r.text().await.unwrap();
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["data"].as_array().unwrap().len(), 2);
    assert!(
        answer["data"][0]["embedding"].is_string(),
        "base64 as asked"
    );
    let seen = h.last_sim_request().await;
    assert_eq!(seen["path_and_query"], "/v1/embeddings");
    assert_eq!(seen["authorization"], "Bearer key-a");
    let row = h.row(&id).await;
    assert_eq!(row["endpoint"], "embeddings");
    assert_eq!(row["channel"], "oa-a");
    assert_eq!(row["provider"], "openai");
    assert_eq!(row["outcome"], "completed");
    assert_eq!(row["input_tokens"], answer["usage"]["prompt_tokens"]);
    assert!(
        row["output_tokens"].is_null(),
        "embeddings output nothing countable"
    );
    assert_eq!(row["bytes_in"], serde_json::to_vec(&body).unwrap().len());
    assert_eq!(row["bytes_out"], text.len());
    assert!(row["key_index"].is_null(), "one key: nothing to name");
    assert!(row["ttft_ms"].as_f64().unwrap() > 0.0);
    assert!(row["upstream_ms"].as_f64().unwrap() >= row["ttft_ms"].as_f64().unwrap());
    assert!(row["other"]["timing"]["first_sse_event_ms"].is_null());
    h.stop().await;
}

#[tokio::test]
async fn azure_calls_go_to_the_deployment_with_the_api_version_and_the_key_as_api_key() {
    let h = gateway().await;
    let r = h
        .post(
            "/v1/embeddings",
            &json!({"model": "az-emb", "input": "hello"}),
        )
        .await;
    let status = r.status();
    let id = request_id(&r);
    assert_eq!(status, 200, "{}", r.text().await.unwrap());
    let seen = h.last_sim_request().await;
    assert_eq!(
        seen["path_and_query"],
        "/openai/deployments/emb-deploy/embeddings?api-version=2024-10-21"
    );
    assert_eq!(seen["api_key"], "key-az");
    assert!(seen["authorization"].is_null());
    // The body names the deployment, as the client's model was mapped.
    let row = h.row(&id).await;
    assert_eq!(row["channel"], "az");
    assert_eq!(row["provider"], "azure-openai");
    assert_eq!(row["model"], "az-emb");
    h.stop().await;
}

#[tokio::test]
async fn token_counts_and_gemini_embeddings_are_recorded_in_their_own_shapes() {
    let h = gateway().await;
    let r = h
        .http
        .post(h.url("/v1/messages/count_tokens"))
        .header("x-api-key", &h.token)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "claude-count", "messages": [{"role": "user", "content": "count these words please"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let answer: Value = r.json().await.unwrap();
    let seen = h.last_sim_request().await;
    assert_eq!(seen["path"], "/v1/messages/count_tokens");
    assert_eq!(seen["x_api_key"], "key-an");
    let row = h.row(&id).await;
    assert_eq!(row["endpoint"], "count_tokens");
    assert_eq!(row["dialect"], "messages");
    assert_eq!(row["input_tokens"], answer["input_tokens"]);

    let r = h
        .http
        .post(h.url("/v1beta/models/text-embedding-004:countTokens"))
        .header("x-goog-api-key", &h.token)
        .json(&json!({"contents": [{"parts": [{"text": "how many tokens"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let answer: Value = r.json().await.unwrap();
    let row = h.row(&id).await;
    assert_eq!(row["endpoint"], "count_tokens");
    assert_eq!(row["dialect"], "gemini");
    assert_eq!(row["input_tokens"], answer["totalTokens"]);

    let r = h
        .http
        .post(h.url("/v1beta/models/text-embedding-004:embedContent"))
        .header("x-goog-api-key", &h.token)
        .json(&json!({"content": {"parts": [{"text": "embed me"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let answer: Value = r.json().await.unwrap();
    assert!(!answer["embedding"]["values"].as_array().unwrap().is_empty());
    let seen = h.last_sim_request().await;
    assert_eq!(
        seen["path_and_query"],
        "/v1beta/models/text-embedding-004:embedContent"
    );
    assert_eq!(seen["x_goog_api_key"], "key-g");
    assert_eq!(h.row(&id).await["endpoint"], "embeddings");
    h.stop().await;
}

#[tokio::test]
async fn a_file_and_the_batch_that_names_it_live_on_one_channel_and_only_their_workspace_reaches_them(
) {
    let h = gateway().await;
    let lines = b"{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"sim-fast\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}}\n";
    let r = upload(&h, &h.token, "in.jsonl", lines).await;
    assert_eq!(r.status(), 200);
    let up_id = request_id(&r);
    let file: Value = r.json().await.unwrap();
    let file_id = file["id"].as_str().unwrap().to_string();
    assert_eq!(file["bytes"], lines.len());
    let seen = h.last_sim_request().await;
    assert_eq!(seen["path"], "/v1/files");
    assert_eq!(
        seen["authorization"], "Bearer key-a",
        "the group's objects channel"
    );
    let row = h.row(&up_id).await;
    assert_eq!(row["endpoint"], "files");
    assert_eq!(
        row["bytes_in"], seen["body_bytes"],
        "the whole upload went through"
    );

    // The file is read through its channel; the batch that names it goes there too.
    let r = get(&h, &h.token, &format!("/v1/files/{file_id}")).await;
    assert_eq!(r.status(), 200);
    let r = h
        .post(
            "/v1/batches",
            &json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let batch: Value = r.json().await.unwrap();
    let batch_id = batch["id"].as_str().unwrap().to_string();
    assert_eq!(h.last_sim_request().await["authorization"], "Bearer key-a");
    let r = get(&h, &h.token, &format!("/v1/batches/{batch_id}")).await;
    assert_eq!(r.status(), 200);
    let batch: Value = r.json().await.unwrap();
    assert_eq!(batch["status"], "completed");
    let output = batch["output_file_id"].as_str().unwrap().to_string();
    // The batch's output file was made by the provider: named by the batch, it lives there.
    let r = get(&h, &h.token, &format!("/v1/files/{output}/content")).await;
    assert_eq!(r.status(), 200);
    let content = r.text().await.unwrap();
    let line: Value = serde_json::from_str(content.lines().next().unwrap()).unwrap();
    assert_eq!(line["custom_id"], "a");
    assert_eq!(line["response"]["status_code"], 200);

    // A file uploaded to the provider directly with the same key is not this workspace's.
    let (ct, body) = form(&[("purpose", "batch")], ("file", "other.jsonl", b"{}\n"));
    let direct = h
        .http
        .post(h.sim_url("/v1/files"))
        .bearer_auth("key-a")
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 200);
    let r = get(&h, &h.token, "/v1/files").await;
    assert_eq!(r.status(), 200);
    let listed: Value = r.json().await.unwrap();
    let mut ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut want = vec![file_id.as_str(), output.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want, "the listing keeps this workspace's files only");

    // Another workspace cannot name them: the same 404 as an id nobody made.
    let (other_ws, other) = h
        .store
        .with_conn(|c| {
            let now = laptime_proxy::clock::now_unix_us();
            let ws = auth::create_workspace(c, "other", now)?;
            Ok((
                ws.id.clone(),
                auth::create_token(c, &ws.id, auth::Scope::Proxy, now)?,
            ))
        })
        .unwrap();
    for path in [
        format!("/v1/files/{file_id}"),
        format!("/v1/batches/{batch_id}"),
        "/v1/files/file-nobody".to_string(),
    ] {
        let r = get(&h, &other.token, &path).await;
        assert_eq!(r.status(), 404, "{path}");
        let id = request_id(&r);
        let e: Value = r.json().await.unwrap();
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("No such "),
            "{e}"
        );
        assert_eq!(e["error"]["type"], "invalid_request_error");
        let row = stored(&h, &other_ws, &id).await;
        assert_eq!(
            row.error_class,
            Some(laptime_core::timeline::ErrorClass::UnknownObject)
        );
        assert!(row.channel.is_none(), "no upstream was asked");
    }
    let r = get(&h, &other.token, "/v1/files").await;
    let listed: Value = r.json().await.unwrap();
    assert!(listed["data"].as_array().unwrap().is_empty(), "{listed}");
    h.stop().await;
}

#[tokio::test]
async fn a_response_continued_by_id_reaches_the_channel_and_key_that_stored_it() {
    let h = gateway().await;
    // sim-fast is served by oa-a (one key) and oa-b (two keys): five channel keys the sim
    // tells apart, and only the one that stored a response knows it.
    for stream in [false, true] {
        for _ in 0..4 {
            let r = h
                .post(
                    "/v1/responses",
                    &json!({"model": "sim-fast", "input": "hi", "stream": stream}),
                )
                .await;
            assert_eq!(r.status(), 200);
            let text = r.text().await.unwrap();
            let first = if stream {
                let created = text
                    .lines()
                    .find(|l| l.starts_with("data: ") && l.contains("response.created"))
                    .unwrap();
                let v: Value = serde_json::from_str(&created[6..]).unwrap();
                v["response"]["id"].as_str().unwrap().to_string()
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                v["id"].as_str().unwrap().to_string()
            };
            let stored_with = h.last_sim_request().await["authorization"].clone();
            let r = h
                .post(
                    "/v1/responses",
                    &json!({"model": "sim-fast", "input": "and then?", "previous_response_id": first}),
                )
                .await;
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
            assert_eq!(h.last_sim_request().await["authorization"], stored_with);
            let got = get(&h, &h.token, &format!("/v1/responses/{first}")).await;
            assert_eq!(got.status(), 200);
            assert_eq!(h.last_sim_request().await["authorization"], stored_with);
        }
    }
    let r = h
        .post(
            "/v1/responses",
            &json!({"model": "sim-fast", "input": "x", "previous_response_id": "resp_unknown"}),
        )
        .await;
    assert_eq!(r.status(), 404);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["error"]["message"],
        "Previous response with id 'resp_unknown' not found."
    );
    h.stop().await;
}

#[tokio::test]
async fn a_channel_s_keys_take_turns_and_the_record_names_which_one_served() {
    let h = gateway().await;
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..6 {
        let r = h
            .post(
                "/v1/moderations",
                &json!({"model": "omni-moderation-latest", "input": "fine"}),
            )
            .await;
        assert_eq!(r.status(), 200);
        let id = request_id(&r);
        let auth = h.last_sim_request().await["authorization"]
            .as_str()
            .unwrap()
            .to_string();
        let row = h.row(&id).await;
        assert_eq!(row["endpoint"], "moderations");
        let index = row["key_index"].as_u64().unwrap();
        assert_eq!(auth, format!("Bearer key-b{index}"));
        *seen.entry(index).or_insert(0) += 1;
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [(0, 3), (1, 3)]);
    h.stop().await;
}

#[tokio::test]
async fn speech_audio_is_relayed_as_it_streams_and_its_bytes_are_counted() {
    let h = gateway().await;
    let r = h
        .post(
            "/v1/audio/speech",
            &json!({"model": "tts-1", "voice": "alloy", "input": "a sentence long enough for several frames of audio"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/mpeg");
    let id = request_id(&r);
    let audio = r.bytes().await.unwrap();
    assert!(audio.len() >= 2048, "{}", audio.len());
    let row = h.row(&id).await;
    assert_eq!(row["endpoint"], "audio_speech");
    assert_eq!(row["outcome"], "completed");
    assert_eq!(row["bytes_out"], audio.len());
    let ttft = row["ttft_ms"].as_f64().unwrap();
    let upstream = row["upstream_ms"].as_f64().unwrap();
    // The sim sends a frame every 20 ms: the last byte comes well after the first.
    assert!(upstream > ttft, "first byte {ttft} ms, done {upstream} ms");
    h.stop().await;
}

#[tokio::test]
async fn a_transcription_form_is_routed_by_its_model_field() {
    let h = gateway().await;
    let (ct, body) = form(&[("model", "whisper-1")], ("file", "a.wav", &[7u8; 32_000]));
    let r = h
        .http
        .post(h.url("/v1/audio/transcriptions"))
        .bearer_auth(&h.token)
        .header("content-type", ct)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let answer: Value = r.json().await.unwrap();
    assert!(
        answer["text"].as_str().unwrap().contains("32000 bytes"),
        "{answer}"
    );
    let seen = h.last_sim_request().await;
    assert!(seen["authorization"]
        .as_str()
        .unwrap()
        .starts_with("Bearer key-b"));
    let row = h.row(&id).await;
    assert_eq!(row["endpoint"], "audio_transcriptions");
    assert_eq!(row["model"], "whisper-1");
    assert_eq!(row["bytes_in"], body.len());
    h.stop().await;
}

#[tokio::test]
async fn an_upload_declared_over_the_body_limit_is_refused_before_it_is_read() {
    let h = common::start_with_env(
        |cfg, sim| {
            cfg.server.max_body_bytes = 1024;
            cfg.channels[0].base_url = Some(sim.to_string());
        },
        &[],
    )
    .await;
    let r = upload(&h, &h.token, "big.jsonl", &[b'x'; 4096]).await;
    assert_eq!(r.status(), 413);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "request_too_large");
    let stats = h.sim_stats().await;
    assert_eq!(stats["requests"], 0, "nothing reached the sim");
    h.stop().await;
}
