//! Responses events and `response` bodies → hub events.
//!
//! A `message` item's `output_text` (or `refusal`) part is a text block; a `reasoning` item is
//! one reasoning block, fed by `reasoning_summary_text` and `reasoning_text` deltas alike
//! (summary parts a blank line apart), its `encrypted_content` the block's signature (the
//! request half carries it back as Anthropic's `signature` and the other way round); a
//! `function_call` item is a tool-call block whose id is the item's `call_id` (the id tool
//! results name). Hosted-tool items (web search, code interpreter, …) are tools OpenAI ran and
//! are not decoded. Arguments that arrive only in `.done` events (no deltas) are taken from
//! there.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::error::{in_band_error, ErrorObject};
use super::super::hub::{BlockKind, Delta, HubEvent, JsonText, StopReason};
use super::super::json::{nonempty, plain, text};
use super::super::{whole_block, OpenBlocks, TranslateError};
use super::incomplete_stop;
use crate::usage::{Tokens, UsageAcc};
use crate::wire::usage::ResponsesUsage;
use crate::wire::Count;
use crate::Dialect;

/// Between two summary parts of one reasoning item (escaped), as the request half joins them.
const PART_BREAK: &str = "\\n\\n";

/// The key of an item-level block (reasoning, function call): no content index.
const ITEM: u64 = 0xFFFF_FFFF;

fn key(output_index: u64, content_index: u64) -> u64 {
    (output_index << 32) | (content_index & ITEM)
}

/// Decodes one upstream Responses stream.
#[derive(Debug)]
pub(crate) struct Decoder {
    blocks: OpenBlocks,
    usage: UsageAcc,
    tool_seen: bool,
    /// Output indexes of function calls whose arguments arrived in deltas.
    args_streamed: Vec<u64>,
    done: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            blocks: OpenBlocks::default(),
            usage: UsageAcc::new(Dialect::Responses),
            tool_seen: false,
            args_streamed: Vec::new(),
            done: false,
        }
    }
}

impl Decoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether the upstream's terminal (`response.completed|incomplete|failed`, `error`)
    /// arrived.
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
        let output = ev.output_index.0.unwrap_or(0);
        let content = ev.content_index.0.unwrap_or(0);
        match kind.as_deref().or(event).unwrap_or_default() {
            "response.output_text.delta" | "response.refusal.delta" => {
                let key = key(output, content);
                self.delta(
                    key,
                    BlockKind::Text,
                    nonempty(ev.delta).map(Delta::Text),
                    emit,
                );
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let key = key(output, ITEM);
                let delta = nonempty(ev.delta).map(Delta::Reasoning);
                self.delta(key, BlockKind::Reasoning, delta, emit);
            }
            "response.function_call_arguments.delta" => {
                self.args(output, nonempty(ev.delta), emit);
            }
            "response.function_call_arguments.done" => {
                self.unstreamed_args(output, nonempty(ev.arguments), emit);
            }
            "response.content_part.added" => {
                let part = ev.part.as_ref().and_then(|p| plain(p.kind));
                if matches!(part.as_deref(), Some("output_text" | "refusal")) {
                    self.blocks
                        .open(key(output, content), BlockKind::Text, emit);
                }
            }
            "response.content_part.done" => self.blocks.stop(key(output, content), emit),
            "response.output_item.added" => {
                if let Some(item) = ev.item {
                    self.item_added(output, item, emit);
                }
            }
            "response.reasoning_summary_part.added" if ev.summary_index.0 > Some(0) => {
                let delta = Some(Delta::Reasoning(JsonText::escaped(PART_BREAK)));
                self.delta(key(output, ITEM), BlockKind::Reasoning, delta, emit);
            }
            "response.output_item.done" => {
                if let Some(item) = &ev.item {
                    match plain(item.kind).as_deref() {
                        Some("function_call") => {
                            self.unstreamed_args(output, nonempty(item.arguments), emit);
                        }
                        Some("reasoning") => {
                            if let (Some(sig), Some(index)) = (
                                nonempty(item.encrypted_content),
                                self.blocks.get(key(output, ITEM)),
                            ) {
                                let delta = Delta::Signature(sig);
                                emit(HubEvent::BlockDelta { index, delta });
                            }
                        }
                        _ => {}
                    }
                }
                self.blocks.stop(key(output, ITEM), emit);
            }
            "response.created" => self.created(ev.response.unwrap_or_default(), emit),
            "response.completed" => self.finished(ev.response.unwrap_or_default(), false, emit),
            "response.incomplete" => self.finished(ev.response.unwrap_or_default(), true, emit),
            "response.failed" => self.fail(ev.response.unwrap_or_default().error, emit),
            // Both shapes: flat `{"type":"error","code":…,"message":…}` and nested
            // `{"type":"error","error":{…}}`.
            "error" => {
                let flat = ErrorObject {
                    message: ev.message,
                    kind: None,
                    code: ev.code,
                };
                self.fail(Some(ev.error.unwrap_or(flat)), emit);
            }
            "keepalive" => emit(HubEvent::Heartbeat),
            _ => {}
        }
    }

    /// Text or reasoning for the block of `key`, opened if the upstream skipped its opening.
    fn delta<'a>(
        &mut self,
        key: u64,
        kind: BlockKind<'a>,
        delta: Option<Delta<'a>>,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) {
        if let Some(delta) = delta {
            let index = self.blocks.open(key, kind, emit);
            emit(HubEvent::BlockDelta { index, delta });
        }
    }

    fn args<'a>(
        &mut self,
        output: u64,
        args: Option<JsonText<'a>>,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) {
        if let (Some(t), Some(index)) = (args, self.blocks.get(key(output, ITEM))) {
            if !self.args_streamed.contains(&output) {
                self.args_streamed.push(output);
            }
            emit(HubEvent::BlockDelta {
                index,
                delta: Delta::ToolArgs(t),
            });
        }
    }

    fn created<'a>(&mut self, response: Response<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        if let Some(u) = &response.usage {
            self.usage.apply(&u.report());
        }
        emit(HubEvent::MessageStart {
            id: nonempty(response.id),
            model: nonempty(response.model),
            usage: self.usage.tokens(),
        });
    }

    /// `response.completed` or (`incomplete`) `response.incomplete`.
    fn finished<'a>(
        &mut self,
        response: Response<'a>,
        incomplete: bool,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) {
        self.blocks.stop_all(emit);
        if let Some(u) = &response.usage {
            self.usage.apply(&u.report());
            emit(HubEvent::Usage(self.usage.tokens()));
        }
        let stop = if incomplete {
            let reason = response
                .incomplete_details
                .as_ref()
                .and_then(|d| plain(d.reason));
            incomplete_stop(reason.as_deref())
        } else if self.tool_seen {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        };
        emit(HubEvent::Stop(stop));
        self.done = true;
        emit(HubEvent::End);
    }

    fn item_added<'a>(&mut self, output: u64, item: Item<'a>, emit: &mut impl FnMut(HubEvent<'a>)) {
        match plain(item.kind).as_deref() {
            Some("reasoning") => {
                self.blocks
                    .open(key(output, ITEM), BlockKind::Reasoning, emit);
            }
            Some("function_call") => {
                self.tool_seen = true;
                let kind = BlockKind::ToolCall {
                    id: text(item.call_id).unwrap_or_default(),
                    name: text(item.name).unwrap_or_default(),
                };
                let index = self.blocks.open(key(output, ITEM), kind, emit);
                if let Some(t) = nonempty(item.arguments) {
                    self.args_streamed.push(output);
                    emit(HubEvent::BlockDelta {
                        index,
                        delta: Delta::ToolArgs(t),
                    });
                }
            }
            _ => {}
        }
    }

    /// Arguments a `.done` event holds, for a call whose arguments were not streamed.
    fn unstreamed_args<'a>(
        &mut self,
        output: u64,
        args: Option<JsonText<'a>>,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) {
        if self.args_streamed.contains(&output) {
            return;
        }
        if let (Some(t), Some(index)) = (args, self.blocks.get(key(output, ITEM))) {
            self.args_streamed.push(output);
            emit(HubEvent::BlockDelta {
                index,
                delta: Delta::ToolArgs(t),
            });
        }
    }

    fn fail<'a>(&mut self, err: Option<ErrorObject<'a>>, emit: &mut impl FnMut(HubEvent<'a>)) {
        self.blocks.stop_all(emit);
        self.done = true;
        emit(HubEvent::Error(in_band_error(err, false)));
    }
}

/// Decodes a whole `response` body (or an error body).
pub(crate) fn decode_body<'a>(
    body: &'a [u8],
    emit: &mut impl FnMut(HubEvent<'a>),
) -> Result<(), TranslateError> {
    let r =
        serde_json::from_slice::<Response<'a>>(body).map_err(|_| TranslateError::NotAnAnswer)?;
    if let Some(err) = r.error {
        emit(HubEvent::Error(in_band_error(Some(err), false)));
        return Ok(());
    }
    let output = r.output.ok_or(TranslateError::NotAnAnswer)?;
    emit(HubEvent::MessageStart {
        id: nonempty(r.id),
        model: nonempty(r.model),
        usage: Tokens::default(),
    });
    let mut next = 0;
    let mut tool_seen = false;
    for item in output {
        match plain(item.kind).as_deref() {
            Some("message") => {
                for part in item.content.into_iter().flatten() {
                    let t = match plain(part.kind).as_deref() {
                        Some("output_text") => nonempty(part.text),
                        Some("refusal") => nonempty(part.refusal),
                        _ => continue,
                    };
                    whole_block(&mut next, BlockKind::Text, t.map(Delta::Text), emit);
                }
            }
            Some("reasoning") => {
                let parts = item
                    .summary
                    .into_iter()
                    .flatten()
                    .chain(item.content.into_iter().flatten());
                let texts = parts.filter_map(|p| nonempty(p.text)).map(Delta::Reasoning);
                whole_block(&mut next, BlockKind::Reasoning, texts, emit);
            }
            Some("function_call") => {
                tool_seen = true;
                let kind = BlockKind::ToolCall {
                    id: text(item.call_id).unwrap_or_default(),
                    name: text(item.name).unwrap_or_default(),
                };
                whole_block(
                    &mut next,
                    kind,
                    nonempty(item.arguments).map(Delta::ToolArgs),
                    emit,
                );
            }
            _ => {}
        }
    }
    let stop = match plain(r.status).as_deref() {
        Some("incomplete") => {
            let reason = r.incomplete_details.as_ref().and_then(|d| plain(d.reason));
            incomplete_stop(reason.as_deref())
        }
        _ if tool_seen => StopReason::ToolUse,
        _ => StopReason::EndTurn,
    };
    emit(HubEvent::Stop(stop));
    if let Some(u) = &r.usage {
        let mut acc = UsageAcc::new(Dialect::Responses);
        acc.apply(&u.report());
        emit(HubEvent::Usage(acc.tokens()));
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
    output_index: Count,
    #[serde(default)]
    content_index: Count,
    #[serde(default)]
    summary_index: Count,
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow)]
    part: Option<Part<'a>>,
    #[serde(borrow)]
    item: Option<Item<'a>>,
    #[serde(borrow)]
    response: Option<Response<'a>>,
    #[serde(borrow)]
    error: Option<ErrorObject<'a>>,
    #[serde(borrow)]
    code: Option<&'a RawValue>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Response<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    status: Option<&'a RawValue>,
    #[serde(borrow)]
    output: Option<Vec<Item<'a>>>,
    usage: Option<ResponsesUsage>,
    #[serde(borrow)]
    incomplete_details: Option<IncompleteDetails<'a>>,
    #[serde(borrow)]
    error: Option<ErrorObject<'a>>,
}

#[derive(Deserialize)]
struct IncompleteDetails<'a> {
    #[serde(borrow)]
    reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    call_id: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow)]
    encrypted_content: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<Vec<Part<'a>>>,
    #[serde(borrow)]
    summary: Option<Vec<Part<'a>>>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    refusal: Option<&'a RawValue>,
}
