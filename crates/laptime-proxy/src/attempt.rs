//! Attempt: one upstream call, the only place one is made. [`dispatch`] builds the upstream
//! request from operator configuration only (URL, key) plus the client's body bytes, sends it
//! over a pooled HTTP/1.1 or HTTP/2 client (HTTP/2 over [`crate::lanes`]; the channel's way
//! out, [`crate::egress`]: its proxy, rustls with its trust and client certificate;
//! `TCP_NODELAY`, redirects never followed) within the headers deadline, and decides what the
//! head means: the circuit, `Retry-After` and status handling live here and nowhere else.
//! Every failure is one [`AttemptError`]: its class (whose fault, retryable), which deadline,
//! and when. An attempt that opened a new connection keeps when its TCP connect, proxy tunnel
//! and TLS handshake were done (`ConnectionMarks`), failed or not.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};
use hyper_util::client::legacy::Client;
use laptime_core::observe::StreamObserver;
use laptime_core::timeline::{self, ConnectionMarks, DeadlineKind, ErrorClass};
use laptime_core::translate::stream::{ClientStreamOptions, StreamTranslator};
use laptime_core::Dialect;
use tokio::time::Instant;

use crate::config::{Provider, TimeoutsConfig, UPSTREAM_IDLE_PER_THREAD};
use crate::connect::{Connector, MemoryConnect};
use crate::drive::{InlineExecutor, UpstreamBody};
use crate::egress::open::{EgressConnector, EgressError, Opened};
use crate::egress::Profile;
use crate::ingress::{SpanIds, TRACEPARENT, TRACESTATE};
use crate::lanes::{LaneState, StreamSlot, Upstream};
use crate::model_health::ModelHealth;
use crate::observe::{ObservedBody, StreamDeadlines, Until, WholeRead};
use crate::outbody::OutBody;
use crate::pool::{CallError, Http1Pool, Lease};
use crate::respond::{header_value, GatewayError};
use crate::routing::{
    Channel, InflightGuard, Route, LIMITED_KEY_COOL_DOWN_US, REFUSED_KEY_COOL_DOWN_US,
};
use crate::App;

/// Why an attempt did not give an answer the client can be committed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptError {
    pub class: ErrorClass,
    /// Which deadline fired, for a timeout.
    pub deadline: Option<DeadlineKind>,
    /// When it failed (offset from t0).
    pub at: Duration,
    /// What the attempt got that far: its status, head and first body byte.
    pub status: Option<u16>,
    pub headers_at: Option<Duration>,
    pub first_byte: Option<Duration>,
    /// The upstream's `Retry-After`, when its error status came with one.
    pub retry_after: Option<Duration>,
    /// The channel key the attempt used (see [`crate::routing::Keys`]).
    pub key_index: Option<usize>,
    /// How far the new connection the attempt was opening got (empty when it had a pooled one).
    pub connection: ConnectionMarks,
}

impl AttemptError {
    pub fn before_head(class: ErrorClass, deadline: Option<DeadlineKind>, at: Duration) -> Self {
        AttemptError {
            class,
            deadline,
            at,
            status: None,
            headers_at: None,
            first_byte: None,
            retry_after: None,
            key_index: None,
            connection: ConnectionMarks::default(),
        }
    }
}

/// What every attempt of one request shares.
pub struct AttemptCtx<'a> {
    pub app: &'a App,
    /// The configuration the request started with.
    pub live: &'a crate::live::Live,
    /// The client's dialect.
    pub dialect: Dialect,
    /// What a translated answer tells the client that the upstream's does not decide (set
    /// when some candidate is translated).
    pub client_answer: Option<&'a ClientStreamOptions>,
    /// The client asked for a stream (Gemini names it in the upstream URL).
    pub stream: bool,
    pub client_headers: &'a HeaderMap,
    /// The request's trace: each attempt sends it upstream with its own span id.
    pub trace: SpanIds,
    pub t0: Instant,
    pub timeouts: &'a TimeoutsConfig,
    /// A provider endpoint call (embeddings, files, …): its method and path; `None` for a
    /// model call of the client's dialect.
    pub endpoint: Option<&'a EndpointTarget>,
    /// The client's body asks a Chat upstream for the usage chunk
    /// (`stream_options.include_usage`); a translated Chat body always asks.
    pub usage_asked: bool,
}

/// Where an endpoint call goes on a channel: the client's method and path (with its query),
/// with the upstream model in Gemini's path.
#[derive(Debug, Clone)]
pub struct EndpointTarget {
    pub method: Method,
    /// The gateway path and query the client called (`/v1/files?purpose=batch`).
    pub path_and_query: String,
    /// Gemini's `:embedContent` etc.: the path names the model, so each channel gets its own.
    pub gemini_verb: Option<String>,
}

impl EndpointTarget {
    /// The path and query for a channel that calls the model `upstream_model`.
    pub fn target_for(&self, upstream_model: &str) -> String {
        match &self.gemini_verb {
            Some(verb) => {
                let query = self
                    .path_and_query
                    .split_once('?')
                    .map(|(_, q)| format!("?{q}"))
                    .unwrap_or_default();
                format!("/v1beta/models/{upstream_model}:{verb}{query}")
            }
            None => self.path_and_query.clone(),
        }
    }
}

impl AttemptCtx<'_> {
    pub(crate) fn now(&self) -> Duration {
        timeline::offset(Instant::now().saturating_duration_since(self.t0))
    }
}

/// What an error status from upstream means for this attempt.
#[derive(Debug, Clone, Copy)]
pub enum ErrorStatus<'a> {
    /// It is the answer (nothing is left to fail over to): relayed as it came.
    Answers,
    /// These statuses fail the attempt; others are the answer.
    FailsOn(&'a [u16]),
    /// These statuses fail the attempt so the same channel can be asked again, unless the
    /// upstream's `Retry-After` is longer than `max_wait`: then the status is the answer (the
    /// client is told to wait, rather than the gateway holding it).
    RetriesOn { on: &'a [u16], max_wait: Duration },
    /// Every non-2xx status fails the attempt (a hedging racer).
    Fails,
}

/// An upstream answer's body: a stream observed from its first byte, or a whole answer.
pub enum AnswerBody {
    /// Boxed: the observer's scanner and buffers make it large, and it moves between phases.
    Stream(Box<ObservedBody<UpstreamBody>>),
    Whole(UpstreamBody),
    /// A whole answer the gateway has already read (an error it looked into before deciding
    /// whether to fail over).
    Read(WholeRead),
}

/// An attempt that got a head the client may be committed to.
pub struct Answer {
    pub channel: Arc<Channel>,
    /// The channel key the attempt used.
    pub key_index: Option<usize>,
    /// The dialect the channel answered in (the client's unless translated), and the model
    /// name it was asked for.
    pub upstream: Dialect,
    pub upstream_model: String,
    /// The cool-down and circuit of the model on the channel.
    pub health: Arc<ModelHealth>,
    pub parts: http::response::Parts,
    pub body: AnswerBody,
    /// This attempt's dispatch and head (offsets from t0).
    pub start: Duration,
    pub headers_at: Duration,
    /// The steps of the connection this attempt opened; empty on a pooled one.
    pub connection: ConnectionMarks,
    /// Holds the channel's in-flight count until the request is done.
    pub guard: InflightGuard,
    pub inflight: u32,
    /// A 2xx stream's health is known only once it is read: the circuit hears of it at the
    /// first read-ahead or at the commit, whichever comes first.
    verdict_pending: bool,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("channel", &self.channel.name)
            .field("status", &self.parts.status)
            .finish_non_exhaustive()
    }
}

/// What an attempt on `route` calls: the endpoint's method and URL, or the model call's.
fn upstream_call(ctx: &AttemptCtx<'_>, route: &Route) -> UpstreamCall {
    let channel = &route.channel;
    match ctx.endpoint {
        Some(e) => UpstreamCall {
            method: e.method.clone(),
            url: channel.endpoint_url(&e.target_for(&route.upstream_model), &route.upstream_model),
            dialect: route.upstream,
            content_type: ContentType::Client,
        },
        None => UpstreamCall {
            method: Method::POST,
            url: channel.url(route.upstream, &route.upstream_model, ctx.stream),
            dialect: route.upstream,
            content_type: ContentType::Json,
        },
    }
}

/// How many times an attempt sends its request again after an HTTP/2 upstream refused it
/// unprocessed.
const REFUSED_RESENDS: usize = 2;

type Sent = Result<
    Result<(http::Response<hyper::body::Incoming>, Option<Lease>), CallError>,
    tokio::time::error::Elapsed,
>;

/// Sends `request` until `deadline` for its head, over a client `pick` gives (with the stream it
/// holds on its lane, kept until the answer's body ends), and sends it again (a copy from
/// `again`; none for a streamed upload, over a client picked anew) when an HTTP/2 upstream
/// refused its stream unprocessed (`REFUSED_STREAM`, RFC 9113 section 8.7: after lowering its
/// limit of concurrent streams, say, or while it sheds load): the request was never seen, so
/// it is the same attempt, not a failure of the channel (which would fail over after a
/// back-off). The wait for a lane (a new connection's settings) is part of the head's wait.
async fn send<F: std::future::Future<Output = Upstream>>(
    pick: impl Fn() -> F,
    request: Request<OutBody>,
    again: impl Fn() -> Option<Request<OutBody>>,
    deadline: Instant,
) -> (Sent, Option<StreamSlot>) {
    let mut slot = None;
    let sending = async {
        let mut request = request;
        let mut resends = 0;
        loop {
            let mut upstream = pick().await;
            // A refused stream is over: its slot goes as the next one is taken.
            slot = upstream.slot.take();
            let sent = upstream.call(request).await;
            let refused = matches!(&sent, Err(e) if refused_stream(e));
            let copy = (refused && resends < REFUSED_RESENDS)
                .then(&again)
                .flatten();
            let Some(copy) = copy else {
                return sent;
            };
            tracing::debug!("upstream refused an HTTP/2 stream unprocessed; sending it again");
            resends += 1;
            request = copy;
        }
    };
    let sent = tokio::time::timeout_at(deadline, sending).await;
    (sent, slot)
}

/// Whether `e` is an HTTP/2 stream the upstream refused before processing it.
fn refused_stream(e: &(dyn std::error::Error + 'static)) -> bool {
    causes(e)
        .find_map(|s| s.downcast_ref::<h2::Error>())
        .is_some_and(|h2| h2.reason() == Some(h2::Reason::REFUSED_STREAM))
}

/// `e` and the errors under it. An io::Error's `source()` skips the error it wraps (the TLS
/// connector nests io::Error(Other) → io::Error(InvalidData) → rustls::Error), so it is
/// followed through `get_ref`.
fn causes<'e>(
    e: &'e (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'e (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |s| match s.downcast_ref::<std::io::Error>() {
        Some(io) if io.get_ref().is_some() => io.get_ref().map(|i| i as _),
        _ => s.source(),
    })
}

/// Sends one attempt on `route` and waits for its head. `start` is its dispatch and `origin` the
/// request's upstream start (a hedge counts from the primary's dispatch), both from t0;
/// `span_id` is the attempt's own span, the parent id of the `traceparent` it sends.
pub async fn dispatch(
    ctx: &AttemptCtx<'_>,
    route: &Route,
    body: OutBody,
    (start, origin): (Duration, Duration),
    span_id: [u8; 8],
    errors: ErrorStatus<'_>,
) -> Result<Answer, AttemptError> {
    let channel = route.channel.clone();
    let health = route.health.clone();
    let key_index = route
        .key_index
        .or_else(|| channel.keys.pick(crate::clock::now_unix_us()));
    let traceparent = ctx.trace.traceparent_for(span_id);
    // A whole body can be sent again (a streamed upload cannot): see `send`.
    let resend = match &body {
        OutBody::Full(b) => Some(b.clone()),
        OutBody::Upload(_) => None,
    };
    let request = build_request(
        (&channel, key_index),
        upstream_call(ctx, route),
        body,
        ctx.client_headers,
        &traceparent,
    )
    .map_err(|e| AttemptError {
        key_index,
        ..AttemptError::before_head(e.class, None, ctx.now())
    })?;
    let again = || {
        let body = OutBody::Full(resend.clone()?);
        let call = upstream_call(ctx, route);
        build_request(
            (&channel, key_index),
            call,
            body,
            ctx.client_headers,
            &traceparent,
        )
        .ok()
    };
    let (guard, inflight) = channel.enter();
    let connect_ms = ctx
        .timeouts
        .connect_ms
        .unwrap_or(ctx.live.config.server.connect_timeout_ms);
    let uri = request.uri().clone();
    let pick = || {
        ctx.app
            .upstream_for(connect_ms, channel.egress.as_ref(), &uri)
    };
    let headers_deadline = Duration::from_millis(ctx.timeouts.headers_ms);
    let forwarded = channel
        .egress
        .as_deref()
        .is_some_and(|p| p.forwards(request.uri()));
    let dispatched = Instant::now();
    let (sent, slot) = send(pick, request, again, dispatched + headers_deadline).await;
    let headers_at = ctx.now();
    let (response, lease) = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            health.circuit_record(true);
            return Err(AttemptError {
                key_index,
                ..call_failed(ctx, &channel.name, &e, dispatched, headers_at)
            });
        }
        Err(_) => {
            health.circuit_record(true);
            let kind = Some(DeadlineKind::Headers);
            return Err(AttemptError {
                key_index,
                ..AttemptError::before_head(ErrorClass::Timeout, kind, headers_at)
            });
        }
    };
    // A lane's client puts how its connection was opened in the answer's extensions.
    let opened = match &lease {
        Some(lease) => lease.opened(),
        None => response.extensions().get::<Opened>().copied(),
    };
    let connection = opened
        .map(|o| o.marks_for(ctx.t0, dispatched))
        .unwrap_or_default();
    let status = response.status().as_u16();
    let wait = retry_after(response.headers());
    // With several keys, a refusal or a rate limit is the key's: it cools down on its own, and
    // while another key can serve, the model on the channel is not held back for it.
    let other_key = cool_key_down(&channel, key_index, status, wait);
    if let Some(wait) = wait.filter(|_| !other_key) {
        let wait_us = i64::try_from(wait.as_micros()).unwrap_or(i64::MAX);
        health.cool_down_until(crate::clock::now_unix_us().saturating_add(wait_us));
    }
    let class = match status {
        // Sent to a proxy in absolute form, a 407 is the proxy's refusal of its credentials.
        407 if forwarded => Some(ErrorClass::ProxyAuth),
        _ => ErrorClass::from_status(status),
    };
    // Refused credentials (the channel's key, or its proxy's) are the operator's to fix, and
    // the provider's body may echo part of the key; a redirect is never followed (nothing in a
    // request or an answer may choose where a call goes) nor relayed (its Location is the
    // provider's). Either fails the attempt whatever `errors` says, and the client is told in
    // the gateway's own words.
    let refused = matches!(
        class,
        Some(ErrorClass::UpstreamAuth | ErrorClass::ProxyAuth)
    );
    let redirect = class == Some(ErrorClass::UpstreamRedirect);
    if refused || redirect {
        tracing::warn!(
            channel = %channel.name,
            status,
            class = class.map_or("", ErrorClass::as_str),
            "upstream answer not relayed: check the channel's key (upstream_auth), proxy_url (proxy_auth) or base_url (upstream_redirect)"
        );
    }
    let fails = refused
        || redirect
        || match errors {
            ErrorStatus::Answers => false,
            ErrorStatus::FailsOn(on) => on.contains(&status),
            ErrorStatus::RetriesOn { on, max_wait } => {
                on.contains(&status) && wait.is_none_or(|w| w <= max_wait)
            }
            ErrorStatus::Fails => !response.status().is_success(),
        };
    let streamed = response.status().is_success() && is_sse(response.headers());
    if !streamed {
        let failure = status == 429 || status >= 500 || refused || redirect;
        health.circuit_record(failure && !other_key);
    }
    if fails {
        // Dropped unread: the connection closes instead of going back to the pool.
        drop((response, lease));
        return Err(AttemptError {
            status: Some(status),
            headers_at: Some(headers_at),
            retry_after: wait,
            key_index,
            connection,
            ..AttemptError::before_head(
                class.unwrap_or(ErrorClass::UpstreamStatus5xx),
                None,
                headers_at,
            )
        });
    }
    let (parts, incoming) = response.into_parts();
    let incoming = match lease {
        Some(lease) => UpstreamBody::leased(incoming, lease),
        None => UpstreamBody::new(incoming, &parts.extensions),
    }
    .holding(slot);
    let body = if streamed {
        // Marks are classified in the upstream's dialect, so they mean the same whatever the
        // client speaks.
        let mut obs = StreamObserver::new(route.upstream, Some(origin));
        let usage_asked = ctx.usage_asked || route.upstream != ctx.dialect;
        if !usage_asked || !route.channel.usage_in_stream {
            // Only Chat streams can come without usage; the observer counts their output.
            obs = obs.estimating_output();
        }
        let gemini_untouched = route.upstream == Dialect::Gemini && ctx.dialect == Dialect::Gemini;
        if gemini_untouched && !ctx.live.config.server.timing_comment(ctx.dialect) {
            obs = obs.without_comment();
        }
        obs.set_headers(headers_at);
        let t = ctx.timeouts;
        // First event and first output count from this attempt's dispatch, so an attempt after
        // a failover gets the whole setting; `total` counts from t0.
        let first_output = match errors {
            // Nothing else could take over: the configured deadline, whatever the history.
            ErrorStatus::Answers => Duration::from_millis(t.first_output_ms),
            _ => adaptive_first_output(t, health.first_output_p95()),
        };
        let deadlines = StreamDeadlines {
            first_event: start + Duration::from_millis(t.first_event_ms),
            first_output: start + first_output,
            idle: Duration::from_millis(t.idle_ms),
            progress: Duration::from_millis(t.progress_ms),
            total: Duration::from_millis(t.total_ms),
        };
        let mut body = ObservedBody::held(incoming, ctx.t0, ctx.dialect, obs)
            .with_deadlines(deadlines)
            .with_held_cap(ctx.live.config.server.max_held_bytes)
            .with_drain_signal(ctx.app.drain_over.subscribe());
        if let Some(opts) = ctx.client_answer.filter(|_| route.upstream != ctx.dialect) {
            let opts = opts.for_model(&route.upstream_model);
            body = body.translated(StreamTranslator::new(route.upstream, ctx.dialect, &opts));
        }
        AnswerBody::Stream(Box::new(body))
    } else {
        AnswerBody::Whole(incoming)
    };
    Ok(Answer {
        channel,
        key_index,
        upstream: route.upstream,
        upstream_model: route.upstream_model.clone(),
        health,
        parts,
        body,
        start,
        headers_at,
        connection,
        guard,
        inflight,
        verdict_pending: streamed,
    })
}

/// The failure of an upstream call that got no head: its class, the connect deadline when that
/// ended it, and how far the connection it was opening got.
fn call_failed(
    ctx: &AttemptCtx<'_>,
    channel: &str,
    e: &CallError,
    dispatched: Instant,
    at: Duration,
) -> AttemptError {
    let class = classify_error(e);
    let egress = find_egress_error(e);
    if matches!(class, ErrorClass::ProxyAuth) {
        tracing::warn!(channel, error = %error_chain(e), "the channel's proxy refused the gateway's proxy credentials: check its proxy_url (or HTTPS_PROXY)");
    } else {
        tracing::debug!(channel, error = %error_chain(e), "upstream call failed");
    }
    let timed_out = egress.map_or(class == ErrorClass::ConnectTimeout, |g| g.timed_out);
    AttemptError {
        connection: egress
            .map(|g| g.opened.marks_for(ctx.t0, dispatched))
            .unwrap_or_default(),
        ..AttemptError::before_head(class, timed_out.then_some(DeadlineKind::Connect), at)
    }
}

/// An error and its causes, one line (none of them holds a key or a proxy's credentials).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn find_egress_error<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e EgressError> {
    causes(e).find_map(|s| s.downcast_ref::<EgressError>())
}

impl Answer {
    /// Reads a streamed answer on to `until` before the client is committed to it (a whole
    /// answer is already there). A miss counts against the channel; the caller drops the answer,
    /// which closes its connection.
    pub async fn read_ahead(&mut self, until: Until) -> Result<(), AttemptError> {
        let AnswerBody::Stream(body) = &mut self.body else {
            return Ok(());
        };
        let read = body.read_until(until).await;
        if read.is_err() || self.verdict_pending {
            self.health.circuit_record(read.is_err());
            self.verdict_pending = false;
        }
        let marks = body.summary().marks;
        match (read, until) {
            (Ok(()), Until::FirstEvent) => {
                if let Some(first) = marks.first_event {
                    self.channel
                        .note_first_event(first.saturating_sub(self.start));
                }
            }
            (Ok(()), Until::FirstOutput) => {
                if let Some(first) = marks.first_effective {
                    self.health
                        .note_first_output(first.saturating_sub(self.start));
                }
            }
            (Err(_), _) => {}
        }
        read.map_err(|e| AttemptError {
            status: Some(self.parts.status.as_u16()),
            ..e
        })
    }

    /// The client is committed to this answer: a stream not read ahead counts as a success.
    pub fn committed(&mut self) {
        if std::mem::take(&mut self.verdict_pending) {
            self.health.circuit_record(false);
        }
    }

    /// The class of a whole 4xx answer as its body names it (over the context window, a
    /// content filter), read before the client is committed to it; `None` for any other
    /// answer. The body stays for the client if the answer is relayed after all.
    pub async fn refusal(&mut self, ctx: &AttemptCtx<'_>) -> Option<ErrorClass> {
        let status = self.parts.status.as_u16();
        if !matches!(status, 400 | 413 | 422) || !matches!(self.body, AnswerBody::Whole(_)) {
            return None;
        }
        let placeholder = AnswerBody::Read(WholeRead::empty());
        let AnswerBody::Whole(incoming) = std::mem::replace(&mut self.body, placeholder) else {
            return None;
        };
        let deadline = ctx.t0 + Duration::from_millis(ctx.timeouts.total_ms);
        let max = ctx.live.config.server.max_answer_bytes;
        let read = WholeRead::read(incoming, ctx.t0, deadline, max).await;
        let class = read
            .bytes
            .as_ref()
            .ok()
            .and_then(|b| laptime_core::classify::error_status_class(status, b));
        self.body = AnswerBody::Read(read);
        class
    }

    /// The first body byte so far, for the record of an attempt that lost or failed.
    pub fn first_byte(&self) -> Option<Duration> {
        match &self.body {
            AnswerBody::Stream(b) => b.summary().marks.first_byte,
            AnswerBody::Read(read) => read.first_byte,
            AnswerBody::Whole(_) => None,
        }
    }
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

/// Cools the attempt's key down when the answer refused or rate limited it, on a channel with
/// several keys; whether another key of the channel can serve now.
fn cool_key_down(
    channel: &Channel,
    key_index: Option<usize>,
    status: u16,
    retry_after: Option<Duration>,
) -> bool {
    let Some(k) = key_index.filter(|_| channel.keys.len() > 1) else {
        return false;
    };
    let cool_us = match status {
        401 | 403 => REFUSED_KEY_COOL_DOWN_US,
        429 => retry_after.map_or(LIMITED_KEY_COOL_DOWN_US, |w| {
            i64::try_from(w.as_micros()).unwrap_or(i64::MAX)
        }),
        _ => return false,
    };
    let now = crate::clock::now_unix_us();
    channel.keys.cool_down(k, now.saturating_add(cool_us));
    tracing::info!(channel = %channel.name, key_index = k, status, "channel key cooling down");
    channel.keys.another_ready(k, now)
}

/// `Retry-After` in seconds (the HTTP-date form is not used by LLM providers), as microseconds,
/// capped at an hour.
/// The first-output deadline while another channel could take over: the (channel, model)'s
/// recent p95 times the factor, within the floor and the configured deadline.
fn adaptive_first_output(t: &TimeoutsConfig, p95: Option<Duration>) -> Duration {
    let configured = Duration::from_millis(t.first_output_ms);
    match p95 {
        Some(p95) if t.first_output_p95_factor > 0.0 => p95
            .mul_f64(t.first_output_p95_factor)
            .max(Duration::from_millis(t.first_output_floor_ms))
            .min(configured),
        _ => configured,
    }
}

/// A `Retry-After` in seconds (at most an hour); an HTTP date is not read.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs.min(3600)))
}

pub type HttpClient = Client<Connector, OutBody>;

/// A pooled upstream client going straight out (no proxy, the bundled and the operating
/// system's roots): for tools that call a URL of their own.
pub fn client(connect_timeout: Duration) -> Result<HttpClient, GatewayError> {
    let profile = Profile::direct()
        .map_err(|e| GatewayError::new(ErrorClass::Internal, format!("TLS setup failed: {e}")))?;
    Ok(client_along(
        Arc::new(profile),
        (connect_timeout, UPSTREAM_IDLE_PER_THREAD),
    ))
}

/// The pooled upstream client of one way out ([`crate::egress::Profile`]), keeping at most
/// `idle` idle connections per upstream.
pub fn client_along(
    profile: Arc<Profile>,
    (connect_timeout, idle): (Duration, usize),
) -> HttpClient {
    net_client(EgressConnector::new(profile, connect_timeout), idle)
}

/// The client of one lane ([`crate::lanes`]): its connections tell `lane` their upstream's
/// limit of streams.
pub fn lane_client(
    profile: Arc<Profile>,
    (connect_timeout, idle): (Duration, usize),
    lane: Arc<LaneState>,
) -> HttpClient {
    net_client(
        EgressConnector::new(profile, connect_timeout).telling(lane),
        idle,
    )
}

fn net_client(connector: EgressConnector, idle: usize) -> HttpClient {
    let mut builder = pool_builder(idle);
    // Without a timer the pool never evicts: idle upstream connections (and their descriptors)
    // would stay for good after a burst.
    builder.pool_timer(hyper_util::rt::TokioTimer::new());
    // HTTP/2 only: the pool then opens one connection per upstream at a time (hyper-util
    // waits for a connecting HTTP/2 one instead of opening another), which every answer on the
    // lane shares.
    if connector.profile().http == crate::config::UpstreamHttp::Http2 {
        builder.http2_only(true);
    }
    builder.build(Connector::Net(connector))
}

/// The serving thread's HTTP/1.1 connections along one way out ([`crate::pool`]), keeping at
/// most `idle` idle per upstream.
pub fn pool_along(profile: Arc<Profile>, (connect_timeout, idle): (Duration, usize)) -> Http1Pool {
    let connector = Connector::Net(EgressConnector::new(profile, connect_timeout));
    Http1Pool::new(connector, idle, Some(IDLE_TIMEOUT))
}

/// A pool whose connections are in-process pipes opened by `open` (tests under paused time,
/// where an eviction timer would only add wake-ups).
pub fn memory_client(open: MemoryConnect) -> Http1Pool {
    Http1Pool::new(Connector::Memory(open), UPSTREAM_IDLE_PER_THREAD, None)
}

/// How long an idle upstream connection waits for a call: each holds its buffers and a task.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections wait up to [`IDLE_TIMEOUT`] for a call, at most `idle` of them per
/// upstream: without a cap a burst of N concurrent streams would leave N of them
/// (`server.upstream_idle_per_thread`).
fn pool_builder(idle: usize) -> hyper_util::client::legacy::Builder {
    let mut builder = Client::builder(InlineExecutor);
    builder
        .pool_idle_timeout(IDLE_TIMEOUT)
        .pool_max_idle_per_host(idle);
    builder
}

/// Client headers passed upstream as they are: the ones that change the answer's format or
/// version. Everything else (including the client's credentials) stays here.
const PASSED: [HeaderName; 3] = [
    ANTHROPIC_VERSION,
    HeaderName::from_static("anthropic-beta"),
    HeaderName::from_static("openai-beta"),
];

// Header names by constant: a `&str` name is parsed and checked on every use.
const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");
const API_KEY: HeaderName = HeaderName::from_static("api-key");

const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// What an attempt sends: method, URL (from configuration and a path the router matched), the
/// dialect it speaks, and whose content type the body has.
#[derive(Debug, Clone)]
pub struct UpstreamCall {
    pub method: Method,
    pub url: String,
    pub dialect: Dialect,
    pub content_type: ContentType,
}

/// The content type of an upstream request's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentType {
    /// A model call's JSON.
    Json,
    /// The client's own (a multipart upload's boundary, an endpoint's JSON), with the
    /// `Content-Length` it declared when its upload streams through.
    Client,
}

/// The longest client `tracestate` passed on: W3C asks every hop to carry at least 512
/// characters, and nothing more need be held.
const TRACESTATE_MAX: usize = 512;

/// The client's `tracestate`, when the trace it belongs to goes on upstream: only with a
/// `traceparent` whose trace id is the one sent (a client context that did not parse started a
/// new trace, which its vendors' state does not describe).
fn continued_tracestate<'h>(client: &'h HeaderMap, sent: &str) -> Option<&'h HeaderValue> {
    let theirs = client.get(TRACEPARENT)?.to_str().ok()?.trim();
    let same_trace = theirs
        .get(3..35)
        .is_some_and(|t| sent.get(3..35) == Some(t));
    let state = client.get(TRACESTATE)?;
    (same_trace && state.len() <= TRACESTATE_MAX).then_some(state)
}

/// The upstream request of `call` on `channel` with its key number `key`.
pub fn build_request(
    (channel, key): (&Channel, Option<usize>),
    call: UpstreamCall,
    body: OutBody,
    client_headers: &HeaderMap,
    traceparent: &str,
) -> Result<Request<OutBody>, GatewayError> {
    let streamed = matches!(body, OutBody::Upload(_));
    let mut req = Request::builder()
        .method(call.method)
        .uri(call.url)
        .body(body)
        .map_err(|e| GatewayError::new(ErrorClass::Internal, format!("bad upstream URL: {e}")))?;
    // Plain HTTP through a proxy goes in absolute form, its credentials on every request.
    let proxy_auth = channel
        .egress
        .as_deref()
        .filter(|p| p.forwards(req.uri()))
        .and_then(|p| p.proxy.as_ref()?.authorization().cloned());
    let h = req.headers_mut();
    if let Some(host) = channel.http1_host() {
        h.insert(http::header::HOST, host.clone());
    }
    if let Some(auth) = proxy_auth {
        h.insert(http::header::PROXY_AUTHORIZATION, auth);
    }
    match call.content_type {
        ContentType::Json => {
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        ContentType::Client => {
            if let Some(v) = client_headers.get(http::header::CONTENT_TYPE) {
                h.insert(http::header::CONTENT_TYPE, v.clone());
            }
            // An upload streamed through keeps the length the client declared (a body the
            // gateway holds has its own, which a mapped model name may have changed).
            if streamed {
                if let Some(v) = client_headers.get(http::header::CONTENT_LENGTH) {
                    h.insert(http::header::CONTENT_LENGTH, v.clone());
                }
            }
        }
    }
    // The scanner reads the stream as sent; compressed SSE would hide it.
    h.insert(
        http::header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    h.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(concat!("laptime/", env!("CARGO_PKG_VERSION"))),
    );
    if let Some(accept) = client_headers.get(http::header::ACCEPT) {
        h.insert(http::header::ACCEPT, accept.clone());
    }
    for name in PASSED {
        if let Some(v) = client_headers.get(&name) {
            h.insert(name, v.clone());
        }
    }
    h.insert(TRACEPARENT, header_value(traceparent));
    if let Some(state) = continued_tracestate(client_headers, traceparent) {
        h.insert(TRACESTATE, state.clone());
    }
    for (name, value) in &channel.extra_headers {
        h.insert(name, value.clone());
    }
    if let Some(key) = key.and_then(|k| channel.keys.get(k)) {
        let (name, mut value) = match channel.provider {
            Provider::Anthropic => (X_API_KEY, header_value(key.expose())),
            Provider::Gemini => (X_GOOG_API_KEY, header_value(key.expose())),
            Provider::AzureOpenai => (API_KEY, header_value(key.expose())),
            Provider::Openai | Provider::OpenaiCompatible | Provider::Sim => (
                http::header::AUTHORIZATION,
                header_value(&format!("Bearer {}", key.expose())),
            ),
        };
        value.set_sensitive(true);
        h.insert(name, value);
    }
    if call.dialect == Dialect::Messages && !h.contains_key(&ANTHROPIC_VERSION) {
        h.insert(
            ANTHROPIC_VERSION,
            HeaderValue::from_static(DEFAULT_ANTHROPIC_VERSION),
        );
    }
    Ok(req)
}

/// Classifies a failed upstream call: a connection that could not be opened says which step
/// failed; after that, a TLS alert (a client certificate refused after a TLS 1.3 handshake),
/// a timeout or the transport.
pub fn classify_error(e: &CallError) -> ErrorClass {
    if let Some(g) = find_egress_error(e) {
        return g.class;
    }
    for s in causes(e) {
        if s.downcast_ref::<rustls::Error>().is_some() {
            return ErrorClass::Tls;
        }
        let io = s.downcast_ref::<std::io::Error>();
        if io.is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return ErrorClass::ConnectTimeout;
        }
    }
    if e.is_connect() {
        ErrorClass::ConnectFailed
    } else {
        ErrorClass::BodyError
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ChannelConfig, Models};
    use bytes::Bytes;

    /// An error whose source is `inner`, as hyper wraps the HTTP/2 error it got.
    #[derive(Debug)]
    struct Wrapped(h2::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapped")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn only_a_stream_refused_unprocessed_is_sent_again() {
        let refused = Wrapped(h2::Error::from(h2::Reason::REFUSED_STREAM));
        assert!(refused_stream(&refused));
        assert!(refused_stream(&h2::Error::from(h2::Reason::REFUSED_STREAM)));
        // A stream reset otherwise may have been processed: never sent twice.
        for reason in [
            h2::Reason::CANCEL,
            h2::Reason::INTERNAL_ERROR,
            h2::Reason::NO_ERROR,
        ] {
            assert!(
                !refused_stream(&Wrapped(h2::Error::from(reason))),
                "{reason:?}"
            );
        }
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(!refused_stream(&io));
    }

    fn channel(provider: Provider) -> Channel {
        let cfg = ChannelConfig {
            name: "c".into(),
            provider,
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some("K".into()),
            models: Models::List(vec!["m".into()]),
            ..ChannelConfig::default()
        };
        Channel::from_config(&cfg, "http://127.0.0.1:9/v1".into(), &|_| {
            Some("sk-canary".into())
        })
    }

    /// A model call's request, as `dispatch` builds it.
    fn model_call(
        channel: &Channel,
        (dialect, model, stream): (Dialect, &str, bool),
        body: Bytes,
        client: &HeaderMap,
    ) -> Request<OutBody> {
        let call = UpstreamCall {
            method: Method::POST,
            url: channel.url(dialect, model, stream),
            dialect,
            content_type: ContentType::Json,
        };
        let key = channel.keys.pick(0);
        build_request(
            (channel, key),
            call,
            OutBody::full(body),
            client,
            "00-a-b-01",
        )
        .unwrap()
    }

    #[test]
    fn a_plain_http_channel_names_its_host_as_hyper_would_and_others_leave_it_to_the_client() {
        let at = |base: &str| {
            let cfg = ChannelConfig {
                name: "c".into(),
                provider: Provider::OpenaiCompatible,
                base_url: Some(base.into()),
                models: Models::List(vec!["m".into()]),
                ..ChannelConfig::default()
            };
            Channel::from_config(&cfg, base.into(), &|_| None)
        };
        let host = |c: &Channel| {
            let req = model_call(
                c,
                (Dialect::Chat, "m", true),
                Bytes::new(),
                &HeaderMap::new(),
            );
            req.headers().get(http::header::HOST).cloned()
        };
        assert_eq!(host(&at("http://127.0.0.1:9/v1")).unwrap(), "127.0.0.1:9");
        assert_eq!(
            host(&at("http://models.internal:80/v1")).unwrap(),
            "models.internal"
        );
        assert_eq!(
            host(&at("http://models.internal/v1")).unwrap(),
            "models.internal"
        );
        assert_eq!(host(&at("http://[::1]:8000")).unwrap(), "[::1]:8000");
        // A header the channel configures still wins.
        let mut named = at("http://127.0.0.1:9/v1");
        named.extra_headers.insert(
            http::header::HOST,
            HeaderValue::from_static("models.example"),
        );
        assert_eq!(host(&named).unwrap(), "models.example");
        // Over TLS the connection's version is agreed per connection: hyper-util sets it.
        assert_eq!(host(&at("https://api.example.com/v1")), None);
        // h2c carries the authority as `:authority`.
        let mut h2c = at("http://127.0.0.1:9/v1");
        let mut profile = crate::egress::Profile::direct().unwrap();
        profile.http = crate::config::UpstreamHttp::Http2;
        h2c.egress = Some(Arc::new(profile));
        assert_eq!(host(&h2c), None);
    }

    #[test]
    fn client_credentials_never_go_upstream_and_the_channel_key_does() {
        let mut client = HeaderMap::new();
        client.insert("authorization", "Bearer lt_client".parse().unwrap());
        client.insert("x-api-key", "lt_client".parse().unwrap());
        client.insert("cookie", "a=b".parse().unwrap());
        client.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let req = model_call(
            &channel(Provider::Openai),
            (Dialect::Chat, "m", true),
            Bytes::from_static(b"{}"),
            &client,
        );
        assert_eq!(req.headers()["authorization"], "Bearer sk-canary");
        assert!(req.headers()["authorization"].is_sensitive());
        assert!(!req.headers().contains_key("x-api-key"));
        assert!(!req.headers().contains_key("cookie"));
        assert_eq!(req.uri(), "http://127.0.0.1:9/v1/chat/completions");
        let req = model_call(
            &channel(Provider::Anthropic),
            (Dialect::Messages, "m", true),
            Bytes::new(),
            &client,
        );
        assert_eq!(req.headers()["x-api-key"], "sk-canary");
        assert!(!req.headers().contains_key("authorization"));
        assert_eq!(req.headers()["anthropic-version"], "2023-06-01");
        let mut gemini = channel(Provider::Gemini);
        gemini.base_url = "http://127.0.0.1:9".into();
        let req = model_call(
            &gemini,
            (Dialect::Gemini, "gemini-2.5-flash", true),
            Bytes::new(),
            &client,
        );
        assert_eq!(req.headers()["x-goog-api-key"], "sk-canary");
        assert!(req.headers()["x-goog-api-key"].is_sensitive());
        assert!(!req.headers().contains_key("authorization"));
        assert!(!req.headers().contains_key("x-api-key"));
        assert_eq!(
            req.uri(),
            "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
    }

    fn azure(api_version: Option<&str>) -> Channel {
        let cfg = ChannelConfig {
            name: "az".into(),
            provider: Provider::AzureOpenai,
            api_key_env: Some("K".into()),
            api_version: api_version.map(str::to_string),
            models: Models::Map([("gpt-4o".to_string(), "prod-4o".to_string())].into()),
            ..ChannelConfig::default()
        };
        Channel::from_config(&cfg, "https://res.openai.azure.com/".into(), &|_| {
            Some("az-canary".into())
        })
    }

    #[test]
    fn azure_calls_name_the_deployment_and_the_api_version_and_send_the_key_as_api_key() {
        let az = azure(Some("2024-10-21"));
        let req = model_call(
            &az,
            (Dialect::Chat, "prod-4o", true),
            Bytes::new(),
            &HeaderMap::new(),
        );
        assert_eq!(
            req.uri(),
            "https://res.openai.azure.com/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(req.headers()["api-key"], "az-canary");
        assert!(req.headers()["api-key"].is_sensitive());
        assert!(!req.headers().contains_key("authorization"));
        // Objects belong to the resource; the client's query follows the version.
        assert_eq!(
            az.endpoint_url("/v1/files?purpose=batch", "prod-4o"),
            "https://res.openai.azure.com/openai/files?api-version=2024-10-21&purpose=batch"
        );
        assert_eq!(
            az.endpoint_url("/v1/embeddings", "emb"),
            "https://res.openai.azure.com/openai/deployments/emb/embeddings?api-version=2024-10-21"
        );
        assert_eq!(
            az.url(Dialect::Responses, "prod-4o", true),
            "https://res.openai.azure.com/openai/responses?api-version=2024-10-21"
        );
        // Without a version: the v1 API, the model in the body.
        let v1 = azure(None);
        assert_eq!(
            v1.url(Dialect::Chat, "prod-4o", false),
            "https://res.openai.azure.com/openai/v1/chat/completions"
        );
        assert_eq!(
            v1.endpoint_url("/v1/batches/batch_1/cancel", "m"),
            "https://res.openai.azure.com/openai/v1/batches/batch_1/cancel"
        );
    }

    #[test]
    fn a_compatible_server_gets_its_extra_headers_and_no_key_when_it_has_none() {
        let cfg = ChannelConfig {
            name: "vllm".into(),
            provider: Provider::OpenaiCompatible,
            models: Models::List(vec!["llama".into()]),
            headers: [("X-Title".to_string(), "laptime".to_string())].into(),
            header_envs: [("X-Org".to_string(), "ORG".to_string())].into(),
            ..ChannelConfig::default()
        };
        let env = |v: &str| (v == "ORG").then(|| "org-secret".to_string());
        let c = Channel::from_config(&cfg, "http://127.0.0.1:8000/v1".into(), &env);
        let req = model_call(
            &c,
            (Dialect::Chat, "llama", false),
            Bytes::new(),
            &HeaderMap::new(),
        );
        assert_eq!(req.uri(), "http://127.0.0.1:8000/v1/chat/completions");
        assert_eq!(req.headers()["x-title"], "laptime");
        assert_eq!(req.headers()["x-org"], "org-secret");
        assert!(req.headers()["x-org"].is_sensitive());
        assert!(!req.headers()["x-title"].is_sensitive());
        assert!(!req.headers().contains_key("authorization"));
        assert_eq!(
            c.endpoint_url("/v1/embeddings", "llama"),
            "http://127.0.0.1:8000/v1/embeddings"
        );
    }

    #[test]
    fn keys_take_turns_and_a_cooling_key_sits_out_until_all_are_cooling() {
        let cfg = ChannelConfig {
            name: "multi".into(),
            provider: Provider::Openai,
            api_key_envs: vec!["A".into(), "B".into(), "C".into()],
            models: Models::List(vec!["m".into()]),
            ..ChannelConfig::default()
        };
        let c = Channel::from_config(&cfg, "http://127.0.0.1:9/v1".into(), &|v| {
            Some(format!("sk-{v}"))
        });
        assert_eq!(c.keys.len(), 3);
        let picks: Vec<_> = (0..6).map(|_| c.keys.pick(0).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        // A 429 on key 1 with Retry-After 10 s: it sits out, the others serve.
        assert!(cool_key_down(
            &c,
            Some(1),
            429,
            Some(Duration::from_secs(10))
        ));
        let now = crate::clock::now_unix_us();
        let picks: Vec<_> = (0..4).map(|_| c.keys.pick(now).unwrap()).collect();
        assert!(!picks.contains(&1), "{picks:?}");
        // Refused keys too; once every key cools, the one free soonest serves.
        assert!(cool_key_down(&c, Some(0), 401, None));
        assert!(!cool_key_down(&c, Some(2), 403, None));
        assert_eq!(c.keys.pick(now), Some(1), "the 10 s cool-down ends first");
        // A key's own request goes with its own header value.
        let call = UpstreamCall {
            method: Method::GET,
            url: c.endpoint_url("/v1/files/file-1", "m"),
            dialect: Dialect::Chat,
            content_type: ContentType::Client,
        };
        let req = build_request(
            (&c, Some(2)),
            call,
            OutBody::empty(),
            &HeaderMap::new(),
            "t",
        )
        .unwrap();
        assert_eq!(req.headers()["authorization"], "Bearer sk-C");
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri(), "http://127.0.0.1:9/v1/files/file-1");
        // A single-key channel never cools its key (the model's health does the work).
        let one = channel(Provider::Openai);
        assert!(!cool_key_down(&one, Some(0), 429, None));
        assert_eq!(one.keys.pick(now), Some(0));
    }

    #[test]
    fn the_clients_tracestate_goes_upstream_only_with_the_trace_it_describes() {
        let c = channel(Provider::Openai);
        let sent = crate::ingress::trace(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ))
        .traceparent;
        let upstream = |client: &[(&str, &str)], traceparent: &str| {
            let mut headers = HeaderMap::new();
            for (k, v) in client {
                headers.insert(
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            let call = UpstreamCall {
                method: Method::POST,
                url: c.endpoint_url("/v1/chat/completions", "m"),
                dialect: Dialect::Chat,
                content_type: ContentType::Json,
            };
            build_request((&c, Some(0)), call, OutBody::empty(), &headers, traceparent)
                .unwrap()
                .headers()
                .get("tracestate")
                .map(|v| v.to_str().unwrap().to_string())
        };
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            upstream(
                &[("traceparent", tp), ("tracestate", "congo=t61rcWkgMzE")],
                &sent
            ),
            Some("congo=t61rcWkgMzE".to_string())
        );
        // A new trace (the client's context did not parse) carries none of the client's state.
        let fresh = crate::ingress::trace(Some("not a traceparent")).traceparent;
        assert_eq!(
            upstream(
                &[("traceparent", "not a traceparent"), ("tracestate", "a=1")],
                &fresh
            ),
            None
        );
        assert_eq!(upstream(&[("tracestate", "a=1")], &fresh), None);
        let long = format!("a={}", "x".repeat(TRACESTATE_MAX));
        assert_eq!(
            upstream(&[("traceparent", tp), ("tracestate", &long)], &sent),
            None
        );
    }
}
