//! The relay plan: which bytes of an observed stream go to the client now, which wait, and where
//! the timing comment goes. Pure, so the gateway's body and the property test run the same code.
//!
//! Bytes after the last event boundary of a chunk start an incomplete event and are held until
//! it completes (no SSE client can use half an event, and it guarantees the terminal frame starts
//! in what is released). A boundary is released with its whole line end: the LF of a CRLF goes
//! with its CR, also when the CR ends one chunk and the LF starts the next, so the client's bytes
//! are always the upstream's plus one comment block at an event boundary. A comment placed after
//! an event (Gemini's last) goes after that event's whole line end too: when a chunk ends on
//! the CR of a CRLF, it waits for the next chunk's LF (or the end of the stream).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::observe::{ChunkPlan, Placement};

/// The UTF-8 encoding of U+FEFF, which may open a stream and must stay first.
const BOM: &[u8] = &[0xEF, 0xBB, 0xBF];

/// One piece of what the client gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Upstream bytes, untouched.
    Bytes(Bytes),
    /// The timing comment block goes here. It is rendered when it is handed to the client, so
    /// it carries what is known then (which attempt won a race, for a stream read ahead).
    TimingComment,
}

/// Holds incomplete events and queues what the client gets, in order.
#[derive(Debug, Default)]
pub struct Relay {
    /// Bytes of an event that has not completed yet.
    held: BytesMut,
    /// Nothing was released yet: a leading BOM in `held` is still the stream's first bytes.
    released_any: bool,
    /// The last release ended with a CR that ended its chunk: an LF opening the next chunk is
    /// that line end's second byte and is released at once.
    cr_at_release_end: bool,
    /// The comment goes after an event whose line end was a CR that ended its chunk: right
    /// after the LF that may open the next chunk, else before that chunk.
    comment_after_lf: bool,
}

impl Relay {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one chunk and the observer's plan for it ([`crate::observe::StreamObserver::on_chunk`])
    /// and queues on `out` what may be released now.
    pub fn push(&mut self, plan: ChunkPlan, data: Bytes, out: &mut VecDeque<Piece>) {
        if data.is_empty() {
            return;
        }
        let lf_continues = self.cr_at_release_end && data.first() == Some(&b'\n');
        let mut release_to = plan.release_to;
        if lf_continues && release_to == 0 {
            release_to = 1;
        }
        if release_to > 0
            && data.get(release_to - 1) == Some(&b'\r')
            && data.get(release_to) == Some(&b'\n')
        {
            release_to += 1;
        }
        self.cr_at_release_end =
            release_to > 0 && release_to == data.len() && data.last() == Some(&b'\r');
        let released = data.slice(..release_to);
        let waiting = std::mem::take(&mut self.comment_after_lf);
        let comment_at = match plan.comment_at {
            Some(Placement::AfterEvent(end)) => self.after_event(&data, end),
            Some(p) => Some(p),
            None if waiting => Some(Placement::InChunk(usize::from(lf_continues))),
            None => None,
        };
        match comment_at {
            Some(Placement::BeforeHeld) => {
                let held = self.held.split().freeze();
                // A stream-opening BOM stays first; the comment follows it.
                let keep = if !self.released_any && held.starts_with(BOM) {
                    BOM.len()
                } else {
                    0
                };
                self.emit(out, held.slice(..keep));
                self.comment(out);
                self.emit(out, held.slice(keep..));
                self.emit(out, released);
            }
            Some(Placement::InChunk(i) | Placement::AfterEvent(i)) => {
                self.release_held(out);
                self.emit(out, released.slice(..i));
                self.comment(out);
                self.emit(out, released.slice(i..));
            }
            None if release_to > 0 => {
                self.release_held(out);
                self.emit(out, released);
            }
            None => {}
        }
        if release_to < data.len() {
            self.held.extend_from_slice(&data[release_to..]);
        }
    }

    /// The stream ended: an unterminated last event is relayed as it came (the bytes are the
    /// upstream's).
    pub fn finish(&mut self, out: &mut VecDeque<Piece>) {
        if std::mem::take(&mut self.comment_after_lf) {
            self.comment(out);
        }
        self.release_held(out);
    }

    /// Where a comment after the event ending at `end` (just after its line end's CR, for a
    /// CRLF) goes in `data`: after the LF of a CRLF; `None` when the chunk ends on that CR, and
    /// then it waits for the next chunk.
    fn after_event(&mut self, data: &[u8], end: usize) -> Option<Placement> {
        let after_cr = end > 0 && data.get(end - 1) == Some(&b'\r');
        match data.get(end) {
            Some(b'\n') if after_cr => Some(Placement::InChunk(end + 1)),
            None if after_cr => {
                self.comment_after_lf = true;
                None
            }
            _ => Some(Placement::InChunk(end)),
        }
    }

    /// Drops the incomplete event held back (a deadline ended the stream; a client would discard
    /// it at the end anyway).
    pub fn discard_held(&mut self) {
        self.held.clear();
    }

    /// The bytes held back now: the start of an event that has not completed.
    pub fn held(&self) -> &[u8] {
        &self.held
    }

    fn release_held(&mut self, out: &mut VecDeque<Piece>) {
        if !self.held.is_empty() {
            let held = self.held.split().freeze();
            self.emit(out, held);
        }
    }

    fn emit(&mut self, out: &mut VecDeque<Piece>, b: Bytes) {
        if !b.is_empty() {
            self.released_any = true;
            out.push_back(Piece::Bytes(b));
        }
    }

    fn comment(&mut self, out: &mut VecDeque<Piece>) {
        self.released_any = true;
        out.push_back(Piece::TimingComment);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::observe::StreamObserver;
    use crate::timeline::Hedge;
    use crate::Dialect;
    use proptest::prelude::*;

    /// Feeds `chunk` as the gateway's body does.
    fn push(obs: &mut StreamObserver, relay: &mut Relay, chunk: &str, out: &mut VecDeque<Piece>) {
        let data = Bytes::copy_from_slice(chunk.as_bytes());
        let plan = obs.on_chunk(Duration::ZERO, &data);
        relay.push(plan, data, out);
    }

    /// What the client gets, with the comment rendered as the body renders it.
    fn render(obs: &StreamObserver, out: VecDeque<Piece>) -> Vec<u8> {
        out.into_iter()
            .flat_map(|p| match p {
                Piece::Bytes(b) => b.to_vec(),
                Piece::TimingComment => obs.inband(Hedge::None).comment().into_bytes(),
            })
            .collect()
    }

    const COMMENT_HEAD: &str = ": x-laptime-timing ";

    /// One SSE event as (event type, data lines).
    type Event = (Option<&'static str>, Vec<&'static str>);

    /// Events of one dialect's stream before its terminal frame, and the terminal frame. A data
    /// line list of two joins into one JSON value with '\n'.
    fn events(dialect: Dialect) -> (Vec<Event>, Event) {
        match dialect {
            Dialect::Chat => (
                vec![
                    (
                        None,
                        vec![
                            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
                        ],
                    ),
                    (
                        None,
                        vec![
                            r#"{"choices":[{"index":0,"#,
                            r#""delta":{"content":"Hi"}}]}"#,
                        ],
                    ),
                    (
                        None,
                        vec![r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#],
                    ),
                ],
                (None, vec!["[DONE]"]),
            ),
            Dialect::Responses => (
                vec![
                    (
                        Some("response.created"),
                        vec![r#"{"type":"response.created","response":{"id":"r"}}"#],
                    ),
                    (
                        Some("response.output_text.delta"),
                        vec![
                            r#"{"type":"response.output_text.delta","#,
                            r#""delta":"Hi"}"#,
                        ],
                    ),
                ],
                (
                    Some("response.completed"),
                    vec![
                        r#"{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":1,"output_tokens":1}}}"#,
                    ],
                ),
            ),
            Dialect::Messages => (
                vec![
                    (
                        Some("message_start"),
                        vec![
                            r#"{"type":"message_start","message":{"usage":{"input_tokens":1,"output_tokens":1}}}"#,
                        ],
                    ),
                    (Some("ping"), vec![r#"{"type":"ping"}"#]),
                    (
                        Some("content_block_delta"),
                        vec![
                            r#"{"type":"content_block_delta","index":0,"#,
                            r#""delta":{"type":"text_delta","text":"Hi"}}"#,
                        ],
                    ),
                    (
                        Some("message_delta"),
                        vec![
                            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
                        ],
                    ),
                ],
                (Some("message_stop"), vec![r#"{"type":"message_stop"}"#]),
            ),
            // No terminal frame: the finishReason event is the last, the comment follows it.
            Dialect::Gemini => (
                vec![
                    (
                        None,
                        vec![
                            r#"{"candidates":[{"content":{"parts":[{"text":"hm","thought":true}],"role":"model"},"index":0}]}"#,
                        ],
                    ),
                    (
                        None,
                        vec![
                            r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"#,
                            r#""role":"model"},"index":0}]}"#,
                        ],
                    ),
                ],
                (
                    None,
                    vec![
                        r#"{"candidates":[{"content":{"parts":[{"text":"!"}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2,"totalTokenCount":5}}"#,
                    ],
                ),
            ),
        }
    }

    fn block(out: &mut String, eol: &str, comment: bool, event: Option<&str>, data: &[&str]) {
        if comment {
            out.push_str(": keep-alive");
            out.push_str(eol);
        }
        if let Some(e) = event {
            out.push_str("event: ");
            out.push_str(e);
            out.push_str(eol);
        }
        for d in data {
            out.push_str("data: ");
            out.push_str(d);
            out.push_str(eol);
        }
        out.push_str(eol);
    }

    /// A whole upstream stream and the offset where its terminal frame's block begins.
    fn stream(
        dialect: Dialect,
        eol: &str,
        bom: bool,
        comments: &[bool],
        lead: usize,
    ) -> (String, usize) {
        let (mut before, terminal) = events(dialect);
        before.truncate(lead);
        let mut s = String::new();
        if bom {
            s.push('\u{feff}');
        }
        for (i, (event, data)) in before.iter().enumerate() {
            block(
                &mut s,
                eol,
                comments.get(i).copied().unwrap_or(false),
                *event,
                data,
            );
        }
        // A comment-only block between events: a boundary that dispatches nothing.
        if comments.last().copied().unwrap_or(false) {
            s.push_str(": between");
            s.push_str(eol);
            s.push_str(eol);
        }
        let at = s.len();
        block(&mut s, eol, false, terminal.0, &terminal.1);
        (s, at)
    }

    /// Relays `upstream` cut at `cuts` and returns what the client gets.
    fn relay(dialect: Dialect, upstream: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut obs = StreamObserver::new(dialect, Some(Duration::ZERO));
        let mut relay = Relay::new();
        let mut out = VecDeque::new();
        let mut from = 0;
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (upstream.len() + 1)).collect();
        bounds.push(upstream.len());
        bounds.sort_unstable();
        for (i, to) in bounds.into_iter().enumerate() {
            if to < from {
                continue;
            }
            let chunk = Bytes::copy_from_slice(&upstream[from..to]);
            let plan = obs.on_chunk(Duration::from_millis(i as u64), &chunk);
            relay.push(plan, chunk, &mut out);
            from = to;
        }
        relay.finish(&mut out);
        render(&obs, out)
    }

    fn dialects() -> impl Strategy<Value = Dialect> {
        prop_oneof![
            Just(Dialect::Chat),
            Just(Dialect::Responses),
            Just(Dialect::Messages),
            Just(Dialect::Gemini)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_split_relays_the_upstream_bytes_plus_one_comment_block_right_at_the_terminal_frame(
            dialect in dialects(),
            eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
            bom in any::<bool>(),
            comments in proptest::collection::vec(any::<bool>(), 0..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
            lead in 0..5usize,
        ) {
            // `lead` events before the terminal frame (0: the terminal frame opens the stream).
            let (upstream, terminal_at) = stream(dialect, eol, bom, &comments, lead);
            let got = relay(dialect, upstream.as_bytes(), &cuts);
            let got = String::from_utf8(got).unwrap();
            let at = got.find(COMMENT_HEAD).unwrap();
            prop_assert_eq!(got.matches(COMMENT_HEAD).count(), 1);
            let len = got[at..].find("\n\n").unwrap() + 2;
            // Exactly the upstream's bytes around one comment block…
            prop_assert_eq!(format!("{}{}", &got[..at], &got[at + len..]), upstream.clone());
            // …placed right where the terminal frame's block begins (Gemini: right after its
            // last event, which ends the stream here).
            let expected = match dialect {
                Dialect::Gemini => upstream.len(),
                Dialect::Chat | Dialect::Responses | Dialect::Messages => terminal_at,
            };
            prop_assert_eq!(at, expected);
        }
    }

    /// A Gemini stream with one more chunk after its last event, cut at every offset: the
    /// comment lands after the finishReason event's whole CRLF, before what follows.
    #[test]
    fn a_gemini_comment_follows_the_whole_line_end_of_its_last_event_for_every_cut() {
        let text = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]},\"index\":0}]}\r\n\r\n";
        let last = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"!\"}]},\"finishReason\":\"STOP\",\"index\":0}]}\r\n\r\n";
        let after = ": trailing\r\n\r\n";
        let upstream = format!("{text}{last}{after}");
        let at = text.len() + last.len();
        for cut in 0..=upstream.len() {
            for second in [cut, (cut + 7).min(upstream.len())] {
                let got = relay(Dialect::Gemini, upstream.as_bytes(), &[cut, second]);
                let got = String::from_utf8(got).unwrap();
                let found = got.find(COMMENT_HEAD).unwrap();
                assert_eq!(found, at, "cut at {cut}, {second}: {got:?}");
                let len = got[found..].find("\n\n").unwrap() + 2;
                assert_eq!(
                    format!("{}{}", &got[..found], &got[found + len..]),
                    upstream
                );
            }
        }
    }

    #[test]
    fn a_crlf_split_between_its_cr_and_lf_releases_the_lf_with_the_next_chunk_at_once() {
        let mut obs = StreamObserver::new(Dialect::Chat, Some(Duration::ZERO));
        let mut relay = Relay::new();
        let mut out = VecDeque::new();
        let ev = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\r\n\r";
        push(&mut obs, &mut relay, ev, &mut out);
        assert_eq!(render(&obs, std::mem::take(&mut out)), ev.as_bytes());
        push(&mut obs, &mut relay, "\ndata: [DO", &mut out);
        assert_eq!(render(&obs, std::mem::take(&mut out)), b"\n");
        assert_eq!(relay.held().len(), "data: [DO".len());
    }

    #[test]
    fn a_crlf_event_is_released_with_its_whole_line_end() {
        let mut obs = StreamObserver::new(Dialect::Chat, Some(Duration::ZERO));
        let mut relay = Relay::new();
        let mut out = VecDeque::new();
        push(
            &mut obs,
            &mut relay,
            "data: {\"choices\":[]}\r\n\r\ndata: [DO",
            &mut out,
        );
        assert_eq!(
            render(&obs, std::mem::take(&mut out)),
            b"data: {\"choices\":[]}\r\n\r\n"
        );
        assert_eq!(relay.held().len(), "data: [DO".len());
        push(&mut obs, &mut relay, "NE]\r\n\r\n", &mut out);
        let rest = String::from_utf8(render(&obs, out)).unwrap();
        assert!(rest.starts_with(COMMENT_HEAD), "{rest:?}");
        assert!(rest.ends_with("\n\ndata: [DONE]\r\n\r\n"), "{rest:?}");
    }
}
