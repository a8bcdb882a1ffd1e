//! Respond: the last phase. Commits the client to the answering attempt's stream, reads a whole
//! answer (stamped as it arrives) and answers it with `Server-Timing`, replays cached answers,
//! and answers the gateway's own errors in each dialect's error shape (one exhaustive match from
//! error class to status and body). Every exit hands the finisher to a body that records the
//! request exactly once.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body as AxumBody;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use laptime_core::dialect::google_status;
use laptime_core::observe::{whole_answer, BodyEnd, StreamSummary};
use laptime_core::timeline::{ErrorClass, InBandCarrier, Marks, Outcome};
use laptime_core::translate::stream::{translate_body, translate_error, ClientStreamOptions};
use laptime_core::views::push_ms;
use laptime_core::Dialect;
use serde_json::json;
use tokio::time::Instant;

use crate::attempt::{Answer, AnswerBody, AttemptError};
use crate::cache::{CacheKey, CachedAnswer, ResponseCache};
use crate::config::ServerConfig;
use crate::observe::{BufferedBody, WholeRead, WholeReadError};
use crate::record::{Ending, Finisher};

/// An error the gateway answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    pub class: ErrorClass,
    pub message: String,
}

impl GatewayError {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        GatewayError {
            class,
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self.class {
            ErrorClass::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorClass::Forbidden => StatusCode::FORBIDDEN,
            ErrorClass::BadRequest
            | ErrorClass::ContextLengthExceeded
            | ErrorClass::ContentFiltered => StatusCode::BAD_REQUEST,
            ErrorClass::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorClass::UnknownModel | ErrorClass::UnknownObject => StatusCode::NOT_FOUND,
            ErrorClass::OverLimit => StatusCode::TOO_MANY_REQUESTS,
            ErrorClass::ConnectFailed
            | ErrorClass::Tls
            | ErrorClass::RateLimited
            | ErrorClass::UpstreamStatus5xx
            | ErrorClass::UpstreamStatus4xx
            | ErrorClass::StreamError
            | ErrorClass::ClosedEarly
            | ErrorClass::BodyError
            | ErrorClass::InvalidBody
            | ErrorClass::UpstreamRedirect
            | ErrorClass::ProxyAuth
            | ErrorClass::ProxyFailed => StatusCode::BAD_GATEWAY,
            ErrorClass::ConnectTimeout | ErrorClass::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorClass::CircuitOpen | ErrorClass::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            ErrorClass::UpstreamAuth => StatusCode::BAD_GATEWAY,
            // Nobody reads this answer; the status is for the record.
            ErrorClass::ClientCancelled => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
            }
            ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// (OpenAI `type`, OpenAI `code`, Anthropic `type`).
    fn kinds(&self) -> (&'static str, Option<&'static str>, &'static str) {
        match self.class {
            ErrorClass::Unauthorized => (
                "invalid_request_error",
                Some("invalid_api_key"),
                "authentication_error",
            ),
            ErrorClass::Forbidden => (
                "invalid_request_error",
                Some("insufficient_scope"),
                "permission_error",
            ),
            ErrorClass::BadRequest => ("invalid_request_error", None, "invalid_request_error"),
            ErrorClass::ContextLengthExceeded => (
                "invalid_request_error",
                Some("context_length_exceeded"),
                "invalid_request_error",
            ),
            ErrorClass::ContentFiltered => (
                "invalid_request_error",
                Some("content_filter"),
                "invalid_request_error",
            ),
            ErrorClass::PayloadTooLarge => (
                "invalid_request_error",
                Some("request_too_large"),
                "request_too_large",
            ),
            ErrorClass::UnknownModel => (
                "invalid_request_error",
                Some("model_not_found"),
                "not_found_error",
            ),
            // As the provider says it of an id it does not know (no code).
            ErrorClass::UnknownObject => ("invalid_request_error", None, "not_found_error"),
            ErrorClass::ConnectTimeout | ErrorClass::Timeout => {
                ("api_error", Some("upstream_timeout"), "timeout_error")
            }
            ErrorClass::CircuitOpen => (
                "api_error",
                Some("upstream_unavailable"),
                "overloaded_error",
            ),
            ErrorClass::Overloaded => ("server_error", Some("gateway_busy"), "overloaded_error"),
            ErrorClass::OverLimit => (
                "rate_limit_error",
                Some("rate_limit_exceeded"),
                "rate_limit_error",
            ),
            ErrorClass::UpstreamAuth => (
                "api_error",
                Some("upstream_credentials_refused"),
                "api_error",
            ),
            ErrorClass::ConnectFailed
            | ErrorClass::Tls
            | ErrorClass::RateLimited
            | ErrorClass::UpstreamStatus5xx
            | ErrorClass::UpstreamStatus4xx
            | ErrorClass::StreamError
            | ErrorClass::ClosedEarly
            | ErrorClass::BodyError
            | ErrorClass::InvalidBody
            | ErrorClass::UpstreamRedirect
            | ErrorClass::ProxyAuth
            | ErrorClass::ProxyFailed => ("api_error", Some("upstream_unavailable"), "api_error"),
            ErrorClass::ClientCancelled | ErrorClass::Internal => {
                ("server_error", None, "api_error")
            }
        }
    }

    /// The body in the dialect's own error shape (Google's `status` follows from the HTTP
    /// status the gateway answers with).
    pub fn body(&self, dialect: Dialect) -> Bytes {
        let (oa_type, oa_code, an_type) = self.kinds();
        let v = match dialect {
            Dialect::Messages => {
                json!({"type": "error", "error": {"type": an_type, "message": self.message}})
            }
            Dialect::Gemini => {
                let code = self.status().as_u16();
                json!({"error": {"code": code, "message": self.message, "status": google_status(code)}})
            }
            Dialect::Chat | Dialect::Responses => {
                json!({"error": {"message": self.message, "type": oa_type, "param": null, "code": oa_code}})
            }
        };
        Bytes::from(v.to_string())
    }
}

/// Why a relayed stream ends with an error event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InBandError {
    /// A stream deadline passed.
    Timeout,
    /// The upstream closed or broke the stream before its terminal event.
    UpstreamCut,
    /// The upstream sent an event that is not valid JSON: the stream is broken there.
    UpstreamMalformed,
    /// The gateway's drain time after SIGINT/SIGTERM ran out.
    GatewayShutdown,
}

impl InBandError {
    /// The hub's kind of this error, for a translated stream.
    pub fn kind(self) -> laptime_core::translate::stream::ErrorKind {
        use laptime_core::translate::stream::ErrorKind;
        match self {
            InBandError::Timeout => ErrorKind::Timeout,
            InBandError::UpstreamCut | InBandError::UpstreamMalformed => ErrorKind::Server,
            InBandError::GatewayShutdown => ErrorKind::Overloaded,
        }
    }

    /// The HTTP status Google's error object names for it.
    fn google_code(self) -> u16 {
        match self {
            InBandError::Timeout => 504,
            InBandError::UpstreamCut
            | InBandError::UpstreamMalformed
            | InBandError::GatewayShutdown => 503,
        }
    }

    /// (code, OpenAI `type`, Anthropic `type`).
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            InBandError::Timeout => ("upstream_timeout", "timeout", "timeout_error"),
            InBandError::UpstreamCut => ("upstream_closed_early", "server_error", "api_error"),
            InBandError::UpstreamMalformed => {
                ("upstream_invalid_event", "server_error", "api_error")
            }
            InBandError::GatewayShutdown => {
                ("gateway_shutdown", "server_error", "overloaded_error")
            }
        }
    }
}

/// An error event in the dialect's own stream shape, for a failure after the head was relayed.
/// No terminal frame follows it.
pub fn in_band_error(dialect: Dialect, why: InBandError, message: &str) -> Bytes {
    let (code, oa_type, an_type) = why.names();
    let event = match dialect {
        Dialect::Chat => format!(
            "data: {}\n\n",
            json!({"error": {"message": message, "type": oa_type, "param": null, "code": code}})
        ),
        Dialect::Responses => format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "code": code, "message": message, "param": null})
        ),
        Dialect::Messages => format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": an_type, "message": message}})
        ),
        // Framed with CRLF, as Google frames its own events.
        Dialect::Gemini => {
            let code = why.google_code();
            format!(
                "data: {}\r\n\r\n",
                json!({"error": {"code": code, "message": message, "status": google_status(code)}})
            )
        }
    };
    Bytes::from(event)
}

/// Hop-by-hop and framing headers that are never relayed from upstream: the gateway frames its
/// own response.
const NOT_RELAYED: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "proxy-authenticate",
    "alt-svc",
];

/// Copies the upstream response headers a client should see.
pub fn relay_headers(upstream: &HeaderMap, out: &mut HeaderMap) {
    for (name, value) in upstream {
        if !NOT_RELAYED.contains(&name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
}

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-laptime-request-id");
/// Named by constant: a `&str` name is parsed and checked on every insert.
pub const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");
/// The client fields a translated request left out (comma-separated JSON paths).
pub const TRANSLATION_OMITTED: HeaderName =
    HeaderName::from_static("x-laptime-translation-omitted");

pub fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// Whether the client accepts trailers (`TE: trailers`).
pub fn wants_trailers(headers: &HeaderMap) -> bool {
    headers.get_all(http::header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    })
}

// === the respond phase ===

/// Where a completed answer is kept for exact repeats, when the route caches.
pub type StoreIn = Option<(Arc<ResponseCache>, CacheKey)>;

/// Answers with the attempt the client is committed to.
pub async fn answer(
    mut finisher: Finisher,
    mut answer: Answer,
    client_headers: &HeaderMap,
    server: &ServerConfig,
    total_at: Instant,
    store_in: StoreIn,
    // How the client's stream is translated, and how a cut of it may be continued.
    (client_answer, resume): (
        Option<&ClientStreamOptions>,
        Option<crate::continuation::Resume>,
    ),
) -> Response {
    let observe = server.observe;
    answer.committed();
    finisher.hold_inflight(answer.guard);
    let parts = answer.parts;
    let read = match answer.body {
        AnswerBody::Stream(mut body) => {
            let status = parts.status;
            let trailers = wants_trailers(client_headers);
            let mut own = HeaderMap::new();
            own_headers(&finisher.pending, &mut own);
            finisher.pending.unobserved = !observe;
            body.commit(finisher, status.as_u16(), trailers);
            if let Some((cache, key)) = store_in {
                body.with_capture(cache, key, content_type(&parts.headers));
            }
            if !observe {
                body.unobserved();
            }
            if let Some(resume) = resume {
                body.with_resume(resume);
            }
            let mut resp = Response::new(AxumBody::new(body));
            *resp.status_mut() = status;
            relay_headers(&parts.headers, resp.headers_mut());
            resp.headers_mut().extend(own);
            if trailers {
                resp.headers_mut().insert(
                    http::header::TRAILER,
                    HeaderValue::from_static(
                        "X-Laptime-Upstream-Ms, X-Laptime-TTFT-Ms, X-Laptime-Cached-Tokens, X-Laptime-Cache-Write-Tokens, X-Laptime-Hedge",
                    ),
                );
            }
            return resp;
        }
        AnswerBody::Whole(incoming) => {
            let t0 = finisher.pending.t0;
            WholeRead::read(incoming, t0, total_at, server.max_answer_bytes).await
        }
        AnswerBody::Read(read) => read,
    };
    let how = WholeAnswerOf::new(
        (
            &answer.channel.name,
            answer.upstream,
            &answer.upstream_model,
        ),
        finisher.pending.dialect,
        client_answer,
    );
    let max = server.max_answer_bytes;
    whole(finisher, parts, read, how, answer.start, max, store_in)
}

/// Which channel gave a whole answer, in which dialect, and how it is translated for the client.
struct WholeAnswerOf<'a> {
    channel: &'a str,
    upstream: Dialect,
    translate: Option<ClientStreamOptions>,
}

impl<'a> WholeAnswerOf<'a> {
    fn new(
        (channel, upstream, upstream_model): (&'a str, Dialect, &str),
        client: Dialect,
        client_answer: Option<&ClientStreamOptions>,
    ) -> Self {
        WholeAnswerOf {
            channel,
            upstream,
            translate: client_answer
                .filter(|_| upstream != client)
                .map(|opts| opts.for_model(upstream_model)),
        }
    }
}

/// Answers a whole answer (read with its bytes stamped where they arrived) with
/// `Server-Timing`.
fn whole(
    mut finisher: Finisher,
    parts: http::response::Parts,
    read: WholeRead,
    how: WholeAnswerOf<'_>,
    start: std::time::Duration,
    max_answer_bytes: usize,
    store_in: StoreIn,
) -> Response {
    let WholeAnswerOf {
        channel,
        upstream,
        translate,
    } = how;
    let mut summary = StreamSummary::whole(read.first_byte, read.end);
    let bytes = match read.bytes {
        Ok(bytes) => bytes,
        Err(WholeReadError::TooLarge) => {
            let err = GatewayError::new(
                ErrorClass::InvalidBody,
                format!("the upstream answer is over the gateway's {max_answer_bytes}-byte limit"),
            );
            let ending = Ending {
                status: err.status().as_u16(),
                outcome: Outcome::UpstreamError,
                error_class: Some(ErrorClass::InvalidBody),
                timeout_kind: None,
                stream: Some(summary),
            };
            return error(finisher, &err, ending);
        }
        Err(WholeReadError::Timeout) => {
            let err = GatewayError::new(
                ErrorClass::Timeout,
                "the upstream missed the total deadline",
            );
            let ending = Ending {
                status: err.status().as_u16(),
                outcome: Outcome::Timeout,
                error_class: Some(ErrorClass::Timeout),
                timeout_kind: Some(laptime_core::timeline::DeadlineKind::Total),
                stream: Some(summary),
            };
            return error(finisher, &err, ending);
        }
    };
    let end = if read.broke {
        BodyEnd::Error
    } else {
        BodyEnd::Eof
    };
    // Judged in the upstream's dialect, like a stream's marks.
    let judged = whole_answer(upstream, parts.status.as_u16(), end, &bytes);
    summary.outcome = Some(judged.outcome);
    summary.error_class = judged.error_class;
    summary.tokens = judged.tokens;
    summary.text_delta_count = u32::from(judged.has_text);
    let ending = Ending {
        status: parts.status.as_u16(),
        outcome: judged.outcome,
        error_class: judged.error_class,
        timeout_kind: None,
        stream: Some(summary),
    };
    if read.broke {
        let err = GatewayError::new(
            ErrorClass::BodyError,
            format!("upstream channel {channel:?} broke off its answer"),
        );
        let ending = Ending {
            status: err.status().as_u16(),
            ..ending
        };
        return error(finisher, &err, ending);
    }
    let mut extra = HeaderMap::new();
    let (status, bytes) = match translate.as_ref() {
        None => (parts.status, bytes),
        Some(opts) => {
            match translated(
                upstream,
                finisher.pending.dialect,
                parts.status,
                &bytes,
                opts,
            ) {
                Ok(t) => {
                    extra.insert(
                        http::header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    t
                }
                Err(e) => {
                    let err = GatewayError::new(
                    ErrorClass::InvalidBody,
                    format!("the answer of upstream channel {channel:?} could not be translated: {e}"),
                );
                    let ending = Ending {
                        status: err.status().as_u16(),
                        outcome: Outcome::UpstreamError,
                        error_class: Some(ErrorClass::InvalidBody),
                        ..ending
                    };
                    return error(finisher, &err, ending);
                }
            }
        }
    };
    let ending = Ending {
        status: status.as_u16(),
        ..ending
    };
    if upstream == Dialect::Responses && translate.is_none() && status.is_success() {
        // A stored response lives on this channel: calls that name it must come here.
        if let Some(id) = laptime_core::endpoint::response_id(&bytes) {
            finisher
                .pending
                .objects
                .push((laptime_core::endpoint::ObjectKind::Response, id));
        }
    }
    if let Some(timing) = server_timing(&finisher.pending.marks, summary.marks.upstream_done, start)
    {
        extra.insert(SERVER_TIMING, timing);
        finisher.pending.in_band = InBandCarrier::ServerTiming;
    }
    if let (Some((cache, key)), Outcome::Completed) = (store_in, judged.outcome) {
        cache.keep(
            key,
            CachedAnswer {
                status: status.as_u16(),
                content_type: content_type(&parts.headers),
                body: bytes.clone(),
                stream: false,
            },
        );
    }
    buffered(finisher, status, parts.headers, extra, bytes, ending)
}

/// `Server-Timing` of a whole answer: the winning attempt's duration (`upstream`, up to the
/// answer's end) and its time to the head, from its dispatch `start`.
pub(crate) fn server_timing(
    marks: &Marks,
    upstream_done: Option<std::time::Duration>,
    start: std::time::Duration,
) -> Option<HeaderValue> {
    let up = laptime_core::timeline::between(marks.upstream_start, upstream_done)?;
    let mut timing = String::with_capacity(64);
    timing.push_str("upstream;dur=");
    push_ms(&mut timing, up);
    if let Some(h) = marks.upstream_headers.and_then(|h| h.checked_sub(start)) {
        timing.push_str(", upstream-headers;dur=");
        push_ms(&mut timing, h);
    }
    Some(header_value(&timing))
}

/// A whole answer in the client's dialect: a 2xx body through the hub, an error status and
/// body as the client dialect's error.
fn translated(
    upstream: Dialect,
    client: Dialect,
    status: StatusCode,
    body: &[u8],
    opts: &ClientStreamOptions,
) -> Result<(StatusCode, Bytes), laptime_core::translate::stream::TranslateError> {
    if status.is_success() {
        let b = translate_body(upstream, client, body, opts)?;
        return Ok((status, Bytes::from(b)));
    }
    let (s, b) = translate_error(upstream, client, status.as_u16(), body);
    Ok((StatusCode::from_u16(s).unwrap_or(status), Bytes::from(b)))
}

/// No attempt gave an answer: the last failure, in the dialect's shape.
pub fn failed(finisher: Finisher, e: AttemptError) -> Response {
    let message = match e.deadline {
        // The provider's own body may echo part of the channel's key: never relayed.
        None if e.class == ErrorClass::UpstreamAuth => {
            "the upstream provider refused the gateway's credentials for this model; \
             the gateway's operator must fix the channel's key"
                .to_string()
        }
        None if e.class == ErrorClass::UpstreamRedirect => {
            "the upstream answered with a redirect, which the gateway never follows".to_string()
        }
        None if e.class == ErrorClass::ProxyAuth => {
            "the channel's HTTP proxy refused the gateway's proxy credentials; \
             the gateway's operator must fix the channel's proxy"
                .to_string()
        }
        Some(kind) => format!(
            "no upstream channel answered within the {} deadline",
            kind.as_str()
        ),
        None => format!(
            "no upstream channel could be reached ({})",
            e.class.as_str()
        ),
    };
    let err = GatewayError::new(e.class, message);
    let ending = Ending {
        status: err.status().as_u16(),
        // A deadline is named exactly when one fired (a connect through a proxy that never
        // answered is `proxy_failed` and a timeout all the same).
        outcome: if e.deadline.is_some() {
            Outcome::Timeout
        } else {
            Outcome::UpstreamError
        },
        error_class: Some(e.class),
        timeout_kind: e.deadline,
        stream: None,
    };
    error(finisher, &err, ending)
}

/// Replays a cached answer: the same bytes (a streamed answer replays its SSE), no upstream call,
/// no upstream figures in-band; the record says `cached` with null ttft/upstream.
pub fn cached(mut finisher: Finisher, hit: CachedAnswer) -> Response {
    finisher.pending.cached = true;
    let status = StatusCode::from_u16(hit.status).unwrap_or(StatusCode::OK);
    let ending = Ending {
        status: hit.status,
        outcome: Outcome::CacheHit,
        error_class: None,
        timeout_kind: None,
        stream: None,
    };
    let mut headers = HeaderMap::new();
    if let Some(ct) = hit.content_type.as_deref() {
        headers.insert(http::header::CONTENT_TYPE, header_value(ct));
    }
    headers.insert("x-laptime-cache", HeaderValue::from_static("hit"));
    buffered(
        finisher,
        status,
        HeaderMap::new(),
        headers,
        hit.body,
        ending,
    )
}

/// Answers with a gateway error in the dialect's shape, recorded as rejected.
pub fn reject(finisher: Finisher, err: GatewayError) -> Response {
    let ending = Ending::rejected(err.status().as_u16(), err.class);
    error(finisher, &err, ending)
}

/// A request refused by a rate limit of its token or workspace: 429 in the client's dialect,
/// with `Retry-After` and the dialect's own rate-limit headers. No upstream was called.
pub fn over_limit(mut finisher: Finisher, refused: &crate::limits::Refused) -> Response {
    let err = GatewayError::new(ErrorClass::OverLimit, refused.message());
    finisher.pending.refused_by = Some(refused.limit);
    let ending = Ending {
        status: StatusCode::TOO_MANY_REQUESTS.as_u16(),
        outcome: laptime_core::timeline::Outcome::RateLimited,
        error_class: Some(ErrorClass::OverLimit),
        timeout_kind: None,
        stream: None,
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(after) = refused.retry_after {
        headers.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from(crate::limits::retry_after_secs(after)),
        );
    }
    let quotas = crate::limits::Quotas {
        requests: refused.requests,
        tokens: refused.tokens,
    };
    rate_limit_headers(finisher.pending.dialect, &quotas, &mut headers);
    let body = err.body(finisher.pending.dialect);
    buffered(
        finisher,
        err.status(),
        HeaderMap::new(),
        headers,
        body,
        ending,
    )
}

/// The dialect's rate-limit headers for the binding request and token limits: OpenAI's
/// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (resets as `1m30s`), Anthropic's
/// `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}` (resets as RFC 3339 times);
/// Google sends none. Each replaces a header of the same name (an upstream's describes the
/// gateway's provider key, not the client); the others are left as they are.
pub fn rate_limit_headers(dialect: Dialect, quotas: &crate::limits::Quotas, h: &mut HeaderMap) {
    // Names per kind: limit, remaining, reset.
    let names = match dialect {
        Dialect::Chat | Dialect::Responses => [
            [
                "x-ratelimit-limit-requests",
                "x-ratelimit-remaining-requests",
                "x-ratelimit-reset-requests",
            ],
            [
                "x-ratelimit-limit-tokens",
                "x-ratelimit-remaining-tokens",
                "x-ratelimit-reset-tokens",
            ],
        ],
        Dialect::Messages => [
            [
                "anthropic-ratelimit-requests-limit",
                "anthropic-ratelimit-requests-remaining",
                "anthropic-ratelimit-requests-reset",
            ],
            [
                "anthropic-ratelimit-tokens-limit",
                "anthropic-ratelimit-tokens-remaining",
                "anthropic-ratelimit-tokens-reset",
            ],
        ],
        Dialect::Gemini => return,
    };
    for ([limit, remaining, reset], quota) in
        names.into_iter().zip([quotas.requests, quotas.tokens])
    {
        let Some(q) = quota else { continue };
        let reset_value = if dialect == Dialect::Messages {
            let reset_us = crate::clock::now_unix_us()
                .saturating_add(i64::try_from(q.reset.as_micros()).unwrap_or(0));
            laptime_core::views::rfc3339(reset_us - reset_us % 1_000_000)
        } else {
            openai_duration(q.reset)
        };
        h.insert(HeaderName::from_static(limit), HeaderValue::from(q.limit));
        h.insert(
            HeaderName::from_static(remaining),
            HeaderValue::from(q.remaining),
        );
        if let Ok(v) = HeaderValue::try_from(reset_value) {
            h.insert(HeaderName::from_static(reset), v);
        }
    }
}

/// A duration as OpenAI writes its resets: `20ms`, `1s`, `6m0s`, `1m30.5s`.
fn openai_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (m, rest_ms) = (ms / 60_000, ms % 60_000);
    let secs = if rest_ms % 1_000 == 0 {
        format!("{}s", rest_ms / 1_000)
    } else {
        format!("{}s", rest_ms as f64 / 1_000.0)
    };
    if m == 0 {
        secs
    } else {
        format!("{m}m{secs}")
    }
}

pub(crate) fn error(finisher: Finisher, err: &GatewayError, ending: Ending) -> Response {
    let body = err.body(finisher.pending.dialect);
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if err.class == ErrorClass::Overloaded {
        // A budget frees as requests in flight finish: a second is a fair wait.
        headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    buffered(
        finisher,
        err.status(),
        HeaderMap::new(),
        headers,
        body,
        ending,
    )
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A whole answer: upstream headers relayed, then the gateway's own.
pub(crate) fn buffered(
    mut finisher: Finisher,
    status: StatusCode,
    upstream_headers: HeaderMap,
    extra: HeaderMap,
    body: Bytes,
    ending: Ending,
) -> Response {
    let mut own = HeaderMap::new();
    own_headers(&finisher.pending, &mut own);
    let len = body.len();
    finisher.pending.exchange.bytes_out = Some(len as u64);
    let mut resp = Response::new(AxumBody::new(BufferedBody::new(body, finisher, ending)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    relay_headers(&upstream_headers, h);
    for (k, v) in extra {
        if let Some(k) = k {
            h.insert(k, v);
        }
    }
    h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
    h.extend(own);
    resp
}

/// The gateway's own headers on every answer: the request id, and the client fields a
/// translation left out on purpose (so that nothing is dropped silently).
pub(crate) fn own_headers(pending: &crate::record::Pending, h: &mut HeaderMap) {
    h.insert(REQUEST_ID, header_value(&pending.request_id));
    if !pending.translation_omitted.is_empty() {
        h.insert(
            TRANSLATION_OMITTED,
            header_value(&pending.translation_omitted.join(", ")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_take_each_dialects_shape() {
        let e = GatewayError::new(ErrorClass::UnknownModel, "model \"x\" is not served here");
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        let oa: serde_json::Value = serde_json::from_slice(&e.body(Dialect::Chat)).unwrap();
        assert_eq!(oa["error"]["code"], "model_not_found");
        assert_eq!(oa["error"]["type"], "invalid_request_error");
        let an: serde_json::Value = serde_json::from_slice(&e.body(Dialect::Messages)).unwrap();
        assert_eq!(an["type"], "error");
        assert_eq!(an["error"]["type"], "not_found_error");
        assert_eq!(an["error"]["message"], "model \"x\" is not served here");
        let g: serde_json::Value = serde_json::from_slice(&e.body(Dialect::Gemini)).unwrap();
        assert_eq!(g["error"]["code"], 404);
        assert_eq!(g["error"]["status"], "NOT_FOUND");
        assert_eq!(g["error"]["message"], "model \"x\" is not served here");
        let limited = GatewayError::new(ErrorClass::Overloaded, "busy");
        let g: serde_json::Value = serde_json::from_slice(&limited.body(Dialect::Gemini)).unwrap();
        assert_eq!(
            (&g["error"]["code"], &g["error"]["status"]),
            (&503.into(), &"UNAVAILABLE".into())
        );
        let event = in_band_error(Dialect::Gemini, InBandError::Timeout, "late");
        let text = std::str::from_utf8(&event).unwrap();
        let data = text
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\r\n\r\n")
            .unwrap();
        let g: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(g["error"]["status"], "DEADLINE_EXCEEDED");
    }

    #[test]
    fn statuses_match_the_issue() {
        let s = |c| GatewayError::new(c, "").status().as_u16();
        assert_eq!(s(ErrorClass::Unauthorized), 401);
        assert_eq!(s(ErrorClass::BadRequest), 400);
        assert_eq!(s(ErrorClass::PayloadTooLarge), 413);
        assert_eq!(s(ErrorClass::ConnectFailed), 502);
    }

    #[test]
    fn framing_headers_are_not_relayed() {
        let mut up = HeaderMap::new();
        up.insert("content-length", "5".parse().unwrap());
        up.insert("transfer-encoding", "chunked".parse().unwrap());
        up.insert("x-request-id", "abc".parse().unwrap());
        let mut out = HeaderMap::new();
        relay_headers(&up, &mut out);
        assert_eq!(out.len(), 1);
        assert!(out.contains_key("x-request-id"));
    }

    #[test]
    fn te_trailers_is_found_among_other_tokens() {
        let mut h = HeaderMap::new();
        h.insert("te", "gzip, Trailers".parse().unwrap());
        assert!(wants_trailers(&h));
        assert!(!wants_trailers(&HeaderMap::new()));
    }
}
