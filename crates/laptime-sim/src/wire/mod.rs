//! The bytes of each dialect: streamed events, non-streamed bodies and error bodies, shaped like
//! the recorded streams of the real providers (see `streaming-protocols.md` §1–§3).
//!
//! Pure, like [`crate::script`]: a [`Timeline`] says *when*, this module says *what*. Each
//! dialect has its own file ([`chat`], [`responses`], [`messages`], [`gemini`]); this file holds what they
//! share: the generated words, the ending kinds and the error vocabulary.

use std::time::Duration;

use bytes::Bytes;
use laptime_core::Dialect;

use crate::json::{obj, J};
use crate::script::{Deltas, End, Refusal, ResponseMeta, Step, Timeline, Usage, WorkKind};

mod chat;
mod gemini;
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
    /// How many tool calls the tool-argument deltas are split across (at least 1).
    pub(crate) tool_calls: u32,
    /// The visible text deltas sent (as many as the timeline has instants for).
    pub(crate) deltas: &'a Deltas,
    /// The refusal a status answer is.
    pub(crate) refusal: Option<Refusal>,
    /// Responses only: the response's id and the request's echoed fields.
    pub(crate) response: &'a ResponseMeta,
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
        Dialect::Gemini => gemini::stream(ctx, &mut out),
    }
    out.steps
}

/// The whole non-streamed answer.
pub(crate) fn body(ctx: &Ctx<'_>) -> String {
    match ctx.dialect {
        Dialect::Chat => chat::body(ctx),
        Dialect::Responses => responses::body(ctx),
        Dialect::Messages => messages::body(ctx),
        Dialect::Gemini => gemini::body(ctx),
    }
}

/// A background Responses request's immediate answer: the response, queued.
pub(crate) fn responses_queued(ctx: &Ctx<'_>) -> String {
    responses::queued(ctx)
}

/// The response object a Responses store keeps of this answer.
pub(crate) fn responses_stored(ctx: &Ctx<'_>) -> String {
    responses::stored(ctx)
}

/// A background response's object once cancelled.
pub(crate) fn responses_cancelled(ctx: &Ctx<'_>) -> String {
    responses::cancelled(ctx)
}

/// The error body for the script's `status`.
pub(crate) fn scripted_error(ctx: &Ctx<'_>) -> String {
    match ctx.refusal {
        Some(r) => ApiError::refused(r, ctx.dialect).body(ctx.dialect),
        None => ApiError::scripted(ctx.status).body(ctx.dialect),
    }
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
    /// Close every open block and send the terminal; `incomplete` marks a stop short of a
    /// completion (the token limit or the content filter).
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
            End::Incomplete | End::Filtered => Ending::Done { incomplete: true },
            End::ErrorEvent => Ending::Error,
            End::Close | End::Reset | End::Stall => Ending::Cut,
        }
    }
}

impl Ctx<'_> {
    pub(crate) fn ending(&self) -> Ending {
        Ending::of(self.end)
    }

    /// The answer stopped short: the token limit or the content filter.
    pub(crate) fn incomplete(&self) -> bool {
        matches!(self.end, End::Incomplete | End::Filtered)
    }

    pub(crate) fn filtered(&self) -> bool {
        self.end == End::Filtered
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

impl<'a> Ctx<'a> {
    /// Text delta `i`: a generated word, or a piece of the script's text.
    pub(crate) fn text_delta(&self, i: usize) -> &'a str {
        self.deltas.get(i)
    }

    /// The whole text of the deltas sent.
    pub(crate) fn answer_text(&self) -> &'a str {
        self.deltas.joined()
    }

    /// The tool calls of a tool-args answer, each with its share of the argument deltas (in
    /// order: the providers stream parallel calls one after the other). Empty otherwise.
    pub(crate) fn calls(&self) -> Vec<Call<'a>> {
        let Some(work) = self.timeline.work.as_ref() else {
            return Vec::new();
        };
        if work.kind != WorkKind::ToolArgs {
            return Vec::new();
        }
        let n = work.at.len();
        let k = usize::try_from(self.tool_calls)
            .unwrap_or(1)
            .clamp(1, n.max(1));
        (0..k)
            .map(|j| Call {
                index: j,
                at: work.at.get(j * n / k..(j + 1) * n / k).unwrap_or(&[]),
                tool: &TOOLS[j % TOOLS.len()],
            })
            .collect()
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

/// The words of the first tool call's single `query` argument.
const TOOL_WORDS: [&str; 8] = [
    "weather", "in", "Paris", "tomorrow", "morning", "and", "evening", "forecast",
];

/// The words of the second tool call's single `location` argument.
const TIME_WORDS: [&str; 8] = [
    "Tokyo,", "Japan", "local", "time", "right", "now", "and", "tonight",
];

/// The first tool call's name.
pub(crate) const TOOL_NAME: &str = "get_weather";

/// A tool the answer calls: its name and its one string argument.
#[derive(Debug)]
pub(crate) struct Tool {
    pub(crate) name: &'static str,
    key: &'static str,
    words: &'static [&'static str],
}

/// The tools of an answer's calls: call `j` uses `TOOLS[j % 2]`.
pub(crate) const TOOLS: [Tool; 2] = [
    Tool {
        name: TOOL_NAME,
        key: "query",
        words: &TOOL_WORDS,
    },
    Tool {
        name: "get_time",
        key: "location",
        words: &TIME_WORDS,
    },
];

/// One tool call of an answer: its position, the instants of its argument deltas, its tool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) index: usize,
    pub(crate) at: &'a [Duration],
    pub(crate) tool: &'static Tool,
}

impl Call<'_> {
    pub(crate) fn name(&self) -> &'static str {
        self.tool.name
    }

    /// The call's id: `prefix` and its number from 1 (`call_laptimesim0001`, …0002).
    pub(crate) fn id(&self, prefix: &str) -> String {
        format!("{prefix}{:04}", self.index + 1)
    }

    /// Argument fragment `i` of this call's deltas.
    pub(crate) fn fragment(&self, i: usize) -> String {
        arg_fragment(self.tool, i, self.at.len())
    }

    /// The arguments object once every fragment is sent.
    pub(crate) fn input(&self) -> J {
        arg_input(self.tool, self.at.len())
    }
}

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
#[cfg(test)]
pub(crate) fn full_text(n: usize) -> String {
    (0..n).map(text_token).collect()
}

/// The whole reasoning of `n` reasoning deltas.
pub(crate) fn full_reasoning(n: usize) -> String {
    (0..n).map(reasoning_token).collect()
}

fn tool_word(tool: &Tool, i: usize) -> &'static str {
    tool.words[i % tool.words.len()]
}

/// Argument fragment `i` of `n` of a call to `tool`. The fragments concatenate to exactly
/// [`arg_input`]`(tool, n)` encoded, and every fragment is non-empty, so each one is effective
/// output.
fn arg_fragment(tool: &Tool, i: usize, n: usize) -> String {
    let mut s = String::new();
    if i == 0 {
        s.push_str(&format!("{{\"{}\":\"", tool.key));
    } else {
        s.push(' ');
    }
    s.push_str(tool_word(tool, i));
    if i + 1 == n {
        s.push_str("\"}");
    }
    s
}

/// The input object of a call to `tool` after `n` fragments.
fn arg_input(tool: &Tool, n: usize) -> J {
    let words: Vec<&str> = (0..n).map(|i| tool_word(tool, i)).collect();
    J::Obj(vec![(tool.key, J::from(words.join(" ")))])
}

/// Argument fragment `i` of `n` of the first tool call.
#[cfg(test)]
pub(crate) fn tool_fragment(i: usize, n: usize) -> String {
    arg_fragment(&TOOLS[0], i, n)
}

/// The first tool call's input object after `n` fragments.
#[cfg(test)]
pub(crate) fn tool_input(n: usize) -> J {
    arg_input(&TOOLS[0], n)
}

// === Errors ===

/// An error answer in every vocabulary: OpenAI's `{"error":{message,type,param,code}}`,
/// Anthropic's `{"type":"error","error":{type,message}}` and Google's
/// `{"error":{code,message,status}}` (the status name follows from the HTTP status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) message: String,
    pub(crate) openai_type: &'static str,
    pub(crate) openai_code: Option<&'static str>,
    /// OpenAI's `param`: the request field at fault, if one is.
    pub(crate) openai_param: Option<&'static str>,
    pub(crate) anthropic_type: &'static str,
}

impl ApiError {
    /// The error a provider gives with `status`, with its usual type and wording.
    pub(crate) fn scripted(status: u16) -> ApiError {
        let (openai_type, openai_code, anthropic_type, message) = match status {
            400 => (
                "invalid_request_error",
                None,
                "invalid_request_error",
                "Invalid request.",
            ),
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
            // Anthropic's overload status; in OpenAI's words the code its Responses streams use
            // for an overload, so the error is told apart from any other server error.
            529 => (
                "server_error",
                Some("server_is_overloaded"),
                "overloaded_error",
                "Overloaded",
            ),
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
            openai_param: None,
            anthropic_type,
        }
    }

    /// A 400 refusing the request for what it is, worded as each provider words it.
    pub(crate) fn refused(refusal: Refusal, dialect: Dialect) -> ApiError {
        let (message, openai_code) = match (refusal, dialect) {
            (Refusal::ContextLength, Dialect::Messages) => {
                ("prompt is too long: 208310 tokens > 200000 maximum", None)
            }
            (Refusal::ContextLength, Dialect::Gemini) => (
                "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
                None,
            ),
            (Refusal::ContextLength, Dialect::Chat | Dialect::Responses) => (
                "This model's maximum context length is 128000 tokens. However, your messages \
                 resulted in 130532 tokens. Please reduce the length of the messages.",
                Some("context_length_exceeded"),
            ),
            (Refusal::ContentFilter, Dialect::Messages | Dialect::Gemini) => {
                ("Output blocked by content filtering policy", None)
            }
            (Refusal::ContentFilter, Dialect::Chat | Dialect::Responses) => (
                "The response was filtered due to the prompt triggering Azure OpenAI's content \
                 management policy. Please modify your prompt and retry.",
                Some("content_filter"),
            ),
        };
        ApiError {
            status: 400,
            message: message.to_owned(),
            openai_type: "invalid_request_error",
            openai_code,
            openai_param: None,
            anthropic_type: "invalid_request_error",
        }
    }

    /// 400 for a conversation that ends with an assistant turn, from a model that takes no
    /// prefill: Anthropic's wording (its newer models refuse a prefill so), said the same way
    /// in the OpenAI and Google shapes.
    pub(crate) fn prefill_refused() -> ApiError {
        ApiError {
            status: 400,
            message: "This model does not support assistant message prefill. The conversation \
                      must end with a user message."
                .to_owned(),
            openai_type: "invalid_request_error",
            openai_code: None,
            openai_param: None,
            anthropic_type: "invalid_request_error",
        }
    }

    /// 404 for a model that is neither a preset nor scripted in the request.
    pub(crate) fn model_not_found(model: &str) -> ApiError {
        ApiError {
            status: 404,
            message: format!("The model `{model}` does not exist or you do not have access to it."),
            openai_type: "invalid_request_error",
            openai_code: Some("model_not_found"),
            openai_param: None,
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
            openai_param: None,
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
            openai_param: None,
            anthropic_type: if status == 404 {
                "not_found_error"
            } else {
                "invalid_request_error"
            },
        }
    }

    /// 404 for an object the caller does not have (absent, deleted, or another credential's),
    /// worded as OpenAI words it for that kind of object.
    pub(crate) fn not_found(message: String, param: Option<&'static str>) -> ApiError {
        ApiError {
            openai_param: param,
            ..ApiError::route(404, message)
        }
    }

    /// The same error naming the request field at fault.
    pub(crate) fn param(mut self, param: &'static str) -> ApiError {
        self.openai_param = Some(param);
        self
    }

    /// The same error with OpenAI's `code`.
    pub(crate) fn code(mut self, code: &'static str) -> ApiError {
        self.openai_code = Some(code);
        self
    }

    /// The same error with another status (its words and types unchanged).
    pub(crate) fn status(mut self, status: u16) -> ApiError {
        self.status = status;
        self
    }

    /// The inner `error` object in OpenAI's shape.
    pub(crate) fn openai_object(&self) -> J {
        obj! {
            "message": self.message.as_str(),
            "type": self.openai_type,
            "param": self.openai_param,
            "code": self.openai_code,
        }
    }

    /// The inner `error` object in Anthropic's shape.
    pub(crate) fn anthropic_object(&self) -> J {
        obj! {"type": self.anthropic_type, "message": self.message.as_str()}
    }

    /// The JSON error body in `dialect`'s shape.
    pub(crate) fn body(&self, dialect: Dialect) -> String {
        match dialect {
            Dialect::Messages => obj! {"type": "error", "error": self.anthropic_object()}.encode(),
            Dialect::Gemini => gemini::error_body(self),
            Dialect::Chat | Dialect::Responses => obj! {"error": self.openai_object()}.encode(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{preset, schedule, Schedule, Script, PRESET_NAMES};
    use crate::testkit::{self, Class, Ev};
    use serde_json::{json, Value};

    /// Every preset that ends normally (the tests below give each script every end; a status
    /// or error answer has no whole body to compare) plus scripts that exercise tool args,
    /// heartbeats and answers without text.
    fn scripts() -> Vec<Script> {
        let mut all: Vec<Script> = PRESET_NAMES
            .iter()
            .filter_map(|n| preset(n))
            .filter(|s| matches!(s.end, End::Terminal | End::Incomplete))
            .collect();
        for custom in [
            r#"{"headers_ms": 5, "first_event_ms": 40, "heartbeat_ms": 10,
                "first_effective": {"kind": "tool_args", "at_ms": 50}, "reasoning_deltas": 6,
                "first_text_ms": 90, "text_tokens": 4, "tokens_per_s": 50}"#,
            r#"{"first_effective": {"kind": "tool_args", "at_ms": 1}, "reasoning_deltas": 1,
                "first_text_ms": null}"#,
            r#"{"first_effective": {"kind": "reasoning", "at_ms": 1}, "reasoning_deltas": 3,
                "first_text_ms": null, "tokens_per_s": 10}"#,
            r#"{"first_text_ms": null}"#,
            r#"{"text_tokens": 0}"#,
        ] {
            all.push(serde_json::from_str(custom).unwrap());
        }
        all
    }

    const ENDS: [End; 7] = [
        End::Terminal,
        End::Incomplete,
        End::Filtered,
        End::ErrorEvent,
        End::Close,
        End::Reset,
        End::Stall,
    ];

    /// Every streamed schedule the fake can produce for these scripts.
    fn every_stream() -> Vec<(Dialect, End, bool, Schedule)> {
        let mut out = Vec::new();
        for script in scripts() {
            for end in ENDS {
                let script = Script {
                    end,
                    ..script.clone()
                };
                for dialect in Dialect::ALL {
                    for include_usage in [false, true] {
                        let s = schedule(dialect, &script, "sim-model", (true, include_usage), 0);
                        out.push((dialect, end, include_usage, s));
                    }
                }
            }
        }
        out
    }

    fn json(ev: &Ev) -> &Value {
        ev.json.as_ref().unwrap()
    }

    fn check_chat(evs: &[Ev], end: End, include_usage: bool) {
        let mut calls_opened = 0u64;
        let first = evs.iter().find(|e| !e.comment).unwrap();
        assert_eq!(
            json(first)["choices"][0]["delta"],
            json!({"role": "assistant", "content": "", "refusal": null})
        );
        for ev in evs.iter().filter(|e| e.json.is_some()) {
            assert!(ev.event.is_none(), "Chat has no event lines");
            let j = json(ev);
            if j.get("error").is_some() {
                continue;
            }
            assert_eq!(j["object"], "chat.completion.chunk");
            assert_eq!(j["model"], "sim-model");
            assert!(j["id"].is_string() && j["created"].is_u64());
            assert_eq!(j.get("usage").is_some(), include_usage);
            for c in j["choices"].as_array().unwrap() {
                assert_eq!(c["index"], 0);
                assert!(c["logprobs"].is_null());
                assert!(c.get("finish_reason").is_some());
                if !c["finish_reason"].is_null() {
                    assert_eq!(
                        c["delta"],
                        json!({}),
                        "finish_reason rides on an empty delta"
                    );
                }
                for call in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
                    // Calls are numbered from 0 in order: a header opens the next index, and
                    // argument fragments belong to the call opened last.
                    if call.get("id").is_some() {
                        assert_eq!(call["index"], calls_opened, "header of the next call");
                        calls_opened += 1;
                    } else {
                        assert_eq!(call["index"], calls_opened - 1, "fragment of the open call");
                    }
                    if call.get("id").is_some() {
                        assert_eq!(call["type"], "function");
                        assert_eq!(call["function"]["arguments"], "");
                        assert!(call["function"]["name"].is_string());
                    }
                }
            }
        }
        let done = evs
            .iter()
            .filter(|e| e.data.as_deref() == Some("[DONE]"))
            .count();
        let expect_done = matches!(
            end,
            End::Terminal | End::Incomplete | End::Filtered | End::ErrorEvent
        );
        assert_eq!(done, usize::from(expect_done));
        if expect_done {
            assert_eq!(evs.last().unwrap().raw, "data: [DONE]\n\n");
        }
    }

    fn check_responses(evs: &[Ev]) {
        for (seq, ev) in evs.iter().enumerate() {
            let j = json(ev);
            assert_eq!(
                ev.event.as_deref(),
                j["type"].as_str(),
                "event line names the type"
            );
            assert_eq!(j["sequence_number"], seq, "numbered from 0 without gaps");
        }
        let types: Vec<&str> = evs
            .iter()
            .map(|e| json(e)["type"].as_str().unwrap())
            .filter(|t| *t != "keepalive")
            .collect();
        assert_eq!(&types[..2], ["response.created", "response.in_progress"]);
        for ev in evs {
            let j = json(ev);
            if let Some(r) = j.get("response") {
                assert_eq!(r["object"], "response");
                assert_eq!(r["model"], "sim-model");
            }
            // Items open and close in order: every item_id seen was added first.
            if let Some(id) = j.get("item_id") {
                assert!(evs.iter().take_while(|e| !std::ptr::eq(*e, ev)).any(|e| {
                    json(e)["type"] == "response.output_item.added" && json(e)["item"]["id"] == *id
                }));
            }
        }
    }

    fn check_messages(evs: &[Ev]) {
        for ev in evs {
            let j = json(ev);
            assert_eq!(
                ev.event.as_deref(),
                j["type"].as_str(),
                "event line names the type"
            );
        }
        let names: Vec<&str> = evs.iter().map(|e| e.event.as_deref().unwrap()).collect();
        let start = names.iter().position(|n| *n != "ping").unwrap();
        assert_eq!(
            &names[start..start + 3],
            ["message_start", "content_block_start", "ping"],
            "the first ping comes right after the first block start"
        );
        let message = &json(&evs[start])["message"];
        assert_eq!(message["model"], "sim-model");
        assert_eq!(message["usage"]["output_tokens"], 1);
        assert_eq!(message["content"], json!([]));
        // Blocks: a delta or stop only for the open block; starts and stops alternate.
        let mut open: Option<u64> = None;
        let mut next = 0;
        for ev in evs {
            let j = json(ev);
            match j["type"].as_str().unwrap() {
                "content_block_start" => {
                    assert_eq!(open, None);
                    assert_eq!(j["index"], next);
                    let block = &j["content_block"];
                    match block["type"].as_str().unwrap() {
                        "text" => assert_eq!(block["text"], ""),
                        "thinking" => assert_eq!(block["signature"], ""),
                        "tool_use" => assert_eq!(block["input"], json!({})),
                        other => panic!("unexpected block {other}"),
                    }
                    open = j["index"].as_u64();
                    next += 1;
                }
                "content_block_delta" => assert_eq!(j["index"].as_u64(), open),
                "content_block_stop" => {
                    assert_eq!(j["index"].as_u64(), open);
                    open = None;
                }
                "message_delta" => {
                    assert_eq!(open, None, "all blocks stop before message_delta");
                    assert!(j["delta"]["stop_reason"].is_string());
                    assert!(j["usage"]["output_tokens"].is_u64());
                }
                _ => {}
            }
        }
    }

    fn check_gemini(evs: &[Ev]) {
        for (i, ev) in evs.iter().enumerate() {
            assert!(
                ev.event.is_none() && !ev.comment,
                "Gemini has only data lines"
            );
            assert!(ev.raw.ends_with("}\r\n\r\n"), "CRLF framing: {:?}", ev.raw);
            assert!(ev.raw.starts_with("data: {\""), "{:?}", ev.raw);
            let j = json(ev);
            if j.get("error").is_some() {
                assert_eq!(i, evs.len() - 1, "an error is the last event");
                continue;
            }
            assert_eq!(j["modelVersion"], "sim-model");
            assert!(
                j["usageMetadata"]["promptTokenCount"].is_u64(),
                "usage on every chunk"
            );
            let candidate = &j["candidates"][0];
            assert_eq!(candidate["index"], 0);
            assert_eq!(candidate["content"]["role"], "model");
            assert_eq!(candidate["content"]["parts"].as_array().unwrap().len(), 1);
            if candidate.get("finishReason").is_some() {
                assert_eq!(i, evs.len() - 1, "the finishReason chunk is the last");
            }
        }
    }

    #[test]
    fn every_streamed_schedule_is_valid_sse_shaped_like_the_reference() {
        let streams = every_stream();
        assert!(streams.len() > 300);
        for (dialect, end, include_usage, s) in &streams {
            let at = format!("{dialect} / {end:?} / include_usage {include_usage}");
            assert_eq!(s.content_type, "text/event-stream", "{at}");
            assert!(s.steps.windows(2).all(|w| w[0].at <= w[1].at), "{at}");
            let evs = testkit::events(s);
            match dialect {
                Dialect::Chat => check_chat(&evs, *end, *include_usage),
                Dialect::Responses => check_responses(&evs),
                Dialect::Messages => check_messages(&evs),
                Dialect::Gemini => check_gemini(&evs),
            }
            // Exactly one protocol terminal, last, for the ends that have one; none otherwise.
            let classes: Vec<Class> = evs.iter().map(|e| testkit::classify(*dialect, e)).collect();
            let terminals = classes
                .iter()
                .filter(|c| {
                    matches!(
                        c,
                        Class::TerminalOk | Class::TerminalIncomplete | Class::TerminalError
                    )
                })
                .count();
            let marks = testkit::marks(*dialect, &evs);
            match end {
                End::Terminal | End::Incomplete | End::Filtered => {
                    assert_eq!(terminals, 1, "{at}");
                    let kind = if *end != End::Terminal && *dialect != Dialect::Messages {
                        Class::TerminalIncomplete
                    } else {
                        Class::TerminalOk
                    };
                    assert_eq!(marks.terminal.map(|t| t.1), Some(kind), "{at}");
                }
                End::ErrorEvent => {
                    assert_eq!(
                        marks.terminal.map(|t| t.1),
                        Some(Class::TerminalError),
                        "{at}"
                    )
                }
                _ => {
                    assert_eq!(terminals, 0, "{at}");
                    // The stream stops right after its last delta (or its envelope; Gemini
                    // has none, so a cut answer without output sends nothing at all).
                    let has_deltas = marks.first_effective.is_some();
                    match classes.last() {
                        Some(last) if has_deltas => {
                            assert!(matches!(last, Class::Effective | Class::Visible), "{at}");
                        }
                        Some(_) => {}
                        None => assert_eq!(*dialect, Dialect::Gemini, "{at}"),
                    }
                }
            }
        }
    }

    #[test]
    fn streamed_deltas_concatenate_to_the_non_streamed_answer() {
        for script in scripts() {
            for dialect in Dialect::ALL {
                let s = schedule(dialect, &script, "m", (true, false), 0);
                let evs = testkit::events(&s);
                let text: String = evs
                    .iter()
                    .filter(|e| testkit::classify(dialect, e) == Class::Visible)
                    .map(|e| {
                        let j = json(e);
                        match dialect {
                            Dialect::Chat => j["choices"][0]["delta"]["content"].as_str(),
                            Dialect::Responses => j["delta"].as_str(),
                            Dialect::Messages => j["delta"]["text"].as_str(),
                            Dialect::Gemini => {
                                j["candidates"][0]["content"]["parts"][0]["text"].as_str()
                            }
                        }
                        .unwrap()
                        .to_owned()
                    })
                    .collect();
                let whole = schedule(dialect, &script, "m", (false, false), 0);
                let body: Value = serde_json::from_slice(&whole.steps[0].bytes).unwrap();
                let answer = match dialect {
                    Dialect::Chat => body["choices"][0]["message"]["content"]
                        .as_str()
                        .unwrap_or(""),
                    Dialect::Responses => body["output"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|i| i["type"] == "message")
                        .map_or("", |m| m["content"][0]["text"].as_str().unwrap()),
                    Dialect::Messages => body["content"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|b| b["type"] == "text")
                        .map_or("", |b| b["text"].as_str().unwrap()),
                    Dialect::Gemini => body["candidates"][0]["content"]["parts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|p| p["thought"] != true && p.get("text").is_some())
                        .map_or("", |p| p["text"].as_str().unwrap()),
                };
                assert_eq!(text, answer, "{dialect}");
            }
        }
    }

    #[test]
    fn a_thinking_block_ends_with_an_empty_thinking_delta_then_its_signature() {
        let s = schedule(
            Dialect::Messages,
            &preset("sim-trace-c").unwrap(),
            "m",
            (true, false),
            0,
        );
        let evs = testkit::events(&s);
        let stop = evs
            .iter()
            .position(|e| e.event.as_deref() == Some("content_block_stop"))
            .unwrap();
        let before: Vec<&Value> = evs[stop - 2..stop]
            .iter()
            .map(|e| &json(e)["delta"])
            .collect();
        assert_eq!(
            before[0],
            &json!({"type": "thinking_delta", "thinking": ""})
        );
        assert_eq!(before[1]["type"], "signature_delta");
        assert!(!before[1]["signature"].as_str().unwrap().is_empty());
    }

    #[test]
    fn a_tool_use_block_opens_with_an_empty_input_json_delta() {
        let script: Script = serde_json::from_str(
            r#"{"first_effective": {"kind": "tool_args", "at_ms": 3}, "reasoning_deltas": 2}"#,
        )
        .unwrap();
        let s = schedule(Dialect::Messages, &script, "m", (true, false), 0);
        let evs = testkit::events(&s);
        let deltas: Vec<&Value> = evs
            .iter()
            .filter(|e| e.event.as_deref() == Some("content_block_delta"))
            .map(|e| &json(e)["delta"])
            .collect();
        assert_eq!(
            deltas[0],
            &json!({"type": "input_json_delta", "partial_json": ""})
        );
        assert_eq!(deltas[1]["partial_json"], "{\"query\":\"weather");
    }

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

    #[test]
    fn a_refusal_is_a_400_each_provider_words_its_own_way_and_the_gateway_names_it() {
        use laptime_core::timeline::ErrorClass;
        for dialect in Dialect::ALL {
            for (refusal, class) in [
                (Refusal::ContextLength, ErrorClass::ContextLengthExceeded),
                (Refusal::ContentFilter, ErrorClass::ContentFiltered),
            ] {
                let e = ApiError::refused(refusal, dialect);
                assert_eq!(e.status, 400);
                let body = e.body(dialect);
                let v: Value = serde_json::from_str(&body).unwrap();
                assert!(v["error"]["message"].as_str().is_some(), "{body}");
                assert_eq!(
                    laptime_core::classify::error_status_class(400, body.as_bytes()),
                    Some(class),
                    "{dialect}: {body}"
                );
            }
        }
    }
}
