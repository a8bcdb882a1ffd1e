//! One request as the client saw it: the per-request record of `report.json`.

use serde::Serialize;

/// Every figure of one request. Marks are milliseconds from the request's t0 (microsecond
/// precision); a mark that did not happen is `null`, never 0.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RequestRecord {
    /// Order of dispatch within its phase (warm-up and measured each count from 0).
    pub index: u64,
    /// `A` (`--target`), `B` (`--compare`), `C`, … (further `--compare`s).
    pub target: String,
    pub warmup: bool,
    /// Open loop: when the arrival was due, from the start of the phase.
    pub scheduled_ms: Option<f64>,
    /// When t0 was, from the start of the phase.
    pub start_ms: f64,
    /// Open loop: t0 − scheduled (the generator's own lateness).
    pub schedule_lag_ms: Option<f64>,
    pub status: Option<u16>,
    /// `completed`, `incomplete` or `failed`.
    pub outcome: String,
    /// The failure kind when `outcome` is `failed`: `http_<status>`, `connect`, `request`,
    /// `timeout`, `stream_error`, `closed_early`, `reset`, `error_body`, `invalid_body`.
    pub failure: Option<String>,
    /// A short description of the failure (no secrets: the token is never echoed).
    pub error: Option<String>,
    /// The response was an SSE stream.
    pub streamed: bool,
    pub headers_ms: Option<f64>,
    pub first_byte_ms: Option<f64>,
    pub first_event_ms: Option<f64>,
    pub first_effective_ms: Option<f64>,
    pub first_visible_ms: Option<f64>,
    pub last_effective_ms: Option<f64>,
    pub end_ms: Option<f64>,
    pub body_end_ms: Option<f64>,
    /// Tokens of the synthetic user message, counted with the contract's tokenizer.
    pub prompt_tokens: u32,
    /// From usage (normalised: Anthropic's cache reads and writes added back).
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// `usage` or `tokenizer` (an estimate over the output text: flagged).
    pub output_tokens_source: Option<String>,
    pub reasoning_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    /// Non-heartbeat SSE events and non-empty text deltas.
    pub event_count: u32,
    pub text_delta_count: u32,
    pub itl_ms: Option<f64>,
    /// Streams: the gaps between consecutive response-body chunks that carried effective
    /// output, in arrival order (empty when fewer than two chunks did).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output_gaps_ms: Vec<f64>,
    pub output_tps_per_user: Option<f64>,
    /// Response bytes received.
    pub body_bytes: u64,
    /// The body was larger than the bench keeps (output text and the timing comment were
    /// looked for in the kept part only).
    pub body_truncated: bool,
    /// When the target is laptime.
    pub gateway: Option<GatewayTiming>,
}

/// What laptime said about its own view of the request, and client minus gateway.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GatewayTiming {
    pub request_id: Option<String>,
    /// `sse_comment`, `server_timing`, or `none` (laptime answered, without timing values).
    pub source: String,
    /// Gateway: upstream done − upstream start (t6 − t1).
    pub upstream_ms: Option<f64>,
    /// Gateway: first upstream byte − upstream start.
    pub ttft_ms: Option<f64>,
    pub hedge: Option<String>,
    pub cached_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    /// Client `first_byte_ms` − gateway `ttft_ms` (streams).
    pub first_byte_minus_ttft_ms: Option<f64>,
    /// Client `end_ms` − gateway `upstream_ms` (streams), or client `body_end_ms` − the
    /// `Server-Timing` upstream duration (non-streamed).
    pub end_minus_upstream_ms: Option<f64>,
}

impl RequestRecord {
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }
}
