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
//! A reasoning block's signature (Anthropic's) is the item's `encrypted_content`, which the
//! request half carries back as the signature. Redacted reasoning has no Responses field and
//! is not sent.

use bytes::BytesMut;

use super::super::acc::{Answer, Block};
use super::super::hub::{BlockKind, Delta, ErrorKind, HubError, HubEvent, StopReason};
use super::super::json::{sse_close, JsonOut};
use super::super::{field, Head, Out, TranslateError};
use super::incomplete_reason;
use crate::usage::Tokens;

/// Encodes one client Responses stream.
#[derive(Debug)]
pub(crate) struct Encoder {
    head: Head,
    started: bool,
    seq: Seq,
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

/// The running `sequence_number`.
#[derive(Debug, Default)]
struct Seq(u64);

impl Seq {
    /// `event: <name>` and `{"type":"<name>","sequence_number":<n>` (the caller closes it).
    fn open(&mut self, buf: &mut BytesMut, name: &str) {
        buf.raw("event: ");
        buf.raw(name);
        buf.raw("\ndata: {\"type\":\"");
        buf.raw(name);
        buf.raw("\",\"sequence_number\":");
        buf.num(self.0);
        self.0 += 1;
    }
}

impl Encoder {
    pub(crate) fn new(head: Head) -> Self {
        Encoder {
            head,
            started: false,
            seq: Seq::default(),
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
                if let Some(n) = self.item(*index) {
                    self.delta(*index, n, delta, out.buf());
                }
            }
            HubEvent::BlockStop { index } => {
                if let Some(n) = self.item(*index) {
                    self.block_stop(*index, n, out.buf());
                }
            }
            HubEvent::Usage(_) | HubEvent::Stop(_) => {}
            HubEvent::End => self.end(out),
            HubEvent::Error(err) => self.fail(err, out),
            // A comment rather than a `keepalive` event, which older SDKs do not know.
            HubEvent::Heartbeat => out.buf().raw(": keep-alive\n\n"),
        }
    }

    fn item(&self, index: u32) -> Option<u32> {
        *self.items.get(usize::try_from(index).ok()?)?
    }

    fn start(&mut self, buf: &mut BytesMut) {
        if self.started {
            return;
        }
        self.started = true;
        for name in ["response.created", "response.in_progress"] {
            self.seq.open(buf, name);
            buf.raw(",\"response\":");
            write_response(buf, &self.head, &self.answer, End::Open);
            buf.raw("}");
            sse_close(buf);
        }
    }

    fn block_start(&mut self, index: u32, n: u32, buf: &mut BytesMut) {
        let Some(block) = self.answer.block_at(index) else {
            return;
        };
        let (head, seq) = (&self.head, &mut self.seq);
        seq.open(buf, "response.output_item.added");
        buf.raw(",\"output_index\":");
        buf.num(u64::from(n));
        buf.raw(",\"item\":");
        write_item(buf, head, n, block, Status::InProgress);
        buf.raw("}");
        sse_close(buf);
        let (name, part) = match block.kind {
            BlockKind::Text => ("response.content_part.added", Part::Text),
            BlockKind::Reasoning => ("response.reasoning_summary_part.added", Part::Summary),
            BlockKind::ToolCall { .. } | BlockKind::RedactedReasoning { .. } => return,
        };
        seq.open(buf, name);
        write_item_ref(buf, head, &block.kind, n);
        part.write(buf, "");
        buf.raw("}");
        sse_close(buf);
    }

    fn delta(&mut self, index: u32, n: u32, delta: &Delta<'_>, buf: &mut BytesMut) {
        let Some(block) = self.answer.block_at(index) else {
            return;
        };
        let (name, part, t) = match delta {
            Delta::Text(t) => ("response.output_text.delta", Some(Part::Text), t),
            Delta::Reasoning(t) => (
                "response.reasoning_summary_text.delta",
                Some(Part::Summary),
                t,
            ),
            Delta::ToolArgs(t) => ("response.function_call_arguments.delta", None, t),
            Delta::Signature(_) => return,
        };
        self.seq.open(buf, name);
        write_item_ref(buf, &self.head, &block.kind, n);
        if let Some(part) = part {
            buf.raw(part.index_key());
        }
        buf.raw(",\"delta\":");
        buf.lit(t.raw());
        if part == Some(Part::Text) {
            buf.raw(",\"logprobs\":[]");
        }
        buf.raw("}");
        sse_close(buf);
    }

    fn block_stop(&mut self, index: u32, n: u32, buf: &mut BytesMut) {
        let Some(block) = self.answer.block_at(index) else {
            return;
        };
        let (head, seq) = (&self.head, &mut self.seq);
        let text = block.text.as_str();
        let (done, part_done, key) = match block.kind {
            BlockKind::Text => (
                "response.output_text.done",
                Some(("response.content_part.done", Part::Text)),
                "text",
            ),
            BlockKind::Reasoning => (
                "response.reasoning_summary_text.done",
                Some(("response.reasoning_summary_part.done", Part::Summary)),
                "text",
            ),
            BlockKind::ToolCall { .. } => {
                ("response.function_call_arguments.done", None, "arguments")
            }
            BlockKind::RedactedReasoning { .. } => return,
        };
        seq.open(buf, done);
        write_item_ref(buf, head, &block.kind, n);
        if let Some((_, part)) = part_done {
            buf.raw(part.index_key());
        }
        buf.raw(",\"");
        buf.raw(key);
        buf.raw("\":");
        buf.lit(text);
        if matches!(block.kind, BlockKind::Text) {
            buf.raw(",\"logprobs\":[]");
        }
        buf.raw("}");
        sse_close(buf);
        if let Some((name, part)) = part_done {
            seq.open(buf, name);
            write_item_ref(buf, head, &block.kind, n);
            part.write(buf, text);
            buf.raw("}");
            sse_close(buf);
        }
        seq.open(buf, "response.output_item.done");
        buf.raw(",\"output_index\":");
        buf.num(u64::from(n));
        buf.raw(",\"item\":");
        write_item(buf, head, n, block, Status::Completed);
        buf.raw("}");
        sse_close(buf);
    }

    /// `response.completed`, or `response.incomplete` for a cut answer.
    fn end(&mut self, out: &mut Out<'_>) {
        self.start(out.buf());
        let stop = self.answer.stop.unwrap_or(StopReason::EndTurn);
        let (name, status, reason) = match incomplete_reason(stop) {
            Some(reason) => ("response.incomplete", "incomplete", Some(reason)),
            None => ("response.completed", "completed", None),
        };
        out.comment();
        let buf = out.buf();
        self.seq.open(buf, name);
        buf.raw(",\"response\":");
        write_response(buf, &self.head, &self.answer, End::Done { status, reason });
        buf.raw("}");
        sse_close(buf);
    }

    /// The flat `error` event, then `response.failed` (the terminal frame).
    fn fail(&mut self, err: &HubError<'_>, out: &mut Out<'_>) {
        self.start(out.buf());
        let buf = out.buf();
        self.seq.open(buf, "error");
        buf.raw(",\"code\":");
        write_code(buf, err.kind);
        buf.raw(",\"message\":");
        buf.lit(err.message.raw());
        buf.raw(",\"param\":null}");
        sse_close(buf);
        out.comment();
        let buf = out.buf();
        self.seq.open(buf, "response.failed");
        buf.raw(",\"response\":");
        write_response(buf, &self.head, &self.answer, End::Failed(err));
        buf.raw("}");
        sse_close(buf);
    }
}

/// The part an item streams into: a message's `output_text` or a reasoning summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Text,
    Summary,
}

impl Part {
    fn index_key(self) -> &'static str {
        match self {
            Part::Text => ",\"content_index\":0",
            Part::Summary => ",\"summary_index\":0",
        }
    }

    /// `,"content_index":0,"part":{…}` (or the summary's).
    fn write(self, out: &mut impl JsonOut, text: &str) {
        out.raw(self.index_key());
        out.raw(",\"part\":");
        match self {
            Part::Text => write_text_part(out, text),
            Part::Summary => write_summary_part(out, text),
        }
    }
}

/// `,"item_id":…,"output_index":n`.
fn write_item_ref(out: &mut impl JsonOut, head: &Head, kind: &BlockKind<'_>, n: u32) {
    out.raw(",\"item_id\":\"");
    write_item_id(out, head, kind, n);
    out.raw("\",\"output_index\":");
    out.num(u64::from(n));
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
fn write_code(out: &mut impl JsonOut, kind: ErrorKind) {
    let (kind_name, code) = kind.openai_type_code();
    out.lit(code.unwrap_or(kind_name));
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
            write_code(out, err.kind);
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
            if let (Some(sig), Status::Completed) = (&block.signature, status) {
                out.raw(",\"encrypted_content\":");
                out.lit(sig);
            }
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
    match answer.hub_error() {
        Some(err) => {
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
