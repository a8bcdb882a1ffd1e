//! Reading an assistant prefill from a request body: the text of a trailing assistant turn that
//! the model is to continue, in each dialect's own way of sending one (see
//! [`crate::script::Script::prefill`] for which turns count). What is done with it is
//! [`crate::script::schedule_with_prefill`]'s business.

use laptime_core::Dialect;
use serde_json::Value;

/// The prefill `body` ends with on `dialect`'s endpoint, if it ends with one. Its text is the
/// turn's text parts joined (reasoning parts left out), so it is never longer than the body
/// the server already holds within its limit.
pub(crate) fn read(dialect: Dialect, body: &Value) -> Option<String> {
    match dialect {
        Dialect::Messages => {
            let last = body.get("messages")?.as_array()?.last()?;
            (last.get("role")?.as_str()? == "assistant")
                .then(|| content_text(last.get("content")?, "text"))?
        }
        Dialect::Chat => {
            let last = body.get("messages")?.as_array()?.last()?;
            let prefix = last.get("prefix").and_then(Value::as_bool) == Some(true);
            (last.get("role")?.as_str()? == "assistant" && prefix).then(|| {
                match last.get("content") {
                    // DeepSeek takes a prefix message without content as an empty prefix.
                    None | Some(Value::Null) => Some(String::new()),
                    Some(content) => content_text(content, "text"),
                }
            })?
        }
        Dialect::Gemini => {
            let last = body.get("contents")?.as_array()?.last()?;
            (last.get("role")?.as_str()? == "model").then(|| {
                let parts = last.get("parts")?.as_array()?;
                Some(
                    parts
                        .iter()
                        .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect(),
                )
            })?
        }
        // The Responses API has no way to ask for a continuation.
        Dialect::Responses => None,
    }
}

/// A content that is a string, or a list of blocks whose `text_type` blocks are joined (other
/// blocks, thinking for one, carry no visible text); `None` for any other shape.
fn content_text(content: &Value, text_type: &str) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some(text_type))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_trailing_assistant_turn_is_a_prefill_in_messages_with_a_string_or_text_blocks() {
        let string = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Sure, here"},
        ]});
        assert_eq!(
            read(Dialect::Messages, &string).as_deref(),
            Some("Sure, here")
        );
        let blocks = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "text", "text": "Sure,"},
                {"type": "text", "text": " here"},
            ]},
        ]});
        assert_eq!(
            read(Dialect::Messages, &blocks).as_deref(),
            Some("Sure, here")
        );
        let user_last = json!({"messages": [
            {"role": "assistant", "content": "Sure"},
            {"role": "user", "content": "go on"},
        ]});
        assert_eq!(read(Dialect::Messages, &user_last), None);
    }

    #[test]
    fn a_chat_assistant_turn_is_a_prefill_only_with_prefix_true() {
        let with = |prefix: Value| {
            json!({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Sure", "prefix": prefix},
            ]})
        };
        assert_eq!(
            read(Dialect::Chat, &with(json!(true))).as_deref(),
            Some("Sure")
        );
        assert_eq!(read(Dialect::Chat, &with(json!(false))), None);
        let without = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Sure"},
        ]});
        assert_eq!(read(Dialect::Chat, &without), None);
        let parts = json!({"messages": [
            {"role": "assistant", "prefix": true,
             "content": [{"type": "text", "text": "Sure"}, {"type": "text", "text": ","}]},
        ]});
        assert_eq!(read(Dialect::Chat, &parts).as_deref(), Some("Sure,"));
    }

    #[test]
    fn a_trailing_model_turn_is_a_prefill_in_gemini_without_its_thoughts() {
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "hmm", "thought": true}, {"text": "Sure"}]},
        ]});
        assert_eq!(read(Dialect::Gemini, &body).as_deref(), Some("Sure"));
        let user_last = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        assert_eq!(read(Dialect::Gemini, &user_last), None);
    }

    #[test]
    fn responses_has_no_prefill() {
        let body = json!({"input": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Sure"},
        ]});
        assert_eq!(read(Dialect::Responses, &body), None);
    }
}
