//! What an upstream's 4xx error body says about the request itself: over the model's context
//! window, or refused by a content filter. Either decides what failover may do (a larger model
//! for the first, no retry at all for the second), so the class is read from the body, not only
//! the status.
//!
//! Providers word these errors differently and few give a code, so the rule reads the codes
//! that exist (OpenAI's and Groq's `context_length_exceeded`, Azure's `content_filter`) and
//! otherwise the message phrases each provider uses: OpenAI, vLLM, DeepSeek, Together
//! ("maximum context length"), Anthropic ("prompt is too long", "exceed context limit"),
//! Gemini ("input token count … exceeds the maximum number of tokens"), Mistral ("too large
//! for model with … maximum context length"); Azure ("content management policy") and
//! Anthropic ("content filtering policy"). The shapes read: OpenAI's
//! `{"error":{message,type,code}}`, Anthropic's `{"type":"error","error":{type,message}}`,
//! Google's `{"error":{code,message,status}}`, vLLM's top-level `{message,type}` and Ollama's
//! `{"error":"…"}`.

use std::borrow::Cow;

use serde::Deserialize;

use crate::timeline::ErrorClass;

/// The class of an upstream error answer: its status's, refined for a 400, 413 or 422 whose
/// body names an over-long input or a content filter. `None` for a status that is no error.
pub fn error_status_class(status: u16, body: &[u8]) -> Option<ErrorClass> {
    let by_status = ErrorClass::from_status(status)?;
    if !matches!(status, 400 | 413 | 422) {
        return Some(by_status);
    }
    Some(refusal(body).unwrap_or(by_status))
}

/// Codes that name the refusal exactly.
const CONTEXT_CODES: [&str; 1] = ["context_length_exceeded"];
const FILTER_CODES: [&str; 3] = [
    "content_filter",
    "content_policy_violation",
    "content_filtered",
];

/// Message phrases, matched in lower case.
const CONTEXT_PHRASES: [&str; 6] = [
    "maximum context length",
    "context_length_exceeded",
    "prompt is too long",
    "exceed context limit",
    "context window",
    "exceeds the maximum number of tokens",
];
const FILTER_PHRASES: [&str; 2] = ["content management policy", "content filtering policy"];

fn refusal(body: &[u8]) -> Option<ErrorClass> {
    let parsed: ErrorBody<'_> = serde_json::from_slice(body).ok()?;
    let (codes, message) = parsed.codes_and_message();
    if codes.iter().any(|c| CONTEXT_CODES.contains(c)) {
        return Some(ErrorClass::ContextLengthExceeded);
    }
    if codes.iter().any(|c| FILTER_CODES.contains(c)) {
        return Some(ErrorClass::ContentFiltered);
    }
    let message = message?.to_ascii_lowercase();
    if CONTEXT_PHRASES.iter().any(|p| message.contains(p))
        || (message.contains("too large for model") && message.contains("context length"))
    {
        return Some(ErrorClass::ContextLengthExceeded);
    }
    if FILTER_PHRASES.iter().any(|p| message.contains(p)) {
        return Some(ErrorClass::ContentFiltered);
    }
    None
}

#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(borrow, default)]
    error: Option<Inner<'a>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    code: Option<Code<'a>>,
}

/// The `error` member: an object in most shapes, a bare string in Ollama's.
#[derive(Deserialize)]
#[serde(untagged)]
enum Inner<'a> {
    Object {
        #[serde(borrow, default)]
        message: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        code: Option<Code<'a>>,
        #[serde(borrow, default, rename = "type")]
        kind: Option<Cow<'a, str>>,
    },
    Text(#[serde(borrow)] Cow<'a, str>),
}

/// A code is a string (OpenAI) or a number (Google, vLLM: the HTTP status).
#[derive(Deserialize)]
#[serde(untagged)]
enum Code<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Number(#[expect(dead_code, reason = "a numeric code is the status, already known")] i64),
}

/// A code's text, when it is one.
fn text<'b>(c: Option<&'b Code<'_>>) -> Option<&'b str> {
    match c {
        Some(Code::Text(t)) => Some(t.as_ref()),
        _ => None,
    }
}

impl ErrorBody<'_> {
    fn codes_and_message(&self) -> (Vec<&str>, Option<&str>) {
        let mut codes: Vec<&str> = text(self.code.as_ref()).into_iter().collect();
        let message = match &self.error {
            Some(Inner::Object {
                message,
                code,
                kind,
            }) => {
                codes.extend(text(code.as_ref()));
                codes.extend(kind.as_deref());
                message.as_deref()
            }
            Some(Inner::Text(t)) => Some(t.as_ref()),
            None => None,
        };
        (codes, message.or(self.message.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(status: u16, body: &str) -> Option<ErrorClass> {
        error_status_class(status, body.as_bytes())
    }

    #[test]
    fn each_providers_context_length_error_is_named() {
        for body in [
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}"#,
            r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"object":"error","message":"Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length","type":"invalid_request_error","code":3051}"#,
            r#"{"error":"the input exceeds the context window of this model"}"#,
        ] {
            assert_eq!(
                class(400, body),
                Some(ErrorClass::ContextLengthExceeded),
                "{body}"
            );
        }
    }

    #[test]
    fn content_filter_refusals_are_named() {
        for body in [
            r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"Output blocked by content filtering policy"}}"#,
            r#"{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","code":"content_policy_violation"}}"#,
        ] {
            assert_eq!(
                class(400, body),
                Some(ErrorClass::ContentFiltered),
                "{body}"
            );
        }
    }

    #[test]
    fn other_errors_keep_their_status_class() {
        assert_eq!(
            class(
                400,
                r#"{"error":{"message":"Invalid request.","type":"invalid_request_error","param":null,"code":null}}"#
            ),
            Some(ErrorClass::UpstreamStatus4xx)
        );
        assert_eq!(
            class(400, "<html>bad</html>"),
            Some(ErrorClass::UpstreamStatus4xx)
        );
        // A 413 by bytes (Anthropic's request_too_large) is not over the context window.
        assert_eq!(
            class(
                413,
                r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#
            ),
            Some(ErrorClass::UpstreamStatus4xx)
        );
        // Only the statuses a refusal comes with are read: a 500 naming a context window is
        // still a server error.
        assert_eq!(
            class(
                500,
                r#"{"error":{"message":"maximum context length","code":"context_length_exceeded"}}"#
            ),
            Some(ErrorClass::UpstreamStatus5xx)
        );
        assert_eq!(class(429, "{}"), Some(ErrorClass::RateLimited));
        assert_eq!(class(200, "{}"), None);
    }
}
