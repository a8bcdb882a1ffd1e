//! The HTTP face of the fake provider: accepts connections (HTTP/1.1 and h2c), hands each
//! request to `crate::handle`, and plays a [`Schedule`] against the clock, one body frame per
//! step. [`Sim`] is the state every connection shares: counters, the request log and the
//! objects clients made (`crate::objects`).
//!
//! Time is measured from the instant hyper hands over the request head, and every frame waits
//! for `start + at` (absolute deadlines, so a slow write never pushes the later frames back),
//! to within ~0.1 ms ([`crate::clock`]). Besides the provider endpoints (the four scripted
//! dialects, and those of `crate::endpoints`: embeddings, moderations, images, audio, legacy
//! completions, files, batches, stored responses, model lookup, Anthropic's and Gemini's token
//! counts, Gemini's embeddings, and Azure's URL shapes of them, see `crate::azure`) it serves
//! `GET /v1/models` and three observability endpoints: `GET /sim/stats` and `GET /sim/requests`
//! for tests, and `GET /sim/timing` (how late the sim's own timed sends were) for benchmarks.
//!
//! A scripted reset must be a real TCP RST, not a FIN: each accepted socket is duplicated
//! (`into_std` → `try_clone`) before hyper takes it, and on reset the duplicate sets
//! `SO_LINGER 0`, so when the connection is dropped the kernel aborts it.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::StreamBody;
use hyper_util::rt::{TokioExecutor, TokioIo};
use laptime_core::Dialect;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::clock::{sleep_to, Lateness};
use crate::json::{obj, J};
use crate::objects::Objects;
use crate::reply::{self, full, Body};
use crate::script::{Finish, Schedule, Step, JSON, SSE};
use crate::wire::ApiError;

/// The longest a stalled stream holds its connection when the client never leaves.
const STALL_LIMIT: Duration = Duration::from_secs(600);
/// How many requests `/sim/requests` remembers.
const LOG_LEN: usize = 100;

// === Sim ===

/// The simulator's shared state: counters and the recent-request log. Cheap to clone; every
/// clone sees the same numbers.
#[derive(Clone, Default)]
pub struct Sim {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    requests: AtomicU64,
    http2_requests: AtomicU64,
    streams_completed: AtomicU64,
    streams_dropped: AtomicU64,
    answers_playing: AtomicU64,
    peak_answers_playing: AtomicU64,
    open_connections: AtomicU64,
    next_id: AtomicU64,
    log: Mutex<VecDeque<SimRequest>>,
    lateness: Lateness,
    objects: Objects,
    /// The streams an HTTP/2 client may have open at once on one connection; `None`:
    /// [`H2_MAX_STREAMS`].
    h2_max_streams: Option<u32>,
}

/// The counters `GET /sim/stats` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// Requests to the provider endpoints (everything but `/sim/*`).
    pub requests: u64,
    /// Of those, the ones that came over HTTP/2 (TLS with ALPN, or h2c).
    #[serde(default)]
    pub http2_requests: u64,
    /// Scripted answers (streamed or not) whose schedule played to its end, including a
    /// scripted close or reset.
    pub streams_completed: u64,
    /// Scripted answers dropped before their schedule finished: the client (or gateway) went
    /// away, or a stall was ended by the client.
    pub streams_dropped: u64,
    /// The most scripted answers ever playing at once (from their start to their end or
    /// drop): answers a client sent at once that all play at once waited for none other.
    #[serde(default)]
    pub peak_answers_playing: u64,
    /// Accepted TCP connections not yet closed.
    pub open_connections: u64,
    /// Files held (uploaded, or made by batches).
    #[serde(default)]
    pub files_held: u64,
    /// Bytes of file content held, uploads in flight included.
    #[serde(default)]
    pub file_bytes_held: u64,
    /// Batches held.
    #[serde(default)]
    pub batches_held: u64,
    /// Stored responses held.
    #[serde(default)]
    pub responses_held: u64,
    /// Bytes of the stored responses' JSON held.
    #[serde(default)]
    pub response_bytes_held: u64,
}

/// One entry of `GET /sim/requests`: what the fake received, for tests to check what a gateway
/// forwarded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimRequest {
    pub request_id: String,
    pub path: String,
    pub model: Option<String>,
    pub authorization: Option<String>,
    pub x_api_key: Option<String>,
    pub x_goog_api_key: Option<String>,
    pub anthropic_version: Option<String>,
    pub traceparent: Option<String>,
    pub body_sha256: String,
    /// The request method (`POST`, `GET`, `DELETE`).
    #[serde(default)]
    pub method: String,
    /// The request target as received: path and query (`path` is the path alone).
    #[serde(default)]
    pub path_and_query: String,
    /// Azure's `api-key` header.
    #[serde(default)]
    pub api_key: Option<String>,
    #[serde(default)]
    pub content_type: Option<String>,
    /// Bytes of body the sim read (all of it, unless it answered an upload early).
    #[serde(default)]
    pub body_bytes: u64,
}

impl Sim {
    pub fn new() -> Self {
        Sim::default()
    }

    /// A sim whose HTTP/2 connections take at most `n` streams at once (a provider's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`); streams over it are refused (`REFUSED_STREAM`).
    pub fn with_h2_max_streams(n: u32) -> Self {
        Sim {
            shared: Arc::new(Shared {
                h2_max_streams: Some(n),
                ..Shared::default()
            }),
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SimStats {
        let s = &self.shared;
        let (files, file_bytes) = s.objects.files.held();
        let (responses, response_bytes) = s.objects.responses().held();
        let n = |v: usize| v as u64;
        SimStats {
            requests: s.requests.load(Ordering::Relaxed),
            http2_requests: s.http2_requests.load(Ordering::Relaxed),
            streams_completed: s.streams_completed.load(Ordering::Relaxed),
            streams_dropped: s.streams_dropped.load(Ordering::Relaxed),
            peak_answers_playing: s.peak_answers_playing.load(Ordering::Relaxed),
            open_connections: s.open_connections.load(Ordering::Relaxed),
            files_held: n(files),
            file_bytes_held: n(file_bytes),
            batches_held: n(s.objects.batches().held()),
            responses_held: n(responses),
            response_bytes_held: n(response_bytes),
        }
    }

    /// The last requests received (at most 100), oldest first.
    pub fn requests(&self) -> Vec<SimRequest> {
        self.log().iter().cloned().collect()
    }

    fn log(&self) -> std::sync::MutexGuard<'_, VecDeque<SimRequest>> {
        // A panic while holding the lock cannot leave the log half-written; keep using it.
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn record(&self, request: SimRequest) {
        let mut log = self.log();
        if log.len() == LOG_LEN {
            log.pop_front();
        }
        log.push_back(request);
    }

    pub(crate) fn next_request_id(&self) -> String {
        let n = self.shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        format!("simreq_{n:016x}")
    }

    /// Counts a request to a provider endpoint that came over `version`.
    pub(crate) fn count_request(&self, version: http::Version) {
        self.shared.requests.fetch_add(1, Ordering::Relaxed);
        if version == http::Version::HTTP_2 {
            self.shared.http2_requests.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn objects(&self) -> &Objects {
        &self.shared.objects
    }

    /// `GET /sim/timing`.
    pub(crate) fn timing_json(&self) -> String {
        self.shared.lateness.json()
    }
}

/// Counts one scripted answer exactly once: completed when [`PlayGuard::finish`] is called,
/// dropped if the guard is dropped first (hyper drops the body, or the response future, when
/// the client goes away); playing from its start until either.
struct PlayGuard {
    sim: Sim,
    finished: bool,
}

impl PlayGuard {
    fn new(sim: Sim) -> Self {
        let s = &sim.shared;
        let playing = s.answers_playing.fetch_add(1, Ordering::Relaxed) + 1;
        s.peak_answers_playing.fetch_max(playing, Ordering::Relaxed);
        PlayGuard {
            sim,
            finished: false,
        }
    }

    /// Counts the answer as `ended` (completed or dropped), once.
    fn end(&mut self, ended: fn(&Shared) -> &AtomicU64) {
        if !self.finished {
            self.finished = true;
            let s = &self.sim.shared;
            ended(s).fetch_add(1, Ordering::Relaxed);
            s.answers_playing.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn finish(&mut self) {
        self.end(|s| &s.streams_completed);
    }
}

impl Drop for PlayGuard {
    fn drop(&mut self) {
        self.end(|s| &s.streams_dropped);
    }
}

/// Counts an accepted connection as open until dropped.
struct OpenGuard(Sim);

impl OpenGuard {
    fn new(sim: Sim) -> Self {
        sim.shared.open_connections.fetch_add(1, Ordering::Relaxed);
        OpenGuard(sim)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0
            .shared
            .open_connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

// === Serving ===

/// Serves connections from `listener` until `shutdown` resolves, then stops accepting, asks
/// every connection to finish gracefully (a stalled stream is ended) and waits for them.
/// Dropping the returned future aborts every connection at once.
pub async fn serve(
    listener: TcpListener,
    sim: Sim,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    // Connections live in this set so that dropping `serve` aborts them all.
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    debug!(%peer, "accepted");
                    let open = OpenGuard::new(sim.clone());
                    connections.spawn(connection(stream, sim.clone(), stop_rx.clone(), open));
                }
                Err(e) => {
                    // Usually EMFILE; back off instead of spinning on the error.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    stop_tx.send_replace(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Binds `127.0.0.1:0`, spawns [`serve`] on the current runtime, and returns the bound address
/// and the task. `handle.abort()` stops the server and all its connections; a dropped handle
/// detaches it, so it then lives as long as the runtime (for `#[tokio::test]`, the test).
pub async fn spawn_local(sim: Sim) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(e) = serve(listener, sim, std::future::pending()).await {
            warn!(error = %e, "laptime-sim server stopped");
        }
    });
    Ok((addr, handle))
}

/// Per-connection control shared with the bodies: the socket duplicate a reset needs.
pub(crate) struct ConnCtl {
    dup: Mutex<Option<std::net::TcpStream>>,
    kill: Notify,
}

impl ConnCtl {
    /// Aborts the connection with a TCP RST: `SO_LINGER 0` on the shared socket, close the
    /// duplicate, and tell the connection task to drop hyper's side, whose close then resets.
    fn reset(&self) {
        if let Some(dup) = self.take_dup() {
            match TcpStream::from_std(dup).and_then(|s| s.set_zero_linger()) {
                Ok(()) => {}
                Err(e) => warn!(error = %e, "could not arm the reset; the close will be a FIN"),
            }
        }
        self.kill.notify_one();
    }

    fn take_dup(&self) -> Option<std::net::TcpStream> {
        self.dup
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// Splits an accepted socket into the stream hyper will own and a duplicate of the same socket
/// kept for [`ConnCtl::reset`]. No unsafe: std's `try_clone` is a `dup`.
fn with_duplicate(stream: TcpStream) -> io::Result<(TcpStream, std::net::TcpStream)> {
    let std = stream.into_std()?;
    let dup = std.try_clone()?;
    Ok((TcpStream::from_std(std)?, dup))
}

/// The streams an HTTP/2 client may have open at once on one connection. Providers set their
/// own; the sim allows many, so that a benchmark's burst over a few connections measures the
/// client, not a queue of the fake's making.
const H2_MAX_STREAMS: u32 = 4096;

async fn connection(stream: TcpStream, sim: Sim, stop: watch::Receiver<bool>, _open: OpenGuard) {
    // SSE frames are small; without NODELAY a frame can wait ~40 ms for a delayed ACK.
    if let Err(e) = stream.set_nodelay(true) {
        debug!(error = %e, "set_nodelay failed");
    }
    let (stream, dup) = match with_duplicate(stream) {
        Ok(pair) => pair,
        Err(e) => {
            warn!(error = %e, "could not duplicate the accepted socket; dropping it");
            return;
        }
    };
    let ctl = Arc::new(ConnCtl {
        dup: Mutex::new(Some(dup)),
        kill: Notify::new(),
    });

    let service = {
        let (sim, ctl, stop) = (sim.clone(), ctl.clone(), stop.clone());
        hyper::service::service_fn(move |req| {
            crate::handle::handle(sim.clone(), ctl.clone(), stop.clone(), req)
        })
    };
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let streams = sim.shared.h2_max_streams.unwrap_or(H2_MAX_STREAMS);
    builder.http2().max_concurrent_streams(streams);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut stop = stop;
    let mut draining = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            // A scripted reset: dropping the connection closes the last descriptor.
            () = ctl.kill.notified() => break,
            _ = stop.wait_for(|stopping| *stopping), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
    // The duplicate would keep the socket open after hyper's side is gone; close it too.
    drop(ctl.take_dup());
}

// === Playing ===

/// Waits for the head's instant and answers; the body plays the rest of the schedule.
pub(crate) async fn answer(
    sim: &Sim,
    ctl: &Arc<ConnCtl>,
    stop: watch::Receiver<bool>,
    start: Instant,
    schedule: Schedule,
) -> Response<Body> {
    let Schedule {
        status,
        content_type,
        head_at,
        steps,
        finish,
        retry_after_s,
    } = schedule;
    // Created before the wait: a client that leaves before the head is a dropped answer too.
    let mut guard = PlayGuard::new(sim.clone());
    sleep_to(start + head_at).await;
    sim.shared.lateness.head(start + head_at, head_at);

    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = Response::builder()
        .status(status)
        .header(CONTENT_TYPE, content_type);
    if content_type == SSE {
        builder = builder.header(CACHE_CONTROL, "no-cache");
    }
    if let Some(seconds) = retry_after_s {
        builder = builder.header(RETRY_AFTER, seconds);
    }
    // A JSON answer that is whole at the head goes out with a Content-Length, like a real one.
    let whole =
        content_type == JSON && finish == Finish::Eof && steps.iter().all(|s| s.at <= head_at);
    let body = if whole {
        guard.finish();
        let bytes: Vec<u8> = steps.iter().flat_map(|s| s.bytes.iter().copied()).collect();
        full(Bytes::from(bytes))
    } else {
        let playback = Playback {
            sim: sim.clone(),
            start,
            steps: steps.into_iter(),
            finish: Some(finish),
            guard,
            ctl: ctl.clone(),
            stop,
        };
        UnsyncBoxBody::new(StreamBody::new(playback.frames()))
    };
    builder.body(body).unwrap_or_else(|e| {
        warn!(error = %e, "could not build the response");
        reply::error(&ApiError::scripted(500), Dialect::Chat)
    })
}

/// The state of a playing body.
struct Playback {
    sim: Sim,
    start: Instant,
    steps: std::vec::IntoIter<Step>,
    finish: Option<Finish>,
    guard: PlayGuard,
    ctl: Arc<ConnCtl>,
    stop: watch::Receiver<bool>,
}

impl Playback {
    /// Each step is its own frame, yielded as soon as it is due; then the scripted finish.
    fn frames(self) -> impl Stream<Item = Result<Frame<Bytes>, io::Error>> + Send {
        futures_util::stream::unfold(self, |mut p| async move {
            if let Some(step) = p.steps.next() {
                sleep_to(p.start + step.at).await;
                p.sim.shared.lateness.frame(p.start + step.at, step.at);
                return Some((Ok(Frame::data(step.bytes)), p));
            }
            match p.finish.take()? {
                Finish::Eof => {
                    p.guard.finish();
                    None
                }
                Finish::Reset => {
                    // One turn of the scheduler lets hyper flush the last delta before the
                    // socket is aborted (an RST discards unsent data).
                    tokio::task::yield_now().await;
                    p.guard.finish();
                    p.ctl.reset();
                    let error = io::Error::new(io::ErrorKind::ConnectionReset, "scripted reset");
                    Some((Err(error), p))
                }
                Finish::Stall => {
                    tokio::select! {
                        () = tokio::time::sleep(STALL_LIMIT) => p.guard.finish(),
                        // Shutting down: end the stall (counted as dropped, it never finished).
                        _ = p.stop.wait_for(|stopping| *stopping) => {}
                    }
                    None
                }
            }
        })
    }
}

// === Observability ===

pub(crate) fn stats_json(s: SimStats) -> String {
    obj! {
        "requests": s.requests,
        "http2_requests": s.http2_requests,
        "streams_completed": s.streams_completed,
        "streams_dropped": s.streams_dropped,
        "peak_answers_playing": s.peak_answers_playing,
        "open_connections": s.open_connections,
        "files_held": s.files_held,
        "file_bytes_held": s.file_bytes_held,
        "batches_held": s.batches_held,
        "responses_held": s.responses_held,
        "response_bytes_held": s.response_bytes_held,
    }
    .encode()
}

pub(crate) fn requests_json(requests: &[SimRequest]) -> String {
    let items: Vec<J> = requests
        .iter()
        .map(|r| {
            obj! {
                "request_id": r.request_id.as_str(),
                "path": r.path.as_str(),
                "model": r.model.as_deref(),
                "authorization": r.authorization.as_deref(),
                "x_api_key": r.x_api_key.as_deref(),
                "x_goog_api_key": r.x_goog_api_key.as_deref(),
                "anthropic_version": r.anthropic_version.as_deref(),
                "traceparent": r.traceparent.as_deref(),
                "body_sha256": r.body_sha256.as_str(),
                "method": r.method.as_str(),
                "path_and_query": r.path_and_query.as_str(),
                "api_key": r.api_key.as_deref(),
                "content_type": r.content_type.as_deref(),
                "body_bytes": r.body_bytes,
            }
        })
        .collect();
    J::Arr(items).encode()
}
