//! OpenAI Chat Completions: `data: <chunk>` events without `event:` lines, ended by
//! `data: [DONE]`; reasoning travels as `delta.reasoning_content` (the field DeepSeek, older
//! vLLM and TensorRT-LLM send; the decoder also reads vLLM's newer `reasoning`).

mod decode;
mod encode;

pub(crate) use decode::{decode_body, Decoder};
pub(crate) use encode::{encode_body, Encoder};

use super::hub::StopReason;

/// `finish_reason` → stop reason. `function_call` is the deprecated name of `tool_calls`.
fn stop_reason(finish: &str) -> StopReason {
    match finish {
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        _ => StopReason::EndTurn,
    }
}

/// Stop reason → `finish_reason`: Chat has four, so a stop sequence and a paused turn are a
/// `stop`, a full context window is a `length`, and a refusal (a safety stop) a
/// `content_filter`.
fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn | StopReason::StopSequence | StopReason::PauseTurn => "stop",
        StopReason::MaxTokens | StopReason::ContextWindowExceeded => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter | StopReason::Refusal => "content_filter",
    }
}
