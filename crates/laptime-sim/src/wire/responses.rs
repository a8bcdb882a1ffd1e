//! OpenAI Responses: `event: <type>\ndata: {"type":…,"sequence_number":n,…}\n\n`.
//!
//! The order is the one of the recorded streams (reference §2 and the vercel-ai fixtures):
//! `response.created`, `response.in_progress`, then per output item `output_item.added`, its
//! part/summary opening, the deltas, the `.done` events and `output_item.done`, and finally
//! `response.completed` (or `.incomplete`) carrying `usage`. A mid-stream failure is the nested
//! `error` event followed by `response.failed`.

use std::time::Duration;

use crate::json::{arr, obj, J};
use crate::script::WorkKind;

use super::{
    full_reasoning, named_event, reasoning_token, ApiError, Call, Ctx, Ending, Out, CREATED,
};

const REASONING_ID: &str = "rs_laptimesim0001";
/// Function-call item ids and call ids are these and the call's number (`fc_laptimesim0001`).
const CALL_ITEM_ID_PREFIX: &str = "fc_laptimesim";
const CALL_ID_PREFIX: &str = "call_laptimesim";
const MESSAGE_ID: &str = "msg_laptimesim0001";

/// Writes events with a running `sequence_number` (heartbeats included, as OpenAI numbers
/// `keepalive` events too).
struct Events<'o> {
    out: &'o mut Out,
    seq: u64,
}

impl Events<'_> {
    /// `fields` is an object of the event's own fields; `type` and `sequence_number` go first.
    fn emit(&mut self, at: Duration, ty: &'static str, fields: J) {
        let mut all = vec![
            ("type", J::from(ty)),
            ("sequence_number", J::from(self.seq)),
        ];
        if let J::Obj(rest) = fields {
            all.extend(rest);
        }
        self.seq += 1;
        self.out.push(at, named_event(ty, &J::Obj(all)));
    }
}

pub(super) fn stream(ctx: &Ctx<'_>, out: &mut Out) {
    let t = ctx.timeline;
    let mut ev = Events { out, seq: 0 };
    for &at in &t.heartbeats {
        ev.emit(at, "keepalive", obj! {});
    }
    let opening = response(ctx, "in_progress", Vec::new(), J::Null);
    ev.emit(
        t.first_event,
        "response.created",
        obj! {"response": opening.clone()},
    );
    ev.emit(
        t.first_event,
        "response.in_progress",
        obj! {"response": opening},
    );

    let ending = ctx.ending();
    let mut output_index = 0u32;

    if let Some(work) = &t.work {
        let n = work.at.len();
        let start = work.at.first().copied().unwrap_or(t.first_event);
        // The item closes when the text starts, or at the end if there is no text (and the
        // stream is not cut before).
        let close_at = match (&t.text, ending) {
            (Some(text), _) => Some(text.start),
            (None, Ending::Done { .. }) => Some(t.end),
            (None, _) => None,
        };
        match work.kind {
            WorkKind::Reasoning => {
                let item = |summary: J| {
                    obj! {"id": REASONING_ID, "type": "reasoning", "summary": summary}
                };
                let ids = || obj! {"item_id": REASONING_ID, "output_index": output_index, "summary_index": 0u32};
                ev.emit(
                    start,
                    "response.output_item.added",
                    obj! {"output_index": output_index, "item": item(arr![])},
                );
                ev.emit(
                    start,
                    "response.reasoning_summary_part.added",
                    ids().with("part", obj! {"type": "summary_text", "text": ""}),
                );
                for (i, &at) in work.at.iter().enumerate() {
                    ev.emit(
                        at,
                        "response.reasoning_summary_text.delta",
                        ids().with("delta", reasoning_token(i)),
                    );
                }
                if let Some(at) = close_at {
                    let text = full_reasoning(n);
                    let part = obj! {"type": "summary_text", "text": text.as_str()};
                    ev.emit(
                        at,
                        "response.reasoning_summary_text.done",
                        ids().with("text", text.as_str()),
                    );
                    ev.emit(
                        at,
                        "response.reasoning_summary_part.done",
                        ids().with("part", part.clone()),
                    );
                    ev.emit(
                        at,
                        "response.output_item.done",
                        obj! {"output_index": output_index, "item": item(arr![part])},
                    );
                }
            }
            WorkKind::ToolArgs => {
                let calls = ctx.calls();
                for (j, call) in calls.iter().enumerate() {
                    let Some(&start) = call.at.first() else {
                        continue;
                    };
                    // A call's item closes when the next call starts; the last one as the
                    // work does.
                    let close_at = match calls.get(j + 1).and_then(|next| next.at.first()) {
                        Some(&next) => Some(next),
                        None => close_at,
                    };
                    let item_id = call.id(CALL_ITEM_ID_PREFIX);
                    let ids = || obj! {"item_id": item_id.as_str(), "output_index": output_index};
                    ev.emit(
                        start,
                        "response.output_item.added",
                        obj! {"output_index": output_index, "item": call_item(call, "in_progress", String::new())},
                    );
                    for (i, &at) in call.at.iter().enumerate() {
                        ev.emit(
                            at,
                            "response.function_call_arguments.delta",
                            ids().with("delta", call.fragment(i)),
                        );
                    }
                    if let Some(at) = close_at {
                        let args = call.input().encode();
                        ev.emit(
                            at,
                            "response.function_call_arguments.done",
                            ids().with("arguments", args.as_str()),
                        );
                        ev.emit(
                            at,
                            "response.output_item.done",
                            obj! {"output_index": output_index, "item": call_item(call, "completed", args)},
                        );
                    }
                    if j + 1 < calls.len() {
                        output_index += 1;
                    }
                }
            }
        }
        output_index += 1;
    }

    if let Some(text) = &t.text {
        let ids = || {
            obj! {"item_id": MESSAGE_ID, "output_index": output_index, "content_index": 0u32}
        };
        ev.emit(
            text.start,
            "response.output_item.added",
            obj! {"output_index": output_index, "item": message_item("in_progress", arr![])},
        );
        ev.emit(
            text.start,
            "response.content_part.added",
            ids().with("part", output_text("")),
        );
        for (i, &at) in text.at.iter().enumerate() {
            ev.emit(
                at,
                "response.output_text.delta",
                ids()
                    .with("delta", ctx.text_delta(i))
                    .with("logprobs", J::Arr(Vec::new())),
            );
        }
        if let Ending::Done { .. } = ending {
            let full = ctx.answer_text();
            ev.emit(
                t.end,
                "response.output_text.done",
                ids()
                    .with("text", full)
                    .with("logprobs", J::Arr(Vec::new())),
            );
            ev.emit(
                t.end,
                "response.content_part.done",
                ids().with("part", output_text(full)),
            );
            ev.emit(
                t.end,
                "response.output_item.done",
                obj! {
                    "output_index": output_index,
                    "item": message_item(message_status(ctx), arr![output_text(full)]),
                },
            );
        }
    }

    match ending {
        Ending::Done { incomplete } => {
            let (ty, status) = if incomplete {
                ("response.incomplete", "incomplete")
            } else {
                ("response.completed", "completed")
            };
            let done = response(ctx, status, output(ctx), usage(ctx));
            ev.emit(t.end, ty, obj! {"response": done});
        }
        Ending::Error => {
            let e = ApiError::scripted(ctx.status);
            // The nested shape of the real recording (type, code, message, param inside
            // `error`), then `response.failed` with `error{code,message}` and no usage.
            ev.emit(
                t.end,
                "error",
                obj! {"error": obj! {
                    "type": e.openai_type,
                    "code": e.openai_code.unwrap_or(e.openai_type),
                    "message": e.message.as_str(),
                    "param": J::Null,
                }},
            );
            let failed = obj! {
                "code": e.openai_code.unwrap_or(e.openai_type),
                "message": e.message.as_str(),
            };
            let resp = response(ctx, "failed", Vec::new(), J::Null).set("error", failed);
            ev.emit(t.end, "response.failed", obj! {"response": resp});
        }
        Ending::Cut => {}
    }
}

/// The response object a store keeps: the non-streamed body, or the failed response of an
/// in-band error. A stream cut short (close, reset, stall) is kept completed, as the provider
/// finishes a stored response whether or not its client stayed.
pub(super) fn stored(ctx: &Ctx<'_>) -> String {
    match ctx.ending() {
        Ending::Error => {
            let e = ApiError::scripted(ctx.status);
            let failed = obj! {
                "code": e.openai_code.unwrap_or(e.openai_type),
                "message": e.message.as_str(),
            };
            response(ctx, "failed", Vec::new(), J::Null)
                .set("error", failed)
                .encode()
        }
        Ending::Done { .. } | Ending::Cut => body(ctx),
    }
}

/// A background response before it ran.
pub(super) fn queued(ctx: &Ctx<'_>) -> String {
    response(ctx, "queued", Vec::new(), J::Null).encode()
}

/// A background response cancelled before it ran.
pub(super) fn cancelled(ctx: &Ctx<'_>) -> String {
    response(ctx, "cancelled", Vec::new(), J::Null).encode()
}

/// The non-streamed response object.
pub(super) fn body(ctx: &Ctx<'_>) -> String {
    let status = if ctx.incomplete() {
        "incomplete"
    } else {
        "completed"
    };
    response(ctx, status, output(ctx), usage(ctx)).encode()
}

fn message_status(ctx: &Ctx<'_>) -> &'static str {
    if ctx.incomplete() {
        "incomplete"
    } else {
        "completed"
    }
}

/// The finished output items, as `response.completed` and the non-streamed body list them.
fn output(ctx: &Ctx<'_>) -> Vec<J> {
    let mut items = Vec::new();
    match ctx.work_kind() {
        Some(WorkKind::Reasoning) => items.push(obj! {
            "id": REASONING_ID,
            "type": "reasoning",
            "summary": arr![obj! {"type": "summary_text", "text": full_reasoning(ctx.work_count())}],
        }),
        Some(WorkKind::ToolArgs) => {
            for call in ctx.calls() {
                items.push(call_item(&call, "completed", call.input().encode()));
            }
        }
        None => {}
    }
    if ctx.text_count().is_some() {
        items.push(message_item(
            message_status(ctx),
            arr![output_text(ctx.answer_text())],
        ));
    }
    items
}

fn call_item(call: &Call<'_>, status: &str, arguments: String) -> J {
    obj! {
        "id": call.id(CALL_ITEM_ID_PREFIX),
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call.id(CALL_ID_PREFIX),
        "name": call.name(),
    }
}

fn message_item(status: &str, content: J) -> J {
    obj! {
        "id": MESSAGE_ID,
        "type": "message",
        "status": status,
        "content": content,
        "role": "assistant",
    }
}

fn output_text(text: &str) -> J {
    obj! {"type": "output_text", "annotations": arr![], "logprobs": arr![], "text": text}
}

/// The `response` object of the lifecycle events, with the fields a real one carries.
fn response(ctx: &Ctx<'_>, status: &str, output: Vec<J>, usage: J) -> J {
    let incomplete = if status == "incomplete" {
        let reason = if ctx.filtered() {
            "content_filter"
        } else {
            "max_output_tokens"
        };
        obj! {"reason": reason}
    } else {
        J::Null
    };
    let meta = ctx.response;
    obj! {
        "id": meta.id.as_str(),
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": meta.background,
        "error": J::Null,
        "incomplete_details": incomplete,
        "instructions": J::Null,
        "max_output_tokens": J::Null,
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": meta.previous_response_id.as_deref(),
        "reasoning": obj! {"effort": J::Null, "summary": J::Null},
        "service_tier": "default",
        "store": meta.store,
        "temperature": 1u32,
        "text": obj! {"format": obj! {"type": "text"}},
        "tool_choice": "auto",
        "tools": arr![],
        "top_p": 1u32,
        "truncation": "disabled",
        "usage": usage,
        "user": J::Null,
        "metadata": obj! {},
    }
}

/// `ResponseUsage`: input includes cached tokens, output includes reasoning tokens.
fn usage(ctx: &Ctx<'_>) -> J {
    let u = ctx.usage;
    let mut input_details = obj! {"cached_tokens": u.cache_read};
    if u.cache_write > 0 {
        input_details = input_details.with("cache_write_tokens", u.cache_write);
    }
    obj! {
        "input_tokens": u.input_total(),
        "input_tokens_details": input_details,
        "output_tokens": u.output,
        "output_tokens_details": obj! {"reasoning_tokens": u.reasoning},
        "total_tokens": u.total(),
    }
}
