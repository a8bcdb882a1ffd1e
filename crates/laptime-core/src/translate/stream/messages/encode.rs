//! Hub events → Anthropic events, and an answer → a `message` body.
//!
//! The order is Anthropic's: `message_start` first (a block never opens before it), then per
//! block `content_block_start` (text, thinking, redacted thinking, or tool use with
//! `input: {}`), its deltas and `content_block_stop`, then one `message_delta` with the stop
//! reason and the final counts, then `message_stop`. `message_delta` waits for the upstream's
//! terminal because an OpenAI upstream reports usage after its finish reason. Counts:
//! `message_start` carries what is known of the input (an upstream that reports input only at
//! the end gives `input_tokens: 0` there, the field being required), and `message_delta`
//! carries the final input and cache counts when known and `output_tokens` always (required:
//! 0 when unknown); the Anthropic SDK takes each `message_delta` field that is present.

use super::super::acc::Answer;
use super::super::error::write_anthropic_error;
use super::super::hub::{BlockKind, Delta, HubEvent, StopReason};
use super::super::json::{sse_close, sse_open, tool_input, JsonOut};
use super::super::{Head, Out, TranslateError};
use super::{stop_name, uncached_input};
use crate::usage::Tokens;

/// Encodes one client Messages stream.
#[derive(Debug)]
pub(crate) struct Encoder {
    head: Head,
    started: bool,
    usage: Tokens,
    stop: Option<StopReason>,
}

impl Encoder {
    pub(crate) fn new(head: Head) -> Self {
        Encoder {
            head,
            started: false,
            usage: Tokens::default(),
            stop: None,
        }
    }

    pub(crate) fn event(&mut self, ev: &HubEvent<'_>, out: &mut Out<'_>) {
        match ev {
            HubEvent::MessageStart { model, usage, .. } => {
                self.usage = *usage;
                self.start(model.as_ref().map(|m| m.raw()), out);
            }
            HubEvent::BlockStart { index, kind } => {
                self.start(None, out);
                let buf = out.buf();
                open(buf, "content_block_start", *index);
                buf.raw(",\"content_block\":");
                write_block_head(buf, kind);
                buf.raw("}");
                sse_close(buf);
            }
            HubEvent::BlockDelta { index, delta } => write_delta(out.buf(), *index, delta),
            HubEvent::BlockStop { index } => {
                let buf = out.buf();
                open(buf, "content_block_stop", *index);
                buf.raw("}");
                sse_close(buf);
            }
            HubEvent::Usage(usage) => self.usage = *usage,
            HubEvent::Stop(stop) => self.stop = Some(*stop),
            HubEvent::End => {
                self.start(None, out);
                let buf = out.buf();
                sse_open(buf, Some("message_delta"));
                buf.raw("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":");
                buf.lit(stop_name(self.stop.unwrap_or(StopReason::EndTurn)));
                buf.raw(",\"stop_sequence\":null},\"usage\":");
                write_usage(buf, &self.usage, Place::Delta);
                buf.raw("}");
                sse_close(buf);
                out.comment();
                let buf = out.buf();
                sse_open(buf, Some("message_stop"));
                buf.raw("{\"type\":\"message_stop\"}");
                sse_close(buf);
            }
            // Anthropic's own ping once the message opened; before, a comment (no event may
            // come before `message_start`).
            HubEvent::Heartbeat if self.started => {
                out.buf().raw("event: ping\ndata: {\"type\": \"ping\"}\n\n");
            }
            HubEvent::Heartbeat => out.buf().raw(": keep-alive\n\n"),
            HubEvent::Error(err) => {
                out.comment();
                let buf = out.buf();
                sse_open(buf, Some("error"));
                write_anthropic_error(buf, err);
                sse_close(buf);
            }
        }
    }

    fn start(&mut self, upstream_model: Option<&str>, out: &mut Out<'_>) {
        if self.started {
            return;
        }
        self.started = true;
        let buf = out.buf();
        sse_open(buf, Some("message_start"));
        buf.raw("{\"type\":\"message_start\",\"message\":");
        write_message_head(buf, &self.head, upstream_model);
        buf.raw(",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
        write_usage(buf, &self.usage, Place::Start);
        buf.raw("}}");
        sse_close(buf);
    }
}

fn write_delta(buf: &mut bytes::BytesMut, index: u32, delta: &Delta<'_>) {
    open(buf, "content_block_delta", index);
    let (kind, key, t) = match delta {
        Delta::Text(t) => ("text_delta", "text", t),
        Delta::Reasoning(t) => ("thinking_delta", "thinking", t),
        Delta::Signature(t) => ("signature_delta", "signature", t),
        Delta::ToolArgs(t) => ("input_json_delta", "partial_json", t),
    };
    buf.raw(",\"delta\":{\"type\":\"");
    buf.raw(kind);
    buf.raw("\",\"");
    buf.raw(key);
    buf.raw("\":");
    buf.lit(t.raw());
    buf.raw("}}");
    sse_close(buf);
}

/// `event: <name>` and `{"type":"<name>","index":<i>` (the caller closes the object).
fn open(buf: &mut bytes::BytesMut, name: &str, index: u32) {
    sse_open(buf, Some(name));
    buf.raw("{\"type\":\"");
    buf.raw(name);
    buf.raw("\",\"index\":");
    buf.num(u64::from(index));
}

/// `{"id":…,"type":"message","role":"assistant","model":…` (the caller closes the object).
fn write_message_head(out: &mut impl JsonOut, head: &Head, upstream_model: Option<&str>) {
    out.raw("{\"id\":\"msg_");
    out.raw(&head.id);
    out.raw("\",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    out.lit(head.model(upstream_model));
}

/// A block as `content_block_start` opens it: empty, the tool's `input` `{}`.
fn write_block_head(out: &mut impl JsonOut, kind: &BlockKind<'_>) {
    match kind {
        BlockKind::Text => out.raw("{\"type\":\"text\",\"text\":\"\"}"),
        BlockKind::Reasoning => {
            out.raw("{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}")
        }
        BlockKind::RedactedReasoning { data } => {
            out.raw("{\"type\":\"redacted_thinking\",\"data\":");
            out.lit(data.raw());
            out.raw("}");
        }
        BlockKind::ToolCall { id, name } => {
            out.raw("{\"type\":\"tool_use\",\"id\":");
            out.lit(id.raw());
            out.raw(",\"name\":");
            out.lit(name.raw());
            out.raw(",\"input\":{}}");
        }
    }
}

/// Where a usage object goes, which decides its required fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `message_start`: `input_tokens` and `output_tokens` required (0 when unknown; the
    /// output is always unknown then).
    Start,
    /// `message_delta`: `output_tokens` alone required.
    Delta,
    /// A whole message: `input_tokens` and `output_tokens` required.
    Body,
}

fn write_usage(out: &mut impl JsonOut, u: &Tokens, place: Place) {
    out.raw("{");
    let input = uncached_input(u);
    let mut first = true;
    if input.is_some() || place != Place::Delta {
        super::super::field(out, &mut first, "input_tokens");
        out.num(input.unwrap_or(0));
    }
    for (key, n) in [
        ("cache_creation_input_tokens", u.cache_write),
        ("cache_read_input_tokens", u.cache_read),
    ] {
        if let Some(n) = n {
            super::super::field(out, &mut first, key);
            out.num(n);
        }
    }
    let output = match place {
        Place::Start => None,
        Place::Delta | Place::Body => u.output,
    };
    super::super::field(out, &mut first, "output_tokens");
    out.num(output.unwrap_or(0));
    if let (Some(n), false) = (u.reasoning, place == Place::Start) {
        out.raw(",\"output_tokens_details\":{\"thinking_tokens\":");
        out.num(n);
        out.raw("}");
    }
    out.raw("}");
}

/// A whole `message` (or an error envelope for an answer that ended in an error). A tool
/// call's `input` is its arguments as a JSON object: arguments that are not one (cut by the
/// token limit) cannot be carried and are an error naming the block.
pub(crate) fn encode_body(
    answer: &Answer,
    head: &Head,
    out: &mut String,
) -> Result<(), TranslateError> {
    if let Some(err) = answer.hub_error() {
        write_anthropic_error(out, &err);
        return Ok(());
    }
    write_message_head(out, head, answer.model.as_deref());
    out.raw(",\"content\":[");
    for (i, block) in answer.blocks.iter().enumerate() {
        if i > 0 {
            out.raw(",");
        }
        match &block.kind {
            BlockKind::Text => {
                out.raw("{\"type\":\"text\",\"text\":");
                out.lit(&block.text);
                out.raw("}");
            }
            BlockKind::Reasoning => {
                out.raw("{\"type\":\"thinking\",\"thinking\":");
                out.lit(&block.text);
                out.raw(",\"signature\":");
                out.lit(block.signature.as_deref().unwrap_or_default());
                out.raw("}");
            }
            BlockKind::RedactedReasoning { .. } => write_block_head(out, &block.kind),
            BlockKind::ToolCall { id, name } => {
                let input =
                    tool_input(&block.text).ok_or(TranslateError::ToolArgumentsNotAnObject {
                        block: u32::try_from(i).unwrap_or(u32::MAX),
                    })?;
                out.raw("{\"type\":\"tool_use\",\"id\":");
                out.lit(id.raw());
                out.raw(",\"name\":");
                out.lit(name.raw());
                out.raw(",\"input\":");
                out.raw(&input);
                out.raw("}");
            }
        }
    }
    out.raw("],\"stop_reason\":");
    out.lit(stop_name(answer.stop.unwrap_or(StopReason::EndTurn)));
    out.raw(",\"stop_sequence\":null,\"usage\":");
    write_usage(out, &answer.usage, Place::Body);
    out.raw("}");
    Ok(())
}
