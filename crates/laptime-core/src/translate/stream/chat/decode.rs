//! Chat chunks and `chat.completion` bodies → hub events.
//!
//! Only `choices[0]` is read: the hub carries one answer (a request with `n > 1` is not
//! translated). Chat has no block boundaries, so the decoder makes them: a text or reasoning
//! block ends when output of another kind starts; tool-call blocks stay open until the finish
//! reason, because providers may interleave the argument fragments of parallel calls.
//! `delta.refusal` is answer text to the hub; Mistral's array-typed `content` (text and
//! thinking parts) is read too.

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::error::{in_band_error, ErrorObject};
use super::super::hub::{BlockKind, Delta, HubEvent, JsonText};
use super::super::json::{nonempty, plain, text, value_as_text};
use super::super::{whole_block, OpenBlocks, TranslateError};
use super::stop_reason;
use crate::observe::BodyEnd;
use crate::usage::UsageAcc;
use crate::wire::truthy;
use crate::wire::usage::ChatUsage;
use crate::wire::Count;
use crate::Dialect;

const TEXT: u64 = 0;
const REASONING: u64 = 1;
/// Tool call `i` is key `TOOL + i`.
const TOOL: u64 = 2;

/// Decodes one upstream Chat stream.
#[derive(Debug)]
pub(crate) struct Decoder {
    started: bool,
    blocks: OpenBlocks,
    usage: UsageAcc,
    /// A finish reason arrived.
    stopped: bool,
    /// `End` or `Error` was emitted: whatever follows (vLLM's `[DONE]` after an error) is not.
    done: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            started: false,
            blocks: OpenBlocks::default(),
            usage: UsageAcc::new(Dialect::Chat),
            stopped: false,
            done: false,
        }
    }
}

impl Decoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether the upstream's terminal (`[DONE]` or an error) arrived.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// The body ended. A stream that ended cleanly after its finish reason and its usage is
    /// complete even without `[DONE]` (the observer judges it so too); any other end without
    /// the terminal is left open.
    pub(crate) fn finish(&mut self, end: BodyEnd, emit: &mut impl FnMut(HubEvent<'static>)) {
        if !self.done && end == BodyEnd::Eof && self.stopped && self.usage.tokens().output.is_some()
        {
            self.blocks.stop_all(emit);
            self.done = true;
            emit(HubEvent::End);
        }
    }

    pub(crate) fn event<'a>(&mut self, data: &'a str, emit: &mut impl FnMut(HubEvent<'a>)) {
        if self.done {
            return;
        }
        if data.trim_ascii() == "[DONE]" {
            self.blocks.stop_all(emit);
            self.done = true;
            emit(HubEvent::End);
            return;
        }
        let Ok(chunk) = serde_json::from_str::<Chunk<'a>>(data) else {
            return;
        };
        if truthy(chunk.error) {
            self.blocks.stop_all(emit);
            self.done = true;
            let err = chunk
                .error
                .and_then(|raw| serde_json::from_str::<ErrorObject<'a>>(raw.get()).ok());
            emit(HubEvent::Error(in_band_error(err, false)));
            return;
        }
        if !self.started {
            self.started = true;
            emit(HubEvent::MessageStart {
                id: nonempty(chunk.id),
                model: nonempty(chunk.model),
                usage: Default::default(),
            });
        }
        if let Some(choice) = chunk.choices.and_then(|c| c.0) {
            if let Some(delta) = choice.delta {
                self.delta(delta, emit);
            }
            if let Some(reason) = plain(choice.finish_reason) {
                self.blocks.stop_all(emit);
                self.stopped = true;
                emit(HubEvent::Stop(stop_reason(&reason)));
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage.apply(&usage.report());
            emit(HubEvent::Usage(self.usage.tokens()));
        }
    }

    fn delta<'a>(&mut self, delta: ChunkDelta<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        let reasoning = nonempty(delta.reasoning_content).or_else(|| nonempty(delta.reasoning));
        let mut put = |piece| self.piece(piece, emit);
        if let Some(t) = reasoning {
            put(Piece::Reasoning(t));
        }
        content_pieces(delta.content, &mut put);
        if let Some(t) = nonempty(delta.refusal) {
            put(Piece::Text(t));
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.tool_fragment(call, emit);
        }
    }

    /// Text or reasoning goes to its block, which ends the block of the other kind.
    fn piece<'a>(&mut self, piece: Piece<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        let (key, other, kind, delta) = match piece {
            Piece::Reasoning(t) => (REASONING, TEXT, BlockKind::Reasoning, Delta::Reasoning(t)),
            Piece::Text(t) => (TEXT, REASONING, BlockKind::Text, Delta::Text(t)),
        };
        self.blocks.stop(other, emit);
        let index = self.blocks.open(key, kind, emit);
        emit(HubEvent::BlockDelta { index, delta });
    }

    fn tool_fragment<'a>(&mut self, call: ToolFragment<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        let key = TOOL + u64::from(call.index.unwrap_or(0));
        let (name, arguments) = match call.function {
            Some(f) => (text(f.name), nonempty(f.arguments)),
            None => (None, None),
        };
        let index = match self.blocks.get(key) {
            Some(index) => index,
            None => {
                self.blocks.stop(TEXT, emit);
                self.blocks.stop(REASONING, emit);
                let kind = BlockKind::ToolCall {
                    id: text(call.id).unwrap_or_default(),
                    name: name.unwrap_or_default(),
                };
                self.blocks.start(key, kind, emit)
            }
        };
        if let Some(args) = arguments {
            emit(HubEvent::BlockDelta {
                index,
                delta: Delta::ToolArgs(args),
            });
        }
    }
}

/// Decodes a whole `chat.completion` body (or an error body).
pub(crate) fn decode_body<'a>(
    body: &'a [u8],
    emit: &mut impl FnMut(HubEvent<'a>),
) -> Result<(), TranslateError> {
    let parsed =
        serde_json::from_slice::<Body<'a>>(body).map_err(|_| TranslateError::NotAnAnswer)?;
    if let Some(err) = parsed.error {
        emit(HubEvent::Error(in_band_error(Some(err), false)));
        return Ok(());
    }
    let choice = parsed
        .choices
        .and_then(|c| c.0)
        .ok_or(TranslateError::NotAnAnswer)?;
    emit(HubEvent::MessageStart {
        id: nonempty(parsed.id),
        model: nonempty(parsed.model),
        usage: Default::default(),
    });
    let mut next = 0u32;
    if let Some(m) = choice.message {
        let reasoning = nonempty(m.reasoning_content).or_else(|| nonempty(m.reasoning));
        let mut put = |piece| {
            let (kind, delta) = match piece {
                Piece::Reasoning(t) => (BlockKind::Reasoning, Delta::Reasoning(t)),
                Piece::Text(t) => (BlockKind::Text, Delta::Text(t)),
            };
            whole_block(&mut next, kind, Some(delta), emit);
        };
        if let Some(t) = reasoning {
            put(Piece::Reasoning(t));
        }
        content_pieces(m.content, &mut put);
        if let Some(t) = nonempty(m.refusal) {
            put(Piece::Text(t));
        }
        for call in m.tool_calls.into_iter().flatten() {
            let (name, args) = match call.function {
                Some(f) => (text(f.name), f.arguments),
                None => (None, None),
            };
            // Some servers send the arguments as an object rather than a string.
            let args = match args {
                Some(raw) if raw.get().starts_with('{') => Some(value_as_text(raw)),
                other => nonempty(other),
            };
            let kind = BlockKind::ToolCall {
                id: text(call.id).unwrap_or_default(),
                name: name.unwrap_or_default(),
            };
            whole_block(&mut next, kind, args.map(Delta::ToolArgs), emit);
        }
    }
    if let Some(reason) = plain(choice.finish_reason) {
        emit(HubEvent::Stop(stop_reason(&reason)));
    }
    if let Some(usage) = parsed.usage {
        let mut acc = UsageAcc::new(Dialect::Chat);
        acc.apply(&usage.report());
        emit(HubEvent::Usage(acc.tokens()));
    }
    emit(HubEvent::End);
    Ok(())
}

/// A piece of output a delta or message carried, in order.
enum Piece<'a> {
    Text(JsonText<'a>),
    Reasoning(JsonText<'a>),
}

/// `content`: a string, or (Mistral) an array of parts where `text` parts are answer text and
/// `thinking` parts hold reasoning as an array of text parts.
fn content_pieces<'a>(raw: Option<&'a RawValue>, put: &mut impl FnMut(Piece<'a>)) {
    let Some(raw) = raw else { return };
    if !raw.get().starts_with('[') {
        if let Some(t) = nonempty(Some(raw)) {
            put(Piece::Text(t));
        }
        return;
    }
    let parts = serde_json::from_str::<Vec<ContentPart<'a>>>(raw.get()).unwrap_or_default();
    for part in parts {
        match plain(part.kind).as_deref() {
            Some("text") => {
                if let Some(t) = nonempty(part.text) {
                    put(Piece::Text(t));
                }
            }
            Some("thinking") => {
                for inner in part.thinking.into_iter().flatten() {
                    if let Some(t) = nonempty(inner.text) {
                        put(Piece::Reasoning(t));
                    }
                }
            }
            _ => {}
        }
    }
}

// === wire shapes (only the fields translation reads) ===

#[derive(Deserialize)]
struct ContentPart<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<Vec<ContentPart<'a>>>,
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    choices: Option<FirstChoice<ChunkChoice<'a>>>,
    usage: Option<ChatUsage>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default)]
    index: Count,
    #[serde(borrow)]
    delta: Option<ChunkDelta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChunkDelta<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    refusal: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning_content: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<Vec<ToolFragment<'a>>>,
}

#[derive(Deserialize)]
struct ToolFragment<'a> {
    index: Option<u32>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    choices: Option<FirstChoice<BodyChoice<'a>>>,
    usage: Option<ChatUsage>,
    #[serde(borrow)]
    error: Option<ErrorObject<'a>>,
}

#[derive(Deserialize)]
struct BodyChoice<'a> {
    #[serde(default)]
    index: Count,
    #[serde(borrow)]
    message: Option<BodyMessage<'a>>,
    #[serde(borrow)]
    finish_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BodyMessage<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    refusal: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning_content: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<Vec<BodyTool<'a>>>,
}

#[derive(Deserialize)]
struct BodyTool<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    function: Option<Function<'a>>,
}

/// A choice with its index, so the first choice can be picked from the array.
trait Indexed {
    fn index(&self) -> Option<u64>;
}

impl Indexed for ChunkChoice<'_> {
    fn index(&self) -> Option<u64> {
        self.index.0
    }
}

impl Indexed for BodyChoice<'_> {
    fn index(&self) -> Option<u64> {
        self.index.0
    }
}

/// `choices[]` reduced while parsing to the choice with index 0 (or no index), without a `Vec`.
struct FirstChoice<C>(Option<C>);

impl<'de, C: Deserialize<'de> + Indexed> Deserialize<'de> for FirstChoice<C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<C>(std::marker::PhantomData<C>);

        impl<'de, C: Deserialize<'de> + Indexed> Visitor<'de> for V<C> {
            type Value = FirstChoice<C>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(FirstChoice(None))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut first = None;
                while let Some(choice) = seq.next_element::<C>()? {
                    if first.is_none() && matches!(choice.index(), None | Some(0)) {
                        first = Some(choice);
                    }
                }
                Ok(FirstChoice(first))
            }
        }

        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}
