//! Continuation after a cut: the client's stream so far, rebuilt from the upstream bytes it
//! was made of, and another upstream's answer to "continue this text" written as the rest of
//! that same stream, in the client's dialect.
//!
//! The rebuild replays the first upstream's bytes through its decoder and a client encoder
//! whose output is thrown away, so the encoder ends in the state the client's stream is in
//! (envelope sent, blocks open, indexes used) whether the first attempt was relayed untouched or
//! translated. The continuation's own envelope is dropped, its first text block is merged into
//! the client's open text block (or opens the next one), every later block takes the next free
//! index, and its reasoning is left out (it is not part of the answer being continued). A
//! provider refuses a prefill that ends in whitespace (Anthropic does), so the prefill is sent
//! trimmed and the same whitespace is taken off the start of the continuation, never repeated.
//!
//! Only an answer that is text so far can be continued: a cut inside a tool call or before any
//! text has nothing a prefill could carry.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::acc::Answer;
use super::hub::{BlockKind, ErrorKind, HubError, HubEvent, JsonText};
use super::translator::{Decoder, Encoder};
use super::{ClientStreamOptions, Head, Out};
use crate::observe::BodyEnd;
use crate::relay::Piece;
use crate::sse::{SseItem, SseScanner};
use crate::usage::Tokens;
use crate::Dialect;

/// A cut answer being continued by another upstream.
#[derive(Debug)]
pub struct Splice {
    encoder: Encoder,
    /// The continuation's decoder, once [`Splice::continue_with`] named its dialect.
    decoder: Option<Decoder>,
    scanner: SseScanner,
    buf: BytesMut,
    timing_comment: bool,
    /// The text the client has, trimmed at the end: what the continuation is asked to follow.
    prefill: String,
    remap: Remap,
    failed: bool,
}

impl Splice {
    /// The client's stream after `relayed` (the bytes of upstream `first`, in the dialect it
    /// answered in, that reached the client through a relay or a translator built with `opts`):
    /// a splice ready for a continuation, or `None` when the answer so far cannot be continued
    /// (no text, a tool call, or it already ended).
    pub fn after_cut(
        first: Dialect,
        client: Dialect,
        opts: &ClientStreamOptions,
        relayed: &[Bytes],
    ) -> Option<Splice> {
        let mut encoder = Encoder::new(client, Head::new(opts));
        let mut decoder = Decoder::new(first);
        let mut scanner = SseScanner::new();
        let mut answer = Answer::default();
        let mut open: Vec<bool> = Vec::new();
        let (mut buf, mut discarded) = (BytesMut::new(), VecDeque::new());
        for chunk in relayed {
            let mut sink = Out::new(&mut buf, &mut discarded, false);
            scanner.feed(chunk, &mut |item| {
                if let SseItem::Event { event, data, .. } = item {
                    decoder.event(event, data, &mut |ev| {
                        track_open(&mut open, &ev);
                        answer.apply(&ev);
                        encoder.event(&ev, &mut sink);
                    });
                }
            });
            sink.flush();
            discarded.clear();
        }
        if answer.stop.is_some() || answer.ended || answer.error.is_some() {
            return None;
        }
        if answer.has_tool_call() {
            return None;
        }
        let mut text = String::new();
        for b in answer.blocks.iter().filter(|b| b.kind == BlockKind::Text) {
            text.push_str(&JsonText::escaped(&b.text).unescape()?);
        }
        let prefill = text.trim_end();
        if prefill.is_empty() {
            return None;
        }
        let last = answer.blocks.len().checked_sub(1)?;
        let last_is_open_text =
            answer.blocks[last].kind == BlockKind::Text && open.get(last) == Some(&true);
        Some(Splice {
            encoder,
            decoder: None,
            scanner: SseScanner::new(),
            buf: BytesMut::with_capacity(4096),
            timing_comment: opts.timing_comment,
            prefill: prefill.to_owned(),
            remap: Remap {
                skip: text[prefill.len()..].to_owned(),
                open_text: last_is_open_text
                    .then(|| u32::try_from(last).ok())
                    .flatten(),
                next_index: u32::try_from(answer.blocks.len()).ok()?,
                map: Vec::new(),
                merged_first_text: false,
            },
            failed: false,
        })
    }

    /// The text the continuation is asked to follow (as an assistant prefill).
    pub fn prefill(&self) -> &str {
        &self.prefill
    }

    /// The continuation answers in `dialect`.
    pub fn continue_with(&mut self, dialect: Dialect) {
        self.decoder = Some(Decoder::new(dialect));
    }

    /// Feeds the continuation's bytes (split anywhere) and queues the client's bytes for every
    /// event completed in them.
    pub fn push(&mut self, chunk: &[u8], out: &mut VecDeque<Piece>) {
        let Splice {
            encoder,
            decoder,
            scanner,
            buf,
            timing_comment,
            remap: state,
            failed,
            ..
        } = self;
        let (Some(decoder), false) = (decoder.as_mut(), *failed) else {
            return;
        };
        let mut sink = Out::new(buf, out, *timing_comment);
        scanner.feed(chunk, &mut |item| match item {
            SseItem::Event { event, data, .. } => decoder.event(event, data, &mut |ev| {
                if let Some(ev) = state.remap(ev) {
                    encoder.event(&ev, &mut sink);
                }
            }),
            SseItem::Comment if !decoder.done() => encoder.event(&HubEvent::Heartbeat, &mut sink),
            SseItem::Comment | SseItem::Boundary { .. } => {}
        });
        sink.flush();
    }

    /// The continuation's body ended (a cut of it is left open, as the translator leaves one).
    pub fn finish(&mut self, end: BodyEnd, out: &mut VecDeque<Piece>) {
        self.scanner.finish();
        let (Some(decoder), false) = (self.decoder.as_mut(), self.failed) else {
            return;
        };
        let state = &mut self.remap;
        let mut sink = Out::new(&mut self.buf, out, self.timing_comment);
        decoder.finish(end, &mut |ev| {
            if let Some(ev) = state.remap(ev) {
                self.encoder.event(&ev, &mut sink);
            }
        });
        sink.flush();
    }

    /// Ends the client's stream with an in-band error in its dialect.
    pub fn fail(&mut self, kind: ErrorKind, message: &str, out: &mut VecDeque<Piece>) {
        if self.failed || self.terminal_seen() {
            return;
        }
        self.failed = true;
        let mut sink = Out::new(&mut self.buf, out, self.timing_comment);
        let message = JsonText::from_plain(message);
        self.encoder
            .event(&HubEvent::Error(HubError { kind, message }), &mut sink);
        sink.flush();
    }

    /// Whether the continuation's terminal arrived.
    pub fn terminal_seen(&self) -> bool {
        self.decoder.as_ref().is_some_and(Decoder::done)
    }
}

/// Which blocks are open, by hub index.
fn track_open(open: &mut Vec<bool>, ev: &HubEvent<'_>) {
    match ev {
        HubEvent::BlockStart { index, .. } => {
            let i = *index as usize;
            if open.len() <= i {
                open.resize(i + 1, false);
            }
            open[i] = true;
        }
        HubEvent::BlockStop { index } => {
            if let Some(o) = open.get_mut(*index as usize) {
                *o = false;
            }
        }
        _ => {}
    }
}

/// How the continuation's events become the rest of the client's stream.
#[derive(Debug)]
struct Remap {
    /// The whitespace trimmed off the prefill, still to be taken off the continuation's start.
    skip: String,
    /// The client's text block the continuation's first text goes into, if still open.
    open_text: Option<u32>,
    /// The client's next free block index.
    next_index: u32,
    /// Continuation block index → client block index; `None` for a block left out.
    map: Vec<Option<u32>>,
    merged_first_text: bool,
}

impl Remap {
    fn remap<'a>(&mut self, ev: HubEvent<'a>) -> Option<HubEvent<'a>> {
        match ev {
            // The client's stream is already open; only the count it may carry matters.
            HubEvent::MessageStart { usage, .. } => {
                (usage != Tokens::default()).then_some(HubEvent::Usage(usage))
            }
            HubEvent::BlockStart { index, kind } => {
                let i = index as usize;
                if self.map.len() <= i {
                    self.map.resize(i + 1, None);
                }
                match kind {
                    BlockKind::Reasoning | BlockKind::RedactedReasoning { .. } => None,
                    BlockKind::Text if !self.merged_first_text => {
                        self.merged_first_text = true;
                        if let Some(open) = self.open_text.take() {
                            self.map[i] = Some(open);
                            return None;
                        }
                        self.map[i] = Some(self.take_index());
                        Some(HubEvent::BlockStart {
                            index: self.map[i]?,
                            kind,
                        })
                    }
                    kind => {
                        self.map[i] = Some(self.take_index());
                        Some(HubEvent::BlockStart {
                            index: self.map[i]?,
                            kind,
                        })
                    }
                }
            }
            HubEvent::BlockDelta { index, delta } => {
                let to = self.to(index)?;
                let delta = match delta {
                    super::hub::Delta::Text(t) if !self.skip.is_empty() => {
                        super::hub::Delta::Text(self.skip_leading(t)?)
                    }
                    d => d,
                };
                Some(HubEvent::BlockDelta { index: to, delta })
            }
            HubEvent::BlockStop { index } => Some(HubEvent::BlockStop {
                index: self.to(index)?,
            }),
            other => Some(other),
        }
    }

    fn take_index(&mut self) -> u32 {
        let i = self.next_index;
        self.next_index += 1;
        i
    }

    fn to(&self, index: u32) -> Option<u32> {
        self.map.get(index as usize).copied().flatten()
    }

    /// Takes the prefill's trimmed whitespace off the continuation's start; a delta that is
    /// only that whitespace is dropped.
    fn skip_leading<'a>(&mut self, text: JsonText<'a>) -> Option<JsonText<'a>> {
        let plain = text.unescape()?;
        let common = plain
            .chars()
            .zip(self.skip.chars())
            .take_while(|(a, b)| a == b)
            .map(|(a, _)| a.len_utf8())
            .sum::<usize>();
        if common == 0 {
            // The continuation does not start with it: nothing to take off.
            self.skip.clear();
            return Some(text);
        }
        self.skip.drain(..common);
        if plain.len() == common {
            return None;
        }
        // What is left, once the start was matched, ends the skipping.
        self.skip.clear();
        Some(JsonText::from_plain(&plain[common..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::stream::{read_stream, StreamTranslator};

    fn text_fixture(d: Dialect) -> &'static str {
        match d {
            Dialect::Chat => include_str!("fixtures/chat_text.sse"),
            Dialect::Responses => include_str!("fixtures/responses_text.sse"),
            Dialect::Messages => include_str!("fixtures/messages_text.sse"),
            Dialect::Gemini => include_str!("fixtures/gemini_text.sse"),
        }
    }

    /// The fixture's events, each with its blank line.
    fn events(d: Dialect) -> Vec<String> {
        let sep = if d == Dialect::Gemini {
            "\r\n\r\n"
        } else {
            "\n\n"
        };
        text_fixture(d)
            .split_inclusive(sep)
            .filter(|e| !e.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn opts() -> ClientStreamOptions {
        ClientStreamOptions {
            model: Some("m".into()),
            id: "req1".into(),
            created: 1,
            include_usage: true,
            timing_comment: false,
        }
    }

    fn bytes(pieces: VecDeque<Piece>) -> Vec<u8> {
        let mut out = Vec::new();
        for p in pieces {
            if let Piece::Bytes(b) = p {
                out.extend_from_slice(&b);
            }
        }
        out
    }

    fn plain_text(a: &Answer) -> String {
        a.blocks
            .iter()
            .filter(|b| b.kind == BlockKind::Text)
            .map(|b| JsonText::escaped(&b.text).unescape().unwrap())
            .collect()
    }

    /// The client's bytes for the first `k` events of `first`'s stream.
    fn client_so_far(first: Dialect, client: Dialect, relayed: &[Bytes]) -> Vec<u8> {
        if first == client {
            return relayed.iter().flat_map(|b| b.to_vec()).collect();
        }
        let mut t = StreamTranslator::new(first, client, &opts());
        let mut out = VecDeque::new();
        for b in relayed {
            t.push(b, &mut out);
        }
        bytes(out)
    }

    #[test]
    fn a_cut_text_answer_continues_in_the_clients_stream_with_nothing_repeated_or_lost() {
        let mut checked = 0;
        for first in Dialect::ALL {
            let evs = events(first);
            for k in 1..evs.len() {
                let relayed: Vec<Bytes> = evs[..k].iter().map(|e| Bytes::from(e.clone())).collect();
                let partial = read_stream(first, &relayed.concat());
                for client in Dialect::ALL {
                    let Some(splice) = Splice::after_cut(first, client, &opts(), &relayed) else {
                        assert!(
                            plain_text(&partial).trim_end().is_empty() || partial.stop.is_some(),
                            "{first}→{client} at {k}: only an answer without text or already \
                             stopped is not continued"
                        );
                        continue;
                    };
                    let had = plain_text(&partial);
                    assert_eq!(splice.prefill(), had.trim_end());
                    for cont in Dialect::ALL {
                        let mut s = Splice::after_cut(first, client, &opts(), &relayed).unwrap();
                        s.continue_with(cont);
                        let mut out = VecDeque::new();
                        // Split the continuation anywhere: here byte by byte.
                        for b in text_fixture(cont).as_bytes().chunks(7) {
                            s.push(b, &mut out);
                        }
                        s.finish(BodyEnd::Eof, &mut out);
                        assert!(s.terminal_seen());
                        let mut all = client_so_far(first, client, &relayed);
                        all.extend(bytes(out));
                        let got = read_stream(client, &all);
                        let cont_text =
                            plain_text(&read_stream(cont, text_fixture(cont).as_bytes()));
                        let skip = &had[had.trim_end().len()..];
                        let common: usize = cont_text
                            .chars()
                            .zip(skip.chars())
                            .take_while(|(a, b)| a == b)
                            .map(|(a, _)| a.len_utf8())
                            .sum();
                        let pair = format!("{first}→{client}, continued by {cont}, cut at {k}");
                        assert_eq!(
                            plain_text(&got),
                            format!("{had}{}", &cont_text[common..]),
                            "{pair}"
                        );
                        assert!(got.ended && got.error.is_none(), "{pair}");
                        assert!(got.stop.is_some(), "{pair}");
                        let text = String::from_utf8(all).unwrap();
                        for once in ["message_start", "response.created"] {
                            assert!(
                                text.matches(&format!("event: {once}")).count() <= 1,
                                "{pair}"
                            );
                        }
                        // A text block left open is continued, not followed by a second one.
                        let blocks = got
                            .blocks
                            .iter()
                            .filter(|b| b.kind == BlockKind::Text)
                            .count();
                        if splice.remap.open_text.is_some() {
                            assert_eq!(blocks, 1, "{pair}");
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 50, "{checked} splices checked");
    }

    #[test]
    fn a_cut_inside_a_tool_call_or_before_any_text_is_not_continued() {
        let tool = include_str!("fixtures/messages_tool.sse");
        let cut = &tool[..tool.find("input_json_delta").unwrap()];
        let cut = &cut[..cut.rfind("\n\n").unwrap() + 2];
        assert!(Splice::after_cut(
            Dialect::Messages,
            Dialect::Chat,
            &opts(),
            &[Bytes::from(cut.to_owned())]
        )
        .is_none());
        let first = &events(Dialect::Messages)[..2].concat();
        assert!(Splice::after_cut(
            Dialect::Messages,
            Dialect::Messages,
            &opts(),
            &[Bytes::from(first.clone())]
        )
        .is_none());
    }

    #[test]
    fn the_prefills_trailing_whitespace_is_taken_off_the_continuations_start_once() {
        let evs = events(Dialect::Messages);
        // Up to "!\n": the prefill ends in a newline.
        let k = evs.iter().position(|e| e.contains("!\\n")).unwrap() + 1;
        let relayed: Vec<Bytes> = evs[..k].iter().map(|e| Bytes::from(e.clone())).collect();
        let mut s =
            Splice::after_cut(Dialect::Messages, Dialect::Messages, &opts(), &relayed).unwrap();
        assert_eq!(s.prefill(), "Hello, \"world\"!");
        s.continue_with(Dialect::Messages);
        let cont = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\\n\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Bye.\"}}\n\n\
            event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
            event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n\
            event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let mut out = VecDeque::new();
        s.push(cont.as_bytes(), &mut out);
        let mut all: Vec<u8> = relayed.concat();
        all.extend(bytes(out));
        let got = read_stream(Dialect::Messages, &all);
        assert_eq!(plain_text(&got), "Hello, \"world\"!\nBye.");
        assert_eq!(got.blocks.len(), 1, "one text block, continued");
        assert!(got.ended);
    }
}
