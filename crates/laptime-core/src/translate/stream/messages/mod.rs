//! Anthropic Messages: `event: <name>` + `data: {"type":"<name>",…}` events, from
//! `message_start` to `message_stop` (or `error`). Anthropic's `input_tokens` leaves out cache
//! reads and writes; the hub's input includes them, so the decoder adds them and the encoder
//! takes them out again.

mod decode;
mod encode;

pub(crate) use decode::{decode_body, Decoder};
pub(crate) use encode::{encode_body, Encoder};

use super::hub::StopReason;
use crate::usage::Tokens;

fn stop_reason(name: &str) -> StopReason {
    match name {
        "max_tokens" => StopReason::MaxTokens,
        "model_context_window_exceeded" => StopReason::ContextWindowExceeded,
        "tool_use" => StopReason::ToolUse,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::Refusal,
        "pause_turn" => StopReason::PauseTurn,
        _ => StopReason::EndTurn,
    }
}

/// Anthropic has no content filter stop: a filtered answer is a `refusal`.
fn stop_name(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::ContextWindowExceeded => "model_context_window_exceeded",
        StopReason::ToolUse => "tool_use",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ContentFilter | StopReason::Refusal => "refusal",
        StopReason::PauseTurn => "pause_turn",
    }
}

/// Anthropic's `input_tokens`: the hub's input without the cache reads and writes.
fn uncached_input(u: &Tokens) -> Option<u64> {
    u.input.map(|i| {
        i.saturating_sub(u.cache_read.unwrap_or(0))
            .saturating_sub(u.cache_write.unwrap_or(0))
    })
}
