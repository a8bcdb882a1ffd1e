//! The stream observer: turns upstream bytes, each chunk stamped with its arrival offset, into
//! the stream's marks, counts, usage and outcome, and says where the in-band timing comment goes.
//!
//! It is pure: the edge stamps time where the bytes arrive (inside `poll_frame`) and hands the
//! offset in. Bytes after the last event boundary of a chunk are an incomplete event; the edge
//! holds them until the event completes. No SSE consumer can act on half an event, so holding it
//! costs the client nothing, and it guarantees that the terminal frame starts inside what is
//! released, so the comment can always be written before it. Gemini has no terminal frame: its
//! comment goes right after its last event (the one with the `finishReason`), once that event
//! is complete.

use std::time::Duration;

use crate::classify::{
    classify_body, classify_event, read_body_quick, read_event_quick, EffectiveKind, EventClass,
    Repeats, StopHint,
};
use crate::estimate::OutputEstimate;
use crate::sse::{SseItem, SseScanner};
use crate::timeline::{ErrorClass, Hedge, Marks, Outcome};
use crate::usage::{Tokens, UsageAcc};
use crate::views::InBand;
use crate::Dialect;

/// Where the timing comment goes in what a chunk releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Before the bytes held back from earlier chunks (the terminal frame began there).
    BeforeHeld,
    /// At this offset of the current chunk.
    InChunk(usize),
    /// Right after the event that ends at this offset of the current chunk (an
    /// [`SseItem::Event`]'s `end`): after its whole line end, so when the chunk ends on the CR
    /// of a CRLF the comment waits for the LF (or the end of the stream).
    AfterEvent(usize),
}

/// What the edge does with one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Bytes of the chunk before this offset complete an event and are released now (after any
    /// held bytes); the rest start an incomplete event and are held.
    pub release_to: usize,
    /// Set once per stream: the terminal frame is in what is released, the comment goes here.
    pub comment_at: Option<Placement>,
    /// An event in this chunk is not valid JSON: nothing from it on is relayed (the stream is
    /// broken there, as if cut; see [`StreamObserver::malformed`]).
    pub malformed: bool,
}

/// How the upstream body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// Clean end of the body.
    Eof,
    /// The body broke (reset, protocol error).
    Error,
}

/// Observes one streamed upstream body.
#[derive(Debug)]
pub struct StreamObserver {
    dialect: Dialect,
    scanner: SseScanner,
    usage: UsageAcc,
    marks: Marks,
    terminal: Option<EventClass>,
    stop: Option<StopHint>,
    event_count: u32,
    text_delta_count: u32,
    comment_placed: bool,
    /// No comment is placed (an edge whose clients cannot take one).
    no_comment: bool,
    ended: Option<BodyEnd>,
    /// An event was not valid JSON: nothing from it on is read.
    malformed: bool,
    /// A Responses stream's stored response id (from its first event, `response.created`), so
    /// that later calls naming it reach the channel that holds it.
    response_id: Option<String>,
    /// Counts the output with a tokenizer: only on a Chat stream whose upstream will report no
    /// usage ([`StreamObserver::estimating_output`]).
    estimate: Option<Box<OutputEstimate>>,
    /// Every event is read with the full parse, never the byte path (the reference the byte
    /// path is tested and measured against).
    full_parse: bool,
    /// A Chat stream's last text chunk, so that the next ones are read without a walk.
    repeats: Repeats,
}

/// Whether the dialect's comment goes after its terminal event instead of before its terminal
/// frame: Gemini has no terminal frame, its last event is the one that ends it.
fn comment_follows_terminal(dialect: Dialect) -> bool {
    match dialect {
        Dialect::Gemini => true,
        Dialect::Chat | Dialect::Responses | Dialect::Messages => false,
    }
}

/// The stored response a `response.created` event names (its `response` object, unless that
/// says `store: false`).
fn created_response(data: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Created<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<&'a str>,
        response: Option<serde_json::Value>,
    }
    let created: Created<'_> = serde_json::from_str(data).ok()?;
    if created.kind != Some("response.created") {
        return None;
    }
    crate::endpoint::response_id_of(&created.response?)
}

/// What the observer concluded; `outcome` is absent while the stream is still open.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamSummary {
    /// Stream marks only (`first_byte` … `upstream_done`); the rest stay `None`.
    pub marks: Marks,
    pub outcome: Option<Outcome>,
    pub error_class: Option<ErrorClass>,
    pub tokens: Tokens,
    pub event_count: u32,
    pub text_delta_count: u32,
    /// A Chat stream that ended cleanly after its finish reason and usage but without
    /// `data: [DONE]`: complete (some providers never send the sentinel), and flagged.
    pub no_terminal_sentinel: bool,
}

impl StreamSummary {
    /// What a whole (non-streamed) answer shows before it is judged: its first byte and end.
    pub fn whole(first_byte: Option<Duration>, end: Option<Duration>) -> Self {
        StreamSummary {
            marks: Marks {
                first_byte,
                upstream_done: end,
                ..Marks::default()
            },
            outcome: None,
            error_class: None,
            tokens: Tokens::default(),
            event_count: 0,
            text_delta_count: 0,
            no_terminal_sentinel: false,
        }
    }
}

impl StreamObserver {
    /// `upstream_start` is the attempt's dispatch (t1), so the in-band values can be computed.
    pub fn new(dialect: Dialect, upstream_start: Option<Duration>) -> Self {
        StreamObserver {
            dialect,
            scanner: SseScanner::new(),
            usage: UsageAcc::new(dialect),
            marks: Marks {
                upstream_start,
                ..Marks::default()
            },
            terminal: None,
            stop: None,
            event_count: 0,
            text_delta_count: 0,
            comment_placed: false,
            no_comment: false,
            ended: None,
            malformed: false,
            response_id: None,
            estimate: None,
            full_parse: false,
            repeats: Repeats::default(),
        }
    }

    /// Reads every event with the full parse instead of the byte path: what the byte path is
    /// tested and measured against (it must give the same plans, marks, counts and tokens).
    pub fn with_full_parse(mut self) -> Self {
        self.full_parse = true;
        self
    }

    /// Counts this Chat stream's output with the tokenizer, for an upstream that reports no
    /// usage in it (the count is [`Tokens::estimated_output`], used only if none comes).
    pub fn estimating_output(mut self) -> Self {
        if self.dialect == Dialect::Chat {
            self.estimate = Some(Box::default());
        }
        self
    }

    /// The stored response a Responses stream created (`None` when it said `store: false`).
    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// Places no timing comment in this stream (its bytes are relayed exactly as they came).
    pub fn without_comment(mut self) -> Self {
        self.no_comment = true;
        self
    }

    /// The marks so far (stream marks from `first_byte` on, plus the dispatch and head given).
    pub fn marks(&self) -> &Marks {
        &self.marks
    }

    /// Sets the head's arrival (t2), for the in-band values' consistency with the record.
    pub fn set_headers(&mut self, at: Duration) {
        self.marks.upstream_headers = Some(at);
    }

    /// Feeds one chunk that arrived at `at` (offset from t0).
    pub fn on_chunk(&mut self, at: Duration, chunk: &[u8]) -> ChunkPlan {
        if chunk.is_empty() {
            return ChunkPlan {
                release_to: 0,
                comment_at: None,
                malformed: false,
            };
        }
        if self.marks.first_byte.is_none() {
            self.marks.first_byte = Some(at);
        }
        let mut release_to = 0;
        let mut comment_at = None;
        let dialect = self.dialect;
        let after = comment_follows_terminal(dialect);
        let no_comment = self.no_comment;
        // The byte path is taken where it measured cheaper than serde's single pass: Chat
        // (its text chunks mostly repeat the one before: `classify::repeat`) and Messages; for
        // Responses and Gemini it measured dearer (benchmarks/README.md, issue 16).
        let full_parse = self.full_parse
            || match dialect {
                Dialect::Chat | Dialect::Messages => false,
                Dialect::Responses | Dialect::Gemini => true,
            };
        let Self {
            scanner,
            usage,
            marks,
            terminal,
            stop,
            event_count,
            text_delta_count,
            comment_placed,
            malformed,
            response_id,
            estimate,
            repeats,
            ..
        } = self;
        let mut malformed_here = false;
        scanner.feed(chunk, &mut |item| match item {
            // Nothing after a malformed event is read.
            _ if *malformed => {}
            SseItem::Comment => {}
            SseItem::Boundary { end } => release_to = end,
            SseItem::Event {
                event,
                data,
                start,
                end,
            } => {
                // The byte path decides most events; the rest are parsed in full.
                let quick = match dialect {
                    _ if full_parse => None,
                    Dialect::Chat => repeats.read_chat(data),
                    _ => read_event_quick(dialect, event, data),
                };
                let c = match &quick {
                    Some(q) => q.classification,
                    None => {
                        let c = classify_event(dialect, event, data);
                        // A classifier reads what it cannot parse as an envelope; only an
                        // envelope can be one that is not JSON at all (checked for those few
                        // events only; the byte path decides only valid JSON).
                        if c.class == EventClass::Envelope && !is_json(data) {
                            *malformed = true;
                            malformed_here = true;
                            return;
                        }
                        c
                    }
                };
                release_to = end;
                if dialect == Dialect::Responses && *event_count == 0 {
                    // Only the first event, once per stream: `response.created` names it.
                    *response_id = created_response(data);
                }
                if let Some(u) = &c.usage {
                    usage.apply(u);
                }
                if c.stop.is_some() {
                    *stop = c.stop;
                }
                if c.class == EventClass::Heartbeat {
                    return;
                }
                if let Some(kind) = c.effective() {
                    if let Some(e) = estimate {
                        match &quick {
                            Some(q) => e.push_texts(q.texts()),
                            None => e.push_chat_chunk(data),
                        }
                    }
                    marks.first_effective.get_or_insert(at);
                    marks.last_effective = Some(at);
                    if kind == EffectiveKind::Text {
                        marks.first_visible.get_or_insert(at);
                        *text_delta_count += 1;
                    }
                }
                if c.class.is_terminal() && terminal.is_none() {
                    *terminal = Some(c.class);
                    marks.upstream_done = Some(at);
                }
                *event_count += 1;
                marks.first_event.get_or_insert(at);
                if c.terminal_frame && !*comment_placed && !no_comment {
                    *comment_placed = true;
                    comment_at = Some(match start {
                        _ if after => Placement::AfterEvent(end),
                        Some(s) => Placement::InChunk(s),
                        None => Placement::BeforeHeld,
                    });
                }
            }
        });
        ChunkPlan {
            release_to,
            comment_at,
            malformed: malformed_here,
        }
    }

    /// An event was not valid JSON: the stream broke there (an upstream error, `invalid_body`).
    pub fn malformed(&self) -> bool {
        self.malformed
    }

    /// The body ended at `at`. Without a terminal event this is a close, never a completion.
    pub fn on_end(&mut self, at: Duration, how: BodyEnd) {
        if self.ended.is_some() {
            return;
        }
        self.scanner.finish();
        self.ended = Some(how);
        if self.marks.upstream_done.is_none() {
            self.marks.upstream_done = Some(at);
        }
    }

    /// Whether the terminal event has arrived (what follows it does not change the outcome).
    pub fn terminal_seen(&self) -> bool {
        self.terminal.is_some()
    }

    pub fn tokens(&self) -> Tokens {
        let mut tokens = self.usage.tokens();
        if let (None, Some(e)) = (tokens.output, &self.estimate) {
            tokens.estimated_output = e.total();
        }
        tokens
    }

    /// The values for the in-band comment and trailers, as of now. They carry no output count,
    /// so the estimate is not asked for one: that counts its held text (0.84 % of a gateway's
    /// samples under fast streams without usage, benchmarks/README.md item 21).
    pub fn inband(&self, hedge: Hedge) -> InBand {
        InBand::new(&self.marks, &self.usage.tokens(), hedge)
    }

    /// Everything of a Chat answer but its `[DONE]`: a finish reason, then the usage chunk.
    fn complete_but_for_the_sentinel(&self) -> bool {
        self.dialect == Dialect::Chat
            && self.terminal.is_none()
            && self.ended == Some(BodyEnd::Eof)
            && self.stop.is_some()
            && self.tokens().output.is_some()
    }

    pub fn summary(&self) -> StreamSummary {
        let no_terminal_sentinel = self.complete_but_for_the_sentinel();
        let stopped = || match self.stop {
            Some(StopHint::Length | StopHint::ContentFilter) => (Some(Outcome::Incomplete), None),
            _ => (Some(Outcome::Completed), None),
        };
        let (outcome, error_class) = match (self.terminal, self.ended) {
            (None, _) if self.malformed => {
                (Some(Outcome::UpstreamError), Some(ErrorClass::InvalidBody))
            }
            (Some(EventClass::TerminalError), _) => {
                (Some(Outcome::UpstreamError), Some(ErrorClass::StreamError))
            }
            (Some(EventClass::TerminalIncomplete), _) => (Some(Outcome::Incomplete), None),
            (Some(_), _) => stopped(),
            (None, Some(BodyEnd::Eof)) if no_terminal_sentinel => stopped(),
            (None, Some(BodyEnd::Eof)) => (
                Some(Outcome::UpstreamClosedEarly),
                Some(ErrorClass::ClosedEarly),
            ),
            (None, Some(BodyEnd::Error)) => (
                Some(Outcome::UpstreamClosedEarly),
                Some(ErrorClass::BodyError),
            ),
            (None, None) => (None, None),
        };
        StreamSummary {
            marks: self.marks,
            outcome,
            error_class,
            tokens: self.tokens(),
            event_count: self.event_count,
            text_delta_count: self.text_delta_count,
            no_terminal_sentinel,
        }
    }
}

/// What a whole (non-streamed) answer was.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WholeAnswer {
    pub outcome: Outcome,
    pub error_class: Option<ErrorClass>,
    pub tokens: Tokens,
    /// The body holds non-empty visible text.
    pub has_text: bool,
}

/// Whether an event's data is JSON (an SSE `data` field every dialect fills with JSON).
fn is_json(data: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(data).is_ok()
}

/// The one rule for what a whole answer was, shared by the gateway and `laptime bench`: a body
/// that broke is closed early; an error status, an error body or a 2xx whose body is not valid
/// JSON (an HTML page from a proxy, JSON cut short) is an upstream error; a length or content
/// filter stop is incomplete; anything else completed.
pub fn whole_answer(dialect: Dialect, status: u16, end: BodyEnd, body: &[u8]) -> WholeAnswer {
    let summary = read_body_quick(dialect, body).unwrap_or_else(|| classify_body(dialect, body));
    let mut usage = UsageAcc::new(dialect);
    usage.apply(&summary.usage);
    // A body the dialect's parse read is JSON already; only one it could not read is walked.
    let valid_json =
        || summary.json || serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
    let (outcome, error_class) = if end == BodyEnd::Error {
        (Outcome::UpstreamClosedEarly, Some(ErrorClass::BodyError))
    } else if let Some(class) = crate::classify::error_status_class(status, body) {
        (Outcome::UpstreamError, Some(class))
    } else if summary.error {
        (Outcome::UpstreamError, Some(ErrorClass::StreamError))
    } else if !valid_json() {
        (Outcome::UpstreamError, Some(ErrorClass::InvalidBody))
    } else if matches!(
        summary.stop,
        Some(StopHint::Length | StopHint::ContentFilter)
    ) {
        (Outcome::Incomplete, None)
    } else {
        (Outcome::Completed, None)
    };
    WholeAnswer {
        outcome,
        error_class,
        tokens: usage.tokens(),
        has_text: summary.has_text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// Feeds chunks as the gateway's body does and returns the bytes a client would receive.
    fn relay(obs: &mut StreamObserver, chunks: &[(u64, &str)]) -> String {
        use crate::relay::{Piece, Relay};
        let mut relay = Relay::new();
        let mut out = std::collections::VecDeque::new();
        for (t, chunk) in chunks {
            let data = bytes::Bytes::copy_from_slice(chunk.as_bytes());
            let plan = obs.on_chunk(at(*t), &data);
            relay.push(plan, data, &mut out);
        }
        relay.finish(&mut out);
        out.into_iter()
            .map(|p| match p {
                Piece::Bytes(b) => String::from_utf8(b.to_vec()).unwrap(),
                Piece::TimingComment => obs.inband(Hedge::None).comment(),
            })
            .collect()
    }

    #[test]
    fn an_estimating_observer_counts_output_only_when_no_usage_came() {
        assert!(crate::estimate::warm());
        let text = |t: &str| {
            format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n")
        };
        let usage =
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n";
        let feed = |obs: &mut StreamObserver, with_usage: bool| {
            obs.on_chunk(at(10), text("Hello").as_bytes());
            obs.on_chunk(at(90), text(" world, again").as_bytes());
            if with_usage {
                obs.on_chunk(at(95), usage.as_bytes());
            }
            obs.on_chunk(at(100), b"data: [DONE]\n\n");
            obs.summary().tokens
        };
        let mut estimating = StreamObserver::new(Dialect::Chat, Some(at(0))).estimating_output();
        let t = feed(&mut estimating, false);
        assert_eq!(t.output, None);
        assert_eq!(t.estimated_output, Some(4), "Hello| world|,| again");
        assert_eq!(t.output_for_speed(), Some(4));
        assert!(t.output_estimated());
        // Usage came after all: the provider's count, and no estimate beside it.
        let mut estimating = StreamObserver::new(Dialect::Chat, Some(at(0))).estimating_output();
        let t = feed(&mut estimating, true);
        assert_eq!((t.output, t.estimated_output), (Some(2), None));
        // Without the estimator nothing is counted; another dialect never gets one.
        let t = feed(&mut StreamObserver::new(Dialect::Chat, Some(at(0))), false);
        assert_eq!((t.output, t.estimated_output), (None, None));
        let other = StreamObserver::new(Dialect::Messages, None).estimating_output();
        assert!(other.estimate.is_none());
    }

    #[test]
    fn a_malformed_event_breaks_the_stream_there_and_nothing_from_it_on_is_released() {
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(0)));
        let good = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
        let bad = "data: {\"choices\":[{\"index\":0,\"delta\":{\"cont\n\n";
        let after = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"more\"}}]}\n\n";
        let p = obs.on_chunk(at(1), good.as_bytes());
        assert!(!p.malformed);
        let chunk = format!("{bad}{after}data: [DONE]\n\n");
        let p = obs.on_chunk(at(2), chunk.as_bytes());
        assert!(p.malformed && obs.malformed());
        assert_eq!(p.release_to, 0, "not even the bad event's start");
        assert_eq!(p.comment_at, None);
        // What came after it is not read: no second text, no terminal.
        let s = obs.summary();
        assert_eq!(s.text_delta_count, 1);
        assert_eq!(s.outcome, Some(Outcome::UpstreamError));
        assert_eq!(s.error_class, Some(ErrorClass::InvalidBody));
        assert!(!obs.terminal_seen());
        // A shape the classifier does not know is still an envelope, not malformed.
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(0)));
        let odd = b"data: {\"choices\":\"unexpected\"}\n\n";
        let p = obs.on_chunk(at(1), odd);
        assert!(!p.malformed);
        assert_eq!(p.release_to, odd.len());
    }

    #[test]
    fn a_responses_stream_names_the_response_it_stores_from_its_first_event() {
        let created = |store: bool| {
            format!(
                "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":\"resp_1\",\"object\":\"response\",\"store\":{store}}}}}\n\n"
            )
        };
        let mut obs = StreamObserver::new(Dialect::Responses, Some(at(0)));
        obs.on_chunk(at(1), created(true).as_bytes());
        assert_eq!(obs.response_id(), Some("resp_1"));
        let mut obs = StreamObserver::new(Dialect::Responses, Some(at(0)));
        obs.on_chunk(at(1), created(false).as_bytes());
        assert_eq!(obs.response_id(), None, "store: false keeps nothing");
        // Only Responses streams name one.
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(0)));
        obs.on_chunk(at(1), CHAT[0].as_bytes());
        assert_eq!(obs.response_id(), None);
    }

    const CHAT: [&str; 5] = [
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n",
        "data: [DONE]\n\n",
    ];

    #[test]
    fn marks_follow_the_classes_of_a_chat_stream() {
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(1)));
        let out = relay(
            &mut obs,
            &[
                (10, ": keep-alive\n\n"),
                (20, CHAT[0]),
                (30, CHAT[1]),
                (40, CHAT[2]),
                (50, CHAT[3]),
                (60, CHAT[4]),
            ],
        );
        obs.on_end(at(70), BodyEnd::Eof);
        let s = obs.summary();
        assert_eq!(s.marks.first_byte, Some(at(10)));
        assert_eq!(s.marks.first_event, Some(at(20)));
        assert_eq!(s.marks.first_effective, Some(at(30)));
        assert_eq!(s.marks.first_visible, Some(at(30)));
        assert_eq!(s.marks.upstream_done, Some(at(60)));
        assert_eq!(s.outcome, Some(Outcome::Completed));
        assert_eq!(s.event_count, 5);
        assert_eq!(s.text_delta_count, 1);
        assert_eq!(s.tokens.cache_read, Some(3));
        let expected_comment =
            ": x-laptime-timing upstream_ms=59 ttft_ms=9 cached_tokens=3 hedge=none\n\n";
        let mut expected = String::from(": keep-alive\n\n");
        expected.push_str(&CHAT[..4].concat());
        expected.push_str(expected_comment);
        expected.push_str(CHAT[4]);
        assert_eq!(out, expected);
    }

    #[test]
    fn terminal_frame_split_across_chunks_still_gets_the_comment_before_it() {
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(0)));
        let whole = CHAT.concat();
        let cut = whole.len() - 5;
        let out = relay(&mut obs, &[(1, &whole[..cut]), (2, &whole[cut..])]);
        let comment_pos = out.find(": x-laptime-timing").unwrap();
        assert_eq!(&out[comment_pos..].lines().nth(2), &Some("data: [DONE]"));
        assert_eq!(
            out.replace(&out[comment_pos..out.find("data: [DONE]").unwrap()], ""),
            whole
        );
    }

    #[test]
    fn a_whole_answer_is_judged_by_status_body_and_end() {
        let ok = br#"{"choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
        let w = whole_answer(Dialect::Chat, 200, BodyEnd::Eof, ok);
        assert_eq!((w.outcome, w.error_class), (Outcome::Completed, None));
        assert_eq!(w.tokens.output, Some(1));
        assert!(w.has_text);
        let cut = &ok[..ok.len() - 10];
        let w = whole_answer(Dialect::Chat, 200, BodyEnd::Eof, cut);
        assert_eq!(w.error_class, Some(ErrorClass::InvalidBody));
        let w = whole_answer(
            Dialect::Messages,
            200,
            BodyEnd::Eof,
            b"<html>502 Bad Gateway</html>",
        );
        assert_eq!(
            (w.outcome, w.error_class),
            (Outcome::UpstreamError, Some(ErrorClass::InvalidBody))
        );
        // JSON the dialect's parse cannot read is still JSON: not an invalid body.
        let other_shape = whole_answer(Dialect::Chat, 200, BodyEnd::Eof, b"[1, 2]");
        assert_eq!(
            (other_shape.outcome, other_shape.error_class),
            (Outcome::Completed, None)
        );
        let w = whole_answer(Dialect::Chat, 503, BodyEnd::Eof, b"{}");
        assert_eq!(w.error_class, Some(ErrorClass::UpstreamStatus5xx));
        let w = whole_answer(Dialect::Chat, 200, BodyEnd::Error, ok);
        assert_eq!(w.outcome, Outcome::UpstreamClosedEarly);
        let long =
            br#"{"choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"length"}]}"#;
        assert_eq!(
            whole_answer(Dialect::Chat, 200, BodyEnd::Eof, long).outcome,
            Outcome::Incomplete
        );
    }

    #[test]
    fn close_without_terminal_is_closed_early_not_completed() {
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(0)));
        relay(&mut obs, &[(5, CHAT[0]), (6, CHAT[1])]);
        obs.on_end(at(9), BodyEnd::Eof);
        let s = obs.summary();
        assert_eq!(s.outcome, Some(Outcome::UpstreamClosedEarly));
        assert_eq!(s.error_class, Some(ErrorClass::ClosedEarly));
        assert_eq!(s.marks.upstream_done, Some(at(9)));
    }

    #[test]
    fn a_chat_stream_complete_but_for_done_is_completed_and_flagged() {
        // Finish reason and usage, then a clean close: complete, the sentinel noted missing.
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(0)));
        relay(
            &mut obs,
            &[(1, CHAT[0]), (2, CHAT[1]), (3, CHAT[2]), (4, CHAT[3])],
        );
        obs.on_end(at(5), BodyEnd::Eof);
        let s = obs.summary();
        assert_eq!((s.outcome, s.error_class), (Some(Outcome::Completed), None));
        assert!(s.no_terminal_sentinel);
        assert_eq!(s.marks.upstream_done, Some(at(5)));
        // Without the usage chunk, or cut by a reset, or in another dialect, it is a cut.
        let cut = |chunks: &[(u64, &str)], dialect: Dialect, how: BodyEnd| {
            let mut obs = StreamObserver::new(dialect, Some(at(0)));
            relay(&mut obs, chunks);
            obs.on_end(at(5), how);
            let s = obs.summary();
            (s.outcome, s.no_terminal_sentinel)
        };
        let closed = (Some(Outcome::UpstreamClosedEarly), false);
        let no_usage: &[(u64, &str)] = &[(1, CHAT[1]), (2, CHAT[2])];
        assert_eq!(cut(no_usage, Dialect::Chat, BodyEnd::Eof), closed);
        let all: &[(u64, &str)] = &[(1, CHAT[1]), (2, CHAT[2]), (3, CHAT[3])];
        assert_eq!(cut(all, Dialect::Chat, BodyEnd::Error), closed);
        // Length still makes it incomplete.
        let length =
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n";
        let incomplete: &[(u64, &str)] = &[(1, CHAT[1]), (2, length), (3, CHAT[3])];
        assert_eq!(
            cut(incomplete, Dialect::Chat, BodyEnd::Eof),
            (Some(Outcome::Incomplete), true)
        );
        // With [DONE] there is nothing to note.
        let done: &[(u64, &str)] = &[(1, CHAT[1]), (2, CHAT[2]), (3, CHAT[3]), (4, CHAT[4])];
        assert_eq!(
            cut(done, Dialect::Chat, BodyEnd::Eof),
            (Some(Outcome::Completed), false)
        );
    }

    #[test]
    fn reset_is_closed_early_with_a_body_error() {
        let mut obs = StreamObserver::new(Dialect::Messages, Some(at(0)));
        obs.on_end(at(3), BodyEnd::Error);
        assert_eq!(obs.summary().error_class, Some(ErrorClass::BodyError));
        assert_eq!(obs.summary().marks.first_byte, None);
    }

    #[test]
    fn chat_error_event_then_done_is_an_upstream_error_with_the_comment_before_done() {
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(0)));
        let out = relay(
            &mut obs,
            &[
                (1, CHAT[0]),
                (
                    2,
                    "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n",
                ),
                (3, "data: [DONE]\n\n"),
            ],
        );
        obs.on_end(at(4), BodyEnd::Eof);
        let s = obs.summary();
        assert_eq!(s.outcome, Some(Outcome::UpstreamError));
        assert_eq!(s.marks.upstream_done, Some(at(2)));
        assert!(out.ends_with("hedge=none\n\ndata: [DONE]\n\n"));
    }

    #[test]
    fn finish_reason_length_makes_the_stream_incomplete() {
        let mut obs = StreamObserver::new(Dialect::Chat, Some(at(0)));
        relay(
            &mut obs,
            &[
                (1, CHAT[1]),
                (2, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"),
                (3, CHAT[4]),
            ],
        );
        assert_eq!(obs.summary().outcome, Some(Outcome::Incomplete));
    }

    const GEMINI: [&str; 3] = [
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"hm\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 13,\"thoughtsTokenCount\": 4}}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hi\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"candidatesTokenCount\": 1,\"totalTokenCount\": 14,\"thoughtsTokenCount\": 4}}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" you\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"cachedContentTokenCount\": 5,\"candidatesTokenCount\": 2,\"totalTokenCount\": 15,\"thoughtsTokenCount\": 4}}\r\n\r\n",
    ];

    #[test]
    fn a_gemini_stream_ends_on_its_finish_reason_with_the_comment_after_it() {
        let mut obs = StreamObserver::new(Dialect::Gemini, Some(at(1)));
        let out = relay(
            &mut obs,
            &[(10, GEMINI[0]), (20, GEMINI[1]), (30, GEMINI[2])],
        );
        // The terminal is known before the body ends: the comment is already written.
        let s = obs.summary();
        assert_eq!(s.outcome, Some(Outcome::Completed));
        assert_eq!(s.marks.first_event, Some(at(10)));
        assert_eq!(s.marks.first_effective, Some(at(10)));
        assert_eq!(s.marks.first_visible, Some(at(20)));
        assert_eq!(s.marks.last_effective, Some(at(30)));
        assert_eq!(s.marks.upstream_done, Some(at(30)));
        assert_eq!(
            s.text_delta_count, 2,
            "the last text rides on the terminal event"
        );
        assert_eq!(
            (
                s.tokens.input,
                s.tokens.output,
                s.tokens.reasoning,
                s.tokens.cache_read
            ),
            (Some(9), Some(6), Some(4), Some(5))
        );
        let comment = ": x-laptime-timing upstream_ms=29 ttft_ms=9 cached_tokens=5 hedge=none\n\n";
        assert_eq!(out, format!("{}{comment}", GEMINI.concat()));
        obs.on_end(at(40), BodyEnd::Eof);
        assert_eq!(obs.summary().marks.upstream_done, Some(at(30)));
    }

    #[test]
    fn gemini_ends_that_are_not_a_stop_and_streams_without_a_comment() {
        let end = |last: &str| {
            let mut obs = StreamObserver::new(Dialect::Gemini, Some(at(0)));
            relay(&mut obs, &[(1, GEMINI[1]), (2, last)]);
            obs.on_end(at(3), BodyEnd::Eof);
            (obs.summary().outcome, obs.summary().error_class)
        };
        let finish = |reason: &str| {
            format!("data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \"\"}}]}},\"finishReason\": \"{reason}\",\"index\": 0}}]}}\r\n\r\n")
        };
        assert_eq!(
            end(&finish("MAX_TOKENS")),
            (Some(Outcome::Incomplete), None)
        );
        assert_eq!(end(&finish("SAFETY")), (Some(Outcome::Incomplete), None));
        assert_eq!(
            end(&finish("MALFORMED_FUNCTION_CALL")),
            (Some(Outcome::UpstreamError), Some(ErrorClass::StreamError))
        );
        let error = "data: {\"error\": {\"code\": 503,\"message\": \"The model is overloaded.\",\"status\": \"UNAVAILABLE\"}}\r\n\r\n";
        assert_eq!(
            end(error),
            (Some(Outcome::UpstreamError), Some(ErrorClass::StreamError))
        );
        // Text without a finishReason, then a close: cut, never complete.
        assert_eq!(
            end(GEMINI[1]),
            (
                Some(Outcome::UpstreamClosedEarly),
                Some(ErrorClass::ClosedEarly)
            )
        );
        let mut obs = StreamObserver::new(Dialect::Gemini, Some(at(0))).without_comment();
        let out = relay(&mut obs, &[(1, GEMINI[0]), (2, GEMINI[2])]);
        assert_eq!(out, format!("{}{}", GEMINI[0], GEMINI[2]));
        assert_eq!(obs.summary().outcome, Some(Outcome::Completed));
    }

    #[test]
    fn anthropic_ping_is_not_the_first_event_and_usage_is_normalised() {
        let mut obs = StreamObserver::new(Dialect::Messages, Some(at(0)));
        relay(
            &mut obs,
            &[
                (1, "event: ping\ndata: {\"type\":\"ping\"}\n\n"),
                (2, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}}\n\n"),
                (3, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n"),
                (4, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"),
                (5, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n"),
                (6, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
            ],
        );
        let s = obs.summary();
        assert_eq!(s.marks.first_event, Some(at(2)));
        assert_eq!(s.marks.first_effective, Some(at(4)));
        assert_eq!(s.tokens.input, Some(115));
        assert_eq!(s.tokens.output, Some(7));
        assert_eq!(s.outcome, Some(Outcome::Completed));
    }
}
