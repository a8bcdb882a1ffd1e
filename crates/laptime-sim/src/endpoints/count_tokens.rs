//! Token counts before sending: Anthropic's `POST /v1/messages/count_tokens`
//! (`{"input_tokens": N}`) and Gemini's `:countTokens` (`{"totalTokens": N, …}`).
//!
//! For a request the sim would script (its own `laptime_sim` object, or a preset as the model)
//! the count is the input its answer reports: the script's input plus cache reads and writes,
//! which is Gemini's `promptTokenCount` and Anthropic's `input_tokens +
//! cache_creation_input_tokens + cache_read_input_tokens`; a script that does not pin its input
//! (`sim-fast`) counts this request's body as a model call counts its own, a token per four
//! bytes ([`crate::tokens::of_body`]). For any other model it is [`crate::tokens`]'
//! rule over every string value of `system`, `messages` and `tools` (Anthropic) or of
//! `contents`, `systemInstruction` and `tools` (Gemini, also inside `generateContentRequest`).

use serde_json::{Map, Value};

use crate::json::{arr, obj};
use crate::plan::choose;
use crate::script::preset;
use crate::tokens;
use crate::wire::ApiError;

use super::object;

/// The input a scripted answer to `body` (of `body_bytes` bytes) would report, if the sim would
/// script one.
fn scripted_input(
    body: &Map<String, Value>,
    model: Option<&str>,
    body_bytes: usize,
) -> Option<u64> {
    let scripted = body.contains_key("laptime_sim") || model.and_then(preset).is_some();
    if !scripted {
        return None;
    }
    let script = choose(&Value::Object(body.clone()), model).ok()?;
    let u = script.usage;
    let input = u
        .input_tokens
        .unwrap_or_else(|| tokens::of_body(body_bytes));
    Some(u64::from(input) + u64::from(u.cache_read_tokens) + u64::from(u.cache_write_tokens))
}

fn counted(body: &Map<String, Value>, keys: &[&str]) -> u64 {
    keys.iter()
        .filter_map(|k| body.get(*k))
        .map(tokens::of_strings)
        .fold(0, u64::saturating_add)
}

/// `POST /v1/messages/count_tokens`.
pub(super) fn anthropic(bytes: &[u8]) -> Result<String, ApiError> {
    let body = object(bytes)?;
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid_request("model: Field required".to_owned()))?;
    if !body.get("messages").is_some_and(Value::is_array) {
        return Err(ApiError::invalid_request(
            "messages: Field required".to_owned(),
        ));
    }
    let n = scripted_input(&body, Some(model), bytes.len())
        .unwrap_or_else(|| counted(&body, &["system", "messages", "tools"]));
    Ok(obj! {"input_tokens": n}.encode())
}

/// `POST /v1beta/models/{model}:countTokens`.
pub(super) fn gemini(model: &str, bytes: &[u8]) -> Result<String, ApiError> {
    let body = object(bytes)?;
    let inner = body
        .get("generateContentRequest")
        .and_then(Value::as_object)
        .unwrap_or(&body);
    let n = scripted_input(&body, Some(model), bytes.len())
        .unwrap_or_else(|| counted(inner, &["contents", "systemInstruction", "tools"]));
    Ok(obj! {
        "totalTokens": n,
        "promptTokensDetails": arr![obj! {"modality": "TEXT", "tokenCount": n}],
    }
    .encode_pretty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn count(body: Value) -> Value {
        serde_json::from_str(&anthropic(body.to_string().as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn a_preset_counts_its_scripted_input_with_caches() {
        let msgs = json!([{"role": "user", "content": "hi"}]);
        // sim-fast pins no input: the body, a token per four bytes.
        let fast = json!({"model": "sim-fast", "messages": msgs});
        let fast_tokens = fast.to_string().len().div_ceil(4);
        assert_eq!(count(fast)["input_tokens"], fast_tokens);
        // sim-reasoning: input 20, cache read 8, cache write 4.
        assert_eq!(
            count(json!({"model": "sim-reasoning", "messages": msgs}))["input_tokens"],
            32
        );
        let scripted =
            json!({"model": "x", "messages": msgs, "laptime_sim": {"usage": {"input_tokens": 77}}});
        assert_eq!(count(scripted)["input_tokens"], 77);
    }

    #[test]
    fn other_models_count_every_string_by_the_rule() {
        let body = json!({"model": "claude-sonnet-4-5", "system": "abcdefgh",
                          "messages": [{"role": "user", "content": "hello"}]});
        // "abcdefgh" 2, "user" 1, "hello" 2.
        assert_eq!(count(body)["input_tokens"], 5);
        let e = anthropic(br#"{"messages": []}"#).unwrap_err();
        assert_eq!(e.status, 400);
    }

    #[test]
    fn gemini_counts_contents_or_the_wrapped_request() {
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]});
        let out: Value =
            serde_json::from_str(&gemini("gemini-2.5-flash", body.to_string().as_bytes()).unwrap())
                .unwrap();
        assert_eq!(out["totalTokens"], 3);
        assert_eq!(out["promptTokensDetails"][0]["tokenCount"], 3);
        let wrapped = json!({"generateContentRequest": {"model": "models/x", "contents": [{"parts": [{"text": "abcd"}]}]}});
        let out: Value =
            serde_json::from_str(&gemini("x", wrapped.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(out["totalTokens"], 1);
        // sim-fast pins no input: this body's 2 bytes, at least one token.
        let out: Value = serde_json::from_str(&gemini("sim-fast", b"{}").unwrap()).unwrap();
        assert_eq!(out["totalTokens"], 1);
        let body = json!({"contents": [{"parts": [{"text": "a longer prompt than that"}]}]});
        let out: Value =
            serde_json::from_str(&gemini("sim-fast", body.to_string().as_bytes()).unwrap())
                .unwrap();
        assert_eq!(out["totalTokens"], body.to_string().len().div_ceil(4));
    }
}
