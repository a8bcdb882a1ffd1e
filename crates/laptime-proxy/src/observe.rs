//! Observe: the bodies that stamp marks where the bytes arrive. [`ObservedBody`] wraps one
//! attempt's streamed upstream body from its first byte to the record, with one
//! [`StreamObserver`]: until the client is committed to the attempt it only reads (held: a
//! failover or a hedging race reads ahead to the first event or output without releasing a
//! byte); once committed it relays the bytes untouched (the timing comment before the terminal
//! frame), adds trailers when asked, and records exactly once — at the end, on an upstream
//! error, or when dropped because the client went away. [`StampedBody`] stamps a whole
//! (non-streamed) answer's arrival the same way while it is read; [`BufferedBody`] hands over an
//! answer the gateway already holds whole.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName};
use http_body::{Body, Frame};
use laptime_core::observe::{BodyEnd, ChunkPlan, StreamObserver, StreamSummary};
use laptime_core::relay::{Piece, Relay};
use laptime_core::timeline::{self, DeadlineKind, ErrorClass, InBandCarrier, Marks, Outcome};
use laptime_core::translate::stream::{Splice, StreamTranslator};
use laptime_core::Dialect;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::attempt::AttemptError;
use crate::cache::{CacheKey, CachedAnswer, ResponseCache};
use crate::continuation::{Continued, Resume, Resumed};
use crate::record::{Ending, Finisher};
use crate::respond::{header_value, in_band_error, InBandError};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How far a held attempt is read before the client is committed to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The first non-heartbeat event: what a hedging race is decided on.
    FirstEvent,
    /// The first effective output, or a complete answer without any.
    FirstOutput,
}

/// Deadlines of a stream, as offsets from t0 (`first_event` and `first_output` after the
/// answering attempt's dispatch); `idle` from the last byte (or the head); `progress` from the
/// last effective output (or the head), so heartbeats do not reset it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamDeadlines {
    pub first_event: Duration,
    pub first_output: Duration,
    pub idle: Duration,
    pub progress: Duration,
    pub total: Duration,
}

impl StreamDeadlines {
    /// The earliest deadline still open, as (offset from t0, kind). It never moves earlier as
    /// a stream goes on: marks and the last byte only move later, and a deadline once closed
    /// stays closed.
    fn next(&self, m: &Marks, last_byte: Option<Duration>) -> (Duration, DeadlineKind) {
        let head = m.upstream_headers.unwrap_or_default();
        let mut next = (self.total, DeadlineKind::Total);
        let mut consider = |at: Duration, kind: DeadlineKind| {
            if at < next.0 {
                next = (at, kind);
            }
        };
        if m.first_event.is_none() {
            consider(self.first_event, DeadlineKind::FirstEvent);
        }
        if m.first_effective.is_none() {
            consider(self.first_output, DeadlineKind::FirstOutput);
        }
        consider(last_byte.unwrap_or(head) + self.idle, DeadlineKind::Idle);
        consider(
            m.last_effective.unwrap_or(head) + self.progress,
            DeadlineKind::Progress,
        );
        next
    }
}

/// What a committed body answers: the request it records, and how.
struct Committed {
    finisher: Finisher,
    status: u16,
    trailers: bool,
}

/// One attempt's streamed answer, observed from its first byte.
pub struct ObservedBody<B> {
    /// The upstream body; dropped as soon as it ends (or with this body, which closes the
    /// upstream connection when the client leaves early or the attempt loses).
    inner: Option<B>,
    t0: Instant,
    dialect: Dialect,
    obs: StreamObserver,
    forward: Forward,
    /// What the client gets, in order; nothing leaves it before the commit.
    queue: VecDeque<Piece>,
    upstream_end: Option<BodyEnd>,
    /// A miss ends the stream: before the commit the attempt fails (another candidate may take
    /// over), after it the client gets an in-band error event.
    deadlines: Option<StreamDeadlines>,
    timer: Option<Pin<Box<Sleep>>>,
    /// The waker `timer` was last polled with: it keeps it until it fires.
    timer_waker: Option<Waker>,
    last_byte: Option<Duration>,
    timed_out: Option<(DeadlineKind, Duration)>,
    /// The upstream bytes, kept for the response cache when the route has one.
    capture: Option<Capture>,
    /// `false` only to measure what observation costs (`[server] observe = false`): once
    /// committed, bytes are relayed without scanning, and the record keeps only the head and
    /// end marks.
    observe: bool,
    committed: Option<Committed>,
    /// Bytes read so far, and the most held before the commit: a read-ahead stops at the cap
    /// (the client gets the stream from there), so no stream head can grow without bound.
    read_bytes: usize,
    held_cap: usize,
    /// The upstream cut the stream before its terminal event and the client has not been told.
    cut: Option<BodyEnd>,
    /// Says when the gateway's drain time is over: a committed stream still open then is
    /// ended with an error event and recorded `gateway_shutdown`.
    drain_over: Option<DrainWatch>,
    shut_down: bool,
    /// Continuation after a cut: how to ask another channel, and this attempt's bytes the
    /// client's stream was made of (within the held cap; past it, no continuation).
    resume: Option<Resume>,
    kept: Option<Kept>,
    /// Asking for a continuation, and the in-band error the client gets if none comes.
    resuming: Option<Pin<Box<dyn Future<Output = Resumed> + Send>>>,
    deferred: Option<Deferred>,
    /// The continuation whose stream is the rest of the client's.
    continued: Option<Continued>,
    /// This body is another's continuation: it ends in-band as a committed one does, and the
    /// body it continues records.
    delegated: bool,
    /// Bytes handed to the client so far (the record's `bytes_out`).
    sent: u64,
    /// First-time stream marks shown in the in-flight registry so far: it is told only when
    /// one more happens (a handful per stream), never per event.
    shown_marks: usize,
    /// The last effective output shown in the in-flight registry: it is told again when the
    /// output has moved on by `LIVE_OUTPUT_STEP`, so a live page sees a stream grow.
    shown_last_output: Option<Duration>,
    /// The last effective output shown with a change the journal writes
    /// (`JOURNAL_OUTPUT_STEP`).
    journaled_last_output: Option<Duration>,
}

/// How far the last effective output moves on before the in-flight registry hears of it: at
/// most four updates a second per stream, never one per event.
const LIVE_OUTPUT_STEP: Duration = Duration::from_millis(250);

/// How far it moves on before the in-flight journal writes the entry again for it alone: a
/// request recorded after a crash may show its last output up to this much (plus the
/// journal's interval) early. The journal writes the whole record each time, so a step of a
/// second writes a stream's entry once a second instead of four times.
const JOURNAL_OUTPUT_STEP: Duration = Duration::from_secs(1);

/// What a chunk's marks tell the in-flight registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum News {
    None,
    /// The last output moved on by a live step: the registry hears it, the journal later.
    Live,
    /// A first-time mark, or the last output moved on by a journal step: the journal too.
    Journaled,
}

/// `last` is the last effective output now; `shown` and `journaled` what the registry and the
/// journal were last told.
fn news(
    new_mark: bool,
    last: Option<Duration>,
    shown: Option<Duration>,
    journaled: Option<Duration>,
) -> News {
    let moved_by = |step: Duration, from: Option<Duration>| {
        last.is_some_and(|at| from.is_none_or(|told| at >= told + step))
    };
    if new_mark || moved_by(JOURNAL_OUTPUT_STEP, journaled) {
        News::Journaled
    } else if moved_by(LIVE_OUTPUT_STEP, shown) {
        News::Live
    } else {
        News::None
    }
}

/// The client's bytes kept for a continuation: copied, so that a kept slice never holds a
/// whole read buffer alive.
struct Kept {
    bytes: BytesMut,
}

/// The ending a cut would have had, held while a continuation is asked for.
struct Deferred {
    why: InBandError,
    message: String,
    /// The deadline that fired, for a stall.
    deadline: Option<(DeadlineKind, Duration)>,
}

/// Whether `waker`, which a future was last left pending with, wakes the task polling now.
fn holds(waker: Option<&Waker>, cx: &Context<'_>) -> bool {
    waker.is_some_and(|w| w.will_wake(cx.waker()))
}

/// The gateway's drain signal as one stream waits for it. The wait is polled again only when
/// the signal has moved (an atomic read of the channel's version) or when another task polls
/// the body: each poll of a pending wait takes the channel's shared lock and a unit of the
/// task's budget, which on every read of every stream was 1.0–1.2 % of the serving threads'
/// samples under paced streams (benchmarks/README.md, item 21).
struct DrainWatch {
    /// Only read for whether the signal moved.
    moved: watch::Receiver<bool>,
    wait: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// The waker the pending wait holds.
    waker: Option<Waker>,
}

impl DrainWatch {
    fn new(mut drain: watch::Receiver<bool>) -> Self {
        DrainWatch {
            moved: drain.clone(),
            wait: Box::pin(async move {
                let _ = drain.wait_for(|over| *over).await;
            }),
            waker: None,
        }
    }

    /// Whether the drain time is over (or the signal's sender is gone).
    fn poll_over(&mut self, cx: &mut Context<'_>) -> bool {
        if holds(self.waker.as_ref(), cx) && matches!(self.moved.has_changed(), Ok(false)) {
            return false;
        }
        // Seen before the wait looks, so a value sent after it looked still shows as moved.
        self.moved.mark_unchanged();
        // Out of budget, the wait answers pending without holding the waker.
        let registers = tokio::task::coop::has_budget_remaining();
        if self.wait.as_mut().poll(cx).is_ready() {
            return true;
        }
        self.waker = registers.then(|| cx.waker().clone());
        false
    }
}

/// How observed bytes become the client's.
enum Forward {
    /// The client speaks the upstream's dialect: its bytes, untouched, plus the comment.
    Untouched(Relay),
    /// The client speaks another dialect: each upstream event is written in the client's as
    /// soon as it completes, the comment before the client's terminal frame.
    Translated(Box<StreamTranslator>),
    /// This stream continues another that was cut: its events are written as the rest of the
    /// client's stream.
    Spliced(Box<Splice>),
}

impl Forward {
    fn push(&mut self, plan: ChunkPlan, data: Bytes, out: &mut VecDeque<Piece>) {
        // After a malformed event nothing is read: a translator gets only the events before it
        // (a relay releases only those and holds the rest, which is then dropped).
        let read = if plan.malformed {
            &data[..plan.release_to]
        } else {
            &data[..]
        };
        match self {
            Forward::Untouched(relay) => relay.push(plan, data, out),
            Forward::Translated(t) => t.push(read, out),
            Forward::Spliced(s) => s.push(read, out),
        }
    }

    fn finish(&mut self, how: BodyEnd, out: &mut VecDeque<Piece>) {
        match self {
            Forward::Untouched(relay) => relay.finish(out),
            Forward::Translated(t) => t.finish(how, out),
            Forward::Spliced(s) => s.finish(how, out),
        }
    }

    /// Drops an incomplete event (a translator simply reads no further).
    fn discard_held(&mut self) {
        match self {
            Forward::Untouched(relay) => relay.discard_held(),
            Forward::Translated(_) | Forward::Spliced(_) => {}
        }
    }

    /// The upstream bytes of an event not yet complete.
    fn held(&self) -> &[u8] {
        match self {
            Forward::Untouched(relay) => relay.held(),
            Forward::Translated(_) | Forward::Spliced(_) => &[],
        }
    }

    /// Ends the client's stream with an error event in its dialect.
    fn in_band_error(
        &mut self,
        client: Dialect,
        why: InBandError,
        message: &str,
        out: &mut VecDeque<Piece>,
    ) {
        match self {
            Forward::Untouched(_) => {
                out.push_back(Piece::Bytes(in_band_error(client, why, message)))
            }
            Forward::Translated(t) => t.fail(why.kind(), message, out),
            Forward::Spliced(s) => s.fail(why.kind(), message, out),
        }
    }

    /// Whether it rewrites the upstream's bytes (nothing to cache, everything to read).
    fn rewrites(&self) -> bool {
        !matches!(self, Forward::Untouched(_))
    }
}

/// The default of [`ObservedBody::with_held_cap`] (the config's `server.max_held_bytes`).
pub const DEFAULT_HELD_CAP: usize = 1024 * 1024;

struct Capture {
    cache: std::sync::Arc<ResponseCache>,
    key: CacheKey,
    content_type: Option<String>,
    bytes: BytesMut,
}

impl<B> std::fmt::Debug for ObservedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObservedBody").finish_non_exhaustive()
    }
}

// === impl ObservedBody ===

impl<B> ObservedBody<B> {
    /// An attempt's stream, held: it is read (and stamped) only through [`Self::read_until`]
    /// until [`Self::commit`].
    pub fn held(inner: B, t0: Instant, dialect: Dialect, obs: StreamObserver) -> Self {
        ObservedBody {
            inner: Some(inner),
            t0,
            dialect,
            obs,
            forward: Forward::Untouched(Relay::new()),
            queue: VecDeque::new(),
            upstream_end: None,
            deadlines: None,
            timer: None,
            timer_waker: None,
            last_byte: None,
            timed_out: None,
            capture: None,
            observe: true,
            committed: None,
            read_bytes: 0,
            held_cap: DEFAULT_HELD_CAP,
            cut: None,
            drain_over: None,
            shut_down: false,
            resume: None,
            kept: None,
            resuming: None,
            deferred: None,
            continued: None,
            delegated: false,
            sent: 0,
            shown_marks: 0,
            shown_last_output: None,
            journaled_last_output: None,
        }
    }

    /// Translates the stream for a client of another dialect (`dialect` is the client's).
    pub fn translated(mut self, translator: StreamTranslator) -> Self {
        self.forward = Forward::Translated(Box::new(translator));
        self
    }

    /// This stream continues `splice`'s (another attempt's, cut).
    pub fn spliced(&mut self, splice: Splice) {
        self.forward = Forward::Spliced(Box::new(splice));
    }

    /// The splice back, from a continuation that failed before it was used.
    pub fn take_splice(&mut self) -> Option<Splice> {
        match std::mem::replace(&mut self.forward, Forward::Untouched(Relay::new())) {
            Forward::Spliced(s) => Some(*s),
            other => {
                self.forward = other;
                None
            }
        }
    }

    /// This body is the rest of another's stream: it ends in-band like a committed one.
    pub fn delegated(&mut self) {
        self.delegated = true;
    }

    /// If the upstream cuts or stalls this committed stream after text reached the client,
    /// `resume` asks another channel to continue it. The client's bytes are kept from here
    /// (nothing left the queue before the commit), within the held cap.
    pub fn with_resume(&mut self, resume: Resume) {
        if self.observe {
            self.resume = Some(resume);
            self.kept = Some(Kept {
                bytes: BytesMut::new(),
            });
        }
    }

    /// Ends the stream (once committed) when `drain` says the drain time is over.
    pub fn with_drain_signal(mut self, drain: watch::Receiver<bool>) -> Self {
        self.drain_over = Some(DrainWatch::new(drain));
        self
    }

    /// At most `cap` bytes are held before the commit: a read-ahead that reaches it is done.
    pub fn with_held_cap(mut self, cap: usize) -> Self {
        self.held_cap = cap;
        self
    }

    /// A stream committed to at once (the last candidate, or a test).
    pub fn new(
        inner: B,
        obs: StreamObserver,
        finisher: Finisher,
        status: u16,
        trailers: bool,
    ) -> Self {
        let dialect = finisher.pending.dialect;
        let mut body = Self::held(inner, finisher.pending.t0, dialect, obs);
        body.commit(finisher, status, trailers);
        body
    }

    /// Enforces stream deadlines, held or committed.
    pub fn with_deadlines(mut self, deadlines: StreamDeadlines) -> Self {
        self.deadlines = Some(deadlines);
        self
    }

    /// The client is committed to this attempt: from now on its bytes are released, and it
    /// records the request when it ends.
    pub fn commit(&mut self, finisher: Finisher, status: u16, trailers: bool) {
        if let Some(slot) = &finisher.pending.inflight {
            slot.answered(status);
            slot.stream_marks(self.obs.marks());
            self.shown_marks = crate::inflight::stream_mark_count(self.obs.marks());
            self.shown_last_output = self.obs.marks().last_effective;
            self.journaled_last_output = self.shown_last_output;
        }
        self.committed = Some(Committed {
            finisher,
            status,
            trailers,
        });
        self.tell_cut();
    }

    /// Relays without scanning from now on (no deadlines, no cache, no timing comment).
    pub fn unobserved(&mut self) {
        if self.forward.rewrites() {
            // A translated stream must be read to be written in the client's dialect.
            return;
        }
        // What was read ahead keeps its order: an event held back goes out as it is.
        self.forward.finish(BodyEnd::Eof, &mut self.queue);
        self.observe = false;
        self.deadlines = None;
        self.capture = None;
    }

    /// Keeps the upstream bytes, from the first, and stores them in `cache` if the answer
    /// completes.
    pub fn with_capture(
        &mut self,
        cache: std::sync::Arc<ResponseCache>,
        key: CacheKey,
        content_type: Option<String>,
    ) {
        if self.forward.rewrites() {
            // The cache replays upstream bytes as they came; a translated answer is not one.
            return;
        }
        // Before the commit nothing left the queue: it and the held event are every byte so far.
        let mut bytes = BytesMut::new();
        for p in &self.queue {
            if let Piece::Bytes(b) = p {
                bytes.extend_from_slice(b);
            }
        }
        bytes.extend_from_slice(self.forward.held());
        self.capture = Some(Capture {
            cache,
            key,
            content_type,
            bytes,
        });
    }

    /// What the stream showed so far.
    pub fn summary(&self) -> StreamSummary {
        self.obs.summary()
    }

    fn now(&self) -> Duration {
        timeline::offset(Instant::now().saturating_duration_since(self.t0))
    }

    /// Polls the next open deadline; `Some(kind)` when it has passed.
    ///
    /// The timer is left at a deadline that has since moved on (the idle and progress ones move
    /// with every event) until it fires; only then is the deadline computed again and the
    /// timer moved to it. Since deadlines never move earlier ([`StreamDeadlines::next`]), it
    /// never fires late; and a stream's events touch neither the timer nor the deadlines
    /// (moving the timer for each event was 1.3 % of a gateway's CPU under paced streams).
    /// Polled again by the task it will wake, the timer is only asked whether it fired: a poll
    /// registers the waker anew and takes the task's budget, for nothing (0.4 % of that CPU).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Option<DeadlineKind> {
        let d = self.deadlines?;
        if let Some(t) = self.timer.as_ref() {
            if holds(self.timer_waker.as_ref(), cx) && !t.is_elapsed() {
                return None;
            }
            if self.poll_timer(cx).is_pending() {
                return None;
            }
        }
        let (at, kind) = d.next(self.obs.marks(), self.last_byte);
        let when = self.t0 + at;
        match self.timer.as_mut() {
            Some(t) => t.as_mut().reset(when),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(when))),
        }
        self.poll_timer(cx).is_ready().then_some(kind)
    }

    /// Polls the timer, noting the waker it now holds. A pending poll holds it only if the
    /// task had budget left: out of budget, the timer returns pending without registering it.
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(t) = self.timer.as_mut() else {
            return Poll::Pending;
        };
        let registers = tokio::task::coop::has_budget_remaining();
        let polled = t.as_mut().poll(cx);
        if polled.is_ready() || !registers {
            self.timer_waker = None;
        } else if !holds(self.timer_waker.as_ref(), cx) {
            self.timer_waker = Some(cx.waker().clone());
        }
        polled
    }

    /// Whether the drain time is over for a committed stream.
    fn poll_drain_over(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.relays() {
            return false;
        }
        let over = self.drain_over.as_mut().is_some_and(|d| d.poll_over(cx));
        if over {
            self.drain_over = None;
        }
        over
    }

    /// The drain time is over: the client is told in-band, the upstream call is closed.
    fn on_drain_over(&mut self) {
        let cut = self.end_in_band(
            InBandError::GatewayShutdown,
            "the gateway is shutting down and its drain time ran out before the answer ended",
        );
        self.shut_down = cut.is_some();
    }

    /// A deadline passed: the stream ends with an error event in the dialect's shape.
    fn on_deadline(&mut self, kind: DeadlineKind) {
        let message = format!("the upstream missed the {} deadline", kind.as_str());
        let stall = matches!(kind, DeadlineKind::Idle | DeadlineKind::Progress);
        if stall && self.committed.is_some() && !self.obs.terminal_seen() {
            let at = self.now();
            if self.try_continue(InBandError::Timeout, &message, Some((kind, at))) {
                self.obs.on_end(at, BodyEnd::Eof);
                return;
            }
        }
        if let Some(at) = self.end_in_band(InBandError::Timeout, &message) {
            self.timed_out = Some((kind, at));
        }
    }

    /// Whether the client is being relayed this stream (committed, or as the rest of another).
    fn relays(&self) -> bool {
        self.committed.is_some() || self.delegated
    }

    /// Keeps what the client got, for a continuation (none past the held cap).
    fn keep(&mut self, b: &Bytes) {
        if let Some(k) = &mut self.kept {
            if k.bytes.len() + b.len() > self.held_cap {
                self.kept = None;
            } else {
                k.bytes.extend_from_slice(b);
            }
        }
    }

    /// Asks for a continuation of a committed stream the upstream cut or stalled, when another
    /// channel could continue the text the client has; the cut's in-band error waits for the
    /// outcome. `false` when there is nothing to continue or no one to ask.
    fn try_continue(
        &mut self,
        why: InBandError,
        message: &str,
        deadline: Option<(DeadlineKind, Duration)>,
    ) -> bool {
        if self.committed.is_none() || self.kept.is_none() || self.resume.is_none() {
            return false;
        }
        // The client has the queue's bytes too, once they are sent.
        let queued: Vec<Bytes> = self
            .queue
            .iter()
            .filter_map(|p| match p {
                Piece::Bytes(b) => Some(b.clone()),
                Piece::TimingComment => None,
            })
            .collect();
        let (Some(resume), Some(kept)) = (self.resume.take(), self.kept.take()) else {
            return false;
        };
        let mut sent = vec![kept.bytes.freeze()];
        sent.extend(queued);
        let opts = resume.client_stream();
        let Some(splice) = Splice::after_cut(self.dialect, self.dialect, &opts, &sent) else {
            return false;
        };
        self.forward.discard_held();
        self.inner = None;
        self.upstream_end = None;
        self.deferred = Some(Deferred {
            why,
            message: message.to_owned(),
            deadline,
        });
        self.resuming = Some(resume.start(splice));
        true
    }

    /// The continuation attempts are done: the winner's stream is the rest of the client's, or
    /// the client gets the cut's own in-band error (never a continuation's refusal).
    fn on_resumed(&mut self, resumed: Resumed) {
        if let Some(c) = self.committed.as_mut() {
            let p = &mut c.finisher.pending;
            if let Some(first) = p.attempts.iter_mut().rev().find(|a| a.won) {
                let cut_by = self.obs.summary().error_class;
                first.error_class = Some(match self.deferred.as_ref().and_then(|d| d.deadline) {
                    Some(_) => ErrorClass::Timeout,
                    None => cut_by.unwrap_or(ErrorClass::ClosedEarly),
                });
                first.end = self.obs.summary().marks.upstream_done;
            }
            p.attempts.extend(resumed.attempts);
            p.continued = resumed.continued.is_some();
        }
        let deferred = self.deferred.take();
        if let Some(continued) = resumed.continued {
            self.continued = Some(continued);
            return;
        }
        if let Some(d) = deferred {
            self.forward
                .in_band_error(self.dialect, d.why, &d.message, &mut self.queue);
            self.timed_out = d.deadline;
        }
        self.upstream_end = Some(BodyEnd::Eof);
    }

    /// Ends the stream here with the dialect's error event (an incomplete event held back is
    /// dropped: a client would discard it at the end anyway) and closes the upstream call;
    /// returns when. An answer already complete (its upstream merely did not close) just ends:
    /// `None`.
    fn end_in_band(&mut self, why: InBandError, message: &str) -> Option<Duration> {
        if self.obs.terminal_seen() {
            self.on_upstream_end(BodyEnd::Eof);
            return None;
        }
        self.forward.discard_held();
        self.forward
            .in_band_error(self.dialect, why, message, &mut self.queue);
        let at = self.now();
        self.obs.on_end(at, BodyEnd::Eof);
        self.upstream_end = Some(BodyEnd::Eof);
        self.inner = None;
        Some(at)
    }

    fn on_data(&mut self, data: Bytes) {
        self.read_bytes = self.read_bytes.saturating_add(data.len());
        let at = self.now();
        if !data.is_empty() {
            self.last_byte = Some(at);
        }
        if !self.observe {
            self.queue.push_back(Piece::Bytes(data));
            return;
        }
        if let Some(c) = &mut self.capture {
            if c.bytes.len() + data.len() > c.cache.max_entry_bytes() {
                self.capture = None;
            } else {
                c.bytes.extend_from_slice(&data);
            }
        }
        let plan = self.obs.on_chunk(at, &data);
        self.forward.push(plan, data, &mut self.queue);
        self.show_new_marks();
        if plan.malformed {
            self.on_malformed(at);
        }
    }

    /// An event was not valid JSON: the stream is broken there, as if the upstream had cut it
    /// (a held attempt fails over, a committed one is continued or told in-band), and the
    /// upstream call is closed.
    fn on_malformed(&mut self, at: Duration) {
        self.obs.on_end(at, BodyEnd::Eof);
        self.inner = None;
        self.forward.discard_held();
        self.cut = Some(BodyEnd::Eof);
        self.tell_cut();
        if self.resuming.is_none() {
            self.upstream_end = Some(BodyEnd::Eof);
        }
    }

    /// Tells the in-flight registry about a first-time mark this chunk brought, once committed
    /// (a held attempt may still lose; the commit shows what it reached).
    fn show_new_marks(&mut self) {
        let marks = self.obs.marks();
        let reached = crate::inflight::stream_mark_count(marks);
        let last = marks.last_effective;
        let news = news(
            reached > self.shown_marks,
            last,
            self.shown_last_output,
            self.journaled_last_output,
        );
        // The slot is looked for only when there is news: reaching it on every event read
        // memory the event did not otherwise touch (0.44 % of the serving threads' samples under
        // paced streams).
        if news == News::None {
            return;
        }
        let Some(slot) = self
            .committed
            .as_ref()
            .and_then(|c| c.finisher.pending.inflight.as_ref())
        else {
            return;
        };
        match news {
            News::None => {}
            News::Live => {
                self.shown_last_output = last;
                slot.live_output(marks);
            }
            News::Journaled => {
                self.shown_marks = reached;
                self.shown_last_output = last;
                self.journaled_last_output = last;
                slot.stream_marks(marks);
            }
        }
    }

    fn on_upstream_end(&mut self, how: BodyEnd) {
        let at = self.now();
        self.obs.on_end(at, how);
        self.inner = None;
        if self.observe && self.obs.summary().outcome == Some(Outcome::UpstreamClosedEarly) {
            // Cut before its terminal event: an incomplete event held back is dropped, and a
            // committed client is told in-band (a held one only if it is committed later).
            self.forward.discard_held();
            self.cut = Some(how);
            self.tell_cut();
            if self.resuming.is_none() {
                self.upstream_end = Some(BodyEnd::Eof);
            }
            return;
        }
        self.forward.finish(how, &mut self.queue);
        self.upstream_end = Some(how);
    }

    /// The in-band error for a stream the upstream cut, once a client is committed to it.
    fn tell_cut(&mut self) {
        let Some(how) = self.cut.filter(|_| self.relays()) else {
            return;
        };
        self.cut = None;
        let (why, message) = match how {
            _ if self.obs.malformed() => (
                InBandError::UpstreamMalformed,
                "the upstream sent an event that is not valid JSON; the stream ends there",
            ),
            BodyEnd::Eof => (
                InBandError::UpstreamCut,
                "the upstream closed the stream before it was complete",
            ),
            BodyEnd::Error => (
                InBandError::UpstreamCut,
                "the upstream connection broke before the stream was complete",
            ),
        };
        if self.try_continue(why, message, None) {
            return;
        }
        self.forward
            .in_band_error(self.dialect, why, message, &mut self.queue);
    }

    /// Whether a held read has got as far as `until`, or can no longer get there.
    fn reached(&self, until: Until) -> Option<Result<(), AttemptError>> {
        let s = self.obs.summary();
        let fail = |class: ErrorClass, deadline: Option<DeadlineKind>, at: Duration| {
            Some(Err(AttemptError {
                headers_at: s.marks.upstream_headers,
                first_byte: s.marks.first_byte,
                ..AttemptError::before_head(class, deadline, at)
            }))
        };
        if let Some((kind, at)) = self.timed_out {
            return fail(ErrorClass::Timeout, Some(kind), at);
        }
        if self.obs.terminal_seen() && s.marks.first_effective.is_none() {
            // An error event before any output (an overloaded upstream, say) is a failure
            // another channel can take over; a complete answer without output is an answer.
            if s.outcome == Some(Outcome::UpstreamError) {
                let at = s.marks.upstream_done.unwrap_or_default();
                return fail(ErrorClass::StreamError, None, at);
            }
            return Some(Ok(()));
        }
        let got_there = match until {
            Until::FirstEvent => s.marks.first_event.is_some(),
            Until::FirstOutput => s.marks.first_effective.is_some(),
        } || self.read_bytes >= self.held_cap;
        if got_there {
            return Some(Ok(()));
        }
        let at = s.marks.upstream_done.unwrap_or_default();
        match self.upstream_end? {
            // Ended or broke before the commit point: another channel may still answer.
            _ if self.obs.malformed() => fail(ErrorClass::InvalidBody, None, at),
            BodyEnd::Eof => fail(ErrorClass::ClosedEarly, None, at),
            BodyEnd::Error => fail(ErrorClass::BodyError, None, at),
        }
    }

    fn trailer_map(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in self.obs.inband(self.hedge()).trailers() {
            map.insert(HeaderName::from_static(name), header_value(&value));
        }
        map
    }

    fn hedge(&self) -> laptime_core::timeline::Hedge {
        self.committed
            .as_ref()
            .map(|c| c.finisher.pending.hedge)
            .unwrap_or_default()
    }

    /// Notes on the pending record what the client is handed in-band now, as it is handed over:
    /// the record says what was sent, not what should have been.
    fn note_sent(&mut self, with: fn(InBandCarrier) -> InBandCarrier) {
        if let Some(c) = self.committed.as_mut() {
            let p = &mut c.finisher.pending;
            p.in_band = with(p.in_band);
        }
    }

    fn render(&self, piece: Piece) -> Bytes {
        match piece {
            Piece::Bytes(b) => b,
            Piece::TimingComment => Bytes::from(self.obs.inband(self.hedge()).comment()),
        }
    }

    fn finish(&mut self, cancelled: bool) {
        let Some(Committed {
            mut finisher,
            status,
            ..
        }) = self.committed.take()
        else {
            return;
        };
        finisher.pending.exchange.bytes_out = Some(self.sent);
        if let (Some(id), Forward::Untouched(_)) = (self.obs.response_id(), &self.forward) {
            // A stored response lives on this channel (only an untranslated one is the
            // provider's, under the id the client got).
            finisher
                .pending
                .objects
                .push((laptime_core::endpoint::ObjectKind::Response, id.to_string()));
        }
        let mut summary = self.obs.summary();
        let (mut timed_out, mut shut_down) = (self.timed_out, self.shut_down);
        if let Some(c) = &self.continued {
            // The timeline keeps the first attempt's marks; how the answer ended, and what it
            // counted, are the continuation's.
            let b = c.body.obs.summary();
            summary.outcome = b.outcome;
            summary.error_class = b.error_class;
            summary.tokens = b.tokens;
            summary.marks.upstream_done = b.marks.upstream_done;
            summary.event_count += b.event_count;
            summary.text_delta_count += b.text_delta_count;
            summary.no_terminal_sentinel = b.no_terminal_sentinel;
            timed_out = timed_out.or(c.body.timed_out);
            shut_down |= c.body.shut_down;
        }
        if !self.observe {
            // Nothing was scanned after the commit, so the end is all that is known.
            summary.outcome = match self.upstream_end {
                Some(BodyEnd::Eof) => Some(Outcome::Completed),
                Some(BodyEnd::Error) => Some(Outcome::UpstreamError),
                None => None,
            };
            summary.error_class =
                (self.upstream_end == Some(BodyEnd::Error)).then_some(ErrorClass::BodyError);
        }
        if shut_down {
            finisher.finish(Ending {
                status,
                outcome: Outcome::GatewayShutdown,
                error_class: None,
                timeout_kind: None,
                stream: Some(summary),
            });
            return;
        }
        if let Some((kind, _)) = timed_out {
            finisher.finish(Ending {
                status,
                outcome: Outcome::Timeout,
                error_class: Some(ErrorClass::Timeout),
                timeout_kind: Some(kind),
                stream: Some(summary),
            });
            return;
        }
        let (outcome, error_class) = match summary.outcome {
            // Everything the upstream sent reached the client: its outcome stands.
            Some(o) if !cancelled || self.queue.is_empty() => (o, summary.error_class),
            _ => (Outcome::ClientCancelled, Some(ErrorClass::ClientCancelled)),
        };
        if let (Some(c), Outcome::Completed) = (self.capture.take(), outcome) {
            c.cache.keep(
                c.key,
                CachedAnswer {
                    status,
                    content_type: c.content_type,
                    body: c.bytes.freeze(),
                    stream: true,
                },
            );
        }
        finisher.finish(Ending {
            status,
            outcome,
            error_class,
            timeout_kind: None,
            stream: Some(summary),
        });
    }
}

impl<B> ObservedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// Reads one upstream frame (or a deadline) into the observer and the queue; ready when
    /// something happened or the upstream has ended.
    fn poll_upstream(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(());
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    self.on_data(data);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                let e: BoxError = e.into();
                tracing::debug!(error = %e, "upstream body error");
                self.on_upstream_end(BodyEnd::Error);
            }
            Poll::Ready(None) => self.on_upstream_end(BodyEnd::Eof),
            Poll::Pending if self.poll_drain_over(cx) => self.on_drain_over(),
            Poll::Pending => match self.poll_deadline(cx) {
                Some(kind) => self.on_deadline(kind),
                None => return Poll::Pending,
            },
        }
        Poll::Ready(())
    }

    /// Reads a held stream until `until` without releasing anything. Cancel-safe: every byte
    /// read is kept in the body, so a race may drop this future and poll again later.
    pub fn poll_until(
        &mut self,
        cx: &mut Context<'_>,
        until: Until,
    ) -> Poll<Result<(), AttemptError>> {
        loop {
            if let Some(r) = self.reached(until) {
                return Poll::Ready(r);
            }
            ready!(self.poll_upstream(cx));
        }
    }

    pub async fn read_until(&mut self, until: Until) -> Result<(), AttemptError> {
        std::future::poll_fn(|cx| self.poll_until(cx, until)).await
    }
}

impl<B> Body for ObservedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if let Some(piece) = this.queue.pop_front() {
                match &piece {
                    Piece::Bytes(b) => this.keep(b),
                    Piece::TimingComment => this.note_sent(InBandCarrier::and_comment),
                }
                let bytes = this.render(piece);
                this.sent += bytes.len() as u64;
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if let Some(resuming) = this.resuming.as_mut() {
                let resumed = ready!(resuming.as_mut().poll(cx));
                this.resuming = None;
                this.on_resumed(resumed);
                continue;
            }
            if let Some(c) = this.continued.as_mut() {
                if this.upstream_end.is_none() {
                    ready!(c.body.poll_upstream(cx));
                    this.queue.append(&mut c.body.queue);
                    if c.body.upstream_end.is_some() && c.body.queue.is_empty() {
                        this.upstream_end = c.body.upstream_end;
                    }
                    continue;
                }
            }
            if let Some(how) = this.upstream_end {
                if let Some(c) = this.committed.as_mut().filter(|c| c.trailers) {
                    c.trailers = false;
                    let map = this.trailer_map();
                    this.note_sent(InBandCarrier::and_trailers);
                    return Poll::Ready(Some(Ok(Frame::trailers(map))));
                }
                this.finish(false);
                return Poll::Ready(match how {
                    BodyEnd::Eof => None,
                    // The client must see that the stream broke, not a clean end.
                    BodyEnd::Error => Some(Err("upstream stream broke".into())),
                });
            }
            ready!(this.poll_upstream(cx));
        }
    }
}

impl<B> Drop for ObservedBody<B> {
    fn drop(&mut self) {
        // Dropped before the end: the client went away (or the attempt lost and was never
        // committed, which records nothing here). Drop the upstream body first so its
        // connection closes now.
        self.inner = None;
        self.finish(true);
    }
}

/// A whole (non-streamed) answer being read: frames pass through, and the first byte and the
/// end are stamped here, where they arrive.
pub struct StampedBody<B> {
    inner: B,
    t0: Instant,
    pub first_byte: Option<Duration>,
    pub end: Option<Duration>,
    /// The body broke instead of ending.
    pub broke: bool,
}

impl<B> StampedBody<B> {
    pub fn new(inner: B, t0: Instant) -> Self {
        StampedBody {
            inner,
            t0,
            first_byte: None,
            end: None,
            broke: false,
        }
    }
}

impl<B> Body for StampedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        let at = timeline::offset(Instant::now().saturating_duration_since(this.t0));
        match &polled {
            Some(Ok(frame)) => {
                if frame.data_ref().is_some_and(|d| !d.is_empty()) {
                    this.first_byte.get_or_insert(at);
                }
            }
            Some(Err(_)) => {
                this.broke = true;
                this.end = Some(at);
            }
            None => this.end = Some(at),
        }
        Poll::Ready(polled.map(|r| r.map_err(Into::into)))
    }
}

/// A whole answer read as far as it could be, with its arrival stamped.
pub struct WholeRead {
    pub bytes: Result<Bytes, WholeReadError>,
    pub first_byte: Option<Duration>,
    pub end: Option<Duration>,
    /// The body broke instead of ending (`bytes` is then empty).
    pub broke: bool,
}

/// Why a whole answer was not read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WholeReadError {
    /// Over the gateway's answer limit.
    TooLarge,
    /// Past the request's total deadline.
    Timeout,
}

impl WholeRead {
    /// Nothing read.
    pub fn empty() -> WholeRead {
        WholeRead {
            bytes: Ok(Bytes::new()),
            first_byte: None,
            end: None,
            broke: false,
        }
    }

    /// Reads `body` to its end within `max` bytes and by `deadline`, stamping its first byte
    /// and end (offsets from `t0`) where they arrive.
    pub async fn read<B>(body: B, t0: Instant, deadline: Instant, max: usize) -> WholeRead
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        use http_body_util::BodyExt;
        let mut stamped = StampedBody::new(body, t0);
        let read = http_body_util::Limited::new(&mut stamped, max).collect();
        let bytes = match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                Err(WholeReadError::TooLarge)
            }
            Ok(Err(_)) => Ok(Bytes::new()),
            Err(_) => Err(WholeReadError::Timeout),
        };
        WholeRead {
            bytes,
            first_byte: stamped.first_byte,
            end: stamped.end,
            broke: stamped.broke,
        }
    }
}

/// An answer the gateway holds whole (non-streamed upstream answers and the gateway's own
/// errors). Recorded when the last byte is handed over, or as cancelled if dropped before.
pub struct BufferedBody {
    data: Option<Bytes>,
    finisher: Option<(Finisher, Ending)>,
}

impl std::fmt::Debug for BufferedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferedBody").finish_non_exhaustive()
    }
}

impl BufferedBody {
    pub fn new(data: Bytes, finisher: Finisher, ending: Ending) -> Self {
        BufferedBody {
            data: Some(data),
            finisher: Some((finisher, ending)),
        }
    }
}

impl Body for BufferedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(d) = this.data.take() {
            if !d.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(d))));
            }
        }
        if let Some((f, ending)) = this.finisher.take() {
            f.finish(ending);
        }
        Poll::Ready(None)
    }
}

impl Drop for BufferedBody {
    fn drop(&mut self) {
        if let Some((f, mut ending)) = self.finisher.take() {
            if self.data.is_some() {
                ending.outcome = Outcome::ClientCancelled;
                ending.error_class = Some(ErrorClass::ClientCancelled);
            }
            f.finish(ending);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Option<Duration> {
        Some(Duration::from_millis(v))
    }

    /// An upstream that never sends anything.
    struct Silent;

    impl Body for Silent {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Pending
        }
    }

    /// Spends the task's coop budget, so that the next budgeted poll returns pending.
    async fn spend_budget() {
        for _ in 0..10_000 {
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
            tokio::task::coop::consume_budget().await;
        }
        assert!(!tokio::task::coop::has_budget_remaining());
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_first_polled_without_budget_still_fires() {
        let s = Duration::from_secs;
        let obs = StreamObserver::new(Dialect::Chat, Some(Duration::ZERO));
        let mut body = ObservedBody::held(Silent, Instant::now(), Dialect::Chat, obs)
            .with_deadlines(StreamDeadlines {
                first_event: s(30),
                first_output: s(5),
                idle: s(30),
                progress: s(30),
                total: s(60),
            });
        // With the budget spent, the timer's first poll returns pending without registering
        // the task, which must not be taken for a timer that will wake it.
        spend_budget().await;
        let first = std::future::poll_fn(|cx| {
            Poll::Ready(body.poll_until(cx, Until::FirstOutput).is_pending())
        })
        .await;
        assert!(first);
        let missed = tokio::time::timeout(s(600), body.read_until(Until::FirstOutput)).await;
        let Ok(Err(e)) = missed else {
            panic!("the first-output deadline did not end the read: {missed:?}");
        };
        assert_eq!(e.class, ErrorClass::Timeout);
        assert_eq!(e.deadline, Some(DeadlineKind::FirstOutput));
    }

    /// A waker that counts its wakes.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counting {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn counting() -> (std::sync::Arc<Counting>, Waker) {
        let c = std::sync::Arc::new(Counting(Default::default()));
        let w = Waker::from(c.clone());
        (c, w)
    }

    fn wakes(c: &Counting) -> usize {
        c.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test]
    async fn a_stream_left_waiting_for_the_drain_is_woken_and_told_when_it_ends() {
        let (tx, rx) = watch::channel(false);
        let mut w = DrainWatch::new(rx);
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(!w.poll_over(&mut cx));
        // Polled again by the same task, nothing moved: still waiting, and still registered.
        assert!(!w.poll_over(&mut cx));
        assert_eq!(wakes(&count), 0);
        tx.send_replace(true);
        assert!(wakes(&count) >= 1);
        assert!(w.poll_over(&mut cx));
    }

    #[tokio::test]
    async fn a_drain_signal_that_moves_without_ending_the_drain_leaves_the_stream_waiting() {
        let (tx, rx) = watch::channel(false);
        let mut w = DrainWatch::new(rx);
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(!w.poll_over(&mut cx));
        tx.send_replace(false);
        assert!(!w.poll_over(&mut cx));
        assert!(!w.poll_over(&mut cx));
        let before = wakes(&count);
        tx.send_replace(true);
        assert!(wakes(&count) > before);
        assert!(w.poll_over(&mut cx));
    }

    #[tokio::test]
    async fn a_drain_wait_first_polled_without_budget_registers_at_its_next_poll() {
        let (tx, rx) = watch::channel(false);
        let mut w = DrainWatch::new(rx);
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        spend_budget().await;
        assert!(!w.poll_over(&mut cx));
        tokio::task::yield_now().await;
        let before = wakes(&count);
        assert!(!w.poll_over(&mut cx));
        tx.send_replace(true);
        assert!(wakes(&count) > before, "the task was not registered");
        assert!(w.poll_over(&mut cx));
    }

    #[tokio::test]
    async fn a_drain_wait_polled_by_another_task_wakes_that_task() {
        let (tx, rx) = watch::channel(false);
        let mut w = DrainWatch::new(rx);
        let (_, first) = counting();
        assert!(!w.poll_over(&mut Context::from_waker(&first)));
        let (count, second) = counting();
        let mut cx = Context::from_waker(&second);
        assert!(!w.poll_over(&mut cx));
        tx.send_replace(true);
        assert!(wakes(&count) >= 1, "the second task was not registered");
        assert!(w.poll_over(&mut cx));
    }

    #[test]
    fn the_registry_hears_each_live_step_and_the_journal_each_second_or_new_mark() {
        // A stream's output moving on every 50 ms for 2.5 s, its first text at 100 ms.
        let (mut shown, mut journaled) = (None, None);
        let mut told = Vec::new();
        for at in (100..=2500).step_by(50) {
            let n = news(at == 100, ms(at), shown, journaled);
            match n {
                News::None => {}
                News::Live => shown = ms(at),
                News::Journaled => (shown, journaled) = (ms(at), ms(at)),
            }
            if n != News::None {
                told.push((at, n));
            }
        }
        let at = |kind| {
            told.iter()
                .filter(|(_, n)| *n == kind)
                .map(|(at, _)| *at)
                .collect::<Vec<_>>()
        };
        assert_eq!(at(News::Journaled), [100, 1100, 2100]);
        assert_eq!(at(News::Live), [350, 600, 850, 1350, 1600, 1850, 2350]);
        // A first-time mark is journaled whatever the output did.
        assert_eq!(news(true, ms(120), ms(100), ms(100)), News::Journaled);
        assert_eq!(news(false, None, None, None), News::None);
    }
}
