//! The workload contract: everything that decides what a `laptime bench` run measured, written
//! at the top of `report.json` and readable back (`--contract FILE`) so that a run can be
//! repeated exactly. Secrets (the token) are never part of it.

use std::collections::BTreeMap;

use laptime_core::Dialect;
use serde::{Deserialize, Serialize};

/// Version of the report layout.
pub(crate) const SCHEMA: &str = "laptime-bench/1";

/// How percentiles are computed (the same as AIPerf, GenAI-Perf, LLMPerf and vLLM bench).
pub(crate) const PERCENTILE_METHOD: &str = "linear interpolation between closest ranks (numpy.percentile default, Hyndman-Fan type 7): for sorted x[0..n), h = (n-1)*p, value = x[floor h] + (h - floor h) * (x[ceil h] - x[floor h]); mean is the arithmetic mean; min and max are exact";

/// The window throughput is computed over.
pub(crate) const WINDOW: &str = "from the start of the first measured request to the end (last byte) of the last measured request, per target; warm-up requests are outside the window";

/// Which requests each figure leaves out. Nothing is left out silently.
pub(crate) const EXCLUSIONS: [&str; 6] = [
    "warm-up requests are excluded from every figure; they are listed in `requests` with warmup=true and counted in summary.warmup",
    "failed requests (HTTP status >= 400, connection failure, timeout, in-stream error event, stream closed or reset before its terminal event, unreadable body) are excluded from every latency, ITL, speed and token figure; they are counted by kind in `failures` and listed in `requests` with the marks they reached",
    "a latency metric leaves out successful requests that lack its mark (for example first_visible_ms of an answer with no text, or any stream mark of a non-streamed answer) and reports how many as `absent`",
    "itl_ms and output_tps_per_user need a streamed answer with at least 2 output tokens and a first and last effective output; other successful requests are `absent` there",
    "output tokens come from the response's usage; when usage has no output count they are counted with the contract's tokenizer over the streamed or returned output text and the record says output_tokens_source=tokenizer (the summary counts them in output_tokens_estimated)",
    "incomplete answers (length / max tokens / content filter) are successful and counted in `outcomes`; they are not failures",
];

/// A base URL and the endpoint it resolves to for the contract's dialect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TargetSpec {
    /// `A` for `--target`, `B`, `C`, … for each `--compare` in order.
    pub label: String,
    /// The base URL as an SDK takes it (`http://host/v1` for OpenAI, `http://host` for Anthropic).
    pub base_url: String,
    /// The endpoint called.
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InputTokens {
    /// Mean prompt length in tokens of the contract's tokenizer.
    pub mean: u32,
    /// Standard deviation; 0 means every prompt has exactly `mean` tokens.
    pub sd: f64,
    pub distribution: String,
    /// A real BPE tokenizer (tiktoken-rs; its vocabularies ship inside the crate).
    pub tokenizer: String,
    pub prompt: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputTokens {
    /// The requested limit; absent when none is sent.
    pub max_output_tokens: Option<u32>,
    /// The request field that carries it for this dialect.
    pub request_field: Option<String>,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
}

/// Closed loop (a fixed number of clients, each sending its next request when the last one
/// ended) or open loop (arrivals on a schedule, whatever the answers do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Load {
    ClosedLoop {
        concurrency: u32,
    },
    OpenLoop {
        rate_per_s: f64,
        /// `constant` (evenly spaced) or `poisson` (exponential gaps).
        arrivals: Arrivals,
        /// Arrivals beyond this many requests in flight wait (and show as schedule lag).
        max_inflight: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Arrivals {
    Constant,
    Poisson,
}

/// When the measured phase stops issuing requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Stop {
    /// This many measured requests in all (split over the targets in compare mode).
    Requests { requests: u64 },
    /// No new request after this many seconds; requests already sent run to their end.
    Duration { duration_s: f64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Timeouts {
    /// Whole request, from send to the last byte.
    pub request_s: f64,
    /// TCP (and TLS) connect.
    pub connect_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Contract {
    pub schema: String,
    pub targets: Vec<TargetSpec>,
    pub dialect: Dialect,
    /// The exact model name sent.
    pub model: String,
    /// The route or group the token maps to, as declared by `--group` (the gateway picks the
    /// group from the token; this is a label for the report).
    pub group: Option<String>,
    pub stream: bool,
    pub input_tokens: InputTokens,
    pub output_tokens: OutputTokens,
    pub sampling: Sampling,
    pub reasoning_effort: Option<String>,
    /// Number of tools sent (from `extra_body.tools`); the bench sends none of its own.
    pub tools: u64,
    /// Extra top-level body fields, merged over the generated body (they win).
    pub extra_body: Option<serde_json::Value>,
    pub load: Load,
    pub stop: Stop,
    /// Warm-up requests per target, sent before the measured phase and excluded.
    pub warmup_requests_per_target: u64,
    /// How requests are spread over the targets in compare mode.
    pub interleave: Option<String>,
    pub retries: String,
    pub timeouts: Timeouts,
    /// Seeds prompt lengths, prompt words and Poisson gaps.
    pub seed: u64,
    /// How the token is sent (the token itself is never written).
    pub auth: String,
    pub percentile_method: String,
    pub window: String,
    /// What every per-request figure means.
    pub definitions: BTreeMap<String, String>,
    pub exclusions: Vec<String>,
}

/// The definitions written into every contract (DESIGN.md §1, measured at the client).
pub(crate) fn definitions() -> BTreeMap<String, String> {
    let d = [
        ("t0", "the client is about to hand the request to its HTTP connection (after the body is built); every mark is an offset from it, in milliseconds with microsecond precision, and a mark that did not happen is null, never 0"),
        ("headers_ms", "response head parsed (includes connect time when the pool had no idle connection)"),
        ("first_byte_ms", "first response-body byte (SSE comments included)"),
        ("first_event_ms", "first dispatched SSE event that is not a heartbeat (comments, ping, keepalive are not events); the gateway's SSE scanner and classifier"),
        ("first_effective_ms", "first effective output: non-empty text, reasoning, refusal, tool-call arguments or custom tool input delta (the gateway's classifier)"),
        ("first_visible_ms", "first non-empty visible text delta"),
        ("last_effective_ms", "last effective output delta (AIPerf's request end: the last non-empty chunk)"),
        ("end_ms", "the terminal event arrived ([DONE], response.completed|incomplete|failed, message_stop, error), else the body ended or broke; for a non-streamed answer, the body's last byte"),
        ("body_end_ms", "the response body's last byte (end of stream)"),
        ("itl_ms", "AIPerf's inter-token latency: (last_effective_ms - first_effective_ms) / (output_tokens - 1), needs output_tokens >= 2; 'end' is AIPerf's request end, the last non-empty output chunk (the terminal frame that follows is end_ms); never computed by counting SSE events"),
        ("output_tps_per_user", "AIPerf's output token throughput per user: 1000 / itl_ms tokens per second"),
        ("throughput", "output_tokens_per_s = sum of output tokens of successful measured requests / window seconds; requests_per_s = successful measured requests / window seconds"),
        ("gateway", "when the target is laptime: the values of its `: x-laptime-timing` SSE comment (streams) or `Server-Timing: upstream;dur=` (non-streamed), and client minus gateway: first_byte_ms - ttft_ms and end_ms - upstream_ms (streams), body_end_ms - upstream dur (non-streamed); the difference is network, gateway overhead before dispatch and relay"),
        ("compare", "ratios are B / A of the same statistic (A = --target, B = --compare; with more --compare targets C, D, ... each is compared with A the same way), measured in one run with requests interleaved A B A B ... (A B C A B C ... for three)"),
        ("output_gap_ms", "inter-chunk gap: time between two consecutive response-body chunks that carry effective output (as read from the socket; a chunk holding several deltas counts once), pooled over every gap of every successful streamed request; n counts gaps, absent counts streams with fewer than two such chunks"),
    ];
    d.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(crate) const INPUT_DISTRIBUTION: &str = "normal(mean, sd) rounded to a whole token and clamped to at least 1 (exactly mean when sd = 0); the two requests of an A/B pair get the same length";
pub(crate) const PROMPT: &str = "synthetic: the user message is a seeded random sequence of common English words, each one token of the tokenizer with its leading space, so the message has exactly the drawn number of tokens (the record's prompt_tokens re-counts it); every request gets different words, so no prefix cache can serve one request from another";
pub(crate) const OUTPUT_NOTE: &str = "the answer's length is up to the model; the distribution of output tokens observed is in the summary";
pub(crate) const RETRIES: &str = "none: every request is sent once and its outcome recorded";
pub(crate) const INTERLEAVE: &str = "A B A B ...: request i goes to target number i mod (number of targets), so A when i is even and B when odd with two targets (warm-up too)";

impl Contract {
    /// Refills the fixed texts, so that a contract read from an older report is compared with
    /// the definitions this build measures by.
    pub(crate) fn normalise(&mut self) {
        self.schema = SCHEMA.to_string();
        self.input_tokens.distribution = INPUT_DISTRIBUTION.to_string();
        self.input_tokens.prompt = PROMPT.to_string();
        self.output_tokens.note = OUTPUT_NOTE.to_string();
        self.retries = RETRIES.to_string();
        self.percentile_method = PERCENTILE_METHOD.to_string();
        self.window = WINDOW.to_string();
        self.definitions = definitions();
        self.exclusions = EXCLUSIONS.iter().map(|s| s.to_string()).collect();
        self.interleave = (self.targets.len() > 1).then(|| INTERLEAVE.to_string());
        self.tools = self
            .extra_body
            .as_ref()
            .and_then(|b| b.get("tools"))
            .and_then(|t| t.as_array())
            .map_or(0, |a| a.len() as u64);
        self.auth = auth_kind(self.dialect).to_string();
        self.output_tokens.request_field = self
            .output_tokens
            .max_output_tokens
            .map(|_| max_tokens_field(self.dialect).to_string());
    }

    /// Reads the contract of a `report.json` (or a file holding the contract alone).
    pub(crate) fn read(path: &std::path::Path) -> Result<Contract, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let contract = value.get("contract").cloned().unwrap_or(value);
        serde_json::from_value(contract)
            .map_err(|e| format!("{}: not a laptime bench contract: {e}", path.display()))
    }
}

/// The field that carries the output limit. Chat uses `max_completion_tokens` (OpenAI's
/// current name, which reasoning models require); Anthropic requires `max_tokens`; Gemini's is
/// inside `generationConfig`.
pub(crate) fn max_tokens_field(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Chat => "max_completion_tokens",
        Dialect::Responses => "max_output_tokens",
        Dialect::Messages => "max_tokens",
        Dialect::Gemini => "generationConfig.maxOutputTokens",
    }
}

pub(crate) fn auth_kind(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Chat | Dialect::Responses => "Authorization: Bearer <token> when a token is given",
        Dialect::Messages => {
            "x-api-key: <token> when a token is given; anthropic-version: 2023-06-01"
        }
        Dialect::Gemini => "x-goog-api-key: <token> when a token is given",
    }
}

/// The endpoint an SDK would call for `base_url` (the OpenAI SDKs append `/chat/completions` or
/// `/responses` to a base that ends in `/v1`; the Anthropic SDK appends `/v1/messages` to the
/// host; the Gemini SDKs append `/v1beta/models/{model}:…` to the host, the model and
/// stream-ness in the path). A base given with the endpoint already on it is taken as it is.
pub(crate) fn endpoint(base_url: &str, dialect: Dialect, model: &str, stream: bool) -> String {
    let base = base_url.trim_end_matches('/');
    if dialect == Dialect::Gemini {
        return if base.contains("/v1beta/models/") {
            base.to_string()
        } else {
            format!("{base}{}", dialect.target(model, stream))
        };
    }
    let suffix = match dialect {
        Dialect::Gemini => "",
        Dialect::Chat => "/chat/completions",
        Dialect::Responses => "/responses",
        Dialect::Messages => {
            if base.ends_with("/v1") {
                "/messages"
            } else {
                "/v1/messages"
            }
        }
    };
    if base.ends_with(suffix) || (dialect == Dialect::Messages && base.ends_with("/v1/messages")) {
        base.to_string()
    } else {
        format!("{base}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_follow_the_sdks() {
        assert_eq!(
            endpoint("http://h:1/v1", Dialect::Chat, "m", true),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            endpoint("http://h:1/v1/", Dialect::Responses, "m", true),
            "http://h:1/v1/responses"
        );
        assert_eq!(
            endpoint("http://h:1", Dialect::Messages, "m", true),
            "http://h:1/v1/messages"
        );
        assert_eq!(
            endpoint("http://h:1/v1", Dialect::Messages, "m", true),
            "http://h:1/v1/messages"
        );
        assert_eq!(
            endpoint("http://h:1/v1/chat/completions", Dialect::Chat, "m", true),
            "http://h:1/v1/chat/completions"
        );
    }
}
