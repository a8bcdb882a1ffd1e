//! The read-back shapes shared by the GraphQL API (camelCase) and REST (snake_case): each struct
//! derives both, so the two cannot drift apart. Also the window and filter parsing both use.

use async_graphql::{Enum, InputObject, SimpleObject, ID};
use laptime_core::compare::{EffortClass, TokenBucket};
use laptime_core::rollup::{Metric, MetricStats, Rollup, RELATIVE_ERROR};
use laptime_core::timeline::RequestRecord;
use laptime_core::timeline::RequestShape;
use laptime_core::views::{
    latency_ms, rfc3339, stored_precision, ttft_ms, upstream_ms, AttemptView, InBandSent,
    JudgementView, Reading, TimingView,
};
use laptime_store::usage::{GroupDim, UsageFilter, UsageResult};
use serde::{Deserialize, Serialize};

/// How percentiles are computed, as every usage answer states it.
pub fn percentile_method() -> String {
    format!(
        "nearest-rank over a log-bucketed sketch merged from per-minute rollups; each percentile is within {}% (relative) of the exact nearest-rank value; nulls are left out and counted in nullCount",
        RELATIVE_ERROR * 100.0
    )
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
#[graphql(name = "MetricStats")]
pub struct MetricStatsOut {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    /// Requests that had this value.
    pub count: u64,
    /// Requests without it (left out of the percentiles).
    pub null_count: u64,
}

impl From<MetricStats> for MetricStatsOut {
    fn from(s: MetricStats) -> Self {
        // A sketch's bucket value or a mean carries no more than the marks it came from.
        let stored = |v: Option<f64>| v.map(stored_precision);
        MetricStatsOut {
            p50: stored(s.p50),
            p95: stored(s.p95),
            p99: stored(s.p99),
            min: stored(s.min),
            max: stored(s.max),
            mean: stored(s.mean),
            count: s.count,
            null_count: s.null_count,
        }
    }
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
pub struct ClassificationCount {
    pub classification: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
#[graphql(name = "Rollup")]
pub struct RollupOut {
    pub request_count: u64,
    /// Requests whose outcome was not a success (failures are never dropped from the counts).
    pub error_count: u64,
    pub error_rate: Option<f64>,
    pub cache_hit_count: u64,
    pub failover_total: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// The summed cost of the requests whose cost is known, USD; null when none is.
    pub cost_usd: Option<f64>,
    /// Requests billed with no configured price covering them (their cost is unknown, not 0).
    pub cost_unpriced_count: u64,
    /// Requests whose cost includes estimated tokens (the provider reported no usage for them).
    pub cost_estimated_count: u64,
    /// Output tokens the gateway estimated where the provider reported none (never in
    /// `outputTokens`), and how many requests that was: their output speeds are in
    /// `estimatedVisibleOutputTps`, never in `visibleOutputTps`.
    pub estimated_output_tokens: u64,
    pub output_estimated_count: u64,
    pub classifications: Vec<ClassificationCount>,
    pub latency_ms: MetricStatsOut,
    pub ttft_ms: MetricStatsOut,
    pub upstream_ms: MetricStatsOut,
    pub auth_ms: MetricStatsOut,
    pub distribution_ms: MetricStatsOut,
    pub body_read_ms: MetricStatsOut,
    pub upstream_headers_ms: MetricStatsOut,
    pub first_sse_event_ms: MetricStatsOut,
    pub first_response_ms: MetricStatsOut,
    pub first_text_delta_ms: MetricStatsOut,
    pub upstream_done_ms: MetricStatsOut,
    pub total_handler_ms: MetricStatsOut,
    /// Output speed, tokens/s, of the requests whose provider counted the output (the others
    /// are nulls here).
    pub visible_output_tps: MetricStatsOut,
    /// Output speed, tokens/s, of the requests whose output the gateway estimated (a Chat
    /// stream without usage): apart, so the provider-counted percentiles never rest on an
    /// estimate.
    pub estimated_visible_output_tps: MetricStatsOut,
}

impl From<&Rollup> for RollupOut {
    fn from(r: &Rollup) -> Self {
        let s = |m: Metric| MetricStatsOut::from(r.stats(m));
        RollupOut {
            request_count: r.requests,
            error_count: r.errors,
            error_rate: r.error_rate(),
            cache_hit_count: r.cache_hits,
            failover_total: r.failovers,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cache_read_tokens: r.cache_read_tokens,
            cache_write_tokens: r.cache_write_tokens,
            reasoning_tokens: r.reasoning_tokens,
            cost_usd: r.cost_usd(),
            cost_unpriced_count: r.cost_unpriced,
            cost_estimated_count: r.cost_estimated,
            estimated_output_tokens: r.estimated_output_tokens,
            output_estimated_count: r.output_estimated,
            classifications: r
                .classifications
                .iter()
                .map(|(c, n)| ClassificationCount {
                    classification: c.clone(),
                    count: *n,
                })
                .collect(),
            latency_ms: s(Metric::LatencyMs),
            ttft_ms: s(Metric::TtftMs),
            upstream_ms: s(Metric::UpstreamMs),
            auth_ms: s(Metric::AuthMs),
            distribution_ms: s(Metric::DistributionMs),
            body_read_ms: s(Metric::BodyReadMs),
            upstream_headers_ms: s(Metric::UpstreamHeadersMs),
            first_sse_event_ms: s(Metric::FirstSseEventMs),
            first_response_ms: s(Metric::FirstResponseMs),
            first_text_delta_ms: s(Metric::FirstTextDeltaMs),
            upstream_done_ms: s(Metric::UpstreamDoneMs),
            total_handler_ms: s(Metric::TotalHandlerMs),
            visible_output_tps: s(Metric::VisibleOutputTps),
            estimated_visible_output_tps: s(Metric::EstimatedVisibleOutputTps),
        }
    }
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
pub struct GroupKey {
    pub dimension: String,
    pub value: Option<String>,
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
pub struct UsageGroup {
    pub key: Vec<GroupKey>,
    /// The requests this group's figures describe: the filters in force and the group's key.
    pub population: Population,
    pub rollup: RollupOut,
}

/// The requests a set of figures describes, to print beside every percentile: two readers of
/// "p95 first visible text" read the same population only when this line is the same.
#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
pub struct Population {
    /// Each filter in force (a group's key included), in a fixed order; a null value asks for
    /// requests without one. Empty: every request of the workspace in the window.
    pub filters: Vec<GroupKey>,
    /// The same as one line (`stream=true, tools_present=false, input_bucket=1k-4k`; `all
    /// requests` when there is no filter).
    pub description: String,
    /// Requests in the population (each metric's `count` and `nullCount` split it).
    pub request_count: u64,
}

impl Population {
    fn new(
        mut filters: Vec<(GroupDim, Option<String>)>,
        extra: &[(GroupDim, Option<String>)],
        requests: u64,
    ) -> Self {
        filters.extend(extra.iter().cloned());
        let description = if filters.is_empty() {
            "all requests".to_string()
        } else {
            filters
                .iter()
                .map(|(d, v)| format!("{}={}", d.as_str(), v.as_deref().unwrap_or("(none)")))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Population {
            filters: filters
                .into_iter()
                .map(|(d, v)| GroupKey {
                    dimension: d.as_str().to_string(),
                    value: v,
                })
                .collect(),
            description,
            request_count: requests,
        }
    }
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
#[graphql(name = "Window")]
pub struct WindowOut {
    /// RFC 3339, inclusive.
    pub from: String,
    /// RFC 3339, exclusive.
    pub to: String,
}

/// A usage answer without its `recent` events (resolved separately).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageReport {
    pub window: WindowOut,
    pub percentile_method: String,
    pub relative_error: f64,
    /// The requests `rollup` describes.
    pub population: Population,
    pub rollup: RollupOut,
    pub groups: Vec<UsageGroup>,
}

impl UsageReport {
    /// The report of `u`, the answer under `filter`.
    pub fn new(u: &UsageResult, filter: &UsageFilter) -> Self {
        let in_force = filter.in_force();
        UsageReport {
            window: WindowOut {
                from: rfc3339(u.window.from_us),
                to: rfc3339(u.window.to_us),
            },
            percentile_method: percentile_method(),
            relative_error: RELATIVE_ERROR,
            population: Population::new(in_force.clone(), &[], u.total.requests),
            rollup: RollupOut::from(&u.total),
            groups: u
                .groups
                .iter()
                .map(|(key, r)| UsageGroup {
                    key: key
                        .iter()
                        .map(|(d, v)| GroupKey {
                            dimension: d.as_str().to_string(),
                            value: v.clone(),
                        })
                        .collect(),
                    population: Population::new(in_force.clone(), key, r.requests),
                    rollup: RollupOut::from(r),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
#[graphql(name = "Timing")]
pub struct TimingOut {
    pub auth_ms: Option<f64>,
    /// The rate-limit and budget checks; null when no limit applies.
    pub admission_ms: Option<f64>,
    pub distribution_ms: Option<f64>,
    pub body_read_ms: Option<f64>,
    pub upstream_headers_ms: Option<f64>,
    pub first_sse_event_ms: Option<f64>,
    pub first_response_ms: Option<f64>,
    pub first_text_delta_ms: Option<f64>,
    pub upstream_done_ms: Option<f64>,
    /// The last effective output, from t0; the time after it up to upstream done generated
    /// nothing (a stall).
    pub last_effective_ms: Option<f64>,
    pub total_handler_ms: Option<f64>,
    pub visible_output_tps: Option<f64>,
    /// `visibleOutputTps` counts the gateway's estimate of the output tokens.
    pub visible_output_tps_estimated: bool,
}

impl From<TimingView> for TimingOut {
    fn from(t: TimingView) -> Self {
        TimingOut {
            auth_ms: t.auth_ms,
            admission_ms: t.admission_ms,
            distribution_ms: t.distribution_ms,
            body_read_ms: t.body_read_ms,
            upstream_headers_ms: t.upstream_headers_ms,
            first_sse_event_ms: t.first_sse_event_ms,
            first_response_ms: t.first_response_ms,
            first_text_delta_ms: t.first_text_delta_ms,
            upstream_done_ms: t.upstream_done_ms,
            last_effective_ms: t.last_effective_ms,
            total_handler_ms: t.total_handler_ms,
            visible_output_tps: t.visible_output_tps,
            visible_output_tps_estimated: t.visible_output_tps_estimated,
        }
    }
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
#[graphql(name = "Attempt")]
pub struct AttemptOut {
    pub channel: String,
    pub role: String,
    pub won: bool,
    pub status: Option<u16>,
    pub error_class: Option<String>,
    /// Whose fault the attempt's error was: `upstream`, `client` or `gateway`.
    pub fault: Option<String>,
    pub start_ms: Option<f64>,
    pub headers_ms: Option<f64>,
    pub first_byte_ms: Option<f64>,
    pub end_ms: Option<f64>,
    /// When the new upstream connection this attempt opened was connected (TCP, to the proxy
    /// when there is one), ms from t0; null when it reused a pooled connection.
    pub connected_ms: Option<f64>,
    /// When the proxy's CONNECT tunnel was open, ms from t0; null without a proxy (or a plain
    /// HTTP upstream, sent to the proxy in absolute form) or on a pooled connection.
    pub tunnel_ms: Option<f64>,
    /// When the TLS handshake with the upstream was done, ms from t0; null for plain HTTP or on
    /// a pooled connection.
    pub tls_ms: Option<f64>,
}

impl From<AttemptView> for AttemptOut {
    fn from(a: AttemptView) -> Self {
        AttemptOut {
            channel: a.channel,
            role: a.role.to_string(),
            won: a.won,
            status: a.status,
            error_class: a.error_class.map(str::to_string),
            fault: a.fault.map(str::to_string),
            start_ms: a.start_ms,
            headers_ms: a.headers_ms,
            first_byte_ms: a.first_byte_ms,
            end_ms: a.end_ms,
            connected_ms: a.connected_ms,
            tunnel_ms: a.tunnel_ms,
            tls_ms: a.tls_ms,
        }
    }
}

/// A request of this gateway process whose record is not in the store yet: still running, or
/// finished with its record queued. Marks are those reached so far, offsets from t0 in ms as in
/// the request log; a mark not reached yet is null.
#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
pub struct InflightRequest {
    pub request_id: String,
    pub workspace_id: Option<String>,
    /// t0 as RFC 3339.
    pub created_at: String,
    /// `running`, or `finished` (its record waits for the store).
    pub state: String,
    /// Wall-clock time since t0, ms.
    pub age_ms: f64,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub channel: Option<String>,
    pub group: Option<String>,
    pub dialect: String,
    pub upstream_dialect: Option<String>,
    pub stream: bool,
    /// The status the client got; null while no answer head was sent.
    pub status: Option<u16>,
    /// The outcome once finished; null while running.
    pub outcome: Option<String>,
    pub attempts: Vec<AttemptOut>,
    pub timing: TimingOut,
}

impl InflightRequest {
    pub fn new(e: &laptime_proxy::inflight::Entry, now_us: i64) -> Self {
        let r = e.record();
        let state = e.state();
        InflightRequest {
            request_id: r.request_id.clone(),
            workspace_id: r.workspace_id.clone(),
            created_at: rfc3339(r.created_at_us),
            state: state.as_str().to_string(),
            age_ms: (now_us - r.created_at_us).max(0) as f64 / 1000.0,
            model: r.model.clone(),
            provider: r.provider.clone(),
            channel: r.channel.clone(),
            group: r.group.clone(),
            dialect: r.dialect.as_str().to_string(),
            upstream_dialect: r.upstream_dialect.map(|d| d.as_str().to_string()),
            stream: r.stream,
            status: e.status(),
            outcome: (state == laptime_proxy::inflight::State::Finished)
                .then(|| r.outcome.as_str().to_string()),
            attempts: r
                .attempts
                .iter()
                .map(|a| AttemptOut::from(AttemptView::new(a)))
                .collect(),
            timing: TimingView::new(&r.marks, &r.tokens).into(),
        }
    }
}

/// What reading records back takes from the running config (the thresholds in force now).
pub fn reading(config: &laptime_proxy::config::Config) -> Reading {
    Reading {
        thresholds: config.thresholds,
        gemini_timing_comment: config.server.gemini_timing_comment,
    }
}

/// The request's shape as the client sent it; a field the request did not set is null.
#[derive(Debug, Clone, PartialEq, SimpleObject)]
#[graphql(name = "RequestShape")]
pub struct ShapeOut {
    pub max_output_tokens: Option<u64>,
    /// As the client wrote it (`low`, `medium`, `high`, a budget…).
    pub reasoning_effort: Option<String>,
    pub tool_count: Option<u32>,
    pub tool_choice: Option<String>,
    /// `text`, `json_object` or `json_schema`.
    pub response_format: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
}

impl From<&RequestShape> for ShapeOut {
    fn from(s: &RequestShape) -> Self {
        ShapeOut {
            max_output_tokens: s.max_output_tokens,
            reasoning_effort: s.reasoning_effort.clone(),
            tool_count: s.tool_count,
            tool_choice: s.tool_choice.clone(),
            response_format: s.response_format.clone(),
            temperature: s.temperature,
            top_p: s.top_p,
        }
    }
}

/// One stage the classifier judged: its figure against the threshold in force now.
#[derive(Debug, Clone, PartialEq, SimpleObject)]
#[graphql(name = "Judgement")]
pub struct JudgementOut {
    /// The slow-stage name (`upstream_headers_slow`, …).
    pub stage: String,
    /// `ms`, or `tok/s` for output speed.
    pub unit: String,
    pub measured: f64,
    pub threshold: f64,
    /// How far past the threshold (positive when slow; for output speed, how far under it).
    pub past_threshold: f64,
    pub slow: bool,
    /// The config key that sets the threshold (`thresholds.upstream_headers_ms`, …).
    pub config_key: String,
}

impl From<JudgementView> for JudgementOut {
    fn from(j: JudgementView) -> Self {
        JudgementOut {
            stage: j.stage.to_string(),
            unit: j.unit.to_string(),
            measured: j.measured,
            threshold: j.threshold,
            past_threshold: j.past_threshold,
            slow: j.slow,
            config_key: j.config_key.to_string(),
        }
    }
}

/// What the client actually received in-band.
#[derive(Debug, Clone, PartialEq, SimpleObject)]
#[graphql(name = "InBand")]
pub struct InBandOut {
    /// `sse_comment`, `trailers` (trailers only), `server_timing`, `none`, or `unknown` (a
    /// record from before the gateway noted what it sent, which cannot tell).
    pub carrier: String,
    /// Whether the values also went as HTTP trailers; null when `derived`.
    pub trailers: Option<bool>,
    /// The exact line the client got; null when none was sent or the record cannot tell.
    pub line: Option<String>,
    /// Why no line was sent, or why the record cannot tell.
    pub note: Option<String>,
    /// Read from the record's other fields (written before the gateway noted what it sent),
    /// not the stored fact.
    pub derived: bool,
}

impl From<InBandSent> for InBandOut {
    fn from(b: InBandSent) -> Self {
        InBandOut {
            carrier: b.carrier.to_string(),
            trailers: b.trailers,
            line: b.line,
            note: b.note.map(str::to_string),
            derived: b.derived,
        }
    }
}

/// One request in the usage API's vocabulary.
#[derive(Debug, Clone, PartialEq, SimpleObject)]
pub struct RequestEvent {
    pub request_id: ID,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub channel: Option<String>,
    pub group: Option<String>,
    /// The client's dialect (`clientDialect` says the same).
    pub dialect: String,
    pub client_dialect: String,
    /// The dialect of the channel that answered; null when no upstream was called.
    pub upstream_dialect: Option<String>,
    /// The request and its answer were translated between the two dialects.
    pub translated: bool,
    pub stream: bool,
    pub status: u16,
    pub outcome: String,
    /// Which deadline fired, for outcome `timeout` (`idle`, `progress`, `total`, …).
    pub timeout_kind: Option<String>,
    pub error_class: Option<String>,
    /// Whose fault the failure was: `upstream`, `client` or `gateway`; null for a success.
    pub fault: Option<String>,
    pub classification: String,
    pub flags: Vec<String>,
    /// t0 as RFC 3339.
    pub ts: String,
    /// t7 − t0; present for every request but one found in flight after a crash
    /// (`gateway_crashed`), which has no t7.
    pub latency_ms: Option<f64>,
    /// First response byte of the winning attempt, from its dispatch.
    pub ttft_ms: Option<f64>,
    /// Upstream done, from the winning attempt's dispatch.
    pub upstream_ms: Option<f64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    /// The part of `cacheWriteTokens` written for one hour (Anthropic).
    #[graphql(name = "cacheWrite1hTokens")]
    pub cache_write_1h_tokens: Option<u64>,
    /// What the request cost, USD; null when it was billed but no price covers it.
    pub cost_usd: Option<f64>,
    /// Some tokens in `costUsd` were estimated; null when the cost is unknown.
    pub cost_estimated: Option<bool>,
    /// The limit or budget that refused the request (outcome `rate_limited`).
    pub refused_by: Option<String>,
    pub failover_count: u32,
    pub cached: bool,
    pub hedge: String,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Output tokens the gateway counted with its tokenizer because the provider reported
    /// none (null when it did); never summed into `outputTokens`.
    pub estimated_output_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    pub event_count: u32,
    pub text_delta_count: u32,
    pub channel_inflight: Option<u32>,
    /// The gateway instance that served it (`[server] instance`); null on records written
    /// before instances were named.
    pub instance: Option<String>,
    /// `generation` for a model call, else the endpoint (`embeddings`, `files`, …).
    pub endpoint: String,
    /// Bytes of the request body, and of the answer's body relayed to the client.
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    /// Which of the channel's keys (`api_key_envs`, from 0) served it.
    pub key_index: Option<u32>,
    /// The W3C trace id (the client's `traceparent`, else generated), as sent upstream.
    pub trace_id: Option<String>,
    /// The serving instance's configured coarse region.
    pub region: Option<String>,
    pub shape: ShapeOut,
    /// Each stage the classifier could judge, with its threshold and how far past it.
    pub judgements: Vec<JudgementOut>,
    /// What the client got in-band.
    pub in_band: InBandOut,
    pub timing: TimingOut,
    pub attempts: Vec<AttemptOut>,
}

impl RequestEvent {
    pub fn new(r: &RequestRecord, reading: &Reading) -> Self {
        RequestEvent {
            request_id: ID(r.request_id.clone()),
            model: r.model.clone(),
            provider: r.provider.clone(),
            channel: r.channel.clone(),
            group: r.group.clone(),
            dialect: r.dialect.as_str().to_string(),
            client_dialect: r.dialect.as_str().to_string(),
            upstream_dialect: r.upstream_dialect.map(|d| d.as_str().to_string()),
            translated: r.translated(),
            stream: r.stream,
            status: r.status,
            outcome: r.outcome.as_str().to_string(),
            timeout_kind: r.timeout_kind.map(|k| k.as_str().to_string()),
            error_class: r.error_class.map(|c| c.as_str().to_string()),
            fault: r.fault().map(|f| f.as_str().to_string()),
            classification: r.classification.as_str().to_string(),
            flags: r.flags.iter().map(|f| f.as_str().to_string()).collect(),
            ts: rfc3339(r.created_at_us),
            latency_ms: latency_ms(&r.marks),
            ttft_ms: ttft_ms(&r.marks),
            upstream_ms: upstream_ms(&r.marks),
            cache_read_tokens: r.tokens.cache_read,
            cache_write_tokens: r.tokens.cache_write,
            cache_write_1h_tokens: r.tokens.cache_write_1h,
            cost_usd: r.cost.map(|c| c.usd()),
            cost_estimated: r.cost.map(|c| c.estimated),
            refused_by: r.refused_by.map(|l| l.as_str().to_string()),
            failover_count: r.failover_count,
            cached: r.cached,
            hedge: r.hedge.as_str().to_string(),
            input_tokens: r.tokens.input,
            output_tokens: r.tokens.output,
            estimated_output_tokens: r.tokens.estimated_output,
            reasoning_tokens: r.tokens.reasoning,
            event_count: r.event_count,
            text_delta_count: r.text_delta_count,
            channel_inflight: r.channel_inflight,
            instance: r.instance.clone(),
            endpoint: r.exchange.endpoint.as_str().to_string(),
            bytes_in: r.exchange.bytes_in,
            bytes_out: r.exchange.bytes_out,
            key_index: r.exchange.key_index,
            trace_id: r.trace_id.clone(),
            region: r.region.clone(),
            shape: ShapeOut::from(&r.shape),
            judgements: JudgementView::of_record(r, &reading.thresholds)
                .into_iter()
                .map(JudgementOut::from)
                .collect(),
            in_band: InBandSent::of_record(r, reading).into(),
            timing: TimingOut::from(TimingView::new(&r.marks, &r.tokens)),
            attempts: r
                .attempts
                .iter()
                .map(|a| AttemptOut::from(AttemptView::new(a)))
                .collect(),
        }
    }
}

/// A window: `last` ("90s", "15m", "1h", "7d") or `from`/`to` (RFC 3339). Default: last 1 h.
#[derive(Debug, Clone, Default, PartialEq, Eq, InputObject, Deserialize)]
#[graphql(name = "WindowInput")]
pub struct WindowInput {
    pub last: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
}

/// The longest window a query may span.
const MAX_WINDOW_US: i64 = 400 * 24 * 3600 * 1_000_000;

fn parse_rfc3339(s: &str, what: &str) -> Result<i64, String> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("window.{what}: {s:?} is not an RFC 3339 time ({e})"))?;
    i64::try_from(t.unix_timestamp_nanos() / 1000)
        .map_err(|_| format!("window.{what}: out of range"))
}

fn parse_last(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: i64 = n
        .parse()
        .map_err(|_| format!("window.last: {s:?} is not like 15m, 1h or 7d"))?;
    let unit_us: i64 = match unit.trim() {
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => return Err(format!("window.last: {s:?} needs a unit s, m, h or d")),
    };
    n.checked_mul(unit_us)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("window.last: {s:?} is out of range"))
}

impl WindowInput {
    /// (from, to) in unix microseconds.
    pub fn resolve(&self, now_us: i64) -> Result<(i64, i64), String> {
        let (from, to) = match (&self.last, &self.from, &self.to) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err("window: give either last or from/to, not both".into())
            }
            (Some(last), None, None) => (now_us - parse_last(last)?, now_us),
            (None, Some(f), to) => {
                let to = match to {
                    Some(t) => parse_rfc3339(t, "to")?,
                    None => now_us,
                };
                (parse_rfc3339(f, "from")?, to)
            }
            (None, None, Some(_)) => return Err("window: to needs from".into()),
            (None, None, None) => (now_us - 3_600_000_000, now_us),
        };
        if from >= to {
            return Err("window: from must be before to".into());
        }
        if to - from > MAX_WINDOW_US {
            return Err("window: at most 400 days".into());
        }
        Ok((from, to))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, InputObject, Deserialize)]
#[graphql(name = "UsageFilterInput")]
pub struct FilterInput {
    pub model: Option<String>,
    pub provider: Option<String>,
    pub channel: Option<String>,
    pub group: Option<String>,
    pub dialect: Option<String>,
    pub stream: Option<bool>,
    pub status: Option<u16>,
    pub outcome: Option<String>,
    pub classification: Option<String>,
    /// `generation` (the model calls) or an endpoint (`embeddings`, `files`, …).
    pub endpoint: Option<String>,
    /// The effort class asked: `none`, `minimal`, `low`, `medium`, `high`, `xhigh`, `max`,
    /// `budget` (a thinking budget), `other`; `""` for requests that asked none.
    pub reasoning_effort: Option<String>,
    /// The request declared at least one tool.
    pub tools_present: Option<bool>,
    /// A token bucket (`<256`, `256-1k`, `1k-4k`, `4k-16k`, `16k-64k`, `64k+`; 1k = 1,024) of
    /// the max output tokens asked; `""` for requests that asked none.
    pub max_output_bucket: Option<String>,
    /// A token bucket of the input tokens the provider reported; `""` for requests without a
    /// count.
    pub input_bucket: Option<String>,
    /// The gateway's configured `region`; `""` for requests recorded without one.
    pub region: Option<String>,
}

/// A value must be one of a closed set's names (or `""`, for requests without one).
fn one_of(name: &str, v: &Option<String>, known: &[&str]) -> Result<(), String> {
    match v.as_deref() {
        Some(v) if !v.is_empty() && !known.contains(&v) => {
            Err(format!("{name}: {v:?} is not one of {}", known.join(", ")))
        }
        _ => Ok(()),
    }
}

impl TryFrom<FilterInput> for UsageFilter {
    type Error = String;

    fn try_from(f: FilterInput) -> Result<Self, String> {
        let efforts = EffortClass::ALL.map(EffortClass::as_str);
        let buckets = TokenBucket::ALL.map(TokenBucket::as_str);
        one_of("reasoningEffort", &f.reasoning_effort, &efforts)?;
        one_of("maxOutputBucket", &f.max_output_bucket, &buckets)?;
        one_of("inputBucket", &f.input_bucket, &buckets)?;
        Ok(UsageFilter {
            model: f.model,
            provider: f.provider,
            channel: f.channel,
            group: f.group,
            dialect: f.dialect,
            stream: f.stream,
            status: f.status,
            outcome: f.outcome,
            classification: f.classification,
            endpoint: f.endpoint,
            reasoning_effort: f.reasoning_effort,
            tools_present: f.tools_present,
            max_output_bucket: f.max_output_bucket,
            input_bucket: f.input_bucket,
            region: f.region,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
pub enum GroupDimension {
    Model,
    Provider,
    Channel,
    Group,
    Dialect,
    Stream,
    Status,
    Outcome,
    Classification,
    Endpoint,
    ReasoningEffort,
    ToolsPresent,
    MaxOutputBucket,
    InputBucket,
    Region,
}

impl From<GroupDimension> for GroupDim {
    fn from(d: GroupDimension) -> Self {
        match d {
            GroupDimension::Model => GroupDim::Model,
            GroupDimension::Provider => GroupDim::Provider,
            GroupDimension::Channel => GroupDim::Channel,
            GroupDimension::Group => GroupDim::Group,
            GroupDimension::Dialect => GroupDim::Dialect,
            GroupDimension::Stream => GroupDim::Stream,
            GroupDimension::Status => GroupDim::Status,
            GroupDimension::Outcome => GroupDim::Outcome,
            GroupDimension::Classification => GroupDim::Classification,
            GroupDimension::Endpoint => GroupDim::Endpoint,
            GroupDimension::ReasoningEffort => GroupDim::ReasoningEffort,
            GroupDimension::ToolsPresent => GroupDim::ToolsPresent,
            GroupDimension::MaxOutputBucket => GroupDim::MaxOutputBucket,
            GroupDimension::InputBucket => GroupDim::InputBucket,
            GroupDimension::Region => GroupDim::Region,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000_000;

    #[test]
    fn figures_are_read_back_at_the_microsecond_marks_are_stored_at() {
        let out = MetricStatsOut::from(MetricStats {
            p50: Some(10201.169837304391),
            p95: Some(0.000_4),
            p99: None,
            min: Some(3.0),
            max: Some(12.345_678),
            mean: Some(102.52476099560663),
            count: 4,
            null_count: 1,
        });
        assert_eq!(out.p50, Some(10201.17));
        assert_eq!(out.p95, Some(0.0));
        assert_eq!(out.p99, None, "absent stays absent");
        assert_eq!((out.min, out.max), (Some(3.0), Some(12.346)));
        assert_eq!(out.mean, Some(102.525));
        assert_eq!((out.count, out.null_count), (4, 1));
    }

    #[test]
    fn windows_resolve_from_last_or_from_to() {
        let w = WindowInput {
            last: Some("15m".into()),
            ..Default::default()
        };
        assert_eq!(w.resolve(NOW), Ok((NOW - 900_000_000, NOW)));
        assert_eq!(
            WindowInput::default().resolve(NOW),
            Ok((NOW - 3_600_000_000, NOW))
        );
        let w = WindowInput {
            from: Some("2023-11-14T22:00:00Z".into()),
            to: Some("2023-11-14T23:00:00Z".into()),
            ..Default::default()
        };
        let (f, t) = w.resolve(NOW).unwrap();
        assert_eq!(t - f, 3_600_000_000);
    }

    #[test]
    fn bad_windows_say_what_is_wrong() {
        for (w, needle) in [
            (
                WindowInput {
                    last: Some("15".into()),
                    ..Default::default()
                },
                "unit",
            ),
            (
                WindowInput {
                    last: Some("x1h".into()),
                    ..Default::default()
                },
                "not like",
            ),
            (
                WindowInput {
                    last: Some("1h".into()),
                    from: Some("x".into()),
                    ..Default::default()
                },
                "either",
            ),
            (
                WindowInput {
                    from: Some("yesterday".into()),
                    ..Default::default()
                },
                "RFC 3339",
            ),
            (
                WindowInput {
                    last: Some("500d".into()),
                    ..Default::default()
                },
                "400 days",
            ),
            (
                WindowInput {
                    from: Some("2023-11-14T23:00:00Z".into()),
                    to: Some("2023-11-14T22:00:00Z".into()),
                    ..Default::default()
                },
                "before",
            ),
        ] {
            let e = w.resolve(NOW).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }
}

/// One live instance of the fleet: its requests in flight at its last heartbeat (this
/// instance's: now). Instances whose heartbeat is older than a few seconds are gone and not
/// listed.
#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
#[graphql(name = "Instance")]
pub struct InstanceOut {
    /// Its name, as in the records it writes (`instance`).
    pub instance: String,
    /// Requests running on it.
    pub in_flight: u32,
    /// When the counts were taken, RFC 3339.
    pub updated_at: String,
    /// How old the counts are, ms.
    pub age_ms: f64,
    /// Attempts in flight on each of its channels.
    pub channels: Vec<InstanceChannelOut>,
}

#[derive(Debug, Clone, PartialEq, SimpleObject, Serialize)]
#[graphql(name = "InstanceChannel")]
pub struct InstanceChannelOut {
    pub name: String,
    pub in_flight: u32,
}

impl InstanceOut {
    pub fn new(h: laptime_core::fleet::Heartbeat, now_us: i64) -> Self {
        InstanceOut {
            updated_at: rfc3339(h.at_us),
            age_ms: now_us.saturating_sub(h.at_us).max(0) as f64 / 1000.0,
            instance: h.instance,
            in_flight: h.in_flight,
            channels: h
                .channels
                .into_iter()
                .map(|c| InstanceChannelOut {
                    name: c.channel,
                    in_flight: c.in_flight,
                })
                .collect(),
        }
    }

    /// The fleet as `app` sees it, by instance name.
    pub fn fleet(app: &laptime_proxy::App) -> Vec<InstanceOut> {
        let now = laptime_proxy::clock::now_unix_us();
        app.instances
            .fleet(app)
            .into_iter()
            .map(|h| InstanceOut::new(h, now))
            .collect()
    }
}
