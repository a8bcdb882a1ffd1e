//! Per-dialect classification of one upstream SSE event, and of one non-streamed body.
//!
//! The tables are those of `streaming-protocols.md` §1.5 (Chat), §2.1 (Responses) and §3.1
//! (Messages), and of `docs/reference/gemini.md` §3 (Gemini). An event is effective only when its delta string is non-empty. JSON is parsed only
//! for the fields a class or the usage needs (borrowed, so a typical event allocates nothing).
//!
//! Most events of a stream are text deltas that carry no usage, finish reason or error. The
//! byte path ([`read_event_quick`]) reads those in one validating pass without serde and
//! classifies them exactly as the full parse does; it leaves every event it cannot decide that
//! way to the full parse ([`classify_event`]).

mod bytes;
pub(crate) use bytes::unquote;
mod chat;
mod repeat;
pub(crate) use repeat::Repeats;
mod gemini;
mod messages;
mod quick_usage;
mod refusal;
mod responses;

pub use refusal::error_status_class;

use crate::usage::UsageReport;
use crate::Dialect;

/// What kind of model output an effective event carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectiveKind {
    /// Visible answer text: the only kind that sets `first_visible`.
    Text,
    /// Reasoning, thinking or a reasoning summary (including opaque `redacted_thinking`).
    Reasoning,
    Refusal,
    /// Function/tool-call arguments (`tool_calls[].function.arguments`, `input_json_delta`, …).
    ToolArgs,
    /// Custom tool input (`response.custom_tool_call_input.delta`).
    ToolInput,
    /// Any other generated output: audio, images, code, unknown `*.delta` types.
    Other,
}

impl EffectiveKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EffectiveKind::Text => "text",
            EffectiveKind::Reasoning => "reasoning",
            EffectiveKind::Refusal => "refusal",
            EffectiveKind::ToolArgs => "tool_args",
            EffectiveKind::ToolInput => "tool_input",
            EffectiveKind::Other => "other",
        }
    }
}

/// The class of one event. Usage and stop hints ride beside it in [`Classification`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventClass {
    /// Keep-alive with no meaning (`ping`, `keepalive`). SSE comments never reach the classifier.
    Heartbeat,
    /// Lifecycle or metadata: the model produced nothing new.
    Envelope,
    /// New model output with a non-empty delta.
    Effective(EffectiveKind),
    /// Protocol-level end: completed.
    TerminalOk,
    /// Protocol-level end: incomplete (length, content filter, max tokens).
    TerminalIncomplete,
    /// Protocol-level end: an error (in-stream error event, `response.failed`).
    TerminalError,
}

impl EventClass {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            EventClass::TerminalOk | EventClass::TerminalIncomplete | EventClass::TerminalError
        )
    }
}

/// A finish hint carried by a non-terminal event (Chat `finish_reason`, Anthropic `stop_reason`):
/// the stream's later terminal is then an incomplete end rather than a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopHint {
    /// A normal stop (`stop`, `end_turn`, `tool_calls`, `tool_use`, …).
    Complete,
    /// Cut short: `length`, `max_tokens`, `model_context_window_exceeded`.
    Length,
    /// `content_filter`.
    ContentFilter,
    /// Anthropic `refusal` stop reason.
    Refusal,
}

/// Everything the observer needs from one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub class: EventClass,
    /// Token fields this event carried (Chat usage on any chunk, Responses terminal `response.usage`,
    /// Anthropic `message_start` / `message_delta`).
    pub usage: Option<UsageReport>,
    pub stop: Option<StopHint>,
    /// This is the frame the in-band timing comment is written around: before Chat `[DONE]`,
    /// Responses `response.completed|incomplete|failed`, Anthropic `message_stop` or `error`;
    /// after Gemini's last event (the one with the `finishReason`, a block or an error), since
    /// Gemini has no terminal frame of its own.
    pub terminal_frame: bool,
    /// Effective output carried by a terminal event (Gemini's last text often rides on the
    /// event with the `finishReason`). `None` for every other class: their output is the class.
    pub output: Option<EffectiveKind>,
}

impl Classification {
    pub fn of(class: EventClass) -> Self {
        Classification {
            class,
            usage: None,
            stop: None,
            terminal_frame: false,
            output: None,
        }
    }

    /// The effective output this event carried, whatever its class.
    pub fn effective(&self) -> Option<EffectiveKind> {
        match self.class {
            EventClass::Effective(kind) => Some(kind),
            _ => self.output,
        }
    }
}

/// Classifies one dispatched SSE event. `event` is the SSE `event:` field, if any; `data` the
/// joined `data:` lines. Unparseable data is an envelope (it is still counted as an event).
pub fn classify_event(dialect: Dialect, event: Option<&str>, data: &str) -> Classification {
    match dialect {
        Dialect::Chat => chat::classify(data),
        Dialect::Responses => responses::classify(event, data),
        Dialect::Messages => messages::classify(event, data),
        Dialect::Gemini => gemini::classify(data),
    }
}

/// The output strings of a Chat event as the byte path read them (for the output estimate):
/// each string's raw JSON text, quotes included, and whether it holds an escape.
pub(crate) type Texts<'a> = crate::wire::Few<(&'a str, bool)>;

/// One event as the byte path read it.
#[derive(Debug)]
pub struct QuickRead<'a> {
    pub classification: Classification,
    texts: Texts<'a>,
}

impl QuickRead<'_> {
    /// The event's output strings, in the order the estimate counts them (Chat only).
    pub(crate) fn texts(&self) -> &Texts<'_> {
        &self.texts
    }
}

/// Classifies one event with the byte path: the same [`Classification`] as [`classify_event`],
/// or `None` when the event is one the full parse must decide (usage of an odd shape, errors,
/// finish reasons with escapes, content parts, invalid or unusual JSON, …). An event it
/// decides is valid JSON.
pub fn read_event_quick<'a>(
    dialect: Dialect,
    event: Option<&'a str>,
    data: &'a str,
) -> Option<QuickRead<'a>> {
    let (classification, texts) = match dialect {
        Dialect::Chat => chat::quick(data)?,
        Dialect::Responses => (responses::quick(event, data)?, Texts::default()),
        Dialect::Messages => (messages::quick(event, data)?, Texts::default()),
        Dialect::Gemini => (gemini::quick(data)?, Texts::default()),
    };
    Some(QuickRead {
        classification,
        texts,
    })
}

/// What a non-streamed (JSON) body says: usage, how it stopped, and whether it is an error body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BodySummary {
    pub usage: UsageReport,
    pub stop: Option<StopHint>,
    /// The body is an error object (`{"error":…}` or Anthropic `{"type":"error",…}`), a
    /// Responses object with `status: "failed"`, or a Gemini answer whose tool call failed
    /// (`MALFORMED_FUNCTION_CALL` and kin).
    pub error: bool,
    /// The body holds non-empty visible text (for text-delta counts of non-streamed answers).
    pub has_text: bool,
    /// The body parsed as the dialect's answer or error, so it is valid JSON (`false` says
    /// nothing: it may be JSON of another shape).
    pub json: bool,
}

/// Summarises a whole non-streamed body with the byte path: the same [`BodySummary`] as
/// [`classify_body`], or `None` when the body is one the full parse must decide (or its
/// dialect has no byte path for whole answers: Gemini). A body it decides is valid JSON.
pub fn read_body_quick(dialect: Dialect, body: &[u8]) -> Option<BodySummary> {
    let body = std::str::from_utf8(body).ok()?;
    match dialect {
        Dialect::Chat => chat::quick_body(body),
        Dialect::Responses => responses::quick_body(body),
        Dialect::Messages => messages::quick_body(body),
        Dialect::Gemini => None,
    }
}

/// Summarises a whole non-streamed response body of the dialect.
pub fn classify_body(dialect: Dialect, body: &[u8]) -> BodySummary {
    match dialect {
        Dialect::Chat => chat::body(body),
        Dialect::Responses => responses::body(body),
        Dialect::Messages => messages::body(body),
        Dialect::Gemini => gemini::body(body),
    }
}
