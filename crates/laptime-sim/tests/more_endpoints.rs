//! The stateless endpoints over real sockets: embeddings (OpenAI's two encodings, Gemini's),
//! token counts, moderations, images, speech streamed in frames, transcriptions from a
//! multipart upload, legacy completions and model lookup.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use base64::Engine as _;
use common::{multipart, raw_chunks, sse, Harness};
use serde_json::{json, Value};

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[tokio::test]
async fn embeddings_in_base64_decode_to_the_same_unit_vectors_as_the_floats() {
    let h = Harness::start().await;
    let ask = |format: &str| json!({"model": "text-embedding-3-small", "input": ["hello", "world"], "encoding_format": format});
    let float: Value = h
        .post("/v1/embeddings", &ask("float"))
        .await
        .json()
        .await
        .unwrap();
    let b64: Value = h
        .post("/v1/embeddings", &ask("base64"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(float["object"], "list");
    assert_eq!(float["model"], "text-embedding-3-small");
    // "hello" and "world": two tokens each by the sim's rule (⌈5 / 4⌉).
    assert_eq!(
        float["usage"],
        json!({"prompt_tokens": 4, "total_tokens": 4})
    );
    for i in 0..2 {
        let item = &float["data"][i];
        assert_eq!(item["object"], "embedding");
        assert_eq!(item["index"], i);
        let v = floats(&item["embedding"]);
        assert_eq!(v.len(), 1536);
        let norm: f64 = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        // What the SDKs do with base64: little-endian float32s.
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64["data"][i]["embedding"].as_str().unwrap())
            .unwrap();
        let decoded: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(decoded, v, "input {i}");
    }
    assert_ne!(float["data"][0]["embedding"], float["data"][1]["embedding"]);
    let again: Value = h
        .post("/v1/embeddings", &ask("float"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["data"], float["data"], "deterministic");
}

#[tokio::test]
async fn embeddings_take_tokens_and_dimensions_and_refuse_what_openai_refuses() {
    let h = Harness::start().await;
    let tokens: Value = h
        .post(
            "/v1/embeddings",
            &json!({"model": "m", "input": [[1, 2, 3], [4]], "dimensions": 256}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        tokens["data"][1]["embedding"].as_array().unwrap().len(),
        256
    );
    assert_eq!(tokens["usage"]["prompt_tokens"], 4, "one per token id");
    let large: Value = h
        .post(
            "/v1/embeddings",
            &json!({"model": "text-embedding-3-large", "input": "x"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        large["data"][0]["embedding"].as_array().unwrap().len(),
        3072
    );
    for (body, param) in [
        (json!({"model": "m", "input": ""}), Value::Null),
        (json!({"model": "m", "input": []}), Value::Null),
        (
            json!({"model": "m", "input": "x", "dimensions": 9000}),
            json!("dimensions"),
        ),
        (
            json!({"model": "m", "input": "x", "encoding_format": "hex"}),
            json!("encoding_format"),
        ),
    ] {
        let resp = h.post("/v1/embeddings", &body).await;
        assert_eq!(resp.status(), 400, "{body}");
        assert!(resp.headers().contains_key("x-request-id"));
        let e: Value = resp.json().await.unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(e["error"]["param"], param, "{body}");
    }
    let no_model = h.post("/v1/embeddings", &json!({"input": "x"})).await;
    assert_eq!(no_model.status(), 400);
}

#[tokio::test]
async fn gemini_embeds_and_counts_on_both_api_versions() {
    let h = Harness::start().await;
    let content = json!({"content": {"parts": [{"text": "hello"}]}});
    let one: Value = h
        .post("/v1beta/models/text-embedding-004:embedContent", &content)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(one["embedding"]["values"].as_array().unwrap().len(), 768);
    let v1: Value = h
        .post(
            "/v1/models/gemini-embedding-001:embedContent",
            &json!({"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 16}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v1["embedding"]["values"].as_array().unwrap().len(), 16);
    let batch: Value = h
        .post(
            "/v1beta/models/gemini-embedding-001:batchEmbedContents",
            &json!({"requests": [
                {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "a"}]}},
                {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "b"}]}},
            ]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(batch["embeddings"].as_array().unwrap().len(), 2);
    assert_eq!(
        batch["embeddings"][0]["values"].as_array().unwrap().len(),
        3072
    );

    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]});
    let count: Value = h
        .post("/v1beta/models/gemini-2.5-flash:countTokens", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(count["totalTokens"], 3, "\"user\" 1 and \"hello\" 2");
    // A preset counts what its answer reports as the prompt.
    let count: Value = h
        .post("/v1beta/models/sim-fast:countTokens", &body)
        .await
        .json()
        .await
        .unwrap();
    let answer: Value = h
        .post("/v1beta/models/sim-fast:generateContent", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        count["totalTokens"],
        answer["usageMetadata"]["promptTokenCount"]
    );

    let bad = h
        .post("/v1beta/models/text-embedding-004:embedContent", &json!({}))
        .await;
    assert_eq!(bad.status(), 400);
    let e: Value = bad.json().await.unwrap();
    assert_eq!(e["error"]["status"], "INVALID_ARGUMENT");
}

#[tokio::test]
async fn anthropic_count_tokens_matches_the_input_a_message_reports() {
    let h = Harness::start().await;
    let body = json!({"model": "sim-long", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]});
    let resp = h.post("/v1/messages/count_tokens", &body).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().contains_key("request-id"));
    let count: Value = resp.json().await.unwrap();
    let message: Value = h.post("/v1/messages", &body).await.json().await.unwrap();
    assert_eq!(
        count,
        json!({"input_tokens": message["usage"]["input_tokens"]})
    );
    let other: Value = h
        .post("/v1/messages/count_tokens", &json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hello"}]}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(other["input_tokens"], 3);
    let bad = h
        .post("/v1/messages/count_tokens", &json!({"messages": []}))
        .await;
    assert_eq!(bad.status(), 400);
    let e: Value = bad.json().await.unwrap();
    assert_eq!(e["type"], "error", "Anthropic's error shape");
}

#[tokio::test]
async fn moderations_answer_one_result_per_input_and_flag_the_flag_word() {
    let h = Harness::start().await;
    let out: Value = h
        .post(
            "/v1/moderations",
            &json!({"model": "omni-moderation-latest", "input": ["fine", "this is sim-flagged"]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(out["id"].as_str().unwrap().starts_with("modr-"));
    assert_eq!(out["model"], "omni-moderation-latest");
    assert_eq!(out["results"][0]["flagged"], false);
    assert_eq!(out["results"][1]["flagged"], true);
    assert_eq!(out["results"][1]["categories"]["violence"], true);
    assert!(out["results"][0]["category_scores"]["self-harm/intent"].is_number());
    assert_eq!(
        out["results"][0]["category_applied_input_types"]["sexual"],
        json!(["text"])
    );
}

#[tokio::test]
async fn images_are_a_real_png_as_base64_or_as_a_url_on_the_sim() {
    let h = Harness::start().await;
    let gpt: Value = h
        .post(
            "/v1/images/generations",
            &json!({"model": "gpt-image-1", "prompt": "a dot", "n": 2}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(gpt["created"].is_u64());
    assert_eq!(gpt["data"].as_array().unwrap().len(), 2);
    let png = base64::engine::general_purpose::STANDARD
        .decode(gpt["data"][0]["b64_json"].as_str().unwrap())
        .unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(gpt["usage"]["input_tokens"], 2);
    assert_eq!(gpt["usage"]["output_tokens"], 544);
    assert_eq!(gpt["output_format"], "png");

    let dalle: Value = h
        .post(
            "/v1/images/generations",
            &json!({"model": "dall-e-3", "prompt": "a dot"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(dalle["data"][0]["revised_prompt"], "a dot");
    assert!(dalle.get("usage").is_none());
    let url = dalle["data"][0]["url"].as_str().unwrap();
    let fetched = h.client.get(url).send().await.unwrap();
    assert_eq!(fetched.headers()["content-type"], "image/png");
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), png.as_slice());

    let too_many = h
        .post("/v1/images/generations", &json!({"prompt": "x", "n": 11}))
        .await;
    assert_eq!(too_many.status(), 400);
    let e: Value = too_many.json().await.unwrap();
    assert_eq!(e["error"]["code"], "integer_above_max_value");
    assert_eq!(
        h.post("/v1/images/generations", &json!({"model": "dall-e-2"}))
            .await
            .status(),
        400
    );
}

#[tokio::test]
async fn speech_arrives_as_several_body_frames_without_a_content_length() {
    let h = Harness::start().await;
    let body = json!({"model": "gpt-4o-mini-tts", "voice": "alloy", "input": "x".repeat(80),
                      "response_format": "wav", "laptime_sim": {"frame_ms": 2}})
    .to_string();
    let request = format!(
        "POST /v1/audio/speech HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let (head, chunks) = raw_chunks(&h, request.as_bytes()).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("content-type: audio/wav"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    // 80 bytes of input: five frames of 1 KiB, each its own chunk, the first a WAV header.
    assert_eq!(chunks.len(), 5);
    assert!(chunks.iter().all(|c| c.len() == 1024));
    assert!(chunks[0].starts_with(b"RIFF"));
    assert_eq!(h.sim.stats().streams_completed, 1);

    let mp3 = h
        .post(
            "/v1/audio/speech",
            &json!({"model": "tts-1", "voice": "alloy", "input": "hi"}),
        )
        .await;
    assert_eq!(mp3.headers()["content-type"], "audio/mpeg");
    assert_eq!(mp3.bytes().await.unwrap().len(), 2048);
    let missing = h
        .post(
            "/v1/audio/speech",
            &json!({"model": "tts-1", "input": "hi"}),
        )
        .await;
    assert_eq!(missing.status(), 400);
}

#[tokio::test]
async fn speech_as_sse_sends_audio_deltas_then_done_with_usage() {
    let h = Harness::start().await;
    let body = json!({"model": "gpt-4o-mini-tts", "voice": "alloy", "input": "hello", "stream_format": "sse"});
    let resp = h.post("/v1/audio/speech", &body).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = sse(&resp.text().await.unwrap());
    let (done, deltas) = events.split_last().unwrap();
    assert_eq!(deltas.len(), 2);
    for d in deltas {
        let audio = base64::engine::general_purpose::STANDARD
            .decode(d.json()["audio"].as_str().unwrap())
            .unwrap();
        assert_eq!(audio.len(), 1024);
    }
    assert_eq!(done.json()["type"], "speech.audio.done");
    assert_eq!(done.json()["usage"]["input_tokens"], 2);
}

async fn transcribe(
    h: &Harness,
    fields: &[(&str, &str)],
    file: Option<(&str, &[u8])>,
) -> reqwest::Response {
    let boundary = "sim-audio-boundary";
    h.client
        .post(h.url("/v1/audio/transcriptions"))
        .bearer_auth("sk-a")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(multipart(boundary, fields, file))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_transcription_reads_the_multipart_upload_in_each_response_format() {
    let h = Harness::start().await;
    let audio = vec![7u8; 32_000];
    let file = Some(("speech.mp3", audio.as_slice()));
    let json_answer: Value = transcribe(&h, &[("model", "whisper-1")], file)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        json_answer,
        json!({"text": "The sim heard 32000 bytes of speech.mp3.", "usage": {"type": "duration", "seconds": 2}})
    );
    assert_eq!(h.sim.requests()[0].model.as_deref(), Some("whisper-1"));
    let tokens: Value = transcribe(&h, &[("model", "gpt-4o-transcribe")], file)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(tokens["usage"]["type"], "tokens");
    assert_eq!(tokens["usage"]["input_token_details"]["audio_tokens"], 32);

    let text = transcribe(
        &h,
        &[("model", "whisper-1"), ("response_format", "text")],
        file,
    )
    .await;
    assert!(text.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert_eq!(
        text.text().await.unwrap(),
        "The sim heard 32000 bytes of speech.mp3.\n"
    );
    let srt = transcribe(
        &h,
        &[("model", "whisper-1"), ("response_format", "srt")],
        file,
    )
    .await;
    assert_eq!(
        srt.text().await.unwrap(),
        "1\n00:00:00,000 --> 00:00:02,000\nThe sim heard 32000 bytes of speech.mp3.\n\n"
    );
    let vtt = transcribe(
        &h,
        &[("model", "whisper-1"), ("response_format", "vtt")],
        file,
    )
    .await;
    assert!(vtt
        .text()
        .await
        .unwrap()
        .starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:02.000\n"));
    let verbose: Value = transcribe(
        &h,
        &[
            ("model", "whisper-1"),
            ("response_format", "verbose_json"),
            ("language", "en"),
        ],
        file,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(verbose["task"], "transcribe");
    assert_eq!(verbose["language"], "en");
    assert_eq!(verbose["duration"], 2.0);
    assert_eq!(verbose["segments"][0]["end"], 2.0);

    let no_file = transcribe(&h, &[("model", "whisper-1")], None).await;
    assert_eq!(no_file.status(), 400);
    assert_eq!(
        no_file.json::<Value>().await.unwrap()["error"]["param"],
        "file"
    );
    let no_model = transcribe(&h, &[], file).await;
    assert_eq!(no_model.status(), 400);
    assert_eq!(
        no_model.json::<Value>().await.unwrap()["error"]["param"],
        "model"
    );
    assert_eq!(
        h.get_json("/sim/stats").await["file_bytes_held"],
        0,
        "audio is not kept"
    );
}

#[tokio::test]
async fn legacy_completions_play_the_scripts_text() {
    let h = Harness::start().await;
    let whole: Value = h
        .post(
            "/v1/completions",
            &json!({"model": "sim-fast", "prompt": "Say"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["object"], "text_completion");
    assert_eq!(whole["choices"][0]["finish_reason"], "stop");
    assert!(whole["choices"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Sure, here is"));
    let streamed = h
        .post(
            "/v1/completions",
            &json!({"model": "sim-fast", "prompt": "Say", "stream": true}),
        )
        .await
        .text()
        .await
        .unwrap();
    let events = sse(&streamed);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let text: String = events[..events.len() - 1]
        .iter()
        .filter_map(|e| e.json()["choices"][0]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, whole["choices"][0]["text"].as_str().unwrap());
}

#[tokio::test]
async fn a_model_is_looked_up_by_id() {
    let h = Harness::start().await;
    let model: Value = h.get_json("/v1/models/sim-fast").await;
    assert_eq!(
        model,
        json!({"id": "sim-fast", "object": "model", "created": 1_760_000_000, "owned_by": "laptime-sim"})
    );
    let missing = h
        .client
        .get(h.url("/v1/models/gpt-9"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap()["error"]["code"],
        "model_not_found"
    );
}

#[tokio::test]
async fn a_translation_is_a_transcription_into_english() {
    let h = Harness::start().await;
    let boundary = "b";
    let send = |format: &str| {
        h.client
            .post(h.url("/v1/audio/translations"))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(multipart(
                boundary,
                &[("model", "whisper-1"), ("response_format", format)],
                Some(("fr.mp3", b"bonjour".as_slice())),
            ))
            .send()
    };
    let json_answer: Value = send("json").await.unwrap().json().await.unwrap();
    assert_eq!(json_answer["text"], "The sim translated 7 bytes of fr.mp3.");
    let verbose: Value = send("verbose_json").await.unwrap().json().await.unwrap();
    assert_eq!(verbose["task"], "translate");
    assert_eq!(verbose["language"], "english");
}
