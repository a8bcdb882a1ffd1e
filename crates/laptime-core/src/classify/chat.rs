//! OpenAI Chat Completions (`streaming-protocols.md` §1.5): one `chat.completion.chunk` per
//! event, no `event:` field, `data: [DONE]` at the end.
//!
//! Every `choices[i].delta` is checked: visible `content` (a string, or Mistral's array of parts
//! whose `text` parts are visible and whose `thinking` parts are reasoning), `refusal`,
//! `reasoning` / `reasoning_content` (vLLM, DeepSeek, OpenRouter, TensorRT-LLM), tool-call
//! `arguments` and the legacy `function_call.arguments`. Usage is read from any chunk that
//! carries it (vLLM continuous usage and Mistral put it on content chunks), not only from the
//! final `choices: []` chunk.

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::bytes::{nonempty, Once, Reader};
use super::quick_usage;
use super::{BodySummary, Classification, EffectiveKind, EventClass, StopHint, Texts};
use crate::wire::usage::ChatUsage;
use crate::wire::{is_object, nonempty_str, raw_text, truthy, JsonStr};

/// Classifies one Chat chunk (the SSE `data`).
pub(super) fn classify(data: &str) -> Classification {
    if data.trim_ascii() == "[DONE]" {
        return Classification {
            class: EventClass::TerminalOk,
            usage: None,
            stop: None,
            terminal_frame: true,
            output: None,
        };
    }
    let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data) else {
        return Classification::of(EventClass::Envelope);
    };
    let usage = chunk.usage.map(ChatUsage::report);
    if truthy(chunk.error) {
        // vLLM sends `{"error":…}` then `[DONE]`: the error is the end that counts; the timing
        // comment still goes before `[DONE]`.
        return Classification {
            class: EventClass::TerminalError,
            usage,
            stop: None,
            terminal_frame: false,
            output: None,
        };
    }
    let seen = chunk.choices.map(|c| c.0).unwrap_or_default();
    Classification {
        class: seen
            .output
            .kind()
            .map_or(EventClass::Envelope, EventClass::Effective),
        usage,
        stop: seen.stop,
        terminal_frame: false,
        output: None,
    }
}

/// The byte path (see [`super::bytes`]): the same classification as [`classify`] from one pass
/// without serde, and the chunk's output strings for the output estimate (each choice's
/// `content`, `refusal`, `reasoning_content`, `reasoning`, tool-call and function-call
/// `arguments`, in that order, as [`crate::estimate::OutputEstimate::push_chat_chunk`] reads
/// them). `None` for `[DONE]`, an `error`, content parts, and whatever the reader leaves to the
/// full parse.
pub(super) fn quick(data: &str) -> Option<(Classification, Texts<'_>)> {
    quick_from(data, None).map(|(c, texts, _)| (c, texts))
}

/// [`quick`], read from `from` on when it is given: where the `choices` key of a chunk read
/// before starts, the bytes before it the same in `data` (see [`Reader::document_from`]). Also
/// where `data`'s own `choices` key starts, when no other field [`quick`] reads comes before it:
/// the stream's next chunks may then skip what is before it ([`super::repeat::Repeats`]).
pub(super) fn quick_from<'a>(
    data: &'a str,
    from: Option<usize>,
) -> Option<(Classification, Texts<'a>, Option<usize>)> {
    let mut fields = Once::default();
    let mut seen = Seen::default();
    let mut texts = Texts::default();
    let mut usage = None;
    let mut choices_at = None;
    let mut other_read = false;
    let on_field = |r: &mut Reader<'a>, key: &'a str| match key {
        "choices" => {
            fields.first(0)?;
            if !other_read {
                choices_at = Some(r.key_at());
            }
            if r.null()? {
                return Some(());
            }
            r.array(|r| quick_choice(r, &mut seen, &mut texts))
        }
        "usage" => {
            fields.first(1)?;
            other_read = true;
            if r.null()? {
                return Some(());
            }
            usage = Some(r.strict_or(quick_usage::chat)?.report());
            Some(())
        }
        // A non-null error ends the stream: the full parse reads it.
        "error" => {
            fields.first(2)?;
            other_read = true;
            r.null()?.then_some(())
        }
        _ => r.skip(),
    };
    match from {
        None => Reader::document(data, on_field)?,
        Some(at) => Reader::document_from(data, at, on_field)?,
    }
    let class = seen
        .output
        .kind()
        .map_or(EventClass::Envelope, EventClass::Effective);
    let c = Classification {
        class,
        usage,
        stop: seen.stop,
        terminal_frame: false,
        output: None,
    };
    Some((c, texts, choices_at))
}

/// One `choices[]` element, for [`quick`].
fn quick_choice<'a>(r: &mut Reader<'a>, seen: &mut Seen, texts: &mut Texts<'a>) -> Option<()> {
    let mut fields = Once::default();
    let mut stop = None;
    let mut output = None;
    r.object(|r, key| match key {
        "delta" => {
            fields.first(0)?;
            if r.null()? {
                return Some(());
            }
            output = Some(quick_delta(r, texts)?);
            Some(())
        }
        "finish_reason" => {
            fields.first(1)?;
            stop = r.plain_str()?.map(stop_hint);
            Some(())
        }
        _ => r.skip(),
    })?;
    if let Some(hint) = stop {
        seen.stop = merge_stop(seen.stop, hint);
    }
    if let Some(out) = output {
        seen.output.merge(out);
    }
    Some(())
}

/// One `delta` object, for [`quick`]: its output, its strings pushed to `texts`.
fn quick_delta<'a>(r: &mut Reader<'a>, texts: &mut Texts<'a>) -> Option<Output> {
    let mut fields = Once::default();
    let mut d = DeltaText::default();
    let mut strings: [Option<(&'a str, bool)>; 5] = [None; 5];
    let mut tool_args = Texts::default();
    r.object(|r, key| {
        let slot = match key {
            "content" => 0,
            "refusal" => 1,
            "reasoning_content" => 2,
            "reasoning" => 3,
            "tool_calls" => {
                fields.first(4)?;
                if r.null()? {
                    return Some(());
                }
                return r.array(|r| {
                    let mut call = Once::default();
                    r.object(|r, key| match key {
                        "function" => {
                            call.first(0)?;
                            let args = quick_arguments(r)?;
                            d.tool_args |= nonempty(args);
                            if let Some(s) = string_text(args) {
                                tool_args.push(s);
                            }
                            Some(())
                        }
                        _ => r.skip(),
                    })
                });
            }
            "function_call" => {
                fields.first(5)?;
                d.function_args = quick_arguments(r)?;
                strings[4] = string_text(d.function_args);
                return Some(());
            }
            _ => return r.skip(),
        };
        fields.first(slot)?;
        let raw = r.raw()?;
        let field = match slot {
            0 => {
                // Content parts are left to the full parse.
                if raw.is_some_and(|raw| raw.starts_with('[')) {
                    return None;
                }
                &mut d.content
            }
            1 => &mut d.refusal,
            2 => &mut d.reasoning_content,
            _ => &mut d.reasoning,
        };
        *field = raw;
        strings[usize::from(slot)] = string_text(raw);
        Some(())
    })?;
    for s in strings[..4].iter().flatten() {
        texts.push(*s);
    }
    for s in tool_args.iter() {
        texts.push(*s);
    }
    if let Some(s) = strings[4] {
        texts.push(s);
    }
    Some(d.output())
}

/// A `function` object's `arguments` as raw text (`None` when the object or the field is
/// absent or `null`).
fn quick_arguments<'a>(r: &mut Reader<'a>) -> Option<Option<&'a str>> {
    if r.null()? {
        return Some(None);
    }
    let mut fields = Once::default();
    let mut args = None;
    r.object(|r, key| match key {
        "arguments" => {
            fields.first(0)?;
            args = r.raw()?;
            Some(())
        }
        _ => r.skip(),
    })?;
    Some(args)
}

/// A raw value that is a string, with whether it holds an escape (what the estimate counts).
fn string_text(raw: Option<&str>) -> Option<(&str, bool)> {
    raw.filter(|raw| raw.starts_with('"'))
        .map(|raw| (raw, raw.contains('\\')))
}

/// Summarises a non-streamed `chat.completion` (or an error body).
pub(super) fn body(body: &[u8]) -> BodySummary {
    let Ok(parsed) = serde_json::from_slice::<Body<'_>>(body) else {
        return BodySummary::default();
    };
    let mut summary = BodySummary {
        error: is_object(parsed.error),
        json: true,
        ..BodySummary::default()
    };
    if let Some(usage) = parsed
        .usage
        .and_then(|raw| serde_json::from_str::<ChatUsage>(raw.get()).ok())
    {
        summary.usage = usage.report();
    }
    let choices = parsed
        .choices
        .and_then(|raw| serde_json::from_str::<Vec<BodyChoice<'_>>>(raw.get()).ok())
        .unwrap_or_default();
    for choice in choices {
        if let Some(reason) = choice.finish_reason {
            summary.stop = merge_stop(summary.stop, stop_hint(&reason));
        }
        if let Some(content) = choice.message.and_then(|m| m.content) {
            summary.has_text |= content_output(content.get()).text;
        }
    }
    summary
}

/// The byte path for a whole answer (see [`super::bytes`]): the summary [`body`] gives, from
/// one pass without serde, or `None` where [`body`] must decide (a choice of an odd shape, an
/// escaped finish reason, a duplicate field, JSON the reader does not read). A body it decides
/// is valid JSON.
pub(super) fn quick_body(body: &str) -> Option<BodySummary> {
    let mut fields = Once::default();
    let mut summary = BodySummary {
        json: true,
        ..BodySummary::default()
    };
    Reader::document(body, |r, key| match key {
        "choices" => {
            fields.first(0)?;
            if r.null()? {
                return Some(());
            }
            r.array(|r| quick_body_choice(r, &mut summary))
        }
        "usage" => {
            fields.first(1)?;
            if let Some(usage) = r.lenient_or(quick_usage::chat)? {
                summary.usage = usage.report();
            }
            Some(())
        }
        "error" => {
            fields.first(2)?;
            summary.error = r.is_object()?;
            Some(())
        }
        _ => r.skip(),
    })?;
    Some(summary)
}

/// One `choices[]` element of a whole answer, for [`quick_body`]: its stop and its text.
fn quick_body_choice(r: &mut Reader<'_>, summary: &mut BodySummary) -> Option<()> {
    let mut fields = Once::default();
    r.object(|r, key| match key {
        "message" => {
            fields.first(0)?;
            if r.null()? {
                return Some(());
            }
            let mut message = Once::default();
            r.object(|r, key| match key {
                "content" => {
                    message.first(0)?;
                    if let Some(raw) = r.raw()? {
                        summary.has_text |= content_output(raw).text;
                    }
                    Some(())
                }
                _ => r.skip(),
            })
        }
        "finish_reason" => {
            fields.first(1)?;
            if let Some(reason) = r.plain_str()? {
                summary.stop = merge_stop(summary.stop, stop_hint(reason));
            }
            Some(())
        }
        _ => r.skip(),
    })
}

/// `finish_reason` → stop hint: `length` and `content_filter` cut the answer short; every other
/// reason (`stop`, `tool_calls`, `function_call`, unknown) is a normal stop.
fn stop_hint(reason: &str) -> StopHint {
    match reason {
        "length" => StopHint::Length,
        "content_filter" => StopHint::ContentFilter,
        _ => StopHint::Complete,
    }
}

/// With several choices (`n > 1`), a choice that was cut short decides the hint.
fn merge_stop(current: Option<StopHint>, next: StopHint) -> Option<StopHint> {
    match current {
        None | Some(StopHint::Complete) => Some(next),
        kept => kept,
    }
}

// === output seen in one chunk ===

/// Which kinds of non-empty output a chunk (or a part of it) carried.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Output {
    text: bool,
    refusal: bool,
    tool_args: bool,
    reasoning: bool,
}

impl Output {
    /// The chunk's kind when it carried several: visible text wins, then refusal, then tool-call
    /// arguments, then reasoning (the more answer-like output names the event).
    fn kind(self) -> Option<EffectiveKind> {
        if self.text {
            Some(EffectiveKind::Text)
        } else if self.refusal {
            Some(EffectiveKind::Refusal)
        } else if self.tool_args {
            Some(EffectiveKind::ToolArgs)
        } else if self.reasoning {
            Some(EffectiveKind::Reasoning)
        } else {
            None
        }
    }

    fn merge(&mut self, other: Output) {
        self.text |= other.text;
        self.refusal |= other.refusal;
        self.tool_args |= other.tool_args;
        self.reasoning |= other.reasoning;
    }
}

/// `delta.content` / `message.content`: a string (visible when non-empty), `null`, or an array of
/// parts (Mistral): `text` parts are visible, `thinking` parts are reasoning.
fn content_output(text: &str) -> Output {
    if text.starts_with('[') {
        let parts = serde_json::from_str::<Parts>(text).unwrap_or_default();
        Output {
            text: parts.text,
            reasoning: parts.thinking,
            ..Output::default()
        }
    } else {
        Output {
            text: nonempty(Some(text)),
            ..Output::default()
        }
    }
}

// === wire shapes (only the fields classification reads) ===

#[derive(Deserialize)]
struct Chunk<'a> {
    choices: Option<Choices>,
    usage: Option<ChatUsage>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// What all `choices` of a chunk carried, folded while parsing (no `Vec`).
#[derive(Default)]
struct Seen {
    output: Output,
    stop: Option<StopHint>,
}

struct Choices(Seen);

impl<'de> Deserialize<'de> for Choices {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChoicesVisitor;

        impl<'de> Visitor<'de> for ChoicesVisitor {
            type Value = Choices;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Choices, A::Error> {
                let mut seen = Seen::default();
                while let Some(choice) = seq.next_element::<Choice<'de>>()? {
                    if let Some(reason) = choice.finish_reason {
                        seen.stop = merge_stop(seen.stop, stop_hint(&reason));
                    }
                    if let Some(delta) = choice.delta {
                        seen.output.merge(delta.output());
                    }
                }
                Ok(Choices(seen))
            }
        }

        deserializer.deserialize_seq(ChoicesVisitor)
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<JsonStr<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    refusal: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning_content: Option<&'a RawValue>,
    tool_calls: Option<ToolCalls>,
    #[serde(borrow)]
    function_call: Option<Function<'a>>,
}

impl Delta<'_> {
    fn output(&self) -> Output {
        DeltaText {
            content: raw_text(self.content),
            refusal: raw_text(self.refusal),
            reasoning: raw_text(self.reasoning),
            reasoning_content: raw_text(self.reasoning_content),
            tool_args: self.tool_calls.as_ref().is_some_and(|t| t.0),
            function_args: self
                .function_call
                .as_ref()
                .and_then(|f| raw_text(f.arguments)),
        }
        .output()
    }
}

/// A delta's fields as raw JSON text, as both paths read them.
#[derive(Default)]
struct DeltaText<'a> {
    content: Option<&'a str>,
    refusal: Option<&'a str>,
    reasoning: Option<&'a str>,
    reasoning_content: Option<&'a str>,
    /// Some `tool_calls[].function.arguments` was a non-empty string.
    tool_args: bool,
    function_args: Option<&'a str>,
}

impl DeltaText<'_> {
    fn output(&self) -> Output {
        let mut out = self.content.map(content_output).unwrap_or_default();
        out.refusal = nonempty(self.refusal);
        out.reasoning |= nonempty(self.reasoning) || nonempty(self.reasoning_content);
        out.tool_args = self.tool_args || nonempty(self.function_args);
        out
    }
}

/// Whether any `tool_calls[]` fragment carried non-empty `function.arguments`. Fragments are
/// keyed by `index`, which may start at 1, so none is assumed to be first; the header fragment
/// (`id`, `type`, `function.name`, `arguments: ""`) is an envelope.
struct ToolCalls(bool);

impl<'de> Deserialize<'de> for ToolCalls {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ToolCallsVisitor;

        impl<'de> Visitor<'de> for ToolCallsVisitor {
            type Value = ToolCalls;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of tool calls")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolCalls, A::Error> {
                let mut args = false;
                while let Some(call) = seq.next_element::<ToolCall<'de>>()? {
                    args |= call.function.is_some_and(|f| nonempty_str(f.arguments));
                }
                Ok(ToolCalls(args))
            }
        }

        deserializer.deserialize_seq(ToolCallsVisitor)
    }
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

/// An array of content parts, folded: was there non-empty text, non-empty thinking?
#[derive(Default)]
struct Parts {
    text: bool,
    thinking: bool,
}

impl<'de> Deserialize<'de> for Parts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PartsVisitor;

        impl<'de> Visitor<'de> for PartsVisitor {
            type Value = Parts;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of content parts")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Parts, A::Error> {
                let mut parts = Parts::default();
                while let Some(part) = seq.next_element::<Part<'de>>()? {
                    match part.kind.as_deref() {
                        Some("thinking") => {
                            // `thinking` is a string or, for Mistral, an array of text parts.
                            parts.thinking |= part.thinking.is_some_and(|raw| {
                                if raw.get().starts_with('[') {
                                    serde_json::from_str::<Parts>(raw.get())
                                        .is_ok_and(|inner| inner.text)
                                } else {
                                    nonempty_str(Some(raw))
                                }
                            });
                        }
                        Some("text") | None => parts.text |= nonempty_str(part.text),
                        Some(_) => {}
                    }
                }
                Ok(parts)
            }
        }

        deserializer.deserialize_seq(PartsVisitor)
    }
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<JsonStr<'a>>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
}

/// A non-streamed body: its parts are parsed one by one, so an odd `choices` never hides usage.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    choices: Option<&'a RawValue>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BodyChoice<'a> {
    #[serde(borrow)]
    message: Option<BodyMessage<'a>>,
    #[serde(borrow)]
    finish_reason: Option<JsonStr<'a>>,
}

#[derive(Deserialize)]
struct BodyMessage<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{classify_body, classify_event};
    use crate::sse::{SseItem, SseScanner};
    use crate::usage::UsageReport;
    use crate::Dialect;

    fn class(data: &str) -> EventClass {
        classify(data).class
    }

    fn effective(kind: EffectiveKind) -> EventClass {
        EventClass::Effective(kind)
    }

    /// Scans a whole SSE stream and classifies each event, as the observer does.
    fn classify_stream(stream: &str) -> Vec<Classification> {
        let mut scanner = SseScanner::new();
        let mut out = Vec::new();
        scanner.feed(stream.as_bytes(), &mut |item| {
            if let SseItem::Event { event, data, .. } = item {
                out.push(classify_event(Dialect::Chat, event, data));
            }
        });
        assert!(!scanner.finish());
        out
    }

    fn usage(input: u64, output: u64) -> UsageReport {
        UsageReport {
            input: Some(input),
            output: Some(output),
            ..UsageReport::default()
        }
    }

    // Recorded gpt-4o stream (openai-python `.inline-snapshot/external/*.bin` shapes).
    const HEAD: &str = r#""id":"chatcmpl-ABfw1e5abtU8OwGr15vOreYVb2MiF","object":"chat.completion.chunk","created":1727346163,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd""#;

    fn chunk(choices: &str) -> String {
        format!(r#"{{{HEAD},"choices":[{choices}],"usage":null}}"#)
    }

    #[test]
    fn a_recorded_text_stream_classifies_row_by_row() {
        let stream = [
            chunk(
                r#"{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}"#,
            ),
            chunk(r#"{"index":0,"delta":{"content":"I'm"},"logprobs":null,"finish_reason":null}"#),
            chunk(
                r#"{"index":0,"delta":{"content":" sorry"},"logprobs":null,"finish_reason":null}"#,
            ),
            chunk(r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}"#),
            format!(
                r#"{{{HEAD},"choices":[],"usage":{{"prompt_tokens":14,"completion_tokens":2,"total_tokens":16,"prompt_tokens_details":{{"cached_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":0}}}}}}"#
            ),
            "[DONE]".to_owned(),
        ];
        let sse: String = stream.iter().map(|d| format!("data: {d}\n\n")).collect();
        let got = classify_stream(&format!(": keep-alive\n\n{sse}"));
        let classes: Vec<_> = got.iter().map(|c| c.class).collect();
        assert_eq!(
            classes,
            [
                EventClass::Envelope,
                effective(EffectiveKind::Text),
                effective(EffectiveKind::Text),
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::TerminalOk,
            ],
            "the keep-alive comment never reaches the classifier"
        );
        assert_eq!(got[3].stop, Some(StopHint::Complete));
        assert_eq!(
            got[4].usage,
            Some(UsageReport {
                cache_read: Some(0),
                reasoning: Some(0),
                ..usage(14, 2)
            })
        );
        assert!(got[..5]
            .iter()
            .all(|c| c.usage.is_none() || c.class == EventClass::Envelope));
        assert!(got[5].terminal_frame);
        assert!(got[..5].iter().all(|c| !c.terminal_frame));
    }

    #[test]
    fn done_is_terminal_ok_and_the_terminal_frame() {
        assert_eq!(
            classify("[DONE]"),
            Classification {
                class: EventClass::TerminalOk,
                usage: None,
                stop: None,
                terminal_frame: true,
                output: None,
            }
        );
        assert_eq!(classify(" [DONE] ").class, EventClass::TerminalOk);
    }

    #[test]
    fn usage_null_on_content_chunks_is_no_usage() {
        let c = classify(&chunk(
            r#"{"index":0,"delta":{"content":"Hi"},"finish_reason":null}"#,
        ));
        assert_eq!(c.usage, None);
        assert_eq!(c.class, effective(EffectiveKind::Text));
    }

    #[test]
    fn the_final_usage_chunk_with_empty_choices_is_an_envelope_with_usage() {
        // Recorded ending of `2018feb66ae1….bin`.
        let c = classify(
            r#"{"id":"chatcmpl-A","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":44,"completion_tokens":16,"total_tokens":60,"completion_tokens_details":{"reasoning_tokens":0}}}"#,
        );
        assert_eq!(c.class, EventClass::Envelope);
        assert_eq!(
            c.usage,
            Some(UsageReport {
                reasoning: Some(0),
                ..usage(44, 16)
            })
        );
    }

    #[test]
    fn azure_first_chunk_with_empty_choices_and_no_usage_is_an_envelope() {
        let c = classify(
            r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"jailbreak":{"filtered":false,"detected":false}}}]}"#,
        );
        assert_eq!(c, Classification::of(EventClass::Envelope));
    }

    #[test]
    fn azure_stream_with_obfuscation_and_content_filter_results() {
        let first = r#"{"choices":[{"content_filter_results":{},"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1762317021,"id":"chatcmpl-CYPS1","model":"gpt-5-nano-2025-08-07","obfuscation":"D3WbtIxo1Q2j1Q","object":"chat.completion.chunk","system_fingerprint":null,"usage":null}"#;
        let text = r#"{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"Capital"},"finish_reason":null,"index":0,"logprobs":null}],"created":1762317021,"id":"chatcmpl-CYPS1","model":"gpt-5-nano-2025-08-07","obfuscation":"NNpA6Dj2U","object":"chat.completion.chunk","system_fingerprint":null,"usage":null}"#;
        let last = r#"{"choices":[],"created":1762317021,"id":"chatcmpl-CYPS1","model":"gpt-5-nano-2025-08-07","obfuscation":"DjqQ9RbEQMJ3PX","object":"chat.completion.chunk","system_fingerprint":null,"usage":{"completion_tokens":78,"completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"reasoning_tokens":64,"rejected_prediction_tokens":0},"prompt_tokens":15,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0},"total_tokens":93}}"#;
        assert_eq!(class(first), EventClass::Envelope);
        assert_eq!(class(text), effective(EffectiveKind::Text));
        let c = classify(last);
        assert_eq!(c.class, EventClass::Envelope);
        assert_eq!(
            c.usage,
            Some(UsageReport {
                cache_read: Some(0),
                reasoning: Some(64),
                ..usage(15, 78)
            })
        );
    }

    #[test]
    fn empty_content_is_an_envelope_and_non_empty_content_is_visible_text() {
        assert_eq!(
            class(&chunk(r#"{"index":0,"delta":{"content":""}}"#)),
            EventClass::Envelope
        );
        assert_eq!(
            class(&chunk(r#"{"index":0,"delta":{"content":null}}"#)),
            EventClass::Envelope
        );
        assert_eq!(
            class(&chunk(r#"{"index":0,"delta":{"content":"\n"}}"#)),
            effective(EffectiveKind::Text)
        );
        assert_eq!(
            class(&chunk(r#"{"index":0,"delta":{"content":" "}}"#)),
            effective(EffectiveKind::Text)
        );
    }

    #[test]
    fn reasoning_content_and_reasoning_deltas_are_reasoning() {
        // DeepSeek / older vLLM / TensorRT-LLM.
        assert_eq!(
            class(&chunk(
                r#"{"index":0,"delta":{"content":null,"reasoning_content":"Let me"}}"#
            )),
            effective(EffectiveKind::Reasoning)
        );
        // Current vLLM and OpenRouter.
        assert_eq!(
            class(&chunk(
                r#"{"index":0,"delta":{"reasoning":"Hmm","reasoning_details":[{"type":"reasoning.text","text":"Hmm"}]}}"#
            )),
            effective(EffectiveKind::Reasoning)
        );
        assert_eq!(
            class(&chunk(r#"{"index":0,"delta":{"reasoning_content":""}}"#)),
            EventClass::Envelope
        );
        assert_eq!(
            class(&chunk(r#"{"index":0,"delta":{"reasoning":""}}"#)),
            EventClass::Envelope
        );
    }

    #[test]
    fn a_first_chunk_with_role_and_reasoning_content_is_already_effective() {
        // vercel-ai `issue-20203-empty-tool-calls.chunks.txt`: `tool_calls: []` on every chunk.
        let c = classify(
            r#"{"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":"Think ","tool_calls":[]},"finish_reason":null}]}"#,
        );
        assert_eq!(c.class, effective(EffectiveKind::Reasoning));
        assert_eq!(c.usage, None);
    }

    #[test]
    fn visible_text_wins_over_other_output_in_the_same_chunk() {
        assert_eq!(
            class(&chunk(
                r#"{"index":0,"delta":{"content":"A","reasoning_content":"B"}}"#
            )),
            effective(EffectiveKind::Text)
        );
        assert_eq!(
            class(&chunk(
                r#"{"index":0,"delta":{"content":"A","tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}"#
            )),
            effective(EffectiveKind::Text)
        );
    }

    #[test]
    fn mistral_array_content_text_parts_are_visible_and_thinking_parts_reasoning() {
        // vercel-ai `issue-13703-mistral-thinking.chunks.txt`.
        let m = |delta: &str| {
            format!(
                r#"{{"id":"ed56a5f5c9254b8981e89c2ecfdd6a8d","object":"chat.completion.chunk","created":1784737087,"model":"mistral-small-latest","choices":[{{"index":0,"delta":{delta},"finish_reason":null}}],"p":"abcdefghijklmnopqrstuvwxyz01"}}"#
            )
        };
        assert_eq!(
            class(&m(r#"{"role":"assistant","content":""}"#)),
            EventClass::Envelope
        );
        assert_eq!(
            class(&m(
                r#"{"content":[{"type":"thinking","thinking":[{"type":"text","text":"Okay, the"}],"closed":true}]}"#
            )),
            effective(EffectiveKind::Reasoning)
        );
        assert_eq!(
            class(&m(
                r#"{"content":[{"type":"thinking","thinking":[{"type":"text","text":"1."}],"closed":true},{"type":"text","text":"3"}]}"#
            )),
            effective(EffectiveKind::Text)
        );
        assert_eq!(
            class(&m(
                r#"{"content":[{"type":"thinking","thinking":[{"type":"text","text":""}]}]}"#
            )),
            EventClass::Envelope
        );
        assert_eq!(
            class(&m(r#"{"content":[{"type":"text","text":""}]}"#)),
            EventClass::Envelope
        );
        assert_eq!(
            class(&m(
                r#"{"content":[{"type":"thinking","thinking":"plain string"}]}"#
            )),
            effective(EffectiveKind::Reasoning)
        );
    }

    #[test]
    fn mistral_usage_on_the_last_content_chunk_comes_with_the_finish_reason() {
        let c = classify(
            r#"{"id":"ed56a5f5c9254b8981e89c2ecfdd6a8d","object":"chat.completion.chunk","created":1784737087,"model":"mistral-small-latest","choices":[{"index":0,"delta":{"content":"91"},"finish_reason":"stop"}],"usage":{"prompt_tokens":28,"total_tokens":167,"completion_tokens":139,"prompt_tokens_details":{"cached_tokens":0}},"p":"abcdefghijklmnopqrstuvwxyz0123456"}"#,
        );
        assert_eq!(c.class, effective(EffectiveKind::Text));
        assert_eq!(c.stop, Some(StopHint::Complete));
        assert_eq!(
            c.usage,
            Some(UsageReport {
                cache_read: Some(0),
                ..usage(28, 139)
            })
        );
    }

    #[test]
    fn vllm_continuous_usage_is_read_from_every_chunk() {
        let c = classify(
            r#"{"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2}}"#,
        );
        assert_eq!(c.class, effective(EffectiveKind::Text));
        assert_eq!(c.usage, Some(usage(10, 2)));
    }

    #[test]
    fn cache_write_tokens_are_read_from_prompt_tokens_details() {
        let c = classify(
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":64,"cache_write_tokens":30}}}"#,
        );
        assert_eq!(
            c.usage,
            Some(UsageReport {
                cache_read: Some(64),
                cache_write: Some(30),
                ..usage(100, 5)
            })
        );
    }

    #[test]
    fn deepseeks_cache_hits_are_the_cache_reads_when_openais_field_is_absent() {
        let c = classify(
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}}"#,
        );
        assert_eq!(
            c.usage,
            Some(UsageReport {
                cache_read: Some(64),
                ..usage(100, 5)
            })
        );
        let both = classify(
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_cache_hit_tokens":64,"prompt_tokens_details":{"cached_tokens":50}}}"#,
        );
        assert_eq!(
            both.usage.and_then(|u| u.cache_read),
            Some(50),
            "OpenAI's own field wins"
        );
    }

    #[test]
    fn refusal_fragments_are_refusal_and_the_empty_first_refusal_is_an_envelope() {
        // `173417d55340….bin`: first chunk `content:null, refusal:""`.
        assert_eq!(
            class(&chunk(
                r#"{"index":0,"delta":{"role":"assistant","content":null,"refusal":""},"logprobs":null,"finish_reason":null}"#
            )),
            EventClass::Envelope
        );
        assert_eq!(
            class(&chunk(
                r#"{"index":0,"delta":{"refusal":"I'm very sorry"},"logprobs":null,"finish_reason":null}"#
            )),
            effective(EffectiveKind::Refusal)
        );
    }

    #[test]
    fn a_tool_call_header_is_an_envelope_and_argument_fragments_are_tool_args() {
        // `c6aa7e397b71….bin` / `2018feb66ae1….bin`.
        let header = chunk(
            r#"{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_7XnqBkOI2dhXQWNbIfkNRn4t","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}"#,
        );
        let args = chunk(
            r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]},"logprobs":null,"finish_reason":null}"#,
        );
        let last = chunk(
            r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"finish_reason":null}"#,
        );
        let finish =
            chunk(r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}"#);
        assert_eq!(class(&header), EventClass::Envelope);
        assert_eq!(class(&args), effective(EffectiveKind::ToolArgs));
        assert_eq!(class(&last), effective(EffectiveKind::ToolArgs));
        let f = classify(&finish);
        assert_eq!(
            (f.class, f.stop),
            (EventClass::Envelope, Some(StopHint::Complete))
        );
    }

    #[test]
    fn tool_calls_that_start_at_index_one_count_only_once_arguments_arrive() {
        // vercel-ai `anthropic-fallback-tool-call.sse`: Claude behind a Chat endpoint.
        let role = chunk(r#"{"index":0,"delta":{"role":"assistant"},"finish_reason":null}"#);
        let header = chunk(
            r#"{"index":0,"delta":{"tool_calls":[{"index":1,"id":"toolu_01","type":"function","function":{"name":"weather","arguments":""}}]},"finish_reason":null}"#,
        );
        let empty = chunk(
            r#"{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":""}}]},"finish_reason":null}"#,
        );
        let args = chunk(
            r#"{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\": \"Paris\"}"}}]},"finish_reason":null}"#,
        );
        assert_eq!(class(&role), EventClass::Envelope);
        assert_eq!(class(&header), EventClass::Envelope);
        assert_eq!(class(&empty), EventClass::Envelope);
        assert_eq!(class(&args), effective(EffectiveKind::ToolArgs));
    }

    #[test]
    fn parallel_tool_calls_in_one_chunk_count_if_any_has_arguments() {
        let c = chunk(
            r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}},{"index":1,"function":{"arguments":"{}"}}]}}"#,
        );
        assert_eq!(class(&c), effective(EffectiveKind::ToolArgs));
    }

    #[test]
    fn legacy_function_call_arguments_are_tool_args() {
        assert_eq!(
            class(&chunk(
                r#"{"index":0,"delta":{"role":"assistant","content":null,"function_call":{"name":"f","arguments":""}}}"#
            )),
            EventClass::Envelope
        );
        assert_eq!(
            class(&chunk(
                r#"{"index":0,"delta":{"function_call":{"arguments":"{\"a\""}}}"#
            )),
            effective(EffectiveKind::ToolArgs)
        );
        let f = classify(&chunk(
            r#"{"index":0,"delta":{},"finish_reason":"function_call"}"#,
        ));
        assert_eq!(f.stop, Some(StopHint::Complete));
    }

    #[test]
    fn role_logprobs_obfuscation_and_moderation_alone_are_envelopes() {
        assert_eq!(
            class(
                r#"{"id":"1","choices":[{"index":0,"delta":{"role":"assistant"},"logprobs":{"content":[]},"finish_reason":null}],"obfuscation":"abcdef","moderation":{"flagged":false}}"#
            ),
            EventClass::Envelope
        );
    }

    #[test]
    fn finish_reasons_map_to_stop_hints() {
        let stop = |reason: &str| {
            classify(&chunk(&format!(
                r#"{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"{reason}"}}"#
            )))
            .stop
        };
        assert_eq!(stop("stop"), Some(StopHint::Complete));
        assert_eq!(stop("length"), Some(StopHint::Length));
        assert_eq!(stop("content_filter"), Some(StopHint::ContentFilter));
        assert_eq!(stop("tool_calls"), Some(StopHint::Complete));
        assert_eq!(stop("something_new"), Some(StopHint::Complete));
        assert_eq!(classify(&chunk(r#"{"index":0,"delta":{}}"#)).stop, None);
    }

    #[test]
    fn with_several_choices_a_cut_short_choice_decides_the_stop_hint() {
        // `a491adda08c3….bin`: n=3.
        let c = classify(&chunk(
            r#"{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"length"},{"index":2,"delta":{"content":"x"},"finish_reason":null}"#,
        ));
        assert_eq!(c.stop, Some(StopHint::Length));
        assert_eq!(c.class, effective(EffectiveKind::Text));
    }

    #[test]
    fn an_in_stream_error_is_a_terminal_error_and_the_following_done_is_the_terminal_frame() {
        let got = classify_stream(concat!(
            "data: {\"id\":\"1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            "data: {\"error\":{\"message\":\"The model is overloaded\",\"type\":\"server_error\",\"code\":503}}\n\n",
            "data: [DONE]\n\n",
        ));
        assert_eq!(got[1].class, EventClass::TerminalError);
        assert!(!got[1].terminal_frame);
        assert_eq!(got[2].class, EventClass::TerminalOk);
        assert!(got[2].terminal_frame);
    }

    #[test]
    fn a_falsy_error_key_is_not_an_error() {
        assert_eq!(
            class(r#"{"choices":[],"error":null}"#),
            EventClass::Envelope
        );
        assert_eq!(class(r#"{"choices":[],"error":{}}"#), EventClass::Envelope);
        assert_eq!(
            class(r#"{"error":"upstream timed out"}"#),
            EventClass::TerminalError
        );
    }

    #[test]
    fn padded_json_and_unknown_fields_are_tolerated() {
        assert_eq!(
            class("  {\"choices\" : [ {\"index\":0, \"delta\" : {\"content\" : \"x\" } } ] , \"p\":\"pad\" }      "),
            effective(EffectiveKind::Text)
        );
    }

    #[test]
    fn unparseable_data_is_an_envelope() {
        assert_eq!(
            classify("{\"choices\":[{\"delta\""),
            Classification::of(EventClass::Envelope)
        );
        assert_eq!(
            classify("not json"),
            Classification::of(EventClass::Envelope)
        );
        assert_eq!(classify(""), Classification::of(EventClass::Envelope));
    }

    #[test]
    fn odd_token_counts_never_cost_the_event_its_class() {
        let c = classify(
            r#"{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":-1,"completion_tokens":3.0,"prompt_tokens_details":null}}"#,
        );
        assert_eq!(c.class, effective(EffectiveKind::Text));
        assert_eq!(
            c.usage,
            Some(UsageReport {
                output: Some(3),
                ..UsageReport::default()
            })
        );
    }

    // --- non-streamed bodies ---

    #[test]
    fn a_completion_body_gives_usage_stop_and_text() {
        let body = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!","refusal":null},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}"#;
        assert_eq!(
            classify_body(Dialect::Chat, body),
            BodySummary {
                usage: UsageReport {
                    cache_read: Some(4),
                    reasoning: Some(2),
                    ..usage(9, 12)
                },
                stop: Some(StopHint::Length),
                error: false,
                has_text: true,
                json: true,
            }
        );
    }

    #[test]
    fn a_tool_call_body_has_no_text() {
        let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        let s = body_of(body);
        assert!(!s.has_text);
        assert_eq!(s.stop, Some(StopHint::Complete));
        assert!(s.usage.is_empty());
    }

    #[test]
    fn an_array_content_body_has_text_when_a_text_part_is_non_empty() {
        let with = br#"{"choices":[{"message":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"hm"}]},{"type":"text","text":"42"}]},"finish_reason":"stop"}]}"#;
        let without = br#"{"choices":[{"message":{"content":[{"type":"text","text":""}]},"finish_reason":"stop"}]}"#;
        assert!(body_of(with).has_text);
        assert!(!body_of(without).has_text);
    }

    #[test]
    fn an_error_body_is_an_error() {
        let s = body_of(
            br#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        );
        assert!(s.error);
        assert!(!s.has_text);
    }

    #[test]
    fn an_unparseable_body_says_nothing() {
        assert_eq!(body_of(b"<html>502</html>"), BodySummary::default());
    }

    fn body_of(b: &[u8]) -> BodySummary {
        body(b)
    }
}
