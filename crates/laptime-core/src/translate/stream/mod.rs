//! The hub model of a stream of output events ([`hub`]), each dialect's upstream decoder (SSE
//! events and whole bodies) and client encoder, error translation ([`error`]), and the
//! streaming translator the proxy drops into its relay ([`StreamTranslator`]).
//!
//! Each dialect's module holds its decoder and its encoder: `chat`, `responses`,
//! `messages`, `gemini`. Choices made once for all of them:
//! - Text stays JSON-escaped from the upstream's bytes to the client's ([`hub::JsonText`]).
//! - Ids: the client sees ids made from [`ClientStreamOptions::id`] (`chatcmpl-…`, `resp_…`,
//!   `msg_…`, Gemini's `responseId` the seed itself); tool-call ids are the upstream's, so tool
//!   results sent back match (a Gemini call without one gets `call_<n>`).
//! - A count the client dialect requires but the upstream did not report is written as 0
//!   (named in each encoder); every other unknown count is left out.
//! - What a client dialect cannot carry (an Anthropic signature or redacted thinking for an
//!   OpenAI client, server-tool blocks) is not sent; every answer text, reasoning text, tool
//!   call, stop reason and count is.

pub mod acc;
mod chat;
pub mod error;
mod gemini;
pub mod hub;
mod json;
mod messages;
mod responses;
mod splice;
mod translator;

#[cfg(test)]
mod tests;

pub use acc::Answer;
pub use hub::{BlockKind, Delta, ErrorKind, HubError, HubEvent, JsonText, StopReason};
pub use splice::Splice;
pub use translator::{read_stream, translate_body, translate_error, StreamTranslator};

use std::collections::VecDeque;

use bytes::BytesMut;

use crate::relay::Piece;

/// What the client's stream reports that the upstream's does not decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStreamOptions {
    /// The model name the client sees when the upstream's answer names none (the name the
    /// upstream was asked for fits). An answer that names its model is reported as it is, as an
    /// untranslated answer would be: after a failover the client sees the fallback's model.
    pub model: Option<String>,
    /// The seed of the ids the client sees (the gateway's request id fits).
    pub id: String,
    /// Unix seconds of the answer's creation (Chat `created`, Responses `created_at`).
    pub created: u64,
    /// Chat only: the client asked `stream_options.include_usage`, so the usage chunk is sent.
    pub include_usage: bool,
    /// Whether [`Piece::TimingComment`] is placed in the client's stream. True for every
    /// dialect but Gemini, whose official SDKs fail on a non-`data:` line (the proxy's
    /// `gemini_timing_comment` turns it on there, after the last chunk).
    pub timing_comment: bool,
}

impl ClientStreamOptions {
    /// These options, reporting `model` when the upstream's answer names none.
    pub fn for_model(&self, model: &str) -> ClientStreamOptions {
        ClientStreamOptions {
            model: Some(model.to_owned()),
            ..self.clone()
        }
    }
}

/// Why a whole body could not be translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TranslateError {
    /// The body is not a JSON answer of the upstream's dialect.
    NotAnAnswer,
    /// A tool call's arguments are not a JSON object, and the client dialect carries them as
    /// one (Anthropic `input`): the arguments were cut, or the upstream sent invalid JSON.
    ToolArgumentsNotAnObject { block: u32 },
}

impl std::fmt::Display for TranslateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TranslateError::NotAnAnswer => f.write_str("the upstream body is not an answer"),
            TranslateError::ToolArgumentsNotAnObject { block } => write!(
                f,
                "the arguments of the tool call in block {block} are not a JSON object"
            ),
        }
    }
}

impl std::error::Error for TranslateError {}

/// Where an encoder writes: bytes into a reused buffer, and the timing comment's place.
pub(crate) struct Out<'q> {
    buf: &'q mut BytesMut,
    pieces: &'q mut VecDeque<Piece>,
    /// Whether the timing comment is placed at all ([`ClientStreamOptions::timing_comment`]).
    timing_comment: bool,
}

impl<'q> Out<'q> {
    pub(crate) fn new(
        buf: &'q mut BytesMut,
        pieces: &'q mut VecDeque<Piece>,
        timing_comment: bool,
    ) -> Self {
        Out {
            buf,
            pieces,
            timing_comment,
        }
    }

    pub(crate) fn buf(&mut self) -> &mut BytesMut {
        self.buf
    }

    /// The timing comment goes here (before the client's terminal frame; after Gemini's last
    /// chunk), when the options ask for one.
    pub(crate) fn comment(&mut self) {
        if self.timing_comment {
            self.flush();
            self.pieces.push_back(Piece::TimingComment);
        }
    }

    /// Queues what was written.
    pub(crate) fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.pieces
                .push_back(Piece::Bytes(self.buf.split().freeze()));
        }
    }
}

/// The blocks a decoder has open, by the upstream's key for them (an index, or a kind), and the
/// hub index each got: hub indexes count from 0 in start order whatever the upstream's were.
#[derive(Debug, Default)]
pub(crate) struct OpenBlocks {
    next: u32,
    open: Vec<(u64, u32)>,
}

impl OpenBlocks {
    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        self.open.iter().find(|(k, _)| *k == key).map(|(_, i)| *i)
    }

    pub(crate) fn start<'a>(
        &mut self,
        key: u64,
        kind: BlockKind<'a>,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) -> u32 {
        let index = self.next;
        self.next += 1;
        self.open.push((key, index));
        emit(HubEvent::BlockStart { index, kind });
        index
    }

    /// The hub index of the block of `key`, started as `kind` if it is not open (an upstream
    /// may skip a block's opening event and send its first delta straight away).
    pub(crate) fn open<'a>(
        &mut self,
        key: u64,
        kind: BlockKind<'a>,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) -> u32 {
        match self.get(key) {
            Some(index) => index,
            None => self.start(key, kind, emit),
        }
    }

    /// Stops the block of `key`, if it is open.
    pub(crate) fn stop<'a>(&mut self, key: u64, emit: &mut impl FnMut(HubEvent<'a>)) {
        if let Some(at) = self.open.iter().position(|(k, _)| *k == key) {
            let (_, index) = self.open.remove(at);
            emit(HubEvent::BlockStop { index });
        }
    }

    /// Stops every open block, in start order.
    pub(crate) fn stop_all<'a>(&mut self, emit: &mut impl FnMut(HubEvent<'a>)) {
        for (_, index) in self.open.drain(..) {
            emit(HubEvent::BlockStop { index });
        }
    }
}

/// Emits a block that a whole body holds: start, its deltas, stop.
pub(crate) fn whole_block<'a>(
    next: &mut u32,
    kind: BlockKind<'a>,
    deltas: impl IntoIterator<Item = Delta<'a>>,
    emit: &mut impl FnMut(HubEvent<'a>),
) {
    let index = *next;
    *next += 1;
    emit(HubEvent::BlockStart { index, kind });
    for delta in deltas {
        emit(HubEvent::BlockDelta { index, delta });
    }
    emit(HubEvent::BlockStop { index });
}

/// The options as the encoders write them: escaped once.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    /// Escaped; reported when the upstream names no model.
    model: Option<String>,
    /// Escaped id seed.
    id: String,
    created: u64,
    include_usage: bool,
}

impl Head {
    pub(crate) fn new(opts: &ClientStreamOptions) -> Self {
        let escape = |s: &str| JsonText::from_plain(s).raw().to_owned();
        Head {
            model: opts.model.as_deref().map(escape),
            id: escape(&opts.id),
            created: opts.created,
            include_usage: opts.include_usage,
        }
    }

    /// The escaped id seed.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The model to report: the upstream's, else the configured one (escaped).
    pub(crate) fn model<'s>(&'s self, upstream: Option<&'s str>) -> &'s str {
        upstream
            .filter(|m| !m.is_empty())
            .or(self.model.as_deref())
            .unwrap_or_default()
    }
}

/// Writes `"key":` into an object, with a comma unless it is the object's first key.
pub(crate) fn field(out: &mut impl json::JsonOut, first: &mut bool, key: &str) {
    if *first {
        *first = false;
        out.raw("\"");
    } else {
        out.raw(",\"");
    }
    out.raw(key);
    out.raw("\":");
}
