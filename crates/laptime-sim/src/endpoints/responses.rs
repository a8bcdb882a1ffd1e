//! Stored Responses: what `POST /v1/responses` remembers, and `GET /v1/responses/{id}`,
//! `DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
//! `GET /v1/responses/{id}/input_items`.
//!
//! Every Responses answer gets the next `resp_laptimesim{n:04}` id (the one its stream or body
//! carries); with `store` not false it is kept under the request's credential (limits in
//! [`crate::objects::responses`]). A `previous_response_id` the credential does not have is
//! OpenAI's 400 `previous_response_not_found`. Only a background response can be cancelled;
//! cancelling another is OpenAI's 400.

use serde_json::Value;

use crate::json::{obj, J};
use crate::objects::responses::{NewResponse, NotBackground};
use crate::objects::Owner;
use crate::query;
use crate::script::{Answer, ResponseMeta};
use crate::server::Sim;
use crate::wire::ApiError;

use super::files::list_object;
use super::Ctx;

const MAX_LIST: usize = 100;
const DEFAULT_LIST: usize = 20;

/// The identity of the response a `POST /v1/responses` will make, or OpenAI's error for a
/// `previous_response_id` the caller does not have.
pub(crate) fn prepare(sim: &Sim, owner: &Owner, body: &Value) -> Result<ResponseMeta, ApiError> {
    let mut store = sim.objects().responses();
    let previous = body.get("previous_response_id").and_then(Value::as_str);
    if let Some(previous) = previous {
        if !store.has(owner, previous) {
            return Err(ApiError::invalid_request(format!(
                "Previous response with id '{previous}' not found."
            ))
            .param("previous_response_id")
            .code("previous_response_not_found"));
        }
    }
    Ok(ResponseMeta {
        id: store.next_id(),
        store: body.get("store").and_then(Value::as_bool) != Some(false),
        background: body.get("background").and_then(Value::as_bool) == Some(true),
        previous_response_id: previous.map(str::to_owned),
    })
}

/// Keeps the response an answer made, if the request let it be stored.
pub(crate) fn remember(
    sim: &Sim,
    owner: &Owner,
    meta: &ResponseMeta,
    body: &Value,
    answer: &Answer,
) {
    let Some(object) = answer.stored.clone().filter(|_| meta.store) else {
        return;
    };
    sim.objects().responses().insert(NewResponse {
        id: meta.id.clone(),
        owner: owner.clone(),
        object,
        cancelled: answer.cancelled.clone(),
        input_items: input_items_of(&meta.id, body.get("input")),
    });
}

/// The request's `input` as stored items, each with an id: a string is one user message, a
/// message's string content becomes one `input_text` part, other items are kept as sent.
fn input_items_of(response_id: &str, input: Option<&Value>) -> Vec<String> {
    let suffix = response_id.strip_prefix("resp_").unwrap_or(response_id);
    let item_id = |i: usize| format!("msg_{suffix}in{i:02}");
    let message = |id: String, role: &str, content: J| {
        obj! {"id": id, "type": "message", "role": role, "content": content, "status": "completed"}
    };
    let text = |t: &str| J::Arr(vec![obj! {"type": "input_text", "text": t}]);
    match input {
        Some(Value::String(s)) => vec![message(item_id(0), "user", text(s)).encode()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let role = item.get("role").and_then(Value::as_str);
                let is_message = item
                    .get("type")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "message");
                match (role, item.get("content")) {
                    (Some(role), Some(Value::String(s))) if is_message => {
                        message(item_id(i), role, text(s)).encode()
                    }
                    (Some(role), Some(content)) if is_message => {
                        message(item_id(i), role, J::Raw(content.to_string())).encode()
                    }
                    _ => {
                        let mut item = item.clone();
                        if let Value::Object(fields) = &mut item {
                            fields
                                .entry("id")
                                .or_insert_with(|| Value::String(item_id(i)));
                        }
                        item.to_string()
                    }
                }
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("Response with id '{id}' not found."), None)
}

pub(super) fn get(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    ctx.sim
        .objects()
        .responses()
        .read(ctx.owner, id)
        .ok_or_else(|| not_found(id))
}

pub(super) fn delete(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    if !ctx.sim.objects().responses().delete(ctx.owner, id) {
        return Err(not_found(id));
    }
    Ok(obj! {"id": id, "object": "response", "deleted": true}.encode())
}

pub(super) fn cancel(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    match ctx.sim.objects().responses().cancel(ctx.owner, id) {
        None => Err(not_found(id)),
        Some(Err(NotBackground)) => Err(ApiError::invalid_request(
            "Cannot cancel a synchronous response.".to_owned(),
        )),
        Some(Ok(object)) => Ok(object),
    }
}

pub(super) fn input_items(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    let items = ctx
        .sim
        .objects()
        .responses()
        .input_items(ctx.owner, id)
        .ok_or_else(|| not_found(id))?;
    // Items are paged by position; the cursor is an item's id.
    let list = query::list(ctx.query, "", DEFAULT_LIST, MAX_LIST)?;
    let after = query::get(ctx.query, "after");
    let ids: Vec<String> = items.iter().map(|raw| item_id(raw)).collect();
    let numbered = items
        .into_iter()
        .zip(ids.iter())
        .enumerate()
        .map(|(n, (raw, id))| (n as u64, (id.as_str(), J::Raw(raw))));
    let cursor = after
        .and_then(|a| ids.iter().position(|id| *id == a))
        .map(|n| n as u64);
    let page = crate::objects::page(
        numbered,
        &crate::objects::ListQuery {
            after: cursor,
            ..list
        },
    );
    Ok(list_object(page.items.into_iter(), page.has_more))
}

fn item_id(raw: &str) -> String {
    serde_json::from_str::<Value>(raw)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_becomes_items_with_ids() {
        let items = input_items_of("resp_laptimesim0007", Some(&json!("hi")));
        let item: Value = serde_json::from_str(&items[0]).unwrap();
        assert_eq!(
            item,
            json!({"id": "msg_laptimesim0007in00", "type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "hi"}], "status": "completed"})
        );
        let items = input_items_of(
            "resp_x",
            Some(&json!([
                {"role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
                {"type": "function_call_output", "id": "fco_1", "call_id": "c2", "output": "43"}
            ])),
        );
        let items: Vec<Value> = items
            .iter()
            .map(|s| serde_json::from_str(s).unwrap())
            .collect();
        assert_eq!(items[0]["role"], "developer");
        assert_eq!(items[0]["content"][0]["text"], "be brief");
        assert_eq!(items[1]["id"], "msg_xin01");
        assert_eq!(items[1]["call_id"], "c1");
        assert_eq!(items[2]["id"], "fco_1");
    }
}
