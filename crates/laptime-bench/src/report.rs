//! `report.json` (`contract`, `run`, `summary`, `requests`), `report.md`, `report.svg`, and the
//! summary table printed at the end of a run.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::contract::{Contract, Load, Stop, EXCLUSIONS};
use super::record::RequestRecord;
use super::stats::{metric_names, Dist, Summary, TargetSummary};
use super::svg;

/// Facts about this run that are not part of the workload.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunInfo {
    pub laptime_version: String,
    /// Wall-clock start, RFC 3339 UTC.
    pub started_at: String,
    pub elapsed_s: f64,
    pub host_cpus: usize,
    /// The duration limit stopped the measured phase before `requests` were sent, etc.
    pub notes: Vec<String>,
}

#[derive(Serialize)]
struct Report<'a> {
    contract: &'a Contract,
    run: &'a RunInfo,
    summary: &'a Summary,
    requests: &'a [RequestRecord],
}

pub(crate) fn write_all(
    dir: &Path,
    contract: &Contract,
    run: &RunInfo,
    summary: &Summary,
    records: &[RequestRecord],
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let report = Report {
        contract,
        run,
        summary,
        requests: records,
    };
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    write(dir, "report.json", &json)?;
    write(dir, "report.md", &markdown(contract, run, summary))?;
    let title = format!(
        "laptime bench: {} {} {}",
        contract.dialect,
        contract.model,
        if contract.stream {
            "streamed"
        } else {
            "non-streamed"
        }
    );
    write(dir, "report.svg", &svg::render(summary, records, &title))?;
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn f(v: Option<f64>) -> String {
    match v {
        Some(v) if v.abs() >= 1000.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
        None => "-".into(),
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}x"))
}

pub(crate) fn load_text(c: &Contract) -> String {
    let load = match &c.load {
        Load::ClosedLoop { concurrency } => format!("closed loop, concurrency {concurrency}"),
        Load::OpenLoop {
            rate_per_s,
            arrivals,
            max_inflight,
        } => format!(
            "open loop, {rate_per_s} requests/s, {} arrivals, at most {max_inflight} in flight",
            match arrivals {
                super::contract::Arrivals::Constant => "constant",
                super::contract::Arrivals::Poisson => "Poisson",
            }
        ),
    };
    let stop = match &c.stop {
        Stop::Requests { requests } => format!("{requests} requests"),
        Stop::Duration { duration_s } => format!("{duration_s} s"),
    };
    format!("{load}; {stop}")
}

fn failures_text(t: &TargetSummary) -> String {
    if t.failures.is_empty() {
        return "none".into();
    }
    t.failures
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn shown(d: &Dist) -> bool {
    d.n > 0
}

/// The summary table printed to stdout.
pub(crate) fn text(contract: &Contract, summary: &Summary) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "laptime bench: {} model {} ({}), {}; warm-up {} per target ({} failed)",
        contract.dialect,
        contract.model,
        if contract.stream {
            "stream"
        } else {
            "no stream"
        },
        load_text(contract),
        contract.warmup_requests_per_target,
        summary.warmup.failed
    );
    for t in &summary.targets {
        let tp = &t.throughput;
        let _ = writeln!(
            s,
            "\n{} {}: {} requests, {} succeeded, {} failed (failures by kind: {}); outcomes: {}",
            t.label,
            t.url,
            t.requests,
            t.succeeded,
            t.failed,
            failures_text(t),
            t.outcomes
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            s,
            "  window {} s: {} requests/s, {} output tokens/s ({} tokens, {} counted by tokenizer){}",
            f(tp.window_s),
            f(tp.requests_per_s),
            f(tp.output_tokens_per_s),
            tp.output_tokens_total,
            tp.output_tokens_estimated,
            if t.gateway_timed > 0 {
                format!("; laptime timing read on {} requests", t.gateway_timed)
            } else {
                String::new()
            }
        );
        if let Some(w) = &tp.warning {
            let _ = writeln!(s, "  warning: {w}");
        }
        if t.succeeded == 0 {
            let _ = writeln!(s, "  no successful request: no latency figures");
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}",
            "metric (successful requests)",
            "p50",
            "p95",
            "p99",
            "min",
            "max",
            "mean",
            "n",
            "absent"
        );
        for name in metric_names() {
            let Some(d) = t.metrics.get(name).filter(|d| shown(d)) else {
                continue;
            };
            let _ = writeln!(
                s,
                "  {:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}",
                name,
                f(d.p50),
                f(d.p95),
                f(d.p99),
                f(d.min),
                f(d.max),
                f(d.mean),
                d.n,
                d.absent
            );
        }
    }
    for c in &summary.compares {
        let _ = writeln!(s, "\ncompare, {}:", c.basis);
        let _ = writeln!(
            s,
            "  {:<34} {:>9} {:>9} {:>9} {:>9}",
            "metric", "p50", "p95", "p99", "mean"
        );
        for name in metric_names() {
            if let Some(r) = c.metrics.get(name) {
                let _ = writeln!(
                    s,
                    "  {:<34} {:>9} {:>9} {:>9} {:>9}",
                    name,
                    ratio(r.p50),
                    ratio(r.p95),
                    ratio(r.p99),
                    ratio(r.mean)
                );
            }
        }
        let _ = writeln!(
            s,
            "  throughput: requests/s {}, output tokens/s {}",
            ratio(c.requests_per_s),
            ratio(c.output_tokens_per_s)
        );
    }
    let _ = writeln!(
        s,
        "\npercentiles: linear interpolation between closest ranks (numpy default). Figures cover successful measured requests only; failures are counted above by kind, warm-up is excluded (report.md lists every exclusion)."
    );
    s
}

fn markdown(c: &Contract, run: &RunInfo, summary: &Summary) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# laptime bench report\n");
    let _ = writeln!(
        s,
        "Run {} with laptime {} on {} CPUs, {:.2} s. Chart: [report.svg](report.svg). Every request: `report.json`.\n",
        run.started_at, run.laptime_version, run.host_cpus, run.elapsed_s
    );
    for n in &run.notes {
        let _ = writeln!(s, "> {n}\n");
    }
    let _ = writeln!(s, "## Workload contract\n");
    let _ = writeln!(s, "| | |\n|---|---|");
    for t in &c.targets {
        let _ = writeln!(s, "| target {} | `{}` → `{}` |", t.label, t.base_url, t.url);
    }
    let extra = c
        .extra_body
        .as_ref()
        .map_or_else(|| "none".to_string(), |v| format!("`{v}`"));
    let rows = [
        ("dialect", c.dialect.to_string()),
        ("model", format!("`{}`", c.model)),
        (
            "route / group",
            c.group
                .clone()
                .unwrap_or_else(|| "not declared (the token decides)".into()),
        ),
        ("streaming", c.stream.to_string()),
        (
            "input tokens",
            format!(
                "mean {}, sd {}; {}; tokenizer {}; {}",
                c.input_tokens.mean,
                c.input_tokens.sd,
                c.input_tokens.distribution,
                c.input_tokens.tokenizer,
                c.input_tokens.prompt
            ),
        ),
        (
            "max output tokens",
            match (
                &c.output_tokens.max_output_tokens,
                &c.output_tokens.request_field,
            ) {
                (Some(n), Some(field)) => format!("{n} (`{field}`); {}", c.output_tokens.note),
                _ => format!("not sent; {}", c.output_tokens.note),
            },
        ),
        (
            "sampling",
            format!(
                "temperature {}, top_p {}",
                c.sampling
                    .temperature
                    .map_or("not sent".into(), |v| v.to_string()),
                c.sampling
                    .top_p
                    .map_or("not sent".into(), |v| v.to_string())
            ),
        ),
        (
            "reasoning effort",
            c.reasoning_effort
                .clone()
                .unwrap_or_else(|| "not sent".into()),
        ),
        ("tools", c.tools.to_string()),
        ("extra body fields", extra),
        ("load", load_text(c)),
        (
            "warm-up",
            format!(
                "{} per target, excluded from every figure",
                c.warmup_requests_per_target
            ),
        ),
        (
            "interleaving",
            c.interleave
                .clone()
                .unwrap_or_else(|| "single target".into()),
        ),
        ("retries", c.retries.clone()),
        (
            "timeouts",
            format!(
                "request {} s, connect {} s",
                c.timeouts.request_s, c.timeouts.connect_s
            ),
        ),
        ("seed", c.seed.to_string()),
        ("auth", c.auth.clone()),
        ("window", c.window.clone()),
        ("percentile method", c.percentile_method.clone()),
    ];
    for (k, v) in rows {
        let _ = writeln!(s, "| {k} | {} |", v.replace('|', "\\|"));
    }
    let _ = writeln!(s, "\n### What is excluded from which figure\n");
    for e in EXCLUSIONS {
        let _ = writeln!(s, "- {e}");
    }
    let _ = writeln!(s, "\n### Definitions\n");
    for (k, v) in &c.definitions {
        let _ = writeln!(s, "- `{k}`: {v}");
    }
    let _ = writeln!(s, "\n## Results\n");
    let _ = writeln!(
        s,
        "Warm-up: {} requests, {} failed.\n",
        summary.warmup.requests, summary.warmup.failed
    );
    for t in &summary.targets {
        let tp = &t.throughput;
        let _ = writeln!(s, "### {} — `{}`\n", t.label, t.url);
        let _ = writeln!(
            s,
            "{} measured requests: {} succeeded, {} failed. Failures by kind: {}. Outcomes: {}.\n",
            t.requests,
            t.succeeded,
            t.failed,
            failures_text(t),
            t.outcomes
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            s,
            "Throughput over a {} s window: {} requests/s, {} output tokens/s ({} output tokens; {} requests counted by the tokenizer because usage was absent).{}\n",
            f(tp.window_s),
            f(tp.requests_per_s),
            f(tp.output_tokens_per_s),
            tp.output_tokens_total,
            tp.output_tokens_estimated,
            if t.gateway_timed > 0 {
                format!(" laptime's own timing was read on {} requests.", t.gateway_timed)
            } else {
                String::new()
            }
        );
        if let Some(w) = &tp.warning {
            let _ = writeln!(s, "**Warning:** {w}.\n");
        }
        let _ = writeln!(
            s,
            "| metric (successful requests) | p50 | p95 | p99 | min | max | mean | n | absent |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for name in metric_names() {
            let Some(d) = t.metrics.get(name) else {
                continue;
            };
            if d.n == 0 && d.absent == 0 {
                continue;
            }
            let _ = writeln!(
                s,
                "| `{name}` | {} | {} | {} | {} | {} | {} | {} | {} |",
                f(d.p50),
                f(d.p95),
                f(d.p99),
                f(d.min),
                f(d.max),
                f(d.mean),
                d.n,
                d.absent
            );
        }
        let _ = writeln!(s);
    }
    for cmp in &summary.compares {
        let _ = writeln!(s, "### Compare: {}\n", cmp.basis);
        let _ = writeln!(
            s,
            "| metric | p50 | p95 | p99 | mean |\n|---|---:|---:|---:|---:|"
        );
        for name in metric_names() {
            if let Some(r) = cmp.metrics.get(name) {
                let _ = writeln!(
                    s,
                    "| `{name}` | {} | {} | {} | {} |",
                    ratio(r.p50),
                    ratio(r.p95),
                    ratio(r.p99),
                    ratio(r.mean)
                );
            }
        }
        let _ =
            writeln!(
            s,
            "\nThroughput ratio: requests/s {}, output tokens/s {}. Failure rate: A {}, {} {}.\n",
            ratio(cmp.requests_per_s),
            ratio(cmp.output_tokens_per_s),
            cmp.failure_rate_a.map_or("-".into(), |v| format!("{:.1}%", v * 100.0)),
            cmp.label,
            cmp.failure_rate_b.map_or("-".into(), |v| format!("{:.1}%", v * 100.0)),
        );
    }
    s
}
