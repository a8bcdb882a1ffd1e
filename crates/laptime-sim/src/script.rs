//! What the fake provider will do and when: the [`Script`] a request asks for, the named
//! [`preset`]s, and [`schedule`], which turns a script into the exact bytes and instants of one
//! response.
//!
//! Pure: no tokio, no clock. Every instant is an offset from the arrival of the request head,
//! computed absolutely from the script (never by adding gaps), so the terminal frame of a
//! scripted 2.8 s decode lands on exactly 2.8 s whatever the token count. The per-dialect byte
//! shapes live in [`crate::wire`]; this module owns the timing.

use std::time::Duration;

use bytes::Bytes;
use laptime_core::Dialect;
use serde::{Deserialize, Serialize};

use crate::wire;

// === Script ===

/// A scripted answer, as sent in a request's top-level `"laptime_sim"` object or looked up by
/// model name with [`preset`]. Every field is optional; a missing field takes the value of
/// [`Script::default`], which is the `sim-fast` preset. All times are milliseconds from the
/// arrival of the request head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Script {
    /// Delay from request arrival to the response head.
    pub headers_ms: u64,
    /// The first non-heartbeat SSE event: the envelope (Chat role chunk with `content:""`,
    /// Responses `response.created` + `response.in_progress`, Anthropic `message_start` +
    /// `content_block_start`). Never before the head.
    pub first_event_ms: u64,
    /// The first effective (non-empty, model-generated) output when it is not the text itself.
    pub first_effective: Option<FirstEffective>,
    /// How many reasoning (or tool-argument) deltas are sent, evenly spaced from
    /// `first_effective.at_ms` up to (not including) the first text. At least one is sent when
    /// `first_effective` names reasoning or tool args. Without text they are paced at
    /// `tokens_per_s`.
    pub reasoning_deltas: u32,
    /// The first visible text delta; `null` means the answer has no text at all.
    pub first_text_ms: Option<u64>,
    /// Number of text deltas, one token each.
    pub text_tokens: u32,
    /// Pace of the text deltas. Delta `i` is sent at `first_text_ms + i / tokens_per_s` and the
    /// terminal event at `first_text_ms + text_tokens / tokens_per_s`. `null` (infinite) sends
    /// them all at once.
    #[serde(with = "pace")]
    pub tokens_per_s: f64,
    /// Token counts reported in the usage event and non-streamed body.
    pub usage: UsageSpec,
    /// Sends a heartbeat this often between the head and the first event (Chat `: keep-alive`
    /// comment, Responses `keepalive` event, Anthropic `ping`).
    pub heartbeat_ms: Option<u64>,
    /// How the answer ends.
    pub end: End,
    /// Status code for `end: status` (and for a non-streamed `end: error_event`).
    pub status: u16,
    /// How many tool calls the tool-argument deltas are split across (parallel calls, one
    /// after the other as the providers stream them), each with its own id, name and
    /// arguments. At least one argument delta is sent per call. Only used when
    /// `first_effective` names tool args.
    pub tool_calls: u32,
    /// The visible text, instead of the generated words: split into `text_tokens` deltas of
    /// nearly equal length (fewer when the text has fewer characters).
    pub text: Option<String>,
    /// Answer with a summary of the request as the visible text: the server fills `text` with
    /// it (the format is documented in the crate's `echo` module).
    pub echo: bool,
    /// Sent as the `retry-after` header (seconds) with the response head.
    pub retry_after_s: Option<u64>,
    /// With `end: status`: the provider's error for this refusal of the request, in its
    /// wording (instead of the generic error for `status`).
    pub refusal: Option<Refusal>,
    /// Sends only the first `cut_after` text deltas of the answer (of the whole answer's text,
    /// cut where it would be cut with all `text_tokens`), each at its scripted instant, then
    /// ends as `end` says right after the last one sent: `close`, `reset` or `stall` for a
    /// stream cut mid-answer (`incomplete`, `filtered` and `error_event` also play there).
    /// `end: terminal` is rejected: a cut answer has no normal ending. A continuation (see
    /// `prefill`) counts its own deltas. Not streamed, the cut answer's body is cut in half as
    /// for any cut ending. `null` sends every delta.
    pub cut_after: Option<u32>,
    /// What a request whose conversation ends with an assistant turn (a prefill) gets. The
    /// prefill is read as the providers that take one read it: Anthropic Messages' last
    /// `messages[]` item with `role: "assistant"` (a string or text blocks), Chat's last message
    /// with `role: "assistant"` and `"prefix": true` (DeepSeek's and Mistral's way; without
    /// `prefix` a trailing assistant message is an ordinary turn), Gemini's last `contents[]`
    /// item with `role: "model"` (its non-thought text parts). Responses has no prefill.
    pub prefill: PrefillMode,
}

/// How a scripted provider treats an assistant prefill (the script's `prefill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefillMode {
    /// Continue it, as a model does: when the prefill is a prefix of the script's whole text
    /// ([`canonical_text`]), the answer is only the rest of that text, cut as the whole
    /// answer's deltas are (a prefill ending inside a delta continues with the rest of that
    /// delta), the first remaining delta at `first_text_ms` and the rest at the script's pace,
    /// with no reasoning or tool output and the output tokens counted on the deltas sent (a
    /// scripted `output_tokens` or `reasoning_tokens` is for the whole answer, so it is not
    /// used). A prefill that is not a prefix of that text is ignored, as a model that does not
    /// follow it would: the whole answer. A script without text ignores any prefill.
    #[default]
    Continue,
    /// Answer 400 in the provider's words (Anthropic `invalid_request_error`, OpenAI
    /// `invalid_request_error` with code null, Google `INVALID_ARGUMENT`), as a model without
    /// prefill support does, at `headers_ms`; a request without a prefill is answered as usual.
    Refuse,
}

/// A request a provider refuses for what it is, not for a fault of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The input (with the output cap) is over the model's context window.
    ContextLength,
    /// The provider's content filter refused the prompt.
    ContentFilter,
}

impl Default for Script {
    /// The `sim-fast` preset: everything at 0 ms, 16 text tokens at once.
    fn default() -> Self {
        Script {
            headers_ms: 0,
            first_event_ms: 0,
            first_effective: None,
            reasoning_deltas: 0,
            first_text_ms: Some(0),
            text_tokens: 16,
            tokens_per_s: f64::INFINITY,
            usage: UsageSpec::default(),
            heartbeat_ms: None,
            end: End::Terminal,
            status: 500,
            tool_calls: 1,
            text: None,
            echo: false,
            retry_after_s: None,
            refusal: None,
            cut_after: None,
            prefill: PrefillMode::Continue,
        }
    }
}

/// Where the first effective output comes from, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirstEffective {
    pub kind: EffectiveKind,
    pub at_ms: u64,
}

/// The kind of the first effective output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectiveKind {
    /// Reasoning text (Chat `reasoning_content`, Responses reasoning summary, Anthropic thinking).
    Reasoning,
    /// Tool-call arguments (Chat `tool_calls`, Responses `function_call`, Anthropic `tool_use`).
    ToolArgs,
    /// The visible text itself: the same as `first_text_ms` (`at_ms` is used when
    /// `first_text_ms` is null).
    Text,
}

/// Token counts. `input_tokens` excludes cached tokens (Anthropic's convention); the OpenAI
/// dialects report `input + cache_read + cache_write` as their prompt/input total.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageSpec {
    /// Absent: the request body counted by [`crate::tokens::of_body`] (a token per four bytes,
    /// at least one), so the usage reflects the prompt sent; present: this figure.
    pub input_tokens: Option<u32>,
    pub cache_read_tokens: u32,
    pub cache_write_tokens: u32,
    /// The part of `cache_write_tokens` written for one hour (Anthropic reports the split in
    /// `cache_creation`; the others only the total).
    pub cache_write_1h_tokens: u32,
    /// Defaults to the number of text deltas plus reasoning/tool deltas actually sent.
    pub output_tokens: Option<u32>,
    /// Defaults to the number of reasoning deltas (0 for tool args), capped at the output.
    pub reasoning_tokens: Option<u32>,
}

/// How a scripted answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The dialect's normal terminal: `[DONE]`, `response.completed`, `message_stop`.
    #[default]
    Terminal,
    /// Cut by the token limit: `finish_reason:"length"`, `response.incomplete`,
    /// `stop_reason:"max_tokens"`, `finishReason:"MAX_TOKENS"`.
    Incomplete,
    /// Stopped by the provider's content filter: Chat `finish_reason:"content_filter"`,
    /// Responses `response.incomplete` with reason `content_filter`, Anthropic
    /// `stop_reason:"refusal"`, Gemini `finishReason:"SAFETY"`.
    Filtered,
    /// An in-band error after HTTP 200: Chat `data:{"error":…}` then `[DONE]`; Responses `error`
    /// (nested shape) then `response.failed`; Anthropic `event: error`.
    ErrorEvent,
    /// Clean EOF right after the last delta, no terminal event.
    Close,
    /// A TCP RST right after the last delta.
    Reset,
    /// Nothing more after the last delta; the connection stays open until the client goes
    /// away (at most 10 minutes).
    Stall,
    /// No stream: `status` and the dialect's JSON error body at `headers_ms`.
    Status,
}

/// Limits that keep a hostile or mistyped script from allocating without bound.
const MAX_DELTAS: u32 = 1_000_000;
const MAX_HEARTBEATS: u64 = 100_000;
pub(crate) const MAX_TOOL_CALLS: u32 = 128;

impl Script {
    /// Rejects scripts that cannot be played: a non-positive or NaN pace, an impossible status
    /// code, a zero heartbeat period, or absurd counts. [`schedule`] tolerates them anyway
    /// (it treats a bad pace as infinite, skips a zero heartbeat), so this is for the server
    /// to answer 400 rather than guess.
    pub fn validate(&self) -> Result<(), String> {
        if self.tokens_per_s.is_nan() || self.tokens_per_s <= 0.0 {
            return Err(format!(
                "laptime_sim.tokens_per_s must be positive or null (infinite), got {}",
                self.tokens_per_s
            ));
        }
        if !(100..=999).contains(&self.status) {
            return Err(format!(
                "laptime_sim.status must be an HTTP status code, got {}",
                self.status
            ));
        }
        if self.text_tokens > MAX_DELTAS || self.reasoning_deltas > MAX_DELTAS {
            return Err(format!(
                "laptime_sim.text_tokens and reasoning_deltas are limited to {MAX_DELTAS}"
            ));
        }
        if !(1..=MAX_TOOL_CALLS).contains(&self.tool_calls) {
            return Err(format!(
                "laptime_sim.tool_calls must be between 1 and {MAX_TOOL_CALLS}, got {}",
                self.tool_calls
            ));
        }
        if self.cut_after.is_some() && self.end == End::Terminal {
            return Err(
                "laptime_sim.cut_after needs an end that cuts the answer (close, reset, stall, \
                 incomplete, filtered or error_event), not terminal"
                    .to_owned(),
            );
        }
        if self.echo && self.text.is_some() {
            return Err("laptime_sim.echo and laptime_sim.text cannot both be set".to_owned());
        }
        if let Some(hb) = self.heartbeat_ms {
            if hb == 0 {
                return Err("laptime_sim.heartbeat_ms must be positive".to_owned());
            }
            let first = self.first_event_ms.saturating_sub(self.headers_ms);
            if first / hb > MAX_HEARTBEATS {
                return Err(format!(
                    "laptime_sim.heartbeat_ms gives more than {MAX_HEARTBEATS} heartbeats"
                ));
            }
        }
        Ok(())
    }

    /// The number of text deltas actually sent: `text_tokens`, or fewer for a given `text`
    /// shorter than that (every delta carries at least one character).
    pub(crate) fn text_deltas(&self) -> u32 {
        let n = self.text_tokens.min(MAX_DELTAS);
        match &self.text {
            Some(text) => n.min(u32::try_from(text.chars().count()).unwrap_or(u32::MAX)),
            None => n,
        }
    }
}

/// `tokens_per_s` is `f64::INFINITY` for "as fast as possible", which JSON cannot spell:
/// it is written and read as `null`.
mod pace {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_none()
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
    }
}

// === Presets ===

/// The model names [`preset`] knows, in the order `GET /v1/models` lists them.
pub const PRESET_NAMES: [&str; 17] = [
    "sim-trace-a",
    "sim-trace-b",
    "sim-trace-c",
    "sim-fast",
    "sim-reasoning",
    "sim-tool-call",
    "sim-parallel-tools",
    "sim-max-tokens",
    "sim-rate-limited",
    "sim-context-length",
    "sim-content-filter",
    "sim-overloaded-in-band",
    "sim-long",
    "sim-cut-after-40",
    "sim-stall-after-20",
    "sim-prefill-refused",
    "sim-echo",
];

/// The script served for a model name, if it is a preset. The `sim-trace-*` numbers are the
/// seed traces of the DESIGN (slow-request classification): A is slow to headers, B is late to
/// visible text, C decodes slowly; `sim-fast` answers at once.
///
/// The other presets are scenarios for translation tests, reachable by model name because a
/// translated request cannot carry a `laptime_sim` script: [`scenario`] lists them.
pub fn preset(name: &str) -> Option<Script> {
    let reasoning_at = |at_ms| {
        Some(FirstEffective {
            kind: EffectiveKind::Reasoning,
            at_ms,
        })
    };
    match name {
        // Headers at 6100, envelope 6300, one reasoning delta 6350, text 6400,
        // 118 tokens over 2.8 s: terminal at 9200.
        "sim-trace-a" => Some(Script {
            headers_ms: 6100,
            first_event_ms: 6300,
            first_effective: reasoning_at(6350),
            reasoning_deltas: 1,
            first_text_ms: Some(6400),
            text_tokens: 118,
            tokens_per_s: 118.0 / 2.8,
            usage: UsageSpec {
                input_tokens: Some(1200),
                output_tokens: Some(118),
                ..UsageSpec::default()
            },
            ..Script::default()
        }),
        // Headers 240, envelope 310, reasoning every 100 ms from 2900 to 8600, text at 8700,
        // 83 tokens over 1.5 s: terminal at 10200 (≈ 55.3 tok/s).
        "sim-trace-b" => Some(Script {
            headers_ms: 240,
            first_event_ms: 310,
            first_effective: reasoning_at(2900),
            reasoning_deltas: 58,
            first_text_ms: Some(8700),
            text_tokens: 83,
            tokens_per_s: 83.0 / 1.5,
            usage: UsageSpec {
                input_tokens: Some(800),
                cache_read_tokens: 512,
                output_tokens: Some(83),
                ..UsageSpec::default()
            },
            ..Script::default()
        }),
        // Headers 260, envelope 330, one reasoning delta 420, text at 430,
        // 196 tokens at 9.8 tok/s: terminal at 20430.
        "sim-trace-c" => Some(Script {
            headers_ms: 260,
            first_event_ms: 330,
            first_effective: reasoning_at(420),
            reasoning_deltas: 1,
            first_text_ms: Some(430),
            text_tokens: 196,
            tokens_per_s: 9.8,
            usage: UsageSpec {
                input_tokens: Some(640),
                output_tokens: Some(196),
                ..UsageSpec::default()
            },
            ..Script::default()
        }),
        "sim-fast" => Some(Script::default()),
        _ => scenario(name),
    }
}

/// The translation-test scenarios. Each is fast (all within ~50 ms), reports usage with its own
/// numbers (cache reads and writes included, so a test cannot pass on another preset's), and
/// is served in every dialect, streamed and whole:
///
/// - `sim-reasoning`: 4 reasoning deltas (`Let me think about`) from 20 ms, then 6 text
///   tokens (`Sure, here is the short`) at 40 ms. Usage: input 20, cache read 8, cache write
///   4, output 10, reasoning 4.
/// - `sim-tool-call`: one `get_weather` call only, its arguments
///   `{"query":"weather in Paris tomorrow"}` in 4 fragments; stop reason tool calls. Usage:
///   input 30, cache read 16, cache write 0, output 4.
/// - `sim-parallel-tools`: two calls in one answer, `get_weather`
///   `{"query":"weather in Paris"}` then `get_time` `{"location":"Tokyo, Japan local"}`, 3
///   fragments each. Usage: input 36, cache read 0, cache write 12, output 6.
/// - `sim-max-tokens`: 8 text tokens (`Sure, here is the short answer:`) cut by the token
///   limit. Usage: input 12, cache read 4, cache write 0, output 8.
/// - `sim-rate-limited`: HTTP 429 with the dialect's rate-limit error body and
///   `retry-after: 1`, streamed or not.
/// - `sim-overloaded-in-band`: 5 text tokens (`Sure, here is the`), then the dialect's
///   in-band overload error (HTTP 529's vocabulary: Anthropic `overloaded_error`, OpenAI
///   `server_error` with code `server_is_overloaded`), no normal terminal (Chat still ends with
///   `[DONE]`, Responses with `response.failed`); not streamed, a 529 with that error body.
///   Input 14.
/// - `sim-long`: 60 text tokens (the generated words) from 20 ms at 200 tokens/s, terminal at
///   320 ms; a request ending with an assistant prefill gets the continuation (see
///   [`PrefillMode::Continue`]). Usage: input 50, cache read 0, cache write 0, output 60.
/// - `sim-cut-after-40`: `sim-long`'s answer cut after its 40th delta (215 ms) by a clean
///   close, no terminal; a continuation is cut after its own 40th delta.
/// - `sim-stall-after-20`: `sim-long`'s answer, then nothing after its 20th delta (115 ms):
///   the connection stays open.
/// - `sim-prefill-refused`: `sim-long`, but a request ending with an assistant prefill is a
///   400 ([`PrefillMode::Refuse`]).
/// - `sim-echo`: 8 text deltas whose text is the summary of the request (see the `echo`
///   module). Usage: input 40, cache read 0, cache write 0, output 8.
///
/// `sim-long`, `sim-cut-after-40`, `sim-stall-after-20` and `sim-prefill-refused` have the
/// same [`canonical_text`], so a test can check that a gateway continuing a cut answer
/// elsewhere hands its client exactly that text.
fn scenario(name: &str) -> Option<Script> {
    let at = |kind, at_ms| Some(FirstEffective { kind, at_ms });
    let usage = |input_tokens, cache_read_tokens, cache_write_tokens| UsageSpec {
        input_tokens: Some(input_tokens),
        cache_read_tokens,
        cache_write_tokens,
        ..UsageSpec::default()
    };
    // Fast but not instantaneous: the head, the first event and the first output each have
    // their own instant, so a record's marks can be told apart.
    let base = Script {
        headers_ms: 5,
        first_event_ms: 10,
        tokens_per_s: 1000.0,
        ..Script::default()
    };
    // Long enough (300 ms of text) for a gateway to cut it mid-answer and continue elsewhere.
    let long = Script {
        first_text_ms: Some(20),
        text_tokens: 60,
        tokens_per_s: 200.0,
        usage: usage(50, 0, 0),
        ..base.clone()
    };
    match name {
        "sim-reasoning" => Some(Script {
            first_effective: at(EffectiveKind::Reasoning, 20),
            reasoning_deltas: 4,
            first_text_ms: Some(40),
            text_tokens: 6,
            usage: usage(20, 8, 4),
            ..base
        }),
        "sim-tool-call" => Some(Script {
            first_effective: at(EffectiveKind::ToolArgs, 20),
            reasoning_deltas: 4,
            first_text_ms: None,
            usage: usage(30, 16, 0),
            ..base
        }),
        "sim-parallel-tools" => Some(Script {
            first_effective: at(EffectiveKind::ToolArgs, 20),
            reasoning_deltas: 6,
            tool_calls: 2,
            first_text_ms: None,
            usage: usage(36, 0, 12),
            ..base
        }),
        "sim-max-tokens" => Some(Script {
            first_text_ms: Some(20),
            text_tokens: 8,
            end: End::Incomplete,
            usage: usage(12, 4, 0),
            ..base
        }),
        "sim-rate-limited" => Some(Script {
            end: End::Status,
            status: 429,
            retry_after_s: Some(1),
            ..base
        }),
        // Over the context window: 400 in each provider's wording.
        "sim-context-length" => Some(Script {
            end: End::Status,
            status: 400,
            refusal: Some(Refusal::ContextLength),
            ..base
        }),
        // Text, then the content filter stops the answer.
        "sim-content-filter" => Some(Script {
            first_text_ms: Some(20),
            text_tokens: 6,
            end: End::Filtered,
            ..base
        }),
        "sim-overloaded-in-band" => Some(Script {
            first_text_ms: Some(20),
            text_tokens: 5,
            end: End::ErrorEvent,
            status: 529,
            usage: usage(14, 0, 0),
            ..base
        }),
        "sim-long" => Some(long),
        "sim-cut-after-40" => Some(Script {
            cut_after: Some(40),
            end: End::Close,
            ..long
        }),
        "sim-stall-after-20" => Some(Script {
            cut_after: Some(20),
            end: End::Stall,
            ..long
        }),
        "sim-prefill-refused" => Some(Script {
            prefill: PrefillMode::Refuse,
            ..long
        }),
        "sim-echo" => Some(Script {
            first_text_ms: Some(20),
            text_tokens: 8,
            echo: true,
            usage: usage(40, 0, 0),
            ..base
        }),
        _ => None,
    }
}

// === Schedule ===

/// One body frame and the instant (from request arrival) it is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub bytes: Bytes,
}

/// What happens after the last step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The body ends cleanly.
    Eof,
    /// The connection is reset (TCP RST).
    Reset,
    /// Nothing more is sent; the connection is held open until the client leaves.
    Stall,
}

/// A whole response: head, body frames with their instants, and how it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub status: u16,
    pub content_type: &'static str,
    pub head_at: Duration,
    pub steps: Vec<Step>,
    pub finish: Finish,
    /// The `retry-after` header (seconds) the head carries, if any.
    pub retry_after_s: Option<u64>,
}

pub(crate) const SSE: &str = "text/event-stream";
pub(crate) const JSON: &str = "application/json";

/// The response `script` gives in `dialect` for `model`.
///
/// - `stream`: SSE events, one [`Step`] per event (or comment), the head at `headers_ms`.
/// - not `stream`: the head and the whole JSON body at the instant the stream would have ended.
///   `end: close | reset | stall` send the head and the first half of the body, then finish
///   that way; `end: error_event` answers `status` with the dialect's error body.
/// - `end: status`: `status` and the dialect's error body at `headers_ms`, streamed or not.
///
/// `include_usage` (Chat only) adds the `choices:[]` usage chunk before `[DONE]` and
/// `"usage":null` on every other chunk, as OpenAI does for `stream_options.include_usage`.
///
/// `body_bytes` is the size of the request body: a script without its own `input_tokens`
/// reports that many bytes as input tokens, one per four (see [`crate::tokens::of_body`]).
pub fn schedule(
    dialect: Dialect,
    script: &Script,
    model: &str,
    (stream, include_usage): (bool, bool),
    body_bytes: usize,
) -> Schedule {
    schedule_with_prefill(
        dialect,
        script,
        model,
        (stream, include_usage),
        None,
        body_bytes,
    )
}

/// [`schedule`] for a request whose conversation ends with the assistant text `prefill` (as
/// the server reads it from a request; `None` for a request without one): a continuation of
/// it, the whole answer, or a 400, as the script's [`PrefillMode`] says.
pub fn schedule_with_prefill(
    dialect: Dialect,
    script: &Script,
    model: &str,
    (stream, include_usage): (bool, bool),
    prefill: Option<&str>,
    body_bytes: usize,
) -> Schedule {
    let request = Request {
        model,
        stream,
        include_usage,
        prefill,
        response: &ResponseMeta::default(),
        body_bytes,
    };
    answer(dialect, script, &request).schedule
}

/// What a Responses answer says of itself besides its content: its id, and the request's
/// `store`, `background` and `previous_response_id` echoed. The other dialects ignore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResponseMeta {
    pub(crate) id: String,
    pub(crate) store: bool,
    pub(crate) background: bool,
    pub(crate) previous_response_id: Option<String>,
}

impl Default for ResponseMeta {
    /// The first response of a sim, as a request without `store`, `background` or
    /// `previous_response_id` makes it (OpenAI stores by default).
    fn default() -> Self {
        ResponseMeta {
            id: "resp_laptimesim0001".to_owned(),
            store: true,
            background: false,
            previous_response_id: None,
        }
    }
}

/// How a request asks to be answered, besides its script.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) model: &'a str,
    pub(crate) stream: bool,
    /// Chat's `stream_options.include_usage`.
    pub(crate) include_usage: bool,
    /// The assistant prefill the conversation ends with, if any.
    pub(crate) prefill: Option<&'a str>,
    pub(crate) response: &'a ResponseMeta,
    /// The size of the request body, counted as the input when the script does not say it.
    pub(crate) body_bytes: usize,
}

/// A scheduled answer and, for a Responses answer that made a response, what a store keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) schedule: Schedule,
    /// The final response object (`GET /v1/responses/{id}`): Responses answers with a 200
    /// status only.
    pub(crate) stored: Option<String>,
    /// A background response's object once cancelled.
    pub(crate) cancelled: Option<String>,
}

/// [`schedule_with_prefill`] with everything a server knows of the request.
pub(crate) fn answer(dialect: Dialect, script: &Script, request: &Request<'_>) -> Answer {
    if let Some(prefill) = request.prefill {
        match script.prefill {
            PrefillMode::Refuse => {
                let head_at = Duration::from_millis(script.headers_ms);
                let body = wire::ApiError::prefill_refused().body(dialect);
                return Answer {
                    schedule: whole(400, head_at, body, None),
                    stored: None,
                    cancelled: None,
                };
            }
            PrefillMode::Continue if has_text(script) => {
                if let Some(deltas) = Deltas::of(script).continuing(prefill) {
                    let continuation = Script {
                        // A continuation writes only the rest of the text.
                        first_effective: script
                            .first_effective
                            .filter(|f| f.kind == EffectiveKind::Text),
                        usage: UsageSpec {
                            output_tokens: None,
                            reasoning_tokens: None,
                            ..script.usage.clone()
                        },
                        ..script.clone()
                    };
                    return play(dialect, &continuation, deltas, request);
                }
            }
            PrefillMode::Continue => {}
        }
    }
    play(dialect, script, Deltas::of(script), request)
}

/// The whole visible text `script` answers with, as a client that read all of it has it: the
/// text of all `text_tokens` deltas (the generated words, or the script's `text` as far as
/// those deltas carry it), whatever `cut_after` says; empty for a script without text. For an
/// `echo` script the server writes the text from the request, so this is only its text once
/// `text` holds the summary.
pub fn canonical_text(script: &Script) -> String {
    if has_text(script) {
        Deltas::of(script).joined().to_owned()
    } else {
        String::new()
    }
}

/// The script has visible text, as [`Timeline::new`] decides it.
fn has_text(script: &Script) -> bool {
    script.first_text_ms.is_some()
        || matches!(
            script.first_effective,
            Some(FirstEffective {
                kind: EffectiveKind::Text,
                ..
            })
        )
}

fn whole(status: u16, at: Duration, body: String, retry_after_s: Option<u64>) -> Schedule {
    Schedule {
        status,
        content_type: JSON,
        head_at: at,
        steps: vec![Step {
            at,
            bytes: Bytes::from(body),
        }],
        finish: Finish::Eof,
        retry_after_s,
    }
}

/// The answer of `script` with the text `deltas` (before `cut_after`).
fn play(dialect: Dialect, script: &Script, mut deltas: Deltas, request: &Request<'_>) -> Answer {
    if let Some(n) = script.cut_after {
        deltas.truncate(usize::try_from(n).unwrap_or(usize::MAX));
    }
    let sent = u32::try_from(deltas.len()).unwrap_or(MAX_DELTAS);
    let timeline = Timeline::new(script, sent);
    let usage = Usage::resolve(script, &timeline, request.body_bytes);
    let ctx = wire::Ctx {
        dialect,
        model: request.model,
        timeline: &timeline,
        usage,
        end: script.end,
        status: script.status,
        include_usage: request.include_usage && dialect == Dialect::Chat,
        tool_calls: script.tool_calls.clamp(1, MAX_TOOL_CALLS),
        deltas: &deltas,
        refusal: script.refusal,
        response: request.response,
    };
    let background = dialect == Dialect::Responses && request.response.background;
    let schedule = if background && !request.stream && script.end != End::Status {
        // A background request is answered at once, queued; the store has the rest.
        whole(
            200,
            timeline.head,
            wire::responses_queued(&ctx),
            script.retry_after_s,
        )
    } else {
        play_schedule(&ctx, script, request.stream)
    };
    // A response exists once the provider answered 200 (a stream's in-band failure too).
    let made = dialect == Dialect::Responses && schedule.status == 200;
    Answer {
        schedule,
        stored: made.then(|| wire::responses_stored(&ctx)),
        cancelled: (made && background).then(|| wire::responses_cancelled(&ctx)),
    }
}

/// The schedule of one answer whose context is made.
fn play_schedule(ctx: &wire::Ctx<'_>, script: &Script, stream: bool) -> Schedule {
    let timeline = ctx.timeline;
    let retry_after_s = script.retry_after_s;
    let whole = |status: u16, at: Duration, body: String| whole(status, at, body, retry_after_s);
    if script.end == End::Status {
        return whole(script.status, timeline.head, wire::scripted_error(ctx));
    }
    let finish = match script.end {
        End::Reset => Finish::Reset,
        End::Stall => Finish::Stall,
        _ => Finish::Eof,
    };
    if stream {
        return Schedule {
            status: 200,
            content_type: SSE,
            head_at: timeline.head,
            steps: wire::stream(ctx),
            finish,
            retry_after_s,
        };
    }
    match script.end {
        End::ErrorEvent => whole(script.status, timeline.end, wire::scripted_error(ctx)),
        End::Close | End::Reset | End::Stall => {
            // The answer is cut in the middle of its JSON: half a body, then the scripted end.
            let mut body = wire::body(ctx);
            body.truncate(body.len() / 2);
            Schedule {
                finish,
                ..whole(200, timeline.end, body)
            }
        }
        End::Terminal | End::Incomplete | End::Filtered | End::Status => {
            whole(200, timeline.end, wire::body(ctx))
        }
    }
}

// === Text ===

/// The visible text of one answer and where its deltas are cut: delta `i` is
/// `text[bounds[i]..bounds[i + 1]]`. One string and its offsets, so a long scripted text is cut
/// in one pass and a continuation or a cut only moves offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deltas {
    text: String,
    /// Byte offsets, one more than there are deltas, on character boundaries, never
    /// decreasing.
    bounds: Vec<usize>,
}

impl Deltas {
    /// The deltas of the script's whole answer: `text_deltas()` generated words, or its `text`
    /// cut into that many pieces of nearly equal length in characters.
    pub(crate) fn of(script: &Script) -> Deltas {
        let n = usize::try_from(script.text_deltas()).unwrap_or(0);
        match &script.text {
            Some(text) => {
                // Delta `i` starts at character `i * chars / n`; one pass finds those bytes
                // (n is at most the character count, so the targets never repeat).
                let chars = text.chars().count();
                let mut bounds = Vec::with_capacity(n + 1);
                if n == 0 {
                    bounds.push(0);
                } else {
                    let mut next = 0;
                    for (c, (byte, _)) in text.char_indices().enumerate() {
                        while next <= n && next * chars / n == c {
                            bounds.push(byte);
                            next += 1;
                        }
                    }
                    bounds.resize(n + 1, text.len());
                }
                Deltas {
                    text: text.clone(),
                    bounds,
                }
            }
            None => {
                let mut text = String::new();
                let mut bounds = Vec::with_capacity(n + 1);
                bounds.push(0);
                for i in 0..n {
                    text.push_str(wire::text_token(i));
                    bounds.push(text.len());
                }
                Deltas { text, bounds }
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.bounds.len().saturating_sub(1)
    }

    /// Delta `i` ("" past the end).
    pub(crate) fn get(&self, i: usize) -> &str {
        match (self.bounds.get(i), self.bounds.get(i + 1)) {
            (Some(&from), Some(&to)) => self.text.get(from..to).unwrap_or(""),
            _ => "",
        }
    }

    /// The text of every delta, in order.
    pub(crate) fn joined(&self) -> &str {
        match (self.bounds.first(), self.bounds.last()) {
            (Some(&from), Some(&to)) => self.text.get(from..to).unwrap_or(""),
            _ => "",
        }
    }

    /// Keeps the first `n` deltas.
    pub(crate) fn truncate(&mut self, n: usize) {
        self.bounds.truncate(n.saturating_add(1));
    }

    /// The deltas that continue `prefill`, if it is a prefix of this answer: the deltas it
    /// does not cover whole, the first one starting where the prefill ends.
    fn continuing(mut self, prefill: &str) -> Option<Deltas> {
        if !self.joined().starts_with(prefill) {
            return None;
        }
        let end = self.bounds.first().copied().unwrap_or(0) + prefill.len();
        // Deltas whose start the prefill reaches are covered, but for the tail of the last.
        let covered = self.bounds.iter().take_while(|&&b| b <= end).count();
        let mut bounds = Vec::with_capacity(self.bounds.len().saturating_sub(covered) + 1);
        bounds.push(end);
        bounds.extend(self.bounds.iter().skip(covered).copied());
        self.bounds = bounds;
        Some(self)
    }
}

// === Timeline ===

/// Non-text effective output: what it is and the instant of each delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Work {
    pub(crate) kind: WorkKind,
    pub(crate) at: Vec<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkKind {
    Reasoning,
    ToolArgs,
}

/// The visible text: when it starts and the instant of each delta (possibly none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text {
    pub(crate) start: Duration,
    pub(crate) at: Vec<Duration>,
}

/// Every instant of one scripted answer, independent of the dialect. Instants never go
/// backwards: a script whose times are out of order is clamped (first event not before the
/// head, effective output not before the first event, text not before effective output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timeline {
    pub(crate) head: Duration,
    pub(crate) heartbeats: Vec<Duration>,
    pub(crate) first_event: Duration,
    pub(crate) work: Option<Work>,
    pub(crate) text: Option<Text>,
    /// The terminal event (or, for a non-streamed answer, the head and body).
    pub(crate) end: Duration,
}

/// Offsets of token `i` at a steady pace, computed from `i` alone so no rounding error builds
/// up: token `i` is due at `i / tokens_per_s`, rounded to the nanosecond.
#[derive(Debug, Clone, Copy)]
struct Pace {
    tokens_per_s: f64,
}

impl Pace {
    fn offset(self, i: u32) -> Duration {
        if !self.tokens_per_s.is_finite() || self.tokens_per_s <= 0.0 {
            // Infinite (or unusable) pace: everything at once.
            return Duration::ZERO;
        }
        let nanos = (f64::from(i) * 1e9 / self.tokens_per_s).round();
        Duration::from_nanos(nanos as u64)
    }
}

impl Timeline {
    /// The instants of `script` sending `text_deltas` text deltas (the script's own count, or
    /// fewer for a cut or a continuation).
    pub(crate) fn new(script: &Script, text_deltas: u32) -> Timeline {
        let ms = Duration::from_millis;
        let pace = Pace {
            tokens_per_s: script.tokens_per_s,
        };
        let head = ms(script.headers_ms);
        let first_event = ms(script.first_event_ms).max(head);

        let (work_start, first_text_ms) = match script.first_effective {
            Some(FirstEffective {
                kind: EffectiveKind::Text,
                at_ms,
            }) => (None, script.first_text_ms.or(Some(at_ms))),
            Some(FirstEffective {
                kind: EffectiveKind::Reasoning,
                at_ms,
            }) => (
                Some((WorkKind::Reasoning, ms(at_ms).max(first_event))),
                script.first_text_ms,
            ),
            Some(FirstEffective {
                kind: EffectiveKind::ToolArgs,
                at_ms,
            }) => (
                Some((WorkKind::ToolArgs, ms(at_ms).max(first_event))),
                script.first_text_ms,
            ),
            None => (None, script.first_text_ms),
        };

        let text_start = first_text_ms.map(|t| {
            let floor = work_start.map_or(first_event, |(_, at)| at);
            ms(t).max(floor)
        });

        let work = work_start.map(|(kind, start)| {
            // Each tool call gets at least one argument delta.
            let floor = match kind {
                WorkKind::ToolArgs => script.tool_calls.clamp(1, MAX_TOOL_CALLS),
                WorkKind::Reasoning => 1,
            };
            let n = script.reasoning_deltas.clamp(floor, MAX_DELTAS);
            let at = match text_start {
                // Evenly spaced in [start, text), the first one at `start`; integer arithmetic
                // so 58 deltas over 5.8 s are exactly 100 ms apart.
                Some(text) => {
                    let span = (text - start).as_nanos();
                    (0..n)
                        .map(|i| start + nanos(span * u128::from(i) / u128::from(n)))
                        .collect()
                }
                None => (0..n).map(|i| start + pace.offset(i)).collect(),
            };
            Work { kind, at }
        });

        let text = text_start.map(|start| Text {
            start,
            at: (0..text_deltas.min(MAX_DELTAS))
                .map(|i| start + pace.offset(i))
                .collect(),
        });

        let end = match (&text, &work) {
            (Some(text), _) => text.start + pace.offset(text_deltas.min(MAX_DELTAS)),
            (None, Some(work)) => {
                let n = u32::try_from(work.at.len()).unwrap_or(MAX_DELTAS);
                work.at.first().copied().unwrap_or(first_event) + pace.offset(n)
            }
            (None, None) => first_event,
        };

        let heartbeats = match script.heartbeat_ms {
            Some(period) if period > 0 => (1..=MAX_HEARTBEATS)
                .map(|k| head + ms(period.saturating_mul(k)))
                .take_while(|&t| t < first_event)
                .collect(),
            _ => Vec::new(),
        };

        Timeline {
            head,
            heartbeats,
            first_event,
            work,
            text,
            end,
        }
    }
}

fn nanos(n: u128) -> Duration {
    Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
}

// === Usage ===

/// The token counts one answer reports, with the script's defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Input tokens not read from or written to the cache (Anthropic's `input_tokens`).
    pub(crate) input: u32,
    pub(crate) cache_read: u32,
    pub(crate) cache_write: u32,
    pub(crate) cache_write_1h: u32,
    pub(crate) output: u32,
    pub(crate) reasoning: u32,
}

impl Usage {
    /// `body_bytes`: the request body's size, the input when the script does not pin it.
    pub(crate) fn resolve(script: &Script, timeline: &Timeline, body_bytes: usize) -> Usage {
        let spec = &script.usage;
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let text_deltas = timeline.text.as_ref().map_or(0, |t| count(t.at.len()));
        let work_deltas = timeline.work.as_ref().map_or(0, |w| count(w.at.len()));
        let output = spec
            .output_tokens
            .unwrap_or(text_deltas.saturating_add(work_deltas));
        let reasoning = spec.reasoning_tokens.unwrap_or(match &timeline.work {
            Some(w) if w.kind == WorkKind::Reasoning => work_deltas.min(output),
            _ => 0,
        });
        Usage {
            input: spec
                .input_tokens
                .unwrap_or_else(|| crate::tokens::of_body(body_bytes)),
            cache_read: spec.cache_read_tokens,
            cache_write: spec.cache_write_tokens,
            cache_write_1h: spec.cache_write_1h_tokens.min(spec.cache_write_tokens),
            output,
            reasoning,
        }
    }

    /// All input tokens, cached or not: OpenAI's `prompt_tokens` / `input_tokens`.
    pub(crate) fn input_total(&self) -> u32 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    pub(crate) fn total(&self) -> u32 {
        self.input_total().saturating_add(self.output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, ms, Class};

    /// A seed trace of the DESIGN as the gateway should measure it (ms from request arrival).
    struct Seed {
        name: &'static str,
        head: u64,
        first_event: u64,
        first_effective: u64,
        first_text: u64,
        terminal: u64,
        input_total: u64,
        cache_read: u64,
        output: u64,
    }

    const SEEDS: [Seed; 4] = [
        Seed {
            name: "sim-trace-a",
            head: 6100,
            first_event: 6300,
            first_effective: 6350,
            first_text: 6400,
            terminal: 9200,
            input_total: 1200,
            cache_read: 0,
            output: 118,
        },
        Seed {
            name: "sim-trace-b",
            head: 240,
            first_event: 310,
            first_effective: 2900,
            first_text: 8700,
            terminal: 10200,
            input_total: 800 + 512,
            cache_read: 512,
            output: 83,
        },
        Seed {
            name: "sim-trace-c",
            head: 260,
            first_event: 330,
            first_effective: 420,
            first_text: 430,
            terminal: 20430,
            input_total: 640,
            cache_read: 0,
            output: 196,
        },
        Seed {
            name: "sim-fast",
            head: 0,
            first_event: 0,
            first_effective: 0,
            first_text: 0,
            terminal: 0,
            // Pins no input: the 401-byte body played, a token per four bytes rounded up.
            input_total: 101,
            cache_read: 0,
            output: 16,
        },
    ];

    fn streamed(dialect: Dialect, script: &Script) -> (Schedule, Vec<testkit::Ev>) {
        let s = schedule(dialect, script, "m", (true, true), 0);
        let evs = testkit::events(&s);
        (s, evs)
    }

    fn custom(json: &str) -> Script {
        let script: Script = serde_json::from_str(json).unwrap();
        script.validate().unwrap();
        script
    }

    #[test]
    fn presets_hit_the_seed_trace_times_exactly_in_every_dialect() {
        for seed in &SEEDS {
            for dialect in Dialect::ALL {
                let at = format!("{} / {dialect}", seed.name);
                let s = schedule(
                    dialect,
                    &preset(seed.name).unwrap(),
                    seed.name,
                    (true, true),
                    401,
                );
                let evs = testkit::events(&s);
                let m = testkit::marks(dialect, &evs);
                assert_eq!(s.status, 200, "{at}");
                assert_eq!(s.content_type, "text/event-stream", "{at}");
                assert_eq!(s.finish, Finish::Eof, "{at}");
                assert_eq!(s.head_at, ms(seed.head), "head, {at}");
                // Gemini sends no envelope: its first event is its first output.
                let first_event = match dialect {
                    Dialect::Gemini => seed.first_effective,
                    Dialect::Chat | Dialect::Responses | Dialect::Messages => seed.first_event,
                };
                assert_eq!(m.first_event, Some(ms(first_event)), "first event, {at}");
                assert_eq!(
                    m.first_effective,
                    Some(ms(seed.first_effective)),
                    "first effective, {at}"
                );
                assert_eq!(m.first_text, Some(ms(seed.first_text)), "first text, {at}");
                assert_eq!(
                    m.terminal,
                    Some((ms(seed.terminal), Class::TerminalOk)),
                    "terminal, {at}"
                );
                assert_eq!(s.steps.last().unwrap().at, ms(seed.terminal), "{at}");

                let usage = testkit::usage(dialect, &evs).unwrap();
                assert_eq!(usage.output, seed.output, "output tokens, {at}");
                assert_eq!(usage.input_total, seed.input_total, "input tokens, {at}");
                assert_eq!(usage.cache_read, seed.cache_read, "cache read, {at}");
                // The event carrying the final counts comes at the terminal instant.
                let carrier = evs
                    .iter()
                    .rev()
                    .find(|e| match dialect {
                        Dialect::Chat => testkit::classify(dialect, e) == Class::Usage,
                        Dialect::Responses => e.event.as_deref() == Some("response.completed"),
                        Dialect::Messages => e.event.as_deref() == Some("message_delta"),
                        Dialect::Gemini => testkit::classify(dialect, e) == Class::TerminalOk,
                    })
                    .unwrap();
                assert_eq!(carrier.at, ms(seed.terminal), "usage event, {at}");
            }
        }
    }

    #[test]
    fn preset_names_all_resolve_and_unknown_names_do_not() {
        for name in PRESET_NAMES {
            assert!(preset(name).unwrap().validate().is_ok(), "{name}");
        }
        assert_eq!(preset("gpt-4o"), None);
        assert_eq!(preset("sim-fast"), Some(Script::default()));
    }

    #[test]
    fn trace_b_reasons_every_100_ms_until_its_text() {
        let (_, evs) = streamed(Dialect::Chat, &preset("sim-trace-b").unwrap());
        let reasoning: Vec<Duration> = evs
            .iter()
            .filter(|e| testkit::classify(Dialect::Chat, e) == Class::Effective)
            .map(|e| e.at)
            .collect();
        let expected: Vec<Duration> = (0..58).map(|i| ms(2900 + 100 * i)).collect();
        assert_eq!(reasoning, expected);
    }

    #[test]
    fn text_deltas_follow_the_pace_and_the_last_comes_before_the_terminal() {
        for (name, tokens, tokens_per_s, first_text, terminal) in [
            ("sim-trace-a", 118, 118.0 / 2.8, 6400, 9200),
            ("sim-trace-b", 83, 83.0 / 1.5, 8700, 10200),
            ("sim-trace-c", 196, 9.8, 430, 20430),
        ] {
            for dialect in Dialect::ALL {
                let (_, evs) = streamed(dialect, &preset(name).unwrap());
                let text: Vec<Duration> = evs
                    .iter()
                    .filter(|e| testkit::classify(dialect, e) == Class::Visible)
                    .map(|e| e.at)
                    .collect();
                assert_eq!(text.len(), tokens, "{name} / {dialect}");
                for (i, at) in text.iter().enumerate() {
                    let expected =
                        ms(first_text) + Duration::from_secs_f64(i as f64 / tokens_per_s);
                    let error = at.abs_diff(expected);
                    assert!(error < Duration::from_micros(1), "{name} delta {i}: {at:?}");
                }
                assert!(*text.last().unwrap() < ms(terminal), "{name} / {dialect}");
            }
        }
    }

    #[test]
    fn instants_never_go_backwards_and_never_precede_the_head() {
        let scripts = [
            preset("sim-trace-a").unwrap(),
            // Out of order on purpose: everything is clamped forward.
            custom(
                r#"{"headers_ms": 50, "first_event_ms": 10,
                    "first_effective": {"kind": "reasoning", "at_ms": 5},
                    "reasoning_deltas": 3, "first_text_ms": 1, "text_tokens": 4,
                    "tokens_per_s": 100}"#,
            ),
        ];
        for script in &scripts {
            for dialect in Dialect::ALL {
                let (s, evs) = streamed(dialect, script);
                assert!(s.steps.windows(2).all(|w| w[0].at <= w[1].at));
                assert!(s.steps.iter().all(|step| step.at >= s.head_at));
                let m = testkit::marks(dialect, &evs);
                assert!(m.first_event <= m.first_effective);
                assert!(m.first_effective <= m.first_text);
            }
        }
        let (s, evs) = streamed(Dialect::Chat, &scripts[1]);
        let m = testkit::marks(Dialect::Chat, &evs);
        assert_eq!(s.head_at, ms(50));
        assert_eq!(m.first_event, Some(ms(50)));
        assert_eq!(m.first_text, Some(ms(50)));
        assert_eq!(m.terminal.map(|t| t.0), Some(ms(90)));
    }

    #[test]
    fn chat_usage_chunk_is_sent_only_when_include_usage_is_set() {
        let script = preset("sim-trace-b").unwrap();
        let without = testkit::events(&schedule(Dialect::Chat, &script, "m", (true, false), 0));
        assert!(without
            .iter()
            .filter_map(|e| e.json.as_ref())
            .all(|j| j.get("usage").is_none() && !j["choices"].as_array().unwrap().is_empty()));
        assert_eq!(testkit::usage(Dialect::Chat, &without), None);

        let with = testkit::events(&schedule(Dialect::Chat, &script, "m", (true, true), 0));
        let (last, rest) = with.split_last().unwrap();
        assert_eq!(last.raw, "data: [DONE]\n\n");
        let (usage_chunk, chunks) = rest.split_last().unwrap();
        let usage = usage_chunk.json.as_ref().unwrap();
        assert_eq!(usage["choices"], serde_json::json!([]));
        assert_eq!(usage["usage"]["prompt_tokens"], 1312);
        assert_eq!(
            usage["usage"]["prompt_tokens_details"]["cached_tokens"],
            512
        );
        assert_eq!(usage["usage"]["completion_tokens"], 83);
        assert_eq!(usage["usage"]["total_tokens"], 1312 + 83);
        assert!(usage["usage"]["completion_tokens_details"]["reasoning_tokens"].is_u64());
        assert!(chunks
            .iter()
            .all(|e| e.json.as_ref().unwrap()["usage"].is_null()
                && e.json.as_ref().unwrap().get("usage").is_some()));
        // include_usage means nothing to the other dialects.
        for dialect in [Dialect::Responses, Dialect::Messages] {
            assert_eq!(
                schedule(dialect, &script, "m", (true, true), 0),
                schedule(dialect, &script, "m", (true, false), 0)
            );
        }
    }

    fn with_end(end: End) -> Script {
        Script {
            end,
            ..custom(
                r#"{"headers_ms": 10, "first_event_ms": 20, "first_text_ms": 30,
                    "text_tokens": 5, "tokens_per_s": 100, "status": 503}"#,
            )
        }
    }

    #[test]
    fn a_terminal_end_closes_normally_in_every_dialect() {
        for dialect in Dialect::ALL {
            let (s, evs) = streamed(dialect, &with_end(End::Terminal));
            let m = testkit::marks(dialect, &evs);
            assert_eq!(s.finish, Finish::Eof);
            assert_eq!(m.terminal, Some((ms(80), Class::TerminalOk)), "{dialect}");
            let last = &evs.last().unwrap().raw;
            match dialect {
                Dialect::Chat => assert_eq!(last, "data: [DONE]\n\n"),
                Dialect::Responses => assert!(last.starts_with("event: response.completed\n")),
                Dialect::Messages => {
                    assert_eq!(
                        last,
                        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
                    )
                }
                Dialect::Gemini => {
                    assert!(last.starts_with("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {"), "{last}");
                    assert!(last.ends_with("\"modelVersion\": \"m\",\"responseId\": \"laptimeSimGeminiResp01\"}\r\n\r\n"), "{last}");
                }
            }
        }
    }

    #[test]
    fn an_incomplete_end_reports_the_token_limit_in_each_dialects_words() {
        for dialect in Dialect::ALL {
            let (_, evs) = streamed(dialect, &with_end(End::Incomplete));
            let m = testkit::marks(dialect, &evs);
            let jsons: Vec<&serde_json::Value> =
                evs.iter().filter_map(|e| e.json.as_ref()).collect();
            match dialect {
                Dialect::Chat => {
                    assert_eq!(m.terminal, Some((ms(80), Class::TerminalIncomplete)));
                    assert!(jsons
                        .iter()
                        .any(|j| j["choices"][0]["finish_reason"] == "length"));
                }
                Dialect::Responses => {
                    assert_eq!(m.terminal, Some((ms(80), Class::TerminalIncomplete)));
                    let last = jsons.last().unwrap();
                    assert_eq!(last["response"]["status"], "incomplete");
                    assert_eq!(
                        last["response"]["incomplete_details"]["reason"],
                        "max_output_tokens"
                    );
                    assert_eq!(last["response"]["usage"]["output_tokens"], 5);
                }
                Dialect::Messages => {
                    assert_eq!(m.terminal, Some((ms(80), Class::TerminalOk)));
                    let delta = jsons.iter().find(|j| j["type"] == "message_delta").unwrap();
                    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
                }
                Dialect::Gemini => {
                    assert_eq!(m.terminal, Some((ms(80), Class::TerminalIncomplete)));
                    let last = jsons.last().unwrap();
                    assert_eq!(last["candidates"][0]["finishReason"], "MAX_TOKENS");
                    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 5);
                }
            }
        }
    }

    #[test]
    fn a_filtered_end_reports_the_content_filter_in_each_dialects_words() {
        for dialect in Dialect::ALL {
            let (_, evs) = streamed(dialect, &with_end(End::Filtered));
            let m = testkit::marks(dialect, &evs);
            let last = evs.last().unwrap().json.clone().unwrap_or_default();
            let (class, reason) = match dialect {
                Dialect::Chat => (
                    Class::TerminalIncomplete,
                    evs[evs.len() - 3].json.as_ref().unwrap()["choices"][0]["finish_reason"]
                        .clone(),
                ),
                Dialect::Responses => (
                    Class::TerminalIncomplete,
                    last["response"]["incomplete_details"]["reason"].clone(),
                ),
                Dialect::Messages => (
                    Class::TerminalOk,
                    evs[evs.len() - 2].json.as_ref().unwrap()["delta"]["stop_reason"].clone(),
                ),
                Dialect::Gemini => {
                    let rating = &last["candidates"][0]["safetyRatings"][0];
                    assert_eq!(rating["blocked"], true);
                    (
                        Class::TerminalIncomplete,
                        last["candidates"][0]["finishReason"].clone(),
                    )
                }
            };
            let expected = match dialect {
                Dialect::Chat | Dialect::Responses => "content_filter",
                Dialect::Messages => "refusal",
                Dialect::Gemini => "SAFETY",
            };
            assert_eq!(reason, expected, "{dialect}");
            assert_eq!(m.terminal, Some((ms(80), class)), "{dialect}");
        }
    }

    #[test]
    fn an_error_event_end_sends_each_dialects_in_band_error() {
        for dialect in Dialect::ALL {
            let (s, evs) = streamed(dialect, &with_end(End::ErrorEvent));
            let m = testkit::marks(dialect, &evs);
            assert_eq!(s.status, 200);
            assert_eq!(
                m.terminal,
                Some((ms(80), Class::TerminalError)),
                "{dialect}"
            );
            let tail: Vec<&str> = evs.iter().rev().take(2).map(|e| e.raw.as_str()).collect();
            match dialect {
                Dialect::Chat => {
                    assert_eq!(tail[0], "data: [DONE]\n\n");
                    let error = &evs[evs.len() - 2].json.as_ref().unwrap()["error"];
                    assert_eq!(error["type"], "server_error");
                    assert!(error.get("message").is_some() && error.get("code").is_some());
                }
                Dialect::Responses => {
                    assert!(tail[1].starts_with("event: error\n"));
                    assert!(tail[0].starts_with("event: response.failed\n"));
                    let error = &evs[evs.len() - 2].json.as_ref().unwrap()["error"];
                    assert_eq!(error["type"], "server_error");
                    assert!(error["param"].is_null());
                    let failed = &evs[evs.len() - 1].json.as_ref().unwrap()["response"];
                    assert_eq!(failed["status"], "failed");
                    assert_eq!(failed["error"]["code"], error["code"]);
                    assert!(failed["usage"].is_null());
                }
                Dialect::Messages => {
                    let error = evs.last().unwrap();
                    assert_eq!(error.event.as_deref(), Some("error"));
                    let j = error.json.as_ref().unwrap();
                    assert_eq!(j["type"], "error");
                    assert_eq!(j["error"]["type"], "api_error");
                }
                Dialect::Gemini => {
                    assert!(
                        tail[0].starts_with("data: {\"error\": {\"code\": 503,"),
                        "{}",
                        tail[0]
                    );
                    let j = evs.last().unwrap().json.as_ref().unwrap();
                    assert_eq!(j["error"]["status"], "UNAVAILABLE");
                    assert!(j["error"]["message"].is_string());
                }
            }
        }
    }

    #[test]
    fn close_reset_and_stall_stop_right_after_the_last_delta() {
        for (end, finish) in [
            (End::Close, Finish::Eof),
            (End::Reset, Finish::Reset),
            (End::Stall, Finish::Stall),
        ] {
            for dialect in Dialect::ALL {
                let (s, evs) = streamed(dialect, &with_end(end));
                let m = testkit::marks(dialect, &evs);
                assert_eq!(s.finish, finish, "{end:?} / {dialect}");
                assert_eq!(m.terminal, None, "{end:?} / {dialect}");
                let last = evs.last().unwrap();
                assert_eq!(testkit::classify(dialect, last), Class::Visible);
                assert_eq!(last.at, ms(70), "the 5th token at 30 + 4 × 10 ms");
                // No final counts: only Anthropic's message_start (input side) and Gemini's
                // running counts were sent.
                match dialect {
                    Dialect::Chat | Dialect::Responses => {
                        assert_eq!(testkit::usage(dialect, &evs), None);
                    }
                    Dialect::Gemini => {
                        assert_eq!(testkit::usage(dialect, &evs).unwrap().output, 5);
                        assert!(evs.iter().all(|e| !e.raw.contains("finishReason")));
                    }
                    Dialect::Messages => {}
                }
            }
        }
    }

    #[test]
    fn a_status_end_answers_the_status_with_an_error_body_at_the_head() {
        for stream in [true, false] {
            for dialect in Dialect::ALL {
                let s = schedule(dialect, &with_end(End::Status), "m", (stream, true), 0);
                assert_eq!(s.status, 503);
                assert_eq!(s.content_type, "application/json");
                assert_eq!(s.head_at, ms(10));
                assert_eq!(s.finish, Finish::Eof);
                assert_eq!(s.steps.len(), 1);
                assert_eq!(s.steps[0].at, ms(10));
                let body: serde_json::Value = serde_json::from_slice(&s.steps[0].bytes).unwrap();
                match dialect {
                    Dialect::Messages => {
                        assert_eq!(body["type"], "error");
                        assert_eq!(body["error"]["type"], "api_error");
                        assert!(body["error"]["message"].is_string());
                    }
                    Dialect::Gemini => {
                        let e = &body["error"];
                        assert_eq!(
                            (&e["code"], &e["status"]),
                            (&503.into(), &"UNAVAILABLE".into())
                        );
                        assert!(e["message"].is_string());
                        let text = std::str::from_utf8(&s.steps[0].bytes).unwrap();
                        assert!(
                            text.starts_with("{\n  \"error\": {\n    \"code\": 503,"),
                            "{text}"
                        );
                    }
                    Dialect::Chat | Dialect::Responses => {
                        let e = &body["error"];
                        assert_eq!(e["type"], "server_error");
                        assert!(e["message"].is_string() && e["param"].is_null());
                        assert!(e.get("code").is_some());
                    }
                }
            }
        }
    }

    #[test]
    fn non_streamed_answers_come_whole_at_the_instant_the_stream_would_end() {
        let script = preset("sim-trace-b").unwrap();
        for dialect in Dialect::ALL {
            let s = schedule(dialect, &script, "sim-trace-b", (false, false), 0);
            assert_eq!(s.status, 200);
            assert_eq!(s.content_type, "application/json");
            assert_eq!(s.head_at, ms(10200));
            assert_eq!(s.steps.len(), 1);
            assert_eq!(s.steps[0].at, ms(10200));
            let body: serde_json::Value = serde_json::from_slice(&s.steps[0].bytes).unwrap();
            let usage = match dialect {
                Dialect::Chat => {
                    assert_eq!(body["object"], "chat.completion");
                    let message = &body["choices"][0]["message"];
                    assert_eq!(message["role"], "assistant");
                    assert!(message["content"]
                        .as_str()
                        .unwrap()
                        .starts_with("Sure, here is"));
                    assert_eq!(body["choices"][0]["finish_reason"], "stop");
                    testkit::chat_usage(&body["usage"])
                }
                Dialect::Responses => {
                    assert_eq!(body["object"], "response");
                    assert_eq!(body["status"], "completed");
                    let output = body["output"].as_array().unwrap();
                    assert_eq!(output[0]["type"], "reasoning");
                    assert_eq!(output[1]["type"], "message");
                    testkit::responses_usage(&body["usage"])
                }
                Dialect::Messages => {
                    assert_eq!(body["type"], "message");
                    assert_eq!(body["stop_reason"], "end_turn");
                    assert_eq!(body["content"][0]["type"], "thinking");
                    assert_eq!(body["content"][1]["type"], "text");
                    testkit::messages_usage(&body["usage"])
                }
                Dialect::Gemini => {
                    let candidate = &body["candidates"][0];
                    assert_eq!(candidate["finishReason"], "STOP");
                    let parts = &candidate["content"]["parts"];
                    assert_eq!(parts[0]["thought"], true);
                    assert!(parts[1]["text"]
                        .as_str()
                        .unwrap()
                        .starts_with("Sure, here is"));
                    assert_eq!(body["usageMetadata"]["thoughtsTokenCount"], 58);
                    assert_eq!(body["usageMetadata"]["candidatesTokenCount"], 25);
                    testkit::gemini_usage(&body["usageMetadata"])
                }
            };
            assert_eq!(usage.input_total, 1312, "{dialect}");
            assert_eq!(usage.cache_read, 512, "{dialect}");
            assert_eq!(usage.output, 83, "{dialect}");
        }
    }

    #[test]
    fn non_streamed_cut_answers_send_half_a_body_then_end_as_scripted() {
        for (end, finish) in [
            (End::Close, Finish::Eof),
            (End::Reset, Finish::Reset),
            (End::Stall, Finish::Stall),
        ] {
            for dialect in Dialect::ALL {
                let s = schedule(dialect, &with_end(end), "m", (false, false), 0);
                let whole = schedule(dialect, &with_end(End::Terminal), "m", (false, false), 0);
                assert_eq!((s.status, s.finish, s.head_at), (200, finish, ms(80)));
                assert_eq!(s.steps[0].bytes.len(), whole.steps[0].bytes.len() / 2);
                assert!(serde_json::from_slice::<serde_json::Value>(&s.steps[0].bytes).is_err());
            }
        }
    }

    #[test]
    fn a_non_streamed_error_event_answers_the_scripted_status_at_the_end() {
        for dialect in Dialect::ALL {
            let s = schedule(dialect, &with_end(End::ErrorEvent), "m", (false, false), 0);
            assert_eq!((s.status, s.head_at), (503, ms(80)));
            let body: serde_json::Value = serde_json::from_slice(&s.steps[0].bytes).unwrap();
            assert!(body["error"]["message"].is_string(), "{dialect}");
        }
    }

    #[test]
    fn heartbeats_fill_the_wait_between_head_and_first_event() {
        let script = custom(r#"{"headers_ms": 100, "first_event_ms": 1000, "heartbeat_ms": 250}"#);
        for dialect in Dialect::ALL {
            let (_, evs) = streamed(dialect, &script);
            if dialect == Dialect::Gemini {
                // Google sends no keep-alive of any kind: the wait is silent.
                assert_eq!(evs[0].at, ms(1000));
                assert!(evs.iter().all(|e| !e.comment));
                continue;
            }
            let beats: Vec<&testkit::Ev> = evs
                .iter()
                .take_while(|e| testkit::classify(dialect, e) == Class::Heartbeat)
                .collect();
            let times: Vec<Duration> = beats.iter().map(|e| e.at).collect();
            assert_eq!(times, vec![ms(350), ms(600), ms(850)], "{dialect}");
            let first = &beats[0].raw;
            match dialect {
                Dialect::Chat => assert_eq!(first, ": keep-alive\n\n"),
                Dialect::Responses => assert_eq!(
                    first,
                    "event: keepalive\ndata: {\"type\":\"keepalive\",\"sequence_number\":0}\n\n"
                ),
                Dialect::Messages => {
                    assert_eq!(first, "event: ping\ndata: {\"type\": \"ping\"}\n\n")
                }
                Dialect::Gemini => unreachable!("Gemini sends no heartbeats"),
            }
            assert_eq!(testkit::marks(dialect, &evs).first_event, Some(ms(1000)));
        }
    }

    #[test]
    fn tool_args_without_text_are_paced_and_end_as_a_tool_call() {
        let script = custom(
            r#"{"first_event_ms": 5, "first_effective": {"kind": "tool_args", "at_ms": 10},
                "reasoning_deltas": 4, "first_text_ms": null, "tokens_per_s": 200}"#,
        );
        for dialect in Dialect::ALL {
            let (_, evs) = streamed(dialect, &script);
            let m = testkit::marks(dialect, &evs);
            let args: Vec<Duration> = evs
                .iter()
                .filter(|e| testkit::classify(dialect, e) == Class::Effective)
                .map(|e| e.at)
                .collect();
            // Gemini sends the whole call once it is complete: at the last fragment's instant.
            let expected = match dialect {
                Dialect::Gemini => vec![ms(25)],
                Dialect::Chat | Dialect::Responses | Dialect::Messages => {
                    vec![ms(10), ms(15), ms(20), ms(25)]
                }
            };
            assert_eq!(args, expected, "{dialect}");
            assert_eq!(m.first_text, None);
            assert_eq!(m.terminal, Some((ms(30), Class::TerminalOk)));
            assert_eq!(testkit::usage(dialect, &evs).unwrap().output, 4);
            let stop = evs
                .iter()
                .filter_map(|e| e.json.as_ref())
                .find_map(|j| match dialect {
                    Dialect::Chat => j["choices"][0]["finish_reason"].as_str().map(str::to_owned),
                    Dialect::Messages => j["delta"]["stop_reason"].as_str().map(str::to_owned),
                    Dialect::Responses => (j["type"] == "response.completed").then(|| {
                        j["response"]["output"][0]["type"]
                            .as_str()
                            .unwrap()
                            .to_owned()
                    }),
                    Dialect::Gemini => j["candidates"][0]["content"]["parts"][0]["functionCall"]
                        ["name"]
                        .as_str()
                        .map(str::to_owned),
                });
            let expected = match dialect {
                Dialect::Chat => "tool_calls",
                Dialect::Responses => "function_call",
                Dialect::Messages => "tool_use",
                Dialect::Gemini => "get_weather",
            };
            assert_eq!(stop.as_deref(), Some(expected), "{dialect}");
        }
    }

    #[test]
    fn a_text_first_effective_is_the_first_text() {
        let script =
            custom(r#"{"first_effective": {"kind": "text", "at_ms": 40}, "first_text_ms": null}"#);
        let (_, evs) = streamed(Dialect::Messages, &script);
        let m = testkit::marks(Dialect::Messages, &evs);
        assert_eq!(
            (m.first_effective, m.first_text),
            (Some(ms(40)), Some(ms(40)))
        );
    }

    #[test]
    fn usage_defaults_count_the_deltas_actually_sent() {
        let script = custom(
            r#"{"first_effective": {"kind": "reasoning", "at_ms": 0}, "reasoning_deltas": 7,
                "text_tokens": 5, "usage": {"input_tokens": 3, "cache_write_tokens": 2}}"#,
        );
        let (_, evs) = streamed(Dialect::Chat, &script);
        let u = testkit::usage(Dialect::Chat, &evs).unwrap();
        assert_eq!(
            (u.input_total, u.cache_write, u.output, u.reasoning),
            (5, 2, 12, 7)
        );
        let (_, evs) = streamed(Dialect::Messages, &script);
        let u = testkit::usage(Dialect::Messages, &evs).unwrap();
        assert_eq!((u.input_total, u.cache_write, u.output), (5, 2, 12));
    }

    #[test]
    fn script_fields_default_to_sim_fast_and_unknown_fields_are_rejected() {
        assert_eq!(
            serde_json::from_str::<Script>("{}").unwrap(),
            Script::default()
        );
        let s: Script =
            serde_json::from_str(r#"{"end": "error_event", "first_text_ms": null}"#).unwrap();
        assert_eq!(
            (s.end, s.first_text_ms, s.text_tokens),
            (End::ErrorEvent, None, 16)
        );
        let e = serde_json::from_str::<Script>(r#"{"header_ms": 1}"#).unwrap_err();
        assert!(e.to_string().contains("header_ms"), "{e}");
        assert!(serde_json::from_str::<Script>(r#"{"usage": {"input": 1}}"#).is_err());
        assert!(serde_json::from_str::<Script>(r#"{"end": "explode"}"#).is_err());
    }

    #[test]
    fn an_infinite_pace_is_written_and_read_as_null() {
        let fast = serde_json::to_value(Script::default()).unwrap();
        assert!(fast["tokens_per_s"].is_null());
        let back: Script = serde_json::from_value(fast).unwrap();
        assert!(back.tokens_per_s.is_infinite());
        let c = preset("sim-trace-c").unwrap();
        let back: Script = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn a_scripted_text_is_cut_into_at_most_text_tokens_non_empty_deltas() {
        for (json, expected) in [
            (
                r#"{"text": "héllo wörld", "text_tokens": 4}"#,
                vec!["hé", "llo", " wö", "rld"],
            ),
            (r#"{"text": "ab", "text_tokens": 5}"#, vec!["a", "b"]),
            (r#"{"text": "", "text_tokens": 3}"#, vec![]),
        ] {
            let script = custom(json);
            for dialect in Dialect::ALL {
                let (_, evs) = streamed(dialect, &script);
                let deltas: Vec<String> = evs
                    .iter()
                    .filter(|e| testkit::classify(dialect, e) == Class::Visible)
                    .map(|e| {
                        let j = e.json.as_ref().unwrap();
                        match dialect {
                            Dialect::Chat => &j["choices"][0]["delta"]["content"],
                            Dialect::Responses => &j["delta"],
                            Dialect::Messages => &j["delta"]["text"],
                            Dialect::Gemini => &j["candidates"][0]["content"]["parts"][0]["text"],
                        }
                        .as_str()
                        .unwrap()
                        .to_owned()
                    })
                    .collect();
                assert_eq!(deltas, expected, "{json} / {dialect}");
                let usage = testkit::usage(dialect, &evs).unwrap();
                assert_eq!(usage.output, expected.len() as u64, "{json} / {dialect}");
            }
        }
    }

    #[test]
    fn parallel_tool_calls_split_the_argument_deltas_and_get_one_each_at_least() {
        let script = custom(
            r#"{"first_effective": {"kind": "tool_args", "at_ms": 0}, "reasoning_deltas": 1,
                "tool_calls": 3, "first_text_ms": null}"#,
        );
        for dialect in Dialect::ALL {
            let (_, evs) = streamed(dialect, &script);
            let args = evs
                .iter()
                .filter(|e| testkit::classify(dialect, e) == Class::Effective)
                .count();
            assert_eq!(args, 3, "one argument delta per call, {dialect}");
            assert_eq!(testkit::usage(dialect, &evs).unwrap().output, 3);
        }
        let whole = schedule(Dialect::Chat, &script, "m", (false, false), 0);
        let body: serde_json::Value = serde_json::from_slice(&whole.steps[0].bytes).unwrap();
        let names: Vec<&str> = body["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["get_weather", "get_time", "get_weather"]);
    }

    #[test]
    fn a_retry_after_rides_on_the_head_of_the_schedule() {
        let s = schedule(
            Dialect::Messages,
            &preset("sim-rate-limited").unwrap(),
            "m",
            (true, false),
            0,
        );
        assert_eq!((s.status, s.retry_after_s), (429, Some(1)));
        let fast = schedule(Dialect::Messages, &Script::default(), "m", (true, false), 0);
        assert_eq!(fast.retry_after_s, None);
    }

    /// The visible text deltas of a stream, with their instants.
    fn visible(dialect: Dialect, evs: &[testkit::Ev]) -> Vec<(Duration, String)> {
        evs.iter()
            .filter(|e| testkit::classify(dialect, e) == Class::Visible)
            .map(|e| {
                let j = e.json.as_ref().unwrap();
                let text = match dialect {
                    Dialect::Chat => &j["choices"][0]["delta"]["content"],
                    Dialect::Responses => &j["delta"],
                    Dialect::Messages => &j["delta"]["text"],
                    Dialect::Gemini => &j["candidates"][0]["content"]["parts"][0]["text"],
                };
                (e.at, text.as_str().unwrap().to_owned())
            })
            .collect()
    }

    fn prefilled(dialect: Dialect, script: &Script, prefill: &str) -> Vec<testkit::Ev> {
        testkit::events(&schedule_with_prefill(
            dialect,
            script,
            "m",
            (true, true),
            Some(prefill),
            0,
        ))
    }

    #[test]
    fn cut_after_sends_the_first_deltas_at_their_instants_then_the_scripted_end() {
        for (end, finish) in [
            (End::Close, Finish::Eof),
            (End::Reset, Finish::Reset),
            (End::Stall, Finish::Stall),
        ] {
            let whole = preset("sim-long").unwrap();
            let cut = custom(&format!(
                r#"{{"first_text_ms": 20, "text_tokens": 60, "tokens_per_s": 200,
                    "cut_after": 7, "end": "{}"}}"#,
                serde_json::to_value(end).unwrap().as_str().unwrap()
            ));
            for dialect in Dialect::ALL {
                let at = format!("{end:?} / {dialect}");
                let (_, all) = streamed(dialect, &whole);
                let (s, evs) = streamed(dialect, &cut);
                let expected: Vec<_> = visible(dialect, &all).into_iter().take(7).collect();
                assert_eq!(visible(dialect, &evs), expected, "{at}");
                assert_eq!(s.finish, finish, "{at}");
                let m = testkit::marks(dialect, &evs);
                assert_eq!(m.terminal, None, "no terminal, {at}");
                // The cut comes right after the 7th delta (at 20 + 6 × 5 ms): nothing follows.
                let last = evs.last().unwrap();
                assert_eq!(testkit::classify(dialect, last), Class::Visible, "{at}");
                assert_eq!(last.at, ms(50), "{at}");
            }
        }
    }

    #[test]
    fn cut_after_zero_sends_only_the_envelope_and_more_than_the_answer_sends_it_all() {
        let none = custom(r#"{"text_tokens": 5, "cut_after": 0, "end": "close"}"#);
        let (_, evs) = streamed(Dialect::Messages, &none);
        assert!(visible(Dialect::Messages, &evs).is_empty());
        assert_eq!(testkit::marks(Dialect::Messages, &evs).terminal, None);
        let all = custom(r#"{"text_tokens": 5, "cut_after": 9, "end": "close"}"#);
        let (_, evs) = streamed(Dialect::Chat, &all);
        assert_eq!(visible(Dialect::Chat, &evs).len(), 5);
    }

    #[test]
    fn a_cut_after_with_a_terminal_end_is_rejected() {
        let terminal: Script = serde_json::from_str(r#"{"cut_after": 3}"#).unwrap();
        let e = terminal.validate().unwrap_err();
        assert!(e.contains("cut_after"), "{e}");
        for end in ["close", "reset", "stall", "error_event", "incomplete"] {
            let json = format!(r#"{{"cut_after": 3, "end": "{end}"}}"#);
            let script: Script = serde_json::from_str(&json).unwrap();
            assert!(script.validate().is_ok(), "{json}");
        }
    }

    #[test]
    fn a_non_streamed_cut_answer_is_half_the_body_of_its_first_deltas() {
        let cut = custom(r#"{"text_tokens": 20, "cut_after": 4, "end": "close"}"#);
        let four = custom(r#"{"text_tokens": 4}"#);
        for dialect in Dialect::ALL {
            let s = schedule(dialect, &cut, "m", (false, false), 0);
            let whole = schedule(dialect, &four, "m", (false, false), 0);
            assert_eq!(s.finish, Finish::Eof);
            assert_eq!(s.steps[0].bytes.len(), whole.steps[0].bytes.len() / 2);
            assert_eq!(
                s.steps[0].bytes,
                whole.steps[0].bytes.slice(..whole.steps[0].bytes.len() / 2),
                "{dialect}"
            );
        }
    }

    #[test]
    fn a_prefill_is_continued_with_exactly_the_rest_of_the_canonical_text() {
        let script = preset("sim-long").unwrap();
        let canonical = canonical_text(&script);
        let full = Deltas::of(&script);
        // At a delta's end ("Sure, here"), inside one ("Sure, he"), none, and all of it.
        for (prefill, remaining) in [
            (format!("{}{}{}", full.get(0), full.get(1), full.get(2)), 57),
            // "Sure" and "," whole, then the rest of " here".
            ("Sure, he".to_owned(), 58),
            (String::new(), 60),
            (canonical.clone(), 0),
        ] {
            for dialect in Dialect::ALL {
                let at = format!("{prefill:?} / {dialect}");
                let evs = prefilled(dialect, &script, &prefill);
                let deltas = visible(dialect, &evs);
                assert_eq!(deltas.len(), remaining, "{at}");
                let reply: String = deltas.iter().map(|(_, t)| t.as_str()).collect();
                assert_eq!(format!("{prefill}{reply}"), canonical, "{at}");
                // The usual pacing from first_text_ms, the usual terminal and usage.
                for (i, (t, _)) in deltas.iter().enumerate() {
                    assert_eq!(*t, ms(20) + Duration::from_millis(5 * i as u64), "{at}");
                }
                let m = testkit::marks(dialect, &evs);
                let end = ms(20 + 5 * remaining as u64);
                assert_eq!(m.terminal, Some((end, Class::TerminalOk)), "{at}");
                assert_eq!(
                    testkit::usage(dialect, &evs).unwrap().output,
                    remaining as u64,
                    "{at}"
                );
            }
        }
        let evs = prefilled(Dialect::Chat, &script, "Sure, he");
        assert_eq!(visible(Dialect::Chat, &evs)[0].1, "re");
        assert_eq!(visible(Dialect::Chat, &evs)[1].1, " is");
    }

    #[test]
    fn a_continuation_has_no_reasoning_and_counts_only_its_own_tokens() {
        // Trace C reasons first and scripts its output count for the whole answer.
        let script = preset("sim-trace-c").unwrap();
        let canonical = canonical_text(&script);
        let prefill: String = canonical.chars().take(100).collect();
        for dialect in Dialect::ALL {
            let evs = prefilled(dialect, &script, &prefill);
            let m = testkit::marks(dialect, &evs);
            assert_eq!(m.first_effective, m.first_text, "{dialect}");
            assert_eq!(m.first_text, Some(ms(430)), "{dialect}");
            let deltas = visible(dialect, &evs);
            let reply: String = deltas.iter().map(|(_, t)| t.as_str()).collect();
            assert_eq!(format!("{prefill}{reply}"), canonical, "{dialect}");
            let usage = testkit::usage(dialect, &evs).unwrap();
            assert_eq!(usage.output, deltas.len() as u64, "{dialect}");
            assert_eq!(usage.reasoning, 0, "{dialect}");
        }
    }

    #[test]
    fn a_scripted_text_is_continued_along_its_own_pieces() {
        let script = custom(r#"{"text": "héllo wörld", "text_tokens": 4}"#);
        assert_eq!(canonical_text(&script), "héllo wörld");
        let evs = prefilled(Dialect::Messages, &script, "hél");
        let reply: Vec<String> = visible(Dialect::Messages, &evs)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(reply, ["lo", " wö", "rld"]);
    }

    #[test]
    fn cut_after_counts_the_deltas_of_a_continuation() {
        let script = preset("sim-cut-after-40").unwrap();
        let canonical = canonical_text(&script);
        let prefill: String = Deltas::of(&script)
            .bounds
            .get(30)
            .map_or_else(String::new, |&b| canonical[..b].to_owned());
        for dialect in Dialect::ALL {
            let s = schedule_with_prefill(dialect, &script, "m", (true, true), Some(&prefill), 0);
            let evs = testkit::events(&s);
            let deltas = visible(dialect, &evs);
            // 30 of the 60 are in the prefill; the continuation's 30 are all under the cut.
            assert_eq!(deltas.len(), 30, "{dialect}");
            assert_eq!(testkit::marks(dialect, &evs).terminal, None, "{dialect}");
            let short: String = canonical.chars().take(10).collect();
            let s = schedule_with_prefill(dialect, &script, "m", (true, true), Some(&short), 0);
            let deltas = visible(dialect, &testkit::events(&s));
            assert_eq!(deltas.len(), 40, "{dialect}");
            let reply: String = deltas.iter().map(|(_, t)| t.as_str()).collect();
            assert!(
                canonical.starts_with(&format!("{short}{reply}")),
                "{dialect}"
            );
        }
    }

    #[test]
    fn a_prefill_that_is_not_the_answers_start_gets_the_whole_answer() {
        let script = preset("sim-long").unwrap();
        for dialect in Dialect::ALL {
            let ignored =
                schedule_with_prefill(dialect, &script, "m", (true, true), Some("Nope"), 0);
            assert_eq!(
                ignored,
                schedule(dialect, &script, "m", (true, true), 0),
                "{dialect}"
            );
        }
        // Nor does a prefill change an answer without text.
        let tool = preset("sim-tool-call").unwrap();
        let s = schedule_with_prefill(Dialect::Messages, &tool, "m", (true, false), Some(""), 0);
        assert_eq!(s, schedule(Dialect::Messages, &tool, "m", (true, false), 0));
    }

    #[test]
    fn a_refused_prefill_is_a_400_in_each_providers_shape_and_no_prefill_is_answered() {
        let script = preset("sim-prefill-refused").unwrap();
        let message = "This model does not support assistant message prefill. The conversation \
                       must end with a user message.";
        for dialect in Dialect::ALL {
            for stream in [true, false] {
                let s =
                    schedule_with_prefill(dialect, &script, "m", (stream, false), Some("Sure"), 0);
                assert_eq!((s.status, s.content_type, s.head_at), (400, JSON, ms(5)));
                let body: serde_json::Value = serde_json::from_slice(&s.steps[0].bytes).unwrap();
                match dialect {
                    Dialect::Messages => {
                        assert_eq!(body["type"], "error");
                        assert_eq!(body["error"]["type"], "invalid_request_error");
                        assert_eq!(body["error"]["message"], message);
                    }
                    Dialect::Chat | Dialect::Responses => {
                        assert_eq!(body["error"]["type"], "invalid_request_error");
                        assert_eq!(body["error"]["message"], message);
                        assert!(
                            body["error"]["code"].is_null() && body["error"]["param"].is_null()
                        );
                    }
                    Dialect::Gemini => {
                        assert_eq!(body["error"]["code"], 400);
                        assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
                        assert_eq!(body["error"]["message"], message);
                    }
                }
            }
            let answered = schedule_with_prefill(dialect, &script, "m", (true, true), None, 0);
            assert_eq!(answered, schedule(dialect, &script, "m", (true, true), 0));
            assert_eq!(answered.status, 200);
        }
    }

    #[test]
    fn the_continuation_presets_share_one_canonical_text() {
        let long = canonical_text(&preset("sim-long").unwrap());
        assert_eq!(long, wire::full_text(60));
        for name in [
            "sim-cut-after-40",
            "sim-stall-after-20",
            "sim-prefill-refused",
        ] {
            assert_eq!(canonical_text(&preset(name).unwrap()), long, "{name}");
        }
        let (s, evs) = streamed(Dialect::Chat, &preset("sim-stall-after-20").unwrap());
        assert_eq!(
            (s.finish, visible(Dialect::Chat, &evs).len()),
            (Finish::Stall, 20)
        );
        assert_eq!(canonical_text(&preset("sim-tool-call").unwrap()), "");
        assert_eq!(canonical_text(&custom(r#"{"text_tokens": 0}"#)), "");
    }

    #[test]
    fn validate_rejects_scripts_that_cannot_be_played() {
        let bad = [
            r#"{"tool_calls": 0}"#,
            r#"{"tool_calls": 129}"#,
            r#"{"echo": true, "text": "both"}"#,
            r#"{"tokens_per_s": 0}"#,
            r#"{"tokens_per_s": -3}"#,
            r#"{"status": 42}"#,
            r#"{"heartbeat_ms": 0}"#,
            r#"{"text_tokens": 2000000}"#,
            r#"{"first_event_ms": 100000000, "heartbeat_ms": 1}"#,
            r#"{"cut_after": 1}"#,
        ];
        for json in bad {
            let script: Script = serde_json::from_str(json).unwrap();
            assert!(script.validate().is_err(), "{json}");
        }
    }
}
