//! Google Gemini (`docs/reference/gemini.md` §3): every SSE `data:` is one whole
//! `GenerateContentResponse` (`candidates[].content.parts[]`, `usageMetadata`,
//! `promptFeedback`, `modelVersion`, `responseId`), with no `event:` field and no terminal frame
//! of its own. The stream's last event is the one whose candidates carry a `finishReason`, a
//! prompt block (`promptFeedback.blockReason` and no candidate), or an `{"error":…}` object.
//!
//! Parts: non-empty `text` is visible text; with `thought: true` it is reasoning; a
//! `functionCall` (always sent whole, never as argument fragments) is a tool call; `inlineData`,
//! `executableCode` and `codeExecutionResult` are other output. An event carrying several kinds
//! is named by the most answer-like one; a terminal event keeps its output in
//! [`Classification::output`], since Gemini's last text usually rides on it.
//!
//! `usageMetadata` is repeated on every chunk with the counts so far (the last one wins). Google
//! omits zero-valued fields, so within one object an absent count is 0; across objects it is
//! "not sent". One object is folded into the normalised terms: input = `promptTokenCount`
//! (which already includes `cachedContentTokenCount`) + `toolUsePromptTokenCount`; output =
//! `candidatesTokenCount` + `thoughtsTokenCount` (candidates exclude thoughts); reasoning =
//! `thoughtsTokenCount`; cache read = `cachedContentTokenCount`; Gemini reports no cache write.

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::bytes::{nonempty, Once, Reader};
use super::{BodySummary, Classification, EffectiveKind, EventClass, StopHint};
use crate::wire::usage::GeminiUsage as Usage;
use crate::wire::{is_object, nonempty_str, raw_text, JsonStr};

/// Classifies one Gemini chunk (the SSE `data`).
pub(super) fn classify(data: &str) -> Classification {
    let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data) else {
        return Classification::of(EventClass::Envelope);
    };
    decide(
        chunk.candidates.map(|c| c.0).unwrap_or_default(),
        chunk.usage_metadata,
        prompt_blocked(chunk.prompt_feedback),
        is_object(chunk.error),
    )
}

/// A chunk's class from what both paths read: what its candidates carried, its usage, whether
/// its prompt was blocked, whether it is an error object.
fn decide(seen: Seen, usage: Option<Usage>, blocked: bool, error: bool) -> Classification {
    let usage = usage.map(Usage::report);
    if error {
        return Classification {
            class: EventClass::TerminalError,
            usage,
            stop: None,
            terminal_frame: true,
            output: None,
        };
    }
    let output = seen.output.kind();
    let end = if seen.candidates > 0 {
        // With several candidates the stream ends when all of those sent have finished.
        seen.finish.filter(|_| seen.finished == seen.candidates)
    } else {
        blocked.then_some(Finish::Filtered)
    };
    match end {
        None => Classification {
            usage,
            ..Classification::of(output.map_or(EventClass::Envelope, EventClass::Effective))
        },
        Some(finish) => Classification {
            class: finish.class(),
            usage,
            stop: finish.hint(),
            terminal_frame: true,
            output,
        },
    }
}

/// The byte path (see [`super::bytes`]): the same classification as [`classify`] from one pass
/// without serde (the `usageMetadata` every chunk repeats is read by serde from its own text);
/// `None` for an `error`, a finish reason with escapes, and whatever the reader leaves to the
/// full parse.
pub(super) fn quick(data: &str) -> Option<Classification> {
    let mut fields = Once::default();
    let mut seen = Seen::default();
    let mut usage = None;
    let mut blocked = false;
    Reader::document(data, |r, key| match key {
        "candidates" => {
            fields.first(0)?;
            if r.null()? {
                return Some(());
            }
            r.array(|r| quick_candidate(r, &mut seen))
        }
        "usageMetadata" => {
            fields.first(1)?;
            if !r.null()? {
                let raw = r.raw()?.filter(|raw| raw.starts_with('{'))?;
                usage = Some(serde_json::from_str::<Usage>(raw).ok()?);
            }
            Some(())
        }
        "promptFeedback" => {
            fields.first(2)?;
            if r.null()? {
                return Some(());
            }
            let mut once = Once::default();
            r.object(|r, key| match key {
                "blockReason" => {
                    once.first(0)?;
                    blocked = nonempty(r.raw()?);
                    Some(())
                }
                _ => r.skip(),
            })
        }
        "error" => {
            fields.first(3)?;
            r.null()?.then_some(())
        }
        _ => r.skip(),
    })?;
    Some(decide(seen, usage, blocked, false))
}

/// One `candidates[]` element, for [`quick`].
fn quick_candidate(r: &mut Reader<'_>, seen: &mut Seen) -> Option<()> {
    let mut fields = Once::default();
    let mut reason = None;
    let mut out = Output::default();
    r.object(|r, key| match key {
        "content" => {
            fields.first(0)?;
            if r.null()? {
                return Some(());
            }
            let mut once = Once::default();
            r.object(|r, key| match key {
                "parts" => {
                    once.first(0)?;
                    if r.null()? {
                        return Some(());
                    }
                    r.array(|r| quick_part(r, &mut out))
                }
                _ => r.skip(),
            })
        }
        "finishReason" => {
            fields.first(1)?;
            if r.null()? {
                return Some(());
            }
            let (raw, escaped) = r.string_value()?;
            if escaped {
                return None;
            }
            reason = Some(raw.get(1..raw.len() - 1)?);
            Some(())
        }
        _ => r.skip(),
    })?;
    seen.candidates = seen.candidates.saturating_add(1);
    if let Some(reason) = reason {
        seen.finished = seen.finished.saturating_add(1);
        let finish = Finish::of(reason);
        seen.finish = Some(seen.finish.map_or(finish, |f| f.max(finish)));
    }
    seen.output.merge(out);
    Some(())
}

/// One `parts[]` element, for [`quick`].
fn quick_part(r: &mut Reader<'_>, out: &mut Output) -> Option<()> {
    let mut fields = Once::default();
    let mut p = PartText::default();
    r.object(|r, key| {
        let (bit, field) = match key {
            "text" => (0, &mut p.text),
            "thought" => (1, &mut p.thought),
            "functionCall" => (2, &mut p.function_call),
            "inlineData" => (3, &mut p.inline_data),
            "executableCode" => (4, &mut p.executable_code),
            "codeExecutionResult" => (5, &mut p.code_execution_result),
            _ => return r.skip(),
        };
        fields.first(bit)?;
        *field = r.raw()?;
        Some(())
    })?;
    p.fold_into(out);
    Some(())
}

/// Summarises a non-streamed `GenerateContentResponse` (or an error body).
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
        .usage_metadata
        .and_then(|raw| serde_json::from_str::<Usage>(raw.get()).ok())
    {
        summary.usage = usage.report();
    }
    let seen = parsed
        .candidates
        .and_then(|raw| serde_json::from_str::<Candidates>(raw.get()).ok())
        .map(|c| c.0)
        .unwrap_or_default();
    summary.has_text = seen.output.text;
    let finish = match seen.finish {
        Some(f) => Some(f),
        None if seen.candidates == 0 => {
            let feedback = parsed
                .prompt_feedback
                .and_then(|raw| serde_json::from_str::<PromptFeedback<'_>>(raw.get()).ok());
            prompt_blocked(feedback).then_some(Finish::Filtered)
        }
        None => None,
    };
    if let Some(f) = finish {
        summary.stop = f.hint();
        summary.error |= f == Finish::Failed;
    }
    summary
}

fn prompt_blocked(feedback: Option<PromptFeedback<'_>>) -> bool {
    feedback.is_some_and(|f| nonempty_str(f.block_reason))
}

/// How a candidate finished, in increasing order of how badly: with several candidates the worst
/// decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Finish {
    /// `STOP`: a natural stop or a stop sequence (a tool call ends this way too).
    Stop,
    /// `MAX_TOKENS`.
    Length,
    /// Every other reason: the safety and policy family (`SAFETY`, `RECITATION`, `LANGUAGE`,
    /// `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, `IMAGE_*`, `MODEL_ARMOR`), `OTHER`, and reasons
    /// this table does not know yet: Google's non-normal ends are blocks.
    Filtered,
    /// The model's tool call could not be used (`MALFORMED_FUNCTION_CALL`,
    /// `UNEXPECTED_TOOL_CALL`, `TOO_MANY_TOOL_CALLS`): there is no valid answer to act on, so it
    /// is an upstream error (a read-ahead before any output may fail over), not a filter.
    Failed,
}

impl Finish {
    fn of(reason: &str) -> Finish {
        match reason {
            "STOP" => Finish::Stop,
            "MAX_TOKENS" => Finish::Length,
            "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "TOO_MANY_TOOL_CALLS" => {
                Finish::Failed
            }
            _ => Finish::Filtered,
        }
    }

    fn class(self) -> EventClass {
        match self {
            Finish::Stop => EventClass::TerminalOk,
            Finish::Length | Finish::Filtered => EventClass::TerminalIncomplete,
            Finish::Failed => EventClass::TerminalError,
        }
    }

    fn hint(self) -> Option<StopHint> {
        match self {
            Finish::Stop => Some(StopHint::Complete),
            Finish::Length => Some(StopHint::Length),
            Finish::Filtered => Some(StopHint::ContentFilter),
            Finish::Failed => None,
        }
    }
}

// === output seen in one chunk ===

/// Which kinds of non-empty output the parts of a chunk carried.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Output {
    text: bool,
    tool_args: bool,
    reasoning: bool,
    other: bool,
}

impl Output {
    fn merge(&mut self, other: Output) {
        self.text |= other.text;
        self.tool_args |= other.tool_args;
        self.reasoning |= other.reasoning;
        self.other |= other.other;
    }

    /// Visible text wins, then a tool call, then reasoning, then other output.
    fn kind(self) -> Option<EffectiveKind> {
        if self.text {
            Some(EffectiveKind::Text)
        } else if self.tool_args {
            Some(EffectiveKind::ToolArgs)
        } else if self.reasoning {
            Some(EffectiveKind::Reasoning)
        } else if self.other {
            Some(EffectiveKind::Other)
        } else {
            None
        }
    }
}

/// What all `candidates` of a chunk carried, folded while parsing (no `Vec`).
#[derive(Debug, Default)]
struct Seen {
    output: Output,
    candidates: u32,
    finished: u32,
    finish: Option<Finish>,
}

// === wire shapes (only the fields classification reads) ===

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    candidates: Option<Candidates>,
    usage_metadata: Option<Usage>,
    #[serde(borrow)]
    prompt_feedback: Option<PromptFeedback<'a>>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback<'a> {
    #[serde(borrow)]
    block_reason: Option<&'a RawValue>,
}

struct Candidates(Seen);

impl<'de> Deserialize<'de> for Candidates {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CandidatesVisitor;

        impl<'de> Visitor<'de> for CandidatesVisitor {
            type Value = Candidates;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of candidates")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Candidates, A::Error> {
                let mut seen = Seen::default();
                while let Some(candidate) = seq.next_element::<Candidate<'de>>()? {
                    seen.candidates = seen.candidates.saturating_add(1);
                    if let Some(reason) = candidate.finish_reason {
                        seen.finished = seen.finished.saturating_add(1);
                        let finish = Finish::of(&reason);
                        seen.finish = Some(seen.finish.map_or(finish, |f| f.max(finish)));
                    }
                    if let Some(parts) = candidate.content.and_then(|c| c.parts) {
                        seen.output.merge(parts.0);
                    }
                }
                Ok(Candidates(seen))
            }
        }

        deserializer.deserialize_seq(CandidatesVisitor)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    content: Option<Content>,
    #[serde(borrow)]
    finish_reason: Option<JsonStr<'a>>,
}

#[derive(Deserialize)]
struct Content {
    parts: Option<Parts>,
}

/// The parts of one candidate's content, folded while parsing.
struct Parts(Output);

impl<'de> Deserialize<'de> for Parts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PartsVisitor;

        impl<'de> Visitor<'de> for PartsVisitor {
            type Value = Parts;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of parts")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Parts, A::Error> {
                let mut out = Output::default();
                while let Some(part) = seq.next_element::<Part<'de>>()? {
                    PartText {
                        text: raw_text(part.text),
                        thought: raw_text(part.thought),
                        function_call: raw_text(part.function_call),
                        inline_data: raw_text(part.inline_data),
                        executable_code: raw_text(part.executable_code),
                        code_execution_result: raw_text(part.code_execution_result),
                    }
                    .fold_into(&mut out);
                }
                Ok(Parts(out))
            }
        }

        deserializer.deserialize_seq(PartsVisitor)
    }
}

/// A part's fields as raw JSON text, as both paths read them.
#[derive(Default)]
struct PartText<'a> {
    text: Option<&'a str>,
    thought: Option<&'a str>,
    function_call: Option<&'a str>,
    inline_data: Option<&'a str>,
    executable_code: Option<&'a str>,
    code_execution_result: Option<&'a str>,
}

impl PartText<'_> {
    fn fold_into(&self, out: &mut Output) {
        let object = |v: Option<&str>| v.is_some_and(|t| t.starts_with('{'));
        if nonempty(self.text) {
            // `thought` is read from its raw text so an odd value never costs the event its
            // class.
            if self.thought == Some("true") {
                out.reasoning = true;
            } else {
                out.text = true;
            }
        }
        out.tool_args |= object(self.function_call);
        out.other |= object(self.inline_data)
            || object(self.executable_code)
            || object(self.code_execution_result);
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thought: Option<&'a RawValue>,
    #[serde(borrow)]
    function_call: Option<&'a RawValue>,
    #[serde(borrow)]
    inline_data: Option<&'a RawValue>,
    #[serde(borrow)]
    executable_code: Option<&'a RawValue>,
    #[serde(borrow)]
    code_execution_result: Option<&'a RawValue>,
}

/// A non-streamed body: its parts are parsed one by one, so an odd `candidates` never hides
/// usage.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    #[serde(borrow)]
    candidates: Option<&'a RawValue>,
    #[serde(borrow)]
    usage_metadata: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt_feedback: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{classify_body, classify_event};
    use crate::sse::{SseItem, SseScanner};
    use crate::usage::{UsageAcc, UsageReport};
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
                out.push(classify_event(Dialect::Gemini, event, data));
            }
        });
        assert!(!scanner.finish());
        out
    }

    /// A thinking model's stream (`includeThoughts`) as the generativelanguage API frames it:
    /// `data: {json}\r\n\r\n`, `usageMetadata` on every chunk, the last text riding on the
    /// chunk with `finishReason`.
    const THINKING: &str = concat!(
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"**Weighing the question**\\n\\nThe user wants\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 12,\"totalTokenCount\": 60,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 12}],\"thoughtsTokenCount\": 48},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"8hW3aNqLHMSe1dkPw9_Y4QY\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hello\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 12,\"candidatesTokenCount\": 1,\"totalTokenCount\": 61,\"thoughtsTokenCount\": 48},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"8hW3aNqLHMSe1dkPw9_Y4QY\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" there \\\"friend\\\".\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 12,\"candidatesTokenCount\": 5,\"totalTokenCount\": 65,\"thoughtsTokenCount\": 48},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"8hW3aNqLHMSe1dkPw9_Y4QY\"}\r\n\r\n",
    );

    #[test]
    fn a_thinking_stream_classifies_row_by_row_and_ends_on_its_finish_reason() {
        let got = classify_stream(THINKING);
        let classes: Vec<_> = got.iter().map(|c| c.class).collect();
        assert_eq!(
            classes,
            [
                effective(EffectiveKind::Reasoning),
                effective(EffectiveKind::Text),
                EventClass::TerminalOk,
            ]
        );
        assert_eq!(got[2].output, Some(EffectiveKind::Text));
        assert_eq!(got[2].effective(), Some(EffectiveKind::Text));
        assert_eq!(got[2].stop, Some(StopHint::Complete));
        assert!(got[2].terminal_frame);
        assert!(got[..2]
            .iter()
            .all(|c| !c.terminal_frame && c.output.is_none()));
        // Thoughts are outside candidatesTokenCount: output counts both, never one twice.
        assert_eq!(
            got[0].usage,
            Some(UsageReport {
                input: Some(12),
                output: Some(48),
                cache_read: None,
                cache_write: None,
                cache_write_1h: None,
                reasoning: Some(48),
            })
        );
        let mut acc = UsageAcc::new(Dialect::Gemini);
        for usage in got.iter().filter_map(|c| c.usage) {
            acc.apply(&usage);
        }
        let t = acc.tokens();
        assert_eq!(
            (t.input, t.output, t.reasoning, t.cache_read),
            (Some(12), Some(53), Some(48), None)
        );
    }

    #[test]
    fn prompt_tokens_already_include_the_cache_and_tool_prompts_are_added() {
        let c = classify(
            r#"{"candidates":[{"content":{"parts":[{"text":"x"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":1000,"cachedContentTokenCount":800,"toolUsePromptTokenCount":30,"candidatesTokenCount":7,"totalTokenCount":1037}}"#,
        );
        assert_eq!(
            c.usage,
            Some(UsageReport {
                input: Some(1030),
                output: Some(7),
                cache_read: Some(800),
                cache_write: None,
                cache_write_1h: None,
                reasoning: None,
            })
        );
        let mut acc = UsageAcc::new(Dialect::Gemini);
        acc.apply(&c.usage.unwrap());
        assert_eq!(acc.tokens().input, Some(1030), "no cache added back");
        // A chunk without usageMetadata reports nothing; one without counts reports absent.
        assert_eq!(classify(r#"{"candidates":[]}"#).usage, None);
        assert_eq!(
            classify(r#"{"usageMetadata":{"totalTokenCount":3}}"#).usage,
            Some(UsageReport::default())
        );
    }

    #[test]
    fn every_part_kind_is_effective_only_when_it_carries_something() {
        let part = |p: &str| {
            class(&format!(
                r#"{{"candidates":[{{"content":{{"parts":[{p}],"role":"model"}},"index":0}}]}}"#
            ))
        };
        assert_eq!(part(r#"{"text":"Hi"}"#), effective(EffectiveKind::Text));
        assert_eq!(part(r#"{"text":"\n"}"#), effective(EffectiveKind::Text));
        assert_eq!(part(r#"{"text":""}"#), EventClass::Envelope);
        assert_eq!(
            part(r#"{"text":"hm","thought":true}"#),
            effective(EffectiveKind::Reasoning)
        );
        assert_eq!(part(r#"{"text":"","thought":true}"#), EventClass::Envelope);
        assert_eq!(
            part(r#"{"text":"Hi","thought":false}"#),
            effective(EffectiveKind::Text)
        );
        assert_eq!(
            part(r#"{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}"#),
            effective(EffectiveKind::ToolArgs)
        );
        assert_eq!(
            part(r#"{"functionCall":{"name":"now","args":{}},"thoughtSignature":"CqQB"}"#),
            effective(EffectiveKind::ToolArgs)
        );
        for other in [
            r#"{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}}"#,
            r#"{"executableCode":{"language":"PYTHON","code":"print(1)"}}"#,
            r#"{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"1\n"}}"#,
        ] {
            assert_eq!(part(other), effective(EffectiveKind::Other), "{other}");
        }
        assert_eq!(part(r#"{"thoughtSignature":"CqQB"}"#), EventClass::Envelope);
        // Several kinds in one event: the most answer-like names it.
        assert_eq!(
            part(r#"{"text":"hm","thought":true},{"text":"Hi"}"#),
            effective(EffectiveKind::Text)
        );
        assert_eq!(
            part(r#"{"text":"hm","thought":true},{"functionCall":{"name":"f","args":{}}}"#),
            effective(EffectiveKind::ToolArgs)
        );
    }

    #[test]
    fn finish_reasons_map_to_terminal_classes_and_stop_hints() {
        let end = |reason: &str| {
            let c = classify(&format!(
                r#"{{"candidates":[{{"content":{{"parts":[{{"text":""}}],"role":"model"}},"finishReason":"{reason}","index":0}}]}}"#
            ));
            assert!(c.terminal_frame, "{reason}");
            (c.class, c.stop)
        };
        assert_eq!(
            end("STOP"),
            (EventClass::TerminalOk, Some(StopHint::Complete))
        );
        assert_eq!(
            end("MAX_TOKENS"),
            (EventClass::TerminalIncomplete, Some(StopHint::Length))
        );
        for filtered in [
            "SAFETY",
            "RECITATION",
            "LANGUAGE",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
            "IMAGE_SAFETY",
            "OTHER",
            "SOMETHING_NEW",
        ] {
            assert_eq!(
                end(filtered),
                (
                    EventClass::TerminalIncomplete,
                    Some(StopHint::ContentFilter)
                ),
                "{filtered}"
            );
        }
        for failed in [
            "MALFORMED_FUNCTION_CALL",
            "UNEXPECTED_TOOL_CALL",
            "TOO_MANY_TOOL_CALLS",
        ] {
            assert_eq!(end(failed), (EventClass::TerminalError, None), "{failed}");
        }
    }

    #[test]
    fn with_several_candidates_the_stream_ends_when_all_have_finished_and_the_worst_decides() {
        let c = classify(
            r#"{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP","index":0},{"content":{"parts":[{"text":"b"}]},"index":1}]}"#,
        );
        assert_eq!(c.class, effective(EffectiveKind::Text));
        assert!(!c.terminal_frame);
        let c = classify(
            r#"{"candidates":[{"content":{"parts":[]},"finishReason":"STOP","index":0},{"finishReason":"SAFETY","index":1}]}"#,
        );
        assert_eq!(
            (c.class, c.stop),
            (
                EventClass::TerminalIncomplete,
                Some(StopHint::ContentFilter)
            )
        );
    }

    #[test]
    fn a_blocked_prompt_without_candidates_is_a_filtered_end() {
        let c = classify(
            r#"{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[{"category":"HARM_CATEGORY_HARASSMENT","probability":"HIGH"}]},"usageMetadata":{"promptTokenCount":8,"totalTokenCount":8},"modelVersion":"gemini-2.5-flash"}"#,
        );
        assert_eq!(
            c,
            Classification {
                class: EventClass::TerminalIncomplete,
                usage: Some(UsageReport {
                    input: Some(8),
                    ..UsageReport::default()
                }),
                stop: Some(StopHint::ContentFilter),
                terminal_frame: true,
                output: None,
            }
        );
        // Feedback that blocks nothing is an envelope.
        assert_eq!(
            class(r#"{"promptFeedback":{"safetyRatings":[]}}"#),
            EventClass::Envelope
        );
    }

    #[test]
    fn an_in_stream_error_is_a_terminal_error_and_the_last_frame() {
        let stream = concat!(
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hel\"}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n",
            "data: {\"error\": {\"code\": 429,\"message\": \"Resource has been exhausted (e.g. check quota).\",\"status\": \"RESOURCE_EXHAUSTED\"}}\r\n\r\n",
        );
        let got = classify_stream(stream);
        assert_eq!(got[0].class, effective(EffectiveKind::Text));
        assert_eq!(
            got[1],
            Classification {
                class: EventClass::TerminalError,
                usage: None,
                stop: None,
                terminal_frame: true,
                output: None,
            }
        );
        assert_eq!(class(r#"{"error":null}"#), EventClass::Envelope);
    }

    #[test]
    fn unparseable_data_and_unknown_shapes_are_envelopes() {
        assert_eq!(
            classify("{\"candidates\": [{\"content\": {\"par"),
            Classification::of(EventClass::Envelope)
        );
        assert_eq!(class("[{\"candidates\":[]}]"), EventClass::Envelope);
        assert_eq!(class(r#"{"modelVersion":"x"}"#), EventClass::Envelope);
    }

    // --- non-streamed bodies ---

    #[test]
    fn a_whole_answer_gives_usage_stop_and_text() {
        let body = br#"{"candidates": [{"content": {"parts": [{"text": "hm","thought": true},{"text": "Hello!"}],"role": "model"},"finishReason": "MAX_TOKENS","index": 0}],"usageMetadata": {"promptTokenCount": 40,"candidatesTokenCount": 6,"cachedContentTokenCount": 32,"thoughtsTokenCount": 20,"totalTokenCount": 66},"modelVersion": "gemini-2.5-flash","responseId": "x"}"#;
        assert_eq!(
            classify_body(Dialect::Gemini, body),
            BodySummary {
                usage: UsageReport {
                    input: Some(40),
                    output: Some(26),
                    cache_read: Some(32),
                    cache_write: None,
                    cache_write_1h: None,
                    reasoning: Some(20),
                },
                stop: Some(StopHint::Length),
                error: false,
                has_text: true,
                json: true,
            }
        );
    }

    #[test]
    fn whole_answers_that_are_thoughts_only_blocked_or_failed_say_so() {
        let s = body(br#"{"candidates":[{"content":{"parts":[{"text":"hm","thought":true}]},"finishReason":"STOP"}]}"#);
        assert!(!s.has_text);
        assert_eq!(s.stop, Some(StopHint::Complete));
        let s = body(br#"{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":5,"totalTokenCount":5}}"#);
        assert_eq!(s.stop, Some(StopHint::ContentFilter));
        assert_eq!(s.usage.input, Some(5));
        let s =
            body(br#"{"candidates":[{"content":{},"finishReason":"MALFORMED_FUNCTION_CALL"}]}"#);
        assert!(s.error);
        assert_eq!(s.stop, None);
    }

    #[test]
    fn an_error_body_is_an_error() {
        let s = body(br#"{"error": {"code": 400,"message": "API key not valid. Please pass a valid API key.","status": "INVALID_ARGUMENT"}}"#);
        assert!(s.error);
        assert_eq!(body(b"{"), BodySummary::default());
    }
}
