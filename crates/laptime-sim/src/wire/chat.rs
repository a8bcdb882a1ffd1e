//! OpenAI Chat Completions: `data: <chunk>\n\n` with no `event:` line, ended by `data: [DONE]`.
//!
//! Shapes follow the recorded gpt-4o streams (reference §1): the role chunk with
//! `content:"", refusal:null`, one delta per chunk, a `finish_reason` chunk whose delta is `{}`,
//! and with `include_usage` a `"usage":null` on every chunk plus a final `choices:[]` usage chunk.

use crate::json::{arr, obj, J};
use crate::script::WorkKind;

use super::{
    full_reasoning, full_text, reasoning_token, text_token, tool_fragment, tool_input, ApiError,
    Ctx, Ending, Out, CREATED, TOOL_NAME,
};

const ID: &str = "chatcmpl-laptimesim0001";
const FINGERPRINT: &str = "fp_laptimesim";
const CALL_ID: &str = "call_laptimesim0001";

pub(super) fn stream(ctx: &Ctx<'_>, out: &mut Out) {
    let t = ctx.timeline;
    for &at in &t.heartbeats {
        // DeepSeek's keep-alive while a request is queued: a comment, not an event.
        out.push(at, ": keep-alive\n\n".to_owned());
    }
    out.push(
        t.first_event,
        chunk(
            ctx,
            obj! {"role": "assistant", "content": "", "refusal": J::Null},
            None,
        ),
    );

    if let Some(work) = &t.work {
        let n = work.at.len();
        if let (WorkKind::ToolArgs, Some(&first)) = (work.kind, work.at.first()) {
            // The header fragment carries id, type, name and `arguments:""`: envelope only.
            let header = obj! {
                "index": 0u32,
                "id": CALL_ID,
                "type": "function",
                "function": obj! {"name": TOOL_NAME, "arguments": ""},
            };
            out.push(first, chunk(ctx, obj! {"tool_calls": arr![header]}, None));
        }
        for (i, &at) in work.at.iter().enumerate() {
            let delta = match work.kind {
                WorkKind::Reasoning => obj! {"reasoning_content": reasoning_token(i)},
                WorkKind::ToolArgs => obj! {"tool_calls": arr![obj! {
                    "index": 0u32,
                    "function": obj! {"arguments": tool_fragment(i, n)},
                }]},
            };
            out.push(at, chunk(ctx, delta, None));
        }
    }

    if let Some(text) = &t.text {
        for (i, &at) in text.at.iter().enumerate() {
            out.push(at, chunk(ctx, obj! {"content": text_token(i)}, None));
        }
    }

    match ctx.ending() {
        Ending::Done { .. } => {
            out.push(t.end, chunk(ctx, obj! {}, Some(finish_reason(ctx))));
            if ctx.include_usage {
                let usage_chunk = head(ctx)
                    .with("choices", J::Arr(Vec::new()))
                    .with("usage", usage(ctx));
                out.push(t.end, data(&usage_chunk));
            }
            out.push(t.end, "data: [DONE]\n\n".to_owned());
        }
        Ending::Error => {
            // vLLM and OpenAI: an error object in a data line after HTTP 200, then [DONE].
            let error = obj! {"error": ApiError::scripted(ctx.status).openai_object()};
            out.push(t.end, data(&error));
            out.push(t.end, "data: [DONE]\n\n".to_owned());
        }
        Ending::Cut => {}
    }
}

/// The non-streamed `chat.completion`.
pub(super) fn body(ctx: &Ctx<'_>) -> String {
    let tool = ctx.work_kind() == Some(WorkKind::ToolArgs);
    // `content` is null only when the answer is a bare tool call, as OpenAI sends it.
    let content = match ctx.text_count() {
        Some(n) => J::from(full_text(n)),
        None if tool => J::Null,
        None => J::from(""),
    };
    let mut message = obj! {
        "role": "assistant",
        "content": content,
        "refusal": J::Null,
        "annotations": J::Arr(Vec::new()),
    };
    match ctx.work_kind() {
        Some(WorkKind::Reasoning) => {
            message = message.with("reasoning_content", full_reasoning(ctx.work_count()));
        }
        Some(WorkKind::ToolArgs) => {
            let call = obj! {
                "id": CALL_ID,
                "type": "function",
                "function": obj! {
                    "name": TOOL_NAME,
                    "arguments": tool_input(ctx.work_count()).encode(),
                },
            };
            message = message.with("tool_calls", arr![call]);
        }
        None => {}
    }
    obj! {
        "id": ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": ctx.model,
        "choices": arr![obj! {
            "index": 0u32,
            "message": message,
            "logprobs": J::Null,
            "finish_reason": finish_reason(ctx),
        }],
        "usage": usage(ctx),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }
    .encode()
}

fn finish_reason(ctx: &Ctx<'_>) -> &'static str {
    if ctx.filtered() {
        "content_filter"
    } else if ctx.incomplete() {
        "length"
    } else if ctx.work_kind() == Some(WorkKind::ToolArgs) {
        "tool_calls"
    } else {
        "stop"
    }
}

/// The fields every chunk starts with.
fn head(ctx: &Ctx<'_>) -> J {
    obj! {
        "id": ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": ctx.model,
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }
}

fn chunk(ctx: &Ctx<'_>, delta: J, finish_reason: Option<&str>) -> String {
    let choice = obj! {
        "index": 0u32,
        "delta": delta,
        "logprobs": J::Null,
        "finish_reason": finish_reason,
    };
    let mut c = head(ctx).with("choices", arr![choice]);
    if ctx.include_usage {
        c = c.with("usage", J::Null);
    }
    data(&c)
}

fn data(j: &J) -> String {
    format!("data: {}\n\n", j.encode())
}

/// `CompletionUsage`: prompt tokens include cached ones; completion tokens include reasoning.
fn usage(ctx: &Ctx<'_>) -> J {
    let u = ctx.usage;
    let mut prompt_details = obj! {"cached_tokens": u.cache_read, "audio_tokens": 0u32};
    if u.cache_write > 0 {
        prompt_details = prompt_details.with("cache_write_tokens", u.cache_write);
    }
    obj! {
        "prompt_tokens": u.input_total(),
        "completion_tokens": u.output,
        "total_tokens": u.total(),
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": obj! {
            "reasoning_tokens": u.reasoning,
            "audio_tokens": 0u32,
            "accepted_prediction_tokens": 0u32,
            "rejected_prediction_tokens": 0u32,
        },
    }
}
