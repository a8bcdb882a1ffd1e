//! The answer as a whole: hub events folded into owned blocks, for the encoders that repeat
//! the whole answer (a non-streamed body, the Responses `response.completed` object) and for
//! the tests that compare answers.

use super::hub::{BlockKind, Delta, ErrorKind, HubError, HubEvent, JsonText, StopReason};
use crate::usage::Tokens;

/// One content block, its text kept escaped (see [`super::hub::JsonText`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub kind: BlockKind<'static>,
    /// Text, reasoning text or tool-call arguments, concatenated.
    pub text: String,
    /// Anthropic's thinking signature.
    pub signature: Option<String>,
    pub stopped: bool,
}

/// Everything an answer said so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub id: Option<String>,
    pub model: Option<String>,
    pub blocks: Vec<Block>,
    pub stop: Option<StopReason>,
    pub usage: Tokens,
    /// The in-band error that ended it: kind and escaped message.
    pub error: Option<(ErrorKind, String)>,
    pub ended: bool,
}

impl Answer {
    pub fn apply(&mut self, event: &HubEvent<'_>) {
        match event {
            HubEvent::MessageStart { id, model, usage } => {
                self.id = id.as_ref().map(|t| t.raw().to_owned());
                self.model = model.as_ref().map(|t| t.raw().to_owned());
                self.usage = *usage;
            }
            HubEvent::BlockStart { kind, .. } => self.blocks.push(Block {
                kind: owned(kind),
                text: String::new(),
                signature: None,
                stopped: false,
            }),
            HubEvent::BlockDelta { index, delta } => {
                if let Some(block) = self.block(*index) {
                    match delta {
                        Delta::Text(t) | Delta::Reasoning(t) | Delta::ToolArgs(t) => {
                            block.text.push_str(t.raw());
                        }
                        Delta::Signature(s) => {
                            block
                                .signature
                                .get_or_insert_with(String::new)
                                .push_str(s.raw());
                        }
                    }
                }
            }
            HubEvent::BlockStop { index } => {
                if let Some(block) = self.block(*index) {
                    block.stopped = true;
                }
            }
            HubEvent::Usage(usage) => self.usage = *usage,
            HubEvent::Stop(stop) => self.stop = Some(*stop),
            HubEvent::Error(err) => {
                self.error = Some((err.kind, err.message.raw().to_owned()));
            }
            HubEvent::End => self.ended = true,
            HubEvent::Heartbeat => {}
        }
    }

    fn block(&mut self, index: u32) -> Option<&mut Block> {
        self.blocks.get_mut(usize::try_from(index).ok()?)
    }

    /// The block of hub index `index`, if it started.
    pub(crate) fn block_at(&self, index: u32) -> Option<&Block> {
        self.blocks.get(usize::try_from(index).ok()?)
    }

    /// The in-band error that ended the answer, as the hub error the encoders write.
    pub(crate) fn hub_error(&self) -> Option<HubError<'_>> {
        let (kind, message) = self.error.as_ref()?;
        Some(HubError {
            kind: *kind,
            message: JsonText::escaped(message),
        })
    }

    /// Clears for the next answer, keeping the allocations.
    pub fn clear(&mut self) {
        self.id = None;
        self.model = None;
        self.blocks.clear();
        self.stop = None;
        self.usage = Tokens::default();
        self.error = None;
        self.ended = false;
    }

    /// Whether any block is a tool call (a Responses answer says so only by its items).
    pub fn has_tool_call(&self) -> bool {
        self.blocks
            .iter()
            .any(|b| matches!(b.kind, BlockKind::ToolCall { .. }))
    }
}

fn owned(kind: &BlockKind<'_>) -> BlockKind<'static> {
    match kind {
        BlockKind::Text => BlockKind::Text,
        BlockKind::Reasoning => BlockKind::Reasoning,
        BlockKind::RedactedReasoning { data } => BlockKind::RedactedReasoning {
            data: data.clone().into_owned(),
        },
        BlockKind::ToolCall { id, name } => BlockKind::ToolCall {
            id: id.clone().into_owned(),
            name: name.clone().into_owned(),
        },
    }
}
