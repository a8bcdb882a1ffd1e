//! Hub events → Responses events, and an answer → a `response` body.
//!
//! Every hub block is one output item: text a `message` with one `output_text` part, reasoning
//! a `reasoning` item with one summary part (streamed as `response.reasoning_summary_text.*`,
//! what OpenAI's own reasoning models send and what clients show; `reasoning_text` is only
//! gpt-oss's), a tool call a `function_call` item. Each item goes `output_item.added`, its
//! part opening, deltas, `.done` events, `output_item.done`. The terminal
//! (`response.completed`, `response.incomplete` or, after an `error` event,
//! `response.failed`) carries the whole `response` with every item, because the OpenAI SDK
//! takes its final answer from it. In `usage`, `input_tokens`, `output_tokens`,
//! `total_tokens`, `input_tokens_details.cached_tokens` and
//! `output_tokens_details.reasoning_tokens` are required and written as 0 when unknown.
//! Redacted reasoning and signatures have no Responses field and are not sent.

use bytes::BytesMut;

use super::super::acc::{Answer, Block};
use super::super::hub::{BlockKind, ErrorKind, HubError, HubEvent, JsonText, StopReason};
use super::super::json::{sse_close, JsonOut};
use super::super::{field, Head, Out, TranslateError};
use super::incomplete_reason;
use crate::usage::Tokens;

/// Encodes one client Responses stream.
#[derive(Debug)]
pub(crate) struct Encoder {
    head: Head,
    started: bool,
    seq: u64,
    /// The whole answer so far: the `.done` events and the terminal repeat it.
    answer: Answer,
    /// Hub block index → output index (`None`: not sent).
    items: Vec<Option<u32>>,
    next_item: u32,
}

/// How far an item is, as its `status` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    InProgress,
    Completed,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
        }
    }
}

impl Encoder {
    pub(crate) fn new(head: Head) -> Self {
        Encoder {
            head,
            started: false,
            seq: 0,
            answer: Answer::default(),
            items: Vec::new(),
            next_item: 0,
        }
    }

    pub(crate) fn event(&mut self, ev: &HubEvent<'_>, out: &mut Out<'_>) {
        self.answer.apply(ev);
        match ev {
            HubEvent::MessageStart { .. } => self.start(out.buf()),
            HubEvent::BlockStart { index, kind } => {
                self.start(out.buf());
                let item = match kind {
                    BlockKind::RedactedReasoning { .. } => None,
                    _ => Some(self.next_item),
                };
                self.items.push(item);
                if let Some(n) = item {
                    self.next_item += 1;
                    self.block_start(*index, n, out.buf());
                }
            }
            HubEvent::BlockDelta { index, delta } => {
                let Some(n) = self.item(*index) else { return };
                let buf = out.buf();
                let (name, kind) = match delta {
                    super::super::hub::Delta::Text(t) => ("response.output_text.delta", t),
                    super::super::hub::Delta::Reasoning(t) => {
                        ("response.reasoning_summary_text.delta", t)
                    }
                    super::super::hub::Delta::ToolArgs(t) => {
                        ("response.function_call_arguments.delta", t)
                    }
                    super::super::hub::Delta::Signature(_) => return,
                };
                self.open(buf, name);
                self.item_ref(buf, *index, n);
                match delta {
                    super::super::hub::Delta::Text(_) => buf.raw(",\"content_index\":0"),
                    super::super::hub::Delta::Reasoning(_) => buf.raw(",\"summary_index\":0"),
                    _ => {}
                }
                buf.raw(",\"delta\":");
                buf.lit(kind.raw());
                if matches!(delta, super::super::hub::Delta::Text(_)) {
                    buf.raw(",\"logprobs\":[]");
                }
                buf.raw("}");
                sse_close(buf);
            }
            HubEvent::BlockStop { index } => {
                if let Some(n) = self.item(*index) {
                    self.block_stop(*index, n, out.buf());
                }
            }
            HubEvent::Usage(_) | HubEvent::Stop(_) => {}
            HubEvent::End => {
                self.start(out.buf());
                let stop = self.answer.stop.unwrap_or(StopReason::EndTurn);
                let (name, status, reason) = match incomplete_reason(stop) {
                    Some(reason) => ("response.incomplete", "incomplete", Some(reason)),
                    None => ("response.completed", "completed", None),
                };
                out.comment();
                let buf = out.buf();
                self.open(buf, name);
                buf.raw(",\"response\":");
                let end = End::Done { status, reason };
                write_response(buf, &self.head, &self.answer, end);
                buf.raw("}");
                sse_close(buf);
            }
            HubEvent::Error(err) => {
                self.start(out.buf());
                let buf = out.buf();
                let (_, code) = err.kind.openai_type_code();
                self.open(buf, "error");
                buf.raw(",\"code\":");
                write_code(buf, err.kind, code);
                buf.raw(",\"message\":");
                buf.lit(err.message.raw());
                buf.raw(",\"param\":null}");
                sse_close(buf);
                out.comment();
                let buf = out.buf();
                self.open(buf, "response.failed");
                buf.raw(",\"response\":");
                write_response(buf, &self.head, &self.answer, End::Failed(err));
                buf.raw("}");
                sse_close(buf);
            }
        }
    }

    fn item(&self, index: u32) -> Option<u32> {
        *self.items.get(usize::try_from(index).ok()?)?
    }

    /// `event: <name>` and `{"type":"<name>","sequence_number":<n>` (the caller closes it).
    fn open(&mut self, buf: &mut BytesMut, name: &str) {
        buf.raw("event: ");
        buf.raw(name);
        buf.raw("\ndata: {\"type\":\"");
        buf.raw(name);
        buf.raw("\",\"sequence_number\":");
        buf.num(self.seq);
        self.seq += 1;
    }

    /// `,"item_id":…,"output_index":n`.
    fn item_ref(&self, buf: &mut BytesMut, index: u32, n: u32) {
        buf.raw(",\"item_id\":\"");
        if let Some(block) = self
            .answer
            .blocks
            .get(usize::try_from(index).unwrap_or(usize::MAX))
        {
            write_item_id(buf, &self.head, &block.kind, n);
        }
        buf.raw("\",\"output_index\":");
        buf.num(u64::from(n));
    }

    fn start(&mut self, buf: &mut BytesMut) {
        if self.started {
            return;
        }
        self.started = true;
        for name in ["response.created", "response.in_progress"] {
            self.open(buf, name);
            buf.raw(",\"response\":");
            write_response(buf, &self.head, &self.answer, End::Open);
            buf.raw("}");
            sse_close(buf);
        }
    }

    fn block_start(&mut self, index: u32, n: u32, buf: &mut BytesMut) {
        let Some(block) = self.block(index) else {
            return;
        };
        let kind = block.kind.clone();
        self.open(buf, "response.output_item.added");
        buf.raw(",\"output_index\":");
        buf.num(u64::from(n));
        buf.raw(",\"item\":");
        write_item(
            buf,
            &self.head,
            n,
            &Block {
                text: String::new(),
                ..block
            },
            Status::InProgress,
        );
        buf.raw("}");
        sse_close(buf);
        match kind {
            BlockKind::Text => {
                self.open(buf, "response.content_part.added");
                self.item_ref(buf, index, n);
                buf.raw(",\"content_index\":0,\"part\":");
                write_text_part(buf, "");
                buf.raw("}");
                sse_close(buf);
            }
            BlockKind::Reasoning => {
                self.open(buf, "response.reasoning_summary_part.added");
                self.item_ref(buf, index, n);
                buf.raw(",\"summary_index\":0,\"part\":");
                write_summary_part(buf, "");
                buf.raw("}");
                sse_close(buf);
            }
            BlockKind::ToolCall { .. } | BlockKind::RedactedReasoning { .. } => {}
        }
    }

    fn block_stop(&mut self, index: u32, n: u32, buf: &mut BytesMut) {
        let Some(block) = self.block(index) else {
            return;
        };
        let text = block.text.as_str();
        match &block.kind {
            BlockKind::Text => {
                self.open(buf, "response.output_text.done");
                self.item_ref(buf, index, n);
                buf.raw(",\"content_index\":0,\"text\":");
                buf.lit(text);
                buf.raw(",\"logprobs\":[]}");
                sse_close(buf);
                self.open(buf, "response.content_part.done");
                self.item_ref(buf, index, n);
                buf.raw(",\"content_index\":0,\"part\":");
                write_text_part(buf, text);
                buf.raw("}");
                sse_close(buf);
            }
            BlockKind::Reasoning => {
                self.open(buf, "response.reasoning_summary_text.done");
                self.item_ref(buf, index, n);
                buf.raw(",\"summary_index\":0,\"text\":");
                buf.lit(text);
                buf.raw("}");
                sse_close(buf);
                self.open(buf, "response.reasoning_summary_part.done");
                self.item_ref(buf, index, n);
                buf.raw(",\"summary_index\":0,\"part\":");
                write_summary_part(buf, text);
                buf.raw("}");
                sse_close(buf);
            }
            BlockKind::ToolCall { .. } => {
                self.open(buf, "response.function_call_arguments.done");
                self.item_ref(buf, index, n);
                buf.raw(",\"arguments\":");
                buf.lit(text);
                buf.raw("}");
                sse_close(buf);
            }
            BlockKind::RedactedReasoning { .. } => return,
        }
        self.open(buf, "response.output_item.done");
        buf.raw(",\"output_index\":");
        buf.num(u64::from(n));
        buf.raw(",\"item\":");
        write_item(buf, &self.head, n, &block, Status::Completed);
        buf.raw("}");
        sse_close(buf);
    }

    /// A copy of the block (the item writers and the sequence counter both need `self`).
    fn block(&self, index: u32) -> Option<Block> {
        self.answer
            .blocks
            .get(usize::try_from(index).ok()?)
            .cloned()
    }
}

/// How the `response` object ends, or that it has not.
#[derive(Debug, Clone, Copy)]
enum End<'e> {
    /// `response.created` / `in_progress`.
    Open,
    Done {
        status: &'static str,
        reason: Option<&'static str>,
    },
    Failed(&'e HubError<'e>),
}

/// `error.code` of a failed response: OpenAI's code, else its type.
fn write_code(out: &mut impl JsonOut, kind: ErrorKind, code: Option<&str>) {
    out.lit(code.unwrap_or(kind.openai_type_code().0));
}

/// The `response` object with every sent item of `answer`.
fn write_response(out: &mut impl JsonOut, head: &Head, answer: &Answer, end: End<'_>) {
    out.raw("{\"id\":\"resp_");
    out.raw(&head.id);
    out.raw("\",\"object\":\"response\",\"created_at\":");
    out.num(head.created);
    out.raw(",\"status\":");
    out.lit(match end {
        End::Open => "in_progress",
        End::Done { status, .. } => status,
        End::Failed(_) => "failed",
    });
    out.raw(",\"error\":");
    match end {
        End::Failed(err) => {
            out.raw("{\"code\":");
            write_code(out, err.kind, err.kind.openai_type_code().1);
            out.raw(",\"message\":");
            out.lit(err.message.raw());
            out.raw("}");
        }
        _ => out.raw("null"),
    }
    out.raw(",\"incomplete_details\":");
    match end {
        End::Done {
            reason: Some(reason),
            ..
        } => {
            out.raw("{\"reason\":");
            out.lit(reason);
            out.raw("}");
        }
        _ => out.raw("null"),
    }
    out.raw(",\"model\":");
    out.lit(head.model(answer.model.as_deref()));
    out.raw(",\"output\":[");
    let mut n = 0;
    if !matches!(end, End::Open) {
        for block in &answer.blocks {
            if matches!(block.kind, BlockKind::RedactedReasoning { .. }) {
                continue;
            }
            if n > 0 {
                out.raw(",");
            }
            write_item(out, head, n, block, Status::Completed);
            n += 1;
        }
    }
    out.raw("],\"usage\":");
    if matches!(end, End::Open) || answer.usage == Tokens::default() {
        out.raw("null");
    } else {
        write_usage(out, &answer.usage);
    }
    out.raw("}");
}

fn write_item_id(out: &mut impl JsonOut, head: &Head, kind: &BlockKind<'_>, n: u32) {
    out.raw(match kind {
        BlockKind::Text => "msg_",
        BlockKind::Reasoning | BlockKind::RedactedReasoning { .. } => "rs_",
        BlockKind::ToolCall { .. } => "fc_",
    });
    out.raw(&head.id);
    out.raw("_");
    out.num(u64::from(n));
}

/// One output item; an in-progress message has no parts yet.
fn write_item(out: &mut impl JsonOut, head: &Head, n: u32, block: &Block, status: Status) {
    out.raw("{\"id\":\"");
    write_item_id(out, head, &block.kind, n);
    out.raw("\"");
    match &block.kind {
        BlockKind::Text => {
            out.raw(",\"type\":\"message\",\"status\":");
            out.lit(status.as_str());
            out.raw(",\"role\":\"assistant\",\"content\":[");
            if status == Status::Completed {
                write_text_part(out, &block.text);
            }
            out.raw("]");
        }
        BlockKind::Reasoning | BlockKind::RedactedReasoning { .. } => {
            out.raw(",\"type\":\"reasoning\",\"summary\":[");
            if status == Status::Completed {
                write_summary_part(out, &block.text);
            }
            out.raw("]");
        }
        BlockKind::ToolCall { id, name } => {
            out.raw(",\"type\":\"function_call\",\"status\":");
            out.lit(status.as_str());
            out.raw(",\"call_id\":");
            out.lit(id.raw());
            out.raw(",\"name\":");
            out.lit(name.raw());
            out.raw(",\"arguments\":");
            out.lit(&block.text);
        }
    }
    out.raw("}");
}

fn write_text_part(out: &mut impl JsonOut, text: &str) {
    out.raw("{\"type\":\"output_text\",\"annotations\":[],\"text\":");
    out.lit(text);
    out.raw("}");
}

fn write_summary_part(out: &mut impl JsonOut, text: &str) {
    out.raw("{\"type\":\"summary_text\",\"text\":");
    out.lit(text);
    out.raw("}");
}

/// `ResponseUsage`: `input_tokens` includes cached tokens, as the hub's input does.
fn write_usage(out: &mut impl JsonOut, u: &Tokens) {
    let input = u.input.unwrap_or(0);
    let output = u.output.unwrap_or(0);
    out.raw("{\"input_tokens\":");
    out.num(input);
    out.raw(",\"input_tokens_details\":{");
    let mut first = true;
    field(out, &mut first, "cached_tokens");
    out.num(u.cache_read.unwrap_or(0));
    if let Some(n) = u.cache_write {
        field(out, &mut first, "cache_write_tokens");
        out.num(n);
    }
    out.raw("},\"output_tokens\":");
    out.num(output);
    out.raw(",\"output_tokens_details\":{\"reasoning_tokens\":");
    out.num(u.reasoning.unwrap_or(0));
    out.raw("},\"total_tokens\":");
    out.num(input.saturating_add(output));
    out.raw("}");
}

/// A whole `response` object (status `failed` with its `error` for an answer that ended in
/// an error).
pub(crate) fn encode_body(
    answer: &Answer,
    head: &Head,
    out: &mut String,
) -> Result<(), TranslateError> {
    match &answer.error {
        Some((kind, message)) => {
            let err = HubError {
                kind: *kind,
                message: JsonText::escaped(message),
            };
            write_response(out, head, answer, End::Failed(&err));
        }
        None => {
            let stop = answer.stop.unwrap_or(StopReason::EndTurn);
            let end = match incomplete_reason(stop) {
                Some(reason) => End::Done {
                    status: "incomplete",
                    reason: Some(reason),
                },
                None => End::Done {
                    status: "completed",
                    reason: None,
                },
            };
            write_response(out, head, answer, end);
        }
    }
    Ok(())
}
