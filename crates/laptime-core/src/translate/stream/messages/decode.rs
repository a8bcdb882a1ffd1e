//! Anthropic events and `message` bodies → hub events.
//!
//! Blocks other than text, thinking, redacted thinking and tool use (server tools and their
//! results, citations) are answers of tools Anthropic ran: no other dialect carries them, and
//! they are not decoded. The `output_tokens` of `message_start` is a placeholder and is not
//! read; `message_delta` counts are cumulative and replace earlier ones field by field.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::error::{in_band_error, ErrorObject};
use super::super::hub::{BlockKind, Delta, HubEvent};
use super::super::json::{nonempty, plain, text, value_as_text};
use super::super::{whole_block, OpenBlocks, TranslateError};
use super::stop_reason;
use crate::usage::{UsageAcc, UsageReport};
use crate::wire::usage::MessagesUsage;
use crate::wire::Count;
use crate::Dialect;

/// Decodes one upstream Messages stream.
#[derive(Debug)]
pub(crate) struct Decoder {
    blocks: OpenBlocks,
    usage: UsageAcc,
    done: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            blocks: OpenBlocks::default(),
            usage: UsageAcc::new(Dialect::Messages),
            done: false,
        }
    }
}

impl Decoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether the upstream's terminal (`message_stop` or `error`) arrived.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    pub(crate) fn event<'a>(
        &mut self,
        event: Option<&str>,
        data: &'a str,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) {
        if self.done {
            return;
        }
        let Ok(ev) = serde_json::from_str::<Event<'a>>(data) else {
            return;
        };
        let kind = plain(ev.kind);
        match kind.as_deref().or(event).unwrap_or_default() {
            "content_block_delta" => {
                if let (Some(index), Some(delta)) = (ev.index.0, ev.delta) {
                    self.block_delta(index, delta, emit);
                }
            }
            "content_block_start" => {
                if let (Some(index), Some(block)) = (ev.index.0, ev.content_block) {
                    self.block_start(index, block, emit);
                }
            }
            "content_block_stop" => {
                if let Some(index) = ev.index.0 {
                    self.blocks.stop(index, emit);
                }
            }
            "message_start" => self.message_start(ev.message.unwrap_or_default(), emit),
            "message_delta" => {
                self.blocks.stop_all(emit);
                if let Some(reason) = ev.delta.and_then(|d| plain(d.stop_reason)) {
                    emit(HubEvent::Stop(stop_reason(&reason)));
                }
                if let Some(usage) = ev.usage {
                    self.usage.apply(&usage.report());
                    emit(HubEvent::Usage(self.usage.tokens()));
                }
            }
            "message_stop" => {
                self.blocks.stop_all(emit);
                self.done = true;
                emit(HubEvent::End);
            }
            "error" => {
                self.blocks.stop_all(emit);
                self.done = true;
                emit(HubEvent::Error(in_band_error(ev.error, true)));
            }
            "ping" => emit(HubEvent::Heartbeat),
            _ => {}
        }
    }

    fn message_start<'a>(&mut self, message: Message<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        if let Some(usage) = message.usage {
            // The start's output count is a placeholder (usually 1), not a count.
            let report = UsageReport {
                output: None,
                ..usage.report()
            };
            self.usage.apply(&report);
        }
        emit(HubEvent::MessageStart {
            id: nonempty(message.id),
            model: nonempty(message.model),
            usage: self.usage.tokens(),
        });
    }

    fn block_delta<'a>(
        &mut self,
        key: u64,
        delta: EventDelta<'a>,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) {
        let Some(index) = self.blocks.get(key) else {
            return;
        };
        let delta = match plain(delta.kind).as_deref() {
            Some("text_delta") => nonempty(delta.text).map(Delta::Text),
            Some("thinking_delta") => nonempty(delta.thinking).map(Delta::Reasoning),
            Some("signature_delta") => nonempty(delta.signature).map(Delta::Signature),
            Some("input_json_delta") => nonempty(delta.partial_json).map(Delta::ToolArgs),
            _ => None,
        };
        if let Some(delta) = delta {
            emit(HubEvent::BlockDelta { index, delta });
        }
    }

    fn block_start<'a>(&mut self, key: u64, block: Block<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        let Some((kind, first)) = block.hub() else {
            return;
        };
        let index = self.blocks.start(key, kind, emit);
        for delta in first.into_iter().flatten() {
            emit(HubEvent::BlockDelta { index, delta });
        }
    }
}

/// Decodes a whole `message` body (or an error body).
pub(crate) fn decode_body<'a>(
    body: &'a [u8],
    emit: &mut impl FnMut(HubEvent<'a>),
) -> Result<(), TranslateError> {
    let parsed =
        serde_json::from_slice::<Body<'a>>(body).map_err(|_| TranslateError::NotAnAnswer)?;
    if let Some(err) = parsed.error {
        emit(HubEvent::Error(in_band_error(Some(err), true)));
        return Ok(());
    }
    let content = parsed.content.ok_or(TranslateError::NotAnAnswer)?;
    let mut usage = UsageAcc::new(Dialect::Messages);
    if let Some(u) = &parsed.usage {
        usage.apply(&u.report());
    }
    emit(HubEvent::MessageStart {
        id: nonempty(parsed.id),
        model: nonempty(parsed.model),
        usage: Default::default(),
    });
    let mut next = 0;
    for block in content {
        let Some((kind, deltas)) = block.hub() else {
            continue;
        };
        whole_block(&mut next, kind, deltas.into_iter().flatten(), emit);
    }
    if let Some(reason) = plain(parsed.stop_reason) {
        emit(HubEvent::Stop(stop_reason(&reason)));
    }
    if parsed.usage.is_some() {
        emit(HubEvent::Usage(usage.tokens()));
    }
    emit(HubEvent::End);
    Ok(())
}

// === wire shapes (only the fields translation reads) ===

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(default)]
    index: Count,
    #[serde(borrow)]
    message: Option<Message<'a>>,
    #[serde(borrow)]
    content_block: Option<Block<'a>>,
    #[serde(borrow)]
    delta: Option<EventDelta<'a>>,
    usage: Option<MessagesUsage>,
    #[serde(borrow)]
    error: Option<ErrorObject<'a>>,
}

#[derive(Deserialize, Default)]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    usage: Option<MessagesUsage>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow)]
    signature: Option<&'a RawValue>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
}

impl<'a> Block<'a> {
    /// The hub block and the content it opens with (a streamed start opens empty; a body's
    /// block holds it all). `None` for a block no other dialect carries.
    fn hub(&self) -> Option<(BlockKind<'a>, [Option<Delta<'a>>; 2])> {
        Some(match plain(self.kind)?.as_ref() {
            "text" => (
                BlockKind::Text,
                [nonempty(self.text).map(Delta::Text), None],
            ),
            "thinking" => (
                BlockKind::Reasoning,
                [
                    nonempty(self.thinking).map(Delta::Reasoning),
                    nonempty(self.signature).map(Delta::Signature),
                ],
            ),
            "redacted_thinking" => (
                BlockKind::RedactedReasoning {
                    data: text(self.data).unwrap_or_default(),
                },
                [None, None],
            ),
            "tool_use" => {
                // A streamed start has `input: {}`; a body's block holds the whole input.
                let args = self
                    .input
                    .filter(|raw| {
                        let s = raw.get();
                        s.starts_with('{') && !s[1..s.len() - 1].trim_ascii().is_empty()
                    })
                    .map(|raw| Delta::ToolArgs(value_as_text(raw)));
                (
                    BlockKind::ToolCall {
                        id: text(self.id).unwrap_or_default(),
                        name: text(self.name).unwrap_or_default(),
                    },
                    [args, None],
                )
            }
            _ => return None,
        })
    }
}

#[derive(Deserialize)]
struct EventDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow)]
    signature: Option<&'a RawValue>,
    #[serde(borrow)]
    partial_json: Option<&'a RawValue>,
    #[serde(borrow)]
    stop_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<Vec<Block<'a>>>,
    #[serde(borrow)]
    stop_reason: Option<&'a RawValue>,
    usage: Option<MessagesUsage>,
    #[serde(borrow)]
    error: Option<ErrorObject<'a>>,
}
