//! Gemini chunks and `GenerateContentResponse` bodies → hub events.
//!
//! Only the candidate of `index` 0 is read (the request side refuses `candidateCount` > 1).
//! Text and `thought: true` text are blocks that end when output of another kind starts; a
//! `functionCall` is a whole block at once (start with its id, one arguments delta, stop), its
//! id `call_<n>` when Gemini sent none (n counts the answer's calls from 0). A
//! `thoughtSignature` on a thought part is its reasoning block's signature; on any other part
//! no other dialect has a place for it and it is not decoded. The decoder is done after the
//! chunk that carries the `finishReason`, a prompt block, or an error: Gemini sends no
//! terminal frame.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::hub::{BlockKind, Delta, ErrorKind, HubError, HubEvent, JsonText};
use super::super::json::{nonempty, plain, text, value_as_text};
use super::super::{OpenBlocks, TranslateError};
use super::{finish, Finish};
use crate::usage::UsageAcc;
use crate::wire::usage::GeminiUsage;
use crate::wire::{nonempty_str, Count, Few};
use crate::Dialect;

const TEXT: u64 = 0;
const REASONING: u64 = 1;
/// Tool call `i` is key `TOOL + i`.
const TOOL: u64 = 2;

/// Decodes one upstream Gemini stream.
#[derive(Debug)]
pub(crate) struct Decoder {
    started: bool,
    blocks: OpenBlocks,
    usage: UsageAcc,
    calls: u32,
    done: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            started: false,
            blocks: OpenBlocks::default(),
            usage: UsageAcc::new(Dialect::Gemini),
            calls: 0,
            done: false,
        }
    }
}

impl Decoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether the last chunk (a finish reason, a prompt block or an error) arrived.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    pub(crate) fn event<'a>(&mut self, data: &'a str, emit: &mut impl FnMut(HubEvent<'a>)) {
        if let Ok(chunk) = serde_json::from_str::<Chunk<'a>>(data) {
            self.chunk(chunk, emit);
        }
    }

    fn chunk<'a>(&mut self, chunk: Chunk<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        if self.done {
            return;
        }
        if let Some(err) = chunk.error {
            self.end(emit);
            emit(HubEvent::Error(err.hub()));
            return;
        }
        if !self.started {
            self.started = true;
            emit(HubEvent::MessageStart {
                id: nonempty(chunk.response_id),
                model: nonempty(chunk.model_version),
                usage: Default::default(),
            });
        }
        let mut reason = None;
        let candidates = chunk.candidates.unwrap_or_default();
        if let Some(c) = candidates.into_iter().find(|c| c.index.0.unwrap_or(0) == 0) {
            for part in c.content.and_then(|c| c.parts).unwrap_or_default() {
                self.part(part, emit);
            }
            reason = plain(c.finish_reason);
        } else if chunk
            .prompt_feedback
            .is_some_and(|f| nonempty_str(f.block_reason))
        {
            reason = Some("PROMPT_BLOCKED".into());
        }
        if let Some(usage) = chunk.usage_metadata {
            self.usage.apply(&usage.report());
            emit(HubEvent::Usage(self.usage.tokens()));
        }
        let Some(reason) = reason else { return };
        self.end(emit);
        match finish(&reason, self.calls > 0) {
            Finish::Stop(stop) => {
                emit(HubEvent::Stop(stop));
                emit(HubEvent::End);
            }
            Finish::Failed => emit(HubEvent::Error(HubError {
                kind: ErrorKind::Server,
                message: JsonText::from_plain(&format!(
                    "the model's function call could not be used ({reason})"
                )),
            })),
        }
    }

    /// Stops every block: the answer ends with this chunk.
    fn end<'a>(&mut self, emit: &mut impl FnMut(HubEvent<'a>)) {
        self.blocks.stop_all(emit);
        self.done = true;
    }

    fn part<'a>(&mut self, part: Part<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        if let Some(call) = part.function_call {
            self.blocks.stop(TEXT, emit);
            self.blocks.stop(REASONING, emit);
            let n = self.calls;
            self.calls += 1;
            let id =
                nonempty(call.id).unwrap_or_else(|| JsonText::from_plain(&format!("call_{n}")));
            let kind = BlockKind::ToolCall {
                id,
                name: text(call.name).unwrap_or_default(),
            };
            let key = TOOL + u64::from(n);
            let index = self.blocks.start(key, kind, emit);
            let args = call.args.filter(|raw| {
                let s = raw.get();
                s.starts_with('{') && !s[1..s.len() - 1].trim_ascii().is_empty()
            });
            if let Some(args) = args {
                let delta = Delta::ToolArgs(value_as_text(args));
                emit(HubEvent::BlockDelta { index, delta });
            }
            self.blocks.stop(key, emit);
            return;
        }
        let thought = part.thought.is_some_and(|t| t.get() == "true");
        let (key, other, kind) = if thought {
            (REASONING, TEXT, BlockKind::Reasoning)
        } else {
            (TEXT, REASONING, BlockKind::Text)
        };
        let signature = nonempty(part.thought_signature).filter(|_| thought);
        let Some(t) = nonempty(part.text) else {
            if let Some(sig) = signature {
                self.blocks.stop(other, emit);
                let index = self.blocks.open(key, kind, emit);
                let delta = Delta::Signature(sig);
                emit(HubEvent::BlockDelta { index, delta });
            }
            return;
        };
        self.blocks.stop(other, emit);
        let index = self.blocks.open(key, kind, emit);
        let delta = if thought {
            Delta::Reasoning(t)
        } else {
            Delta::Text(t)
        };
        emit(HubEvent::BlockDelta { index, delta });
        if let Some(sig) = signature {
            let delta = Delta::Signature(sig);
            emit(HubEvent::BlockDelta { index, delta });
        }
    }
}

/// Decodes a whole `GenerateContentResponse` body (or an error body): the same fields as a
/// chunk, and the answer ends with it whether or not it names a finish reason.
pub(crate) fn decode_body<'a>(
    body: &'a [u8],
    emit: &mut impl FnMut(HubEvent<'a>),
) -> Result<(), TranslateError> {
    let body = std::str::from_utf8(body).map_err(|_| TranslateError::NotAnAnswer)?;
    let chunk = serde_json::from_str::<Chunk<'a>>(body).map_err(|_| TranslateError::NotAnAnswer)?;
    if chunk.candidates.is_none() && chunk.prompt_feedback.is_none() && chunk.error.is_none() {
        return Err(TranslateError::NotAnAnswer);
    }
    let mut decoder = Decoder::new();
    decoder.chunk(chunk, emit);
    if !decoder.done {
        decoder.end(emit);
        emit(HubEvent::End);
    }
    Ok(())
}

// === wire shapes (only the fields translation reads) ===

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    #[serde(borrow)]
    candidates: Option<Few<Candidate<'a>>>,
    usage_metadata: Option<GeminiUsage>,
    #[serde(borrow)]
    prompt_feedback: Option<PromptFeedback<'a>>,
    #[serde(borrow)]
    model_version: Option<&'a RawValue>,
    #[serde(borrow)]
    response_id: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<GoogleError<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback<'a> {
    #[serde(borrow)]
    block_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(borrow)]
    content: Option<Content<'a>>,
    #[serde(borrow)]
    finish_reason: Option<&'a RawValue>,
    #[serde(default)]
    index: Count,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(borrow)]
    parts: Option<Few<Part<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thought: Option<&'a RawValue>,
    #[serde(borrow)]
    thought_signature: Option<&'a RawValue>,
    #[serde(borrow)]
    function_call: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    args: Option<&'a RawValue>,
}

/// Google's error object: `{code, message, status}`.
#[derive(Deserialize)]
pub(crate) struct GoogleError<'a> {
    #[serde(default)]
    code: Count,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    #[serde(borrow)]
    status: Option<&'a RawValue>,
}

impl<'a> GoogleError<'a> {
    /// The hub error it names: by its status word, else its code; a server error otherwise.
    pub(crate) fn hub(&self) -> HubError<'a> {
        let status = plain(self.status);
        HubError {
            kind: ErrorKind::from_google(status.as_deref(), self.code.0)
                .unwrap_or(ErrorKind::Server),
            message: text(self.message).unwrap_or_default(),
        }
    }
}

/// A whole error body: `{"error":{…}}`.
#[derive(Deserialize)]
pub(crate) struct GoogleErrorBody<'a> {
    #[serde(borrow)]
    pub(crate) error: Option<GoogleError<'a>>,
}
