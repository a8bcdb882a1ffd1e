//! The summary: distributions of every per-request figure (p50/p95/p99/min/max/mean, n and how
//! many were absent), failures by kind, outcomes, throughput, and the A/B ratios.

use std::collections::BTreeMap;

use serde::Serialize;

use super::contract::PERCENTILE_METHOD;
use super::record::RequestRecord;

/// One figure over the successful measured requests of a target.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Dist {
    /// Values taken.
    pub n: usize,
    /// Successful requests without this figure (mark did not happen, or not applicable).
    pub absent: usize,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
}

/// Linear interpolation between closest ranks (numpy's default) over sorted values.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let h = (n - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let (a, b) = (sorted[lo.min(n - 1)], sorted[hi.min(n - 1)]);
    Some(a + (h - lo as f64) * (b - a))
}

impl Dist {
    pub(crate) fn of(values: &[Option<f64>]) -> Dist {
        let mut v: Vec<f64> = values.iter().flatten().copied().collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Dist {
            n,
            absent: values.len() - n,
            p50: percentile(&v, 50.0),
            p95: percentile(&v, 95.0),
            p99: percentile(&v, 99.0),
            min: v.first().copied(),
            max: v.last().copied(),
            mean: (n > 0).then(|| v.iter().sum::<f64>() / n as f64),
        }
    }
}

/// The per-request figures summarised, in table order, with how each is read from a record.
pub(crate) type Getter = fn(&RequestRecord) -> Option<f64>;

pub(crate) const METRICS: [(&str, Getter); 16] = [
    ("headers_ms", |r| r.headers_ms),
    ("first_byte_ms", |r| r.first_byte_ms),
    ("first_event_ms", |r| r.first_event_ms),
    ("first_effective_ms", |r| r.first_effective_ms),
    ("first_visible_ms", |r| r.first_visible_ms),
    ("last_effective_ms", |r| r.last_effective_ms),
    ("end_ms", |r| r.end_ms),
    ("body_end_ms", |r| r.body_end_ms),
    ("itl_ms", |r| r.itl_ms),
    ("output_tps_per_user", |r| r.output_tps_per_user),
    ("output_tokens", |r| r.output_tokens.map(|v| v as f64)),
    ("input_tokens", |r| r.input_tokens.map(|v| v as f64)),
    ("prompt_tokens", |r| Some(f64::from(r.prompt_tokens))),
    ("schedule_lag_ms", |r| r.schedule_lag_ms),
    ("gateway_first_byte_minus_ttft_ms", |r| {
        r.gateway.as_ref().and_then(|g| g.first_byte_minus_ttft_ms)
    }),
    ("gateway_end_minus_upstream_ms", |r| {
        r.gateway.as_ref().and_then(|g| g.end_minus_upstream_ms)
    }),
];

/// Figures pooled over many values per request rather than one per request: every gap
/// between consecutive output-carrying chunks of every successful stream.
pub(crate) const POOLED: [&str; 1] = ["output_gap_ms"];

/// Every summarised figure, in table order.
pub(crate) fn metric_names() -> impl Iterator<Item = &'static str> {
    METRICS.iter().map(|(name, _)| *name).chain(POOLED)
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Throughput {
    pub window_s: Option<f64>,
    pub requests_per_s: Option<f64>,
    pub output_tokens_per_s: Option<f64>,
    pub output_tokens_total: u64,
    /// Successful requests whose output tokens were counted by the tokenizer (no usage).
    pub output_tokens_estimated: usize,
    /// Why the figures above say little: a window too short (or none) for a rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// The shortest window a throughput figure is given without a warning: over less, the time
/// between requests' starts and the last request's tail weigh as much as the rate itself
/// (instant sim answers give "177,777 tokens/s" over a few milliseconds).
pub(crate) const MIN_THROUGHPUT_WINDOW_S: f64 = 1.0;

/// The warning a throughput over `window_s` gets, if any.
fn throughput_warning(window_s: Option<f64>) -> Option<String> {
    match window_s {
        None => Some("no measured window: no throughput figure".into()),
        Some(w) if w < MIN_THROUGHPUT_WINDOW_S => Some(format!(
            "the measured window is {w:.3} s, under {MIN_THROUGHPUT_WINDOW_S} s: too short for a \
             throughput figure (send more requests, or slower ones, for one)"
        )),
        Some(_) => None,
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct TargetSummary {
    pub label: String,
    pub url: String,
    /// Measured requests sent (warm-up not included).
    pub requests: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub failures: BTreeMap<String, usize>,
    pub outcomes: BTreeMap<String, usize>,
    /// Requests laptime answered with timing values (comment or Server-Timing).
    pub gateway_timed: usize,
    pub throughput: Throughput,
    /// Over successful measured requests only; see `absent`.
    pub metrics: BTreeMap<String, Dist>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct WarmupSummary {
    pub requests: usize,
    pub failed: usize,
    pub failures: BTreeMap<String, usize>,
}

/// B ÷ A of the same statistic.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Ratio {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub mean: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Compare {
    pub basis: String,
    /// The target compared with A.
    pub label: String,
    pub metrics: BTreeMap<String, Ratio>,
    pub output_tokens_per_s: Option<f64>,
    pub requests_per_s: Option<f64>,
    pub failure_rate_a: Option<f64>,
    pub failure_rate_b: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Summary {
    pub percentile_method: String,
    pub targets: Vec<TargetSummary>,
    /// B / A (the first `--compare` against `--target`).
    pub compare: Option<Compare>,
    /// Every other target against A, in target order (B / A first, so `compares[0]` is
    /// `compare`).
    pub compares: Vec<Compare>,
    pub warmup: WarmupSummary,
    /// Seconds from the first measured request's start to the last one's end, all targets.
    pub elapsed_s: Option<f64>,
}

pub(crate) fn summarise(records: &[RequestRecord], targets: &[(String, String)]) -> Summary {
    let measured: Vec<&RequestRecord> = records.iter().filter(|r| !r.warmup).collect();
    let warm: Vec<&RequestRecord> = records.iter().filter(|r| r.warmup).collect();
    let mut s = Summary {
        percentile_method: PERCENTILE_METHOD.to_string(),
        warmup: WarmupSummary {
            requests: warm.len(),
            failed: warm.iter().filter(|r| !r.succeeded()).count(),
            failures: count_by(warm.iter().filter_map(|r| r.failure.clone())),
        },
        elapsed_s: window(&measured),
        ..Summary::default()
    };
    for (label, url) in targets {
        let rs: Vec<&RequestRecord> = measured
            .iter()
            .copied()
            .filter(|r| &r.target == label)
            .collect();
        s.targets.push(target_summary(label, url, &rs));
    }
    if let [a, rest @ ..] = s.targets.as_slice() {
        s.compares = rest.iter().map(|b| compare(a, b)).collect();
    }
    s.compare = s.compares.first().cloned();
    s
}

fn count_by(it: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for k in it {
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

/// First start to last end of these requests, in seconds.
fn window(rs: &[&RequestRecord]) -> Option<f64> {
    let start = rs.iter().map(|r| r.start_ms).min_by(f64::total_cmp)?;
    let end = rs
        .iter()
        .map(|r| {
            r.start_ms
                + r.body_end_ms
                    .or(r.end_ms)
                    .or(r.headers_ms)
                    .unwrap_or_default()
        })
        .max_by(f64::total_cmp)?;
    let w = (end - start) / 1000.0;
    (w > 0.0).then_some(w)
}

fn target_summary(label: &str, url: &str, rs: &[&RequestRecord]) -> TargetSummary {
    let ok: Vec<&RequestRecord> = rs.iter().copied().filter(|r| r.succeeded()).collect();
    let window_s = window(rs);
    let tokens: u64 = ok.iter().filter_map(|r| r.output_tokens).sum();
    let mut metrics = BTreeMap::new();
    for (name, get) in METRICS {
        let values: Vec<Option<f64>> = ok.iter().map(|r| get(r)).collect();
        metrics.insert(name.to_string(), Dist::of(&values));
    }
    let gaps: Vec<Option<f64>> = ok
        .iter()
        .flat_map(|r| r.output_gaps_ms.iter().copied().map(Some))
        .collect();
    let mut pooled = Dist::of(&gaps);
    // `absent` counts requests here (a stream without two output chunks), not values.
    pooled.absent = ok.iter().filter(|r| r.output_gaps_ms.is_empty()).count();
    metrics.insert(POOLED[0].to_string(), pooled);
    TargetSummary {
        label: label.to_string(),
        url: url.to_string(),
        requests: rs.len(),
        succeeded: ok.len(),
        failed: rs.len() - ok.len(),
        failures: count_by(rs.iter().filter_map(|r| r.failure.clone())),
        outcomes: count_by(rs.iter().map(|r| r.outcome.clone())),
        gateway_timed: rs
            .iter()
            .filter(|r| r.gateway.as_ref().is_some_and(|g| g.source != "none"))
            .count(),
        throughput: Throughput {
            window_s,
            requests_per_s: window_s.map(|w| ok.len() as f64 / w),
            output_tokens_per_s: window_s.map(|w| tokens as f64 / w),
            output_tokens_total: tokens,
            output_tokens_estimated: ok
                .iter()
                .filter(|r| r.output_tokens_source.as_deref() == Some("tokenizer"))
                .count(),
            warning: throughput_warning(window_s),
        },
        metrics,
    }
}

fn ratio(b: Option<f64>, a: Option<f64>) -> Option<f64> {
    let (a, b) = (a?, b?);
    (a != 0.0).then(|| b / a)
}

fn compare(a: &TargetSummary, b: &TargetSummary) -> Compare {
    let mut metrics = BTreeMap::new();
    for (name, da) in &a.metrics {
        let Some(db) = b.metrics.get(name) else {
            continue;
        };
        if da.n == 0 || db.n == 0 {
            continue;
        }
        metrics.insert(
            name.clone(),
            Ratio {
                p50: ratio(db.p50, da.p50),
                p95: ratio(db.p95, da.p95),
                p99: ratio(db.p99, da.p99),
                mean: ratio(db.mean, da.mean),
            },
        );
    }
    let rate = |t: &TargetSummary| (t.requests > 0).then(|| t.failed as f64 / t.requests as f64);
    // `failure_rate_b` is the compared target's, whatever its label.
    Compare {
        basis: if b.label == "B" {
            "B / A (B = --compare, A = --target) of the same statistic".into()
        } else {
            format!(
                "{0} / A ({0} = a further --compare, A = --target) of the same statistic",
                b.label
            )
        },
        label: b.label.clone(),
        metrics,
        output_tokens_per_s: ratio(
            b.throughput.output_tokens_per_s,
            a.throughput.output_tokens_per_s,
        ),
        requests_per_s: ratio(b.throughput.requests_per_s, a.throughput.requests_per_s),
        failure_rate_a: rate(a),
        failure_rate_b: rate(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        // numpy.percentile([1,2,3,4], 95) = 3.85
        assert!((percentile(&v, 95.0).unwrap() - 3.85).abs() < 1e-12);
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        let d = Dist::of(&[Some(3.0), None, Some(1.0)]);
        assert_eq!(
            (d.n, d.absent, d.min, d.max, d.mean),
            (2, 1, Some(1.0), Some(3.0), Some(2.0))
        );
    }

    fn rec(target: &str, end: f64, gaps: &[f64]) -> RequestRecord {
        RequestRecord {
            target: target.into(),
            outcome: "completed".into(),
            end_ms: Some(end),
            body_end_ms: Some(end),
            output_gaps_ms: gaps.to_vec(),
            ..RequestRecord::default()
        }
    }

    #[test]
    fn a_window_under_a_second_gets_a_warning_beside_its_throughput() {
        let labels = vec![("A".to_string(), "http://a".to_string())];
        let short = summarise(&[rec("A", 0.5, &[]), rec("A", 40.0, &[])], &labels);
        let tp = &short.targets[0].throughput;
        assert_eq!(tp.window_s, Some(0.04));
        let warning = tp.warning.as_deref().unwrap();
        assert!(
            warning.contains("0.040 s") && warning.contains("too short"),
            "{warning}"
        );
        let long = summarise(&[rec("A", 0.5, &[]), rec("A", 1500.0, &[])], &labels);
        assert_eq!(long.targets[0].throughput.warning, None);
        let none = summarise(&[], &labels);
        assert!(none.targets[0].throughput.warning.is_some());
    }

    #[test]
    fn gaps_are_pooled_over_streams_and_every_target_is_compared_with_a() {
        let records = [
            rec("A", 10.0, &[1.0, 3.0]),
            rec("B", 20.0, &[2.0]),
            rec("C", 40.0, &[]),
            rec("A", 10.0, &[5.0]),
            rec("B", 20.0, &[4.0, 6.0]),
            rec("C", 40.0, &[9.0, 9.0]),
        ];
        let labels: Vec<(String, String)> = ["A", "B", "C"]
            .iter()
            .map(|l| (l.to_string(), format!("http://{l}")))
            .collect();
        let s = summarise(&records, &labels);
        let gaps = |i: usize| s.targets[i].metrics["output_gap_ms"].clone();
        // Every gap of every stream, not one value per stream.
        assert_eq!((gaps(0).n, gaps(0).absent, gaps(0).p50), (3, 0, Some(3.0)));
        assert_eq!((gaps(2).n, gaps(2).absent), (2, 1));
        assert_eq!(s.compares.len(), 2);
        assert_eq!(s.compares[0].label, "B");
        assert_eq!(s.compares[1].label, "C");
        assert!(s.compares[1].basis.starts_with("C / A"));
        assert_eq!(s.compares[1].metrics["end_ms"].p50, Some(4.0));
        assert_eq!(
            s.compare.as_ref().map(|c| c.label.as_str()),
            Some("B"),
            "`compare` stays B / A"
        );
    }
}
