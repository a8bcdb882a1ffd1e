//! Observe: the bodies the gateway answers with. [`ObservedBody`] wraps a streamed upstream body:
//! it stamps each frame inside `poll_frame`, where the bytes arrive, feeds the pure
//! [`StreamObserver`], relays the bytes untouched (writing the timing comment before the
//! terminal frame), adds trailers when asked, and records exactly once — at the end, on an
//! upstream error, or when dropped because the client went away. [`BufferedBody`] does the same
//! for an answer the gateway already holds whole.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName};
use http_body::{Body, Frame};
use laptime_core::observe::{BodyEnd, Placement, StreamObserver};
use laptime_core::timeline::{self, ErrorClass, Hedge, Outcome};
use laptime_core::Dialect;
use tokio::time::{Instant, Sleep};

use crate::cache::{CacheKey, CachedAnswer, ResponseCache};
use crate::record::{Ending, Finisher};
use crate::respond::{header_value, in_band_error};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streamed answer, observed as it is relayed.
pub struct ObservedBody<B> {
    /// The upstream body; dropped as soon as it ends (or with this body, which closes the
    /// upstream connection when the client leaves early).
    inner: Option<B>,
    t0: Instant,
    obs: StreamObserver,
    /// Bytes of an event that has not completed yet.
    held: BytesMut,
    /// Frames ready to hand to the client, in order.
    queue: VecDeque<Bytes>,
    upstream_end: Option<BodyEnd>,
    trailers: bool,
    hedge: Hedge,
    status: u16,
    finisher: Option<Finisher>,
    /// Stream deadlines after the head was relayed; a miss ends the stream with an in-band
    /// error event (no failover past the commit point).
    deadlines: Option<StreamDeadlines>,
    timer: Option<Pin<Box<Sleep>>>,
    last_byte: Option<std::time::Duration>,
    timed_out: Option<&'static str>,
    /// The upstream bytes, kept for the response cache when the route has one.
    capture: Option<Capture>,
    /// `false` only to measure what observation costs (`[server] observe = false`): bytes are
    /// relayed without scanning, and the record keeps only the head and end marks.
    observe: bool,
}

struct Capture {
    cache: std::sync::Arc<ResponseCache>,
    key: CacheKey,
    content_type: Option<String>,
    bytes: BytesMut,
}

/// Deadlines of a relayed stream, as offsets from t0 (the pipeline puts `first_event` and
/// `first_output` after the answering attempt's dispatch);
/// `idle` from the last byte (or the head); `progress` from the last effective output (or the
/// head), so heartbeats do not reset it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamDeadlines {
    pub dialect: Dialect,
    pub first_event: std::time::Duration,
    pub first_output: std::time::Duration,
    pub idle: std::time::Duration,
    pub progress: std::time::Duration,
    pub total: std::time::Duration,
}

impl StreamDeadlines {
    /// The earliest deadline still open, as (offset from t0, kind).
    fn next(
        &self,
        s: &laptime_core::observe::StreamSummary,
        last_byte: Option<std::time::Duration>,
    ) -> (std::time::Duration, &'static str) {
        let head = s.marks.upstream_headers.unwrap_or_default();
        let mut next = (self.total, "total");
        let mut consider = |at: std::time::Duration, kind: &'static str| {
            if at < next.0 {
                next = (at, kind);
            }
        };
        if s.marks.first_event.is_none() {
            consider(self.first_event, "first_event");
        }
        if s.marks.first_effective.is_none() {
            consider(self.first_output, "first_output");
        }
        consider(last_byte.unwrap_or(head) + self.idle, "idle");
        consider(
            s.marks.last_effective.unwrap_or(head) + self.progress,
            "progress",
        );
        next
    }
}

impl<B> std::fmt::Debug for ObservedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObservedBody").finish_non_exhaustive()
    }
}

impl<B> ObservedBody<B> {
    pub fn new(
        inner: B,
        obs: StreamObserver,
        finisher: Finisher,
        status: u16,
        trailers: bool,
    ) -> Self {
        ObservedBody {
            inner: Some(inner),
            t0: finisher.pending.t0,
            hedge: finisher.pending.hedge,
            obs,
            held: BytesMut::new(),
            queue: VecDeque::new(),
            upstream_end: None,
            trailers,
            status,
            finisher: Some(finisher),
            deadlines: None,
            timer: None,
            last_byte: None,
            timed_out: None,
            capture: None,
            observe: true,
        }
    }

    /// Relays without scanning or classifying (no deadlines, no cache, no timing comment).
    pub fn unobserved(mut self) -> Self {
        self.observe = false;
        self.deadlines = None;
        self.capture = None;
        self
    }

    /// Keeps the upstream bytes and stores them in `cache` if the answer completes.
    pub fn with_capture(
        mut self,
        cache: std::sync::Arc<ResponseCache>,
        key: CacheKey,
        content_type: Option<String>,
    ) -> Self {
        self.capture = Some(Capture {
            cache,
            key,
            content_type,
            bytes: BytesMut::new(),
        });
        self
    }

    /// Enforces stream deadlines while relaying.
    pub fn with_deadlines(mut self, deadlines: StreamDeadlines) -> Self {
        self.deadlines = Some(deadlines);
        self
    }

    /// Polls the next open deadline; `Some(kind)` when it has passed.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Option<&'static str> {
        let d = self.deadlines?;
        let (at, kind) = d.next(&self.obs.summary(), self.last_byte);
        let when = self.t0 + at;
        match self.timer.as_mut() {
            Some(t) if t.deadline() == when => {}
            Some(t) => t.as_mut().reset(when),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(when))),
        }
        let timer = self.timer.as_mut()?;
        timer.as_mut().poll(cx).is_ready().then_some(kind)
    }

    /// A deadline passed: the client gets an error event in its dialect and the stream ends.
    /// An incomplete event held back is dropped (a client would discard it at the end anyway).
    fn on_deadline(&mut self, kind: &'static str) {
        if self.obs.terminal_seen() {
            // The answer is complete; the upstream merely did not close.
            self.on_upstream_end(BodyEnd::Eof);
            return;
        }
        let dialect = self.deadlines.map(|d| d.dialect).unwrap_or(Dialect::Chat);
        self.held.clear();
        self.push(in_band_error(
            dialect,
            "upstream_timeout",
            &format!("the upstream missed the {kind} deadline"),
        ));
        self.timed_out = Some(kind);
        let at = timeline::offset(Instant::now().saturating_duration_since(self.t0));
        self.obs.on_end(at, BodyEnd::Eof);
        self.upstream_end = Some(BodyEnd::Eof);
        self.inner = None;
    }

    fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.queue.push_back(b);
        }
    }

    fn push_held(&mut self) {
        if !self.held.is_empty() {
            let held = self.held.split().freeze();
            self.queue.push_back(held);
        }
    }

    fn now(&self) -> std::time::Duration {
        timeline::offset(Instant::now().saturating_duration_since(self.t0))
    }

    /// Feeds chunks that were read before the head was relayed (a hedging race reads each
    /// attempt up to its first event), each with the offset at which it arrived.
    pub fn replay(mut self, chunks: Vec<(std::time::Duration, Bytes)>) -> Self {
        for (at, data) in chunks {
            self.on_data_at(at, data);
        }
        self
    }

    fn on_data(&mut self, data: Bytes) {
        let at = self.now();
        self.on_data_at(at, data);
    }

    fn on_data_at(&mut self, at: std::time::Duration, data: Bytes) {
        if !data.is_empty() {
            self.last_byte = Some(at);
        }
        if !self.observe {
            self.push(data);
            return;
        }
        if let Some(c) = &mut self.capture {
            if c.bytes.len() + data.len() > c.cache.max_body_bytes {
                self.capture = None;
            } else {
                c.bytes.extend_from_slice(&data);
            }
        }
        let plan = self.obs.on_chunk(at, &data);
        let released = data.slice(..plan.release_to);
        match plan.comment_at {
            Some(Placement::BeforeHeld) => {
                let comment = Bytes::from(self.obs.inband(self.hedge).comment());
                self.push(comment);
                self.push_held();
                self.push(released);
            }
            Some(Placement::InChunk(i)) => {
                let comment = Bytes::from(self.obs.inband(self.hedge).comment());
                self.push_held();
                self.push(released.slice(..i));
                self.push(comment);
                self.push(released.slice(i..));
            }
            None if plan.release_to > 0 => {
                self.push_held();
                self.push(released);
            }
            None => {}
        }
        if plan.release_to < data.len() {
            self.held.extend_from_slice(&data[plan.release_to..]);
        }
    }

    fn on_upstream_end(&mut self, how: BodyEnd) {
        let at = timeline::offset(Instant::now().saturating_duration_since(self.t0));
        self.obs.on_end(at, how);
        // An unterminated last event is relayed as it came: the bytes are the upstream's.
        self.push_held();
        self.upstream_end = Some(how);
        self.inner = None;
    }

    fn trailer_map(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in self.obs.inband(self.hedge).trailers() {
            map.insert(HeaderName::from_static(name), header_value(&value));
        }
        map
    }

    fn finish(&mut self, cancelled: bool) {
        let Some(finisher) = self.finisher.take() else {
            return;
        };
        let mut summary = self.obs.summary();
        if !self.observe {
            // Nothing was scanned, so the end is all that is known about the stream.
            summary.outcome = match self.upstream_end {
                Some(BodyEnd::Eof) => Some(Outcome::Completed),
                Some(BodyEnd::Error) => Some(Outcome::UpstreamError),
                None => None,
            };
            summary.error_class =
                (self.upstream_end == Some(BodyEnd::Error)).then_some(ErrorClass::BodyError);
        }
        if let Some(kind) = self.timed_out {
            finisher.finish(Ending {
                status: self.status,
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
            c.cache.insert(
                c.key,
                CachedAnswer {
                    status: self.status,
                    content_type: c.content_type,
                    body: c.bytes.freeze(),
                    stream: true,
                },
            );
        }
        finisher.finish(Ending {
            status: self.status,
            outcome,
            error_class,
            timeout_kind: None,
            stream: Some(summary),
        });
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
            if let Some(b) = this.queue.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            if let Some(how) = this.upstream_end {
                if this.trailers {
                    this.trailers = false;
                    let map = this.trailer_map();
                    return Poll::Ready(Some(Ok(Frame::trailers(map))));
                }
                this.finish(false);
                return Poll::Ready(match how {
                    BodyEnd::Eof => None,
                    // The client must see that the stream broke, not a clean end.
                    BodyEnd::Error => Some(Err("upstream stream broke".into())),
                });
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            let polled = match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(v) => v,
                Poll::Pending => {
                    if let Some(kind) = this.poll_deadline(cx) {
                        this.on_deadline(kind);
                        continue;
                    }
                    return Poll::Pending;
                }
            };
            match polled {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        this.on_data(data);
                    }
                }
                Some(Err(e)) => {
                    let e: BoxError = e.into();
                    tracing::debug!(error = %e, "upstream body error");
                    this.on_upstream_end(BodyEnd::Error);
                }
                None => this.on_upstream_end(BodyEnd::Eof),
            }
        }
    }
}

impl<B> Drop for ObservedBody<B> {
    fn drop(&mut self) {
        // Dropped before the end: the client went away. Drop the upstream body first so its
        // connection closes now.
        self.inner = None;
        self.finish(true);
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
