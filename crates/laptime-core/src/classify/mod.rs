//! Per-dialect classification of one upstream SSE event, and of one non-streamed body.
//!
//! The tables are those of `streaming-protocols.md` §1.5 (Chat), §2.1 (Responses) and §3.1
//! (Messages), and of `docs/reference/gemini.md` §3 (Gemini). An event is effective only when its delta string is non-empty. JSON is parsed only
//! for the fields a class or the usage needs (borrowed, so a typical event allocates nothing).

mod chat;
mod gemini;
mod messages;
mod responses;

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

// === JSON helpers shared by the dialects ===
//
// Events are parsed with borrowed serde structs: strings whose content is only tested for
// emptiness stay `&RawValue` (never unescaped), discriminators are `Cow<str>` (borrowed unless
// they hold escapes), unknown fields are skipped. A typical event allocates nothing.

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Whether a JSON value is a non-empty string, decided from its raw text: a JSON string is
/// empty only when written `""` (no escape sequence spells the empty string).
fn nonempty_str(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| {
        let text = r.get();
        text.starts_with('"') && text != "\"\""
    })
}

/// Whether a JSON value is an object (a non-null `error` key).
fn is_object(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| r.get().starts_with('{'))
}

/// JavaScript/Python truthiness of a JSON value, as the OpenAI SDKs test an in-stream `error`
/// key: not `null`, `false`, `0`, `""`, `{}` or `[]`.
fn truthy(raw: Option<&RawValue>) -> bool {
    let Some(raw) = raw else { return false };
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'{' | b'[') => !text[1..text.len() - 1].trim_ascii().is_empty(),
        Some(b'"') => text != "\"\"",
        Some(b'n' | b'f') => false,
        Some(b'-' | b'0'..=b'9') => {
            let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
            mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'))
        }
        _ => true,
    }
}

/// A token count, read leniently so that an odd usage field never costs the event its class:
/// a non-negative integer (or a float, truncated) is a count; `null`, negatives, strings and
/// anything else are "not sent".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;

        impl<'de> Visitor<'de> for CountVisitor {
            type Value = Count;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a token count")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(Some(v)))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(v).ok()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Count, E> {
                // A fractional count is truncated; the cast saturates.
                let count = (v.is_finite() && v >= 0.0).then_some(v as u64);
                Ok(Count(count))
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Count, E> {
                Ok(Count(None))
            }

            fn visit_str<E: de::Error>(self, _: &str) -> Result<Count, E> {
                Ok(Count(None))
            }

            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }

            fn visit_none<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Count(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Count(None))
            }
        }

        deserializer.deserialize_any(CountVisitor)
    }
}

/// A JSON string, borrowed from the input unless it holds escape sequences. (An
/// `Option<Cow<str>>` field would always allocate: serde borrows into a `Cow` only when the
/// `Cow` is the field's whole type.)
#[derive(Debug, Clone, PartialEq, Eq)]
struct JsonStr<'a>(std::borrow::Cow<'a, str>);

impl std::ops::Deref for JsonStr<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for JsonStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;

        impl<'de> Visitor<'de> for StrVisitor {
            type Value = JsonStr<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(std::borrow::Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(std::borrow::Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(std::borrow::Cow::Owned(v)))
            }
        }

        deserializer.deserialize_str(StrVisitor)
    }
}
