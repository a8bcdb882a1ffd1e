//! The request timeline: marks as offsets from t0, the outcome, the attempts, and the finished
//! record that the store keeps and the views read.
//!
//! Every mark is an offset from one origin (t0, the moment the gateway has the request head),
//! measured by the edges on one monotonic clock. A mark that did not happen is `None`, never zero.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::usage::Tokens;
use crate::Dialect;

/// The marks of one request, each an offset from t0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marks {
    /// Duration of the token lookup and check.
    pub auth: Option<Duration>,
    /// Duration of reading the downstream body (exposes slow uploads).
    pub body_read: Option<Duration>,
    /// Duration of the rate-limit and budget checks; absent when no limit applies.
    #[serde(default)]
    pub admission: Option<Duration>,
    /// Duration of channel selection.
    pub distribution: Option<Duration>,
    /// t1: the winning attempt was dispatched.
    pub upstream_start: Option<Duration>,
    /// t2: the winning attempt's response head was parsed.
    pub upstream_headers: Option<Duration>,
    /// First response-body byte of the winning attempt (comments included).
    pub first_byte: Option<Duration>,
    /// t3: first non-heartbeat SSE event.
    pub first_event: Option<Duration>,
    /// t4: first effective output.
    pub first_effective: Option<Duration>,
    /// t5: first non-empty visible text.
    pub first_visible: Option<Duration>,
    /// Last effective output, the end of the decode window.
    pub last_effective: Option<Duration>,
    /// t6: terminal event, or the end or break of the body without one.
    pub upstream_done: Option<Duration>,
    /// t7: the gateway finished relaying (last byte handed to the client, or the client left).
    pub handler_done: Option<Duration>,
}

/// How a request ended. One per request; a close is never a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    /// Length, content filter or max tokens.
    Incomplete,
    /// An error status, or an in-stream error event.
    UpstreamError,
    /// EOF or reset without a terminal event.
    UpstreamClosedEarly,
    ClientCancelled,
    Timeout,
    /// Auth, bad input or no route: no upstream was called.
    Rejected,
    CacheHit,
    /// Refused by a limit or budget of the client's token or workspace: no upstream was called.
    RateLimited,
    /// Cut by the gateway itself: its drain time after SIGINT/SIGTERM ran out.
    GatewayShutdown,
    /// Found in flight after a restart: the gateway process ended (killed, crashed) before the
    /// request did; the record keeps the marks it had reached and no end marks.
    GatewayCrashed,
}

impl Outcome {
    pub const ALL: [Outcome; 11] = [
        Outcome::Completed,
        Outcome::Incomplete,
        Outcome::UpstreamError,
        Outcome::UpstreamClosedEarly,
        Outcome::ClientCancelled,
        Outcome::Timeout,
        Outcome::Rejected,
        Outcome::CacheHit,
        Outcome::RateLimited,
        Outcome::GatewayShutdown,
        Outcome::GatewayCrashed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Incomplete => "incomplete",
            Outcome::UpstreamError => "upstream_error",
            Outcome::UpstreamClosedEarly => "upstream_closed_early",
            Outcome::ClientCancelled => "client_cancelled",
            Outcome::Timeout => "timeout",
            Outcome::Rejected => "rejected",
            Outcome::CacheHit => "cache_hit",
            Outcome::RateLimited => "rate_limited",
            Outcome::GatewayShutdown => "gateway_shutdown",
            Outcome::GatewayCrashed => "gateway_crashed",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// Whether the request produced the answer the client asked for.
    pub fn is_success(self) -> bool {
        matches!(
            self,
            Outcome::Completed | Outcome::Incomplete | Outcome::CacheHit
        )
    }
}

/// Whose fault an error is (DESIGN.md §1: `upstream`, `client`, `gateway`): the answer decides
/// retries, status codes and alerts, and the read-back and metrics say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The provider failed or misbehaved.
    Upstream,
    /// The client sent something wrong or went away.
    Client,
    /// The gateway itself.
    Gateway,
}

impl Fault {
    pub const ALL: [Fault; 3] = [Fault::Upstream, Fault::Client, Fault::Gateway];

    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Upstream => "upstream",
            Fault::Client => "client",
            Fault::Gateway => "gateway",
        }
    }
}

/// Why an attempt or a request failed, with a low-cardinality name for stores and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// TCP connect refused or unreachable.
    ConnectFailed,
    ConnectTimeout,
    Tls,
    /// Upstream answered 429.
    RateLimited,
    /// Upstream answered 5xx. (snake_case alone would say `upstream_status5xx`; the name is
    /// the one `as_str` gives and the store keeps.)
    #[serde(rename = "upstream_status_5xx")]
    UpstreamStatus5xx,
    /// Upstream answered another 4xx (a problem with the request as sent).
    #[serde(rename = "upstream_status_4xx")]
    UpstreamStatus4xx,
    /// An error event inside a 200 stream.
    StreamError,
    /// The body ended or broke without a terminal event.
    ClosedEarly,
    /// The body broke with an I/O error (reset).
    BodyError,
    /// A 2xx whose body is not a valid answer (an HTML error page, JSON cut short).
    InvalidBody,
    Timeout,
    ClientCancelled,
    /// Missing or invalid credentials.
    Unauthorized,
    /// The token lacks the scope for this route.
    Forbidden,
    BadRequest,
    PayloadTooLarge,
    UnknownModel,
    /// Every candidate channel was ejected by its circuit breaker.
    CircuitOpen,
    /// Upstream answered a redirect (3xx): never followed, so the channel's base URL is wrong
    /// or the provider moved.
    UpstreamRedirect,
    /// Upstream answered 401 or 403: the channel's credentials were refused (the operator's
    /// to fix; another channel may still answer).
    UpstreamAuth,
    /// A bounded resource of the gateway is full (the byte budget for request bodies in
    /// flight): refused with `Retry-After`, before any of it was used.
    Overloaded,
    /// A bug or resource problem inside the gateway.
    Internal,
    /// Upstream answered that the input (with the output cap) is over the model's context
    /// window: the same model can never take it, a larger one might.
    ContextLengthExceeded,
    /// Upstream's content filter refused the request: no channel is asked again.
    ContentFiltered,
    /// A rate limit or budget of the client's own token or workspace refused the request
    /// before any upstream was called (an upstream's 429 is `RateLimited`).
    OverLimit,
    /// The channel's HTTP proxy answered 407 to the tunnel: it refused the gateway's proxy
    /// credentials (the operator's to fix; another channel may go another way).
    ProxyAuth,
    /// The channel's HTTP proxy could not be reached, or refused or failed the tunnel (403 by
    /// its policy, 502 when it could not reach the upstream, an answer that is not HTTP): the
    /// upstream was never reached.
    ProxyFailed,
    /// The call names a provider object (a file, a batch, a stored response) that the
    /// caller's workspace did not create through this gateway, or that retention forgot.
    UnknownObject,
}

impl ErrorClass {
    /// Every class, in declaration order (a test checks the order against the discriminants,
    /// so a class added to the enum but not here fails it).
    pub const ALL: [ErrorClass; 28] = [
        ErrorClass::ConnectFailed,
        ErrorClass::ConnectTimeout,
        ErrorClass::Tls,
        ErrorClass::RateLimited,
        ErrorClass::UpstreamStatus5xx,
        ErrorClass::UpstreamStatus4xx,
        ErrorClass::StreamError,
        ErrorClass::ClosedEarly,
        ErrorClass::BodyError,
        ErrorClass::InvalidBody,
        ErrorClass::Timeout,
        ErrorClass::ClientCancelled,
        ErrorClass::Unauthorized,
        ErrorClass::Forbidden,
        ErrorClass::BadRequest,
        ErrorClass::PayloadTooLarge,
        ErrorClass::UnknownModel,
        ErrorClass::CircuitOpen,
        ErrorClass::UpstreamRedirect,
        ErrorClass::UpstreamAuth,
        ErrorClass::Overloaded,
        ErrorClass::Internal,
        ErrorClass::ContextLengthExceeded,
        ErrorClass::ContentFiltered,
        ErrorClass::OverLimit,
        ErrorClass::ProxyAuth,
        ErrorClass::ProxyFailed,
        ErrorClass::UnknownObject,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::ConnectFailed => "connect_failed",
            ErrorClass::ConnectTimeout => "connect_timeout",
            ErrorClass::Tls => "tls",
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::UpstreamStatus5xx => "upstream_status_5xx",
            ErrorClass::UpstreamStatus4xx => "upstream_status_4xx",
            ErrorClass::StreamError => "stream_error",
            ErrorClass::ClosedEarly => "closed_early",
            ErrorClass::BodyError => "body_error",
            ErrorClass::InvalidBody => "invalid_body",
            ErrorClass::Timeout => "timeout",
            ErrorClass::ClientCancelled => "client_cancelled",
            ErrorClass::Unauthorized => "unauthorized",
            ErrorClass::Forbidden => "forbidden",
            ErrorClass::BadRequest => "bad_request",
            ErrorClass::PayloadTooLarge => "payload_too_large",
            ErrorClass::UnknownModel => "unknown_model",
            ErrorClass::CircuitOpen => "circuit_open",
            ErrorClass::UpstreamRedirect => "upstream_redirect",
            ErrorClass::UpstreamAuth => "upstream_auth",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::Internal => "internal",
            ErrorClass::ContextLengthExceeded => "context_length_exceeded",
            ErrorClass::ContentFiltered => "content_filtered",
            ErrorClass::OverLimit => "over_limit",
            ErrorClass::ProxyAuth => "proxy_auth",
            ErrorClass::ProxyFailed => "proxy_failed",
            ErrorClass::UnknownObject => "unknown_object",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorClass> {
        ErrorClass::ALL.into_iter().find(|c| c.as_str() == s)
    }

    pub fn fault(self) -> Fault {
        use ErrorClass::*;
        match self {
            ConnectFailed | ConnectTimeout | Tls | RateLimited | UpstreamStatus5xx
            | StreamError | ClosedEarly | BodyError | InvalidBody | Timeout | CircuitOpen
            | UpstreamRedirect => Fault::Upstream,
            // A 4xx from upstream answers the client's request as forwarded.
            UpstreamStatus4xx
            | ClientCancelled
            | Unauthorized
            | Forbidden
            | BadRequest
            | PayloadTooLarge
            | UnknownModel
            | ContextLengthExceeded
            | ContentFiltered
            | OverLimit
            | UnknownObject => Fault::Client,
            // The proxy is the deployment's way out, set up by the gateway's operator.
            UpstreamAuth | Overloaded | Internal | ProxyAuth | ProxyFailed => Fault::Gateway,
        }
    }

    /// Whether another attempt (on this or another channel) could succeed, before any byte was
    /// relayed.
    pub fn retryable(self) -> bool {
        use ErrorClass::*;
        matches!(
            self,
            ConnectFailed
                | ConnectTimeout
                | Tls
                | RateLimited
                | UpstreamStatus5xx
                | ClosedEarly
                | BodyError
                | Timeout
                | UpstreamAuth
                | UpstreamRedirect
                | ProxyAuth
                | ProxyFailed
        )
    }

    /// The class of an upstream status code, if it is an error: a redirect (never followed)
    /// and refused credentials (the channel's key) are their own classes.
    pub fn from_status(status: u16) -> Option<ErrorClass> {
        match status {
            300..=399 => Some(ErrorClass::UpstreamRedirect),
            401 | 403 => Some(ErrorClass::UpstreamAuth),
            429 => Some(ErrorClass::RateLimited),
            500..=599 => Some(ErrorClass::UpstreamStatus5xx),
            400..=499 => Some(ErrorClass::UpstreamStatus4xx),
            _ => None,
        }
    }
}

/// Which attempt won a hedged race; `none` when the request was not hedged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hedge {
    #[default]
    None,
    Primary,
    Hedge,
}

impl Hedge {
    pub fn as_str(self) -> &'static str {
        match self {
            Hedge::None => "none",
            Hedge::Primary => "primary",
            Hedge::Hedge => "hedge",
        }
    }

    pub fn parse(s: &str) -> Option<Hedge> {
        [Hedge::None, Hedge::Primary, Hedge::Hedge]
            .into_iter()
            .find(|h| h.as_str() == s)
    }
}

/// How the client got the request's timing in-band, as the respond path sent it (noted on the
/// pending record when the bytes were handed to the client's connection, not derived later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InBandCarrier {
    /// Nothing: no comment, no trailers, no `Server-Timing`.
    #[default]
    NotSent,
    /// The SSE comment before the terminal frame.
    SseComment,
    /// HTTP trailers after the last byte (the client sent `TE: trailers`), without the comment.
    Trailers,
    /// Both the SSE comment and the trailers.
    SseCommentAndTrailers,
    /// The `Server-Timing` header of a whole answer: the upstream's duration and its time to
    /// the head.
    ServerTiming,
    /// The `Server-Timing` header of an answer relayed as it came (an endpoint's download): its
    /// time to the head only, since the end was not known when the head went out.
    ServerTimingHead,
}

impl InBandCarrier {
    pub const ALL: [InBandCarrier; 6] = [
        InBandCarrier::NotSent,
        InBandCarrier::SseComment,
        InBandCarrier::Trailers,
        InBandCarrier::SseCommentAndTrailers,
        InBandCarrier::ServerTiming,
        InBandCarrier::ServerTimingHead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InBandCarrier::NotSent => "none",
            InBandCarrier::SseComment => "sse_comment",
            InBandCarrier::Trailers => "trailers",
            InBandCarrier::SseCommentAndTrailers => "sse_comment_and_trailers",
            InBandCarrier::ServerTiming => "server_timing",
            InBandCarrier::ServerTimingHead => "server_timing_head",
        }
    }

    pub fn parse(s: &str) -> Option<InBandCarrier> {
        InBandCarrier::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// This, with the SSE comment sent too.
    pub fn and_comment(self) -> InBandCarrier {
        match self {
            InBandCarrier::Trailers | InBandCarrier::SseCommentAndTrailers => {
                InBandCarrier::SseCommentAndTrailers
            }
            _ => InBandCarrier::SseComment,
        }
    }

    /// This, with the trailers sent too.
    pub fn and_trailers(self) -> InBandCarrier {
        match self {
            InBandCarrier::SseComment | InBandCarrier::SseCommentAndTrailers => {
                InBandCarrier::SseCommentAndTrailers
            }
            _ => InBandCarrier::Trailers,
        }
    }

    /// Whether the SSE comment was sent.
    pub fn comment(self) -> bool {
        matches!(
            self,
            InBandCarrier::SseComment | InBandCarrier::SseCommentAndTrailers
        )
    }

    /// Whether the trailers were sent.
    pub fn trailers(self) -> bool {
        matches!(
            self,
            InBandCarrier::Trailers | InBandCarrier::SseCommentAndTrailers
        )
    }
}

/// Which deadline fired, for `Outcome::Timeout` and a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadlineKind {
    /// The TCP (and TLS) connect.
    Connect,
    /// The upstream response head, from dispatch.
    Headers,
    /// The first non-heartbeat SSE event, from dispatch.
    FirstEvent,
    /// The first effective output, from dispatch.
    FirstOutput,
    /// Silence: no byte for this long.
    Idle,
    /// No effective output for this long (heartbeats do not count).
    Progress,
    /// The whole request, from t0.
    Total,
}

impl DeadlineKind {
    pub const ALL: [DeadlineKind; 7] = [
        DeadlineKind::Connect,
        DeadlineKind::Headers,
        DeadlineKind::FirstEvent,
        DeadlineKind::FirstOutput,
        DeadlineKind::Idle,
        DeadlineKind::Progress,
        DeadlineKind::Total,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeadlineKind::Connect => "connect",
            DeadlineKind::Headers => "headers",
            DeadlineKind::FirstEvent => "first_event",
            DeadlineKind::FirstOutput => "first_output",
            DeadlineKind::Idle => "idle",
            DeadlineKind::Progress => "progress",
            DeadlineKind::Total => "total",
        }
    }

    pub fn parse(s: &str) -> Option<DeadlineKind> {
        DeadlineKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Why an attempt was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptRole {
    /// The first attempt of the request.
    Primary,
    /// An attempt after an earlier one failed.
    Failover,
    /// A second attempt racing the primary.
    Hedge,
    /// An attempt that continued the answer another one had started for the client and was
    /// cut (an assistant prefill of the text the client had).
    Continuation,
}

impl AttemptRole {
    pub const ALL: [AttemptRole; 4] = [
        AttemptRole::Primary,
        AttemptRole::Failover,
        AttemptRole::Hedge,
        AttemptRole::Continuation,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptRole::Primary => "primary",
            AttemptRole::Failover => "failover",
            AttemptRole::Hedge => "hedge",
            AttemptRole::Continuation => "continuation",
        }
    }

    pub fn parse(s: &str) -> Option<AttemptRole> {
        AttemptRole::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// One upstream call, with its own marks (offsets from the request's t0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub channel: String,
    pub role: AttemptRole,
    pub won: bool,
    /// Upstream HTTP status, absent when no head arrived.
    pub status: Option<u16>,
    pub error_class: Option<ErrorClass>,
    pub start: Option<Duration>,
    pub headers: Option<Duration>,
    pub first_byte: Option<Duration>,
    pub end: Option<Duration>,
    /// How far the new connection this attempt opened got; all absent when it reused a pooled
    /// one (and on records written before the marks existed).
    #[serde(default)]
    pub connection: ConnectionMarks,
    /// The W3C span id drawn for this attempt at its dispatch: the parent id of the
    /// `traceparent` it sent upstream, and its exported span's id. Absent on records written
    /// before attempts had their own.
    #[serde(default)]
    pub span_id: Option<[u8; 8]>,
}

/// The steps of opening an upstream connection, each an offset from t0 (like every mark), for
/// an attempt that opened one: absent when the step was not taken (no proxy: no tunnel; plain
/// HTTP: no TLS) or not reached (the attempt failed before it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionMarks {
    /// The TCP connection was established (to the proxy, when there is one).
    pub connected: Option<Duration>,
    /// The proxy answered the HTTP CONNECT with 200: the tunnel to the upstream was open.
    pub tunnel: Option<Duration>,
    /// The TLS handshake with the upstream was done.
    pub tls: Option<Duration>,
}

impl ConnectionMarks {
    /// Whether no step was reached (a reused connection, or none opened).
    pub fn is_empty(&self) -> bool {
        *self == ConnectionMarks::default()
    }
}

impl Attempt {
    /// An attempt dispatched at `start` (offset from t0), nothing known of it yet.
    pub fn dispatched(channel: &str, role: AttemptRole, start: Duration) -> Self {
        Attempt {
            channel: channel.to_owned(),
            role,
            won: false,
            status: None,
            error_class: None,
            start: Some(start),
            headers: None,
            first_byte: None,
            end: None,
            connection: ConnectionMarks::default(),
            span_id: None,
        }
    }
}

/// The request's shape, so that latency can be compared under controlled conditions. Parsed from
/// the request body's top-level fields only; never content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestShape {
    pub max_output_tokens: Option<u64>,
    pub reasoning_effort: Option<String>,
    pub tool_count: Option<u32>,
    pub tool_choice: Option<String>,
    /// `text`, `json_object` or `json_schema`.
    pub response_format: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
}

/// The finished record of one request: exactly one per request that reached the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub request_id: String,
    pub workspace_id: Option<String>,
    /// The id of the token used (never the token).
    pub key_id: Option<String>,
    /// Wall-clock time of t0, unix microseconds.
    pub created_at_us: i64,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub channel: Option<String>,
    pub group: Option<String>,
    /// The dialect the client spoke.
    pub dialect: Dialect,
    /// The dialect of the channel whose answer the client got (the last attempt's when none
    /// won); absent when no upstream was called (refused, cache hit). It differs from `dialect`
    /// exactly when the exchange was translated.
    pub upstream_dialect: Option<Dialect>,
    pub stream: bool,
    /// HTTP status the client got.
    pub status: u16,
    pub outcome: Outcome,
    /// Which timer fired, for `Outcome::Timeout`.
    pub timeout_kind: Option<DeadlineKind>,
    pub error_class: Option<ErrorClass>,
    pub classification: crate::slow::Classification,
    pub flags: Vec<crate::slow::Flag>,
    pub marks: Marks,
    pub tokens: Tokens,
    pub event_count: u32,
    pub text_delta_count: u32,
    /// Requests in flight on the chosen channel at dispatch (this one included).
    pub channel_inflight: Option<u32>,
    pub attempts: Vec<Attempt>,
    pub hedge: Hedge,
    pub failover_count: u32,
    pub cached: bool,
    pub shape: RequestShape,
    pub region: Option<String>,
    /// The gateway instance that served the request (`[server] instance`, by default the host
    /// name and listen port), so that a fleet's records say which member answered; absent on
    /// records written before instances were named.
    #[serde(default)]
    pub instance: Option<String>,
    pub trace_id: Option<String>,
    /// What the request cost (`None`: billed, but no configured price covers it).
    #[serde(default)]
    pub cost: Option<crate::cost::Cost>,
    /// The limit or budget that refused the request (outcome `rate_limited`).
    #[serde(default)]
    pub refused_by: Option<crate::limit::Limit>,
    /// Which endpoint was called and what crossed the gateway.
    #[serde(default)]
    pub exchange: Exchange,
    /// How the client got the timing in-band, as sent; absent on records written before it
    /// was noted (the views then derive it, and say so).
    #[serde(default)]
    pub in_band: Option<InBandCarrier>,
}

/// What kind of call a request was, and what crossed the gateway for it, beside the timeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    pub endpoint: crate::endpoint::Endpoint,
    /// Bytes of the request body the client sent (absent when it was not read).
    pub bytes_in: Option<u64>,
    /// Bytes of the answer's body relayed to the client (absent when not counted).
    pub bytes_out: Option<u64>,
    /// Which of its channel's keys (`api_key_envs`, from 0) served the request; absent for a
    /// channel with one key or none, and when no upstream was called.
    pub key_index: Option<u32>,
}

impl RequestRecord {
    /// Whether the request and its answer were translated between dialects.
    pub fn translated(&self) -> bool {
        self.upstream_dialect.is_some_and(|u| u != self.dialect)
    }

    /// Whose fault the request's failure was; `None` for a success. From the error class when
    /// the record has one (the stored `error_class`, so old rows get it too); otherwise from the
    /// outcome: a client that left, or a refusal, is the client's; an upstream error, close or
    /// deadline, the upstream's.
    pub fn fault(&self) -> Option<Fault> {
        if self.outcome.is_success() {
            return None;
        }
        if let Some(c) = self.error_class {
            return Some(c.fault());
        }
        match self.outcome {
            Outcome::ClientCancelled | Outcome::Rejected | Outcome::RateLimited => {
                Some(Fault::Client)
            }
            Outcome::UpstreamError | Outcome::UpstreamClosedEarly | Outcome::Timeout => {
                Some(Fault::Upstream)
            }
            Outcome::GatewayShutdown | Outcome::GatewayCrashed => Some(Fault::Gateway),
            Outcome::Completed | Outcome::Incomplete | Outcome::CacheHit => None,
        }
    }
}

/// The offset of a mark from t0, truncated to the microsecond the store keeps, so that every
/// figure computed in flight (in-band, `Server-Timing`) equals the one computed from the row.
pub fn offset(t0_to_mark: Duration) -> Duration {
    Duration::from_micros(u64::try_from(t0_to_mark.as_micros()).unwrap_or(u64::MAX))
}

/// Saturating difference of two marks: absent when either is absent.
pub fn between(from: Option<Duration>, to: Option<Duration>) -> Option<Duration> {
    Some(to?.saturating_sub(from?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn between_is_absent_when_either_mark_is_absent() {
        let d = Some(Duration::from_millis(5));
        assert_eq!(between(None, d), None);
        assert_eq!(between(d, None), None);
        assert_eq!(
            between(Some(Duration::from_millis(2)), d),
            Some(Duration::from_millis(3))
        );
    }

    #[test]
    fn between_saturates_instead_of_going_negative() {
        assert_eq!(
            between(
                Some(Duration::from_millis(9)),
                Some(Duration::from_millis(2))
            ),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_crashed_request_is_a_gateway_failure_named_like_its_serde_form() {
        assert!(!Outcome::GatewayCrashed.is_success());
        assert_eq!(
            Outcome::parse("gateway_crashed"),
            Some(Outcome::GatewayCrashed)
        );
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        let mut names = std::collections::HashSet::new();
        assert!(Outcome::ALL.iter().all(|o| names.insert(o.as_str())));
    }

    #[test]
    fn names_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::parse(c.as_str()), Some(c));
        }
        for h in [Hedge::None, Hedge::Primary, Hedge::Hedge] {
            assert_eq!(Hedge::parse(h.as_str()), Some(h));
        }
        for k in DeadlineKind::ALL {
            assert_eq!(DeadlineKind::parse(k.as_str()), Some(k));
        }
        for r in AttemptRole::ALL {
            assert_eq!(AttemptRole::parse(r.as_str()), Some(r));
        }
    }

    #[test]
    fn every_error_class_round_trips_its_name_and_says_whose_fault_and_whether_to_retry() {
        // ALL lists every variant once, in declaration order.
        for (i, c) in ErrorClass::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i, "{c:?} out of order in ErrorClass::ALL");
        }
        assert_eq!(
            ErrorClass::ALL.len(),
            ErrorClass::UnknownObject as usize + 1,
            "the last variant is listed"
        );
        let mut names = std::collections::HashSet::new();
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::parse(c.as_str()), Some(c));
            assert!(names.insert(c.as_str()), "{} named twice", c.as_str());
            let serialized = serde_json::to_value(c).unwrap();
            assert_eq!(serialized, c.as_str(), "serde and as_str agree");
            assert!(Fault::ALL.contains(&c.fault()));
            // Only a failure of the upstream is worth another attempt, or a channel whose key
            // or proxy was refused (the operator's to fix; another channel's key or way out
            // may be good).
            let channels_own = [
                ErrorClass::UpstreamAuth,
                ErrorClass::ProxyAuth,
                ErrorClass::ProxyFailed,
            ];
            if c.retryable() && !channels_own.contains(&c) {
                assert_eq!(c.fault(), Fault::Upstream, "{c:?}");
            }
        }
        assert_eq!(ErrorClass::parse("no_such_class"), None);
        for f in Fault::ALL {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
        assert_eq!(ErrorClass::Internal.fault(), Fault::Gateway);
        // A proxy that refuses or cannot be reached is the deployment's, and another channel
        // (another way out) may still answer.
        for c in [ErrorClass::ProxyAuth, ErrorClass::ProxyFailed] {
            assert_eq!(c.fault(), Fault::Gateway);
            assert!(c.retryable());
        }
        assert_eq!(ErrorClass::Unauthorized.fault(), Fault::Client);
        // An object id the workspace never made is the caller's mistake, never retried.
        assert_eq!(ErrorClass::UnknownObject.fault(), Fault::Client);
        assert!(!ErrorClass::UnknownObject.retryable());
    }

    #[test]
    fn upstream_status_classes_say_whose_fault() {
        assert_eq!(ErrorClass::from_status(200), None);
        assert!(ErrorClass::from_status(503).is_some_and(|c| c.retryable()));
        assert!(ErrorClass::from_status(429).is_some_and(|c| c.retryable()));
        assert_eq!(
            ErrorClass::from_status(302),
            Some(ErrorClass::UpstreamRedirect)
        );
        assert_eq!(ErrorClass::from_status(403), Some(ErrorClass::UpstreamAuth));
        let bad = ErrorClass::from_status(400);
        assert_eq!(bad.map(|c| c.fault()), Some(Fault::Client));
        assert!(!bad.is_some_and(|c| c.retryable()));
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// A completed Chat request with nothing else known, for tests to fill in.
    pub(crate) fn record() -> RequestRecord {
        RequestRecord {
            request_id: "req_test".into(),
            workspace_id: Some("ws".into()),
            key_id: None,
            created_at_us: 0,
            model: None,
            provider: None,
            channel: None,
            group: None,
            dialect: Dialect::Chat,
            upstream_dialect: None,
            stream: true,
            status: 200,
            outcome: Outcome::Completed,
            timeout_kind: None,
            error_class: None,
            classification: crate::slow::Classification::Ok,
            flags: Vec::new(),
            marks: Marks::default(),
            tokens: Tokens::default(),
            event_count: 0,
            text_delta_count: 0,
            channel_inflight: None,
            attempts: Vec::new(),
            hedge: Hedge::None,
            failover_count: 0,
            cached: false,
            shape: RequestShape::default(),
            region: None,
            instance: None,
            trace_id: None,
            cost: None,
            refused_by: None,
            exchange: Default::default(),
            in_band: None,
        }
    }
}
