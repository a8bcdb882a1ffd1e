//! The bytes of each dialect: streamed events, non-streamed bodies and error bodies, shaped like
//! the recorded streams of the real providers (see `streaming-protocols.md` §1–§3).
//!
//! Pure, like [`crate::script`]: a [`Timeline`] says *when*, this module says *what*. Each
//! dialect has its own file ([`chat`], [`responses`], [`messages`]); this file holds what they
//! share: the generated words, the ending kinds and the error vocabulary.

use std::time::Duration;

use bytes::Bytes;
use laptime_core::Dialect;

use crate::json::{obj, J};
use crate::script::{End, Step, Timeline, Usage, WorkKind};

mod chat;
mod messages;
mod responses;

/// Everything a renderer needs for one answer.
pub(crate) struct Ctx<'a> {
    pub(crate) dialect: Dialect,
    pub(crate) model: &'a str,
    pub(crate) timeline: &'a Timeline,
    pub(crate) usage: Usage,
    pub(crate) end: End,
    pub(crate) status: u16,
    /// Chat only: the request had `stream_options.include_usage: true`.
    pub(crate) include_usage: bool,
}

/// A fixed `created` / `created_at`, so a schedule is a pure function of its inputs.
pub(crate) const CREATED: u64 = 1_760_000_000;

/// The streamed events of the answer, one [`Step`] per SSE event or comment.
pub(crate) fn stream(ctx: &Ctx<'_>) -> Vec<Step> {
    let mut out = Out::default();
    match ctx.dialect {
        Dialect::Chat => chat::stream(ctx, &mut out),
        Dialect::Responses => responses::stream(ctx, &mut out),
        Dialect::Messages => messages::stream(ctx, &mut out),
    }
    out.steps
}

/// The whole non-streamed answer.
pub(crate) fn body(ctx: &Ctx<'_>) -> String {
    match ctx.dialect {
        Dialect::Chat => chat::body(ctx),
        Dialect::Responses => responses::body(ctx),
        Dialect::Messages => messages::body(ctx),
    }
}

/// The error body for the script's `status`.
pub(crate) fn scripted_error(ctx: &Ctx<'_>) -> String {
    ApiError::scripted(ctx.status).body(ctx.dialect)
}

// === Out ===

/// The steps being written, in order.
#[derive(Default)]
pub(crate) struct Out {
    steps: Vec<Step>,
}

impl Out {
    pub(crate) fn push(&mut self, at: Duration, bytes: String) {
        self.steps.push(Step {
            at,
            bytes: Bytes::from(bytes),
        });
    }
}

/// `event: <name>\ndata: <json>\n\n`, the framing of Responses and Anthropic events.
pub(crate) fn named_event(name: &str, data: &J) -> String {
    format!("event: {name}\ndata: {}\n\n", data.encode())
}

// === Endings ===

/// What comes after the last delta, in the dialect-neutral terms the renderers switch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Close every open block and send the terminal; `incomplete` marks a token-limit stop.
    Done { incomplete: bool },
    /// The in-band error event(s).
    Error,
    /// Nothing: the body stops (close, reset, stall).
    Cut,
}

impl Ending {
    pub(crate) fn of(end: End) -> Ending {
        match end {
            End::Terminal | End::Status => Ending::Done { incomplete: false },
            End::Incomplete => Ending::Done { incomplete: true },
            End::ErrorEvent => Ending::Error,
            End::Close | End::Reset | End::Stall => Ending::Cut,
        }
    }
}

impl Ctx<'_> {
    pub(crate) fn ending(&self) -> Ending {
        Ending::of(self.end)
    }

    pub(crate) fn incomplete(&self) -> bool {
        self.end == End::Incomplete
    }

    pub(crate) fn work_kind(&self) -> Option<WorkKind> {
        self.timeline.work.as_ref().map(|w| w.kind)
    }

    pub(crate) fn work_count(&self) -> usize {
        self.timeline.work.as_ref().map_or(0, |w| w.at.len())
    }

    pub(crate) fn text_count(&self) -> Option<usize> {
        self.timeline.text.as_ref().map(|t| t.at.len())
    }
}

// === Generated content ===

/// The answer's words, one token each, cycled. Leading spaces as a tokenizer would split them.
const TEXT_WORDS: [&str; 32] = [
    " Sure", ",", " here", " is", " the", " short", " answer", ":", " the", " request", " waited",
    " in", " a", " queue", ",", " the", " model", " read", " the", " prompt", ",", " and", " then",
    " it", " wrote", " the", " reply", " one", " token", " at", " a", " time.",
];

/// The reasoning summary's words, cycled.
const REASONING_WORDS: [&str; 16] = [
    " Let", " me", " think", " about", " what", " the", " user", " is", " asking", " and", " how",
    " to", " answer", " it", " briefly", ".",
];

/// The words of the tool call's single `query` argument.
const TOOL_WORDS: [&str; 8] = [
    "weather", "in", "Paris", "tomorrow", "morning", "and", "evening", "forecast",
];

pub(crate) const TOOL_NAME: &str = "get_weather";

/// A (made-up but well-formed) thinking-block signature, sent in `signature_delta`.
pub(crate) const SIGNATURE: &str =
    "EqQBCkgIBxABGAIiQLaptimeSimSignatureNotARealOneButShapedLikeOneSoClientsKeepIt==";

fn cycled(words: &'static [&'static str], i: usize) -> &'static str {
    let word = words[i % words.len()];
    // The very first token of an answer has no leading space.
    if i == 0 {
        word.trim_start()
    } else {
        word
    }
}

/// Text delta `i`.
pub(crate) fn text_token(i: usize) -> &'static str {
    cycled(&TEXT_WORDS, i)
}

/// Reasoning delta `i`.
pub(crate) fn reasoning_token(i: usize) -> &'static str {
    cycled(&REASONING_WORDS, i)
}

/// The whole text of `n` text deltas.
pub(crate) fn full_text(n: usize) -> String {
    (0..n).map(text_token).collect()
}

/// The whole reasoning of `n` reasoning deltas.
pub(crate) fn full_reasoning(n: usize) -> String {
    (0..n).map(reasoning_token).collect()
}

fn tool_word(i: usize) -> &'static str {
    TOOL_WORDS[i % TOOL_WORDS.len()]
}

/// Argument fragment `i` of `n`. The fragments concatenate to exactly [`tool_input`]`(n)`
/// encoded, and every fragment is non-empty, so each one is effective output.
pub(crate) fn tool_fragment(i: usize, n: usize) -> String {
    let mut s = String::new();
    if i == 0 {
        s.push_str("{\"query\":\"");
    } else {
        s.push(' ');
    }
    s.push_str(tool_word(i));
    if i + 1 == n {
        s.push_str("\"}");
    }
    s
}

/// The tool call's input object after `n` fragments.
pub(crate) fn tool_input(n: usize) -> J {
    let words: Vec<&str> = (0..n).map(tool_word).collect();
    obj! {"query": words.join(" ")}
}

// === Errors ===

/// An error answer in both vocabularies: OpenAI's `{"error":{message,type,param,code}}` and
/// Anthropic's `{"type":"error","error":{type,message}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) message: String,
    pub(crate) openai_type: &'static str,
    pub(crate) openai_code: Option<&'static str>,
    pub(crate) anthropic_type: &'static str,
}

impl ApiError {
    /// The error a provider gives with `status`, with its usual type and wording.
    pub(crate) fn scripted(status: u16) -> ApiError {
        let (openai_type, openai_code, anthropic_type, message) = match status {
            400 => ("invalid_request_error", None, "invalid_request_error", "Invalid request."),
            401 => (
                "invalid_request_error",
                Some("invalid_api_key"),
                "authentication_error",
                "Incorrect API key provided.",
            ),
            402 => (
                "insufficient_quota",
                Some("insufficient_quota"),
                "billing_error",
                "You exceeded your current quota, please check your plan and billing details.",
            ),
            403 => (
                "invalid_request_error",
                None,
                "permission_error",
                "You are not allowed to use this model.",
            ),
            404 => (
                "invalid_request_error",
                None,
                "not_found_error",
                "The requested resource was not found.",
            ),
            413 => (
                "invalid_request_error",
                None,
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes.",
            ),
            429 => (
                "requests",
                Some("rate_limit_exceeded"),
                "rate_limit_error",
                "Rate limit reached for requests. Please try again later.",
            ),
            503 => (
                "server_error",
                None,
                "api_error",
                "The engine is currently overloaded, please try again later.",
            ),
            504 => ("server_error", None, "timeout_error", "Request timed out."),
            529 => ("server_error", None, "overloaded_error", "Overloaded"),
            500..=599 => (
                "server_error",
                None,
                "api_error",
                "The server had an error while processing your request. Sorry about that!",
            ),
            _ => (
                "invalid_request_error",
                None,
                "invalid_request_error",
                "The request was rejected.",
            ),
        };
        ApiError {
            status,
            message: message.to_owned(),
            openai_type,
            openai_code,
            anthropic_type,
        }
    }

    /// 404 for a model that is neither a preset nor scripted in the request.
    pub(crate) fn model_not_found(model: &str) -> ApiError {
        ApiError {
            status: 404,
            message: format!(
                "The model `{model}` does not exist or you do not have access to it."
            ),
            openai_type: "invalid_request_error",
            openai_code: Some("model_not_found"),
            anthropic_type: "not_found_error",
        }
    }

    /// 400 for a body that is not what the endpoint takes.
    pub(crate) fn invalid_request(message: String) -> ApiError {
        ApiError {
            status: 400,
            message,
            openai_type: "invalid_request_error",
            openai_code: None,
            anthropic_type: "invalid_request_error",
        }
    }

    /// 404 / 405 for a path or method the fake does not serve.
    pub(crate) fn route(status: u16, message: String) -> ApiError {
        ApiError {
            status,
            message,
            openai_type: "invalid_request_error",
            openai_code: None,
            anthropic_type: if status == 404 {
                "not_found_error"
            } else {
                "invalid_request_error"
            },
        }
    }

    /// The inner `error` object in OpenAI's shape.
    pub(crate) fn openai_object(&self) -> J {
        obj! {
            "message": self.message.as_str(),
            "type": self.openai_type,
            "param": J::Null,
            "code": self.openai_code,
        }
    }

    /// The inner `error` object in Anthropic's shape.
    pub(crate) fn anthropic_object(&self) -> J {
        obj! {"type": self.anthropic_type, "message": self.message.as_str()}
    }

    /// The JSON error body in `dialect`'s shape.
    pub(crate) fn body(&self, dialect: Dialect) -> String {
        if dialect.is_anthropic() {
            obj! {"type": "error", "error": self.anthropic_object()}.encode()
        } else {
            obj! {"error": self.openai_object()}.encode()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_fragments_concatenate_to_the_encoded_input() {
        for n in 1..12 {
            let joined: String = (0..n).map(|i| tool_fragment(i, n)).collect();
            assert_eq!(joined, tool_input(n).encode(), "n = {n}");
            let parsed: serde_json::Value = serde_json::from_str(&joined).unwrap();
            assert!(parsed["query"].is_string());
            assert!((0..n).all(|i| !tool_fragment(i, n).is_empty()));
        }
    }

    #[test]
    fn text_starts_without_a_space_and_reads_like_words() {
        assert_eq!(text_token(0), "Sure");
        assert_eq!(full_text(5), "Sure, here is the");
        assert!((0..100).all(|i| !text_token(i).is_empty()));
        assert_eq!(reasoning_token(0), "Let");
    }

    #[test]
    fn error_bodies_follow_each_dialects_shape() {
        let e = ApiError::scripted(529);
        let openai: serde_json::Value = serde_json::from_str(&e.body(Dialect::Chat)).unwrap();
        assert_eq!(openai["error"]["type"], "server_error");
        assert!(openai["error"]["param"].is_null());
        assert!(openai["error"].get("code").is_some());
        let anthropic: serde_json::Value =
            serde_json::from_str(&e.body(Dialect::Messages)).unwrap();
        assert_eq!(anthropic["type"], "error");
        assert_eq!(anthropic["error"]["type"], "overloaded_error");
        assert_eq!(anthropic["error"]["message"], "Overloaded");
    }
}
