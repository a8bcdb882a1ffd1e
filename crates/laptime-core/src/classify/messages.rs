//! Anthropic Messages (`streaming-protocols.md` §3.1): `event: <name>` and
//! `data: {"type":"<name>",…}` with the same string. Classification reads the JSON `type` and
//! falls back to the SSE event name only when the JSON has none.
//!
//! Flow: `message_start` (input usage) → per block `content_block_start`,
//! `content_block_delta`*, `content_block_stop` → `message_delta` (cumulative usage, stop
//! reason) → `message_stop`. `ping` may come anywhere; `error` may come after HTTP 200 and is
//! the last frame (no `message_stop` follows it). Unknown event types are envelopes (the
//! versioning policy allows new ones).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::bytes::{nonempty, Once, Reader};
use super::quick_usage;
use super::{BodySummary, Classification, EffectiveKind, EventClass, StopHint};
use crate::wire::usage::MessagesUsage;
use crate::wire::{is_object, nonempty_str, raw_text, JsonStr};

/// Classifies one Messages event.
pub(super) fn classify(event: Option<&str>, data: &str) -> Classification {
    let Ok(ev) = serde_json::from_str::<Event<'_>>(data) else {
        return Classification::of(EventClass::Envelope);
    };
    let delta = ev.delta.as_ref().map(Delta::text);
    decide(
        ev.kind.as_deref().or(event).unwrap_or_default(),
        ev.message.and_then(|m| m.usage),
        ev.content_block
            .is_some_and(|b| b.kind.as_deref() == Some("redacted_thinking")),
        delta.as_ref(),
        ev.usage,
    )
}

/// An event's class from what both paths read: its type, `message.usage`, whether its
/// `content_block` is `redacted_thinking`, its `delta` and its `usage`.
fn decide(
    kind: &str,
    message_usage: Option<MessagesUsage>,
    redacted_block: bool,
    delta: Option<&DeltaText<'_>>,
    usage: Option<MessagesUsage>,
) -> Classification {
    match kind {
        "content_block_delta" => {
            let class = delta
                .and_then(DeltaText::effective)
                .map_or(EventClass::Envelope, EventClass::Effective);
            Classification::of(class)
        }
        "ping" => Classification::of(EventClass::Heartbeat),
        "message_start" => Classification {
            usage: message_usage.map(MessagesUsage::report),
            ..Classification::of(EventClass::Envelope)
        },
        "content_block_start" => {
            // `redacted_thinking` arrives whole here: opaque reasoning. Server-tool result
            // blocks also arrive whole, but they are tool output.
            Classification::of(if redacted_block {
                EventClass::Effective(EffectiveKind::Reasoning)
            } else {
                EventClass::Envelope
            })
        }
        "message_delta" => Classification {
            usage: usage.map(MessagesUsage::report),
            stop: delta.and_then(|d| d.stop_reason).map(stop_hint),
            ..Classification::of(EventClass::Envelope)
        },
        "message_stop" => Classification {
            terminal_frame: true,
            ..Classification::of(EventClass::TerminalOk)
        },
        "error" => Classification {
            terminal_frame: true,
            ..Classification::of(EventClass::TerminalError)
        },
        _ => Classification::of(EventClass::Envelope),
    }
}

/// The byte path (see [`super::bytes`]): the same classification as [`classify`] from one pass
/// without serde; `None` for a `message` or `content_block` object (`message_start`,
/// `content_block_start`: once per message or block) and whatever the reader leaves to the full
/// parse.
pub(super) fn quick<'a>(event: Option<&'a str>, data: &'a str) -> Option<Classification> {
    let mut fields = Once::default();
    let mut kind = None;
    let mut delta = None;
    let mut usage = None;
    Reader::document(data, |r, key| match key {
        "type" => {
            fields.first(0)?;
            kind = r.plain_str()?;
            Some(())
        }
        "message" => {
            fields.first(1)?;
            r.null()?.then_some(())
        }
        "content_block" => {
            fields.first(2)?;
            r.null()?.then_some(())
        }
        "delta" => {
            fields.first(3)?;
            if !r.null()? {
                delta = Some(quick_delta(r)?);
            }
            Some(())
        }
        "usage" => {
            fields.first(4)?;
            if !r.null()? {
                usage = Some(r.strict_or(quick_usage::messages)?);
            }
            Some(())
        }
        _ => r.skip(),
    })?;
    Some(decide(
        kind.or(event).unwrap_or_default(),
        None,
        false,
        delta.as_ref(),
        usage,
    ))
}

/// A `delta` object, for [`quick`].
fn quick_delta<'a>(r: &mut Reader<'a>) -> Option<DeltaText<'a>> {
    let mut fields = Once::default();
    let mut d = DeltaText::default();
    r.object(|r, key| {
        let (bit, field) = match key {
            "type" => {
                fields.first(0)?;
                d.kind = r.plain_str()?;
                return Some(());
            }
            "stop_reason" => {
                fields.first(1)?;
                d.stop_reason = r.plain_str()?;
                return Some(());
            }
            "text" => (2, &mut d.text),
            "thinking" => (3, &mut d.thinking),
            "partial_json" => (4, &mut d.partial_json),
            "content" => (5, &mut d.content),
            _ => return r.skip(),
        };
        fields.first(bit)?;
        *field = r.raw()?;
        Some(())
    })?;
    Some(d)
}

/// `stop_reason` → stop hint: `max_tokens` and `model_context_window_exceeded` are cut short,
/// `refusal` is a refusal, the rest (`end_turn`, `stop_sequence`, `tool_use`, `pause_turn`,
/// `compaction`, unknown) are normal stops.
fn stop_hint(reason: &str) -> StopHint {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => StopHint::Length,
        "refusal" => StopHint::Refusal,
        _ => StopHint::Complete,
    }
}

/// Summarises a non-streamed `message` (or an error body).
pub(super) fn body(body: &[u8]) -> BodySummary {
    let Ok(parsed) = serde_json::from_slice::<Body<'_>>(body) else {
        return BodySummary::default();
    };
    let mut summary = BodySummary {
        json: true,
        error: parsed.kind.as_deref() == Some("error") || is_object(parsed.error),
        stop: parsed.stop_reason.as_deref().map(stop_hint),
        ..BodySummary::default()
    };
    if let Some(usage) = parsed
        .usage
        .and_then(|raw| serde_json::from_str::<MessagesUsage>(raw.get()).ok())
    {
        summary.usage = usage.report();
    }
    summary.has_text = parsed
        .content
        .and_then(|raw| serde_json::from_str::<Vec<Block<'_>>>(raw.get()).ok())
        .unwrap_or_default()
        .iter()
        .any(|block| block.kind.as_deref() == Some("text") && nonempty_str(block.text));
    summary
}

/// The byte path for a whole answer (see [`super::bytes`]): the summary [`body`] gives, from
/// one pass without serde, or `None` where [`body`] must decide (a content block of an odd
/// shape, an escaped `type` or stop reason, a duplicate field, JSON the reader does not read).
/// A body it decides is valid JSON.
pub(super) fn quick_body(body: &str) -> Option<BodySummary> {
    let mut fields = Once::default();
    let mut kind = None;
    let mut summary = BodySummary {
        json: true,
        ..BodySummary::default()
    };
    Reader::document(body, |r, key| match key {
        "type" => {
            fields.first(0)?;
            kind = r.plain_str()?;
            Some(())
        }
        "error" => {
            fields.first(1)?;
            summary.error |= r.is_object()?;
            Some(())
        }
        "stop_reason" => {
            fields.first(2)?;
            summary.stop = r.plain_str()?.map(stop_hint);
            Some(())
        }
        "content" => {
            fields.first(3)?;
            if r.null()? {
                return Some(());
            }
            r.array(|r| {
                summary.has_text |= r.text_of_kind("text")?;
                Some(())
            })
        }
        "usage" => {
            fields.first(4)?;
            if let Some(usage) = r.lenient_or(quick_usage::messages)? {
                summary.usage = usage.report();
            }
            Some(())
        }
        _ => r.skip(),
    })?;
    summary.error |= kind == Some("error");
    Some(summary)
}

// === wire shapes (only the fields classification reads) ===

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<JsonStr<'a>>,
    message: Option<Message>,
    #[serde(borrow)]
    content_block: Option<Block<'a>>,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    usage: Option<MessagesUsage>,
}

#[derive(Deserialize)]
struct Message {
    usage: Option<MessagesUsage>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<JsonStr<'a>>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

/// Both delta shapes: a `content_block_delta`'s (`type` + its string) and a `message_delta`'s
/// (`stop_reason`).
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<JsonStr<'a>>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow)]
    partial_json: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    stop_reason: Option<JsonStr<'a>>,
}

impl Delta<'_> {
    fn text(&self) -> DeltaText<'_> {
        DeltaText {
            kind: self.kind.as_deref(),
            text: raw_text(self.text),
            thinking: raw_text(self.thinking),
            partial_json: raw_text(self.partial_json),
            content: raw_text(self.content),
            stop_reason: self.stop_reason.as_deref(),
        }
    }
}

/// A delta's fields as both paths read them (strings as raw JSON text).
#[derive(Default)]
struct DeltaText<'a> {
    kind: Option<&'a str>,
    text: Option<&'a str>,
    thinking: Option<&'a str>,
    partial_json: Option<&'a str>,
    content: Option<&'a str>,
    stop_reason: Option<&'a str>,
}

impl DeltaText<'_> {
    /// The kind of a content-block delta whose string is non-empty. `signature_delta`,
    /// `citations_delta` and unknown delta types are envelopes.
    fn effective(&self) -> Option<EffectiveKind> {
        let (field, kind) = match self.kind? {
            "text_delta" => (self.text, EffectiveKind::Text),
            "thinking_delta" => (self.thinking, EffectiveKind::Reasoning),
            "input_json_delta" => (self.partial_json, EffectiveKind::ToolArgs),
            // Beta system summarisation.
            "compaction_delta" => (self.content, EffectiveKind::Other),
            _ => return None,
        };
        nonempty(field).then_some(kind)
    }
}

/// A non-streamed body: its parts are parsed one by one, so an odd `content` never hides usage.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<JsonStr<'a>>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    stop_reason: Option<JsonStr<'a>>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{classify_body, classify_event};
    use crate::sse::{SseItem, SseScanner};
    use crate::usage::UsageAcc;
    use crate::usage::UsageReport;
    use crate::Dialect;

    fn class(data: &str) -> EventClass {
        classify(None, data).class
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
                out.push(classify_event(Dialect::Messages, event, data));
            }
        });
        assert!(!scanner.finish());
        out
    }

    fn classes(stream: &str) -> Vec<EventClass> {
        classify_stream(stream).iter().map(|c| c.class).collect()
    }

    /// `tests/fixtures/fable-fallback/stream-a-refusal.sse` (anthropic-sdk-python), with its
    /// whitespace padding inside the JSON.
    const FABLE_REFUSAL: &str = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-fable-5\",\"id\":\"msg_fixture_a_0001\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"stop_details\":null,\"usage\":{\"input_tokens\":28,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"cache_creation\":{\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":0},\"output_tokens\":5,\"service_tier\":\"standard\",\"inference_geo\":\"global\"}}               }\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}  }\n\n",
        "event: ping\n",
        "data: {\"type\": \"ping\"}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Simple educ\"}             }\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\" me \\\"claudius\\\" — I'm Claude.\"}          }\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"\"}               }\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c3ludGhldGljLXNpZ25hdHVyZS1maXh0dXJlLWEtbm90LWEtcmVhbC1zaWduYXR1cmU=\"} }\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0  }\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"} }\n\n",
        "event: content_block_stop\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1      }\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\",\"stop_sequence\":null,\"stop_details\":{\"type\":\"refusal\",\"category\":null,\"explanation\":null,\"fallback_credit_token\":\"tok_synthetic_fixture_a\",\"fallback_has_prefill_claim\":true}},\"usage\":{\"input_tokens\":28,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":106,\"output_tokens_details\":{\"thinking_tokens\":67},\"iterations\":[{\"input_tokens\":28,\"output_tokens\":106,\"type\":\"message\"}]}    }\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"      }\n\n",
    );

    #[test]
    fn a_recorded_thinking_stream_with_padded_json_classifies_row_by_row() {
        let got = classify_stream(FABLE_REFUSAL);
        let classes: Vec<_> = got.iter().map(|c| c.class).collect();
        assert_eq!(
            classes,
            [
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Heartbeat,
                effective(EffectiveKind::Reasoning),
                effective(EffectiveKind::Reasoning),
                EventClass::Envelope, // the last thinking_delta is ""
                EventClass::Envelope, // signature_delta
                EventClass::Envelope,
                EventClass::Envelope,
                effective(EffectiveKind::Text),
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::TerminalOk,
            ]
        );
        assert_eq!(
            got[0].usage,
            Some(UsageReport {
                input: Some(28),
                output: Some(5),
                cache_read: Some(0),
                cache_write: Some(0),
                cache_write_1h: Some(0),
                reasoning: None,
            })
        );
        assert_eq!(got[11].stop, Some(StopHint::Refusal));
        assert_eq!(
            got[11].usage,
            Some(UsageReport {
                input: Some(28),
                output: Some(106),
                cache_read: Some(0),
                cache_write: Some(0),
                cache_write_1h: None,
                reasoning: Some(67),
            })
        );
        assert!(got[12].terminal_frame);
        assert!(got[..12].iter().all(|c| !c.terminal_frame));
    }

    #[test]
    fn an_empty_first_input_json_delta_is_an_envelope_and_later_fragments_are_tool_args() {
        // `tests/lib/streaming/fixtures/tool_use_response.txt`.
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_019Q1hrJbZG26Fb9BQhrkHEr\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-20250514\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":377,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1,\"service_tier\":\"standard\"}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: ping\ndata: {\"type\": \"ping\"}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"I'll check the current weather in Paris for you.\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01NRLabsLyVHZPKxbKvkfSMn\",\"name\":\"get_weather\",\"caller\":{\"type\":\"direct\"},\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"locati\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":65}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let got = classify_stream(stream);
        let classes: Vec<_> = got.iter().map(|c| c.class).collect();
        assert_eq!(
            classes,
            [
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Heartbeat,
                effective(EffectiveKind::Text),
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                effective(EffectiveKind::ToolArgs),
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::TerminalOk,
            ]
        );
        assert_eq!(got[9].stop, Some(StopHint::Complete));
        assert_eq!(
            got[9].usage,
            Some(UsageReport {
                output: Some(65),
                ..UsageReport::default()
            })
        );
    }

    #[test]
    fn message_delta_revises_input_tokens_and_the_last_value_wins() {
        // vercel-ai `anthropic-message-delta-input-tokens.chunks.txt` (JSONL, no event names).
        let lines = [
            r#"{"type":"message_start","message":{"content":[],"id":"msg_3196a1cc08de4d76b85b8f5777c0d42b","model":"claude-opus-4-5-20251101","role":"assistant","stop_reason":null,"stop_sequence":null,"type":"message","usage":{"input_tokens":43,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"text":"","type":"text"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"text":"p","type":"text_delta"}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"text":"ong","type":"text_delta"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":61,"output_tokens":2}}"#,
            r#"{"type":"message_stop"}"#,
        ];
        let stream: String = lines.iter().map(|l| format!("data: {l}\n\n")).collect();
        let got = classify_stream(&stream);
        assert_eq!(
            got.iter().map(|c| c.class).collect::<Vec<_>>(),
            [
                EventClass::Envelope,
                EventClass::Envelope,
                effective(EffectiveKind::Text),
                EventClass::Heartbeat,
                effective(EffectiveKind::Text),
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::TerminalOk,
            ]
        );
        assert_eq!(got[0].usage.and_then(|u| u.input), Some(43));
        assert_eq!(got[6].usage.and_then(|u| u.input), Some(61));
        let mut acc = UsageAcc::new(Dialect::Messages);
        for usage in got.iter().filter_map(|c| c.usage) {
            acc.apply(&usage);
        }
        assert_eq!(
            (acc.tokens().input, acc.tokens().output),
            (Some(61), Some(2))
        );
    }

    #[test]
    fn every_content_block_delta_type_is_effective_only_when_non_empty() {
        let rows = [
            ("text_delta", "text", effective(EffectiveKind::Text)),
            (
                "thinking_delta",
                "thinking",
                effective(EffectiveKind::Reasoning),
            ),
            (
                "input_json_delta",
                "partial_json",
                effective(EffectiveKind::ToolArgs),
            ),
            (
                "compaction_delta",
                "content",
                effective(EffectiveKind::Other),
            ),
        ];
        for (kind, field, want) in rows {
            let full = format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"{kind}","{field}":"x\n"}}}}"#
            );
            let empty = format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"{kind}","{field}":""}}}}"#
            );
            assert_eq!(class(&full), want, "{kind}");
            assert_eq!(class(&empty), EventClass::Envelope, "{kind} with \"\"");
        }
        assert_eq!(
            class(
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":null}}"#
            ),
            EventClass::Envelope
        );
    }

    #[test]
    fn signature_citations_and_unknown_deltas_are_envelopes() {
        for delta in [
            r#"{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}"#,
            r#"{"type":"citations_delta","citation":{"type":"char_location","cited_text":"x","document_index":0}}"#,
            r#"{"type":"future_delta","text":"x"}"#,
        ] {
            let data = format!(r#"{{"type":"content_block_delta","index":0,"delta":{delta}}}"#);
            assert_eq!(class(&data), EventClass::Envelope, "{delta}");
        }
    }

    #[test]
    fn content_block_start_is_an_envelope_except_redacted_thinking() {
        for block in [
            r#"{"type":"text","text":""}"#,
            r#"{"type":"thinking","thinking":"","signature":""}"#,
            r#"{"type":"tool_use","id":"toolu_1","name":"f","input":{}}"#,
            r#"{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}"#,
            r#"{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","title":"x","url":"https://x"}]}"#,
            r#"{"type":"compaction","content":null}"#,
        ] {
            let data =
                format!(r#"{{"type":"content_block_start","index":0,"content_block":{block}}}"#);
            assert_eq!(class(&data), EventClass::Envelope, "{block}");
        }
        assert_eq!(
            class(
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"}}"#
            ),
            effective(EffectiveKind::Reasoning)
        );
    }

    #[test]
    fn stop_reasons_map_to_stop_hints() {
        let stop = |reason: &str| {
            classify(
                None,
                &format!(
                    r#"{{"type":"message_delta","delta":{{"stop_reason":"{reason}","stop_sequence":null}},"usage":{{"output_tokens":6}}}}"#
                ),
            )
            .stop
        };
        assert_eq!(stop("end_turn"), Some(StopHint::Complete));
        assert_eq!(stop("tool_use"), Some(StopHint::Complete));
        assert_eq!(stop("stop_sequence"), Some(StopHint::Complete));
        assert_eq!(stop("pause_turn"), Some(StopHint::Complete));
        assert_eq!(stop("max_tokens"), Some(StopHint::Length));
        assert_eq!(
            stop("model_context_window_exceeded"),
            Some(StopHint::Length)
        );
        assert_eq!(stop("refusal"), Some(StopHint::Refusal));
        assert_eq!(
            classify(None, r#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":1}}"#).stop,
            None
        );
    }

    #[test]
    fn message_delta_usage_carries_every_field_it_sends() {
        let c = classify(
            None,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":42,"output_tokens_details":{"thinking_tokens":30},"server_tool_use":{"web_search_requests":1}}}"#,
        );
        assert_eq!(
            c.usage,
            Some(UsageReport {
                input: Some(10),
                output: Some(42),
                cache_read: Some(100),
                cache_write: Some(5),
                cache_write_1h: None,
                reasoning: Some(30),
            })
        );
        assert_eq!(c.class, EventClass::Envelope);
    }

    #[test]
    fn one_hour_cache_writes_are_read_apart_from_the_total() {
        let c = classify(
            None,
            r#"{"type":"message_start","message":{"usage":{"input_tokens":3,"cache_creation_input_tokens":1500,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":500,"ephemeral_1h_input_tokens":1000},"output_tokens":1}}}"#,
        );
        let usage = c.usage.unwrap();
        assert_eq!(
            (usage.cache_write, usage.cache_write_1h),
            (Some(1500), Some(1000))
        );
    }

    #[test]
    fn an_error_event_is_a_terminal_error_and_the_terminal_frame() {
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":11,\"output_tokens\":1}}}\n\n",
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"},\"request_id\":\"req_011CSHoEeqs5C35K2UUqR7Fy\"}\n\n",
        );
        let got = classify_stream(stream);
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
    }

    #[test]
    fn ping_is_a_heartbeat_and_unknown_events_are_envelopes() {
        assert_eq!(
            classify(Some("ping"), r#"{"type": "ping"}"#),
            Classification::of(EventClass::Heartbeat)
        );
        assert_eq!(
            classes("event: future_event\ndata: {\"type\":\"future_event\",\"text\":\"x\"}\n\n"),
            [EventClass::Envelope]
        );
    }

    #[test]
    fn without_a_json_type_the_sse_event_name_is_used() {
        assert_eq!(
            classify(Some("message_stop"), "{}").class,
            EventClass::TerminalOk
        );
        assert_eq!(
            classify(
                Some("content_block_delta"),
                r#"{"delta":{"type":"text_delta","text":"x"}}"#
            )
            .class,
            effective(EffectiveKind::Text)
        );
    }

    #[test]
    fn unparseable_data_is_an_envelope() {
        assert_eq!(
            classify(Some("message_stop"), "{\"type\":\"message_st"),
            Classification::of(EventClass::Envelope)
        );
    }

    // --- non-streamed bodies ---

    #[test]
    fn a_message_body_gives_usage_stop_and_text() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"hm","signature":"x"},{"type":"text","text":"Hello!"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":3,"cache_read_input_tokens":40,"output_tokens":6}}"#;
        assert_eq!(
            classify_body(Dialect::Messages, body),
            BodySummary {
                usage: UsageReport {
                    input: Some(12),
                    output: Some(6),
                    cache_read: Some(40),
                    cache_write: Some(3),
                    cache_write_1h: None,
                    reasoning: None,
                },
                stop: Some(StopHint::Length),
                error: false,
                has_text: true,
                json: true,
            }
        );
    }

    #[test]
    fn a_refusal_body_with_an_empty_text_block_has_no_text() {
        let b = br#"{"type":"message","content":[{"type":"text","text":""}],"stop_reason":"refusal","usage":{"input_tokens":5,"output_tokens":0}}"#;
        let s = body(b);
        assert_eq!(s.stop, Some(StopHint::Refusal));
        assert!(!s.has_text);
        assert_eq!(s.usage.output, Some(0));
    }

    #[test]
    fn an_error_body_is_an_error() {
        let s = body(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#);
        assert!(s.error);
        assert_eq!(s.stop, None);
        assert_eq!(body(b"{"), BodySummary::default());
    }
}
