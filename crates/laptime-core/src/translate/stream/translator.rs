//! The streaming translator the proxy calls, and the whole-body and error translations.
//!
//! Upstream bytes go through one SSE scanner; each completed event is decoded into hub events
//! and each hub event is encoded at once, so the client gets every translated event in the
//! `push` whose bytes completed the upstream event (no lag of one event). The timing comment's
//! place ([`Piece::TimingComment`]) is set by the client encoder, right before its terminal
//! frame.

use std::collections::VecDeque;

use bytes::BytesMut;

use super::acc::Answer;
use super::error::{client_status, read_error, write_anthropic_error, write_openai_error};
use super::hub::{ErrorKind, HubError, HubEvent, JsonText};
use super::{chat, gemini, messages, responses, ClientStreamOptions, Head, Out, TranslateError};
use crate::observe::BodyEnd;
use crate::relay::Piece;
use crate::sse::{SseItem, SseScanner};
use crate::Dialect;

/// One upstream dialect's stream decoder.
#[derive(Debug)]
pub(super) enum Decoder {
    Chat(chat::Decoder),
    Responses(responses::Decoder),
    Messages(messages::Decoder),
    Gemini(gemini::Decoder),
}

impl Decoder {
    pub(super) fn new(dialect: Dialect) -> Self {
        match dialect {
            Dialect::Chat => Decoder::Chat(chat::Decoder::new()),
            Dialect::Responses => Decoder::Responses(responses::Decoder::new()),
            Dialect::Messages => Decoder::Messages(messages::Decoder::new()),
            Dialect::Gemini => Decoder::Gemini(gemini::Decoder::new()),
        }
    }

    pub(super) fn event<'a>(
        &mut self,
        event: Option<&str>,
        data: &'a str,
        emit: &mut impl FnMut(HubEvent<'a>),
    ) {
        match self {
            Decoder::Chat(d) => d.event(data, emit),
            Decoder::Responses(d) => d.event(event, data, emit),
            Decoder::Messages(d) => d.event(event, data, emit),
            Decoder::Gemini(d) => d.event(data, emit),
        }
    }

    pub(super) fn finish(&mut self, end: BodyEnd, emit: &mut impl FnMut(HubEvent<'static>)) {
        match self {
            Decoder::Chat(d) => d.finish(end, emit),
            Decoder::Responses(_) | Decoder::Messages(_) | Decoder::Gemini(_) => {}
        }
    }

    pub(super) fn done(&self) -> bool {
        match self {
            Decoder::Chat(d) => d.done(),
            Decoder::Responses(d) => d.done(),
            Decoder::Messages(d) => d.done(),
            Decoder::Gemini(d) => d.done(),
        }
    }
}

/// One client dialect's stream encoder.
#[derive(Debug)]
pub(super) enum Encoder {
    Chat(chat::Encoder),
    Responses(responses::Encoder),
    Messages(messages::Encoder),
    Gemini(gemini::Encoder),
}

impl Encoder {
    pub(super) fn new(dialect: Dialect, head: Head) -> Self {
        match dialect {
            Dialect::Chat => Encoder::Chat(chat::Encoder::new(head)),
            Dialect::Responses => Encoder::Responses(responses::Encoder::new(head)),
            Dialect::Messages => Encoder::Messages(messages::Encoder::new(head)),
            Dialect::Gemini => Encoder::Gemini(gemini::Encoder::new(head)),
        }
    }

    pub(super) fn event(&mut self, ev: &HubEvent<'_>, out: &mut Out<'_>) {
        match self {
            Encoder::Chat(e) => e.event(ev, out),
            Encoder::Responses(e) => e.event(ev, out),
            Encoder::Messages(e) => e.event(ev, out),
            Encoder::Gemini(e) => e.event(ev, out),
        }
    }
}

/// Translates one streamed answer from the upstream's dialect to the client's.
#[derive(Debug)]
pub struct StreamTranslator {
    scanner: SseScanner,
    decoder: Decoder,
    encoder: Encoder,
    /// Reused for the client's bytes; each push hands its bytes out as one piece per side of
    /// the timing comment.
    buf: BytesMut,
    /// [`StreamTranslator::fail`] ended the client's stream.
    failed: bool,
    /// [`ClientStreamOptions::timing_comment`].
    timing_comment: bool,
}

impl StreamTranslator {
    pub fn new(upstream: Dialect, client: Dialect, opts: &ClientStreamOptions) -> Self {
        StreamTranslator {
            scanner: SseScanner::new(),
            decoder: Decoder::new(upstream),
            encoder: Encoder::new(client, Head::new(opts)),
            buf: BytesMut::with_capacity(4096),
            failed: false,
            timing_comment: opts.timing_comment,
        }
    }

    /// Feeds upstream bytes (split anywhere) and queues on `out` the client's bytes for every
    /// upstream event completed in them, with [`Piece::TimingComment`] before the client's
    /// terminal frame.
    pub fn push(&mut self, chunk: &[u8], out: &mut VecDeque<Piece>) {
        let StreamTranslator {
            scanner,
            decoder,
            encoder,
            buf,
            failed,
            timing_comment,
        } = self;
        if *failed {
            return;
        }
        let mut sink = Out::new(buf, out, *timing_comment);
        scanner.feed(chunk, &mut |item| match item {
            SseItem::Event { event, data, .. } => {
                decoder.event(event, data, &mut |ev| encoder.event(&ev, &mut sink));
            }
            // An upstream comment is a keep-alive (DeepSeek's `: keep-alive`); after the
            // terminal there is nothing left to keep alive.
            SseItem::Comment if !decoder.done() => encoder.event(&HubEvent::Heartbeat, &mut sink),
            SseItem::Comment | SseItem::Boundary { .. } => {}
        });
        sink.flush();
    }

    /// The upstream body ended. A stream whose terminal never came is left open: a cut is not
    /// turned into a completion (the proxy writes its own in-band error). The one exception is
    /// the rule the observer judges by: a Chat stream that ended cleanly after its finish
    /// reason and usage, without `data: [DONE]` (some providers never send it), is complete.
    pub fn finish(&mut self, end: BodyEnd, out: &mut VecDeque<Piece>) {
        self.scanner.finish();
        if self.failed {
            return;
        }
        let StreamTranslator {
            decoder,
            encoder,
            buf,
            timing_comment,
            ..
        } = self;
        let mut sink = Out::new(buf, out, *timing_comment);
        decoder.finish(end, &mut |ev| encoder.event(&ev, &mut sink));
        sink.flush();
    }

    /// Ends the client's stream with an in-band error in its dialect (a cut upstream, a missed
    /// deadline), the timing comment before its terminal frame as always; nothing once the
    /// upstream's terminal has been translated.
    pub fn fail(&mut self, kind: ErrorKind, message: &str, out: &mut VecDeque<Piece>) {
        if self.decoder.done() || self.failed {
            return;
        }
        self.failed = true;
        let message = JsonText::from_plain(message);
        let mut sink = Out::new(&mut self.buf, out, self.timing_comment);
        let err = HubEvent::Error(HubError { kind, message });
        self.encoder.event(&err, &mut sink);
        sink.flush();
    }

    /// Whether the upstream's terminal arrived (the client's terminal frame was queued).
    pub fn terminal_seen(&self) -> bool {
        self.decoder.done()
    }
}

/// Reads a whole stream of `dialect` into the hub's [`Answer`]: what its text, reasoning, tool
/// calls, stop reason and usage are, for comparing two streams across dialects.
pub fn read_stream(dialect: Dialect, bytes: &[u8]) -> Answer {
    let mut scanner = SseScanner::new();
    let mut decoder = Decoder::new(dialect);
    let mut answer = Answer::default();
    scanner.feed(bytes, &mut |item| {
        if let SseItem::Event { event, data, .. } = item {
            decoder.event(event, data, &mut |ev| answer.apply(&ev));
        }
    });
    scanner.finish();
    decoder.finish(BodyEnd::Eof, &mut |ev| answer.apply(&ev));
    answer
}

/// Translates a whole (non-streamed) 2xx answer body. An upstream body that reports an error
/// becomes the client dialect's error body.
pub fn translate_body(
    upstream: Dialect,
    client: Dialect,
    body: &[u8],
    opts: &ClientStreamOptions,
) -> Result<Vec<u8>, TranslateError> {
    let mut answer = Answer::default();
    decode_body(upstream, body, &mut |ev| answer.apply(&ev))?;
    let head = Head::new(opts);
    let mut out = String::with_capacity(body.len() + 256);
    match client {
        Dialect::Chat => chat::encode_body(&answer, &head, &mut out)?,
        Dialect::Responses => responses::encode_body(&answer, &head, &mut out)?,
        Dialect::Messages => messages::encode_body(&answer, &head, &mut out)?,
        Dialect::Gemini => gemini::encode_body(&answer, &head, &mut out)?,
    }
    Ok(out.into_bytes())
}

/// Decodes a whole answer body of `dialect` into hub events.
pub(super) fn decode_body<'a>(
    dialect: Dialect,
    body: &'a [u8],
    emit: &mut impl FnMut(HubEvent<'a>),
) -> Result<(), TranslateError> {
    match dialect {
        Dialect::Chat => chat::decode_body(body, emit),
        Dialect::Responses => responses::decode_body(body, emit),
        Dialect::Messages => messages::decode_body(body, emit),
        Dialect::Gemini => gemini::decode_body(body, emit),
    }
}

/// Translates a whole upstream error response (status + body in the upstream's dialect) into
/// the client dialect's status and error body.
pub fn translate_error(
    upstream: Dialect,
    client: Dialect,
    status: u16,
    body: &[u8],
) -> (u16, Vec<u8>) {
    let err = read_error(upstream, status, body);
    let status = client_status(err.kind, client, status);
    let mut out = String::with_capacity(128 + err.message.raw().len());
    if client == Dialect::Gemini {
        gemini::write_google_error(&mut out, &err, status);
    } else if client.is_anthropic() {
        write_anthropic_error(&mut out, &err);
    } else {
        out.push_str("{\"error\":");
        write_openai_error(&mut out, &err);
        out.push('}');
    }
    (status, out.into_bytes())
}
