//! Hedging: after a delay (fixed, or the first channel's recent p95 time to first event), the
//! same request goes to a second channel. The first attempt to deliver a non-heartbeat SSE event
//! (or a non-streamed 2xx head) wins and is relayed; the other is dropped at once (its
//! connection closed, not pooled) and recorded with the marks it reached. Each racer reads its
//! stream up to its first event before anything is sent to the client; the winner's chunks are
//! replayed, with their arrival offsets, into the observed body.
//!
//! [`read_ahead`] is the one place an attempt's stream is read before the client is committed to
//! it: to decide a race (first event) and, when another candidate could still take over, to the
//! first effective output, so the first-event and first-output deadlines can fail over.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use laptime_core::observe::StreamObserver;
use laptime_core::timeline::{self, Attempt, ErrorClass, Marks, Outcome};
use laptime_core::Dialect;
use tokio::time::Instant;

use crate::attempt;
use crate::routing::{Channel, InflightGuard, Route};
use crate::App;

/// An attempt that reached its first event (or its head, for a non-stream answer).
pub struct Primed {
    pub response: http::Response<Incoming>,
    pub chunks: Vec<(Duration, Bytes)>,
    pub guard: InflightGuard,
    pub inflight: u32,
    pub channel: Arc<Channel>,
}

/// A racer's attempt record; shared so a dropped loser is still recorded with its marks.
pub type Progress = Arc<Mutex<Attempt>>;

pub fn progress(channel: &Channel, role: &str, start: Duration) -> Progress {
    Arc::new(Mutex::new(Attempt {
        channel: channel.name.clone(),
        role: role.into(),
        won: false,
        status: None,
        error_class: None,
        start: Some(start),
        headers: None,
        first_byte: None,
        end: None,
    }))
}

pub fn snapshot(p: &Progress) -> Option<Attempt> {
    p.lock().ok().map(|a| a.clone())
}

/// A failure: its class and, for a deadline, which one.
pub type Failure = (ErrorClass, Option<&'static str>);

/// How far an attempt is read before the client is committed to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The first non-heartbeat event: what a hedging race is decided on.
    FirstEvent,
    /// The first effective output, or a complete answer without any.
    FirstOutput,
}

/// Stream deadlines before the commit point, as offsets from the attempt's dispatch.
#[derive(Debug, Clone, Copy)]
pub struct EarlyDeadlines {
    pub first_event: Duration,
    pub first_output: Duration,
}

/// Where a read-ahead stopped short: class, deadline kind, and when (offset from t0).
pub type Miss = (ErrorClass, Option<&'static str>, Duration);

/// Reads `body` until `until`, appending each chunk with its arrival offset from `t0` to
/// `chunks` (which may already hold earlier chunks of the same body). `start` is the attempt's
/// dispatch. Returns the stream marks reached.
pub async fn read_ahead(
    body: &mut Incoming,
    dialect: Dialect,
    t0: Instant,
    start: Duration,
    chunks: &mut Vec<(Duration, Bytes)>,
    until: Until,
    deadlines: EarlyDeadlines,
) -> Result<Marks, Miss> {
    let now = || timeline::offset(Instant::now().saturating_duration_since(t0));
    let mut obs = StreamObserver::new(dialect, Some(start));
    for (at, d) in chunks.iter() {
        obs.on_chunk(*at, d);
    }
    loop {
        let s = obs.summary();
        if obs.terminal_seen() && s.marks.first_effective.is_none() {
            // An error event before any output (an overloaded upstream, say) is a failure
            // another channel can take over; a complete answer without output is an answer.
            if s.outcome == Some(Outcome::UpstreamError) {
                return Err((ErrorClass::StreamError, None, now()));
            }
            return Ok(s.marks);
        }
        let (deadline, kind) = match until {
            Until::FirstEvent if s.marks.first_event.is_some() => return Ok(s.marks),
            Until::FirstOutput if s.marks.first_effective.is_some() => return Ok(s.marks),
            Until::FirstOutput
                if s.marks.first_event.is_some()
                    || deadlines.first_output < deadlines.first_event =>
            {
                (deadlines.first_output, "first_output")
            }
            _ => (deadlines.first_event, "first_event"),
        };
        let Ok(frame) = tokio::time::timeout_at(t0 + start + deadline, body.frame()).await else {
            return Err((ErrorClass::Timeout, Some(kind), now()));
        };
        let at = now();
        match frame {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    obs.on_chunk(at, &d);
                    chunks.push((at, d));
                }
            }
            // Ended or broke before the commit point: another channel may still answer.
            Some(Err(_)) => return Err((ErrorClass::BodyError, None, at)),
            None => return Err((ErrorClass::ClosedEarly, None, at)),
        }
    }
}

/// Reads a streamed 2xx answer to its first effective output before its head is relayed, and
/// gives it back whole; on a miss the answer is dropped (its connection closed).
pub async fn hold_to_first_output(
    response: http::Response<Incoming>,
    dialect: Dialect,
    t0: Instant,
    start: Duration,
    chunks: &mut Vec<(Duration, Bytes)>,
    deadlines: EarlyDeadlines,
) -> Result<http::Response<Incoming>, Miss> {
    let (parts, mut body) = response.into_parts();
    let until = Until::FirstOutput;
    read_ahead(&mut body, dialect, t0, start, chunks, until, deadlines).await?;
    Ok(http::Response::from_parts(parts, body))
}

/// What every racer shares.
pub struct Race<'a> {
    pub app: &'a App,
    pub dialect: Dialect,
    pub headers: &'a HeaderMap,
    pub traceparent: &'a str,
    pub t0: Instant,
    pub headers_deadline: Duration,
    pub early: EarlyDeadlines,
    /// The route's connect timeout, if it has its own.
    pub connect_ms: Option<u64>,
}

pub fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

impl Race<'_> {
    fn now(&self) -> Duration {
        timeline::offset(Instant::now().saturating_duration_since(self.t0))
    }

    /// Dispatches `route` with `body` and reads until its first non-heartbeat event.
    pub async fn run(
        &self,
        route: &Route,
        body: Bytes,
        progress: Progress,
    ) -> Result<Primed, Failure> {
        let set = |f: &dyn Fn(&mut Attempt)| {
            if let Ok(mut a) = progress.lock() {
                f(&mut a);
            }
        };
        let fail = |class: ErrorClass, kind: Option<&'static str>, at: Duration| {
            set(&|a| {
                a.error_class = Some(class);
                a.end = Some(at);
            });
            Err((class, kind))
        };
        let channel = route.channel.clone();
        let request =
            attempt::build_request(&channel, self.dialect, body, self.headers, self.traceparent)
                .map_err(|e| (e.class, None))?;
        let (guard, inflight) = channel.enter();
        let sent = tokio::time::timeout(
            self.headers_deadline,
            self.app.client_for(self.connect_ms).request(request),
        )
        .await;
        let t2 = self.now();
        let response = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                channel.circuit_record(true);
                return fail(attempt::classify_error(&e), None, t2);
            }
            Err(_) => {
                channel.circuit_record(true);
                return fail(ErrorClass::Timeout, Some("headers"), t2);
            }
        };
        let status = response.status().as_u16();
        channel.circuit_record(status == 429 || status >= 500);
        set(&|a| {
            a.status = Some(status);
            a.headers = Some(t2);
        });
        if !response.status().is_success() {
            let class = ErrorClass::from_status(status).unwrap_or(ErrorClass::UpstreamStatus5xx);
            return fail(class, None, t2);
        }
        if !is_sse(response.headers()) {
            return Ok(Primed {
                response,
                chunks: Vec::new(),
                guard,
                inflight,
                channel,
            });
        }
        let (parts, mut body) = response.into_parts();
        let start = snapshot(&progress)
            .and_then(|a| a.start)
            .unwrap_or_default();
        let mut chunks = Vec::new();
        let read = read_ahead(
            &mut body,
            self.dialect,
            self.t0,
            start,
            &mut chunks,
            Until::FirstEvent,
            self.early,
        )
        .await;
        if let Some((at, _)) = chunks.first() {
            set(&|a| a.first_byte = Some(*at));
        }
        match read {
            Ok(marks) => {
                if let Some(first) = marks.first_event {
                    channel.note_first_event(first.saturating_sub(start));
                }
            }
            // Ended, broke or missed its deadline before its first event: it cannot win.
            Err((class, kind, at)) => return fail(class, kind, at),
        }
        Ok(Primed {
            response: http::Response::from_parts(parts, body),
            chunks,
            guard,
            inflight,
            channel,
        })
    }
}
