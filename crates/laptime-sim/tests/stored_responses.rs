//! Stored Responses over real sockets: every answer's own id, retrieval of what a stream or a
//! body finished with, input items, deletion, `previous_response_id` checked against the
//! caller's own responses, `store: false`, and background responses queued and cancelled.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use common::{sse, Harness};
use serde_json::{json, Value};

async fn create(h: &Harness, key: &str, body: &Value) -> reqwest::Response {
    h.client
        .post(h.url("/v1/responses"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn call(h: &Harness, key: &str, method: reqwest::Method, path: &str) -> reqwest::Response {
    h.client
        .request(method, h.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn each_answer_has_its_own_id_and_the_store_keeps_what_it_finished_with() {
    let h = Harness::start().await;
    let body = json!({"model": "sim-fast", "input": "hi"});
    let first: Value = create(&h, "sk-a", &body).await.json().await.unwrap();
    assert_eq!(first["id"], "resp_laptimesim0001");
    assert_eq!(first["store"], true, "stored by default, as OpenAI does");

    let streamed = create(
        &h,
        "sk-a",
        &json!({"model": "sim-reasoning", "input": "hi", "stream": true}),
    )
    .await
    .text()
    .await
    .unwrap();
    let events = sse(&streamed);
    let completed = events
        .iter()
        .find(|e| e.event.as_deref() == Some("response.completed"))
        .unwrap()
        .json();
    assert_eq!(events[0].json()["response"]["id"], "resp_laptimesim0002");
    assert_eq!(completed["response"]["id"], "resp_laptimesim0002");

    let stored: Value = call(
        &h,
        "sk-a",
        reqwest::Method::GET,
        "/v1/responses/resp_laptimesim0002",
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(
        stored, completed["response"],
        "the stream's final response, field for field"
    );
    let stored: Value = call(
        &h,
        "sk-a",
        reqwest::Method::GET,
        "/v1/responses/resp_laptimesim0001",
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(stored, first);
    assert_eq!(h.get_json("/sim/stats").await["responses_held"], 2);
}

#[tokio::test]
async fn another_credentials_response_is_not_found_and_cannot_be_continued() {
    let h = Harness::start().await;
    let first: Value = create(&h, "sk-a", &json!({"model": "sim-fast", "input": "hi"}))
        .await
        .json()
        .await
        .unwrap();
    let id = first["id"].as_str().unwrap();

    let resp = call(
        &h,
        "sk-b",
        reqwest::Method::GET,
        &format!("/v1/responses/{id}"),
    )
    .await;
    assert_eq!(resp.status(), 404);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(
        e["error"]["message"],
        format!("Response with id '{id}' not found.")
    );
    assert_eq!(e["error"]["type"], "invalid_request_error");

    let follow = json!({"model": "sim-fast", "input": "and then?", "previous_response_id": id});
    let resp = create(&h, "sk-b", &follow).await;
    assert_eq!(resp.status(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(
        e,
        json!({"error": {
            "message": format!("Previous response with id '{id}' not found."),
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }})
    );
    // Its owner continues it, and the new response says so.
    let next: Value = create(&h, "sk-a", &follow).await.json().await.unwrap();
    assert_eq!(next["previous_response_id"], id);
    assert_ne!(next["id"], id);
    // A streamed follow-up is refused the same way, before any stream.
    let resp = create(
        &h,
        "sk-b",
        &json!({"model": "sim-fast", "input": "x", "stream": true, "previous_response_id": id}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["content-type"], "application/json");
}

#[tokio::test]
async fn input_items_are_listed_and_a_deleted_response_is_gone() {
    let h = Harness::start().await;
    let body = json!({"model": "sim-fast", "input": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    ]});
    let made: Value = create(&h, "sk-a", &body).await.json().await.unwrap();
    let id = made["id"].as_str().unwrap();
    let items: Value = call(
        &h,
        "sk-a",
        reqwest::Method::GET,
        &format!("/v1/responses/{id}/input_items?order=asc"),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(items["object"], "list");
    let data = items["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[0]["type"], "message");
    assert_eq!(data[0]["role"], "developer");
    assert_eq!(
        data[0]["content"],
        json!([{"type": "input_text", "text": "Be brief."}])
    );
    assert_eq!(data[1]["content"][0]["text"], "hi");
    assert!(data.iter().all(|i| i["id"].is_string()));
    assert_eq!(items["first_id"], data[0]["id"]);
    assert_eq!(items["has_more"], false);
    let newest_first: Value = call(
        &h,
        "sk-a",
        reqwest::Method::GET,
        &format!("/v1/responses/{id}/input_items?limit=1"),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(newest_first["data"][0]["role"], "user");
    assert_eq!(newest_first["has_more"], true);

    assert_eq!(
        call(
            &h,
            "sk-b",
            reqwest::Method::DELETE,
            &format!("/v1/responses/{id}")
        )
        .await
        .status(),
        404
    );
    let deleted: Value = call(
        &h,
        "sk-a",
        reqwest::Method::DELETE,
        &format!("/v1/responses/{id}"),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response", "deleted": true})
    );
    assert_eq!(
        call(
            &h,
            "sk-a",
            reqwest::Method::GET,
            &format!("/v1/responses/{id}")
        )
        .await
        .status(),
        404
    );
    assert_eq!(
        call(
            &h,
            "sk-a",
            reqwest::Method::GET,
            &format!("/v1/responses/{id}/input_items")
        )
        .await
        .status(),
        404
    );
}

#[tokio::test]
async fn a_response_with_store_false_is_answered_but_not_kept() {
    let h = Harness::start().await;
    let made: Value = create(
        &h,
        "sk-a",
        &json!({"model": "sim-fast", "input": "hi", "store": false}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(made["store"], false);
    let id = made["id"].as_str().unwrap();
    assert_eq!(
        call(
            &h,
            "sk-a",
            reqwest::Method::GET,
            &format!("/v1/responses/{id}")
        )
        .await
        .status(),
        404
    );
    let follow = json!({"model": "sim-fast", "input": "x", "previous_response_id": id});
    assert_eq!(create(&h, "sk-a", &follow).await.status(), 400);
}

#[tokio::test]
async fn a_background_response_is_queued_then_completed_at_its_first_read_or_cancelled_before() {
    let h = Harness::start().await;
    let body = json!({"model": "sim-fast", "input": "hi", "background": true});
    let queued: Value = create(&h, "sk-a", &body).await.json().await.unwrap();
    assert_eq!(queued["status"], "queued");
    assert_eq!(queued["background"], true);
    assert_eq!(queued["output"], json!([]));
    let id = queued["id"].as_str().unwrap().to_owned();
    let done: Value = call(
        &h,
        "sk-a",
        reqwest::Method::GET,
        &format!("/v1/responses/{id}"),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["type"], "message");
    // Cancelling a finished background response answers it as it is.
    let again: Value = call(
        &h,
        "sk-a",
        reqwest::Method::POST,
        &format!("/v1/responses/{id}/cancel"),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(again["status"], "completed");

    let queued: Value = create(&h, "sk-a", &body).await.json().await.unwrap();
    let id = queued["id"].as_str().unwrap().to_owned();
    assert_eq!(
        call(
            &h,
            "sk-b",
            reqwest::Method::POST,
            &format!("/v1/responses/{id}/cancel")
        )
        .await
        .status(),
        404
    );
    let cancelled: Value = call(
        &h,
        "sk-a",
        reqwest::Method::POST,
        &format!("/v1/responses/{id}/cancel"),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    let read: Value = call(
        &h,
        "sk-a",
        reqwest::Method::GET,
        &format!("/v1/responses/{id}"),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(read["status"], "cancelled");
}

#[tokio::test]
async fn only_a_background_response_can_be_cancelled() {
    let h = Harness::start().await;
    let made: Value = create(&h, "sk-a", &json!({"model": "sim-fast", "input": "hi"}))
        .await
        .json()
        .await
        .unwrap();
    let id = made["id"].as_str().unwrap();
    let resp = call(
        &h,
        "sk-a",
        reqwest::Method::POST,
        &format!("/v1/responses/{id}/cancel"),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert_eq!(
        e["error"]["message"],
        "Cannot cancel a synchronous response."
    );
}
