//! OpenAI Responses (`streaming-protocols.md` §2.1): every event is a JSON object with a `type`
//! (OpenAI also sends it as the SSE `event:` name). Classification reads the JSON `type` and
//! falls back to the SSE event name only when the JSON has none.
//!
//! The terminal is a `response.*` lifecycle event (`completed`, `incomplete`, `failed`), which
//! also carries the usage; `[DONE]` is not relied on. Unknown types ending in `.delta` with a
//! non-empty string `delta` are effective output (forward compatibility for new tool kinds);
//! other unknown types are envelopes.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::bytes::{nonempty, Once, Reader};
use super::quick_usage;
use super::{BodySummary, Classification, EffectiveKind, EventClass, StopHint};
use crate::wire::usage::ResponsesUsage;
use crate::wire::{is_object, nonempty_str, raw_text, truthy, JsonStr};

/// Classifies one Responses event.
pub(super) fn classify(event: Option<&str>, data: &str) -> Classification {
    let Ok(ev) = serde_json::from_str::<Event<'_>>(data) else {
        return Classification::of(EventClass::Envelope);
    };
    let kind: &str = match (&ev.kind, event) {
        (Some(kind), _) => kind,
        (None, Some(name)) => name,
        (None, None) => {
            // A compatible server's bare `{"error":…}` (the Chat shape) still ends the stream.
            return if truthy(ev.error) {
                Classification::of(EventClass::TerminalError)
            } else {
                Classification::of(EventClass::Envelope)
            };
        }
    };
    decide(
        kind,
        raw_text(ev.delta),
        raw_text(ev.partial_image_b64),
        ev.response,
    )
}

/// The byte path (see [`super::bytes`]): the same classification as [`classify`] from one pass
/// without serde; `None` for an event with a `response` object (the lifecycle events, a few
/// per stream), one without a type, and whatever the reader leaves to the full parse.
pub(super) fn quick<'a>(event: Option<&'a str>, data: &'a str) -> Option<Classification> {
    let mut fields = Once::default();
    let mut kind = None;
    let mut delta = None;
    let mut partial_image = None;
    Reader::document(data, |r, key| match key {
        "type" => {
            fields.first(0)?;
            if !r.null()? {
                let (raw, escaped) = r.string_value()?;
                if escaped {
                    return None;
                }
                kind = Some(raw.get(1..raw.len() - 1)?);
            }
            Some(())
        }
        "delta" => {
            fields.first(1)?;
            delta = r.raw()?;
            Some(())
        }
        "partial_image_b64" => {
            fields.first(2)?;
            partial_image = r.raw()?;
            Some(())
        }
        "response" => {
            fields.first(3)?;
            r.null()?.then_some(())
        }
        // Read only when there is no type at all (left to the full parse).
        "error" => {
            fields.first(4)?;
            r.skip()
        }
        _ => r.skip(),
    })?;
    Some(decide(kind.or(event)?, delta, partial_image, None))
}

/// An event's class from what both paths read: its type, its `delta` and `partial_image_b64`
/// (raw JSON text) and its `response`.
fn decide(
    kind: &str,
    delta: Option<&str>,
    partial_image: Option<&str>,
    response: Option<Response<'_>>,
) -> Classification {
    let effective_if = |nonempty: bool, kind: EffectiveKind| {
        Classification::of(if nonempty {
            EventClass::Effective(kind)
        } else {
            EventClass::Envelope
        })
    };
    let delta = nonempty(delta);
    match kind {
        "response.output_text.delta" => effective_if(delta, EffectiveKind::Text),
        "response.refusal.delta" => effective_if(delta, EffectiveKind::Refusal),
        "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
            effective_if(delta, EffectiveKind::Reasoning)
        }
        "response.function_call_arguments.delta" | "response.mcp_call_arguments.delta" => {
            effective_if(delta, EffectiveKind::ToolArgs)
        }
        "response.custom_tool_call_input.delta" => effective_if(delta, EffectiveKind::ToolInput),
        "response.code_interpreter_call_code.delta"
        | "response.audio.delta"
        | "response.audio.transcript.delta"
        | "response.shell_call_command.delta" => effective_if(delta, EffectiveKind::Other),
        "response.image_generation_call.partial_image" => {
            effective_if(nonempty(partial_image), EffectiveKind::Other)
        }
        // Output of a tool the platform ran (stdout/stderr), not model output.
        "response.shell_call_output_content.delta" => Classification::of(EventClass::Envelope),
        "keepalive" => Classification::of(EventClass::Heartbeat),
        "response.completed" => terminal(EventClass::TerminalOk, response, None),
        "response.incomplete" => {
            let stop = response
                .as_ref()
                .and_then(|r| r.incomplete_details.as_ref())
                .and_then(|d| d.reason.as_deref())
                .and_then(incomplete_stop);
            terminal(EventClass::TerminalIncomplete, response, stop)
        }
        "response.failed" => terminal(EventClass::TerminalError, response, None),
        // Both shapes: flat `{"type":"error","code":…,"message":…}` and nested
        // `{"type":"error","error":{…}}`. Usually followed by `response.failed`, which is the
        // terminal frame.
        "error" => Classification::of(EventClass::TerminalError),
        other if other.ends_with(".delta") => effective_if(delta, EffectiveKind::Other),
        _ => Classification::of(EventClass::Envelope),
    }
}

/// A `response.*` terminal: the frame the timing comment goes before, with the response's usage.
fn terminal(
    class: EventClass,
    response: Option<Response<'_>>,
    stop: Option<StopHint>,
) -> Classification {
    Classification {
        class,
        usage: response.and_then(|r| r.usage).map(ResponsesUsage::report),
        stop,
        terminal_frame: true,
        output: None,
    }
}

/// `incomplete_details.reason` → stop hint.
fn incomplete_stop(reason: &str) -> Option<StopHint> {
    match reason {
        "max_output_tokens" => Some(StopHint::Length),
        "content_filter" => Some(StopHint::ContentFilter),
        _ => None,
    }
}

/// Summarises a non-streamed `response` object (or an error body).
pub(super) fn body(body: &[u8]) -> BodySummary {
    let Ok(parsed) = serde_json::from_slice::<Body<'_>>(body) else {
        return BodySummary::default();
    };
    let status = parsed.status.as_deref();
    let reason = parsed
        .incomplete_details
        .as_ref()
        .and_then(|d| d.reason.as_deref());
    let mut summary = BodySummary {
        json: true,
        error: is_object(parsed.error) || status == Some("failed"),
        stop: body_stop(status, reason),
        ..BodySummary::default()
    };
    if let Some(usage) = parsed
        .usage
        .and_then(|raw| serde_json::from_str::<ResponsesUsage>(raw.get()).ok())
    {
        summary.usage = usage.report();
    }
    summary.has_text = parsed
        .output
        .and_then(|raw| serde_json::from_str::<Vec<OutputItem<'_>>>(raw.get()).ok())
        .unwrap_or_default()
        .iter()
        .filter_map(|item| item.content)
        .filter_map(|raw| serde_json::from_str::<Vec<ContentPart<'_>>>(raw.get()).ok())
        .flatten()
        .any(|part| part.kind.as_deref() == Some("output_text") && nonempty_str(part.text));
    summary
}

/// A whole answer's stop, by its `status` and `incomplete_details.reason`.
fn body_stop(status: Option<&str>, reason: Option<&str>) -> Option<StopHint> {
    match status {
        Some("completed") => Some(StopHint::Complete),
        // A body has no terminal event to say "incomplete": an unknown reason is still a
        // cut-short answer.
        Some("incomplete") => Some(reason.and_then(incomplete_stop).unwrap_or(StopHint::Length)),
        _ => None,
    }
}

/// The byte path for a whole answer (see [`super::bytes`]): the summary [`body`] gives, from
/// one pass without serde, or `None` where [`body`] must decide (an output item or content
/// part of an odd shape, an escaped status, type or reason, a duplicate field, JSON the reader
/// does not read). A body it decides is valid JSON.
pub(super) fn quick_body(body: &str) -> Option<BodySummary> {
    let mut fields = Once::default();
    let (mut status, mut reason) = (None, None);
    let mut summary = BodySummary {
        json: true,
        ..BodySummary::default()
    };
    Reader::document(body, |r, key| match key {
        "status" => {
            fields.first(0)?;
            status = r.plain_str()?;
            Some(())
        }
        "incomplete_details" => {
            fields.first(1)?;
            if r.null()? {
                return Some(());
            }
            let mut details = Once::default();
            r.object(|r, key| match key {
                "reason" => {
                    details.first(0)?;
                    reason = r.plain_str()?;
                    Some(())
                }
                _ => r.skip(),
            })
        }
        "error" => {
            fields.first(2)?;
            summary.error = r.is_object()?;
            Some(())
        }
        "output" => {
            fields.first(3)?;
            if r.null()? {
                return Some(());
            }
            r.array(|r| quick_output_item(r, &mut summary.has_text))
        }
        "usage" => {
            fields.first(4)?;
            if let Some(usage) = r.lenient_or(quick_usage::responses)? {
                summary.usage = usage.report();
            }
            Some(())
        }
        _ => r.skip(),
    })?;
    summary.error |= status == Some("failed");
    summary.stop = body_stop(status, reason);
    Some(summary)
}

/// One `output[]` item of a whole answer, for [`quick_body`]: whether its content holds
/// non-empty `output_text`.
fn quick_output_item(r: &mut Reader<'_>, has_text: &mut bool) -> Option<()> {
    let mut fields = Once::default();
    r.object(|r, key| match key {
        "content" => {
            fields.first(0)?;
            if r.null()? {
                return Some(());
            }
            r.array(|r| {
                *has_text |= r.text_of_kind("output_text")?;
                Some(())
            })
        }
        _ => r.skip(),
    })
}

// === wire shapes (only the fields classification reads) ===

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<JsonStr<'a>>,
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    #[serde(borrow)]
    partial_image_b64: Option<&'a RawValue>,
    #[serde(borrow)]
    response: Option<Response<'a>>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Response<'a> {
    usage: Option<ResponsesUsage>,
    #[serde(borrow)]
    incomplete_details: Option<IncompleteDetails<'a>>,
}

#[derive(Deserialize)]
struct IncompleteDetails<'a> {
    #[serde(borrow)]
    reason: Option<JsonStr<'a>>,
}

/// A non-streamed body: its parts are parsed one by one, so an odd `output` never hides usage.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    status: Option<JsonStr<'a>>,
    #[serde(borrow)]
    incomplete_details: Option<IncompleteDetails<'a>>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    output: Option<&'a RawValue>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct OutputItem<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ContentPart<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<JsonStr<'a>>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{classify_body, classify_event};
    use crate::sse::{SseItem, SseScanner};
    use crate::usage::UsageReport;
    use crate::Dialect;

    fn class(data: &str) -> EventClass {
        classify(None, data).class
    }

    fn effective(kind: EffectiveKind) -> EventClass {
        EventClass::Effective(kind)
    }

    /// Scans a whole SSE stream and classifies each event, as the observer does.
    fn classify_stream(stream: &str) -> Vec<(String, Classification)> {
        let mut scanner = SseScanner::new();
        let mut out = Vec::new();
        scanner.feed(stream.as_bytes(), &mut |item| {
            if let SseItem::Event { event, data, .. } = item {
                let c = classify_event(Dialect::Responses, event, data);
                out.push((event.unwrap_or_default().to_owned(), c));
            }
        });
        assert!(!scanner.finish());
        out
    }

    /// `event: <type>` + `data: <json>` framing, as OpenAI sends it.
    fn sse(events: &[&str]) -> String {
        events
            .iter()
            .map(|data| {
                let v: serde_json::Value = serde_json::from_str(data).unwrap();
                format!("event: {}\ndata: {data}\n\n", v["type"].as_str().unwrap())
            })
            .collect()
    }

    const CREATED: &str = r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_05500b38c2cd9bfc00691c7c9d222481a3b595421266dab424","object":"response","created_at":1763474589,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-nano-2025-08-07","output":[],"parallel_tool_calls":true,"reasoning":{"effort":"medium","summary":null},"service_tier":"auto","store":true,"temperature":1,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}"#;
    const IN_PROGRESS: &str = r#"{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","object":"response","status":"in_progress","error":null,"incomplete_details":null,"output":[],"usage":null}}"#;

    #[test]
    fn a_text_stream_classifies_row_by_row() {
        let stream = sse(&[
            CREATED,
            IN_PROGRESS,
            r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAA","summary":[]}}"#,
            r#"{"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAA","summary":[]}}"#,
            r#"{"type":"response.output_item.added","sequence_number":4,"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#,
            r#"{"type":"response.content_part.added","sequence_number":5,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}"#,
            r#"{"type":"response.output_text.delta","sequence_number":6,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hello","logprobs":[],"obfuscation":"OBsF3Ll8fb"}"#,
            r#"{"type":"keepalive","sequence_number":7}"#,
            r#"{"type":"response.output_text.delta","sequence_number":8,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"","logprobs":[],"obfuscation":"OBsF3Ll8fbxx"}"#,
            r#"{"type":"response.output_text.done","sequence_number":9,"item_id":"msg_1","output_index":1,"content_index":0,"text":"Hello","logprobs":[]}"#,
            r#"{"type":"response.output_text.annotation.added","sequence_number":10,"item_id":"msg_1","output_index":1,"content_index":0,"annotation_index":0,"annotation":{"type":"url_citation","url":"https://x"}}"#,
            r#"{"type":"response.content_part.done","sequence_number":11,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":"Hello"}}"#,
            r#"{"type":"response.output_item.done","sequence_number":12,"output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","text":"Hello"}],"role":"assistant"}}"#,
            r#"{"type":"response.completed","sequence_number":13,"response":{"id":"resp_1","object":"response","status":"completed","error":null,"incomplete_details":null,"output":[{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hello"}]}],"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":0},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":70}}}"#,
        ]);
        let got = classify_stream(&stream);
        let classes: Vec<_> = got.iter().map(|(_, c)| c.class).collect();
        assert_eq!(
            classes,
            [
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                effective(EffectiveKind::Text),
                EventClass::Heartbeat,
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::TerminalOk,
            ]
        );
        assert!(got[..13]
            .iter()
            .all(|(_, c)| c.usage.is_none() && !c.terminal_frame));
        let (_, done) = &got[13];
        assert!(done.terminal_frame);
        assert_eq!(
            done.usage,
            Some(UsageReport {
                input: Some(50),
                output: Some(20),
                cache_read: Some(0),
                cache_write: None,
                cache_write_1h: None,
                reasoning: Some(0),
            })
        );
    }

    #[test]
    fn summary_text_deltas_are_reasoning_and_argument_deltas_are_tool_args() {
        // `openai-reasoning-encrypted-content.1.chunks.txt` order.
        let stream = sse(&[
            r#"{"type":"response.reasoning_summary_part.added","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}"#,
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Planning","obfuscation":"3s8TxH"}"#,
            r#"{"type":"response.reasoning_summary_text.done","sequence_number":5,"item_id":"rs_1","output_index":0,"summary_index":0,"text":"**Planning**"}"#,
            r#"{"type":"response.reasoning_summary_part.done","sequence_number":6,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":"**Planning**"}}"#,
            r#"{"type":"response.output_item.added","sequence_number":7,"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"weather"}}"#,
            r#"{"type":"response.function_call_arguments.delta","sequence_number":8,"item_id":"fc_1","output_index":1,"delta":"{\"location\":","obfuscation":"ab"}"#,
            r#"{"type":"response.function_call_arguments.delta","sequence_number":9,"item_id":"fc_1","output_index":1,"delta":""}"#,
            r#"{"type":"response.function_call_arguments.done","sequence_number":10,"item_id":"fc_1","output_index":1,"arguments":"{\"location\":\"SF\"}"}"#,
        ]);
        let classes: Vec<_> = classify_stream(&stream)
            .iter()
            .map(|(_, c)| c.class)
            .collect();
        assert_eq!(
            classes,
            [
                EventClass::Envelope,
                effective(EffectiveKind::Reasoning),
                EventClass::Envelope,
                EventClass::Envelope,
                EventClass::Envelope,
                effective(EffectiveKind::ToolArgs),
                EventClass::Envelope,
                EventClass::Envelope,
            ]
        );
    }

    #[test]
    fn every_delta_row_is_effective_only_when_non_empty() {
        let rows = [
            ("response.output_text.delta", effective(EffectiveKind::Text)),
            ("response.refusal.delta", effective(EffectiveKind::Refusal)),
            (
                "response.reasoning_summary_text.delta",
                effective(EffectiveKind::Reasoning),
            ),
            (
                "response.reasoning_text.delta",
                effective(EffectiveKind::Reasoning),
            ),
            (
                "response.function_call_arguments.delta",
                effective(EffectiveKind::ToolArgs),
            ),
            (
                "response.custom_tool_call_input.delta",
                effective(EffectiveKind::ToolInput),
            ),
            (
                "response.mcp_call_arguments.delta",
                effective(EffectiveKind::ToolArgs),
            ),
            (
                "response.code_interpreter_call_code.delta",
                effective(EffectiveKind::Other),
            ),
            (
                "response.shell_call_command.delta",
                effective(EffectiveKind::Other),
            ),
            ("response.audio.delta", effective(EffectiveKind::Other)),
            (
                "response.audio.transcript.delta",
                effective(EffectiveKind::Other),
            ),
        ];
        for (kind, want) in rows {
            let full = format!(
                r#"{{"type":"{kind}","sequence_number":5,"item_id":"x_1","output_index":0,"content_index":0,"delta":"a\"b"}}"#
            );
            let empty = format!(
                r#"{{"type":"{kind}","sequence_number":5,"item_id":"x_1","output_index":0,"delta":""}}"#
            );
            assert_eq!(class(&full), want, "{kind}");
            assert_eq!(
                class(&empty),
                EventClass::Envelope,
                "{kind} with delta \"\""
            );
        }
    }

    #[test]
    fn every_done_and_status_row_is_an_envelope() {
        for kind in [
            "response.queued",
            "response.refusal.done",
            "response.reasoning_text.done",
            "response.custom_tool_call_input.done",
            "response.mcp_call_arguments.done",
            "response.code_interpreter_call_code.done",
            "response.shell_call_command.added",
            "response.shell_call_command.done",
            "response.shell_call_output_content.done",
            "response.audio.done",
            "response.audio.transcript.done",
            "response.image_generation_call.in_progress",
            "response.image_generation_call.generating",
            "response.image_generation_call.completed",
            "response.web_search_call.in_progress",
            "response.web_search_call.searching",
            "response.web_search_call.completed",
            "response.file_search_call.in_progress",
            "response.file_search_call.searching",
            "response.file_search_call.completed",
            "response.code_interpreter_call.in_progress",
            "response.code_interpreter_call.interpreting",
            "response.code_interpreter_call.completed",
            "response.mcp_call.in_progress",
            "response.mcp_call.completed",
            "response.mcp_call.failed",
            "response.mcp_list_tools.in_progress",
            "response.mcp_list_tools.completed",
            "response.mcp_list_tools.failed",
        ] {
            let data = format!(
                r#"{{"type":"{kind}","sequence_number":9,"item_id":"x","output_index":0}}"#
            );
            assert_eq!(class(&data), EventClass::Envelope, "{kind}");
        }
    }

    #[test]
    fn custom_tool_call_input_deltas_are_tool_input() {
        // `openai-custom-tool.1.chunks.txt`.
        let added = r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"custom_tool_call","id":"ct_abc123def456","call_id":"call_custom_sql_001","name":"write_sql","input":""}}"#;
        let delta = r#"{"type":"response.custom_tool_call_input.delta","item_id":"ct_abc123def456","output_index":0,"delta":"SELECT * "}"#;
        assert_eq!(class(added), EventClass::Envelope);
        assert_eq!(class(delta), effective(EffectiveKind::ToolInput));
    }

    #[test]
    fn shell_tool_output_is_not_model_output() {
        let data = r#"{"type":"response.shell_call_output_content.delta","item_id":"i","output_index":0,"command_index":0,"delta":{"stdout":"x"}}"#;
        assert_eq!(class(data), EventClass::Envelope);
        let text = r#"{"type":"response.shell_call_output_content.delta","item_id":"i","output_index":0,"delta":"total 0"}"#;
        assert_eq!(class(text), EventClass::Envelope);
    }

    #[test]
    fn a_partial_image_is_other_output() {
        let data = r#"{"type":"response.image_generation_call.partial_image","sequence_number":5,"output_index":0,"item_id":"ig_1","partial_image_index":0,"partial_image_b64":"iVBORw0KGgo"}"#;
        assert_eq!(class(data), effective(EffectiveKind::Other));
        let empty =
            r#"{"type":"response.image_generation_call.partial_image","partial_image_b64":""}"#;
        assert_eq!(class(empty), EventClass::Envelope);
    }

    #[test]
    fn unknown_delta_types_are_effective_only_with_a_non_empty_string_delta() {
        let new = r#"{"type":"response.apply_patch_call_operation_diff.delta","sequence_number":4,"item_id":"ap_1","output_index":0,"delta":"@@ -1 +1 @@"}"#;
        let empty = r#"{"type":"response.apply_patch_call_operation_diff.delta","sequence_number":5,"item_id":"ap_1","output_index":0,"delta":""}"#;
        let object = r#"{"type":"response.future_thing.delta","delta":{"x":1}}"#;
        let missing = r#"{"type":"response.future_thing.delta","sequence_number":6}"#;
        assert_eq!(class(new), effective(EffectiveKind::Other));
        assert_eq!(class(empty), EventClass::Envelope);
        assert_eq!(class(object), EventClass::Envelope);
        assert_eq!(class(missing), EventClass::Envelope);
        assert_eq!(
            class(r#"{"type":"response.future_thing.started","delta":"x"}"#),
            EventClass::Envelope
        );
    }

    #[test]
    fn keepalive_is_a_heartbeat() {
        assert_eq!(
            classify(
                Some("keepalive"),
                r#"{"type":"keepalive","sequence_number":7}"#
            ),
            Classification::of(EventClass::Heartbeat)
        );
    }

    #[test]
    fn the_json_type_wins_over_the_sse_event_name() {
        let data = r#"{"type":"response.output_text.delta","delta":"x"}"#;
        assert_eq!(
            classify(Some("response.created"), data).class,
            effective(EffectiveKind::Text)
        );
    }

    #[test]
    fn without_a_json_type_the_sse_event_name_is_used() {
        assert_eq!(
            classify(Some("response.output_text.delta"), r#"{"delta":"x"}"#).class,
            effective(EffectiveKind::Text)
        );
        assert_eq!(
            classify(Some("keepalive"), "{}").class,
            EventClass::Heartbeat
        );
        assert_eq!(
            classify(None, r#"{"delta":"x"}"#).class,
            EventClass::Envelope
        );
    }

    #[test]
    fn completed_is_terminal_ok_with_usage_including_cache_write() {
        let c = class_of(
            r#"{"type":"response.completed","sequence_number":20,"response":{"id":"resp_1","status":"completed","usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":1024,"cache_write_tokens":100},"output_tokens":300,"output_tokens_details":{"reasoning_tokens":256},"total_tokens":1500}}}"#,
        );
        assert_eq!(
            c,
            Classification {
                class: EventClass::TerminalOk,
                usage: Some(UsageReport {
                    input: Some(1200),
                    output: Some(300),
                    cache_read: Some(1024),
                    cache_write: Some(100),
                    cache_write_1h: None,
                    reasoning: Some(256),
                }),
                stop: None,
                terminal_frame: true,
                output: None,
            }
        );
    }

    #[test]
    fn incomplete_is_terminal_incomplete_with_usage_and_a_stop_hint() {
        let incomplete = |reason: &str| {
            class_of(&format!(
                r#"{{"type":"response.incomplete","sequence_number":9,"response":{{"status":"incomplete","incomplete_details":{{"reason":"{reason}"}},"usage":{{"input_tokens":10,"output_tokens":16}}}}}}"#
            ))
        };
        let c = incomplete("max_output_tokens");
        assert_eq!(c.class, EventClass::TerminalIncomplete);
        assert!(c.terminal_frame);
        assert_eq!(c.stop, Some(StopHint::Length));
        assert_eq!(c.usage.and_then(|u| u.output), Some(16));
        assert_eq!(
            incomplete("content_filter").stop,
            Some(StopHint::ContentFilter)
        );
        assert_eq!(incomplete("something_else").stop, None);
    }

    #[test]
    fn a_nested_error_is_a_terminal_error_and_the_failed_response_after_it_is_the_terminal_frame() {
        // `openai-error.1.chunks.txt`.
        let stream = sse(&[
            CREATED,
            IN_PROGRESS,
            r#"{"type":"error","sequence_number":2,"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details.","param":null}}"#,
            r#"{"type":"response.failed","sequence_number":3,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"insufficient_quota","message":"You exceeded your current quota."},"incomplete_details":null,"output":[],"usage":null}}"#,
        ]);
        let got = classify_stream(&stream);
        assert_eq!(got[2].1, Classification::of(EventClass::TerminalError));
        assert_eq!(
            got[3].1,
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
    fn the_flat_error_shape_is_a_terminal_error_too() {
        // openai-node `ResponseStream.test.ts`, "converts documented flat SSE error events".
        let c = class_of(
            r#"{"type":"error","code":"server_error","message":"Something went wrong","param":null,"sequence_number":4}"#,
        );
        assert_eq!(c, Classification::of(EventClass::TerminalError));
        let null_code = class_of(
            r#"{"type":"error","sequence_number":2,"error":{"type":"server_error","code":null,"message":"boom","param":null}}"#,
        );
        assert_eq!(null_code.class, EventClass::TerminalError);
    }

    #[test]
    fn a_failed_response_with_usage_reports_it() {
        let c = class_of(
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"x"},"usage":{"input_tokens":7,"output_tokens":3}}}"#,
        );
        assert_eq!(c.class, EventClass::TerminalError);
        assert_eq!(
            c.usage,
            Some(UsageReport {
                input: Some(7),
                output: Some(3),
                ..UsageReport::default()
            })
        );
    }

    #[test]
    fn a_bare_chat_style_error_object_is_a_terminal_error() {
        assert_eq!(
            class(r#"{"error":{"message":"boom"}}"#),
            EventClass::TerminalError
        );
    }

    #[test]
    fn padded_json_is_parsed_and_unparseable_data_is_an_envelope() {
        assert_eq!(
            class("  {\"type\" : \"response.output_text.delta\" , \"delta\" : \"x\"}        "),
            effective(EffectiveKind::Text)
        );
        assert_eq!(
            class("{\"type\":\"response.output_text.de"),
            EventClass::Envelope
        );
        assert_eq!(class("[DONE]"), EventClass::Envelope);
    }

    fn class_of(data: &str) -> Classification {
        classify(None, data)
    }

    // --- non-streamed bodies ---

    #[test]
    fn a_completed_body_gives_usage_stop_and_text() {
        let body = br#"{"id":"resp_1","object":"response","created_at":1,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-5","output":[{"id":"rs_1","type":"reasoning","summary":[]},{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hi!"}]}],"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":2},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":1},"total_tokens":15}}"#;
        assert_eq!(
            classify_body(Dialect::Responses, body),
            BodySummary {
                usage: UsageReport {
                    input: Some(10),
                    output: Some(5),
                    cache_read: Some(2),
                    cache_write: None,
                    cache_write_1h: None,
                    reasoning: Some(1),
                },
                stop: Some(StopHint::Complete),
                error: false,
                has_text: true,
                json: true,
            }
        );
    }

    #[test]
    fn an_incomplete_body_gives_the_stop_hint_of_its_reason() {
        let b = br#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","content":[{"type":"output_text","text":""}]}],"usage":{"input_tokens":1,"output_tokens":16}}"#;
        let s = body(b);
        assert_eq!(s.stop, Some(StopHint::Length));
        assert!(!s.has_text);
        let f =
            body(br#"{"status":"incomplete","incomplete_details":{"reason":"content_filter"}}"#);
        assert_eq!(f.stop, Some(StopHint::ContentFilter));
    }

    #[test]
    fn a_failed_body_and_an_error_body_are_errors() {
        assert!(body(br#"{"status":"failed","error":{"code":"server_error","message":"x"},"usage":null}"#).error);
        assert!(body(br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#).error);
        assert!(!body(br#"{"status":"completed","error":null}"#).error);
    }

    #[test]
    fn a_tool_call_body_has_no_text() {
        let b = br#"{"status":"completed","output":[{"type":"function_call","arguments":"{}","call_id":"c","name":"f"}]}"#;
        assert!(!body(b).has_text);
        assert_eq!(body(b"not json"), BodySummary::default());
    }
}
