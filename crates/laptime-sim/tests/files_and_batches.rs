//! OpenAI Files and Batches over real sockets: uploads read whole as they stream in, listing,
//! content, deletion, each credential seeing only its own objects, and a batch running at its
//! first read into output and error files.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use common::{multipart, Harness};
use futures_util::stream;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const BOUNDARY: &str = "----laptime-sim-test-boundary";

async fn upload(
    h: &Harness,
    key: &str,
    purpose: &str,
    filename: &str,
    bytes: &[u8],
) -> reqwest::Response {
    let body = multipart(BOUNDARY, &[("purpose", purpose)], Some((filename, bytes)));
    h.client
        .post(h.url("/v1/files"))
        .bearer_auth(key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn get(h: &Harness, key: &str, path: &str) -> reqwest::Response {
    h.client
        .get(h.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

async fn post_json(h: &Harness, key: &str, path: &str, body: &Value) -> reqwest::Response {
    h.client
        .post(h.url(path))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_upload_streamed_in_small_pieces_is_stored_whole_and_logged_byte_for_byte() {
    let h = Harness::start().await;
    let content: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let body = multipart(
        BOUNDARY,
        &[("purpose", "user_data")],
        Some(("data.bin", &content)),
    );
    let sent_sha = hex::encode(Sha256::digest(&body));
    let sent_len = body.len();
    // 64 KiB pieces, so the form's boundaries fall anywhere in a piece.
    let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let resp = h
        .client
        .post(h.url("/v1/files"))
        .bearer_auth("sk-a")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(reqwest::Body::wrap_stream(stream::iter(pieces)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-sim-body-sha256"], sent_sha.as_str());
    let file: Value = resp.json().await.unwrap();
    assert_eq!(file["object"], "file");
    assert_eq!(file["id"], "file-laptimesim0001");
    assert_eq!(file["bytes"], content.len());
    assert_eq!(file["filename"], "data.bin");
    assert_eq!(file["purpose"], "user_data");
    assert_eq!(file["status"], "processed");
    assert!(file["created_at"].is_u64());

    let back = get(&h, "sk-a", "/v1/files/file-laptimesim0001/content").await;
    assert_eq!(back.status(), 200);
    assert_eq!(back.headers()["content-type"], "application/octet-stream");
    assert_eq!(back.bytes().await.unwrap().as_ref(), content.as_slice());

    let log = h.sim.requests();
    let logged = &log[0];
    assert_eq!(logged.method, "POST");
    assert_eq!(logged.path_and_query, "/v1/files");
    assert_eq!(logged.body_bytes, sent_len as u64);
    assert_eq!(logged.body_sha256, sent_sha);
    assert_eq!(
        logged.content_type.as_deref(),
        Some(format!("multipart/form-data; boundary={BOUNDARY}").as_str())
    );
    let stats = h.get_json("/sim/stats").await;
    assert_eq!(stats["files_held"], 1);
    assert_eq!(stats["file_bytes_held"], content.len());
}

#[tokio::test]
async fn files_are_listed_paged_and_deleted_only_for_their_owner() {
    let h = Harness::start().await;
    for name in ["a.jsonl", "b.jsonl", "c.jsonl"] {
        assert_eq!(
            upload(&h, "sk-a", "batch", name, b"{}\n").await.status(),
            200
        );
    }
    assert_eq!(
        upload(&h, "sk-b", "vision", "x.png", b"png").await.status(),
        200
    );

    let page: Value = get(&h, "sk-a", "/v1/files?limit=2")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["object"], "list");
    let ids: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["file-laptimesim0003", "file-laptimesim0002"],
        "newest first"
    );
    assert_eq!(page["has_more"], true);
    assert_eq!(page["first_id"], "file-laptimesim0003");
    assert_eq!(page["last_id"], "file-laptimesim0002");
    let next: Value = get(&h, "sk-a", "/v1/files?limit=2&after=file-laptimesim0002")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(next["data"][0]["id"], "file-laptimesim0001");
    assert_eq!(next["has_more"], false);
    let vision: Value = get(&h, "sk-a", "/v1/files?purpose=vision")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(vision["data"], json!([]), "the vision file is sk-b's");

    // Another credential: OpenAI's 404, for every verb.
    for path in [
        "/v1/files/file-laptimesim0001",
        "/v1/files/file-laptimesim0001/content",
    ] {
        let resp = get(&h, "sk-b", path).await;
        assert_eq!(resp.status(), 404, "{path}");
        let e: Value = resp.json().await.unwrap();
        assert_eq!(
            e["error"]["message"],
            "No such File object: file-laptimesim0001"
        );
        assert_eq!(e["error"]["type"], "invalid_request_error");
    }
    let resp = h
        .client
        .delete(h.url("/v1/files/file-laptimesim0001"))
        .bearer_auth("sk-b")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    let resp = h
        .client
        .delete(h.url("/v1/files/file-laptimesim0001"))
        .bearer_auth("sk-a")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let deleted: Value = resp.json().await.unwrap();
    assert_eq!(
        deleted,
        json!({"id": "file-laptimesim0001", "object": "file", "deleted": true})
    );
    assert_eq!(
        get(&h, "sk-a", "/v1/files/file-laptimesim0001")
            .await
            .status(),
        404
    );
}

#[tokio::test]
async fn an_upload_without_purpose_or_file_or_with_a_bad_batch_file_is_a_400() {
    let h = Harness::start().await;
    let send = |body: Vec<u8>| {
        h.client
            .post(h.url("/v1/files"))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={BOUNDARY}"),
            )
            .body(body)
            .send()
    };
    let no_purpose = send(multipart(BOUNDARY, &[], Some(("a.jsonl", b"{}"))))
        .await
        .unwrap();
    assert_eq!(no_purpose.status(), 400);
    let e: Value = no_purpose.json().await.unwrap();
    assert_eq!(e["error"]["param"], "purpose");
    let no_file = send(multipart(BOUNDARY, &[("purpose", "batch")], None))
        .await
        .unwrap();
    assert_eq!(no_file.status(), 400);
    assert_eq!(
        no_file.json::<Value>().await.unwrap()["error"]["param"],
        "file"
    );
    let bad = send(multipart(
        BOUNDARY,
        &[("purpose", "batch")],
        Some(("a.txt", b"{}")),
    ))
    .await
    .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(
        bad.json::<Value>().await.unwrap()["error"]["message"],
        "Invalid file format for Batch API. Must be .jsonl"
    );
    let odd = send(multipart(
        BOUNDARY,
        &[("purpose", "batch_output")],
        Some(("a.jsonl", b"{}")),
    ))
    .await
    .unwrap();
    assert_eq!(odd.status(), 400);
    let not_multipart = h.post("/v1/files", &json!({"purpose": "batch"})).await;
    assert_eq!(not_multipart.status(), 400);
    assert_eq!(
        h.get_json("/sim/stats").await["file_bytes_held"],
        0,
        "refused uploads give their bytes back"
    );
}

fn line(custom_id: &str, url: &str, body: Value) -> String {
    json!({"custom_id": custom_id, "method": "POST", "url": url, "body": body}).to_string()
}

async fn batch_file(h: &Harness, key: &str, lines: &[String]) -> String {
    let content = lines.join("\n") + "\n";
    let file: Value = upload(h, key, "batch", "input.jsonl", content.as_bytes())
        .await
        .json()
        .await
        .unwrap();
    file["id"].as_str().unwrap().to_owned()
}

async fn jsonl(h: &Harness, key: &str, file_id: &str) -> Vec<Value> {
    let resp = get(h, key, &format!("/v1/files/{file_id}/content")).await;
    assert_eq!(resp.status(), 200);
    resp.text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_batch_completes_at_its_first_read_with_one_output_line_per_request() {
    let h = Harness::start().await;
    let chat = |m: &str| json!({"model": m, "messages": [{"role": "user", "content": "hi"}]});
    let input = batch_file(
        &h,
        "sk-a",
        &[
            line("one", "/v1/chat/completions", chat("sim-fast")),
            line("two", "/v1/chat/completions", chat("sim-rate-limited")),
            line("three", "/v1/chat/completions", chat("sim-reasoning")),
        ],
    )
    .await;
    let create = json!({"input_file_id": input, "endpoint": "/v1/chat/completions",
                        "completion_window": "24h", "metadata": {"run": "nightly"}});
    let resp = post_json(&h, "sk-a", "/v1/batches", &create).await;
    assert_eq!(resp.status(), 200);
    let batch: Value = resp.json().await.unwrap();
    assert_eq!(batch["object"], "batch");
    assert_eq!(batch["id"], "batch_laptimesim0001");
    assert_eq!(batch["status"], "validating");
    assert_eq!(batch["endpoint"], "/v1/chat/completions");
    assert_eq!(batch["metadata"], json!({"run": "nightly"}));
    assert_eq!(
        batch["request_counts"],
        json!({"total": 0, "completed": 0, "failed": 0})
    );
    assert!(batch["output_file_id"].is_null());

    // Another credential cannot see it, and does not run it.
    assert_eq!(
        get(&h, "sk-b", "/v1/batches/batch_laptimesim0001")
            .await
            .status(),
        404
    );

    let done: Value = get(&h, "sk-a", "/v1/batches/batch_laptimesim0001")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["request_counts"],
        json!({"total": 3, "completed": 2, "failed": 1})
    );
    assert_eq!(done["model"], "sim-fast");
    for stamp in ["in_progress_at", "finalizing_at", "completed_at"] {
        assert!(done[stamp].is_u64(), "{stamp}");
    }
    // sim-fast: its line's body (sent unstreamed) at a token per four bytes in, 16 out;
    // sim-reasoning: 20 + 8 + 4 in, 10 out (4 reasoning), 8 cached.
    let mut fast = chat("sim-fast");
    fast["stream"] = json!(false);
    let fast_in = fast.to_string().len().div_ceil(4);
    assert_eq!(done["usage"]["input_tokens"], fast_in + 32);
    assert_eq!(done["usage"]["output_tokens"], 26);
    assert_eq!(done["usage"]["input_tokens_details"]["cached_tokens"], 8);
    assert_eq!(
        done["usage"]["output_tokens_details"]["reasoning_tokens"],
        4
    );

    let out_id = done["output_file_id"].as_str().unwrap();
    let err_id = done["error_file_id"].as_str().unwrap();
    let out_file: Value = get(&h, "sk-a", &format!("/v1/files/{out_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(out_file["purpose"], "batch_output");
    assert_eq!(
        get(&h, "sk-b", &format!("/v1/files/{out_id}"))
            .await
            .status(),
        404,
        "the output is sk-a's"
    );

    let out = jsonl(&h, "sk-a", out_id).await;
    assert_eq!(out.len(), 2);
    assert_eq!(out[0]["custom_id"], "one");
    assert_eq!(out[1]["custom_id"], "three");
    assert!(out[0]["id"].as_str().unwrap().starts_with("batch_req_"));
    assert!(out[0]["error"].is_null());
    let response = &out[0]["response"];
    assert_eq!(response["status_code"], 200);
    assert!(response["request_id"].is_string());
    assert_eq!(response["body"]["object"], "chat.completion");
    assert!(response["body"]["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("Sure, here is"));
    let err = jsonl(&h, "sk-a", err_id).await;
    assert_eq!(err.len(), 1);
    assert_eq!(err[0]["custom_id"], "two");
    assert_eq!(err[0]["response"]["status_code"], 429);
    assert_eq!(
        err[0]["response"]["body"]["error"]["code"],
        "rate_limit_exceeded"
    );

    // Read again: the same, nothing run twice.
    let again: Value = get(&h, "sk-a", "/v1/batches/batch_laptimesim0001")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again, done);
    let list: Value = get(&h, "sk-a", "/v1/batches").await.json().await.unwrap();
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"][0]["id"], "batch_laptimesim0001");
    let theirs: Value = get(&h, "sk-b", "/v1/batches").await.json().await.unwrap();
    assert_eq!(theirs["data"], json!([]));
}

#[tokio::test]
async fn an_embeddings_batch_answers_each_line_with_its_vectors() {
    let h = Harness::start().await;
    let emb =
        |input: &str| json!({"model": "text-embedding-3-small", "input": input, "dimensions": 8});
    let input = batch_file(
        &h,
        "sk-a",
        &[
            line("e1", "/v1/embeddings", emb("a")),
            line("e2", "/v1/embeddings", emb("b")),
        ],
    )
    .await;
    let create =
        json!({"input_file_id": input, "endpoint": "/v1/embeddings", "completion_window": "24h"});
    post_json(&h, "sk-a", "/v1/batches", &create).await;
    let list: Value = get(&h, "sk-a", "/v1/batches").await.json().await.unwrap();
    let done = &list["data"][0];
    assert_eq!(done["status"], "completed", "a listing runs the batch too");
    let out = jsonl(&h, "sk-a", done["output_file_id"].as_str().unwrap()).await;
    assert_eq!(out[1]["custom_id"], "e2");
    let body = &out[1]["response"]["body"];
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"][0]["embedding"].as_array().unwrap().len(), 8);
    assert!(done["error_file_id"].is_null());
}

#[tokio::test]
async fn a_batch_with_a_malformed_input_fails_with_openais_line_errors() {
    let h = Harness::start().await;
    let input = batch_file(
        &h,
        "sk-a",
        &[
            "not json".to_owned(),
            line("x", "/v1/embeddings", json!({"model": "m"})),
            line("x", "/v1/chat/completions", json!({"model": "sim-fast"})),
            line("x", "/v1/chat/completions", json!({"model": "sim-fast"})),
        ],
    )
    .await;
    let create = json!({"input_file_id": input, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    post_json(&h, "sk-a", "/v1/batches", &create).await;
    let failed: Value = get(&h, "sk-a", "/v1/batches/batch_laptimesim0001")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(failed["status"], "failed");
    assert!(failed["failed_at"].is_u64());
    let errors = failed["errors"]["data"].as_array().unwrap();
    let codes: Vec<&str> = errors.iter().map(|e| e["code"].as_str().unwrap()).collect();
    assert_eq!(
        codes,
        ["invalid_json_line", "url_mismatch", "duplicate_custom_id"]
    );
    assert_eq!(errors[0]["line"], 1);
    assert_eq!(errors[2]["line"], 4);
    assert!(failed["output_file_id"].is_null());
}

#[tokio::test]
async fn a_batch_needs_the_callers_own_batch_file() {
    let h = Harness::start().await;
    let input = batch_file(
        &h,
        "sk-a",
        &[line(
            "x",
            "/v1/chat/completions",
            json!({"model": "sim-fast"}),
        )],
    )
    .await;
    let create = json!({"input_file_id": input, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let resp = post_json(&h, "sk-b", "/v1/batches", &create).await;
    assert_eq!(resp.status(), 404);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["param"], "input_file_id");
    let bad_endpoint = json!({"input_file_id": input, "endpoint": "/v1/images/generations", "completion_window": "24h"});
    assert_eq!(
        post_json(&h, "sk-a", "/v1/batches", &bad_endpoint)
            .await
            .status(),
        400
    );
    let bad_window = json!({"input_file_id": input, "endpoint": "/v1/chat/completions", "completion_window": "1h"});
    assert_eq!(
        post_json(&h, "sk-a", "/v1/batches", &bad_window)
            .await
            .status(),
        400
    );
    let missing = json!({"endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let resp = post_json(&h, "sk-a", "/v1/batches", &missing).await;
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["code"],
        "missing_required_parameter"
    );
}

#[tokio::test]
async fn a_batch_cancelled_before_its_first_read_ends_cancelled() {
    let h = Harness::start().await;
    let input = batch_file(
        &h,
        "sk-a",
        &[line(
            "x",
            "/v1/chat/completions",
            json!({"model": "sim-fast"}),
        )],
    )
    .await;
    let create = json!({"input_file_id": input, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    post_json(&h, "sk-a", "/v1/batches", &create).await;
    assert_eq!(
        post_json(
            &h,
            "sk-b",
            "/v1/batches/batch_laptimesim0001/cancel",
            &json!({})
        )
        .await
        .status(),
        404
    );
    let cancelling: Value = post_json(
        &h,
        "sk-a",
        "/v1/batches/batch_laptimesim0001/cancel",
        &json!({}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(cancelling["status"], "cancelling");
    assert!(cancelling["cancelling_at"].is_u64());
    let cancelled: Value = get(&h, "sk-a", "/v1/batches/batch_laptimesim0001")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    assert!(cancelled["cancelled_at"].is_u64());
    assert!(cancelled["output_file_id"].is_null());
    // A finished batch cannot be cancelled.
    let input = batch_file(
        &h,
        "sk-a",
        &[line(
            "y",
            "/v1/chat/completions",
            json!({"model": "sim-fast"}),
        )],
    )
    .await;
    let create = json!({"input_file_id": input, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    post_json(&h, "sk-a", "/v1/batches", &create).await;
    get(&h, "sk-a", "/v1/batches/batch_laptimesim0002").await;
    let resp = post_json(
        &h,
        "sk-a",
        "/v1/batches/batch_laptimesim0002/cancel",
        &json!({}),
    )
    .await;
    assert_eq!(resp.status(), 409);
}
