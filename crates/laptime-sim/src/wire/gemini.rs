//! Google Gemini: `data: {json}\r\n\r\n` (CRLF, as the generativelanguage API frames SSE), with
//! no `event:` line, no envelope, no heartbeat and no terminal frame: the chunk with the
//! `finishReason` is the last. JSON is Google's: `"key": value` in a stream, pretty-printed in a
//! whole answer (see `docs/reference/gemini.md`).
//!
//! Each chunk is a whole `GenerateContentResponse` carrying one part: a `thought: true` text for
//! each reasoning delta, one whole `functionCall` (Gemini never streams argument fragments: it is
//! sent when the call is complete, at the instant of the script's last fragment), a text part
//! per text delta. The last chunk, at the script's terminal instant, has an empty text part and
//! the `finishReason` (`STOP`, `MAX_TOKENS`, or `SAFETY` with its blocking rating).
//! `usageMetadata` rides on every chunk with the counts so far, zero counts left out as Google
//! leaves them out; the last chunk's are the script's totals. An in-band error is an
//! `{"error":{code,message,status}}` chunk.

use std::time::Duration;

use laptime_core::dialect::google_status;

use crate::json::{arr, obj, J};
use crate::script::WorkKind;

use super::{full_reasoning, reasoning_token, ApiError, Call, Ctx, Ending, Out};

const RESPONSE_ID: &str = "laptimeSimGeminiResp01";

/// What a chunk reports, so far.
#[derive(Clone, Copy, Default)]
struct SoFar {
    thoughts: u32,
    candidates: u32,
}

fn push(out: &mut Out, at: Duration, chunk: &J) {
    out.push(at, format!("data: {}\r\n\r\n", chunk.encode_spaced()));
}

pub(super) fn stream(ctx: &Ctx<'_>, out: &mut Out) {
    let t = ctx.timeline;
    let u = ctx.usage;
    let mut so_far = SoFar::default();
    if let Some(work) = &t.work {
        match work.kind {
            WorkKind::Reasoning => {
                for (i, &at) in work.at.iter().enumerate() {
                    let sent = u32::try_from(i + 1).unwrap_or(u32::MAX);
                    so_far.thoughts = sent.min(u.reasoning);
                    let part = obj! {"text": reasoning_token(i), "thought": true};
                    push(out, at, &chunk(ctx, part, None, usage(ctx, so_far)));
                }
            }
            WorkKind::ToolArgs => {
                let mut sent = 0usize;
                for c in ctx.calls() {
                    sent += c.at.len();
                    if let Some(&at) = c.at.last() {
                        so_far.candidates =
                            u32::try_from(sent).unwrap_or(u32::MAX).min(candidates(ctx));
                        push(out, at, &chunk(ctx, call(&c), None, usage(ctx, so_far)));
                    }
                }
            }
        }
    }
    let before_text = so_far.candidates;
    if let Some(text) = &t.text {
        for (i, &at) in text.at.iter().enumerate() {
            let sent = u32::try_from(i + 1).unwrap_or(u32::MAX);
            so_far.candidates = before_text.saturating_add(sent).min(candidates(ctx));
            let part = obj! {"text": ctx.text_delta(i)};
            push(out, at, &chunk(ctx, part, None, usage(ctx, so_far)));
        }
    }
    match ctx.ending() {
        Ending::Done { .. } => {
            let finish = finish_reason(ctx);
            push(
                out,
                t.end,
                &chunk(
                    ctx,
                    obj! {"text": ""},
                    Some(finish),
                    usage(ctx, totals(ctx)),
                ),
            );
        }
        Ending::Error => {
            let e = ApiError::scripted(ctx.status);
            push(out, t.end, &obj! {"error": google_object(&e)});
        }
        Ending::Cut => {}
    }
}

/// The whole `GenerateContentResponse`, pretty-printed as Google sends it.
pub(super) fn body(ctx: &Ctx<'_>) -> String {
    let mut parts = Vec::new();
    match ctx.work_kind() {
        Some(WorkKind::Reasoning) => {
            parts.push(obj! {"text": full_reasoning(ctx.work_count()), "thought": true});
        }
        Some(WorkKind::ToolArgs) => parts.extend(ctx.calls().iter().map(call)),
        None => {}
    }
    match ctx.text_count() {
        Some(_) => parts.push(obj! {"text": ctx.answer_text()}),
        None if parts.is_empty() => parts.push(obj! {"text": ""}),
        None => {}
    }
    response(
        ctx,
        J::Arr(parts),
        Some(finish_reason(ctx)),
        usage(ctx, totals(ctx)),
    )
    .encode_pretty()
}

/// The error body Google sends with an error status.
pub(super) fn error_body(e: &ApiError) -> String {
    obj! {"error": google_object(e)}.encode_pretty()
}

/// `{code, message, status}`: the HTTP status, the message and its `google.rpc.Code` name.
pub(super) fn google_object(e: &ApiError) -> J {
    obj! {
        "code": u32::from(e.status),
        "message": e.message.as_str(),
        "status": google_status(e.status),
    }
}

/// A whole call, without an id as the generativelanguage API sends it.
fn call(c: &Call<'_>) -> J {
    obj! {"functionCall": obj! {"name": c.name(), "args": c.input()}}
}

fn chunk(ctx: &Ctx<'_>, part: J, finish: Option<&'static str>, usage: J) -> J {
    response(ctx, arr![part], finish, usage)
}

fn response(ctx: &Ctx<'_>, parts: J, finish: Option<&'static str>, usage: J) -> J {
    let mut candidate = obj! {"content": obj! {"parts": parts, "role": "model"}};
    if let Some(reason) = finish {
        candidate = candidate.with("finishReason", reason);
        if reason == "SAFETY" {
            candidate = candidate.with(
                "safetyRatings",
                arr![obj! {
                    "category": "HARM_CATEGORY_DANGEROUS_CONTENT",
                    "probability": "HIGH",
                    "blocked": true,
                }],
            );
        }
    }
    candidate = candidate.with("index", 0u32);
    obj! {
        "candidates": arr![candidate],
        "usageMetadata": usage,
        "modelVersion": ctx.model,
        "responseId": RESPONSE_ID,
    }
}

fn finish_reason(ctx: &Ctx<'_>) -> &'static str {
    if ctx.filtered() {
        "SAFETY"
    } else if ctx.incomplete() {
        "MAX_TOKENS"
    } else {
        "STOP"
    }
}

/// Output tokens outside the thoughts: Gemini's `candidatesTokenCount` leaves thoughts out.
fn candidates(ctx: &Ctx<'_>) -> u32 {
    ctx.usage.output.saturating_sub(ctx.usage.reasoning)
}

fn totals(ctx: &Ctx<'_>) -> SoFar {
    SoFar {
        thoughts: ctx.usage.reasoning,
        candidates: candidates(ctx),
    }
}

/// `usageMetadata`: the prompt includes cached tokens (the script's cache writes too: Gemini
/// reports none of its own), zero counts are left out.
fn usage(ctx: &Ctx<'_>, so_far: SoFar) -> J {
    let u = ctx.usage;
    let prompt = u.input_total();
    let total = prompt
        .saturating_add(so_far.candidates)
        .saturating_add(so_far.thoughts);
    let mut m = obj! {"promptTokenCount": prompt};
    if so_far.candidates > 0 {
        m = m.with("candidatesTokenCount", so_far.candidates);
    }
    m = m.with("totalTokenCount", total);
    if u.cache_read > 0 {
        m = m.with("cachedContentTokenCount", u.cache_read);
    }
    m = m.with(
        "promptTokensDetails",
        arr![obj! {"modality": "TEXT", "tokenCount": prompt}],
    );
    if so_far.thoughts > 0 {
        m = m.with("thoughtsTokenCount", so_far.thoughts);
    }
    m
}
