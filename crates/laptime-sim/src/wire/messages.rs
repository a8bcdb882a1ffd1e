//! Anthropic Messages: `event: <name>\ndata: {"type":"<name>",…}\n\n`.
//!
//! The flow of the recorded SDK fixtures (reference §3): `message_start` (input usage,
//! `output_tokens:1` placeholder), `content_block_start`, a `ping` right after the first block
//! start, deltas, `content_block_stop`, `message_delta` (stop reason, cumulative
//! `output_tokens`), `message_stop`. A thinking block ends with an empty `thinking_delta` and a
//! `signature_delta`; a `tool_use` block opens with an empty `input_json_delta`.

use std::time::Duration;

use crate::json::{arr, obj, J};
use crate::script::{Usage, WorkKind};

use super::{
    full_reasoning, named_event, reasoning_token, ApiError, Call, Ctx, Ending, Out, SIGNATURE,
};

const ID: &str = "msg_laptimesim0001";
/// Tool-use ids are this and the call's number: `toolu_laptimesim0001`, …
const TOOL_USE_ID_PREFIX: &str = "toolu_laptimesim";

/// The exact bytes Anthropic sends for a ping (note the space after the colon).
const PING: &str = "event: ping\ndata: {\"type\": \"ping\"}\n\n";

/// Anthropic's split of the cache writes by lifetime.
fn cache_creation(u: &Usage) -> J {
    obj! {
        "ephemeral_5m_input_tokens": u.cache_write - u.cache_write_1h,
        "ephemeral_1h_input_tokens": u.cache_write_1h,
    }
}

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

/// Closes the last reasoning/tool block, `index`: a thinking block gets its empty final
/// `thinking_delta` and its `signature_delta` just before the stop, as the recorded streams
/// show.
fn close_work(out: &mut Out, at: Duration, kind: WorkKind, index: u32) {
    if kind == WorkKind::Reasoning {
        delta(
            out,
            at,
            index,
            obj! {"type": "thinking_delta", "thinking": ""},
        );
        delta(
            out,
            at,
            index,
            obj! {"type": "signature_delta", "signature": SIGNATURE},
        );
    }
    stop(out, at, index);
}

/// The opening `tool_use` block of a call (its input comes in `input_json_delta`s).
fn tool_use_block(call: &Call<'_>) -> J {
    obj! {"type": "tool_use", "id": call.id(TOOL_USE_ID_PREFIX), "name": call.name(), "input": obj! {}}
}

fn block_index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
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
            "cache_creation": cache_creation(&u),
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
    let calls = ctx.calls();
    let first_block = match (kind, calls.first()) {
        (Some(WorkKind::Reasoning), _) => {
            obj! {"type": "thinking", "thinking": "", "signature": ""}
        }
        (Some(WorkKind::ToolArgs), Some(call)) => tool_use_block(call),
        _ => text_block(""),
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
        match work.kind {
            WorkKind::Reasoning => {
                for (i, &at) in work.at.iter().enumerate() {
                    let d = obj! {"type": "thinking_delta", "thinking": reasoning_token(i)};
                    delta(out, at, 0, d);
                }
            }
            WorkKind::ToolArgs => {
                for call in &calls {
                    let index = block_index(call.index);
                    // Parallel calls are blocks one after the other: the previous one stops
                    // when the next starts (the first opened with the envelope).
                    if let (Some(&first), true) = (call.at.first(), call.index > 0) {
                        stop(out, first, index - 1);
                        emit(
                            out,
                            first,
                            "content_block_start",
                            obj! {"index": index, "content_block": tool_use_block(call)},
                        );
                        delta(
                            out,
                            first,
                            index,
                            obj! {"type": "input_json_delta", "partial_json": ""},
                        );
                    }
                    for (i, &at) in call.at.iter().enumerate() {
                        let d = obj! {"type": "input_json_delta", "partial_json": call.fragment(i)};
                        delta(out, at, index, d);
                    }
                }
            }
        }
    }

    // The text block comes after the reasoning block or the tool calls' blocks, if any.
    let work_blocks = match kind {
        Some(WorkKind::ToolArgs) => block_index(calls.len().max(1)),
        Some(WorkKind::Reasoning) => 1,
        None => 0,
    };
    let last_work = work_blocks.saturating_sub(1);
    let text_index = work_blocks;
    if let Some(text) = &t.text {
        if let Some(kind) = kind {
            close_work(out, text.start, kind, last_work);
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
                obj! {"type": "text_delta", "text": ctx.text_delta(i)},
            );
        }
    }

    match ctx.ending() {
        Ending::Done { .. } => {
            match (kind, &t.text) {
                (Some(kind), None) => close_work(out, t.end, kind, last_work),
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
        Some(WorkKind::ToolArgs) => {
            for call in ctx.calls() {
                content.push(obj! {
                    "type": "tool_use",
                    "id": call.id(TOOL_USE_ID_PREFIX),
                    "name": call.name(),
                    "input": call.input(),
                });
            }
        }
        None => {}
    }
    match ctx.text_count() {
        Some(_) => content.push(text_block(ctx.answer_text())),
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
            "cache_creation": cache_creation(&u),
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
