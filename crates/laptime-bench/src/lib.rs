//! `laptime bench`: a load generator for any OpenAI- or Anthropic-compatible endpoint (laptime,
//! or a provider directly) that measures each request's client-side timeline with the
//! gateway's own definitions (DESIGN.md §1: the same SSE scanner and dialect classifiers), so
//! that routes can be compared honestly.
//!
//! - [`contract`]: the workload contract written into the report and readable back.
//! - [`prompt`]: synthetic prompts of an exact token count (tiktoken-rs), request bodies.
//! - [`client`]: one request, measured where its bytes arrive.
//! - [`load`]: warm-up, closed or open loop, A/B interleaving.
//! - [`stats`], [`report`], [`svg`]: the summary, `report.json|md|svg` and the table.

pub mod client;
mod contract;
mod load;
mod prompt;
mod record;
mod report;
mod stats;
mod svg;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use laptime_core::Dialect;
use tokio::sync::mpsc;
use tokio::time::Instant;

use contract::{
    auth_kind, endpoint, Arrivals, Contract, InputTokens, Load, OutputTokens, Sampling, Stop,
    TargetSpec, Timeouts,
};
use record::RequestRecord;

/// Anthropic requires `max_tokens`; this is sent when `--max-output-tokens` is not given.
const MESSAGES_DEFAULT_MAX_TOKENS: u32 = 1024;

/// `laptime bench` options. Workload options left out take their value from `--contract`
/// when one is given, else the default shown.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Base URL as an SDK takes it: `http://host:port/v1` for chat and responses,
    /// `http://host:port` for messages.
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Wire format: chat (/chat/completions), responses (/responses), messages (/v1/messages).
    #[arg(long, value_parser = ["chat", "responses", "messages"])]
    dialect: Option<String>,
    /// The exact model name to send.
    #[arg(long, value_name = "M")]
    model: Option<String>,
    /// API token (Bearer for chat/responses, x-api-key for messages). Never written anywhere.
    #[arg(
        long,
        value_name = "T",
        env = "LAPTIME_BENCH_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Measured requests in all, split over the targets [default: 100].
    #[arg(long, value_name = "N", conflicts_with = "duration")]
    requests: Option<u64>,
    /// Issue requests for this many seconds (requests in flight then run to their end).
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Closed loop: this many clients, each sending its next request when the last one ended
    /// [default: 1].
    #[arg(long, value_name = "C", conflicts_with = "rate")]
    concurrency: Option<u32>,
    /// Open loop: this many arrivals per second, whatever the answers do.
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// With --rate: exponential gaps (a Poisson process) instead of constant ones.
    #[arg(long)]
    poisson: bool,
    /// Ask for a streamed answer.
    #[arg(long, overrides_with = "no_stream")]
    stream: bool,
    /// Ask for a non-streamed answer (the default; overrides a contract's `stream`).
    #[arg(long, overrides_with = "stream")]
    no_stream: bool,
    /// Prompt length in tokens: a mean, and optionally a standard deviation [default: 128].
    #[arg(long, value_name = "N[:SD]")]
    input_tokens: Option<String>,
    /// Output limit sent (max_completion_tokens, max_output_tokens or max_tokens)
    /// [default: not sent; messages: 1024, which Anthropic requires].
    #[arg(long, value_name = "N")]
    max_output_tokens: Option<u32>,
    /// Warm-up requests per target, sent first and excluded from every figure [default: 1].
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,
    /// A second base URL: requests alternate A B A B … and the report gives B / A ratios.
    /// May be given again (targets B, C, …: requests go A B C A B C …, each compared with A).
    #[arg(long, value_name = "URL2")]
    compare: Vec<String>,
    /// Directory for report.json, report.md and report.svg (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Whole-request timeout in seconds [default: 600].
    #[arg(long, value_name = "S")]
    timeout_s: Option<f64>,
    /// Connect timeout in seconds [default: 10].
    #[arg(long, value_name = "S")]
    connect_timeout_s: Option<f64>,
    /// Seed for prompt lengths, prompt words and Poisson gaps [default: 1].
    #[arg(long)]
    seed: Option<u64>,
    /// Sampling temperature to send [default: not sent].
    #[arg(long)]
    temperature: Option<f64>,
    /// Nucleus sampling top_p to send [default: not sent].
    #[arg(long)]
    top_p: Option<f64>,
    /// Reasoning effort to send (chat: reasoning_effort, responses: reasoning.effort).
    #[arg(long, value_name = "EFFORT")]
    reasoning_effort: Option<String>,
    /// A JSON object merged over the generated body's top level (tools, tool_choice, a
    /// provider's own fields, or `"laptime_sim": {…}` to script laptime's simulated upstream).
    #[arg(long, value_name = "JSON")]
    extra_body: Option<String>,
    /// The route or group the token maps to, as a label for the report.
    #[arg(long)]
    group: Option<String>,
    /// Open loop: arrivals beyond this many requests in flight wait [default: 512].
    #[arg(long, value_name = "N")]
    max_inflight: Option<u32>,
    /// Tokenizer for synthetic prompts and for output counts when usage is absent:
    /// o200k_base or cl100k_base [default: o200k_base].
    #[arg(long)]
    tokenizer: Option<String>,
    /// Repeat the workload of an earlier report.json (flags given here override it).
    #[arg(long, value_name = "FILE")]
    contract: Option<PathBuf>,
    /// No progress bar on stderr.
    #[arg(long)]
    no_progress: bool,
}

fn positive(name: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("--{name} must be a positive number, got {v}"))
    }
}

fn parse_input_tokens(s: &str) -> Result<(u32, f64), String> {
    let bad = || format!("--input-tokens: {s:?} is not N or N:SD");
    let (n, sd) = match s.split_once(':') {
        Some((n, sd)) => (n, Some(sd)),
        None => (s, None),
    };
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    if n == 0 {
        return Err("--input-tokens: the mean must be at least 1".into());
    }
    let sd: f64 = match sd {
        Some(sd) => sd.trim().parse().map_err(|_| bad())?,
        None => 0.0,
    };
    if !sd.is_finite() || sd < 0.0 {
        return Err(bad());
    }
    Ok((n, sd))
}

/// The contract of this run: `--contract`'s, with every flag given here over it.
fn build_contract(a: &BenchArgs) -> Result<Contract, String> {
    let base = a.contract.as_deref().map(Contract::read).transpose()?;
    let dialect = match (&a.dialect, &base) {
        (Some(d), _) => Dialect::parse(d).ok_or_else(|| format!("--dialect {d:?}"))?,
        (None, Some(b)) => b.dialect,
        (None, None) => {
            return Err("--dialect is required (chat, responses, messages or gemini)".into())
        }
    };
    let model = match (&a.model, &base) {
        (Some(m), _) => m.clone(),
        (None, Some(b)) => b.model.clone(),
        (None, None) => return Err("--model is required".into()),
    };
    let base_a = match (&a.target, &base) {
        (Some(t), _) => t.clone(),
        (None, Some(b)) => b
            .targets
            .first()
            .map(|t| t.base_url.clone())
            .ok_or("the contract has no target")?,
        (None, None) => return Err("--target is required".into()),
    };
    let others: Vec<String> = if a.compare.is_empty() {
        base.as_ref().map_or_else(Vec::new, |b| {
            b.targets
                .iter()
                .skip(1)
                .map(|t| t.base_url.clone())
                .collect()
        })
    } else {
        a.compare.clone()
    };
    if others.len() > 25 {
        return Err("--compare may be given at most 25 times".into());
    }
    let stream = if a.stream {
        true
    } else if a.no_stream {
        false
    } else {
        base.as_ref().is_some_and(|b| b.stream)
    };
    let mut targets = vec![TargetSpec {
        label: "A".into(),
        url: endpoint(&base_a, dialect, &model, stream),
        base_url: base_a,
    }];
    for (label, b) in ('B'..='Z').zip(others) {
        targets.push(TargetSpec {
            label: label.to_string(),
            url: endpoint(&b, dialect, &model, stream),
            base_url: b,
        });
    }
    let tokenizer = a
        .tokenizer
        .clone()
        .or_else(|| base.as_ref().map(|b| b.input_tokens.tokenizer.clone()))
        .unwrap_or_else(|| "o200k_base".into());
    let (mean, sd) = match (&a.input_tokens, &base) {
        (Some(s), _) => parse_input_tokens(s)?,
        (None, Some(b)) => (b.input_tokens.mean, b.input_tokens.sd),
        (None, None) => (128, 0.0),
    };
    let mut max_output_tokens = a.max_output_tokens.or_else(|| {
        base.as_ref()
            .and_then(|b| b.output_tokens.max_output_tokens)
    });
    if dialect == Dialect::Messages && max_output_tokens.is_none() {
        max_output_tokens = Some(MESSAGES_DEFAULT_MAX_TOKENS);
    }
    if max_output_tokens == Some(0) {
        return Err("--max-output-tokens must be at least 1".into());
    }
    let temperature = a
        .temperature
        .or_else(|| base.as_ref().and_then(|b| b.sampling.temperature));
    let top_p = a
        .top_p
        .or_else(|| base.as_ref().and_then(|b| b.sampling.top_p));
    for (name, v) in [("temperature", temperature), ("top-p", top_p)] {
        if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
            return Err(format!("--{name} must be a non-negative number"));
        }
    }
    let reasoning_effort = a
        .reasoning_effort
        .clone()
        .or_else(|| base.as_ref().and_then(|b| b.reasoning_effort.clone()));
    if reasoning_effort.is_some() && dialect == Dialect::Messages {
        return Err("--reasoning-effort has no messages field; send Anthropic's thinking settings with --extra-body".into());
    }
    let extra_body = match (&a.extra_body, &base) {
        (Some(s), _) => {
            let v: serde_json::Value =
                serde_json::from_str(s).map_err(|e| format!("--extra-body: {e}"))?;
            if !v.is_object() {
                return Err("--extra-body must be a JSON object".into());
            }
            Some(v)
        }
        (None, Some(b)) => b.extra_body.clone(),
        (None, None) => None,
    };
    let base_load = base.as_ref().map(|b| b.load.clone());
    let max_inflight = a
        .max_inflight
        .or(match &base_load {
            Some(Load::OpenLoop { max_inflight, .. }) => Some(*max_inflight),
            _ => None,
        })
        .unwrap_or(512);
    let load = match (a.concurrency, a.rate, base_load) {
        (Some(c), _, _) => Load::ClosedLoop { concurrency: c },
        (None, Some(r), _) => Load::OpenLoop {
            rate_per_s: positive("rate", r)?,
            arrivals: if a.poisson {
                Arrivals::Poisson
            } else {
                Arrivals::Constant
            },
            max_inflight,
        },
        (
            None,
            None,
            Some(Load::OpenLoop {
                rate_per_s,
                arrivals,
                ..
            }),
        ) => Load::OpenLoop {
            rate_per_s,
            arrivals: if a.poisson {
                Arrivals::Poisson
            } else {
                arrivals
            },
            max_inflight,
        },
        (None, None, Some(l @ Load::ClosedLoop { .. })) => l,
        (None, None, None) => Load::ClosedLoop { concurrency: 1 },
    };
    if a.poisson && !matches!(load, Load::OpenLoop { .. }) {
        return Err("--poisson needs --rate".into());
    }
    match load {
        Load::ClosedLoop { concurrency } if concurrency == 0 || concurrency > 100_000 => {
            return Err("--concurrency must be between 1 and 100000".into())
        }
        Load::OpenLoop {
            max_inflight: 0, ..
        } => return Err("--max-inflight must be at least 1".into()),
        _ => {}
    }
    let stop = match (
        a.requests,
        a.duration,
        base.as_ref().map(|b| b.stop.clone()),
    ) {
        (Some(n), _, _) => Stop::Requests { requests: n },
        (None, Some(d), _) => Stop::Duration {
            duration_s: positive("duration", d)?,
        },
        (None, None, Some(s)) => s,
        (None, None, None) => Stop::Requests { requests: 100 },
    };
    match stop {
        Stop::Requests { requests } if requests == 0 || requests > load::MAX_REQUESTS => {
            return Err(format!(
                "--requests must be between 1 and {}",
                load::MAX_REQUESTS
            ))
        }
        Stop::Duration { duration_s } if duration_s > 86_400.0 => {
            return Err("--duration is limited to 86400 s".into())
        }
        _ => {}
    }
    let timeouts = Timeouts {
        request_s: positive(
            "timeout-s",
            a.timeout_s
                .or_else(|| base.as_ref().map(|b| b.timeouts.request_s))
                .unwrap_or(600.0),
        )?,
        connect_s: positive(
            "connect-timeout-s",
            a.connect_timeout_s
                .or_else(|| base.as_ref().map(|b| b.timeouts.connect_s))
                .unwrap_or(10.0),
        )?,
    };
    let mut c = Contract {
        schema: String::new(),
        targets,
        dialect,
        model,
        group: a
            .group
            .clone()
            .or_else(|| base.as_ref().and_then(|b| b.group.clone())),
        stream,
        input_tokens: InputTokens {
            mean,
            sd,
            distribution: String::new(),
            tokenizer,
            prompt: String::new(),
        },
        output_tokens: OutputTokens {
            max_output_tokens,
            request_field: None,
            note: String::new(),
        },
        sampling: Sampling { temperature, top_p },
        reasoning_effort,
        tools: 0,
        extra_body,
        load,
        stop,
        warmup_requests_per_target: a
            .warmup
            .or_else(|| base.as_ref().map(|b| b.warmup_requests_per_target))
            .unwrap_or(1),
        interleave: None,
        retries: String::new(),
        timeouts,
        seed: a
            .seed
            .or_else(|| base.as_ref().map(|b| b.seed))
            .unwrap_or(1),
        auth: auth_kind(dialect).into(),
        percentile_method: String::new(),
        window: String::new(),
        definitions: Default::default(),
        exclusions: Vec::new(),
    };
    c.normalise();
    Ok(c)
}

fn progress(hidden: bool, phase: &str, len: u64) -> ProgressBar {
    let target = if hidden {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    };
    let bar = ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} {msg} {elapsed_precise}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(phase.to_string());
    bar
}

/// Runs one phase with a progress bar; returns its records in the order they ended.
async fn phase(engine: &Arc<load::Engine>, plan: load::Phase, hidden: bool) -> Vec<RequestRecord> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (len, by_time) = match (plan.requests, plan.duration) {
        (Some(n), _) => (n, false),
        (None, Some(d)) => (u64::try_from(d.as_millis()).unwrap_or(u64::MAX), true),
        (None, None) => (0, false),
    };
    let bar = progress(hidden, if plan.warmup { "warm-up" } else { "measure" }, len);
    let started = Instant::now();
    let task = tokio::spawn(load::run_phase(engine.clone(), plan, tx));
    let mut records = Vec::new();
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            rec = rx.recv() => {
                let Some(rec) = rec else { break };
                if rec.succeeded() { ok += 1 } else { failed += 1 }
                records.push(rec);
                if !by_time {
                    bar.inc(1);
                }
                bar.set_message(format!("ok {ok} failed {failed}"));
            }
            _ = tick.tick(), if by_time => {
                let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                bar.set_position(elapsed.min(len));
            }
        }
    }
    let _ = task.await;
    bar.finish_and_clear();
    records
}

fn now_rfc3339() -> String {
    let us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    laptime_core::views::rfc3339(us)
}

/// Runs `laptime bench`.
pub async fn run(args: BenchArgs) -> Result<(), String> {
    let contract = build_contract(&args)?;
    let tokenizer = prompt::Tokenizer::load(&contract.input_tokens.tokenizer)?;
    let token = args.token.as_deref().filter(|t| !t.is_empty());
    let endpoints = contract
        .targets
        .iter()
        .map(|t| client::Endpoint::new(&t.label, &t.url, contract.dialect, contract.stream, token))
        .collect::<Result<Vec<_>, _>>()?;
    let http = client::client(Duration::from_secs_f64(contract.timeouts.connect_s))?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("creating {}: {e}", args.out.display()))?;
    let started_at = now_rfc3339();
    let started = Instant::now();
    let ntargets = endpoints.len() as u64;
    let engine = Arc::new(load::Engine {
        http,
        endpoints,
        contract: contract.clone(),
        tokenizer,
    });
    let hidden = args.no_progress;

    let mut records = Vec::new();
    let warm = contract.warmup_requests_per_target.saturating_mul(ntargets);
    if warm > 0 {
        let plan = load::Phase {
            warmup: true,
            requests: Some(warm.min(load::MAX_REQUESTS)),
            duration: None,
        };
        records.extend(phase(&engine, plan, hidden).await);
    }
    let mut measured = phase(&engine, load::measured_phase(&contract), hidden).await;
    measured.sort_by_key(|r| r.index);
    records.sort_by_key(|r| r.index);
    records.extend(measured);

    let labels: Vec<(String, String)> = contract
        .targets
        .iter()
        .map(|t| (t.label.clone(), t.url.clone()))
        .collect();
    let summary = stats::summarise(&records, &labels);
    let mut notes = Vec::new();
    let n_measured = records.iter().filter(|r| !r.warmup).count();
    if let Stop::Requests { requests } = contract.stop {
        if (n_measured as u64) < requests {
            notes.push(format!(
                "only {n_measured} of {requests} requests were sent (the run was cut short)"
            ));
        }
    }
    if n_measured > 0 && summary.targets.iter().all(|t| t.succeeded == 0) {
        notes.push("every measured request failed: see failures by kind".into());
    }
    let run = report::RunInfo {
        laptime_version: env!("CARGO_PKG_VERSION").into(),
        started_at,
        elapsed_s: started.elapsed().as_secs_f64(),
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        notes,
    };
    report::write_all(&args.out, &contract, &run, &summary, &records)?;

    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", report::text(&contract, &summary));
    for n in &run.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let _ = writeln!(
        out,
        "wrote {0}/report.json, {0}/report.md, {0}/report.svg",
        args.out.display()
    );
    Ok(())
}
