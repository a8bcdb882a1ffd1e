//! Rollups: what the usage API answers from. A [`Rollup`] is the summary of a set of requests
//! (counts, token sums, classifications, and one [`Sketch`] per [`Metric`]); rollups merge, so the
//! store keeps one per minute and key and a window's answer is the merge of its minutes.
//!
//! **Percentile method.** Nearest rank: the p-th percentile of n values is the ⌈p·n⌉-th smallest
//! (at least the first). The values are not kept; a [`Sketch`] keeps a log-bucketed histogram.
//! A positive value v falls in bucket i = ⌈log_γ v⌉, which holds (γ^(i−1), γ^i], with
//! γ = (1+α)/(1−α) and α = [`RELATIVE_ERROR`] = 1 %; zero has a bucket of its own. A percentile is
//! answered by walking the buckets to the one that holds the ⌈p·n⌉-th value and returning that
//! bucket's representative 2γ^i/(γ+1), clamped to the exact [min, max]; rank 1 and rank n return
//! the exact min and max. **Error bound:** every value in (γ^(i−1), γ^i] is within α (relative) of
//! the representative, so every reported percentile is within 1 % of the exact nearest-rank value
//! (and a zero is exact). Count, min and max are exact; the mean is the float sum over the count.
//! Merging two sketches adds bucket counts, so a merged sketch answers exactly as one built from
//! all the values would.
//!
//! **Nulls.** A metric a request does not have (a cache hit has no `ttftMs`, an older row has no
//! newer field) is left out of that metric's sketch and counted: `null_count` = requests − values.
//! Failed requests stay in the counts, the error rate and every metric they have.
//!
//! The metric values are exactly those of [`crate::views`]; this module calls the same functions.
//!
//! A bucket index spans about 115 buckets per decade of values, so a sketch of latencies from
//! 1 ms to 10 min keeps at most ~660 counters; rollups of a minute usually keep a few dozen.

use std::collections::BTreeMap;

use crate::timeline::{Outcome, RequestRecord};
use crate::varint::{self, put as put_varint, unzigzag, zigzag, VarintError};
use crate::views::{latency_ms, ttft_ms, upstream_ms, TimingView};

/// Every reported percentile is within 1 % (relative) of the exact nearest-rank value.
pub const RELATIVE_ERROR: f64 = 0.01;

/// γ = (1+α)/(1−α): the ratio of a bucket's upper bound to its lower bound.
const GAMMA: f64 = (1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR);

/// Bucket indexes outside ±this are corrupt (f64 spans about ±37,300).
const MAX_INDEX: i64 = 1 << 20;

/// The most buckets a decoded sketch may span: bounds the memory a corrupt blob can ask for.
const MAX_SPAN: i64 = 1 << 17;

/// The 1-based rank of the nearest-rank `q`-quantile of `n` values: ⌈q·n⌉, at least 1. The
/// product is nudged down by a few ulps so that, say, 0.07 × 100 is rank 7, not 8.
pub fn nearest_rank(q: f64, n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
    let x = q * n as f64;
    let r = (x - x * 1e-15).ceil();
    (r as u64).clamp(1, n)
}

fn ln_gamma() -> f64 {
    GAMMA.ln()
}

/// The bucket holding positive `v`: ⌈log_γ v⌉.
fn bucket_of(v: f64) -> i32 {
    // |ln v| ≤ 745 for every positive finite f64, so the index fits comfortably in an i32.
    (v.ln() / ln_gamma()).ceil() as i32
}

/// The representative of bucket `i`: within α of every value in (γ^(i−1), γ^i].
fn representative(i: i32) -> f64 {
    2.0 * (f64::from(i) * ln_gamma()).exp() / (GAMMA + 1.0)
}

// === impl Sketch ===

/// A mergeable log-bucketed histogram of non-negative values, with exact count, sum, min and max.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sketch {
    count: u64,
    sum: f64,
    /// Meaningful only when `count > 0`.
    min: f64,
    max: f64,
    zeros: u64,
    /// Bucket index of `bins[0]`.
    offset: i32,
    bins: Vec<u64>,
}

impl Sketch {
    pub fn new() -> Self {
        Sketch::default()
    }

    /// Adds one value. Negative values count as zero; NaN and infinities are not values and are
    /// ignored (no metric of [`crate::views`] produces them).
    pub fn add(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        let v = if v > 0.0 { v } else { 0.0 };
        if self.count == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += 1;
        self.sum += v;
        if v == 0.0 {
            self.zeros += 1;
        } else {
            self.bump(bucket_of(v), 1);
        }
    }

    /// Adds every value of `other`, as if each had been added here.
    pub fn merge(&mut self, other: &Sketch) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            self.clone_from(other);
            return;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.zeros += other.zeros;
        if other.bins.is_empty() {
            return;
        }
        let lo = other.offset;
        let hi = other.offset + (other.bins.len() as i32 - 1);
        self.cover(lo, hi);
        let start = (i64::from(lo) - i64::from(self.offset)) as usize;
        for (dst, src) in self.bins[start..].iter_mut().zip(&other.bins) {
            *dst += *src;
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn min(&self) -> Option<f64> {
        (self.count > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<f64> {
        (self.count > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// The nearest-rank `q`-quantile (`q` in [0, 1]): the ⌈q·n⌉-th smallest value's bucket
    /// representative, clamped to [min, max], within [`RELATIVE_ERROR`] of the exact value.
    /// `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = nearest_rank(q, self.count);
        if rank == 1 {
            return Some(self.min);
        }
        if rank == self.count {
            return Some(self.max);
        }
        if rank <= self.zeros {
            return Some(0.0_f64.clamp(self.min, self.max));
        }
        let mut left = rank - self.zeros;
        for (k, n) in self.bins.iter().enumerate() {
            if left <= *n {
                let i = self.offset + k as i32;
                return Some(representative(i).clamp(self.min, self.max));
            }
            left -= n;
        }
        // Unreachable while count = zeros + Σ bins, which add, merge and decode keep.
        Some(self.max)
    }

    /// Grows `bins` so that it covers bucket indexes `lo..=hi`.
    fn cover(&mut self, lo: i32, hi: i32) {
        if self.bins.is_empty() {
            self.offset = lo;
            self.bins = vec![0; (hi - lo + 1) as usize];
            return;
        }
        let cur_hi = self.offset + (self.bins.len() as i32 - 1);
        if lo < self.offset {
            let grow = (self.offset - lo) as usize;
            self.bins.splice(0..0, std::iter::repeat_n(0, grow));
            self.offset = lo;
        }
        if hi > cur_hi {
            let len = (hi - self.offset + 1) as usize;
            self.bins.resize(len, 0);
        }
    }

    /// Adds `n` to bucket `i`, growing the buckets when `i` is outside them.
    fn bump(&mut self, i: i32, n: u64) {
        let k = match usize::try_from(i64::from(i) - i64::from(self.offset)) {
            Ok(k) if k < self.bins.len() => k,
            _ => {
                self.cover(i, i);
                (i64::from(i) - i64::from(self.offset)) as usize
            }
        };
        if let Some(slot) = self.bins.get_mut(k) {
            *slot = slot.saturating_add(n);
        }
    }

    /// `count`, then for one value the value and its bucket (absent for zero); for more, the
    /// sum, min, max, the zero count and the non-empty buckets as (index step, count) pairs.
    /// Each float is written as [`put_float`] does, or as its 8 raw bytes when `floats` says
    /// so (encodings before version 5).
    fn encode(&self, out: &mut Vec<u8>, floats: Floats) {
        put_varint(out, self.count);
        if self.count == 0 {
            return;
        }
        if self.count == 1 {
            // Most per-minute rollups hold one request: a few bytes instead of 30.
            floats.put(out, self.min);
            if self.zeros == 0 {
                let k = self.bins.iter().position(|n| *n > 0).unwrap_or_default();
                put_varint(out, zigzag(i64::from(self.offset) + k as i64));
            }
            return;
        }
        for v in [self.sum, self.min, self.max] {
            floats.put(out, v);
        }
        put_varint(out, self.zeros);
        let nonzero = self.bins.iter().filter(|n| **n > 0).count();
        put_varint(out, nonzero as u64);
        let mut prev = 0_i64;
        for (k, n) in self.bins.iter().enumerate() {
            if *n > 0 {
                let i = i64::from(self.offset) + k as i64;
                put_varint(out, zigzag(i - prev));
                put_varint(out, *n);
                prev = i;
            }
        }
    }

    /// Merges an encoded sketch straight from the reader, without building it first. On error
    /// `self` may be partly merged and must be discarded.
    fn merge_from(&mut self, r: &mut Reader<'_>, floats: Floats) -> Result<(), String> {
        let count = r.varint()?;
        if count == 0 {
            return Ok(());
        }
        let (sum, min, max) = if count == 1 {
            let v = r.float(floats)?;
            (v, v, v)
        } else {
            (r.float(floats)?, r.float(floats)?, r.float(floats)?)
        };
        if !(sum.is_finite() && min.is_finite() && max.is_finite() && min <= max && min >= 0.0) {
            return Err("sketch: bad sum, min or max".into());
        }
        if self.count == 0 {
            self.min = min;
            self.max = max;
        } else {
            self.min = self.min.min(min);
            self.max = self.max.max(max);
        }
        self.count = self.count.saturating_add(count);
        self.sum += sum;
        if count == 1 {
            if min == 0.0 {
                self.zeros = self.zeros.saturating_add(1);
            } else {
                let i = unzigzag(r.varint()?);
                if i.abs() > MAX_INDEX {
                    return Err("sketch: bucket index out of range".into());
                }
                self.bump(i as i32, 1);
            }
            return Ok(());
        }
        let zeros = r.varint()?;
        let nonzero = r.varint()?;
        // Each bucket takes at least two bytes, which bounds a corrupt length.
        if nonzero > r.remaining() as u64 / 2 {
            return Err("sketch: bucket count exceeds the data".into());
        }
        self.zeros = self.zeros.saturating_add(zeros);
        let mut total = zeros;
        let mut prev = 0_i64;
        let mut lowest = None;
        for k in 0..nonzero {
            let i = prev
                .checked_add(unzigzag(r.varint()?))
                .filter(|i| i.abs() <= MAX_INDEX)
                .ok_or("sketch: bucket index out of range")?;
            if k > 0 && i <= prev {
                return Err("sketch: bucket indexes not increasing".into());
            }
            if i - *lowest.get_or_insert(i) >= MAX_SPAN {
                return Err("sketch: buckets span too wide".into());
            }
            let n = r.varint()?;
            if n == 0 {
                return Err("sketch: empty bucket stored".into());
            }
            self.bump(i as i32, n);
            total = total.saturating_add(n);
            prev = i;
        }
        if total != count {
            return Err("sketch: bucket counts do not add up to the count".into());
        }
        Ok(())
    }
}

// === impl Metric ===

/// A per-request figure the usage API reports percentiles of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    LatencyMs,
    TtftMs,
    UpstreamMs,
    AuthMs,
    DistributionMs,
    BodyReadMs,
    UpstreamHeadersMs,
    FirstSseEventMs,
    FirstResponseMs,
    FirstTextDeltaMs,
    UpstreamDoneMs,
    TotalHandlerMs,
    /// Output speed from the provider's own output count only.
    VisibleOutputTps,
    /// Output speed from the gateway's estimate of the output (the provider reported none):
    /// kept apart, so the provider-counted percentiles never rest on an estimate.
    EstimatedVisibleOutputTps,
}

/// How many metrics there are (one sketch each).
const METRICS: usize = 14;

impl Metric {
    pub const ALL: [Metric; METRICS] = [
        Metric::LatencyMs,
        Metric::TtftMs,
        Metric::UpstreamMs,
        Metric::AuthMs,
        Metric::DistributionMs,
        Metric::BodyReadMs,
        Metric::UpstreamHeadersMs,
        Metric::FirstSseEventMs,
        Metric::FirstResponseMs,
        Metric::FirstTextDeltaMs,
        Metric::UpstreamDoneMs,
        Metric::TotalHandlerMs,
        Metric::VisibleOutputTps,
        Metric::EstimatedVisibleOutputTps,
    ];

    /// The usage API's (camelCase) name.
    pub fn name(self) -> &'static str {
        match self {
            Metric::LatencyMs => "latencyMs",
            Metric::TtftMs => "ttftMs",
            Metric::UpstreamMs => "upstreamMs",
            Metric::AuthMs => "authMs",
            Metric::DistributionMs => "distributionMs",
            Metric::BodyReadMs => "bodyReadMs",
            Metric::UpstreamHeadersMs => "upstreamHeadersMs",
            Metric::FirstSseEventMs => "firstSseEventMs",
            Metric::FirstResponseMs => "firstResponseMs",
            Metric::FirstTextDeltaMs => "firstTextDeltaMs",
            Metric::UpstreamDoneMs => "upstreamDoneMs",
            Metric::TotalHandlerMs => "totalHandlerMs",
            Metric::VisibleOutputTps => "visibleOutputTps",
            Metric::EstimatedVisibleOutputTps => "estimatedVisibleOutputTps",
        }
    }

    /// The request log's (snake_case) name.
    pub fn snake(self) -> &'static str {
        match self {
            Metric::LatencyMs => "latency_ms",
            Metric::TtftMs => "ttft_ms",
            Metric::UpstreamMs => "upstream_ms",
            Metric::AuthMs => "auth_ms",
            Metric::DistributionMs => "distribution_ms",
            Metric::BodyReadMs => "body_read_ms",
            Metric::UpstreamHeadersMs => "upstream_headers_ms",
            Metric::FirstSseEventMs => "first_sse_event_ms",
            Metric::FirstResponseMs => "first_response_ms",
            Metric::FirstTextDeltaMs => "first_text_delta_ms",
            Metric::UpstreamDoneMs => "upstream_done_ms",
            Metric::TotalHandlerMs => "total_handler_ms",
            Metric::VisibleOutputTps => "visible_output_tps",
            Metric::EstimatedVisibleOutputTps => "estimated_visible_output_tps",
        }
    }

    /// This metric's value for one record: the same value [`crate::views`] shows for it.
    pub fn of(self, r: &RequestRecord) -> Option<f64> {
        metric_values(r)[self as usize]
    }
}

/// Every metric of one record, in [`Metric::ALL`] order, from the functions of [`crate::views`].
/// `latencyMs` is absent (never 0) for a record without t7: one recorded `gateway_crashed`. An
/// output speed is one of the two speeds, never both: provider-counted or estimated.
fn metric_values(r: &RequestRecord) -> [Option<f64>; METRICS] {
    let t = TimingView::new(&r.marks, &r.tokens);
    let estimated = t.visible_output_tps_estimated;
    [
        latency_ms(&r.marks),
        ttft_ms(&r.marks),
        upstream_ms(&r.marks),
        t.auth_ms,
        t.distribution_ms,
        t.body_read_ms,
        t.upstream_headers_ms,
        t.first_sse_event_ms,
        t.first_response_ms,
        t.first_text_delta_ms,
        t.upstream_done_ms,
        t.total_handler_ms,
        t.visible_output_tps.filter(|_| !estimated),
        t.visible_output_tps.filter(|_| estimated),
    ]
}

/// One metric's figures over a rollup. Percentiles leave nulls out and `null_count` says how many.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricStats {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    /// Requests that had this value.
    pub count: u64,
    /// Requests that did not (left out of the percentiles).
    pub null_count: u64,
}

/// A token field, for [`Rollup::tokens`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenField {
    Input,
    Output,
    CacheRead,
    CacheWrite,
    Reasoning,
}

// === impl Rollup ===

/// The summary of a set of requests. Merging two rollups gives the rollup of both sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rollup {
    pub requests: u64,
    /// Requests whose outcome was not a success.
    pub errors: u64,
    /// Requests answered from the gateway's cache.
    pub cache_hits: u64,
    /// Sum of `failover_count`.
    pub failovers: u64,
    /// Sums of the token counts that were reported (see [`Rollup::tokens`] for absent-vs-zero).
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// Sum of the known costs, in nano-USD.
    pub cost_nano_usd: u64,
    /// Requests whose cost is known (0 included: not billed).
    pub cost_priced: u64,
    /// Requests billed with no price to say what they cost (`costUnpricedCount`).
    pub cost_unpriced: u64,
    /// Priced requests whose cost includes estimated tokens.
    pub cost_estimated: u64,
    /// Output tokens the gateway estimated (the provider reported none), summed apart from
    /// `output_tokens`, and how many requests had such an estimate: their output speeds are in
    /// the `estimatedVisibleOutputTps` sketch, never in `visibleOutputTps`.
    pub estimated_output_tokens: u64,
    pub output_estimated: u64,
    /// Requests per classification (`ok`, `failed`, a slow stage).
    pub classifications: BTreeMap<String, u64>,
    /// How many requests reported each token field, in [`TokenField`] order.
    tokens_reported: [u64; 5],
    /// One sketch per metric, in [`Metric::ALL`] order.
    sketches: [Sketch; METRICS],
}

/// The encoding's version byte. Version 2 appended the cost counts; version 1 rollups (written
/// before prices existed) decode with no priced and no unpriced requests. Version 3 appended the
/// estimated output tokens and their count (older rollups: none). Version 4 appended the
/// estimated output speeds' sketch: before it, one `visibleOutputTps` sketch held both kinds,
/// so a version-3 rollup that counted any estimate has its speeds left out of both sketches
/// (counted as nulls: they cannot be told apart); one without estimates keeps them as
/// provider-counted. Version 5 writes each sketch's floats as [`put_float`] does: most are a
/// whole number of microseconds in milliseconds, and take 1–4 bytes instead of 8.
const ENCODING_VERSION: u8 = 5;

/// How an encoding writes a sketch's sum, min and max.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Floats {
    /// 8 little-endian bytes each (versions 1–4).
    Raw,
    /// [`put_float`] (version 5 on).
    Compact,
}

impl Floats {
    fn of_version(version: u8) -> Floats {
        if version >= 5 {
            Floats::Compact
        } else {
            Floats::Raw
        }
    }

    fn put(self, out: &mut Vec<u8>, v: f64) {
        match self {
            Floats::Raw => out.extend_from_slice(&v.to_le_bytes()),
            Floats::Compact => put_float(out, v),
        }
    }
}

/// Below this a whole number is exact in an `f64`, and twice it fits a `u64`.
const EXACT_INTEGERS: f64 = (1_u64 << 52) as f64;

/// Writes `v` as a varint of twice `n` when `v` is exactly `n / 1000` for a whole `n` (every
/// latency: the views divide whole microseconds by 1000; 3 bytes up to 1 s, 4 up to 2.2 min),
/// else as the varint 1 and its 8 raw bytes (speeds, and sums that rounding took off the grid).
/// [`Reader::float`] computes the same `n / 1000`, so the value reads back bit for bit (a
/// negative zero as zero, which compares equal).
fn put_float(out: &mut Vec<u8>, v: f64) {
    let n = (v * 1000.0).round();
    if (0.0..EXACT_INTEGERS).contains(&n) && n / 1000.0 == v {
        put_varint(out, (n as u64) << 1);
    } else {
        put_varint(out, 1);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// The sketches every encoding version has, in order (before the estimated speeds).
const SKETCHES_V1: usize = METRICS - 1;

impl Rollup {
    pub fn new() -> Self {
        Rollup::default()
    }

    pub fn add(&mut self, r: &RequestRecord) {
        self.requests += 1;
        if !r.outcome.is_success() {
            self.errors += 1;
        }
        if r.cached || r.outcome == Outcome::CacheHit {
            self.cache_hits += 1;
        }
        self.failovers += u64::from(r.failover_count);
        match r.cost {
            Some(c) => {
                self.cost_nano_usd = self.cost_nano_usd.saturating_add(c.nano_usd);
                self.cost_priced += 1;
                self.cost_estimated += u64::from(c.estimated);
            }
            None => self.cost_unpriced += 1,
        }
        let t = &r.tokens;
        if let Some(e) = t.estimated_output {
            self.estimated_output_tokens = self.estimated_output_tokens.saturating_add(e);
            self.output_estimated += 1;
        }
        for (k, v) in [t.input, t.output, t.cache_read, t.cache_write, t.reasoning]
            .into_iter()
            .enumerate()
        {
            if let Some(v) = v {
                *self.token_sum_mut(k) = self.token_sum_mut(k).saturating_add(v);
                self.tokens_reported[k] += 1;
            }
        }
        match self.classifications.get_mut(r.classification.as_str()) {
            Some(n) => *n += 1,
            None => {
                let name = r.classification.as_str().to_string();
                self.classifications.insert(name, 1);
            }
        }
        for (sketch, v) in self.sketches.iter_mut().zip(metric_values(r)) {
            if let Some(v) = v {
                sketch.add(v);
            }
        }
    }

    pub fn merge(&mut self, o: &Rollup) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.cache_hits += o.cache_hits;
        self.failovers += o.failovers;
        self.cost_nano_usd = self.cost_nano_usd.saturating_add(o.cost_nano_usd);
        self.cost_priced += o.cost_priced;
        self.cost_unpriced += o.cost_unpriced;
        self.cost_estimated += o.cost_estimated;
        self.estimated_output_tokens = self
            .estimated_output_tokens
            .saturating_add(o.estimated_output_tokens);
        self.output_estimated += o.output_estimated;
        for k in 0..5 {
            let v = o.token_sum(k);
            *self.token_sum_mut(k) = self.token_sum_mut(k).saturating_add(v);
            self.tokens_reported[k] += o.tokens_reported[k];
        }
        for (c, n) in &o.classifications {
            match self.classifications.get_mut(c) {
                Some(m) => *m += n,
                None => {
                    self.classifications.insert(c.clone(), *n);
                }
            }
        }
        for (s, other) in self.sketches.iter_mut().zip(&o.sketches) {
            s.merge(other);
        }
    }

    /// Whether two rollups summarise the same requests: equal in every count, token sum and
    /// bucket, with the float sums (so the means) equal up to rounding, since the order in which
    /// values were added and merged changes their last bits.
    pub fn agrees_with(&self, o: &Rollup) -> bool {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
        let plain = |r: &Rollup| {
            let mut r = r.clone();
            for s in &mut r.sketches {
                s.sum = 0.0;
            }
            r
        };
        plain(self) == plain(o)
            && self
                .sketches
                .iter()
                .zip(&o.sketches)
                .all(|(a, b)| close(a.sum, b.sum))
    }

    /// The sketch of one metric.
    pub fn sketch(&self, m: Metric) -> &Sketch {
        &self.sketches[m as usize]
    }

    pub fn stats(&self, m: Metric) -> MetricStats {
        let s = self.sketch(m);
        MetricStats {
            p50: s.quantile(0.50),
            p95: s.quantile(0.95),
            p99: s.quantile(0.99),
            min: s.min(),
            max: s.max(),
            mean: s.mean(),
            count: s.count(),
            null_count: self.requests.saturating_sub(s.count()),
        }
    }

    /// Errors ÷ requests; `None` when there are no requests.
    pub fn error_rate(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.errors as f64 / self.requests as f64)
    }

    /// A token sum, `None` (not 0) when no request in the rollup reported the field.
    pub fn tokens(&self, f: TokenField) -> Option<u64> {
        let k = f as usize;
        (self.tokens_reported[k] > 0).then(|| self.token_sum(k))
    }

    /// The summed cost in USD; `None` when no request's cost is known.
    pub fn cost_usd(&self) -> Option<f64> {
        (self.cost_priced > 0).then(|| crate::cost::nano_to_usd(self.cost_nano_usd))
    }

    /// How many requests reported a token field.
    pub fn tokens_reported(&self, f: TokenField) -> u64 {
        self.tokens_reported[f as usize]
    }

    fn token_sum(&self, k: usize) -> u64 {
        match k {
            0 => self.input_tokens,
            1 => self.output_tokens,
            2 => self.cache_read_tokens,
            3 => self.cache_write_tokens,
            _ => self.reasoning_tokens,
        }
    }

    fn token_sum_mut(&mut self, k: usize) -> &mut u64 {
        match k {
            0 => &mut self.input_tokens,
            1 => &mut self.output_tokens,
            2 => &mut self.cache_read_tokens,
            3 => &mut self.cache_write_tokens,
            _ => &mut self.reasoning_tokens,
        }
    }

    /// Compact binary form: a version byte, LEB128 varints for counts, sums and extremes in a
    /// few bytes when they are whole microseconds (8 otherwise), and only the non-empty buckets
    /// of each sketch (delta-coded indexes).
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(ENCODING_VERSION, Floats::Compact)
    }

    /// The encoding with `version` in its first byte and the sketches' floats as `floats`
    /// says; the layout of the fields before the floats' change (tests write older versions
    /// with it by cutting what those did not have).
    fn encode_as(&self, version: u8, floats: Floats) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + 32 * self.sketches.len());
        out.push(version);
        for v in [self.requests, self.errors, self.cache_hits, self.failovers] {
            put_varint(&mut out, v);
        }
        for k in 0..5 {
            put_varint(&mut out, self.token_sum(k));
            put_varint(&mut out, self.tokens_reported[k]);
        }
        put_varint(&mut out, self.classifications.len() as u64);
        for (c, n) in &self.classifications {
            put_varint(&mut out, c.len() as u64);
            out.extend_from_slice(c.as_bytes());
            put_varint(&mut out, *n);
        }
        for s in &self.sketches[..SKETCHES_V1] {
            s.encode(&mut out, floats);
        }
        for v in [
            self.cost_nano_usd,
            self.cost_priced,
            self.cost_unpriced,
            self.cost_estimated,
            self.estimated_output_tokens,
            self.output_estimated,
        ] {
            put_varint(&mut out, v);
        }
        self.sketches[Metric::EstimatedVisibleOutputTps as usize].encode(&mut out, floats);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Rollup, String> {
        let mut out = Rollup::new();
        out.merge_encoded(b)?;
        Ok(out)
    }

    /// `self.merge(&Rollup::decode(b)?)` without building the decoded rollup (no allocation
    /// unless a classification or a bucket is new here): what a window's answer is made of.
    /// On error `self` may be partly merged and must be discarded.
    pub fn merge_encoded(&mut self, b: &[u8]) -> Result<(), String> {
        let mut r = Reader { b, pos: 0 };
        let version = r.u8()?;
        if !(1..=ENCODING_VERSION).contains(&version) {
            return Err(format!("rollup: unknown encoding version {version}"));
        }
        let floats = Floats::of_version(version);
        for field in [
            &mut self.requests,
            &mut self.errors,
            &mut self.cache_hits,
            &mut self.failovers,
        ] {
            *field = field.saturating_add(r.varint()?);
        }
        for k in 0..5 {
            let sum = r.varint()?;
            *self.token_sum_mut(k) = self.token_sum_mut(k).saturating_add(sum);
            self.tokens_reported[k] = self.tokens_reported[k].saturating_add(r.varint()?);
        }
        let n = r.varint()?;
        if n > r.remaining() as u64 {
            return Err("rollup: classification count exceeds the data".into());
        }
        for _ in 0..n {
            let len = r.varint()?;
            let bytes = r.bytes(len)?;
            let c = std::str::from_utf8(bytes)
                .map_err(|_| "rollup: classification is not UTF-8".to_string())?;
            let count = r.varint()?;
            match self.classifications.get_mut(c) {
                Some(have) => *have = have.saturating_add(count),
                None => {
                    self.classifications.insert(c.to_string(), count);
                }
            }
        }
        // Read apart: whether its speeds were provider-counted is known only at the end.
        let mut speeds = Sketch::new();
        for (m, s) in Metric::ALL[..SKETCHES_V1].iter().zip(&mut self.sketches) {
            if *m == Metric::VisibleOutputTps {
                speeds.merge_from(&mut r, floats)?;
            } else {
                s.merge_from(&mut r, floats)?;
            }
        }
        let mut output_estimated = 0;
        if version >= 2 {
            for field in [
                &mut self.cost_nano_usd,
                &mut self.cost_priced,
                &mut self.cost_unpriced,
                &mut self.cost_estimated,
            ] {
                *field = field.saturating_add(r.varint()?);
            }
        }
        if version >= 3 {
            self.estimated_output_tokens = self.estimated_output_tokens.saturating_add(r.varint()?);
            output_estimated = r.varint()?;
            self.output_estimated = self.output_estimated.saturating_add(output_estimated);
        }
        if version >= 4 || output_estimated == 0 {
            self.sketches[Metric::VisibleOutputTps as usize].merge(&speeds);
        }
        if version >= 4 {
            self.sketches[Metric::EstimatedVisibleOutputTps as usize].merge_from(&mut r, floats)?;
        }
        if r.remaining() != 0 {
            return Err("rollup: trailing bytes".into());
        }
        Ok(())
    }
}

// === encoding helpers ===

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    fn u8(&mut self) -> Result<u8, String> {
        let v = *self.b.get(self.pos).ok_or("rollup: truncated")?;
        self.pos += 1;
        Ok(v)
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, String> {
        varint::read(self.b, &mut self.pos).map_err(|e| match e {
            VarintError::Truncated => "rollup: truncated".into(),
            VarintError::TooLong => "rollup: varint too long".into(),
        })
    }

    fn bytes(&mut self, len: u64) -> Result<&'a [u8], String> {
        let len = usize::try_from(len).map_err(|_| "rollup: length out of range".to_string())?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|e| *e <= self.b.len())
            .ok_or("rollup: truncated")?;
        let out = &self.b[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn f64(&mut self) -> Result<f64, String> {
        let b = self.bytes(8)?;
        let mut a = [0_u8; 8];
        a.copy_from_slice(b);
        Ok(f64::from_le_bytes(a))
    }

    /// A float as `floats` wrote it (see [`put_float`]). Inlined into the sketch's merge: out
    /// of line, its result went back through memory behind the division, and a 24 h `usage`
    /// over 1 M requests was 4–11 % slower.
    #[inline(always)]
    fn float(&mut self, floats: Floats) -> Result<f64, String> {
        if floats == Floats::Raw {
            return self.f64();
        }
        match self.varint()? {
            1 => self.f64(),
            w if w & 1 == 0 => Ok((w >> 1) as f64 / 1000.0),
            _ => Err("rollup: unknown float form".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::timeline::{Hedge, Marks, RequestShape};
    use crate::usage::Tokens;
    use crate::Dialect;

    fn within(got: Option<f64>, exact: f64) -> bool {
        let Some(got) = got else { return false };
        if exact == 0.0 {
            return got == 0.0;
        }
        // A few ulps on top of α for the rounding of ln and exp at bucket boundaries.
        ((got - exact) / exact).abs() <= RELATIVE_ERROR * (1.0 + 1e-9)
    }

    /// The exact nearest-rank quantile of `values`.
    fn exact(values: &[f64], q: f64) -> f64 {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        v[(nearest_rank(q, v.len() as u64) - 1) as usize]
    }

    fn ms(v: u64) -> Option<Duration> {
        Some(Duration::from_millis(v))
    }

    /// A streamed request: upstream start at 1 ms, first byte at `ttft + 1`, done at `total − 1`.
    fn record(ttft: Option<u64>, total: u64, outcome: Outcome, cached: bool) -> RequestRecord {
        let marks = Marks {
            upstream_start: ttft.and(ms(1)),
            first_byte: ttft.map(|t| Duration::from_millis(t + 1)),
            upstream_done: ttft.and(ms(total - 1)),
            handler_done: ms(total),
            ..Marks::default()
        };
        RequestRecord {
            request_id: "r".into(),
            workspace_id: Some("ws".into()),
            key_id: None,
            created_at_us: 0,
            model: Some("m".into()),
            provider: None,
            channel: None,
            group: None,
            dialect: Dialect::Chat,
            upstream_dialect: Some(Dialect::Chat),
            stream: true,
            status: if outcome.is_success() { 200 } else { 502 },
            outcome,
            timeout_kind: None,
            error_class: None,
            classification: if outcome.is_success() {
                crate::slow::Classification::Ok
            } else {
                crate::slow::Classification::Failed
            },
            flags: Vec::new(),
            marks,
            tokens: Tokens {
                output: ttft.map(|_| 10),
                ..Tokens::default()
            },
            event_count: 0,
            text_delta_count: 0,
            channel_inflight: None,
            attempts: Vec::new(),
            hedge: Hedge::None,
            failover_count: u32::from(outcome == Outcome::UpstreamError),
            cached,
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

    /// Twenty requests written out by hand, with their nearest-rank percentiles worked by hand.
    fn hand_set() -> Vec<RequestRecord> {
        use Outcome::*;
        // ttft (None = null) and latency, in ms.
        let rows: [(Option<u64>, u64, Outcome, bool); 20] = [
            (Some(120), 900, Completed, false),
            (Some(95), 700, Completed, false),
            (Some(300), 2_400, Completed, false),
            (None, 15, CacheHit, true), // cache hit: no ttft
            (Some(110), 850, Completed, false),
            (Some(250), 1_900, Completed, false),
            (None, 40, UpstreamError, false), // failed before any byte: no ttft
            (Some(130), 1_000, Completed, false),
            (Some(105), 800, Completed, false),
            (Some(2_000), 12_000, Completed, false),
            (Some(140), 1_100, Incomplete, false),
            (Some(160), 1_300, Completed, false),
            (None, 12, CacheHit, true), // cache hit
            (Some(180), 1_500, Completed, false),
            (Some(100), 750, Completed, false),
            (Some(500), 30_000, UpstreamClosedEarly, false), // failed after bytes: has ttft
            (Some(150), 1_200, Completed, false),
            (Some(115), 880, Completed, false),
            (Some(125), 950, Completed, false),
            (Some(200), 1_700, Completed, false),
        ];
        rows.into_iter()
            .map(|(t, total, o, c)| record(t, total, o, c))
            .collect()
    }

    #[test]
    fn hand_checked_percentiles_are_within_the_bound_and_nulls_are_counted() {
        let mut r = Rollup::new();
        for rec in hand_set() {
            r.add(&rec);
        }
        assert_eq!(r.requests, 20);
        assert_eq!(
            r.errors, 2,
            "upstream_error and closed early; incomplete is a success"
        );
        assert_eq!(r.error_rate(), Some(0.1));
        assert_eq!(r.cache_hits, 2);
        assert_eq!(r.failovers, 1);
        assert_eq!(r.classifications.get("ok"), Some(&18));
        assert_eq!(r.classifications.get("failed"), Some(&2));
        assert_eq!(r.output_tokens, 170);
        assert_eq!(r.tokens(TokenField::Output), Some(170));
        assert_eq!(
            r.tokens(TokenField::Input),
            None,
            "never reported: absent, not 0"
        );

        // ttftMs: 17 values, 3 nulls. Sorted: 95 100 105 110 115 120 125 130 140 150 160 180 200
        // 250 300 500 2000. p50: ⌈0.5·17⌉ = 9th = 140. p95: ⌈16.15⌉ = 17th = 2000.
        // p99: ⌈16.83⌉ = 17th = 2000. min 95, max 2000.
        let t = r.stats(Metric::TtftMs);
        assert_eq!((t.count, t.null_count), (17, 3));
        assert!(within(t.p50, 140.0), "{t:?}");
        assert!(within(t.p95, 2000.0), "{t:?}");
        assert!(within(t.p99, 2000.0), "{t:?}");
        assert_eq!((t.min, t.max), (Some(95.0), Some(2000.0)));
        let mean = 4_780.0 / 17.0;
        assert!(t.mean.is_some_and(|m| (m - mean).abs() < 1e-9), "{t:?}");

        // latencyMs: 20 values, failures and cache hits included. Sorted: 12 15 40 700 750 800
        // 850 880 900 950 1000 1100 1200 1300 1500 1700 1900 2400 12000 30000.
        // p50: ⌈10⌉ = 10th = 950. p95: ⌈19⌉ = 19th = 12000. p99: ⌈19.8⌉ = 20th = 30000.
        let l = r.stats(Metric::LatencyMs);
        assert_eq!((l.count, l.null_count), (20, 0));
        assert!(within(l.p50, 950.0), "{l:?}");
        assert!(within(l.p95, 12_000.0), "{l:?}");
        assert!(within(l.p99, 30_000.0), "{l:?}");
        assert_eq!((l.min, l.max), (Some(12.0), Some(30_000.0)));

        // upstreamMs = (total − 1) − 1 for the 17 with an upstream; nulls for the other 3.
        let u = r.stats(Metric::UpstreamMs);
        assert_eq!((u.count, u.null_count), (17, 3));
        // Sorted totals with an upstream: 700 750 800 850 880 900 950 1000 1100 1200 1300 1500
        // 1700 1900 2400 12000 30000; 9th = 1100 → 1098.
        assert!(within(u.p50, 1098.0), "{u:?}");

        // A metric no record has: all nulls, no percentiles.
        let a = r.stats(Metric::AuthMs);
        assert_eq!((a.count, a.null_count, a.p50, a.mean), (0, 20, None, None));
    }

    #[test]
    fn quantiles_match_the_exact_values_of_the_hand_set() {
        let mut s = Sketch::new();
        let values = [0.0, 0.0, 1.0, 2.5, 3.0, 10.0, 10.0, 99.9, 1e4, 123_456.789];
        for v in values {
            s.add(v);
        }
        // n = 10: p10 → 1st = 0, p20 → 2nd = 0, p30 → 3rd = 1, p50 → 5th = 3, p90 → 9th = 1e4.
        for (q, want) in [(0.1, 0.0), (0.2, 0.0), (0.3, 1.0), (0.5, 3.0), (0.9, 1e4)] {
            assert!(within(s.quantile(q), want), "q={q}: {:?}", s.quantile(q));
        }
        assert_eq!(s.quantile(1.0), Some(123_456.789));
        assert_eq!(s.quantile(0.0), Some(0.0));
        assert_eq!(Sketch::new().quantile(0.5), None);
    }

    #[test]
    fn nearest_rank_is_not_fooled_by_float_products() {
        assert_eq!(nearest_rank(0.07, 100), 7);
        assert_eq!(nearest_rank(0.5, 17), 9);
        assert_eq!(nearest_rank(0.95, 20), 19);
        assert_eq!(nearest_rank(0.99, 20), 20);
        assert_eq!(nearest_rank(0.0, 5), 1);
        assert_eq!(nearest_rank(1.0, 5), 5);
    }

    #[test]
    fn merging_equals_adding_everything_to_one_rollup() {
        let set = hand_set();
        let mut all = Rollup::new();
        for r in &set {
            all.add(r);
        }
        let mut merged = Rollup::new();
        for chunk in set.chunks(3) {
            let mut part = Rollup::new();
            for r in chunk {
                part.add(r);
            }
            merged.merge(&part);
        }
        assert_eq!(merged.requests, all.requests);
        assert_eq!(merged.classifications, all.classifications);
        for m in Metric::ALL {
            let (a, b) = (all.stats(m), merged.stats(m));
            assert_eq!(
                (a.p50, a.p95, a.p99, a.min, a.max, a.count, a.null_count),
                (b.p50, b.p95, b.p99, b.min, b.max, b.count, b.null_count),
                "{}",
                m.name()
            );
        }
        // Bucket for bucket the same, sums up to float rounding.
        assert!(merged.agrees_with(&all));
        let mut other = all.clone();
        other.sketches[1].add(1.0);
        assert!(!other.agrees_with(&all));
    }

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let mut r = Rollup::new();
        for rec in hand_set() {
            r.add(&rec);
        }
        let bytes = r.encode();
        assert_eq!(Rollup::decode(&bytes), Ok(r.clone()));
        assert_eq!(Rollup::decode(&Rollup::new().encode()), Ok(Rollup::new()));
        assert!(bytes.len() < 600, "{} bytes", bytes.len());
        assert!(Rollup::decode(&[]).is_err());
        assert!(Rollup::decode(&[9]).is_err(), "unknown version");
        for cut in 0..bytes.len() {
            assert!(Rollup::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(Rollup::decode(&extra).is_err());

        // Merging the bytes straight in is merging the decoded rollup.
        let mut base = Rollup::new();
        base.add(&record(Some(7), 50, Outcome::Timeout, false));
        let (mut via_bytes, mut via_decode) = (base.clone(), base);
        via_bytes.merge_encoded(&bytes).unwrap();
        via_decode.merge(&r);
        assert_eq!(via_bytes, via_decode);
    }

    #[test]
    fn costs_sum_exactly_and_unpriced_requests_are_counted_not_zero() {
        use crate::cost::Cost;
        let mut priced = record(Some(10), 100, Outcome::Completed, false);
        priced.cost = Some(Cost {
            nano_usd: 1_500,
            estimated: false,
        });
        let mut estimated = priced.clone();
        estimated.cost = Some(Cost {
            nano_usd: 250,
            estimated: true,
        });
        let mut unpriced = priced.clone();
        unpriced.cost = None;
        let mut r = Rollup::new();
        assert_eq!(r.cost_usd(), None);
        r.add(&unpriced);
        assert_eq!(r.cost_usd(), None, "nothing priced is unknown, not $0");
        for rec in [&priced, &estimated] {
            r.add(rec);
        }
        assert_eq!(
            (
                r.cost_nano_usd,
                r.cost_priced,
                r.cost_unpriced,
                r.cost_estimated
            ),
            (1_750, 2, 1, 1)
        );
        assert_eq!(r.cost_usd(), Some(1.75e-6));
        let decoded = Rollup::decode(&r.encode()).unwrap();
        assert_eq!(decoded, r);
        // A rollup written before costs existed (version 1: no cost counts at its end) reads
        // as one with no priced and no unpriced requests.
        let mut v1 = rollup_of_one(record(Some(10), 100, Outcome::Completed, false));
        v1.cost_priced = 0;
        v1.cost_unpriced = 0;
        let mut bytes = v1.encode_as(1, Floats::Raw);
        // Six counts, then the empty estimated-speed sketch (one byte).
        bytes.truncate(bytes.len() - 7);
        assert_eq!(Rollup::decode(&bytes), Ok(v1));
    }

    #[test]
    fn single_values_take_the_short_encoding_and_round_trip() {
        let one = rollup_of_one(record(Some(120), 900, Outcome::Completed, false));
        let bytes = one.encode();
        assert_eq!(Rollup::decode(&bytes), Ok(one.clone()));
        assert!(bytes.len() < 120, "{} bytes", bytes.len());
        let mut zero = Rollup::new();
        zero.sketches[2].add(0.0);
        zero.requests = 1;
        assert_eq!(Rollup::decode(&zero.encode()), Ok(zero.clone()));
        // A one-value sketch merged into a populated one lands in the right bucket.
        let mut many = rollup_of_one(record(Some(95), 700, Outcome::Completed, false));
        many.merge_encoded(&bytes).unwrap();
        assert_eq!(many.sketch(Metric::TtftMs).quantile(1.0), Some(120.0));
        assert!(within(many.sketch(Metric::TtftMs).quantile(0.9), 120.0));
    }

    /// `v` through [`put_float`] and back, with the bytes it took.
    fn float_round_trip(v: f64) -> (f64, usize) {
        let mut out = Vec::new();
        put_float(&mut out, v);
        let mut r = Reader { b: &out, pos: 0 };
        let back = r.float(Floats::Compact).unwrap();
        assert_eq!(r.remaining(), 0, "{v}");
        (back, out.len())
    }

    #[test]
    fn floats_on_the_microsecond_grid_take_a_few_bytes_and_others_read_back_raw() {
        // Whole microseconds as the views make them: 2 bytes to 8 ms, 3 to 1 s, 4 to 2.2 min.
        for (us, len) in [
            (0_u64, 1),
            (1, 1),
            (63, 1),
            (64, 2),
            (8_191, 2),
            (8_192, 3),
            (1_048_575, 3),
            (1_048_576, 4),
            (134_217_727, 4),
            (3_600_000_000, 5),
            ((1 << 52) - 1, 8),
        ] {
            let v = crate::views::ms(Duration::from_micros(us));
            let (back, took) = float_round_trip(v);
            assert_eq!((back.to_bits(), took), (v.to_bits(), len), "{us} µs");
        }
        // Off the grid: the raw form, bit for bit, one byte longer than before.
        let sum = 0.1 + 0.2;
        for v in [
            sum,
            45.123_456_789,
            1e-9,
            f64::MIN_POSITIVE,
            1e300,
            (1_u64 << 52) as f64,
        ] {
            let (back, took) = float_round_trip(v);
            assert_eq!((back.to_bits(), took), (v.to_bits(), 9), "{v}");
        }
        assert_eq!(float_round_trip(-0.0).0, 0.0);
        // Odd forms other than 1 are not floats.
        let mut r = Reader { b: &[3], pos: 0 };
        assert!(r.float(Floats::Compact).is_err());
        let mut r = Reader {
            b: &[1, 0, 0],
            pos: 0,
        };
        assert!(r.float(Floats::Compact).is_err(), "raw form cut short");
    }

    #[test]
    fn version_4_rollups_read_as_before_and_version_5_is_smaller() {
        let mut r = Rollup::new();
        for rec in hand_set() {
            r.add(&rec);
        }
        r.add(&with_speed(40, false));
        let one = rollup_of_one(record(Some(120), 900, Outcome::Completed, false));
        for rollup in [&r, &one] {
            let old = rollup.encode_as(4, Floats::Raw);
            assert_eq!(Rollup::decode(&old), Ok(rollup.clone()));
            let new = rollup.encode();
            assert_eq!(Rollup::decode(&new), Ok(rollup.clone()));
            // Merging either into the same base gives the same rollup. (The hand set: 400 → 325
            // bytes; one request: 90 → 65.)
            let base = rollup_of_one(record(Some(7), 50, Outcome::Timeout, false));
            let (mut a, mut b) = (base.clone(), base);
            a.merge_encoded(&old).unwrap();
            b.merge_encoded(&new).unwrap();
            assert_eq!(a, b);
            assert!(
                new.len() * 6 < old.len() * 5,
                "{} → {} bytes",
                old.len(),
                new.len()
            );
        }
    }

    #[test]
    fn estimated_output_is_summed_apart_and_older_encodings_have_none() {
        let mut estimated = record(Some(10), 100, Outcome::Completed, false);
        estimated.tokens.output = None;
        estimated.tokens.estimated_output = Some(33);
        let mut r = rollup_of_one(estimated);
        r.add(&record(Some(10), 100, Outcome::Completed, false));
        assert_eq!(
            r.tokens(TokenField::Output),
            Some(10),
            "the provider's count only"
        );
        assert_eq!((r.estimated_output_tokens, r.output_estimated), (33, 1));
        assert_eq!(Rollup::decode(&r.encode()), Ok(r.clone()));
        // Version 2 (before estimates): the same rollup without them.
        let mut v2 = r.clone();
        v2.estimated_output_tokens = 0;
        v2.output_estimated = 0;
        let mut bytes = v2.encode_as(2, Floats::Raw);
        bytes.truncate(bytes.len() - 3);
        assert_eq!(Rollup::decode(&bytes), Ok(v2));
    }

    /// A record whose output speed is `tokens` over 1 s: provider-counted, or estimated.
    fn with_speed(tokens: u64, estimated: bool) -> RequestRecord {
        let mut r = record(Some(10), 2_000, Outcome::Completed, false);
        r.marks.first_visible = ms(100);
        r.marks.last_effective = ms(900);
        r.marks.upstream_done = ms(1_100);
        r.tokens.output = (!estimated).then_some(tokens);
        r.tokens.estimated_output = estimated.then_some(tokens);
        r
    }

    #[test]
    fn speeds_from_estimates_and_from_provider_counts_never_share_a_sketch() {
        let mut r = rollup_of_one(with_speed(40, false));
        r.add(&with_speed(60, false));
        r.add(&with_speed(5_000, true));
        let counted = r.stats(Metric::VisibleOutputTps);
        assert_eq!((counted.count, counted.null_count), (2, 1));
        assert_eq!((counted.min, counted.max), (Some(40.0), Some(60.0)));
        let estimated = r.stats(Metric::EstimatedVisibleOutputTps);
        assert_eq!((estimated.count, estimated.null_count), (1, 2));
        assert_eq!(estimated.p50, Some(5_000.0));
        assert_eq!(Rollup::decode(&r.encode()), Ok(r.clone()));
        let mut merged = rollup_of_one(with_speed(5_000, true));
        merged.merge_encoded(&r.encode()).unwrap();
        assert_eq!(merged.stats(Metric::EstimatedVisibleOutputTps).count, 2);
        assert_eq!(merged.stats(Metric::VisibleOutputTps).count, 2);
    }

    /// `r` as version 3 wrote it: one speed sketch for both kinds, no estimated one.
    fn as_version_3(r: &Rollup) -> Vec<u8> {
        let mut v3 = r.clone();
        let estimated =
            std::mem::take(&mut v3.sketches[Metric::EstimatedVisibleOutputTps as usize]);
        v3.sketches[Metric::VisibleOutputTps as usize].merge(&estimated);
        let mut bytes = v3.encode_as(3, Floats::Raw);
        bytes.truncate(bytes.len() - 1);
        bytes
    }

    #[test]
    fn a_version_3_rollup_keeps_its_speeds_only_when_none_was_estimated() {
        let mut clean = rollup_of_one(with_speed(40, false));
        clean.add(&with_speed(60, false));
        assert_eq!(Rollup::decode(&as_version_3(&clean)), Ok(clean.clone()));

        let mut mixed = rollup_of_one(with_speed(40, false));
        mixed.add(&with_speed(5_000, true));
        let old = Rollup::decode(&as_version_3(&mixed)).unwrap();
        // Which of its speeds were estimated is lost: neither sketch takes them.
        assert_eq!(old.stats(Metric::VisibleOutputTps).count, 0);
        assert_eq!(old.stats(Metric::EstimatedVisibleOutputTps).count, 0);
        assert_eq!(old.stats(Metric::VisibleOutputTps).null_count, 2);
        assert_eq!((old.requests, old.output_estimated), (2, 1));
        assert_eq!(old.stats(Metric::TtftMs), mixed.stats(Metric::TtftMs));
        // Merged with a new rollup, only the new one's speeds count.
        let mut both = clean.clone();
        both.merge_encoded(&as_version_3(&mixed)).unwrap();
        assert_eq!(both.stats(Metric::VisibleOutputTps).count, 2);
    }

    fn rollup_of_one(r: RequestRecord) -> Rollup {
        let mut out = Rollup::new();
        out.add(&r);
        out
    }

    #[test]
    fn metric_values_are_the_views_values() {
        let rec = record(Some(120), 900, Outcome::Completed, false);
        let t = TimingView::new(&rec.marks, &rec.tokens);
        assert_eq!(Metric::LatencyMs.of(&rec), latency_ms(&rec.marks));
        assert_eq!(Metric::TtftMs.of(&rec), ttft_ms(&rec.marks));
        assert_eq!(Metric::UpstreamMs.of(&rec), upstream_ms(&rec.marks));
        assert_eq!(Metric::UpstreamDoneMs.of(&rec), t.upstream_done_ms);
        assert_eq!(Metric::VisibleOutputTps.of(&rec), t.visible_output_tps);
        let names: Vec<_> = Metric::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names[0], "latencyMs");
        assert_eq!(Metric::FirstSseEventMs.snake(), "first_sse_event_ms");
        let mut no_t7 = rec;
        no_t7.marks.handler_done = None;
        assert_eq!(Metric::LatencyMs.of(&no_t7), None, "absent, never 0");
    }

    proptest! {
        #[test]
        fn every_quantile_is_within_alpha_of_the_exact_nearest_rank_value(
            values in prop::collection::vec(
                prop_oneof![
                    3 => 0.001f64..100.0,
                    3 => 1.0f64..120_000.0,
                    1 => Just(0.0),
                    1 => 1e-9f64..1e9,
                ],
                1..400,
            ),
            split in 0usize..400,
            qs in prop::collection::vec(0.0f64..=1.0, 1..12),
        ) {
            let mut whole = Sketch::new();
            for v in &values {
                whole.add(*v);
            }
            // The same values through a merge of two parts and an encode/decode round trip.
            let cut = split.min(values.len());
            let (mut a, mut b) = (Rollup::new(), Rollup::new());
            for v in &values[..cut] {
                a.sketches[0].add(*v);
            }
            for v in &values[cut..] {
                b.sketches[0].add(*v);
            }
            a.merge(&Rollup::decode(&b.encode()).map_err(TestCaseError::fail)?);
            for q in qs.iter().copied().chain([0.5, 0.95, 0.99, 0.0, 1.0]) {
                let want = exact(&values, q);
                prop_assert!(within(whole.quantile(q), want), "q={} want={} got={:?}", q, want, whole.quantile(q));
                prop_assert_eq!(a.sketches[0].quantile(q), whole.quantile(q));
            }
            prop_assert_eq!(whole.count(), values.len() as u64);
        }
    }
}
