//! `report.svg`, drawn by hand: the CDF of time to first visible text per target, and the
//! spread of every stage (min–max whisker, p50–p95 box, p99 tick), both in milliseconds.

use std::fmt::Write as _;

use super::record::RequestRecord;
use super::stats::{Dist, Summary};

const W: f64 = 960.0;
const H: f64 = 700.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 40.0;
const COLORS: [&str; 3] = ["#1f77b4", "#d62728", "#2ca02c"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Round tick positions covering `lo..=hi`: returns the axis range and the ticks.
fn ticks(lo: f64, hi: f64) -> ((f64, f64), Vec<f64>) {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 0.0 };
    let hi = if hi.is_finite() && hi > lo {
        hi
    } else {
        lo + 1.0
    };
    let raw = (hi - lo) / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let bottom = (lo / step).floor() * step;
    let top = (hi / step).ceil() * step;
    let n = ((top - bottom) / step).round() as usize;
    (
        (bottom, top),
        (0..=n).map(|i| bottom + i as f64 * step).collect(),
    )
}

/// The CDF's x range: from 0, unless every value is far from 0 (then the axis starts at a
/// round value below the smallest, and says so).
fn cdf_range(values: &[f64]) -> (f64, f64) {
    let max = values.iter().copied().fold(0.0, f64::max);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    if min.is_finite() && min > 0.5 * max {
        let pad = ((max - min) * 0.1).max(max * 0.002);
        (min - pad, max + pad)
    } else {
        (0.0, max)
    }
}

fn fmt_tick(v: f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

pub(crate) fn render(summary: &Summary, records: &[RequestRecord], title: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{x}" y="22" font-size="15" text-anchor="middle">{t}</text>
"#,
        x = W / 2.0,
        t = esc(title)
    );

    // === Panel 1: CDF ===
    let labels: Vec<&str> = summary.targets.iter().map(|t| t.label.as_str()).collect();
    let series = |field: fn(&RequestRecord) -> Option<f64>| -> Vec<Vec<f64>> {
        labels
            .iter()
            .map(|l| {
                let mut v: Vec<f64> = records
                    .iter()
                    .filter(|r| !r.warmup && r.succeeded() && r.target == *l)
                    .filter_map(field)
                    .collect();
                v.sort_by(f64::total_cmp);
                v
            })
            .collect()
    };
    let mut what = "time to first visible text";
    let mut data = series(|r| r.first_visible_ms);
    if data.iter().all(Vec::is_empty) {
        what = "time to end (no request had visible text)";
        data = series(|r| r.end_ms);
    }
    let (top, bottom) = (50.0, 300.0);
    let (x0, x1) = (LEFT, W - RIGHT);
    let all: Vec<f64> = data.iter().flatten().copied().collect();
    let (lo, hi) = cdf_range(&all);
    let ((xmin, xmax), xt) = ticks(lo, hi);
    let px = |v: f64| x0 + (x1 - x0) * (v - xmin) / (xmax - xmin);
    let py = |f: f64| bottom - (bottom - top) * f;
    let _ = writeln!(
        s,
        r#"<text x="{x}" y="{y}" font-size="13" text-anchor="middle">CDF of {w} (successful measured requests)</text>"#,
        x = (x0 + x1) / 2.0,
        y = top - 10.0,
        w = esc(what)
    );
    let xlabel = if xmin > 0.0 {
        format!("milliseconds from t0 (axis starts at {})", fmt_tick(xmin))
    } else {
        "milliseconds from t0".to_string()
    };
    axes(&mut s, x0, x1, top, bottom, &xt, (xmin, xmax), &xlabel);
    for f in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        let y = py(f);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#ddd"/><text x="{tx}" y="{ty}" text-anchor="end">{p}%</text>"##,
            tx = x0 - 6.0,
            ty = y + 4.0,
            p = (f * 100.0).round()
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{x}" y="{y}" transform="rotate(-90 {x} {y})" text-anchor="middle">fraction of requests (%)</text>"#,
        x = x0 - 45.0,
        y = (top + bottom) / 2.0
    );
    for (i, v) in data.iter().enumerate() {
        if v.is_empty() {
            continue;
        }
        let n = v.len() as f64;
        let mut d = format!("M{:.2},{:.2}", px(v[0]), py(0.0));
        for (k, x) in v.iter().enumerate() {
            let _ = write!(
                d,
                " L{:.2},{:.2} L{:.2},{:.2}",
                px(*x),
                py(k as f64 / n),
                px(*x),
                py((k + 1) as f64 / n)
            );
        }
        let _ = writeln!(
            s,
            r#"<path d="{d}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            c = COLORS[i % COLORS.len()]
        );
    }
    legend(&mut s, summary, x0 + 12.0, top + 12.0);

    // === Panel 2: per-stage spread ===
    let stages = [
        ("headers", "headers_ms"),
        ("first event", "first_event_ms"),
        ("first effective", "first_effective_ms"),
        ("first visible", "first_visible_ms"),
        ("end", "end_ms"),
    ];
    let (top2, bottom2) = (380.0, 640.0);
    let dists: Vec<Vec<Option<&Dist>>> = stages
        .iter()
        .map(|(_, key)| {
            summary
                .targets
                .iter()
                .map(|t| t.metrics.get(*key).filter(|d| d.n > 0))
                .collect()
        })
        .collect();
    let max2 = dists
        .iter()
        .flatten()
        .flatten()
        .filter_map(|d| d.max)
        .fold(0.0, f64::max);
    let ((xmin2, xmax2), xt2) = ticks(0.0, max2);
    let px2 = |v: f64| x0 + (x1 - x0) * (v - xmin2) / (xmax2 - xmin2);
    let _ = writeln!(
        s,
        r#"<text x="{x}" y="{y}" font-size="13" text-anchor="middle">Per-stage spread: whisker min–max, box p50–p95, bar p99, dot p50</text>"#,
        x = (x0 + x1) / 2.0,
        y = top2 - 10.0
    );
    axes(
        &mut s,
        x0,
        x1,
        top2,
        bottom2,
        &xt2,
        (xmin2, xmax2),
        "milliseconds from t0",
    );
    let row_h = (bottom2 - top2) / stages.len() as f64;
    let ntargets = summary.targets.len().max(1) as f64;
    for (i, ((name, _), per_target)) in stages.iter().zip(&dists).enumerate() {
        let y_mid = top2 + row_h * (i as f64 + 0.5);
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{y}" text-anchor="end">{name}</text>"#,
            x = x0 - 8.0,
            y = y_mid + 4.0
        );
        for (j, d) in per_target.iter().enumerate() {
            let y = y_mid + (j as f64 - (ntargets - 1.0) / 2.0) * 14.0;
            let c = COLORS[j % COLORS.len()];
            let Some(d) = d else {
                let _ = writeln!(
                    s,
                    r##"<text x="{x}" y="{y}" fill="#999">no values</text>"##,
                    x = x0 + 6.0,
                    y = y + 4.0
                );
                continue;
            };
            let (Some(mn), Some(mx), Some(p50), Some(p95), Some(p99)) =
                (d.min, d.max, d.p50, d.p95, d.p99)
            else {
                continue;
            };
            let _ = writeln!(
                s,
                r#"<line x1="{a:.2}" y1="{y}" x2="{b:.2}" y2="{y}" stroke="{c}"/><rect x="{bx:.2}" y="{by}" width="{bw:.2}" height="8" fill="{c}" fill-opacity="0.35" stroke="{c}"/><line x1="{q:.2}" y1="{ya}" x2="{q:.2}" y2="{yb}" stroke="{c}" stroke-width="2"/><circle cx="{m:.2}" cy="{y}" r="3" fill="{c}"/>"#,
                a = px2(mn),
                b = px2(mx),
                bx = px2(p50),
                by = y - 4.0,
                bw = (px2(p95) - px2(p50)).max(1.0),
                q = px2(p99),
                ya = y - 6.0,
                yb = y + 6.0,
                m = px2(p50),
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

#[expect(clippy::too_many_arguments, reason = "a plot's frame")]
fn axes(
    s: &mut String,
    x0: f64,
    x1: f64,
    top: f64,
    bottom: f64,
    xt: &[f64],
    (xmin, xmax): (f64, f64),
    xlabel: &str,
) {
    let _ = writeln!(
        s,
        r#"<line x1="{x0}" y1="{bottom}" x2="{x1}" y2="{bottom}" stroke="black"/><line x1="{x0}" y1="{top}" x2="{x0}" y2="{bottom}" stroke="black"/>"#
    );
    for t in xt {
        let x = x0 + (x1 - x0) * (t - xmin) / (xmax - xmin);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.2}" y1="{bottom}" x2="{x:.2}" y2="{b5}" stroke="black"/><line x1="{x:.2}" y1="{top}" x2="{x:.2}" y2="{bottom}" stroke="#eee"/><text x="{x:.2}" y="{b18}" text-anchor="middle">{l}</text>"##,
            b5 = bottom + 5.0,
            b18 = bottom + 18.0,
            l = fmt_tick(*t)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{x}" y="{y}" text-anchor="middle">{l}</text>"#,
        x = (x0 + x1) / 2.0,
        y = bottom + 34.0,
        l = esc(xlabel)
    );
}

fn legend(s: &mut String, summary: &Summary, x: f64, y: f64) {
    for (i, t) in summary.targets.iter().enumerate() {
        let yy = y + i as f64 * 16.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{ry}" width="12" height="4" fill="{c}"/><text x="{tx}" y="{ty}">{l}: {u} (n={n})</text>"#,
            ry = yy - 4.0,
            c = COLORS[i % COLORS.len()],
            tx = x + 18.0,
            ty = yy + 1.0,
            l = esc(&t.label),
            u = esc(&short(&t.url)),
            n = t.succeeded
        );
    }
}

fn short(url: &str) -> String {
    let u: String = url.chars().take(38).collect();
    if url.chars().count() > 38 {
        format!("{u}…")
    } else {
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let ((lo, hi), t) = ticks(0.0, 233.0);
        assert!(lo == 0.0 && hi >= 233.0);
        assert_eq!(t[0], 0.0);
        assert_eq!(t[1], 50.0);
        let ((lo, hi), t) = ticks(121.2, 123.9);
        assert!(lo <= 121.2 && hi >= 123.9 && t.len() >= 3);
        let ((_, hi), _) = ticks(0.0, 0.0);
        assert!(hi > 0.0);
    }
}
