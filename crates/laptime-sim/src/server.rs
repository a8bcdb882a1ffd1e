//! The HTTP face of the fake provider: accepts connections (HTTP/1.1 and h2c), picks a script
//! for each request, and plays its [`Schedule`] against the clock, one body frame per step.
//!
//! Time is measured from the instant hyper hands over the request head, and every frame waits
//! for `start + at` (absolute deadlines, so a slow write never pushes the later frames back),
//! to within ~0.1 ms ([`crate::clock`]). Besides the three dialect endpoints it serves
//! `GET /v1/models` and three observability endpoints: `GET /sim/stats` and `GET /sim/requests`
//! for tests, and `GET /sim/timing` (how late the sim's own timed sends were) for benchmarks.
//!
//! A scripted reset must be a real TCP RST, not a FIN: each accepted socket is duplicated
//! (`into_std` → `try_clone`) before hyper takes it, and on reset the duplicate sets
//! `SO_LINGER 0`, so when the connection is dropped the kernel aborts it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http::header::{HeaderMap, HeaderValue, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use laptime_core::{Dialect, GeminiMethod};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::clock::{sleep_to, Lateness};
use crate::echo;
use crate::json::{obj, J};
use crate::prefill;
use crate::script::{self, preset, Finish, Schedule, Script, Step, JSON, PRESET_NAMES, SSE};
use crate::wire::{ApiError, CREATED};

/// The longest a stalled stream holds its connection when the client never leaves.
const STALL_LIMIT: Duration = Duration::from_secs(600);
/// Request bodies above this are refused (a fake needs no more; it keeps memory bounded).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// How many requests `/sim/requests` remembers.
const LOG_LEN: usize = 100;
/// The model name used when a request scripts its answer and names no model.
const SCRIPTED_MODEL: &str = "laptime-sim";

type Body = UnsyncBoxBody<Bytes, io::Error>;

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
    streams_completed: AtomicU64,
    streams_dropped: AtomicU64,
    open_connections: AtomicU64,
    next_id: AtomicU64,
    log: Mutex<VecDeque<SimRequest>>,
    lateness: Lateness,
}

/// The counters `GET /sim/stats` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// Requests to the provider endpoints (everything but `/sim/*`).
    pub requests: u64,
    /// Scripted answers (streamed or not) whose schedule played to its end, including a
    /// scripted close or reset.
    pub streams_completed: u64,
    /// Scripted answers dropped before their schedule finished: the client (or gateway) went
    /// away, or a stall was ended by the client.
    pub streams_dropped: u64,
    /// Accepted TCP connections not yet closed.
    pub open_connections: u64,
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
}

impl Sim {
    pub fn new() -> Self {
        Sim::default()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SimStats {
        let s = &self.shared;
        SimStats {
            requests: s.requests.load(Ordering::Relaxed),
            streams_completed: s.streams_completed.load(Ordering::Relaxed),
            streams_dropped: s.streams_dropped.load(Ordering::Relaxed),
            open_connections: s.open_connections.load(Ordering::Relaxed),
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

    fn record(&self, request: SimRequest) {
        let mut log = self.log();
        if log.len() == LOG_LEN {
            log.pop_front();
        }
        log.push_back(request);
    }

    fn next_request_id(&self) -> String {
        let n = self.shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        format!("simreq_{n:016x}")
    }
}

/// Counts one scripted answer exactly once: completed when [`PlayGuard::finish`] is called,
/// dropped if the guard is dropped first (hyper drops the body, or the response future, when
/// the client goes away).
struct PlayGuard {
    sim: Sim,
    finished: bool,
}

impl PlayGuard {
    fn new(sim: Sim) -> Self {
        PlayGuard {
            sim,
            finished: false,
        }
    }

    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.sim
                .shared
                .streams_completed
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for PlayGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.sim
                .shared
                .streams_dropped
                .fetch_add(1, Ordering::Relaxed);
        }
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
struct ConnCtl {
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
        hyper::service::service_fn(move |req| handle(sim.clone(), ctl.clone(), stop.clone(), req))
    };
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
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

// === Requests ===

/// What a request asks for, from its method and path.
enum Route {
    Api(Dialect),
    /// `POST /v1beta/models/{model}:{method}`: model and stream-ness come from the path.
    Gemini {
        model: String,
        method: GeminiMethod,
    },
    Models,
    Stats,
    Requests,
    Timing,
    NotFound,
    MethodNotAllowed,
}

impl Route {
    fn of(method: &Method, path: &str) -> Route {
        let gemini = path
            .strip_prefix(Dialect::Gemini.path())
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(GeminiMethod::split);
        if let Some((model, gemini_method)) = gemini {
            return if method == Method::POST {
                Route::Gemini {
                    model: model.to_owned(),
                    method: gemini_method,
                }
            } else {
                Route::MethodNotAllowed
            };
        }
        let api = Dialect::ALL
            .into_iter()
            .filter(|d| *d != Dialect::Gemini)
            .find(|d| d.path() == path);
        match (method, path, api) {
            (&Method::POST, _, Some(dialect)) => Route::Api(dialect),
            (&Method::GET, "/v1/models", _) => Route::Models,
            (&Method::GET, "/sim/stats", _) => Route::Stats,
            (&Method::GET, "/sim/requests", _) => Route::Requests,
            (&Method::GET, "/sim/timing", _) => Route::Timing,
            (_, "/v1/models" | "/sim/stats" | "/sim/requests" | "/sim/timing", _)
            | (_, _, Some(_)) => Route::MethodNotAllowed,
            _ => Route::NotFound,
        }
    }
}

async fn handle(
    sim: Sim,
    ctl: Arc<ConnCtl>,
    stop: watch::Receiver<bool>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    // The clock starts when the head is here, as a provider's would.
    let start = Instant::now();
    let request_id = sim.next_request_id();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let route = Route::of(&parts.method, &path);
    // Errors about the path itself speak Anthropic on Anthropic's path, OpenAI elsewhere.
    let error_dialect = match route {
        Route::Api(d) => d,
        Route::Gemini { .. } => Dialect::Gemini,
        _ if path.starts_with("/v1/messages") => Dialect::Messages,
        _ if path.starts_with("/v1beta/") => Dialect::Gemini,
        _ => Dialect::Chat,
    };

    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes());
    let digest = body
        .as_ref()
        .map(|b| hex::encode(Sha256::digest(b)))
        .unwrap_or_default();

    let mut response = match (&route, body) {
        (Route::Stats, _) => json_response(StatusCode::OK, stats_json(sim.stats())),
        (Route::Requests, _) => json_response(StatusCode::OK, requests_json(&sim.requests())),
        (Route::Timing, _) => json_response(StatusCode::OK, sim.shared.lateness.json()),
        (_, Err(e)) => {
            sim.shared.requests.fetch_add(1, Ordering::Relaxed);
            let error = ApiError::invalid_request(format!("could not read the request body: {e}"));
            error_response(&error, error_dialect)
        }
        (_, Ok(bytes)) => {
            sim.shared.requests.fetch_add(1, Ordering::Relaxed);
            let planned = match &route {
                Route::Api(dialect) => Some((*dialect, plan(*dialect, &bytes, None))),
                Route::Gemini { model, method } => {
                    let sse = parts
                        .uri
                        .query()
                        .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
                    let call = GeminiCall {
                        model,
                        stream: method.is_stream(),
                        sse,
                    };
                    Some((Dialect::Gemini, plan(Dialect::Gemini, &bytes, Some(call))))
                }
                _ => None,
            };
            // Logged on arrival, so a test sees the request while its answer is still playing.
            sim.record(SimRequest {
                request_id: request_id.clone(),
                path: path.clone(),
                model: planned.as_ref().and_then(|(_, p)| p.model.clone()),
                authorization: header(&parts.headers, "authorization"),
                x_api_key: header(&parts.headers, "x-api-key"),
                x_goog_api_key: header(&parts.headers, "x-goog-api-key"),
                anthropic_version: header(&parts.headers, "anthropic-version"),
                traceparent: header(&parts.headers, "traceparent"),
                body_sha256: digest.clone(),
            });
            match (planned, route) {
                (
                    Some((
                        _,
                        Planned {
                            answer: Ok(schedule),
                            ..
                        },
                    )),
                    _,
                ) => answer(&sim, &ctl, stop, start, schedule).await,
                (
                    Some((
                        dialect,
                        Planned {
                            answer: Err(error), ..
                        },
                    )),
                    _,
                ) => error_response(&error, dialect),
                (None, Route::Models) => models_response(&parts.headers),
                (None, Route::MethodNotAllowed) => {
                    let message = format!("Method {} not allowed on {path}", parts.method);
                    error_response(&ApiError::route(405, message), error_dialect)
                }
                (None, _) => {
                    let message = format!("Unknown request URL: {} {path}", parts.method);
                    error_response(&ApiError::route(404, message), error_dialect)
                }
            }
        }
    };

    let headers = response.headers_mut();
    insert(headers, "x-sim-body-sha256", &digest);
    insert(headers, "x-sim-request-id", &request_id);
    // The providers' own request-id headers, so a gateway can log them as it would for real.
    let provider_id = match error_dialect {
        Dialect::Messages => Some("request-id"),
        // Google names an answer in its body (`responseId`), not in a header.
        Dialect::Gemini => None,
        Dialect::Chat | Dialect::Responses => Some("x-request-id"),
    };
    if let Some(name) = provider_id {
        insert(headers, name, &request_id);
    }
    debug!(%path, %request_id, status = response.status().as_u16(), "answered");
    Ok(response)
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

/// A request's answer, decided but not yet played, and the model it named (for the log).
struct Planned {
    model: Option<String>,
    answer: Result<Schedule, ApiError>,
}

/// A Gemini call as its path named it.
struct GeminiCall<'a> {
    model: &'a str,
    stream: bool,
    /// The query had `alt=sse` (without it Gemini streams a JSON array, which the fake does not).
    sse: bool,
}

/// Picks the script for a request body: its own `laptime_sim` object, else the preset named by
/// `model` (the body's, or for Gemini the path's), and schedules it.
fn plan(dialect: Dialect, body: &[u8], gemini: Option<GeminiCall<'_>>) -> Planned {
    if let Some(call) = gemini.as_ref().filter(|c| c.stream && !c.sse) {
        let message = format!(
            "streamGenerateContent is served as server-sent events only: call \
             /v1beta/models/{}:streamGenerateContent?alt=sse",
            call.model
        );
        return Planned {
            model: Some(call.model.to_owned()),
            answer: Err(ApiError::invalid_request(message)),
        };
    }
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            let message = format!("We could not parse the JSON body of your request: {e}");
            return Planned {
                model: None,
                answer: Err(ApiError::invalid_request(message)),
            };
        }
    };
    let model = match &gemini {
        Some(call) => Some(call.model.to_owned()),
        None => value
            .get("model")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
    };
    let answer = choose(&value, model.as_deref()).map(|mut script| {
        if script.echo {
            script.text = Some(echo::summary(dialect, &value));
        }
        let stream = gemini.as_ref().map_or_else(
            || {
                value
                    .get("stream")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false)
            },
            |call| call.stream,
        );
        let include_usage = value
            .pointer("/stream_options/include_usage")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        let name = model.as_deref().unwrap_or(SCRIPTED_MODEL);
        let prefill = prefill::read(dialect, &value);
        script::schedule_with_prefill(
            dialect,
            &script,
            name,
            stream,
            include_usage,
            prefill.as_deref(),
        )
    });
    Planned { model, answer }
}

/// The request's own script if it has one (the model name is then free), else the preset its
/// model names.
fn choose(value: &serde_json::Value, model: Option<&str>) -> Result<Script, ApiError> {
    if !value.is_object() {
        let message = "The request body must be a JSON object.".to_owned();
        return Err(ApiError::invalid_request(message));
    }
    if let Some(custom) = value.get("laptime_sim") {
        let script = Script::deserialize(custom)
            .map_err(|e| ApiError::invalid_request(format!("Invalid laptime_sim script: {e}")))?;
        script.validate().map_err(ApiError::invalid_request)?;
        return Ok(script);
    }
    match model {
        Some(name) => preset(name).ok_or_else(|| ApiError::model_not_found(name)),
        None => Err(ApiError::invalid_request(
            "you must provide a model parameter".to_owned(),
        )),
    }
}

/// Waits for the head's instant and answers; the body plays the rest of the schedule.
async fn answer(
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
        error_response(&ApiError::scripted(500), Dialect::Chat)
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

// === Small responses ===

fn full(bytes: Bytes) -> Body {
    UnsyncBoxBody::new(Full::new(bytes).map_err(|never: Infallible| match never {}))
}

fn json_response(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

fn error_response(error: &ApiError, dialect: Dialect) -> Response<Body> {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, error.body(dialect))
}

/// `GET /v1/models`, in Anthropic's shape when the client sent `anthropic-version`, else
/// OpenAI's.
fn models_response(headers: &HeaderMap) -> Response<Body> {
    let body = if headers.contains_key("anthropic-version") {
        let data: Vec<J> = PRESET_NAMES
            .iter()
            .map(|id| {
                obj! {
                    "type": "model",
                    "id": *id,
                    "display_name": *id,
                    "created_at": "2025-10-09T08:53:20Z",
                }
            })
            .collect();
        obj! {
            "data": data,
            "has_more": false,
            "first_id": PRESET_NAMES.first().copied(),
            "last_id": PRESET_NAMES.last().copied(),
        }
    } else {
        let data: Vec<J> = PRESET_NAMES
            .iter()
            .map(|id| {
                obj! {"id": *id, "object": "model", "created": CREATED, "owned_by": "laptime-sim"}
            })
            .collect();
        obj! {"object": "list", "data": data}
    };
    json_response(StatusCode::OK, body.encode())
}

fn stats_json(s: SimStats) -> String {
    obj! {
        "requests": s.requests,
        "streams_completed": s.streams_completed,
        "streams_dropped": s.streams_dropped,
        "open_connections": s.open_connections,
    }
    .encode()
}

fn requests_json(requests: &[SimRequest]) -> String {
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
            }
        })
        .collect();
    J::Arr(items).encode()
}
