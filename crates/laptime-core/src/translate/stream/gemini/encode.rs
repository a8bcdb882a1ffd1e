//! Hub events → Gemini chunks, and an answer → a `GenerateContentResponse` body.
//!
//! One `data: {…}\r\n\r\n` chunk per text or reasoning delta (`thought: true` parts for
//! reasoning), each a whole `GenerateContentResponse` with `modelVersion` and `responseId`.
//! Gemini sends a function call whole, so a tool call's argument fragments are buffered and
//! its `functionCall {id, name, args}` part is written at the block's stop; arguments that are
//! not a JSON object cannot be carried and end the stream with an in-band error. The last
//! chunk has an empty text part, the `finishReason` and the `usageMetadata` (Google's terms:
//! the prompt includes cache reads, the candidates exclude thoughts; cache writes have no
//! field). A reasoning signature is not sent: it is another provider's (a Gemini upstream's
//! answer to a Gemini client is relayed untouched), Gemini could not check it, and
//! google-genai rejects a `thoughtSignature` that is not base64. There is no terminal frame and
//! no keep-alive: the official SDKs fail on anything but
//! `data:` lines, so the timing comment, when the options ask for it, follows the last chunk.

use bytes::BytesMut;

use super::super::acc::Answer;
use super::super::hub::{BlockKind, Delta, ErrorKind, HubError, HubEvent, JsonText, StopReason};
use super::super::json::{tool_input, JsonOut};
use super::super::{field, Head, Out, TranslateError};
use super::finish_reason;
use crate::dialect::google_status;
use crate::usage::Tokens;
use crate::Dialect;

/// What a hub block is in Gemini.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    Text,
    Reasoning,
    /// A call whose arguments (escaped) are gathered until its stop.
    Tool {
        id: String,
        name: String,
        args: String,
    },
    /// Carried by no Gemini part.
    Unsent,
}

/// Encodes one client Gemini stream.
#[derive(Debug)]
pub(crate) struct Encoder {
    head: Head,
    /// The upstream's model (escaped), reported when no model is configured.
    upstream_model: Option<String>,
    roles: Vec<Role>,
    usage: Tokens,
    stop: Option<StopReason>,
    /// An error ended the client's stream: nothing more is written.
    ended: bool,
}

impl Encoder {
    pub(crate) fn new(head: Head) -> Self {
        Encoder {
            head,
            upstream_model: None,
            roles: Vec::new(),
            usage: Tokens::default(),
            stop: None,
            ended: false,
        }
    }

    pub(crate) fn event(&mut self, ev: &HubEvent<'_>, out: &mut Out<'_>) {
        if self.ended {
            return;
        }
        match ev {
            HubEvent::MessageStart { model, .. } => {
                self.upstream_model = model.as_ref().map(|m| m.raw().to_owned());
            }
            HubEvent::BlockStart { kind, .. } => self.roles.push(match kind {
                BlockKind::Text => Role::Text,
                BlockKind::Reasoning => Role::Reasoning,
                BlockKind::RedactedReasoning { .. } => Role::Unsent,
                BlockKind::ToolCall { id, name } => Role::Tool {
                    id: id.raw().to_owned(),
                    name: name.raw().to_owned(),
                    args: String::new(),
                },
            }),
            HubEvent::BlockDelta { index, delta } => self.delta(*index, delta, out),
            HubEvent::BlockStop { index } => self.block_stop(*index, out),
            HubEvent::Usage(usage) => self.usage = *usage,
            HubEvent::Stop(stop) => self.stop = Some(*stop),
            HubEvent::End => {
                let stop = self.stop.unwrap_or(StopReason::EndTurn);
                let buf = out.buf();
                self.open_chunk(buf);
                buf.raw("{\"text\":\"\"}");
                buf.raw("],\"role\":\"model\"},\"finishReason\":\"");
                buf.raw(finish_reason(stop));
                buf.raw("\",\"index\":0}],\"usageMetadata\":");
                write_usage(buf, &self.usage);
                self.close_chunk(buf);
                self.ended = true;
                out.comment();
            }
            HubEvent::Error(err) => self.error(err, out),
            // Gemini has no keep-alive, and its SDKs fail on a comment.
            HubEvent::Heartbeat => {}
        }
    }

    fn delta(&mut self, index: u32, delta: &Delta<'_>, out: &mut Out<'_>) {
        let Some(role) = usize::try_from(index)
            .ok()
            .and_then(|i| self.roles.get_mut(i))
        else {
            return;
        };
        let part = match (delta, role) {
            (Delta::ToolArgs(t), Role::Tool { args, .. }) => {
                args.push_str(t.raw());
                return;
            }
            (Delta::Text(t), _) => Part::Text(t),
            (Delta::Reasoning(t), _) => Part::Thought(t),
            (Delta::ToolArgs(_) | Delta::Signature(_), _) => return,
        };
        let buf = out.buf();
        self.open_chunk(buf);
        part.write(buf);
        buf.raw("],\"role\":\"model\"},\"index\":0}]");
        self.close_chunk(buf);
    }

    fn block_stop(&mut self, index: u32, out: &mut Out<'_>) {
        let Some(Role::Tool { id, name, args }) =
            usize::try_from(index).ok().and_then(|i| self.roles.get(i))
        else {
            return;
        };
        let Some(args) = tool_input(args) else {
            let message =
                format!("the arguments of the tool call in block {index} are not a JSON object");
            let err = HubError {
                kind: ErrorKind::Server,
                message: JsonText::from_plain(&message),
            };
            self.error(&err, out);
            return;
        };
        let (id, name) = (id.clone(), name.clone());
        let buf = out.buf();
        self.open_chunk(buf);
        write_call(buf, &id, &name, &args);
        buf.raw("],\"role\":\"model\"},\"index\":0}]");
        self.close_chunk(buf);
    }

    fn error(&mut self, err: &HubError<'_>, out: &mut Out<'_>) {
        let buf = out.buf();
        buf.raw("data: ");
        write_google_error(buf, err, err.kind.status(Dialect::Gemini));
        buf.raw("\r\n\r\n");
        self.ended = true;
        out.comment();
    }

    /// `data: {"candidates":[{"content":{"parts":[` (the caller writes the parts and closes
    /// the candidates).
    fn open_chunk(&self, buf: &mut BytesMut) {
        buf.raw("data: {\"candidates\":[{\"content\":{\"parts\":[");
    }

    /// `,"modelVersion":…,"responseId":…}` and the event's end.
    fn close_chunk(&self, buf: &mut BytesMut) {
        write_tail(buf, &self.head, self.upstream_model.as_deref());
        buf.raw("\r\n\r\n");
    }
}

/// A part of a chunk.
enum Part<'t, 'a> {
    Text(&'t JsonText<'a>),
    Thought(&'t JsonText<'a>),
}

impl Part<'_, '_> {
    fn write(&self, out: &mut impl JsonOut) {
        match self {
            Part::Text(t) => {
                out.raw("{\"text\":");
                out.lit(t.raw());
            }
            Part::Thought(t) => {
                out.raw("{\"text\":");
                out.lit(t.raw());
                out.raw(",\"thought\":true");
            }
        }
        out.raw("}");
    }
}

fn write_call(out: &mut impl JsonOut, id: &str, name: &str, args: &str) {
    out.raw("{\"functionCall\":{\"id\":");
    out.lit(id);
    out.raw(",\"name\":");
    out.lit(name);
    out.raw(",\"args\":");
    out.raw(args);
    out.raw("}}");
}

/// `,"modelVersion":…,"responseId":…}`: closes a response object.
fn write_tail(out: &mut impl JsonOut, head: &Head, upstream_model: Option<&str>) {
    out.raw(",\"modelVersion\":");
    out.lit(head.model(upstream_model));
    out.raw(",\"responseId\":");
    out.lit(head.id());
    out.raw("}");
}

/// `usageMetadata` in Google's terms; a count the upstream did not report is left out, as
/// Google leaves out the counts it does not have.
fn write_usage(out: &mut impl JsonOut, u: &Tokens) {
    out.raw("{");
    let mut first = true;
    let candidates = u.output.map(|o| o.saturating_sub(u.reasoning.unwrap_or(0)));
    let total = match (u.input, u.output) {
        (None, None) => None,
        (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
    };
    for (key, n) in [
        ("promptTokenCount", u.input),
        ("cachedContentTokenCount", u.cache_read),
        ("candidatesTokenCount", candidates),
        ("thoughtsTokenCount", u.reasoning),
        ("totalTokenCount", total),
    ] {
        if let Some(n) = n {
            field(out, &mut first, key);
            out.num(n);
        }
    }
    out.raw("}");
}

/// Google's error envelope: `{"error":{"code":…,"message":…,"status":…}}`.
pub(crate) fn write_google_error(out: &mut impl JsonOut, err: &HubError<'_>, status: u16) {
    out.raw("{\"error\":{\"code\":");
    out.num(u64::from(status));
    out.raw(",\"message\":");
    out.lit(err.message.raw());
    out.raw(",\"status\":");
    out.lit(google_status(status));
    out.raw("}}");
}

/// A whole `GenerateContentResponse` (or Google's error envelope for an answer that ended in an
/// error). A tool call's `args` is its arguments as a JSON object: arguments that are not one
/// are an error naming the block.
pub(crate) fn encode_body(
    answer: &Answer,
    head: &Head,
    out: &mut String,
) -> Result<(), TranslateError> {
    if let Some(err) = answer.hub_error() {
        write_google_error(out, &err, err.kind.status(Dialect::Gemini));
        return Ok(());
    }
    out.raw("{\"candidates\":[{\"content\":{\"parts\":[");
    let mut first = true;
    for (i, block) in answer.blocks.iter().enumerate() {
        let sep = |out: &mut String, first: &mut bool| {
            if !std::mem::take(first) {
                out.raw(",");
            }
        };
        match &block.kind {
            BlockKind::Text => {
                sep(out, &mut first);
                out.raw("{\"text\":");
                out.lit(&block.text);
                out.raw("}");
            }
            BlockKind::Reasoning => {
                sep(out, &mut first);
                out.raw("{\"text\":");
                out.lit(&block.text);
                out.raw(",\"thought\":true}");
            }
            BlockKind::RedactedReasoning { .. } => {}
            BlockKind::ToolCall { id, name } => {
                let args =
                    tool_input(&block.text).ok_or(TranslateError::ToolArgumentsNotAnObject {
                        block: u32::try_from(i).unwrap_or(u32::MAX),
                    })?;
                sep(out, &mut first);
                write_call(out, id.raw(), name.raw(), &args);
            }
        }
    }
    out.raw("],\"role\":\"model\"},\"finishReason\":\"");
    out.raw(finish_reason(answer.stop.unwrap_or(StopReason::EndTurn)));
    out.raw("\",\"index\":0}],\"usageMetadata\":");
    write_usage(out, &answer.usage);
    write_tail(out, head, answer.model.as_deref());
    Ok(())
}
