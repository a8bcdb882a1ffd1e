//! Anthropic Messages: `event: <name>\ndata: {"type":"<name>",…}\n\n`.
//!
//! The flow of the recorded SDK fixtures (reference §3): `message_start` (input usage,
//! `output_tokens:1` placeholder), `content_block_start`, a `ping` right after the first block
//! start, deltas, `content_block_stop`, `message_delta` (stop reason, cumulative
//! `output_tokens`), `message_stop`. A thinking block ends with an empty `thinking_delta` and a
//! `signature_delta`; a `tool_use` block opens with an empty `input_json_delta`.

use std::time::Duration;

use crate::json::{arr, obj, J};
use crate::script::WorkKind;

use super::{
    full_reasoning, full_text, named_event, reasoning_token, text_token, tool_fragment, tool_input,
    ApiError, Ctx, Ending, Out, SIGNATURE, TOOL_NAME,
};

const ID: &str = "msg_laptimesim0001";
const TOOL_USE_ID: &str = "toolu_laptimesim0001";

/// The exact bytes Anthropic sends for a ping (note the space after the colon).
const PING: &str = "event: ping\ndata: {\"type\": \"ping\"}\n\n";

fn emit(out: &mut Out, at: Duration, ty: &'static str, fields: J) {
    let mut all = vec![("type", J::from(ty))];
    if let J::Obj(rest) = fields {
        all.extend(rest);
    }
    out.push(at, named_event(ty, &J::Obj(all)));
}

fn delta(out: &mut Out, at: Duration, index: u32, delta: J) {
    emit(
        out,
        at,
        "content_block_delta",
        obj! {"index": index, "delta": delta},
    );
}

fn stop(out: &mut Out, at: Duration, index: u32) {
    emit(out, at, "content_block_stop", obj! {"index": index});
}

/// Closes the reasoning/tool block: a thinking block gets its empty final `thinking_delta` and
/// its `signature_delta` just before the stop, as the recorded streams show.
fn close_work(out: &mut Out, at: Duration, kind: WorkKind) {
    if kind == WorkKind::Reasoning {
        delta(out, at, 0, obj! {"type": "thinking_delta", "thinking": ""});
        delta(
            out,
            at,
            0,
            obj! {"type": "signature_delta", "signature": SIGNATURE},
        );
    }
    stop(out, at, 0);
}

pub(super) fn stream(ctx: &Ctx<'_>, out: &mut Out) {
    let t = ctx.timeline;
    for &at in &t.heartbeats {
        out.push(at, PING.to_owned());
    }
    let u = ctx.usage;
    let message = obj! {
        "id": ID,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": arr![],
        "stop_reason": J::Null,
        "stop_sequence": J::Null,
        "usage": obj! {
            "input_tokens": u.input,
            "cache_creation_input_tokens": u.cache_write,
            "cache_read_input_tokens": u.cache_read,
            // A placeholder: the real count comes in message_delta.
            "output_tokens": 1u32,
            "service_tier": "standard",
        },
    };
    emit(
        out,
        t.first_event,
        "message_start",
        obj! {"message": message},
    );

    // The first block opens with the envelope: thinking, tool_use, or text.
    let kind = ctx.work_kind();
    let first_block = match kind {
        Some(WorkKind::Reasoning) => {
            obj! {"type": "thinking", "thinking": "", "signature": ""}
        }
        Some(WorkKind::ToolArgs) => {
            obj! {"type": "tool_use", "id": TOOL_USE_ID, "name": TOOL_NAME, "input": obj! {}}
        }
        None => text_block(""),
    };
    emit(
        out,
        t.first_event,
        "content_block_start",
        obj! {"index": 0u32, "content_block": first_block},
    );
    out.push(t.first_event, PING.to_owned());
    if kind == Some(WorkKind::ToolArgs) {
        delta(
            out,
            t.first_event,
            0,
            obj! {"type": "input_json_delta", "partial_json": ""},
        );
    }

    if let Some(work) = &t.work {
        let n = work.at.len();
        for (i, &at) in work.at.iter().enumerate() {
            let d = match work.kind {
                WorkKind::Reasoning => {
                    obj! {"type": "thinking_delta", "thinking": reasoning_token(i)}
                }
                WorkKind::ToolArgs => {
                    obj! {"type": "input_json_delta", "partial_json": tool_fragment(i, n)}
                }
            };
            delta(out, at, 0, d);
        }
    }

    // The text block is block 0 when nothing came before it, else block 1.
    let text_index = u32::from(kind.is_some());
    if let Some(text) = &t.text {
        if let Some(kind) = kind {
            close_work(out, text.start, kind);
            emit(
                out,
                text.start,
                "content_block_start",
                obj! {"index": text_index, "content_block": text_block("")},
            );
        }
        for (i, &at) in text.at.iter().enumerate() {
            delta(
                out,
                at,
                text_index,
                obj! {"type": "text_delta", "text": text_token(i)},
            );
        }
    }

    match ctx.ending() {
        Ending::Done { .. } => {
            match (kind, &t.text) {
                (Some(kind), None) => close_work(out, t.end, kind),
                _ => stop(out, t.end, text_index),
            }
            emit(
                out,
                t.end,
                "message_delta",
                obj! {
                    "delta": obj! {"stop_reason": stop_reason(ctx), "stop_sequence": J::Null},
                    "usage": obj! {"output_tokens": u.output},
                },
            );
            emit(out, t.end, "message_stop", obj! {});
        }
        Ending::Error => {
            let e = ApiError::scripted(ctx.status);
            emit(out, t.end, "error", obj! {"error": e.anthropic_object()});
        }
        Ending::Cut => {}
    }
}

/// The non-streamed message object.
pub(super) fn body(ctx: &Ctx<'_>) -> String {
    let mut content = Vec::new();
    match ctx.work_kind() {
        Some(WorkKind::Reasoning) => content.push(obj! {
            "type": "thinking",
            "thinking": full_reasoning(ctx.work_count()),
            "signature": SIGNATURE,
        }),
        Some(WorkKind::ToolArgs) => content.push(obj! {
            "type": "tool_use",
            "id": TOOL_USE_ID,
            "name": TOOL_NAME,
            "input": tool_input(ctx.work_count()),
        }),
        None => {}
    }
    match ctx.text_count() {
        Some(n) => content.push(text_block(&full_text(n))),
        // An answer with nothing at all still has its (empty) text block.
        None if content.is_empty() => content.push(text_block("")),
        None => {}
    }
    let u = ctx.usage;
    obj! {
        "id": ID,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": stop_reason(ctx),
        "stop_sequence": J::Null,
        "usage": obj! {
            "input_tokens": u.input,
            "cache_creation_input_tokens": u.cache_write,
            "cache_read_input_tokens": u.cache_read,
            "output_tokens": u.output,
            "service_tier": "standard",
        },
    }
    .encode()
}

fn text_block(text: &str) -> J {
    obj! {"type": "text", "text": text}
}

fn stop_reason(ctx: &Ctx<'_>) -> &'static str {
    if ctx.filtered() {
        "refusal"
    } else if ctx.incomplete() {
        "max_tokens"
    } else if ctx.work_kind() == Some(WorkKind::ToolArgs) {
        "tool_use"
    } else {
        "end_turn"
    }
}
