//! The hub model of an answer: dialect-free output events and the closed sets they name.
//!
//! Invariants every decoder keeps, so every encoder may rely on them: block indexes count from
//! 0 in start order; a block's deltas come between its start and its stop; blocks may overlap
//! (a provider may interleave parallel tool calls); every started block is stopped before
//! [`HubEvent::Stop`], [`HubEvent::End`] or [`HubEvent::Error`]; empty deltas are never sent;
//! the stream ends with exactly one [`HubEvent::End`] or [`HubEvent::Error`].

use std::borrow::Cow;

use crate::usage::Tokens;

/// The inside of a JSON string literal with its escapes kept as they came: written between two
/// quotes it is valid JSON, and pieces of one text concatenate into the whole text's literal.
/// Keeping text escaped lets a delta go from the upstream's JSON to the client's without being
/// unescaped and escaped again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JsonText<'a>(Cow<'a, str>);

impl<'a> JsonText<'a> {
    /// Wraps the inside of a literal that is already escaped (from a parsed JSON string).
    pub(crate) fn escaped(raw: &'a str) -> Self {
        JsonText(Cow::Borrowed(raw))
    }

    /// Escapes plain text (a value that was not a JSON string, such as a tool input object).
    pub fn from_plain(text: &str) -> JsonText<'static> {
        let mut out = String::with_capacity(text.len() + 2);
        super::json::escape_into(&mut out, text);
        JsonText(Cow::Owned(out))
    }

    /// The escaped text, without quotes.
    pub fn raw(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn into_cow(self) -> Cow<'a, str> {
        self.0
    }

    pub fn into_owned(self) -> JsonText<'static> {
        JsonText(Cow::Owned(self.0.into_owned()))
    }

    /// The text itself; `None` if the escapes are not valid JSON (never for text a decoder
    /// took from parsed JSON).
    pub fn unescape(&self) -> Option<String> {
        let mut quoted = String::with_capacity(self.0.len() + 2);
        quoted.push('"');
        quoted.push_str(&self.0);
        quoted.push('"');
        serde_json::from_str(&quoted).ok()
    }
}

/// One output event of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubEvent<'a> {
    /// The answer opened. `usage` holds the input side when the upstream reports it this early
    /// (Anthropic); `output` is never set here.
    MessageStart {
        id: Option<JsonText<'a>>,
        model: Option<JsonText<'a>>,
        usage: Tokens,
    },
    BlockStart {
        index: u32,
        kind: BlockKind<'a>,
    },
    BlockDelta {
        index: u32,
        delta: Delta<'a>,
    },
    BlockStop {
        index: u32,
    },
    /// Every count known so far, normalised as [`Tokens`] says (input includes cache reads and
    /// writes, output includes reasoning). Each replaces the one before: counts are cumulative.
    Usage(Tokens),
    /// Why the model stopped. Comes after every block stopped, before `End`.
    Stop(StopReason),
    /// The upstream reported an error in-band: the answer ends here, without `End`.
    Error(HubError<'a>),
    /// The upstream's terminal arrived: the answer is complete.
    End,
    /// A keep-alive with no meaning (an SSE comment, Anthropic `ping`, Responses
    /// `keepalive`): passed on so that the client's connection is not idle while the upstream
    /// queues or thinks.
    Heartbeat,
}

/// What a content block holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockKind<'a> {
    /// Visible answer text.
    Text,
    /// Reasoning text (Anthropic thinking, OpenAI reasoning summary, `reasoning_content`).
    Reasoning,
    /// Opaque reasoning that arrives whole (Anthropic `redacted_thinking`).
    RedactedReasoning { data: JsonText<'a> },
    /// A function call: its arguments arrive as JSON text in deltas.
    ToolCall {
        id: JsonText<'a>,
        name: JsonText<'a>,
    },
}

/// A piece of a block's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta<'a> {
    Text(JsonText<'a>),
    Reasoning(JsonText<'a>),
    /// Anthropic's thinking signature (only Anthropic carries it).
    Signature(JsonText<'a>),
    /// A fragment of a tool call's arguments (JSON text; fragments concatenate).
    ToolArgs(JsonText<'a>),
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// A natural end of the turn. An upstream reason this list does not know is read as this
    /// (as the classifier reads it: a normal stop).
    EndTurn,
    /// The output token limit cut the answer.
    MaxTokens,
    /// The context window filled up (Anthropic `model_context_window_exceeded`).
    ContextWindowExceeded,
    /// The model called tools and waits for their results.
    ToolUse,
    StopSequence,
    /// Output was withheld by a content filter.
    ContentFilter,
    /// The model refused (Anthropic `refusal`).
    Refusal,
    /// A long server-tool turn paused; the client continues it (Anthropic `pause_turn`).
    PauseTurn,
}

/// An error, in-band or as a whole response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubError<'a> {
    pub kind: ErrorKind,
    pub message: JsonText<'a>,
}

/// The kind of an error, which decides its type (and status) in every dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 400 and any other 4xx without a kind of its own.
    InvalidRequest,
    /// 400: the input is over the model's context window.
    ContextLength,
    /// 400: refused by the provider's content filter.
    ContentFilter,
    /// 401: missing or refused credentials.
    Auth,
    /// 402: billing or quota.
    Billing,
    /// 403.
    Permission,
    /// 404 (an unknown model, too).
    NotFound,
    /// 413.
    RequestTooLarge,
    /// 429.
    RateLimited,
    /// 504 / Anthropic `timeout_error`.
    Timeout,
    /// 529, 503 / Anthropic `overloaded_error`.
    Overloaded,
    /// 500 and any other 5xx without a kind of its own.
    Server,
}
