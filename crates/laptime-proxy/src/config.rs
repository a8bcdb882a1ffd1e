//! Typed, strict configuration: TOML with `deny_unknown_fields`, environment overrides
//! (`LAPTIME_LISTEN`, `LAPTIME_DATA_DIR`, `LAPTIME_REGION`), and a validation pass that reports
//! every problem with its key. Secrets are only ever named by environment variable.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use laptime_core::circuit::CircuitConfig;
use laptime_core::slow::Thresholds;
use laptime_core::translate::request::ReasoningTable;
use laptime_core::Dialect;
use serde::{Deserialize, Serialize};

mod read;
#[cfg(test)]
mod reference;
pub use read::ReadConfig;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub shared: SharedConfig,
    #[serde(default)]
    pub thresholds: Thresholds,
    #[serde(default)]
    pub channels: Vec<ChannelConfig>,
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prices: Vec<PriceConfig>,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub budgets: BudgetsConfig,
    /// `[telemetry]`: request spans over OTLP (`crate::traces`).
    #[serde(default)]
    pub telemetry: crate::traces::TelemetryConfig,
}

/// `[limits]`: how admission estimates what a request will count against tokens-per-minute
/// limits (the limits themselves are stored per workspace and token: `laptime limits set`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Output tokens assumed for a request that names no `max_tokens` (or its dialect's
    /// equivalent); the estimate is settled with the real count when the request ends.
    pub output_estimate_tokens: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            output_estimate_tokens: 1024,
        }
    }
}

/// `[budgets]`: the calendar budgets follow (the budgets themselves are stored per workspace
/// and token: `laptime budget set`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    /// The IANA time zone whose days and months budget periods are (`"Europe/Berlin"`): a
    /// period starts at local midnight there. Read at start; every instance of a fleet must
    /// use the same one (the spend sums are shared).
    pub zone: String,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        BudgetsConfig { zone: "UTC".into() }
    }
}

impl BudgetsConfig {
    /// The configured zone (an unknown name is refused by validation).
    pub fn zone(&self) -> Result<laptime_core::limit::Zone, String> {
        laptime_core::limit::Zone::named(&self.zone).map_err(|e| format!("budgets.zone: {e}"))
    }
}

/// `[[prices]]`: what a model costs, per million tokens in USD, from a day on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// A model as clients name it, or `"*"` for every model not priced by name.
    pub model: String,
    /// Only for requests this channel served (overrides the model's price there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
    /// Cache writes (Anthropic's five-minute writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
    /// Anthropic's one-hour cache writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_per_mtok: Option<f64>,
    /// Reasoning tokens when the provider bills them apart from output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_per_mtok: Option<f64>,
    /// `YYYY-MM-DD` (UTC): the price applies to requests from that day's midnight on.
    #[serde(default = "default_effective_from")]
    pub effective_from: String,
}

fn default_effective_from() -> String {
    "1970-01-01".into()
}

/// `server.upstream_idle_per_thread` by default: a burst of 1,000 streams then leaves 256 idle
/// connections on two threads, which kept RSS 15 s after it within 1.5× of idle; keeping
/// them all took 2.1× (`benchmarks/README.md`, item 23).
pub const UPSTREAM_IDLE_PER_THREAD: usize = 128;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub data_dir: PathBuf,
    /// Largest request body accepted, bytes.
    pub max_body_bytes: usize,
    /// Bytes of request bodies held at once, over all requests in flight; a request that would
    /// go over it is refused with 503 and `Retry-After` before its body is read.
    pub body_budget_bytes: usize,
    /// Bytes of a stream held before the client is committed to it (read ahead while a backup
    /// remains); at the cap the stream is released to the client.
    pub max_held_bytes: usize,
    /// Largest non-streamed upstream answer read, bytes (it is read whole to be judged); a
    /// bigger one is answered 502 `invalid_body`.
    pub max_answer_bytes: usize,
    /// Time a client has to send a request's whole head, from accept or (on a kept-alive
    /// connection) from the end of the previous answer; then the connection is closed. It is
    /// also how long an HTTP/1.1 connection may sit idle between requests.
    pub header_read_timeout_ms: u64,
    /// Client connections open at once at most; 0 = derived from the process's file
    /// descriptor limit (raised to its hard limit at start), keeping headroom for upstream
    /// connections and the store.
    pub max_connections: usize,
    /// How long in-flight streams may run on after SIGINT/SIGTERM before they are cut.
    pub drain_s: u64,
    /// Records the recorder queue holds before it drops (and counts) new ones. By default
    /// 20,000: a PostgreSQL batch of 8,192 records writes for 0.4–0.65 s (0.94 s once in 10 M
    /// rows), and the queue takes in what arrives meanwhile: 1 s at 20k records/s.
    pub recorder_queue: usize,
    /// How often the in-flight registry is written to `inflight.journal` beside the store
    /// (only when it changed), so a restart after a crash records the requests that were in
    /// flight and the records not committed yet; 0 = never (a crash then loses them).
    pub inflight_snapshot_ms: u64,
    /// Coarse region label stored with every record.
    pub region: Option<String>,
    /// This instance's name in the records it writes (also `LAPTIME_INSTANCE`); by default
    /// `laptime serve` names it after the host and its listen port (`web-3:8080`).
    pub instance: Option<String>,
    /// Connect timeout for upstream calls.
    pub connect_timeout_ms: u64,
    /// Idle HTTP/1.1 connections each serving thread keeps to one upstream (scheme, host and
    /// port) for later calls, up to 90 s each; a connection coming back past the cap is
    /// closed. A burst of more calls at once than the threads keep opens the rest anew (and
    /// over TLS shakes hands again); each kept one holds about 23 KB while idle
    /// (`benchmarks/README.md`, item 23).
    pub upstream_idle_per_thread: usize,
    /// Serve `GET /metrics` without a token (default: a `read` or `admin` token is needed).
    pub metrics_public: bool,
    /// Threads serving connections, each with its own runtime and upstream pool; 0 = one per
    /// available core.
    pub threads: usize,
    /// Observe streams (scan, classify, stamp marks). `false` exists only to measure what the
    /// timeline costs: streams are relayed blind and recorded with head and end marks only.
    pub observe: bool,
    /// Write the in-band timing comment in Gemini streams too (after the `finishReason` event).
    /// Off by default: the official Gemini SDKs (google-genai for Python, @google/genai) fail on
    /// any line of a stream that is not `data:`, comments included; their clients read the
    /// timing from trailers (`TE: trailers`) or the request log instead.
    pub gemini_timing_comment: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./laptime-data"),
            max_body_bytes: 32 * 1024 * 1024,
            body_budget_bytes: 256 * 1024 * 1024,
            max_held_bytes: 1024 * 1024,
            max_answer_bytes: 64 * 1024 * 1024,
            header_read_timeout_ms: 20_000,
            max_connections: 0,
            drain_s: 30,
            recorder_queue: 20_000,
            inflight_snapshot_ms: 100,
            region: None,
            instance: None,
            connect_timeout_ms: 10_000,
            upstream_idle_per_thread: UPSTREAM_IDLE_PER_THREAD,
            metrics_public: false,
            threads: 0,
            observe: true,
            gemini_timing_comment: false,
        }
    }
}

impl ServerConfig {
    /// Whether a client of `dialect` gets the in-band timing comment (a Gemini client only when
    /// configured: its official SDKs fail on a comment line).
    pub fn timing_comment(&self, dialect: Dialect) -> bool {
        dialect != Dialect::Gemini || self.gemini_timing_comment
    }
}

/// State shared by a fleet through Redis; without `redis_url`, per instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SharedConfig {
    /// `redis://host:6379/0` (also `LAPTIME_REDIS_URL`): circuits opened and `Retry-After`
    /// cool-downs apply fleet-wide. Its password is never printed.
    #[serde(
        serialize_with = "redacted_url",
        skip_serializing_if = "Option::is_none"
    )]
    pub redis_url: Option<String>,
    /// The prefix of every key laptime writes, so that fleets can share one Redis.
    pub key_prefix: String,
    /// How long a lookup in a shared response cache waits for Redis before it is a miss, ms.
    pub cache_lookup_ms: u64,
}

impl Default for SharedConfig {
    fn default() -> Self {
        SharedConfig {
            redis_url: None,
            key_prefix: "laptime".into(),
            cache_lookup_ms: 5,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// A PostgreSQL store shared by a fleet (`postgres://user:password@host:5432/db`; also
    /// `LAPTIME_STORE_URL`); absent: the SQLite file in `server.data_dir`. Its password is
    /// never printed.
    #[serde(
        serialize_with = "redacted_url",
        skip_serializing_if = "Option::is_none"
    )]
    pub url: Option<String>,
    /// Rows older than this many days are deleted by a background job.
    pub retention_days: u32,
    /// How often the retention job runs, seconds.
    pub retention_interval_s: u64,
}

fn redacted_url<S: serde::Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(u) => s.serialize_str(&laptime_store::pg::redacted(u)),
        None => s.serialize_none(),
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: None,
            retention_days: 30,
            retention_interval_s: 3600,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    /// OpenAI: Chat Completions and Responses, and every other OpenAI endpoint.
    Openai,
    /// Azure OpenAI: the OpenAI API on a resource's deployments (`api-key` header; with
    /// `api_version`, `/openai/deployments/{deployment}/…?api-version=`, else `/openai/v1/…`).
    AzureOpenai,
    /// A server that speaks OpenAI's API (vLLM, Ollama, OpenRouter, Groq, Together, DeepSeek,
    /// Mistral, LM Studio, …): OpenAI's paths under its base URL, a bearer key if any.
    OpenaiCompatible,
    /// Anthropic or compatible: Messages.
    Anthropic,
    /// Google Gemini (the generativelanguage API) or compatible: Gemini.
    Gemini,
    /// The built-in simulated upstream (every dialect).
    Sim,
}

impl Provider {
    pub const ALL: [Provider; 6] = [
        Provider::Openai,
        Provider::AzureOpenai,
        Provider::OpenaiCompatible,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Sim,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::AzureOpenai => "azure-openai",
            Provider::OpenaiCompatible => "openai-compatible",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Sim => "sim",
        }
    }

    /// The dialect a channel of this provider is called in when the client speaks one it does
    /// not serve (the sim serves every dialect, so it has none).
    pub fn native(self) -> Option<Dialect> {
        match self {
            Provider::Openai | Provider::AzureOpenai | Provider::OpenaiCompatible => {
                Some(Dialect::Chat)
            }
            Provider::Anthropic => Some(Dialect::Messages),
            Provider::Gemini => Some(Dialect::Gemini),
            Provider::Sim => None,
        }
    }

    pub fn serves(self, dialect: Dialect) -> bool {
        match self {
            Provider::Openai | Provider::AzureOpenai | Provider::OpenaiCompatible => {
                matches!(dialect, Dialect::Chat | Dialect::Responses)
            }
            Provider::Anthropic => dialect == Dialect::Messages,
            Provider::Gemini => dialect == Dialect::Gemini,
            Provider::Sim => true,
        }
    }

    /// Whether calls need a key: the providers' own APIs do; a compatible server (a local vLLM
    /// or Ollama) and the sim may not.
    pub fn needs_key(self) -> bool {
        matches!(
            self,
            Provider::Openai | Provider::AzureOpenai | Provider::Anthropic | Provider::Gemini
        )
    }
}

/// `models = ["a", "b"]` serves those names as they are; `models = { fast = "gpt-4.1-mini" }`
/// maps a public name to the upstream's. `"*"` serves any model no other channel names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Models {
    List(Vec<String>),
    Map(BTreeMap<String, String>),
}

impl Default for Models {
    fn default() -> Self {
        Models::List(Vec::new())
    }
}

impl Models {
    /// (public name, upstream name) pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        match self {
            Models::List(v) => v.iter().map(|m| (m.clone(), m.clone())).collect(),
            Models::Map(m) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    pub name: String,
    pub provider: Provider,
    /// The base URL the provider's official SDK takes. Optional only for `sim` (the in-process
    /// simulator is used).
    pub base_url: Option<String>,
    /// Name of the environment variable holding the provider key.
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub models: Models,
    /// Call this channel in one dialect only (one its provider serves): every other client
    /// dialect is translated to it. Default: the client's own when the provider serves it, else
    /// the provider's native one (Chat for `openai`, Messages for `anthropic`).
    #[serde(default)]
    pub dialect: Option<Dialect>,
    #[serde(default = "default_group")]
    pub group: String,
    /// Lower tiers are tried first.
    #[serde(default)]
    pub priority: u32,
    /// Weighted random choice within a tier.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// When the channel is ejected (consecutive failures or error rate) and for how long.
    #[serde(default)]
    pub circuit: CircuitConfig,
    /// Whether the channel continues an assistant prefill, so that it may finish an answer
    /// another channel was cut in. Default: yes for `anthropic` and `sim`, no for `openai`
    /// (its Chat API answers a trailing assistant turn anew) and `gemini`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<bool>,
    /// Several keys instead of `api_key_env`, each named by its environment variable: requests
    /// are spread over them, and a key refused (401, 403) or rate limited (429) is cooled down
    /// on its own while the others serve. Records name the key by its index here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_key_envs: Vec<String>,
    /// Azure OpenAI's `api-version` (`2024-10-21`): calls go to the deployment URLs
    /// (`/openai/deployments/{deployment}/chat/completions?api-version=…`, the deployment being
    /// the upstream model name). Absent: the `/openai/v1/` API, which takes the model in the
    /// body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Headers sent with every call to this channel (`{ "HTTP-Referer" = "https://…" }`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read from environment variables at start
    /// (`{ "OpenAI-Organization" = "OPENAI_ORG" }`); the values are never printed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header_envs: BTreeMap<String, String>,
    /// Takes its group's calls that name no model (file uploads, file and batch listings).
    /// Without one such channel in a group, the first channel by priority that serves OpenAI's
    /// endpoints takes them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub objects: bool,
    /// The HTTP proxy this channel's connections go through, `http://[user:password@]host:port`
    /// (credentials sent as `Proxy-Authorization: Basic`): an https upstream through a CONNECT
    /// tunnel, a plain-HTTP one in absolute form. It overrides the environment's
    /// (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`); `""` goes direct whatever the
    /// environment says. Absent: the environment decides. Its password is never printed.
    #[serde(
        default,
        serialize_with = "redacted_proxy_url",
        skip_serializing_if = "Option::is_none"
    )]
    pub proxy_url: Option<String>,
    /// A PEM file of CA certificates (one or more) trusted for this channel besides the bundled
    /// webpki roots and the operating system's store (a model served behind an internal CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// A PEM certificate chain the channel presents for mutual TLS, with `client_key_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<PathBuf>,
    /// The PEM private key of `client_cert_file` (PKCS#8, PKCS#1 or SEC1); its content is never
    /// printed or logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_file: Option<PathBuf>,
    /// Whether the channel reports usage in a Chat stream when asked
    /// (`stream_options.include_usage`). `false` for an OpenAI-compatible server that never
    /// does: the gateway counts each answer's output tokens with its tokenizer, stored apart
    /// and flagged estimated (never 0). Default: true (the estimate is made only when the
    /// client did not ask for usage).
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub usage_in_stream: bool,
    /// The HTTP version of the channel's connections ([`UpstreamHttp`]).
    #[serde(default, skip_serializing_if = "UpstreamHttp::is_auto")]
    pub http_version: UpstreamHttp,
}

/// Which HTTP a channel speaks to its upstream.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamHttp {
    /// Over TLS, what the server picks of HTTP/2 and HTTP/1.1 (ALPN); plain `http://` is
    /// HTTP/1.1.
    #[default]
    Auto,
    /// HTTP/1.1 only: one connection per answer in flight.
    Http1,
    /// HTTP/2 only: over TLS offered alone, over plain `http://` with prior knowledge (h2c).
    /// The answers to one upstream on a serving thread share as few connections as its limit
    /// of concurrent streams allows ([`crate::lanes`]).
    Http2,
}

impl UpstreamHttp {
    fn is_auto(&self) -> bool {
        *self == UpstreamHttp::Auto
    }
}

fn default_true() -> bool {
    true
}

fn is_true(v: &bool) -> bool {
    *v
}

fn redacted_proxy_url<S: serde::Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(u) => s.serialize_str(&crate::egress::redacted(u)),
        None => s.serialize_none(),
    }
}

impl Default for ChannelConfig {
    /// A sim channel with no models: a starting point for code that builds channels (a config
    /// file must name `name`, `provider` and `models`).
    fn default() -> Self {
        ChannelConfig {
            name: String::new(),
            provider: Provider::Sim,
            base_url: None,
            api_key_env: None,
            models: Models::default(),
            dialect: None,
            group: default_group(),
            priority: 0,
            weight: default_weight(),
            circuit: CircuitConfig::default(),
            prefill: None,
            api_key_envs: Vec::new(),
            api_version: None,
            headers: BTreeMap::new(),
            header_envs: BTreeMap::new(),
            objects: false,
            proxy_url: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            usage_in_stream: true,
            http_version: UpstreamHttp::Auto,
        }
    }
}

/// Headers a channel's `headers` may not set: the gateway's own (framing, encoding) and the
/// credentials, which come from the channel's keys only.
const RESERVED_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "accept-encoding",
    "authorization",
    "api-key",
    "x-api-key",
    "x-goog-api-key",
];

fn default_weight() -> u32 {
    1
}

/// Per-model policy: which failures move on to the next channel, and the deadlines of an attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// A model name, or `*` for every model no other route names.
    pub model: String,
    #[serde(default)]
    pub failover: FailoverConfig,
    #[serde(default)]
    pub timeouts: TimeoutsConfig,
    /// The response cache; absent = no caching.
    #[serde(default)]
    pub cache: Option<CacheConfig>,
    /// Hedging; absent = no hedging.
    #[serde(default)]
    pub hedge: Option<HedgeConfig>,
    /// How a request is carried to a channel of another dialect.
    #[serde(default)]
    pub translation: TranslationConfig,
    /// A model with a larger context window: when a channel answers that the input is over
    /// its model's context window, the request goes to this model's channels instead (the
    /// same model is never asked again). Absent = the client gets that error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_fallback: Option<String>,
}

/// What a translated request needs that the client's body may not say.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TranslationConfig {
    /// The output-token cap sent to an upstream that requires one (Anthropic) when the client
    /// gives none; 0 = no default, such a request is answered 400 naming the field.
    pub default_max_tokens: u32,
    /// Reasoning-token budgets per named effort, both ways (effort → Anthropic or Gemini
    /// budget, and a budget → the nearest OpenAI effort): the table of `docs/translation.md`.
    pub reasoning_budgets: ReasoningTable,
}

impl TranslationConfig {
    /// The output cap sent when the client gives none; `None` when there is no default.
    pub fn max_tokens_default(&self) -> Option<u32> {
        Some(self.default_max_tokens).filter(|&n| n > 0)
    }
}

impl Default for TranslationConfig {
    fn default() -> Self {
        TranslationConfig {
            default_max_tokens: 4096,
            reasoning_budgets: ReasoningTable::DEFAULT,
        }
    }
}

/// `{ after_ms = 800 }` or `{ after = "p95" }` (the first channel's recent p95 time to first
/// event), and the share of requests that may be hedged.
/// The policy of a model no `[[routes]]` entry names.
static DEFAULT_ROUTE: std::sync::LazyLock<RouteConfig> = std::sync::LazyLock::new(|| RouteConfig {
    model: "*".into(),
    failover: FailoverConfig::default(),
    timeouts: TimeoutsConfig::default(),
    cache: None,
    hedge: None,
    translation: TranslationConfig::default(),
    context_fallback: None,
});

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HedgeConfig {
    pub after_ms: Option<u64>,
    pub after: Option<HedgeAfter>,
    #[serde(default = "default_hedge_budget")]
    pub budget: f64,
}

/// The adaptive hedge delays (`after = "p95"`); a name outside the set is refused when the
/// config is read.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HedgeAfter {
    /// The first channel's recent p95 time to first event.
    P95,
}

/// When a hedge goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HedgeDelay {
    After(std::time::Duration),
    RecentP95,
}

impl HedgeConfig {
    /// The delay this config names (validation makes sure it names exactly one).
    pub fn delay(&self) -> HedgeDelay {
        match (self.after_ms, self.after) {
            (Some(ms), _) => HedgeDelay::After(std::time::Duration::from_millis(ms)),
            (None, _) => HedgeDelay::RecentP95,
        }
    }
}

fn default_hedge_budget() -> f64 {
    0.1
}

/// A route's response cache: `cache = {}` turns it on with these defaults; each key given
/// overrides its own.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// How long an answer is served from the cache, seconds.
    pub ttl_s: u64,
    /// Answers held at most; the least recently used go first.
    pub max_entries: usize,
    /// Bytes of answers the route's cache holds at most; the least recently used go first.
    pub max_bytes: usize,
    /// Largest answer stored, bytes; bigger answers are relayed but not cached.
    pub max_entry_bytes: usize,
    /// Keep the entries in Redis (`[shared] redis_url`, required) instead of this instance's
    /// memory, so that every instance answers from them; the bounds above then bound what
    /// this route holds in Redis.
    pub shared: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            ttl_s: 300,
            max_entries: 10_000,
            max_bytes: 64 * 1024 * 1024,
            max_entry_bytes: 1024 * 1024,
            shared: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FailoverConfig {
    /// Upstream calls at most, the first included.
    pub max_attempts: u32,
    /// Upstream statuses that move on to the next channel (before any byte reached the client).
    pub on_status: Vec<u16>,
    /// When no other channel is left, the same one is asked again (up to `max_attempts`) after
    /// its `Retry-After` when that is at most this long (a longer one is relayed to the client),
    /// else after a jittered backoff. 0: never ask the same channel again.
    pub retry_wait_max_ms: u64,
    /// The first same-channel backoff; it doubles with each retry, its upper half random.
    pub backoff_ms: u64,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        FailoverConfig {
            max_attempts: 3,
            on_status: vec![429, 500, 502, 503, 504],
            retry_wait_max_ms: 2_000,
            backoff_ms: 250,
        }
    }
}

impl FailoverConfig {
    /// Whether the same channel may be asked again.
    pub fn retries_same(&self) -> bool {
        self.retry_wait_max_ms > 0
    }
}

/// Deadlines, in milliseconds. Headers count from the attempt's dispatch; the others from t0,
/// except idle (since the last byte) and progress (since the last effective output or the first
/// event).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutsConfig {
    /// TCP (and TLS) connect; absent = `server.connect_timeout_ms`.
    pub connect_ms: Option<u64>,
    pub headers_ms: u64,
    pub first_event_ms: u64,
    pub first_output_ms: u64,
    /// While another channel could take over, the first-output deadline adapts to the
    /// (channel, model)'s recent history: this many times its p95 time to first output, at
    /// least `first_output_floor_ms`, at most `first_output_ms`. Without enough history (or on
    /// the last candidate) it is `first_output_ms`. 0 turns the adaptation off.
    pub first_output_p95_factor: f64,
    pub first_output_floor_ms: u64,
    pub idle_ms: u64,
    pub progress_ms: u64,
    pub total_ms: u64,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        TimeoutsConfig {
            connect_ms: None,
            headers_ms: 15_000,
            first_event_ms: 30_000,
            first_output_ms: 60_000,
            first_output_p95_factor: 4.0,
            first_output_floor_ms: 10_000,
            idle_ms: 30_000,
            progress_ms: 120_000,
            total_ms: 600_000,
        }
    }
}

/// The group of a channel that names none, and of a principal that has none.
pub const DEFAULT_GROUP: &str = "default";

fn default_group() -> String {
    DEFAULT_GROUP.into()
}

/// Every problem found, each naming its key.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigErrors(pub Vec<String>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "invalid configuration ({} problems):", self.0.len())?;
        for p in &self.0 {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl Config {
    /// The groups some channel is in, sorted: the only ones a workspace or token may use.
    pub fn groups(&self) -> Vec<&str> {
        let mut groups: Vec<&str> = self.channels.iter().map(|c| c.group.as_str()).collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// Every model name the config names (a channel's models, a route), never `*`: the names
    /// metrics give their own label.
    pub fn named_models(&self) -> impl Iterator<Item = String> + '_ {
        let listed = self
            .channels
            .iter()
            .flat_map(|c| c.models.pairs().into_iter().map(|(public, _)| public));
        let routed = self.routes.iter().map(|r| r.model.clone());
        listed.chain(routed).filter(|m| m != "*")
    }

    /// The policy for a model: its own route, else the `*` route, else the defaults.
    pub fn route_for(&self, model: &str) -> &RouteConfig {
        self.routes
            .iter()
            .find(|r| r.model == model)
            .or_else(|| self.routes.iter().find(|r| r.model == "*"))
            .unwrap_or(&DEFAULT_ROUTE)
    }
}

/// The sim models the embedded default serves: every preset of the sim (a test keeps the two
/// lists equal; the proxy's library does not depend on the sim).
pub const SIM_MODELS: [&str; 17] = [
    "sim-trace-a",
    "sim-trace-b",
    "sim-trace-c",
    "sim-fast",
    "sim-reasoning",
    "sim-tool-call",
    "sim-parallel-tools",
    "sim-max-tokens",
    "sim-rate-limited",
    "sim-context-length",
    "sim-content-filter",
    "sim-overloaded-in-band",
    "sim-long",
    "sim-cut-after-40",
    "sim-stall-after-20",
    "sim-prefill-refused",
    "sim-echo",
];

impl Config {
    /// Parses TOML text; `origin` names the source in error messages.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigErrors> {
        ReadConfig::parse(text, origin).parsed()
    }

    /// The embedded default: an in-process sim channel, plus real channels for the provider keys
    /// present in the environment.
    pub fn embedded_default(env: &dyn Fn(&str) -> Option<String>) -> Config {
        let mut channels = vec![ChannelConfig {
            name: "sim".into(),
            provider: Provider::Sim,
            models: Models::List(SIM_MODELS.iter().map(|s| s.to_string()).collect()),
            group: default_group(),
            ..ChannelConfig::default()
        }];
        if env("OPENAI_API_KEY").is_some() {
            channels.push(ChannelConfig {
                name: "openai".into(),
                provider: Provider::Openai,
                base_url: Some("https://api.openai.com/v1".into()),
                api_key_env: Some("OPENAI_API_KEY".into()),
                models: Models::List(vec!["*".into()]),
                group: default_group(),
                ..ChannelConfig::default()
            });
        }
        if env("GEMINI_API_KEY").is_some() {
            channels.push(ChannelConfig {
                name: "gemini".into(),
                provider: Provider::Gemini,
                // The google-genai SDKs' base URL: the API version is part of the path.
                base_url: Some("https://generativelanguage.googleapis.com".into()),
                api_key_env: Some("GEMINI_API_KEY".into()),
                models: Models::List(vec!["*".into()]),
                group: default_group(),
                ..ChannelConfig::default()
            });
        }
        if env("ANTHROPIC_API_KEY").is_some() {
            channels.push(ChannelConfig {
                name: "anthropic".into(),
                provider: Provider::Anthropic,
                base_url: Some("https://api.anthropic.com".into()),
                api_key_env: Some("ANTHROPIC_API_KEY".into()),
                models: Models::List(vec!["*".into()]),
                group: default_group(),
                ..ChannelConfig::default()
            });
        }
        Config {
            server: ServerConfig::default(),
            store: StoreConfig::default(),
            shared: SharedConfig::default(),
            thresholds: Thresholds::default(),
            channels,
            routes: Vec::new(),
            prices: Vec::new(),
            limits: LimitsConfig::default(),
            budgets: BudgetsConfig::default(),
            telemetry: Default::default(),
        }
    }

    /// Applies `LAPTIME_LISTEN`, `LAPTIME_DATA_DIR` and `LAPTIME_REGION`.
    pub fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        if let Some(v) = env("LAPTIME_LISTEN") {
            self.server.listen = v;
        }
        if let Some(v) = env("LAPTIME_DATA_DIR") {
            self.server.data_dir = PathBuf::from(v);
        }
        if let Some(v) = env("LAPTIME_REGION") {
            self.server.region = Some(v);
        }
        if let Some(v) = env("LAPTIME_INSTANCE") {
            self.server.instance = Some(v);
        }
        if let Some(v) = env("LAPTIME_STORE_URL") {
            self.store.url = Some(v);
        }
        if let Some(v) = env("LAPTIME_REDIS_URL") {
            self.shared.redis_url = Some(v);
        }
        if let Some(v) = env("LAPTIME_OTLP_ENDPOINT") {
            self.telemetry.otlp_endpoint = Some(v);
        }
    }

    /// Checks everything and reports every problem at once.
    pub fn validate(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigErrors> {
        let mut errs = Vec::new();
        self.validate_server(&mut errs);
        if self.channels.is_empty() {
            errs.push("channels: at least one channel is needed".into());
        }
        let mut names = std::collections::HashSet::new();
        for (i, c) in self.channels.iter().enumerate() {
            let key = format!("channels[{i}]");
            if !c.name.trim().is_empty() && !names.insert(c.name.as_str()) {
                errs.push(format!(
                    "{key}.name: {:?} is used by another channel",
                    c.name
                ));
            }
            c.validate(&key, env, &mut errs);
        }
        let mut route_models = std::collections::HashSet::new();
        for (i, r) in self.routes.iter().enumerate() {
            let key = format!("routes[{i}]");
            if !r.model.trim().is_empty() && !route_models.insert(r.model.as_str()) {
                errs.push(format!("{key}.model: {:?} has another route", r.model));
            }
            r.validate(&key, &mut errs);
            if let Some(f) = r.context_fallback.as_deref() {
                let served = self.channels.iter().any(|c| {
                    c.models
                        .pairs()
                        .iter()
                        .any(|(public, _)| public == f || public == "*")
                });
                if f == r.model || f == "*" || f.trim().is_empty() {
                    errs.push(format!(
                        "{key}.context_fallback: {f:?} must name another model"
                    ));
                } else if !served {
                    errs.push(format!(
                        "{key}.context_fallback: no channel serves model {f:?}"
                    ));
                }
            }
        }
        if let Err(price_errs) = self.price_table() {
            errs.extend(price_errs);
        }
        // Reads the environment's proxies and every channel's TLS files, as the start will.
        if let Err(egress_errs) = crate::egress::Egress::build(&self.channels, env) {
            errs.extend(egress_errs);
        }
        self.telemetry.validate(env, &mut errs);
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(errs))
        }
    }

    /// The configured prices as the table requests are costed with; the errors name the entry.
    pub fn price_table(&self) -> Result<laptime_core::cost::PriceTable, Vec<String>> {
        let mut errs = Vec::new();
        let mut prices = Vec::with_capacity(self.prices.len());
        for (i, p) in self.prices.iter().enumerate() {
            let effective_from_us = laptime_core::cost::day_start_us(&p.effective_from);
            if effective_from_us.is_none() {
                errs.push(format!(
                    "prices[{i}].effective_from: {:?} is not a YYYY-MM-DD day",
                    p.effective_from
                ));
            }
            if let Some(c) = &p.channel {
                if !self.channels.iter().any(|ch| &ch.name == c) {
                    errs.push(format!("prices[{i}].channel: no channel is named {c:?}"));
                }
            }
            let price = laptime_core::cost::Price {
                model: p.model.clone(),
                channel: p.channel.clone(),
                input_per_mtok: p.input_per_mtok,
                output_per_mtok: p.output_per_mtok,
                cache_read_per_mtok: p.cache_read_per_mtok,
                cache_write_per_mtok: p.cache_write_per_mtok,
                cache_write_1h_per_mtok: p.cache_write_1h_per_mtok,
                reasoning_per_mtok: p.reasoning_per_mtok,
                effective_from_us: effective_from_us.unwrap_or(0),
            };
            if let Some(problem) = price.problem() {
                errs.push(format!("prices[{i}] ({}): {problem}", p.model));
            }
            prices.push(price);
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        laptime_core::cost::PriceTable::new(prices).map_err(|e| vec![e.0])
    }

    fn validate_server(&self, errs: &mut Vec<String>) {
        if self.server.listen.parse::<SocketAddr>().is_err() {
            errs.push(format!(
                "server.listen: {:?} is not an address like 127.0.0.1:8080",
                self.server.listen
            ));
        }
        if self.server.max_body_bytes == 0 {
            errs.push("server.max_body_bytes: must be positive".into());
        }
        if self.server.body_budget_bytes < self.server.max_body_bytes {
            errs.push(format!(
                "server.body_budget_bytes: must be at least server.max_body_bytes ({})",
                self.server.max_body_bytes
            ));
        }
        if u32::try_from(self.server.max_body_bytes).is_err() {
            errs.push("server.max_body_bytes: at most 4 GiB - 1".into());
        }
        if self.server.max_held_bytes == 0 || self.server.max_answer_bytes == 0 {
            errs.push("server.max_held_bytes and server.max_answer_bytes: must be positive".into());
        }
        if self.server.header_read_timeout_ms == 0 {
            errs.push("server.header_read_timeout_ms: must be positive".into());
        }
        if self.server.threads > 1024 {
            errs.push("server.threads: at most 1024 (0: one per core)".into());
        }
        if self.server.recorder_queue == 0 {
            errs.push("server.recorder_queue: must be positive".into());
        }
        if self.store.retention_days == 0 {
            errs.push("store.retention_days: must be at least 1".into());
        }
        if self.store.retention_interval_s == 0 {
            errs.push("store.retention_interval_s: must be positive".into());
        }
        if let Some(url) = &self.store.url {
            if let Err(why) = laptime_store::pg::check_url(url) {
                errs.push(format!("store.url: {why}"));
            }
        }
        if let Some(url) = &self.shared.redis_url {
            if !(url.starts_with("redis://")
                || url.starts_with("rediss://")
                || url.starts_with("unix://"))
            {
                errs.push("shared.redis_url: must be a redis://, rediss:// or unix:// URL".into());
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            if r.cache.as_ref().is_some_and(|c| c.shared) && self.shared.redis_url.is_none() {
                errs.push(format!(
                    "routes[{i}].cache.shared: needs [shared] redis_url (or LAPTIME_REDIS_URL)"
                ));
            }
        }
        if self.shared.cache_lookup_ms == 0 {
            errs.push("shared.cache_lookup_ms: must be positive".into());
        }
        if self.shared.key_prefix.is_empty() {
            errs.push("shared.key_prefix: must not be empty".into());
        }
        if let Err(e) = self.budgets.zone() {
            errs.push(e);
        }
    }

    /// The config with its implicit parts written out, as `check-config` prints it: without
    /// `[[routes]]` every model gets the default route, printed as the `model = "*"` one.
    pub fn effective(&self) -> Config {
        let mut cfg = self.clone();
        if cfg.routes.is_empty() {
            cfg.routes.push(DEFAULT_ROUTE.clone());
        }
        cfg
    }

    /// The effective configuration as TOML. Provider keys are only env-var names (values of
    /// the variables are never read into this text); the passwords of URLs (`store.url`,
    /// `shared.redis_url`, a channel's `proxy_url`) are printed as `***`; key files by path.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

impl ChannelConfig {
    /// The problems of one channel, each under `key`.
    fn validate(&self, key: &str, env: &dyn Fn(&str) -> Option<String>, errs: &mut Vec<String>) {
        if self.name.trim().is_empty() {
            errs.push(format!("{key}.name: must not be empty"));
        }
        match (&self.base_url, self.provider) {
            (None, Provider::Sim) => {}
            (None, _) => errs.push(format!(
                "{key}.base_url: required for provider {}",
                self.provider.as_str()
            )),
            (Some(u), _) => {
                let ok = u.parse::<http::Uri>().ok().is_some_and(|uri| {
                    matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
                });
                if !ok {
                    errs.push(format!("{key}.base_url: {u:?} is not an http(s) URL"));
                }
            }
        }
        self.validate_keys(key, env, errs);
        self.validate_headers(key, env, errs);
        if self.api_version.is_some() && self.provider != Provider::AzureOpenai {
            errs.push(format!(
                "{key}.api_version: only provider azure-openai takes one"
            ));
        }
        if let Some(v) = &self.api_version {
            let ok = !v.is_empty()
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !ok {
                errs.push(format!(
                    "{key}.api_version: {v:?} is not like 2024-10-21 or 2025-04-01-preview"
                ));
            }
        }
        let pairs = self.models.pairs();
        if pairs.is_empty() {
            errs.push(format!("{key}.models: at least one model is needed"));
        }
        if pairs
            .iter()
            .any(|(public, upstream)| public.trim().is_empty() || upstream.trim().is_empty())
        {
            errs.push(format!("{key}.models: model names must not be empty"));
        }
        if self.group.trim().is_empty() {
            errs.push(format!("{key}.group: must not be empty"));
        }
        if let Some(d) = self.dialect.filter(|d| !self.provider.serves(*d)) {
            errs.push(format!(
                "{key}.dialect: provider {} does not serve {d}",
                self.provider.as_str()
            ));
        }
        if self.weight == 0 {
            errs.push(format!("{key}.weight: must be positive"));
        }
        let cb = &self.circuit;
        if cb.consecutive_failures == 0
            || cb.min_requests == 0
            || cb.window_s == 0
            || cb.open_s == 0
            || cb.first_probe_s == 0
        {
            errs.push(format!(
                "{key}.circuit: counts and durations must be positive"
            ));
        }
        if !(cb.error_rate > 0.0 && cb.error_rate <= 1.0) {
            errs.push(format!("{key}.circuit.error_rate: must be in (0, 1]"));
        }
    }
}

impl ChannelConfig {
    /// The key variables: one (`api_key_env`) or several (`api_key_envs`), each set.
    fn validate_keys(
        &self,
        key: &str,
        env: &dyn Fn(&str) -> Option<String>,
        errs: &mut Vec<String>,
    ) {
        if self.api_key_env.is_some() && !self.api_key_envs.is_empty() {
            errs.push(format!(
                "{key}.api_key_envs: give api_key_env or api_key_envs, not both"
            ));
        }
        if self.api_key_envs.len() > MAX_KEYS {
            errs.push(format!("{key}.api_key_envs: at most {MAX_KEYS} keys"));
        }
        for (field, var) in self
            .api_key_env
            .iter()
            .map(|v| ("api_key_env".to_string(), v))
            .chain(
                self.api_key_envs
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("api_key_envs[{i}]"), v)),
            )
        {
            if env(var).is_none() {
                errs.push(format!(
                    "{key}.{field}: environment variable {var} is not set"
                ));
            }
        }
        if self.provider.needs_key() && self.api_key_env.is_none() && self.api_key_envs.is_empty() {
            errs.push(format!(
                "{key}.api_key_env: required for provider {}",
                self.provider.as_str()
            ));
        }
    }

    /// Extra headers: valid names and values, never one the gateway sets itself.
    fn validate_headers(
        &self,
        key: &str,
        env: &dyn Fn(&str) -> Option<String>,
        errs: &mut Vec<String>,
    ) {
        let literal = self
            .headers
            .iter()
            .map(|(n, v)| ("headers", n, Some(v.clone())));
        let from_env = self
            .header_envs
            .iter()
            .map(|(n, var)| ("header_envs", n, env(var)));
        for (field, name, value) in literal.chain(from_env) {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                errs.push(format!("{key}.{field}: {name:?} is not a header name"));
                continue;
            }
            if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                errs.push(format!(
                    "{key}.{field}: {name} is set by the gateway (keys go in api_key_env)"
                ));
            }
            match value {
                None => errs.push(format!(
                    "{key}.header_envs.{name}: environment variable {} is not set",
                    self.header_envs.get(name).map_or("", String::as_str)
                )),
                Some(v) if http::HeaderValue::from_str(&v).is_err() => {
                    // The value itself may be a secret: never quoted.
                    errs.push(format!("{key}.{field}.{name}: not a valid header value"));
                }
                Some(_) => {}
            }
        }
    }
}

/// Keys one channel may list.
pub const MAX_KEYS: usize = 64;

impl RouteConfig {
    /// The problems of one route, each under `key`.
    fn validate(&self, key: &str, errs: &mut Vec<String>) {
        if self.model.trim().is_empty() {
            errs.push(format!("{key}.model: must not be empty"));
        }
        if let Some(c) = &self.cache {
            if c.ttl_s == 0 || c.max_entries == 0 {
                errs.push(format!(
                    "{key}.cache: ttl_s and max_entries must be positive"
                ));
            }
        }
        if let Some(h) = &self.hedge {
            if h.after_ms.is_some() == h.after.is_some() {
                errs.push(format!("{key}.hedge: give after_ms or after = \"p95\""));
            }
            if !(h.budget > 0.0 && h.budget <= 1.0) {
                errs.push(format!("{key}.hedge.budget: must be in (0, 1]"));
            }
        }
        if self.failover.max_attempts == 0 {
            errs.push(format!("{key}.failover.max_attempts: must be at least 1"));
        }
        for s in &self.failover.on_status {
            if !(400..=599).contains(s) {
                errs.push(format!(
                    "{key}.failover.on_status: {s} is not an error status"
                ));
            }
        }
        let t = &self.timeouts;
        if t.connect_ms == Some(0) {
            errs.push(format!("{key}.timeouts.connect_ms: must be positive"));
        }
        if !(t.first_output_p95_factor.is_finite() && t.first_output_p95_factor >= 0.0) {
            errs.push(format!(
                "{key}.timeouts.first_output_p95_factor: must be a number ≥ 0 (0: off)"
            ));
        }
        for (name, v) in [
            ("headers_ms", t.headers_ms),
            ("first_event_ms", t.first_event_ms),
            ("first_output_ms", t.first_output_ms),
            ("idle_ms", t.idle_ms),
            ("progress_ms", t.progress_ms),
            ("total_ms", t.total_ms),
        ] {
            if v == 0 {
                errs.push(format!("{key}.timeouts.{name}: must be positive"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_issue_example_parses_and_validates() {
        let text = r#"
            [server]
            listen = "127.0.0.1:8080"
            data_dir = "./laptime-data"

            [[channels]]
            name = "openai"
            provider = "openai"
            base_url = "https://api.openai.com/v1"
            api_key_env = "OPENAI_API_KEY"
            models = ["gpt-4.1-mini", "o4-mini"]
            group = "default"

            [[channels]]
            name = "mapped"
            provider = "openai"
            base_url = "http://127.0.0.1:9000/v1"
            api_key_env = "OPENAI_API_KEY"
            models = { fast = "gpt-4.1-mini" }
        "#;
        let cfg = Config::from_toml(text, "test.toml").unwrap();
        let env = |k: &str| (k == "OPENAI_API_KEY").then(|| "sk-test".to_string());
        cfg.validate(&env).unwrap();
        assert_eq!(
            cfg.channels[1].models.pairs(),
            vec![("fast".to_string(), "gpt-4.1-mini".to_string())]
        );
    }

    #[test]
    fn the_routing_issue_example_parses_and_validates() {
        let text = r#"
            [[channels]]
            name = "primary"
            provider = "openai"
            base_url = "https://api.openai.com/v1"
            api_key_env = "OPENAI_API_KEY"
            models = ["gpt-4.1-mini"]
            group = "default"
            priority = 0
            weight = 10

            [[routes]]
            model = "gpt-4.1-mini"
            failover = { max_attempts = 3, on_status = [429, 500, 502, 503, 504] }
            hedge = { after_ms = 800 }
            cache = { ttl_s = 300, max_entries = 10000 }
            timeouts = { connect_ms = 2000, headers_ms = 15000, first_event_ms = 30000, first_output_ms = 60000, idle_ms = 30000, progress_ms = 120000, total_ms = 600000 }

            [[routes]]
            model = "*"
            hedge = { after = "p95" }
        "#;
        let cfg = Config::from_toml(text, "routes.toml").unwrap();
        let env = |k: &str| (k == "OPENAI_API_KEY").then(|| "sk-test".to_string());
        cfg.validate(&env).unwrap();
        let r = cfg.route_for("gpt-4.1-mini");
        assert_eq!(r.timeouts.connect_ms, Some(2000));
        assert_eq!(r.hedge.as_ref().and_then(|h| h.after_ms), Some(800));
        assert_eq!(
            cfg.route_for("other")
                .hedge
                .as_ref()
                .map(HedgeConfig::delay),
            Some(HedgeDelay::RecentP95)
        );
        let bad = Config::from_toml(
            "[[routes]]\nmodel = \"m\"\nhedge = { after = \"p50\" }\n",
            "bad.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            bad.contains("unknown variant `p50`, expected `p95`"),
            "{bad}"
        );
        assert!(bad.contains("after"), "{bad}");
    }

    #[test]
    fn a_channels_http_version_is_read_and_an_unknown_one_named_with_its_line() {
        let text = "[[channels]]\nname = \"v\"\nprovider = \"openai\"\n\
                    base_url = \"https://v.example/v1\"\nmodels = [\"m\"]\n";
        let cfg = Config::from_toml(&format!("{text}http_version = \"http2\"\n"), "h.toml");
        assert_eq!(cfg.unwrap().channels[0].http_version, UpstreamHttp::Http2);
        let auto = Config::from_toml(text, "h.toml").unwrap();
        assert_eq!(auto.channels[0].http_version, UpstreamHttp::Auto);
        let bad = Config::from_toml(&format!("{text}http_version = \"http3\"\n"), "h.toml")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("h.toml:6"), "{bad}");
        assert!(bad.contains("channels[0].http_version"), "{bad}");
        assert!(
            bad.contains("unknown variant `http3`, expected one of `auto`, `http1`, `http2`"),
            "{bad}"
        );
    }

    #[test]
    fn the_embedded_default_serves_every_sim_preset() {
        assert_eq!(SIM_MODELS, laptime_sim::PRESET_NAMES);
    }

    #[test]
    fn a_routes_translation_overrides_only_what_it_names() {
        let text = r#"
            [[routes]]
            model = "claude"
            translation = { default_max_tokens = 0, reasoning_budgets = { high = 20000 } }
        "#;
        let cfg = Config::from_toml(text, "c").unwrap();
        let t = &cfg.route_for("claude").translation;
        assert_eq!(t.default_max_tokens, 0);
        assert_eq!(t.reasoning_budgets.high, 20_000);
        assert_eq!(t.reasoning_budgets.low, ReasoningTable::DEFAULT.low);
        assert_eq!(
            cfg.route_for("other").translation,
            TranslationConfig::default()
        );
        let bad = "[[routes]]\nmodel = \"m\"\ntranslation = { reasoning_budgets = { huge = 1 } }";
        assert!(Config::from_toml(bad, "c").is_err());
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let err = Config::from_toml("[server]\nlisen = \"x\"\n", "c.toml").unwrap_err();
        assert!(err.0[0].contains("lisen"), "{err}");
        assert!(err.0[0].starts_with("c.toml"));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"
            [server]
            listen = "nowhere"
            [[channels]]
            name = "a"
            provider = "openai"
            base_url = "ftp://x"
            models = []
            [[channels]]
            name = "a"
            provider = "anthropic"
            base_url = "https://api.anthropic.com"
            api_key_env = "MISSING_KEY"
            models = ["claude"]
            dialect = "chat"
        "#;
        let errs = Config::from_toml(text, "c")
            .unwrap()
            .validate(&no_env)
            .unwrap_err();
        let all = errs.to_string();
        for needle in [
            "server.listen",
            "channels[0].base_url",
            "channels[0].api_key_env",
            "channels[0].models",
            "channels[1].name",
            "channels[1].api_key_env: environment variable MISSING_KEY is not set",
            "channels[1].dialect: provider anthropic does not serve chat",
        ] {
            assert!(all.contains(needle), "missing {needle} in {all}");
        }
    }

    #[test]
    fn provider_kinds_keys_and_headers_are_checked_with_their_keys() {
        let text = r#"
            [[channels]]
            name = "az"
            provider = "azure-openai"
            base_url = "https://res.openai.azure.com"
            api_version = "2024-10-21"
            models = { "gpt-4o" = "prod-4o" }
            [[channels]]
            name = "local"
            provider = "openai-compatible"
            base_url = "http://127.0.0.1:8000/v1"
            models = ["llama"]
            api_version = "2024-10-21"
            headers = { "Authorization" = "Bearer x", "X-Title" = "ok" }
            header_envs = { "X-Org" = "MISSING_ORG" }
            [[channels]]
            name = "pool"
            provider = "openai"
            base_url = "https://api.openai.com/v1"
            api_key_env = "K1"
            api_key_envs = ["K1", "K_MISSING"]
            models = ["gpt-4.1-mini"]
        "#;
        let env = |k: &str| (k == "K1").then(|| "sk".to_string());
        let errs = Config::from_toml(text, "c")
            .unwrap()
            .validate(&env)
            .unwrap_err()
            .to_string();
        for needle in [
            "channels[0].api_key_env: required for provider azure-openai",
            "channels[1].api_version: only provider azure-openai takes one",
            "channels[1].headers: Authorization is set by the gateway",
            "channels[1].header_envs.X-Org: environment variable MISSING_ORG is not set",
            "channels[2].api_key_envs: give api_key_env or api_key_envs, not both",
            "channels[2].api_key_envs[1]: environment variable K_MISSING is not set",
        ] {
            assert!(errs.contains(needle), "missing {needle} in {errs}");
        }
        assert!(
            !errs.contains("channels[1].api_key_env"),
            "a compatible server needs no key: {errs}"
        );
        // Each is accepted when right; header values from the environment are never printed.
        let text = r#"
            [[channels]]
            name = "az"
            provider = "azure-openai"
            base_url = "https://res.openai.azure.com"
            api_version = "2025-04-01-preview"
            api_key_envs = ["K1", "K2"]
            header_envs = { "X-Org" = "ORG" }
            models = { "gpt-4o" = "prod-4o" }
        "#;
        let env = |k: &str| {
            ["K1", "K2", "ORG"]
                .contains(&k)
                .then(|| format!("secret-{k}"))
        };
        let cfg = Config::from_toml(text, "c").unwrap();
        cfg.validate(&env).unwrap();
        let printed = cfg.to_toml();
        assert!(printed.contains("azure-openai") && printed.contains("ORG"));
        assert!(!printed.contains("secret-"), "{printed}");
    }

    #[test]
    fn embedded_default_adds_real_channels_only_when_keys_are_set() {
        let cfg = Config::embedded_default(&no_env);
        assert_eq!(cfg.channels.len(), 1);
        cfg.validate(&no_env).unwrap();
        let env = |k: &str| (k == "ANTHROPIC_API_KEY").then(|| "x".to_string());
        let cfg = Config::embedded_default(&env);
        assert_eq!(cfg.channels.len(), 2);
        assert_eq!(cfg.channels[1].provider, Provider::Anthropic);
        cfg.validate(&env).unwrap();
    }

    fn https_channel(extra: &str) -> String {
        format!(
            "[[channels]]\nname = \"c\"\nprovider = \"sim\"\nbase_url = \"https://models.internal:8443\"\nmodels = [\"m\"]\n{extra}\n"
        )
    }

    #[test]
    fn egress_keys_are_checked_and_every_problem_named_without_a_password() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let text = format!(
            "{}{}{}",
            https_channel(&format!(
                "ca_file = \"{}/missing.pem\"\nproxy_url = \"socks5://u:hunter2@proxy:1080\"",
                dir.path().display()
            )),
            https_channel(&format!("client_cert_file = \"{}\"", garbage.display()))
                .replace("name = \"c\"", "name = \"d\""),
            https_channel(&format!(
                "ca_file = \"{}\"\nclient_cert_file = \"{}\"\nclient_key_file = \"{}\"",
                garbage.display(),
                garbage.display(),
                garbage.display()
            ))
            .replace("name = \"c\"", "name = \"e\"")
        );
        let env = |k: &str| (k == "HTTPS_PROXY").then(|| "https://u:hunter3@p:3128".to_string());
        let errs = Config::from_toml(&text, "c")
            .unwrap()
            .validate(&env)
            .unwrap_err()
            .to_string();
        for needle in [
            "channels[0].ca_file: cannot read",
            "channels[0].proxy_url: \"socks5://u:***@proxy:1080\" must be an http:// proxy",
            "channels[1].client_key_file: required with client_cert_file",
            "channels[2].ca_file:",
            "garbage.pem holds no PEM certificate",
            "channels[2].client_cert_file:",
            "channels[2].client_key_file:",
            "holds no PEM private key",
            "environment HTTPS_PROXY: \"https://u:***@p:3128\"",
        ] {
            assert!(errs.contains(needle), "missing {needle} in {errs}");
        }
        assert!(!errs.contains("hunter"), "{errs}");
    }

    #[test]
    fn a_channels_ca_and_client_certificate_files_are_read_at_validation() {
        let dir = tempfile::tempdir().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = ca.self_signed(&ca_key).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["gateway".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &ca, &ca_key)
            .unwrap();
        let path = |n: &str| dir.path().join(n);
        std::fs::write(path("ca.pem"), ca.pem()).unwrap();
        std::fs::write(path("cert.pem"), leaf.pem()).unwrap();
        std::fs::write(path("key.pem"), leaf_key.serialize_pem()).unwrap();
        let files = format!(
            "ca_file = \"{}\"\nclient_cert_file = \"{}\"\nclient_key_file = \"{}\"",
            path("ca.pem").display(),
            path("cert.pem").display(),
            path("key.pem").display()
        );
        let cfg = Config::from_toml(&https_channel(&files), "c").unwrap();
        cfg.validate(&no_env).unwrap();
        // A key that is not the certificate's.
        std::fs::write(path("key.pem"), ca_key.serialize_pem()).unwrap();
        let errs = cfg.validate(&no_env).unwrap_err().to_string();
        assert!(
            errs.contains("channels[0]: client_cert_file and client_key_file"),
            "{errs}"
        );
        // TLS files on a plain-HTTP channel would be unused: said so.
        let plain = https_channel(&format!("ca_file = \"{}\"", path("ca.pem").display()))
            .replace("https://", "http://");
        let errs = Config::from_toml(&plain, "c")
            .unwrap()
            .validate(&no_env)
            .unwrap_err()
            .to_string();
        assert!(
            errs.contains("channels[0].ca_file: the channel's base_url is not https://"),
            "{errs}"
        );
    }

    #[test]
    fn printed_config_hides_a_proxy_password_and_keeps_an_explicit_no_proxy() {
        let text = format!(
            "{}{}",
            https_channel("proxy_url = \"http://egress:pa55w0rd@proxy.internal:3128\""),
            https_channel("proxy_url = \"\"").replace("name = \"c\"", "name = \"d\"")
        );
        let cfg = Config::from_toml(&text, "c").unwrap();
        cfg.validate(&no_env).unwrap();
        let printed = cfg.to_toml();
        assert!(!printed.contains("pa55w0rd"), "{printed}");
        assert!(
            printed.contains("proxy_url = \"http://egress:***@proxy.internal:3128\""),
            "{printed}"
        );
        assert!(printed.contains("proxy_url = \"\""), "{printed}");
    }

    #[test]
    fn printed_config_never_holds_a_key_value() {
        let env = |k: &str| (k == "OPENAI_API_KEY").then(|| "sk-canary-123".to_string());
        let cfg = Config::embedded_default(&env);
        let text = cfg.to_toml();
        assert!(text.contains("OPENAI_API_KEY"));
        assert!(!text.contains("sk-canary-123"));
    }
}
