//! OpenAI Responses: `event: <type>` + `data: {"type":…,"sequence_number":n,…}` events, from
//! `response.created` to `response.completed`, `response.incomplete` or `response.failed`.
//! Responses has no stop reason: a completed answer with function calls stopped for tool use,
//! and an incomplete one names why (`max_output_tokens`, `content_filter`).

mod decode;
mod encode;

pub(crate) use decode::{decode_body, Decoder};
pub(crate) use encode::{encode_body, Encoder};

use super::hub::StopReason;

/// `incomplete_details.reason` → stop reason; an unknown reason is still a cut answer.
fn incomplete_stop(reason: Option<&str>) -> StopReason {
    match reason {
        Some("content_filter") => StopReason::ContentFilter,
        _ => StopReason::MaxTokens,
    }
}

/// Stop reason → the `incomplete_details.reason` of an incomplete answer; `None` for a
/// completed one.
fn incomplete_reason(stop: StopReason) -> Option<&'static str> {
    match stop {
        StopReason::MaxTokens | StopReason::ContextWindowExceeded => Some("max_output_tokens"),
        StopReason::ContentFilter | StopReason::Refusal => Some("content_filter"),
        StopReason::EndTurn
        | StopReason::ToolUse
        | StopReason::StopSequence
        | StopReason::PauseTurn => None,
    }
}
