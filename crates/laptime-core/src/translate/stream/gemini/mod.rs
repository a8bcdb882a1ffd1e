//! Google Gemini: `data: <GenerateContentResponse>\r\n\r\n` events without `event:` lines and
//! without a terminal frame: the chunk with the `finishReason` (or a prompt block, or an
//! `{"error":…}` chunk) is the last. A function call comes whole in one part; usage rides on
//! every chunk (the last wins) and is normalised as the classifier does
//! ([`crate::wire::usage::GeminiUsage`]). See `docs/reference/gemini.md`.

mod decode;
mod encode;

pub(crate) use decode::{decode_body, Decoder, GoogleErrorBody};
pub(crate) use encode::{encode_body, write_google_error, Encoder};

use super::hub::{ErrorKind, StopReason};

/// How a Gemini candidate finished, as the hub reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    Stop(StopReason),
    /// The model's tool call could not be used: an upstream error, as the classifier says.
    Failed,
}

/// `finishReason` → the hub's end. `STOP` ends a turn with tool calls too; every reason not
/// named here is a block, as the classifier reads it.
fn finish(reason: &str, called_tools: bool) -> Finish {
    match reason {
        "STOP" if called_tools => Finish::Stop(StopReason::ToolUse),
        "STOP" => Finish::Stop(StopReason::EndTurn),
        "MAX_TOKENS" => Finish::Stop(StopReason::MaxTokens),
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "TOO_MANY_TOOL_CALLS" => {
            Finish::Failed
        }
        _ => Finish::Stop(StopReason::ContentFilter),
    }
}

/// Stop reason → `finishReason`: Gemini ends tool calls, stop sequences and paused turns with
/// `STOP`, and has no refusal of its own (a refusal is a safety stop).
fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn
        | StopReason::ToolUse
        | StopReason::StopSequence
        | StopReason::PauseTurn => "STOP",
        StopReason::MaxTokens | StopReason::ContextWindowExceeded => "MAX_TOKENS",
        StopReason::ContentFilter | StopReason::Refusal => "SAFETY",
    }
}

impl ErrorKind {
    /// The kind a Google error names: by its `code` (the HTTP status), refined by its `status`
    /// word (`google.rpc.Code`) where the code names a kind only broadly (another 4xx or 5xx)
    /// or is absent.
    pub fn from_google(status: Option<&str>, code: Option<u64>) -> Option<ErrorKind> {
        let by_code = code
            .and_then(|c| u16::try_from(c).ok())
            .and_then(ErrorKind::from_status);
        let by_status = status.and_then(|s| {
            Some(match s {
                "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => {
                    ErrorKind::InvalidRequest
                }
                "UNAUTHENTICATED" => ErrorKind::Auth,
                "PERMISSION_DENIED" => ErrorKind::Permission,
                "NOT_FOUND" => ErrorKind::NotFound,
                "RESOURCE_EXHAUSTED" => ErrorKind::RateLimited,
                "DEADLINE_EXCEEDED" => ErrorKind::Timeout,
                "UNAVAILABLE" => ErrorKind::Overloaded,
                "INTERNAL" | "UNKNOWN" | "DATA_LOSS" => ErrorKind::Server,
                _ => return None,
            })
        });
        match by_code {
            None | Some(ErrorKind::InvalidRequest | ErrorKind::Server) => by_status.or(by_code),
            precise => precise,
        }
    }
}
