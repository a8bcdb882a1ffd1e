//! Hub events → Chat chunks, and an answer → a `chat.completion` body.
//!
//! The stream is the one the OpenAI SDK accumulates: a first chunk with `role:"assistant"`,
//! `content` / `reasoning_content` deltas, each tool call's first fragment with `index`, `id`,
//! `type` and `function.name` (arguments `""`) and its argument fragments after, a chunk with
//! the `finish_reason`, the usage chunk (`choices: []`) when the client asked
//! `include_usage`, then `data: [DONE]`. In the usage, `prompt_tokens`, `completion_tokens`
//! and `total_tokens` are required and written as 0 when the upstream did not report them.
//! An in-band error is `data: {"error":{…}}` followed by `data: [DONE]`, as vLLM sends it.
//! Redacted reasoning and signatures have no Chat field and are not sent.

use super::super::acc::Answer;
use super::super::error::write_openai_error;
use super::super::hub::{BlockKind, Delta, HubError, HubEvent, JsonText, StopReason};
use super::super::json::{sse_close, sse_open, JsonOut};
use super::super::{field, Head, Out, TranslateError};
use super::finish_reason;
use crate::usage::Tokens;

/// What a hub block is in Chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Text,
    Reasoning,
    /// Tool call number `n` (its `tool_calls[].index`).
    Tool(u32),
    /// Carried by no Chat field.
    Unsent,
}

/// Encodes one client Chat stream.
#[derive(Debug)]
pub(crate) struct Encoder {
    head: Head,
    /// `{"id":…,"object":…,"created":…,"model":…` — every chunk opens with it.
    prefix: String,
    started: bool,
    roles: Vec<Role>,
    tools: u32,
    usage: Tokens,
    finished: bool,
}

impl Encoder {
    pub(crate) fn new(head: Head) -> Self {
        Encoder {
            head,
            prefix: String::new(),
            started: false,
            roles: Vec::new(),
            tools: 0,
            usage: Tokens::default(),
            finished: false,
        }
    }

    pub(crate) fn event(&mut self, ev: &HubEvent<'_>, out: &mut Out<'_>) {
        match ev {
            HubEvent::MessageStart { model, .. } => {
                self.start(model.as_ref().map(|m| m.raw()));
                let buf = out.buf();
                self.open_chunk(buf);
                buf.raw("{\"role\":\"assistant\",\"content\":\"\"}");
                close_chunk(buf, None);
            }
            HubEvent::BlockStart { kind, .. } => {
                self.start(None);
                let role = match kind {
                    BlockKind::Text => Role::Text,
                    BlockKind::Reasoning => Role::Reasoning,
                    BlockKind::RedactedReasoning { .. } => Role::Unsent,
                    BlockKind::ToolCall { id, name } => self.tool_header(id, name, out),
                };
                self.roles.push(role);
            }
            HubEvent::BlockDelta { index, delta } => self.delta(*index, delta, out),
            HubEvent::BlockStop { .. } => {}
            HubEvent::Usage(usage) => self.usage = *usage,
            HubEvent::Stop(stop) => self.finish_chunk(*stop, out),
            HubEvent::End => {
                if !self.finished {
                    self.finish_chunk(StopReason::EndTurn, out);
                }
                if self.head.include_usage && self.usage != Tokens::default() {
                    let buf = out.buf();
                    sse_open(buf, None);
                    buf.raw(&self.prefix);
                    buf.raw(",\"choices\":[],\"usage\":");
                    write_usage(buf, &self.usage);
                    buf.raw("}");
                    sse_close(buf);
                }
                done(out);
            }
            HubEvent::Error(err) => {
                write_error_event(out, err);
                done(out);
            }
            HubEvent::Heartbeat => out.buf().raw(": keep-alive\n\n"),
        }
    }

    /// A tool call's first fragment: index, id, type, name and empty arguments.
    fn tool_header(&mut self, id: &JsonText<'_>, name: &JsonText<'_>, out: &mut Out<'_>) -> Role {
        let n = self.tools;
        self.tools += 1;
        let buf = out.buf();
        self.open_chunk(buf);
        buf.raw("{\"tool_calls\":[{\"index\":");
        buf.num(u64::from(n));
        buf.raw(",\"id\":");
        buf.lit(id.raw());
        buf.raw(",\"type\":\"function\",\"function\":{\"name\":");
        buf.lit(name.raw());
        buf.raw(",\"arguments\":\"\"}}]}");
        close_chunk(buf, None);
        Role::Tool(n)
    }

    fn delta(&mut self, index: u32, delta: &Delta<'_>, out: &mut Out<'_>) {
        let role = self.role(index);
        let buf = out.buf();
        match (delta, role) {
            (Delta::Text(t), _) => {
                self.open_chunk(buf);
                buf.raw("{\"content\":");
                buf.lit(t.raw());
            }
            (Delta::Reasoning(t), _) => {
                self.open_chunk(buf);
                buf.raw("{\"reasoning_content\":");
                buf.lit(t.raw());
            }
            (Delta::ToolArgs(t), Role::Tool(n)) => {
                self.open_chunk(buf);
                buf.raw("{\"tool_calls\":[{\"index\":");
                buf.num(u64::from(n));
                buf.raw(",\"function\":{\"arguments\":");
                buf.lit(t.raw());
                buf.raw("}}]");
            }
            (Delta::ToolArgs(_) | Delta::Signature(_), _) => return,
        }
        buf.raw("}");
        close_chunk(buf, None);
    }

    fn role(&self, index: u32) -> Role {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.roles.get(i))
            .copied()
            .unwrap_or(Role::Unsent)
    }

    /// Renders the chunk prefix once the model is known (the first event names it).
    fn start(&mut self, upstream_model: Option<&str>) {
        if self.started {
            return;
        }
        self.started = true;
        let p = &mut self.prefix;
        p.raw("{\"id\":\"chatcmpl-");
        p.raw(&self.head.id);
        p.raw("\",\"object\":\"chat.completion.chunk\",\"created\":");
        p.num(self.head.created);
        p.raw(",\"model\":");
        p.lit(self.head.model(upstream_model));
    }

    fn open_chunk(&self, buf: &mut bytes::BytesMut) {
        sse_open(buf, None);
        buf.raw(&self.prefix);
        buf.raw(",\"choices\":[{\"index\":0,\"delta\":");
    }

    fn finish_chunk(&mut self, stop: StopReason, out: &mut Out<'_>) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.start(None);
        let buf = out.buf();
        self.open_chunk(buf);
        buf.raw("{}");
        close_chunk(buf, Some(finish_reason(stop)));
    }
}

fn close_chunk(buf: &mut bytes::BytesMut, finish: Option<&str>) {
    buf.raw(",\"logprobs\":null,\"finish_reason\":");
    match finish {
        Some(f) => buf.lit(f),
        None => buf.raw("null"),
    }
    buf.raw("}]}");
    sse_close(buf);
}

fn write_error_event(out: &mut Out<'_>, err: &HubError<'_>) {
    let buf = out.buf();
    sse_open(buf, None);
    buf.raw("{\"error\":");
    write_openai_error(buf, err);
    buf.raw("}");
    sse_close(buf);
}

/// The timing comment, then the terminal frame.
fn done(out: &mut Out<'_>) {
    out.comment();
    let buf = out.buf();
    sse_open(buf, None);
    buf.raw("[DONE]");
    sse_close(buf);
}

/// `CompletionUsage`: `prompt_tokens` includes cached tokens, as the hub's input does.
fn write_usage(out: &mut impl JsonOut, u: &Tokens) {
    let input = u.input.unwrap_or(0);
    let output = u.output.unwrap_or(0);
    out.raw("{\"prompt_tokens\":");
    out.num(input);
    out.raw(",\"completion_tokens\":");
    out.num(output);
    out.raw(",\"total_tokens\":");
    out.num(input.saturating_add(output));
    if u.cache_read.is_some() || u.cache_write.is_some() {
        out.raw(",\"prompt_tokens_details\":{");
        let mut first = true;
        if let Some(n) = u.cache_read {
            field(out, &mut first, "cached_tokens");
            out.num(n);
        }
        if let Some(n) = u.cache_write {
            field(out, &mut first, "cache_write_tokens");
            out.num(n);
        }
        out.raw("}");
    }
    if let Some(n) = u.reasoning {
        out.raw(",\"completion_tokens_details\":{\"reasoning_tokens\":");
        out.num(n);
        out.raw("}");
    }
    out.raw("}");
}

/// A whole `chat.completion` (or `{"error":…}` for an answer that ended in an error). Text
/// blocks join into `content` (null for a bare tool call, as OpenAI sends it), reasoning
/// blocks into `reasoning_content`.
pub(crate) fn encode_body(
    answer: &Answer,
    head: &Head,
    out: &mut String,
) -> Result<(), TranslateError> {
    if let Some(err) = answer.hub_error() {
        out.raw("{\"error\":");
        write_openai_error(out, &err);
        out.raw("}");
        return Ok(());
    }
    out.raw("{\"id\":\"chatcmpl-");
    out.raw(&head.id);
    out.raw("\",\"object\":\"chat.completion\",\"created\":");
    out.num(head.created);
    out.raw(",\"model\":");
    out.lit(head.model(answer.model.as_deref()));
    out.raw(",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    let joined = |kind: fn(&BlockKind<'_>) -> bool| {
        let mut any = false;
        let mut s = String::new();
        for b in answer.blocks.iter().filter(|b| kind(&b.kind)) {
            any = true;
            s.push_str(&b.text);
        }
        any.then_some(s)
    };
    let tools = answer
        .blocks
        .iter()
        .filter_map(|b| match &b.kind {
            BlockKind::ToolCall { id, name } => Some((id, name, &b.text)),
            _ => None,
        })
        .collect::<Vec<_>>();
    match joined(|k| matches!(k, BlockKind::Text)) {
        Some(text) => out.lit(&text),
        None if !tools.is_empty() => out.raw("null"),
        None => out.raw("\"\""),
    }
    if let Some(reasoning) = joined(|k| matches!(k, BlockKind::Reasoning)) {
        out.raw(",\"reasoning_content\":");
        out.lit(&reasoning);
    }
    if !tools.is_empty() {
        out.raw(",\"tool_calls\":[");
        for (i, (id, name, args)) in tools.into_iter().enumerate() {
            if i > 0 {
                out.raw(",");
            }
            out.raw("{\"id\":");
            out.lit(id.raw());
            out.raw(",\"type\":\"function\",\"function\":{\"name\":");
            out.lit(name.raw());
            out.raw(",\"arguments\":");
            out.lit(args);
            out.raw("}}");
        }
        out.raw("]");
    }
    out.raw(",\"refusal\":null},\"logprobs\":null,\"finish_reason\":");
    out.lit(finish_reason(answer.stop.unwrap_or(StopReason::EndTurn)));
    out.raw("}]");
    if answer.usage != Tokens::default() {
        out.raw(",\"usage\":");
        write_usage(out, &answer.usage);
    }
    out.raw("}");
    Ok(())
}
