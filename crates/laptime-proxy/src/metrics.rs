//! The metrics registry: observed once per finished record on the request path, rendered in
//! Prometheus text format (0.0.4) with, at scrape time, the router's channels and the recorder.
//! The HTTP route (`GET /metrics`, its auth) is `laptime-api`'s.
//!
//! # When a request is counted
//!
//! Every request is observed exactly once, from its finished [`RequestRecord`], inside
//! [`crate::record::Finisher::finish`] and before the record is queued to the recorder (so a
//! stored row implies an observed request). Observation costs one read-locked map lookup for the
//! request's cached label handles (made on first use) plus a few atomic adds per metric; only
//! requests outside the common case (not `200`/`completed`/`ok`, or failed) also look up their
//! labelled series in the vector. It never waits on I/O.
//!
//! Marks are offsets from t0 (DESIGN.md §1): t0 received, t1 `upstream_start`, t2
//! `upstream_headers`, t3 `first_event`, t4 `first_effective`, t5 `first_visible`, t6
//! `upstream_done`, t7 `handler_done`. **Absent is never zero**: a histogram whose marks are
//! absent on a record is not observed for it (its `_count` counts only requests that had the
//! marks). A difference that would be negative is observed as 0 (it cannot happen with one
//! monotonic clock).
//!
//! # Labels (bounded cardinality)
//!
//! - `dialect`: `chat`, `responses`, `messages`.
//! - `model` / `gen_ai_request_model`: the model name the request was routed by (the public name
//!   the client sent and a channel serves) when the config names it (a channel's model list or a
//!   route); any other name (one a `*` channel passed) is counted under `_other`, so the label
//!   set is fixed by the config and no client can add series or push real models out. A request
//!   rejected before routing (auth, bad body, unknown model) uses `_unrouted`, with `channel`
//!   and `provider` `_none`.
//! - `channel`: the configured channel name; `provider` / `gen_ai_provider_name`: `openai`,
//!   `anthropic` or `sim`.
//! - `status`: the HTTP status the client got; `outcome`: the record's outcome (`completed`,
//!   `incomplete`, `upstream_error`, `upstream_closed_early`, `client_cancelled`, `timeout`,
//!   `rejected`, `cache_hit`, `gateway_shutdown`; `gateway_crashed` only in the store, for
//!   requests a restart found in flight, which no process observed to the end); `classification`: the slow-request classification (`ok`,
//!   `failed` or the first slow stage).
//! - `fault`: whose fault a failed request was, `upstream`, `client` or `gateway` (from its
//!   error class, else its outcome); `none` for a success.
//! - `gen_ai_operation_name`: always `chat` (all three dialects are chat operations).
//! - `error_type`: present only on series of requests whose outcome is not a success (success =
//!   `completed`, `incomplete`, `cache_hit`); the record's error class (`connect_failed`,
//!   `stream_error`, `closed_early`, …), or the outcome name when the record has no class.
//! - Never a label: request ids, trace ids, token or key ids, workspace ids, region.
//!
//! # OpenTelemetry GenAI metrics (semconv names, dots → underscores, unit suffix)
//!
//! Labels `gen_ai_operation_name`, `gen_ai_provider_name`, `gen_ai_request_model`, plus
//! `error_type` as above.
//!
//! | metric | type | value per request | observed when | buckets |
//! |---|---|---|---|---|
//! | `gen_ai_server_time_to_first_token_seconds` | histogram | t4 − t1 | streamed, successful outcome, t1 and t4 present | [`TTFT_BUCKETS`] |
//! | `gen_ai_server_request_duration_seconds` | histogram | t6 − t1 | t1 and t6 present (any outcome) | [`DURATION_BUCKETS`] |
//! | `gen_ai_server_time_per_output_token_seconds` | histogram | (t6 − t4) ÷ (output tokens − 1) | t4 and t6 present and upstream reported ≥ 2 output tokens | [`TPOT_BUCKETS`] |
//! | `gen_ai_client_token_usage` | histogram, extra label `gen_ai_token_type` = `input` / `output` | the request's input tokens (normalised: cache reads and writes included) / output tokens (reasoning included) | that count was reported by upstream usage (never estimated) | [`TOKEN_BUCKETS`] |
//!
//! (`{token}` is an annotation, not a unit, so the token histogram has no unit suffix.)
//!
//! # laptime's own
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `laptime_requests_total` | counter | `dialect`, `model`, `provider`, `channel`, `status`, `outcome`, `classification`, `fault` | finished requests, one per record |
//! | `laptime_upstream_headers_seconds` | histogram | `dialect`, `model`, `channel` | t2 − t1 (origin is the upstream start), when both present |
//! | `laptime_first_event_seconds` | histogram | same | t3 − t0, when t3 present |
//! | `laptime_first_effective_seconds` | histogram | same | t4 − t0, when t4 present |
//! | `laptime_first_visible_seconds` | histogram | same | t5 − t0, when t5 present |
//! | `laptime_upstream_done_seconds` | histogram | same | t6 − t0, when t6 present |
//! | `laptime_handler_seconds` | histogram | same | t7 − t0 (present on every finished record) |
//! | `laptime_tokens_total` | counter | `type` (`input`, `output`, `cache_read`, `cache_write`, `reasoning`), `model` | sum of the upstream-reported counts (input normalised as above); absent counts add nothing |
//! | `laptime_cost_usd_total` | counter | `model` | the summed cost of finished requests at the configured `[[prices]]` (estimated costs included); requests not billed add 0 |
//! | `laptime_cost_unpriced_total` | counter | `model` | billed requests whose cost is unknown (no price covers the model, or a kind of token it was billed for) |
//! | `laptime_budget_crossings_total` | counter | `scope` (`workspace`, `token`), `period` (`day`, `month`), `mode` (`soft`, `hard`), `threshold` (`80`, `100`) | budgets whose current period's spend crossed that share of them, once per period, as this instance read them |
//! | `laptime_channel_inflight` | gauge | `channel` | requests in flight on each configured channel, read at scrape time |
//! | `laptime_circuit_state` | gauge | `channel`, `state` (`closed`, `open`, `half_open`) | 1 for the worst current circuit state over the channel's models (each model has its own circuit), read at scrape time |
//! | `laptime_circuit_transitions_total` | counter | `channel` | circuit breaker state changes over the channel's models (each is also logged with its model) |
//! | `laptime_connections_open` | gauge | — | client connections open, at scrape time |
//! | `laptime_connections_max` | gauge | — | the cap on open client connections |
//! | `laptime_connections_evicted_total` | counter | — | idle connections closed to make room at the cap |
//! | `laptime_connections_refused_total` | counter | — | new connections closed at once (at the cap, none idle) |
//! | `laptime_inflight_entries` | gauge | — | requests in the in-flight registry (running, or finished with their records not written yet), at scrape time |
//! | `laptime_inflight_capacity` | gauge | — | the cap on in-flight registry entries |
//! | `laptime_inflight_untracked_total` | counter | — | requests served without an in-flight entry because the registry was full |
//! | `laptime_records_sampled_out_total` | counter | — | requests observed here but given no stored row: unauthenticated refusals beyond [`crate::record::UNAUTHENTICATED_ROWS_PER_S`] |
//! | `laptime_recorder_queue_depth` | gauge | — | records waiting in the recorder queue, at scrape time |
//! | `laptime_shared_dropped_total` | counter | — | channel-health changes not published to Redis because the queue to it was full (only with `[shared] redis_url`) |
//! | `laptime_shared_cache_dropped_total` | counter | — | answers a shared response cache (`cache = { shared = true }`) did not write to Redis because 16 MiB of answers already waited for it (always 0 without shared caches): while it grows, other instances miss answers this one had |
//! | `laptime_limits_shared_fallback_total` | counter | — | rate-limit admissions decided by this instance's own windows because Redis did not answer within 50 ms (with `[shared] redis_url`; always 0 without it): while it grows, limits are per instance |
//! | `laptime_recorder_dropped_total` | counter | `reason` | records never stored: `queue_full`, `recorder_stopped` (finished after shutdown's flush), `given_up` (their batch kept failing: at shutdown, or an error retrying cannot mend) |
//! | `laptime_config_reloads_total` | counter | `result` | config reloads (SIGHUP, `laptime reload`): `applied`, `unchanged`, `refused` (the file failed validation; the running config stays) |
//! | `laptime_otel_exported_total` | counter | — | spans (request and attempt spans) the OTLP receiver accepted (only with `[telemetry] otlp_endpoint`) |
//! | `laptime_otel_dropped_total` | counter | `reason` | spans never exported: `queue_full` (the exporter's queue was full when the request finished), `export_failed` (the receiver could not be reached or refused the batch, after retries), `rejected` (the receiver's partial success named them), `exporter_stopped` (finished after shutdown's flush) |
//! | `laptime_recorder_written_total` | counter | — | records written to the store |
//! | `laptime_recorder_failed_total` | counter | — | records in batch writes that failed (each is tried again: a record counts once per failed try) |
//! | `laptime_recorder_batches_total` | counter | — | batch writes (one transaction each) |
//! | `laptime_recorder_batch_seconds_total` | counter | — | total time spent writing batches; ÷ `batches_total` = mean batch time |
//!
//! All `laptime_*_seconds` histograms use [`DURATION_BUCKETS`] (the OTel duration boundaries).
//! A labelled series appears from its first observation on (a series whose marks or counts were
//! never present is not exposed, rather than exposed as 0).
//!
//! # Buckets (upper bounds, `le`; the OTel semconv's recommended boundaries, plus `+Inf`)
//!
//! - [`DURATION_BUCKETS`], seconds: 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12,
//!   10.24, 20.48, 40.96, 81.92.
//! - [`TTFT_BUCKETS`], seconds: 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
//!   1, 2.5, 5, 7.5, 10.
//! - [`TPOT_BUCKETS`], seconds: 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1,
//!   2.5.
//! - [`TOKEN_BUCKETS`], tokens: 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576,
//!   4194304, 16777216, 67108864.
//!
//! # Access
//!
//! `/metrics` needs an `admin` token (none or an invalid one: 401; a `proxy` or `read` token:
//! 403), unless `server.metrics_public = true`, which adds it to the routes that answer without a
//! token (`laptime_api::routes::unauthenticated`). The values are instance-wide (no workspace label),
//! so a workspace's `read` token must not see them: that would show other tenants' traffic.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use laptime_core::slow::Classification;
use laptime_core::timeline::{between, Marks, Outcome, RequestRecord};
use laptime_core::Dialect;
use laptime_store::recorder::Recorder;
use prometheus::core::{Collector, Desc};
use prometheus::proto;
use prometheus::{
    Counter, CounterVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts,
    Registry, TextEncoder,
};

use crate::inflight::Inflight;
use crate::listen::Connections;
use crate::routing::Router;

/// OTel `gen_ai.client.operation.duration` / `gen_ai.server.request.duration` boundaries (s);
/// also every `laptime_*_seconds` histogram.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// OTel `gen_ai.server.time_to_first_token` boundaries (s).
pub const TTFT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// OTel `gen_ai.server.time_per_output_token` boundaries (s).
pub const TPOT_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

/// OTel `gen_ai.client.token.usage` boundaries (tokens).
pub const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// The model label of a request rejected before routing.
pub const UNROUTED: &str = "_unrouted";
/// The channel and provider label of a request rejected before routing.
pub const NONE: &str = "_none";
/// The model label of a name the config does not name (passed by a `*` channel).
pub const OTHER_MODEL: &str = "_other";

/// The `fault` label of a request that did not fail.
pub const NO_FAULT: &str = "none";

/// `gen_ai.operation.name` for every dialect.
const OPERATION: &str = "chat";

/// A stage histogram: name, help, and its value from the marks (absent when a mark is).
type Stage = (&'static str, &'static str, fn(&Marks) -> Option<Duration>);

/// laptime's stage histograms, in timeline order.
const STAGES: [Stage; 6] = [
    (
        "laptime_upstream_headers_seconds",
        "Upstream response head: t2 (upstream_headers) - t1 (upstream_start), when both are present.",
        |m| between(m.upstream_start, m.upstream_headers),
    ),
    (
        "laptime_first_event_seconds",
        "First non-heartbeat SSE event: t3 (first_event) - t0, when t3 is present.",
        |m| m.first_event,
    ),
    (
        "laptime_first_effective_seconds",
        "First effective output: t4 (first_effective) - t0, when t4 is present.",
        |m| m.first_effective,
    ),
    (
        "laptime_first_visible_seconds",
        "First visible text: t5 (first_visible) - t0, when t5 is present.",
        |m| m.first_visible,
    ),
    (
        "laptime_upstream_done_seconds",
        "Upstream done (terminal event, end or break): t6 (upstream_done) - t0, when t6 is present.",
        |m| m.upstream_done,
    ),
    (
        "laptime_handler_seconds",
        "Gateway done relaying: t7 (handler_done) - t0.",
        |m| m.handler_done,
    ),
];

/// `laptime_tokens_total{type}` values, in the order [`token_counts`] returns them.
const TOKEN_TYPES: [&str; 5] = ["input", "output", "cache_read", "cache_write", "reasoning"];

fn token_counts(r: &RequestRecord) -> [Option<u64>; 5] {
    let t = &r.tokens;
    [t.input, t.output, t.cache_read, t.cache_write, t.reasoning]
}

/// A GenAI histogram whose series carry `error_type` only when the request failed: two vectors
/// (without and with the label) exposed as one metric family.
#[derive(Clone)]
struct WithErrorType {
    ok: HistogramVec,
    failed: HistogramVec,
}

impl WithErrorType {
    fn new(name: &str, help: &str, buckets: &[f64], labels: &[&str]) -> prometheus::Result<Self> {
        let opts = || HistogramOpts::new(name, help).buckets(buckets.to_vec());
        let mut failed_labels = labels.to_vec();
        failed_labels.push("error_type");
        Ok(WithErrorType {
            ok: HistogramVec::new(opts(), labels)?,
            failed: HistogramVec::new(opts(), &failed_labels)?,
        })
    }
}

impl Collector for WithErrorType {
    fn desc(&self) -> Vec<&Desc> {
        self.failed.desc()
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        // The registry merges families of the same name into one.
        let mut families = self.ok.collect();
        families.extend(self.failed.collect());
        families
    }
}

/// The label handles of one (dialect, model, channel, provider), each made on its first
/// observation (so a series that never had its marks is not exposed at all) and then reused.
struct Series {
    dialect: Dialect,
    model: String,
    channel: String,
    provider: String,
    stages: [OnceLock<Histogram>; 6],
    tokens: [OnceLock<IntCounter>; 5],
    cost_usd: OnceLock<Counter>,
    cost_unpriced: OnceLock<IntCounter>,
    /// `laptime_requests_total` for the common case: 200, completed, ok.
    completed_ok: OnceLock<IntCounter>,
    ttft: OnceLock<Histogram>,
    duration_ok: OnceLock<Histogram>,
    tpot_ok: OnceLock<Histogram>,
    /// `gen_ai_client_token_usage` input, output (successful requests).
    usage_ok: [OnceLock<Histogram>; 2],
}

/// The metrics of one gateway instance (its own registry; nothing global).
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    stages: Vec<HistogramVec>,
    tokens: IntCounterVec,
    cost_usd: CounterVec,
    cost_unpriced: IntCounterVec,
    budget_crossings: IntCounterVec,
    limits_shared_fallback: IntCounter,
    ttft: HistogramVec,
    duration: WithErrorType,
    tpot: WithErrorType,
    usage: WithErrorType,
    /// Model label → series of that model (a few: dialects × channels).
    series: RwLock<HashMap<String, Vec<Arc<Series>>>>,
    /// The model names that get their own label: those the config names (at start, and every
    /// config reloaded since: a name once labelled keeps its series).
    named: RwLock<HashSet<String>>,
    config_reloads: IntCounterVec,
    /// Requests recorded `gateway_shutdown` (cut at the drain deadline), for the shutdown's log.
    cut_by_shutdown: std::sync::atomic::AtomicU64,
    sampled_out: IntCounter,
    /// Spans the OTLP receiver accepted, and spans dropped by reason (`crate::traces`).
    otel_exported: IntCounter,
    otel_dropped: IntCounterVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

const GEN_AI_LABELS: [&str; 3] = [
    "gen_ai_operation_name",
    "gen_ai_provider_name",
    "gen_ai_request_model",
];

impl Metrics {
    /// `named`: the model names the config names (every other name is labelled `_other`).
    pub fn new(named: impl IntoIterator<Item = String>) -> prometheus::Result<Metrics> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "laptime_requests_total",
                "Finished requests, one per record.",
            ),
            &[
                "dialect",
                "model",
                "provider",
                "channel",
                "status",
                "outcome",
                "classification",
                "fault",
            ],
        )?;
        registry.register(Box::new(requests.clone()))?;
        let mut stages = Vec::with_capacity(STAGES.len());
        for (name, help, _) in STAGES {
            let h = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(DURATION_BUCKETS.to_vec()),
                &["dialect", "model", "channel"],
            )?;
            registry.register(Box::new(h.clone()))?;
            stages.push(h);
        }
        let tokens = IntCounterVec::new(
            Opts::new(
                "laptime_tokens_total",
                "Upstream-reported tokens (input includes cache reads and writes); absent counts add nothing.",
            ),
            &["type", "model"],
        )?;
        registry.register(Box::new(tokens.clone()))?;
        let cost_usd = CounterVec::new(
            Opts::new(
                "laptime_cost_usd_total",
                "Cost of finished requests at the configured prices, in USD (estimated costs included).",
            ),
            &["model"],
        )?;
        registry.register(Box::new(cost_usd.clone()))?;
        let cost_unpriced = IntCounterVec::new(
            Opts::new(
                "laptime_cost_unpriced_total",
                "Billed requests whose cost is unknown: no configured price covers them.",
            ),
            &["model"],
        )?;
        registry.register(Box::new(cost_unpriced.clone()))?;
        let budget_crossings = IntCounterVec::new(
            Opts::new(
                "laptime_budget_crossings_total",
                "Budgets whose period's spend crossed 80 or 100 percent of them, as this instance saw it.",
            ),
            &["scope", "period", "mode", "threshold"],
        )?;
        registry.register(Box::new(budget_crossings.clone()))?;
        let limits_shared_fallback = IntCounter::new(
            "laptime_limits_shared_fallback_total",
            "Rate-limit admissions decided by this instance's own windows because Redis did not answer in time.",
        )?;
        registry.register(Box::new(limits_shared_fallback.clone()))?;
        let ttft = HistogramVec::new(
            HistogramOpts::new(
                "gen_ai_server_time_to_first_token_seconds",
                "OTel gen_ai.server.time_to_first_token: t4 (first effective output) - t1 (upstream start), successful streamed requests.",
            )
            .buckets(TTFT_BUCKETS.to_vec()),
            &GEN_AI_LABELS,
        )?;
        registry.register(Box::new(ttft.clone()))?;
        let duration = WithErrorType::new(
            "gen_ai_server_request_duration_seconds",
            "OTel gen_ai.server.request.duration: t6 (upstream done) - t1 (upstream start), when both are present.",
            &DURATION_BUCKETS,
            &GEN_AI_LABELS,
        )?;
        registry.register(Box::new(duration.clone()))?;
        let tpot = WithErrorType::new(
            "gen_ai_server_time_per_output_token_seconds",
            "OTel gen_ai.server.time_per_output_token: (t6 - t4) / (output tokens - 1), with at least 2 reported output tokens.",
            &TPOT_BUCKETS,
            &GEN_AI_LABELS,
        )?;
        registry.register(Box::new(tpot.clone()))?;
        let mut usage_labels = GEN_AI_LABELS.to_vec();
        usage_labels.push("gen_ai_token_type");
        let usage = WithErrorType::new(
            "gen_ai_client_token_usage",
            "OTel gen_ai.client.token.usage: upstream-reported input (cache included) and output tokens per request.",
            &TOKEN_BUCKETS,
            &usage_labels,
        )?;
        registry.register(Box::new(usage.clone()))?;
        let sampled_out = IntCounter::new(
            "laptime_records_sampled_out_total",
            "Finished requests counted here but given no stored row (unauthenticated refusals over the sample).",
        )?;
        registry.register(Box::new(sampled_out.clone()))?;
        let otel_exported = IntCounter::new(
            "laptime_otel_exported_total",
            "Spans (request and attempt spans) the OTLP receiver accepted.",
        )?;
        registry.register(Box::new(otel_exported.clone()))?;
        let otel_dropped = IntCounterVec::new(
            Opts::new(
                "laptime_otel_dropped_total",
                "Spans never exported, by reason: the exporter's queue was full, the export failed after retries, the receiver rejected them, or the exporter had stopped.",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(otel_dropped.clone()))?;
        let config_reloads = IntCounterVec::new(
            Opts::new(
                "laptime_config_reloads_total",
                "Config reloads by result: applied, unchanged, or refused (the running config stays).",
            ),
            &["result"],
        )?;
        registry.register(Box::new(config_reloads.clone()))?;
        for result in crate::live::ReloadResult::ALL {
            config_reloads.with_label_values(&[result.as_str()]);
        }
        Ok(Metrics {
            registry,
            requests,
            stages,
            tokens,
            cost_usd,
            cost_unpriced,
            budget_crossings,
            limits_shared_fallback,
            ttft,
            duration,
            tpot,
            usage,
            series: RwLock::new(HashMap::new()),
            named: RwLock::new(named.into_iter().collect()),
            config_reloads,
            cut_by_shutdown: std::sync::atomic::AtomicU64::new(0),
            sampled_out,
            otel_exported,
            otel_dropped,
        })
    }

    /// Observes one finished request. Called once per record, from `Finisher::finish`.
    pub fn observe(&self, r: &RequestRecord) {
        if r.outcome == Outcome::GatewayShutdown {
            self.cut_by_shutdown.fetch_add(1, Ordering::Relaxed);
        }
        let (model, channel, provider) = match &r.channel {
            Some(channel) => (
                r.model.as_deref().unwrap_or(NONE),
                channel.as_str(),
                r.provider.as_deref().unwrap_or(NONE),
            ),
            None => (UNROUTED, NONE, NONE),
        };
        let named = || {
            self.named
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(model)
        };
        let model = if model == NONE || model == UNROUTED || named() {
            model
        } else {
            OTHER_MODEL
        };
        let s = self.series(r.dialect, model, channel, provider);
        let d = s.dialect.as_str();
        let gen_ai = [OPERATION, s.provider.as_str(), s.model.as_str()];

        // laptime's own.
        if r.status == 200
            && r.outcome == Outcome::Completed
            && r.classification == Classification::Ok
        {
            s.completed_ok
                .get_or_init(|| {
                    self.requests.with_label_values(&[
                        d,
                        &s.model,
                        &s.provider,
                        &s.channel,
                        "200",
                        Outcome::Completed.as_str(),
                        Classification::Ok.as_str(),
                        NO_FAULT,
                    ])
                })
                .inc();
        } else {
            let status = r.status.to_string();
            self.requests
                .with_label_values(&[
                    d,
                    &s.model,
                    &s.provider,
                    &s.channel,
                    &status,
                    r.outcome.as_str(),
                    r.classification.as_str(),
                    r.fault().map_or(NO_FAULT, |f| f.as_str()),
                ])
                .inc();
        }
        for (i, (_, _, value)) in STAGES.iter().enumerate() {
            if let Some(v) = value(&r.marks) {
                s.stages[i]
                    .get_or_init(|| self.stages[i].with_label_values(&[d, &s.model, &s.channel]))
                    .observe(v.as_secs_f64());
            }
        }
        for (i, count) in token_counts(r).into_iter().enumerate() {
            if let Some(n) = count {
                s.tokens[i]
                    .get_or_init(|| self.tokens.with_label_values(&[TOKEN_TYPES[i], &s.model]))
                    .inc_by(n);
            }
        }
        match r.cost {
            Some(c) if c.nano_usd > 0 => s
                .cost_usd
                .get_or_init(|| self.cost_usd.with_label_values(&[&s.model]))
                .inc_by(c.usd()),
            Some(_) => {}
            None => s
                .cost_unpriced
                .get_or_init(|| self.cost_unpriced.with_label_values(&[&s.model]))
                .inc(),
        }

        // OTel GenAI: successes on cached handles, failures (with `error_type`) looked up.
        let m = &r.marks;
        let success = r.outcome.is_success();
        let error_type = r.error_class.map_or(r.outcome.as_str(), |c| c.as_str());
        let observe = |split: &WithErrorType,
                       cached: &OnceLock<Histogram>,
                       token_type: Option<&str>,
                       v: f64| {
            let mut labels = gen_ai.to_vec();
            labels.extend(token_type);
            if success {
                cached
                    .get_or_init(|| split.ok.with_label_values(&labels))
                    .observe(v);
            } else {
                labels.push(error_type);
                split.failed.with_label_values(&labels).observe(v);
            }
        };
        if success && r.stream {
            if let Some(v) = between(m.upstream_start, m.first_effective) {
                s.ttft
                    .get_or_init(|| self.ttft.with_label_values(&gen_ai))
                    .observe(v.as_secs_f64());
            }
        }
        if let Some(v) = between(m.upstream_start, m.upstream_done) {
            observe(&self.duration, &s.duration_ok, None, v.as_secs_f64());
        }
        if let (Some(v), Some(out)) = (between(m.first_effective, m.upstream_done), r.tokens.output)
        {
            if out >= 2 {
                let per_token = v.as_secs_f64() / (out - 1) as f64;
                observe(&self.tpot, &s.tpot_ok, None, per_token);
            }
        }
        for (i, (kind, count)) in [("input", r.tokens.input), ("output", r.tokens.output)]
            .into_iter()
            .enumerate()
        {
            if let Some(n) = count {
                observe(&self.usage, &s.usage_ok[i], Some(kind), n as f64);
            }
        }
    }

    /// A budget crossed 80 % or 100 % of itself in its current period.
    pub fn count_budget_crossing(
        &self,
        scope: laptime_core::limit::LimitScope,
        period: laptime_core::limit::Period,
        mode: laptime_core::limit::BudgetMode,
        threshold: u8,
    ) {
        let scope = match scope {
            laptime_core::limit::LimitScope::Workspace => "workspace",
            laptime_core::limit::LimitScope::Token => "token",
        };
        let threshold = threshold.to_string();
        self.budget_crossings
            .with_label_values(&[scope, period.as_str(), mode.as_str(), &threshold])
            .inc();
    }

    /// The counter of rate-limit admissions Redis did not answer (see
    /// [`crate::limits::Limiter::with_shared`]).
    pub fn limits_shared_fallback(&self) -> IntCounter {
        self.limits_shared_fallback.clone()
    }

    /// `spans` spans the OTLP receiver accepted.
    pub fn count_otel_exported(&self, spans: u64) {
        self.otel_exported.inc_by(spans);
    }

    /// `spans` spans dropped for `reason` (0 makes the series appear).
    /// Gives the model names of a reloaded config their own label.
    pub fn name_models(&self, names: impl IntoIterator<Item = String>) {
        self.named
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(names);
    }

    /// Requests recorded `gateway_shutdown` so far: cut because the drain time ran out.
    pub fn cut_by_shutdown(&self) -> u64 {
        self.cut_by_shutdown.load(Ordering::Relaxed)
    }

    /// Counts a config reload by its result.
    pub fn config_reloaded(&self, result: crate::live::ReloadResult) {
        self.config_reloads
            .with_label_values(&[result.as_str()])
            .inc();
    }

    pub fn count_otel_dropped(&self, reason: &str, spans: u64) {
        self.otel_dropped.with_label_values(&[reason]).inc_by(spans);
    }

    /// A finished request that gets no stored row (it was observed all the same).
    pub fn count_sampled_out(&self) {
        self.sampled_out.inc();
    }

    /// The cached handles of a label set, made on first use.
    fn series(&self, dialect: Dialect, model: &str, channel: &str, provider: &str) -> Arc<Series> {
        let matches = |s: &&Arc<Series>| {
            s.dialect == dialect && s.channel == channel && s.provider == provider
        };
        {
            let map = self.series.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(s) = map.get(model).and_then(|v| v.iter().find(matches)) {
                return s.clone();
            }
        }
        let mut map = self.series.write().unwrap_or_else(PoisonError::into_inner);
        let list = map.entry(model.to_string()).or_default();
        if let Some(s) = list.iter().find(matches) {
            return s.clone();
        }
        let s = Arc::new(Series {
            dialect,
            model: model.to_string(),
            channel: channel.to_string(),
            provider: provider.to_string(),
            stages: Default::default(),
            tokens: Default::default(),
            cost_usd: OnceLock::new(),
            cost_unpriced: OnceLock::new(),
            completed_ok: OnceLock::new(),
            ttft: OnceLock::new(),
            duration_ok: OnceLock::new(),
            tpot_ok: OnceLock::new(),
            usage_ok: Default::default(),
        });
        list.push(s.clone());
        s
    }

    /// The exposition: every observed metric plus the scrape-time gauges and counters of the
    /// router's channels and the recorder.
    pub fn render(
        &self,
        router: &Router,
        recorder: &Recorder,
        connections: &Connections,
        inflight: &Inflight,
    ) -> prometheus::Result<String> {
        let mut families = self.registry.gather();
        families.extend(scrape_time(router, recorder));
        families.extend(connection_families(connections));
        families.extend(inflight_families(inflight));
        families.sort_by(|a, b| a.name().cmp(b.name()));
        TextEncoder::new().encode_to_string(&families)
    }
}

/// The in-flight registry's size and what it could not track, at scrape time.
fn inflight_families(r: &Inflight) -> [proto::MetricFamily; 3] {
    [
        family(
            "laptime_inflight_entries",
            "Requests in the in-flight registry (running, or finished with their records not written yet), at scrape time.",
            proto::MetricType::GAUGE,
            vec![gauge(&[], r.len() as f64)],
        ),
        family(
            "laptime_inflight_capacity",
            "The cap on in-flight registry entries.",
            proto::MetricType::GAUGE,
            vec![gauge(&[], r.capacity() as f64)],
        ),
        family(
            "laptime_inflight_untracked_total",
            "Requests served without an in-flight entry because the registry was full (a crash would leave no trace of them).",
            proto::MetricType::COUNTER,
            vec![counter(r.untracked() as f64)],
        ),
    ]
}

/// The client connections' gauge and counters, at scrape time.
fn connection_families(c: &Connections) -> [proto::MetricFamily; 4] {
    let count = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    [
        family(
            "laptime_connections_open",
            "Client connections open, at scrape time.",
            proto::MetricType::GAUGE,
            vec![gauge(&[], c.open() as f64)],
        ),
        family(
            "laptime_connections_max",
            "The cap on open client connections.",
            proto::MetricType::GAUGE,
            vec![gauge(&[], c.max() as f64)],
        ),
        family(
            "laptime_connections_evicted_total",
            "Idle client connections closed to make room for a new one at the cap.",
            proto::MetricType::COUNTER,
            vec![counter(count(&c.evicted))],
        ),
        family(
            "laptime_connections_refused_total",
            "New client connections closed at once: the cap was reached and none was idle.",
            proto::MetricType::COUNTER,
            vec![counter(count(&c.refused))],
        ),
    ]
}

/// Families read at scrape time rather than observed per request.
fn scrape_time(router: &Router, recorder: &Recorder) -> Vec<proto::MetricFamily> {
    let stats = recorder.stats();
    let count = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    let inflight = router
        .channels()
        .iter()
        .map(|c| {
            gauge(
                &[("channel", &c.name)],
                f64::from(c.inflight.load(Ordering::Relaxed)),
            )
        })
        .collect();
    let states = router
        .channels()
        .iter()
        .flat_map(|c| {
            let now = c.circuit_state().as_str();
            ["closed", "open", "half_open"].map(|state| {
                gauge(
                    &[("channel", &c.name), ("state", state)],
                    if state == now { 1.0 } else { 0.0 },
                )
            })
        })
        .collect();
    let transitions = router
        .channels()
        .iter()
        .map(|c| labelled_counter(&[("channel", &c.name)], c.health.transitions() as f64))
        .collect();
    // Every channel shares one publisher; present only when sharing is on.
    let shared = router
        .channels()
        .iter()
        .find_map(|c| c.health.publisher())
        .map(|p| {
            family(
                "laptime_shared_dropped_total",
                "Channel-health changes not published to Redis because the queue to it was full.",
                proto::MetricType::COUNTER,
                vec![counter(p.dropped() as f64)],
            )
        });
    let mut families = vec![
        family(
            "laptime_circuit_state",
            "Each channel's circuit breaker state (1 for the current one), at scrape time.",
            proto::MetricType::GAUGE,
            states,
        ),
        family(
            "laptime_circuit_transitions_total",
            "Circuit breaker state changes per channel.",
            proto::MetricType::COUNTER,
            transitions,
        ),
        family(
            "laptime_channel_inflight",
            "Requests in flight on each configured channel, at scrape time.",
            proto::MetricType::GAUGE,
            inflight,
        ),
        family(
            "laptime_recorder_queue_depth",
            "Records waiting in the recorder queue, at scrape time.",
            proto::MetricType::GAUGE,
            vec![gauge(&[], recorder.queue_depth() as f64)],
        ),
        family(
            "laptime_recorder_dropped_total",
            "Records never stored, by reason: the queue was full, the recorder had stopped, or their batch was given up after failing.",
            proto::MetricType::COUNTER,
            [
                ("queue_full", &stats.dropped_queue_full),
                ("recorder_stopped", &stats.dropped_stopped),
                ("given_up", &stats.given_up),
            ]
            .into_iter()
            .map(|(reason, n)| labelled_counter(&[("reason", reason)], count(n)))
            .collect(),
        ),
        family(
            "laptime_recorder_written_total",
            "Records written to the store.",
            proto::MetricType::COUNTER,
            vec![counter(count(&stats.written))],
        ),
        family(
            "laptime_recorder_failed_total",
            "Records in batch writes that failed; each batch is tried again until written or given up.",
            proto::MetricType::COUNTER,
            vec![counter(count(&stats.failed))],
        ),
        family(
            "laptime_recorder_batches_total",
            "Batch writes (one transaction each).",
            proto::MetricType::COUNTER,
            vec![counter(count(&stats.batches))],
        ),
        family(
            "laptime_recorder_batch_seconds_total",
            "Total time spent writing record batches.",
            proto::MetricType::COUNTER,
            vec![counter(count(&stats.batch_us_total) / 1e6)],
        ),
    ];
    families.extend(shared);
    families.push(family(
        "laptime_shared_cache_dropped_total",
        "Answers not written to a shared response cache because too many bytes already waited for Redis.",
        proto::MetricType::COUNTER,
        vec![counter(crate::shared_cache::dropped_total() as f64)],
    ));
    families
}

fn family(
    name: &str,
    help: &str,
    kind: proto::MetricType,
    metrics: Vec<proto::Metric>,
) -> proto::MetricFamily {
    let mut f = proto::MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

fn label_pairs(labels: &[(&str, &str)]) -> Vec<proto::LabelPair> {
    labels
        .iter()
        .map(|(k, v)| {
            let mut p = proto::LabelPair::default();
            p.set_name((*k).to_string());
            p.set_value((*v).to_string());
            p
        })
        .collect()
}

fn gauge(labels: &[(&str, &str)], value: f64) -> proto::Metric {
    let mut m = proto::Metric::from_label(label_pairs(labels));
    let mut g = proto::Gauge::default();
    g.set_value(value);
    m.set_gauge(g);
    m
}

fn counter(value: f64) -> proto::Metric {
    labelled_counter(&[], value)
}

fn labelled_counter(labels: &[(&str, &str)], value: f64) -> proto::Metric {
    let mut m = proto::Metric::from_label(label_pairs(labels));
    let mut c = proto::Counter::default();
    c.set_value(value);
    m.set_counter(c);
    m
}

#[cfg(test)]
mod tests {
    use laptime_core::timeline::{ErrorClass, Hedge, RequestShape};
    use laptime_core::usage::Tokens;

    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    fn record(model: &str, outcome: Outcome, error_class: Option<ErrorClass>) -> RequestRecord {
        RequestRecord {
            request_id: "req_1".into(),
            workspace_id: Some("ws_1".into()),
            key_id: Some("key_1".into()),
            created_at_us: 0,
            model: Some(model.into()),
            provider: Some("openai".into()),
            channel: Some("main".into()),
            group: Some("default".into()),
            dialect: Dialect::Responses,
            upstream_dialect: Some(Dialect::Responses),
            stream: true,
            status: 200,
            outcome,
            timeout_kind: None,
            error_class,
            classification: Classification::Ok,
            flags: Vec::new(),
            marks: Marks {
                upstream_start: ms(10),
                upstream_headers: ms(110),
                first_event: ms(200),
                first_effective: ms(1010),
                first_visible: ms(1010),
                upstream_done: ms(3010),
                handler_done: ms(3020),
                ..Marks::default()
            },
            tokens: Tokens {
                input: Some(100),
                output: Some(5),
                ..Tokens::default()
            },
            event_count: 7,
            text_delta_count: 5,
            channel_inflight: Some(1),
            attempts: Vec::new(),
            hedge: Hedge::None,
            failover_count: 0,
            cached: false,
            shape: RequestShape::default(),
            region: None,
            instance: None,
            trace_id: Some("trace_1".into()),
            cost: None,
            refused_by: None,
            exchange: Default::default(),
            in_band: None,
        }
    }

    fn text(m: &Metrics) -> String {
        TextEncoder::new()
            .encode_to_string(&m.registry.gather())
            .unwrap()
    }

    #[test]
    fn gen_ai_values_follow_the_formulas_and_buckets() {
        let m = Metrics::new(["gpt-x".to_string()]).unwrap();
        m.observe(&record("gpt-x", Outcome::Completed, None));
        let t = text(&m);
        let labels = r#"gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="gpt-x""#;
        // TTFT = t4 - t1 = 1.0 s; duration = t6 - t1 = 3.0 s; TPOT = (t6 - t4) / (5 - 1) = 0.5 s.
        for line in [
            format!("gen_ai_server_time_to_first_token_seconds_sum{{{labels}}} 1\n"),
            format!("gen_ai_server_time_to_first_token_seconds_bucket{{{labels},le=\"1\"}} 1\n"),
            format!("gen_ai_server_time_to_first_token_seconds_bucket{{{labels},le=\"0.75\"}} 0\n"),
            format!("gen_ai_server_request_duration_seconds_sum{{{labels}}} 3\n"),
            format!("gen_ai_server_time_per_output_token_seconds_sum{{{labels}}} 0.5\n"),
            format!("gen_ai_server_time_per_output_token_seconds_bucket{{{labels},le=\"0.5\"}} 1\n"),
            format!("gen_ai_server_time_per_output_token_seconds_bucket{{{labels},le=\"0.4\"}} 0\n"),
            format!("gen_ai_client_token_usage_sum{{{labels},gen_ai_token_type=\"input\"}} 100\n"),
            format!("gen_ai_client_token_usage_bucket{{{labels},gen_ai_token_type=\"input\",le=\"256\"}} 1\n"),
            format!("gen_ai_client_token_usage_bucket{{{labels},gen_ai_token_type=\"input\",le=\"64\"}} 0\n"),
            "laptime_upstream_headers_seconds_sum{channel=\"main\",dialect=\"responses\",model=\"gpt-x\"} 0.1\n".to_string(),
            "laptime_tokens_total{model=\"gpt-x\",type=\"input\"} 100\n".to_string(),
        ] {
            assert!(t.contains(&line), "{line} not in\n{t}");
        }
        assert!(!t.contains("error_type"));
        assert!(
            !t.contains("cache_read"),
            "absent counts are not exposed as 0"
        );
        for secret in ["req_1", "ws_1", "key_1", "trace_1"] {
            assert!(!t.contains(secret));
        }
    }

    #[test]
    fn failures_carry_error_type_and_are_left_out_of_ttft() {
        let m = Metrics::new(["gpt-x".to_string()]).unwrap();
        let mut r = record(
            "gpt-x",
            Outcome::UpstreamError,
            Some(ErrorClass::StreamError),
        );
        r.classification = Classification::Failed;
        m.observe(&r);
        let mut r = record("gpt-x", Outcome::ClientCancelled, None);
        r.tokens.output = Some(1);
        m.observe(&r);
        let t = text(&m);
        assert!(!t.contains("gen_ai_server_time_to_first_token_seconds_count"));
        assert!(t.contains(
            r#"gen_ai_server_request_duration_seconds_count{error_type="stream_error","#
        ));
        // Without an error class the outcome names the error.
        assert!(t.contains(
            r#"gen_ai_server_request_duration_seconds_count{error_type="client_cancelled","#
        ));
        // One output token: no time per output token.
        assert_eq!(
            t.matches("gen_ai_server_time_per_output_token_seconds_count{")
                .count(),
            1
        );
        assert!(t.contains(r#"outcome="upstream_error",provider="openai",status="200"} 1"#));
    }

    #[test]
    fn only_model_names_the_config_names_get_their_own_series() {
        let m = Metrics::new(["m0".to_string()]).unwrap();
        for i in 0..3000 {
            m.observe(&record(&format!("m{i}"), Outcome::Completed, None));
        }
        m.observe(&record(&"x".repeat(1 << 20), Outcome::Completed, None));
        m.observe(&record("m0", Outcome::Completed, None));
        let t = text(&m);
        assert!(t.contains(r#"laptime_requests_total{channel="main",classification="ok",dialect="responses",fault="none",model="_other",outcome="completed",provider="openai",status="200"} 3000"#));
        assert!(t.contains(r#"laptime_requests_total{channel="main",classification="ok",dialect="responses",fault="none",model="m0",outcome="completed",provider="openai",status="200"} 2"#));
        // Only the two label values: the exposition has the lines it has for two names.
        let two = Metrics::new(["m0".to_string()]).unwrap();
        two.observe(&record("m0", Outcome::Completed, None));
        two.observe(&record("m1", Outcome::Completed, None));
        assert_eq!(t.lines().count(), text(&two).lines().count());
        assert!(
            !t.contains("m1\"") && t.len() < 100_000,
            "{} bytes",
            t.len()
        );
    }

    #[test]
    fn unrouted_requests_use_placeholder_labels() {
        let m = Metrics::new(["gpt-x".to_string()]).unwrap();
        let mut r = record(
            "whatever-the-client-sent",
            Outcome::Rejected,
            Some(ErrorClass::UnknownModel),
        );
        r.channel = None;
        r.provider = None;
        r.status = 404;
        r.marks = Marks {
            handler_done: ms(1),
            ..Marks::default()
        };
        r.tokens = Tokens::default();
        m.observe(&r);
        let t = text(&m);
        assert!(!t.contains("whatever-the-client-sent"));
        assert!(t.contains(r#"laptime_handler_seconds_count{channel="_none",dialect="responses",model="_unrouted"} 1"#));
        assert!(!t.contains("gen_ai_"));
    }
}
