//! OpenAI Chat Completions: `data: <chunk>\n\n` with no `event:` line, ended by `data: [DONE]`.
//!
//! Shapes follow the recorded gpt-4o streams (reference §1): the role chunk with
//! `content:"", refusal:null`, one delta per chunk, a `finish_reason` chunk whose delta is `{}`,
//! and with `include_usage` a `"usage":null` on every chunk plus a final `choices:[]` usage chunk.

use crate::json::{arr, obj, J};
use crate::script::WorkKind;

use super::{full_reasoning, reasoning_token, ApiError, Ctx, Ending, Out, CREATED};

const ID: &str = "chatcmpl-laptimesim0001";
const FINGERPRINT: &str = "fp_laptimesim";
/// Tool call ids are this and the call's number: `call_laptimesim0001`, …
const CALL_ID_PREFIX: &str = "call_laptimesim";

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
        match work.kind {
            WorkKind::Reasoning => {
                for (i, &at) in work.at.iter().enumerate() {
                    let delta = obj! {"reasoning_content": reasoning_token(i)};
                    out.push(at, chunk(ctx, delta, None));
                }
            }
            WorkKind::ToolArgs => {
                for call in ctx.calls() {
                    let Some(&first) = call.at.first() else {
                        continue;
                    };
                    // The header fragment carries id, type, name and `arguments:""`: envelope
                    // only. Parallel calls follow one another, each under its own `index`.
                    let header = obj! {
                        "index": call.index,
                        "id": call.id(CALL_ID_PREFIX),
                        "type": "function",
                        "function": obj! {"name": call.name(), "arguments": ""},
                    };
                    out.push(first, chunk(ctx, obj! {"tool_calls": arr![header]}, None));
                    for (i, &at) in call.at.iter().enumerate() {
                        let delta = obj! {"tool_calls": arr![obj! {
                            "index": call.index,
                            "function": obj! {"arguments": call.fragment(i)},
                        }]};
                        out.push(at, chunk(ctx, delta, None));
                    }
                }
            }
        }
    }

    if let Some(text) = &t.text {
        for (i, &at) in text.at.iter().enumerate() {
            out.push(at, chunk(ctx, obj! {"content": ctx.text_delta(i)}, None));
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
        Some(_) => J::from(ctx.answer_text()),
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
            let calls: Vec<J> = ctx
                .calls()
                .iter()
                .map(|call| {
                    obj! {
                        "id": call.id(CALL_ID_PREFIX),
                        "type": "function",
                        "function": obj! {
                            "name": call.name(),
                            "arguments": call.input().encode(),
                        },
                    }
                })
                .collect();
            message = message.with("tool_calls", calls);
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
