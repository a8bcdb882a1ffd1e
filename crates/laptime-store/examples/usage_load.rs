//! Load and time the usage API's data side on a fresh SQLite store, or on PostgreSQL.
//!
//! Run: `cargo run --release -p laptime-store --example usage_load -- --rows 1000000`
//! (options: `--rows N`, `--queue N` recorder queue capacity, default 20,000 as in the gateway's
//! config; `--runs N` timed runs per query, default 5; `--keep DIR` writes the store under DIR
//! instead of a temp dir that is removed at the end; `--skip-load` with `--keep` (or with
//! `--postgres`) only times the queries on a store loaded before; `--no-exact` leaves out step 3
//! (and keeping 16 bytes per record for it); `--postgres URL` uses that
//! PostgreSQL store instead of SQLite, e.g. a schema of its own:
//! `postgres://postgres@127.0.0.1/test?options=-c%20search_path%3Dload`; `--instances N` with
//! `--postgres` loads through N recorders at once, as N gateways would; `--rate N` sends N
//! records a second in all, each created at the moment it is sent (as a gateway's are), instead
//! of the last 24 h as fast as the recorder takes them; `--pack` packs the requests of
//! every day of the load into blocks after it (PostgreSQL), as retention passes do once each day has
//! ended, so that the sizes and times after it are those of a store whose days are all
//! packed; `--retention` times,
//! after the queries, the deletion of the load's oldest hour; `--workspace ID` the workspace of
//! every record, default `ws_load`, where the gateway makes ids of 19 characters, `ws_` and 16
//! hex digits, which every request row, its indexes and the rollups hold; `--key ID` the key id
//! of every record, default `key_load`, where the gateway makes `key_` and 16 hex digits).
//!
//! 1. Pushes N synthetic records, spread evenly over the last 24 h in time order, through the
//!    real `Recorder` as fast as it accepts them. A full queue is waited out and retried (never
//!    dropped); how often it was full is reported, and drops must be zero.
//! 2. Times, as the median of the runs: `usage` over the last 24 h (ungrouped, grouped by model,
//!    filtered by model), `usage` over the last 1 h, and `recent_filtered` (limit 50) without a
//!    filter, with one on a rare outcome, with one on a model, with one on a model no request
//!    names, with one that few requests match and with one of known names that none matches.
//! 3. Checks the sketch: the 24 h latency p50, p95 and p99 against the exact nearest-rank values
//!    found by sorting the latencies of the records this run loaded (the rows keep them packed,
//!    where SQL cannot sort on them; skipped with `--skip-load`).
//!
//! Before the queries it prints the store's size, and the bytes of each table and index (of at
//! least 1 MB) per request.
//!
//! The records are realistic in shape: eight models over two providers with skewed traffic, two
//! channels per provider, three dialects, streamed and not, log-normal latencies with heavy
//! tails, token counts, failures of each kind (~6 %), cache hits (~1 %), failovers, and marks
//! absent where the outcome says so. Classifications come from the real slow-request classifier.

#![expect(
    clippy::print_stdout,
    reason = "a load tool reports its figures on stdout"
)]

use std::error::Error;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use laptime_core::slow::{classify, Thresholds};
use laptime_core::timeline::{
    Attempt, ErrorClass, Hedge, Marks, Outcome, RequestRecord, RequestShape,
};
use laptime_core::usage::Tokens;
use laptime_core::Dialect;
use laptime_store::recorder::Recorder;
use laptime_store::usage::{GroupDim, UsageFilter};
use laptime_store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// The allocator of the gateway's binary, so that the recorder's figures are the gateway's.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const HOUR_US: i64 = 3_600_000_000;
const DAY_US: i64 = 24 * HOUR_US;

struct Args {
    rows: u64,
    queue: usize,
    runs: usize,
    keep: Option<PathBuf>,
    skip_load: bool,
    postgres: Option<String>,
    instances: usize,
    exact: bool,
    retention: bool,
    pack: bool,
    workspace: String,
    key: String,
    /// Records per second in real time (`--rate`), or `None` for the 24 h as fast as taken.
    rate: Option<f64>,
}

fn args() -> Result<Args, Box<dyn Error>> {
    let mut a = Args {
        rows: 1_000_000,
        queue: 20_000,
        runs: 5,
        keep: None,
        skip_load: false,
        postgres: None,
        instances: 1,
        exact: true,
        retention: false,
        pack: false,
        workspace: "ws_load".to_string(),
        key: "key_load".to_string(),
        rate: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--rows" => a.rows = value()?.parse()?,
            "--queue" => a.queue = value()?.parse()?,
            "--runs" => a.runs = value()?.parse::<usize>()?.max(1),
            "--keep" => a.keep = Some(value()?.into()),
            "--skip-load" => a.skip_load = true,
            "--postgres" => a.postgres = Some(value()?),
            "--instances" => a.instances = value()?.parse::<usize>()?.max(1),
            "--no-exact" => a.exact = false,
            "--retention" => a.retention = true,
            "--pack" => a.pack = true,
            "--workspace" => a.workspace = value()?,
            "--key" => a.key = value()?,
            "--rate" => a.rate = Some(value()?.parse::<f64>()?).filter(|r| *r > 0.0),
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    Ok(a)
}

// === synthetic records ===

/// (model, provider, share of traffic, median ms to first byte, median output tokens/s)
const MODELS: [(&str, &str, f64, f64, f64); 8] = [
    ("gpt-4o-mini", "openai", 0.28, 350.0, 90.0),
    ("gpt-4o", "openai", 0.20, 550.0, 60.0),
    ("claude-sonnet-4", "anthropic", 0.18, 900.0, 55.0),
    ("claude-haiku-3.5", "anthropic", 0.10, 450.0, 110.0),
    ("o3-mini", "openai", 0.08, 2_500.0, 120.0),
    ("gpt-4.1", "openai", 0.07, 600.0, 70.0),
    ("claude-opus-4", "anthropic", 0.05, 1_600.0, 35.0),
    ("gpt-4.1-nano", "openai", 0.04, 250.0, 150.0),
];

struct Synth {
    rng: StdRng,
    thresholds: Thresholds,
    key_id: String,
}

impl Synth {
    fn pick<T: Copy>(&mut self, items: &[(T, f64)]) -> T {
        let mut x = self.rng.gen::<f64>();
        for (item, w) in items {
            if x < *w {
                return *item;
            }
            x -= w;
        }
        items[items.len() - 1].0
    }

    /// Log-normal with the given median and shape σ (Box–Muller).
    fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        let u1: f64 = self.rng.gen_range(f64::EPSILON..1.0);
        let u2: f64 = self.rng.gen();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        median * (sigma * z).exp()
    }

    fn record(&mut self, ws: &str, created_at_us: i64) -> RequestRecord {
        let weights: Vec<(usize, f64)> = MODELS.iter().enumerate().map(|(i, m)| (i, m.2)).collect();
        let (model, provider, _, ttfb_median, tps_median) = MODELS[self.pick(&weights)];
        let anthropic = provider == "anthropic";
        let dialect = if anthropic {
            Dialect::Messages
        } else {
            self.pick(&[(Dialect::Chat, 0.7), (Dialect::Responses, 0.3)])
        };
        let channel = format!(
            "{provider}-{}",
            self.pick(&[("primary", 0.9), ("backup", 0.1)])
        );
        let group = self.pick(&[(Some("default"), 0.8), (Some("batch"), 0.15), (None, 0.05)]);
        let stream = self.rng.gen_bool(0.75);
        let outcome = self.pick(&[
            (Outcome::Completed, 0.90),
            (Outcome::Incomplete, 0.02),
            (Outcome::UpstreamError, 0.03),
            (Outcome::UpstreamClosedEarly, 0.01),
            (Outcome::ClientCancelled, 0.015),
            (Outcome::Timeout, 0.005),
            (Outcome::Rejected, 0.01),
            (Outcome::CacheHit, 0.01),
        ]);

        let us = |ms: f64| Some(Duration::from_micros((ms.max(0.0) * 1000.0) as u64));
        let auth = self.lognormal(0.08, 0.5);
        let body = self.lognormal(0.05, 1.0);
        let dist = self.lognormal(0.02, 0.5);
        let t1 = auth + body + dist + self.lognormal(0.1, 0.3);
        let failover =
            outcome != Outcome::Rejected && outcome != Outcome::CacheHit && self.rng.gen_bool(0.03);
        let t1 = if failover {
            t1 + self.lognormal(300.0, 0.8)
        } else {
            t1
        };
        let headers = self.lognormal(ttfb_median * 0.8, 0.6);
        let first_byte = headers + self.lognormal(ttfb_median * 0.2, 0.5);
        let output = self.lognormal(300.0, 1.0).round().max(1.0) as u64;
        let tps = self.lognormal(tps_median, 0.35);
        let decode = output as f64 / tps * 1000.0;
        let reasoning = model
            .starts_with("o3")
            .then_some((output as f64 * 2.5) as u64);
        let tool_only = self.rng.gen_bool(0.08);

        let mut marks = Marks {
            auth: us(auth),
            admission: None,
            body_read: us(body),
            distribution: us(dist),
            upstream_start: us(t1),
            upstream_headers: us(t1 + headers),
            first_byte: us(t1 + first_byte),
            first_event: us(t1 + first_byte + 0.3),
            first_effective: us(t1 + first_byte + 1.0),
            first_visible: (!tool_only).then(|| us(t1 + first_byte + 1.2)).flatten(),
            last_effective: us(t1 + first_byte + decode),
            upstream_done: us(t1 + first_byte + decode + 2.0),
            handler_done: us(t1 + first_byte + decode + 2.4),
        };
        let mut tokens = Tokens {
            input: Some(self.lognormal(1_500.0, 1.2).round() as u64),
            output: Some(output),
            cache_read: self
                .rng
                .gen_bool(0.4)
                .then(|| self.rng.gen_range(256..4_096)),
            cache_write: (anthropic && self.rng.gen_bool(0.1))
                .then(|| self.rng.gen_range(0..2_048)),
            cache_write_1h: None,
            reasoning,
            estimated_output: None,
        };
        let mut status = 200;
        let mut error_class = None;
        let mut timeout_kind = None;
        let mut attempts_ok = true;
        match outcome {
            Outcome::Completed | Outcome::Incomplete => {}
            Outcome::UpstreamError => {
                let (s, class) = self.pick(&[
                    ((429, ErrorClass::RateLimited), 0.5),
                    ((500, ErrorClass::UpstreamStatus5xx), 0.2),
                    ((502, ErrorClass::UpstreamStatus5xx), 0.2),
                    ((503, ErrorClass::UpstreamStatus5xx), 0.1),
                ]);
                status = s;
                error_class = Some(class);
                attempts_ok = false;
                marks.first_byte = None;
                marks.first_event = None;
                marks.first_effective = None;
                marks.first_visible = None;
                marks.last_effective = None;
                marks.upstream_done = us(t1 + headers);
                marks.handler_done = us(t1 + headers + 0.5);
                tokens = Tokens::default();
            }
            Outcome::UpstreamClosedEarly => {
                error_class = Some(ErrorClass::ClosedEarly);
                tokens.output = None;
                tokens.reasoning = None;
            }
            Outcome::RateLimited => {
                status = 429;
                error_class = Some(ErrorClass::OverLimit);
                marks = Marks {
                    auth: us(auth),
                    admission: us(auth + 0.01),
                    handler_done: us(auth + 0.05),
                    ..Marks::default()
                };
                tokens = Tokens::default();
            }
            // Not generated (the mix below never picks them): a drain cut or a crash, as recorded.
            Outcome::GatewayShutdown | Outcome::GatewayCrashed => {
                tokens.output = None;
                tokens.reasoning = None;
            }
            Outcome::ClientCancelled => {
                error_class = Some(ErrorClass::ClientCancelled);
                marks.upstream_done = None;
                tokens.output = None;
            }
            Outcome::Timeout => {
                status = 504;
                error_class = Some(ErrorClass::Timeout);
                timeout_kind = Some(laptime_core::timeline::DeadlineKind::Headers);
                attempts_ok = false;
                marks.upstream_headers = None;
                marks.first_byte = None;
                marks.first_event = None;
                marks.first_effective = None;
                marks.first_visible = None;
                marks.last_effective = None;
                marks.upstream_done = us(t1 + 30_000.0);
                marks.handler_done = us(t1 + 30_000.5);
                tokens = Tokens::default();
            }
            Outcome::Rejected => {
                status = self.pick(&[(401, 0.6), (400, 0.3), (404, 0.1)]);
                error_class = Some(match status {
                    401 => ErrorClass::Unauthorized,
                    400 => ErrorClass::BadRequest,
                    _ => ErrorClass::UnknownModel,
                });
                marks = Marks {
                    auth: us(auth),
                    handler_done: us(auth + 0.05),
                    ..Marks::default()
                };
                tokens = Tokens::default();
            }
            Outcome::CacheHit => {
                marks = Marks {
                    auth: us(auth),
                    body_read: us(body),
                    handler_done: us(auth + body + self.lognormal(1.5, 0.4)),
                    ..Marks::default()
                };
            }
        }
        let (classification, flags) = classify(&marks, tokens.output, outcome, &self.thresholds);
        let mut attempts = Vec::new();
        if marks.upstream_start.is_some() {
            if failover {
                attempts.push(Attempt {
                    channel: format!("{provider}-backup"),
                    role: laptime_core::timeline::AttemptRole::Primary,
                    won: false,
                    status: Some(503),
                    error_class: Some(ErrorClass::UpstreamStatus5xx),
                    start: us(auth + body + dist),
                    headers: us(t1 - 1.0),
                    first_byte: None,
                    end: us(t1 - 0.5),
                    connection: Default::default(),
                    span_id: None,
                });
            }
            attempts.push(Attempt {
                channel: channel.clone(),
                role: if failover {
                    laptime_core::timeline::AttemptRole::Failover
                } else {
                    laptime_core::timeline::AttemptRole::Primary
                },
                won: attempts_ok,
                status: marks.upstream_headers.map(|_| status),
                error_class,
                start: marks.upstream_start,
                headers: marks.upstream_headers,
                first_byte: marks.first_byte,
                end: marks.upstream_done,
                connection: Default::default(),
                span_id: None,
            });
        }
        // Shaped as the gateway makes them (`ingress::request_id`): the arrival millisecond
        // first, then random bits, so the stores' indexes on ids grow at one end as in
        // production.
        let mut id = [0_u8; 16];
        self.rng.fill(&mut id[6..]);
        let ms = (created_at_us / 1000).clamp(0, (1 << 48) - 1) as u64;
        id[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        RequestRecord {
            request_id: format!("req_{}", hex::encode(id)),
            workspace_id: Some(ws.to_string()),
            key_id: Some(self.key_id.clone()),
            created_at_us,
            model: Some(model.to_string()),
            provider: (outcome != Outcome::Rejected).then(|| provider.to_string()),
            channel: marks.upstream_start.map(|_| channel),
            group: group.map(str::to_string),
            dialect,
            upstream_dialect: Some(dialect),
            stream,
            status,
            outcome,
            timeout_kind,
            error_class,
            classification,
            flags,
            marks,
            tokens,
            event_count: (output / 3) as u32 + 4,
            text_delta_count: (output / 3) as u32,
            channel_inflight: Some(self.rng.gen_range(1..64)),
            attempts,
            hedge: Hedge::None,
            failover_count: u32::from(failover),
            cached: outcome == Outcome::CacheHit,
            shape: RequestShape {
                max_output_tokens: Some(4_096),
                temperature: Some(0.7),
                ..RequestShape::default()
            },
            region: Some("eu-west".into()),
            instance: Some("gw-a:8080".into()),
            trace_id: Some(hex::encode(id)),
            // Priced as a gateway with prices configured would (a few dollars per million).
            cost: Some(laptime_core::cost::Cost {
                nano_usd: output * 4_000,
                estimated: false,
            }),
            refused_by: None,
            exchange: Default::default(),
            in_band: None,
        }
    }
}

// === timing ===

/// Median, min and max wall time of `runs` calls of `f`, and its last result.
async fn time<T, F: std::future::Future<Output = laptime_store::Result<T>>>(
    runs: usize,
    mut f: impl FnMut() -> F,
) -> Result<(Duration, Duration, Duration, T), Box<dyn Error>> {
    let mut took = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let started = Instant::now();
        last = Some(f().await?);
        took.push(started.elapsed());
    }
    took.sort();
    let out = last.ok_or("no runs")?;
    Ok((took[took.len() / 2], took[0], took[took.len() - 1], out))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let a = args()?;
    let tmp = tempfile::tempdir()?;
    let dir = a.keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    // Opening migrates: a store loaded by an older build gets its newer tables here.
    let opening = Instant::now();
    let (store, raw) = match &a.postgres {
        Some(url) => {
            let config: tokio_postgres::Config = url.parse()?;
            let (client, conn) = config.connect(tokio_postgres::NoTls).await?;
            tokio::spawn(conn);
            (Store::open_postgres(url).await?, Raw::Postgres(client))
        }
        None => {
            let store = Store::open_dir(&dir)?;
            (store.clone(), Raw::Sqlite(store))
        }
    };
    println!(
        "store opened (migrations included) in {:.1} s",
        opening.elapsed().as_secs_f64()
    );
    let ws = a.workspace.as_str();
    let now = wall_now_us();
    // Every row inside the last 24 h, in time order, the newest a second ago.
    let start = now - DAY_US + 1_000_000;
    let step = (DAY_US - 2_000_000) as f64 / a.rows.max(1) as f64;

    let mut latencies = Vec::new();
    if !(a.skip_load && (a.keep.is_some() || a.postgres.is_some())) {
        let wal = raw.wal_position().await?;
        latencies = load(&a, &store, ws, start, step).await?;
        if let (Some(before), Some(after)) = (wal, raw.wal_position().await?) {
            let bytes = after - before;
            println!(
                "WAL written during the load: {:.1} MB, {:.0} B per record",
                bytes as f64 / 1e6,
                bytes as f64 / a.rows.max(1) as f64
            );
        }
    }
    if a.pack {
        // As if every day of the load had ended: a store in its steady state.
        while let Some(p) = store.pack_one_finished_day(now + 2 * DAY_US).await? {
            println!(
                "packed {}: {} requests into {} blocks, partition {:.1} → {:.1} MB{} in {:.1} s",
                p.partition,
                p.requests,
                p.blocks,
                p.before_bytes as f64 / 1e6,
                p.after_bytes as f64 / 1e6,
                if p.rewritten { "" } else { " (not rewritten)" },
                p.took.as_secs_f64()
            );
        }
    }
    query(&a, &store, &raw, ws, latencies).await?;
    if a.retention {
        // The oldest hour of the load, as a daily retention run would delete it.
        let started = Instant::now();
        let deleted = store.delete_older_than(start + HOUR_US, 4_096).await?;
        println!(
            "retention of the oldest hour: {deleted} requests and their rollups in {:.0} ms",
            ms(started.elapsed())
        );
    }
    drop(tmp);
    Ok(())
}

/// The wall clock in microseconds since the Unix epoch: the store takes wall times as
/// arguments, so the example reads the clock itself.
fn wall_now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Loads the store; returns each record's creation time and `handler_done` (µs) when the exact
/// check needs them (the rows keep `handler_done` packed).
async fn load(
    a: &Args,
    store: &Store,
    ws: &str,
    start: i64,
    step: f64,
) -> Result<Vec<(i64, i64)>, Box<dyn Error>> {
    println!(
        "usage_load: {} rows into {} (queue {}, {} recorder(s) at once, SQLite {})",
        a.rows,
        store.location(),
        a.queue,
        a.instances,
        rusqlite::version()
    );
    let started = Instant::now();
    let per = a.rows / a.instances as u64;
    let mut loads = Vec::new();
    for n in 0..a.instances {
        let store = store.clone();
        let queue = a.queue;
        let keep = a.exact;
        let rate = a.rate.map(|r| r / a.instances as f64);
        let (ws, key) = (ws.to_string(), a.key.clone());
        // Instance n writes every instances-th record, so they interleave in time as a
        // balanced fleet's do.
        let (first, count, every) = (n as u64, per, a.instances as u64);
        loads.push(std::thread::spawn(move || -> Result<Loaded, String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(load_one(
                &store,
                queue,
                n,
                first,
                count,
                every,
                (&ws, &key),
                (start, step, rate),
                keep,
            ))
            .map_err(|e| e.to_string())
        }));
    }
    let mut written = 0;
    let mut latencies = Vec::new();
    for (n, l) in loads.into_iter().enumerate() {
        let mut l = l.join().map_err(|_| "a loader panicked")??;
        latencies.append(&mut l.latencies);
        println!(
            "recorder {n}: {} written, {} dropped, {} failed in {:.1} s = {:.0} records/s sustained \
             ({} batches, {:.0} records/batch, longest batch {:.0} ms; queue full {} times, {:.1} s waited)",
            l.written,
            l.dropped,
            l.failed,
            l.took.as_secs_f64(),
            l.written as f64 / l.took.as_secs_f64(),
            l.batches,
            l.written as f64 / l.batches.max(1) as f64,
            l.max_batch_ms,
            l.full,
            l.waited.as_secs_f64(),
        );
        if l.dropped > 0 || l.failed > 0 || l.written != per {
            return Err(format!("lost records: {} dropped, {} failed", l.dropped, l.failed).into());
        }
        written += l.written;
    }
    let total = started.elapsed();
    println!(
        "all recorders: {written} records in {:.1} s = {:.0} records/s",
        total.as_secs_f64(),
        written as f64 / total.as_secs_f64()
    );
    Ok(latencies)
}

struct Loaded {
    written: u64,
    dropped: u64,
    failed: u64,
    batches: u64,
    max_batch_ms: f64,
    full: u64,
    waited: Duration,
    took: Duration,
    /// `(created_at_us, handler_done_us)` of each record, when asked to keep them.
    latencies: Vec<(i64, i64)>,
}

/// One recorder (one gateway's) pushing `count` records, the `first`-th and every `every`-th
/// of those spread from `start` by `step`; or, with a `rate`, that many a second, each created
/// when it is sent.
#[expect(clippy::too_many_arguments, reason = "a load tool's knobs")]
async fn load_one(
    store: &Store,
    queue: usize,
    seed: usize,
    first: u64,
    count: u64,
    every: u64,
    (ws, key_id): (&str, &str),
    (start, step, rate): (i64, f64, Option<f64>),
    keep: bool,
) -> Result<Loaded, Box<dyn Error>> {
    let mut synth = Synth {
        rng: StdRng::seed_from_u64(7 + seed as u64),
        thresholds: Thresholds::default(),
        key_id: key_id.to_string(),
    };
    let (recorder, task) = Recorder::start(store, queue)?;
    let mut full = 0_u64;
    let mut waited = Duration::ZERO;
    let started = Instant::now();
    let mut latencies = Vec::new();
    for i in 0..count {
        let created = match rate {
            Some(rate) => {
                tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / rate)).await;
                wall_now_us()
            }
            None => start + ((first + i * every) as f64 * step) as i64,
        };
        let mut pending = Box::new(synth.record(ws, created));
        if let Some(done) = pending.marks.handler_done.filter(|_| keep) {
            latencies.push((created, done.as_micros() as i64));
        }
        loop {
            match recorder.try_record(pending) {
                Ok(()) => break,
                Err(back) => {
                    pending = back;
                    full += 1;
                    let w = Instant::now();
                    tokio::time::sleep(Duration::from_micros(500)).await;
                    waited += w.elapsed();
                }
            }
        }
    }
    if !recorder.shutdown(task, Duration::from_secs(600)).await {
        return Err("the recorder did not flush within 10 minutes".into());
    }
    let stats = recorder.stats();
    Ok(Loaded {
        written: stats.written.load(Ordering::Relaxed),
        dropped: stats.dropped.load(Ordering::Relaxed),
        failed: stats.failed.load(Ordering::Relaxed),
        batches: stats.batches.load(Ordering::Relaxed),
        max_batch_ms: stats.max_batch_us.load(Ordering::Relaxed) as f64 / 1000.0,
        full,
        waited,
        took: started.elapsed(),
        latencies,
    })
}

/// What the example reads beside the store's interface: sizes and the newest row.
enum Raw {
    Sqlite(Store),
    Postgres(tokio_postgres::Client),
}

impl Raw {
    /// PostgreSQL's current WAL position in bytes (`None` for SQLite, whose WAL is reused).
    async fn wal_position(&self) -> Result<Option<i64>, Box<dyn Error>> {
        Ok(match self {
            Raw::Sqlite(_) => None,
            Raw::Postgres(c) => Some(
                c.query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8", &[])
                    .await?
                    .get(0),
            ),
        })
    }

    /// (rows, rollup rows, rollup bytes, store bytes, request bytes with their indexes)
    async fn sizes(&self) -> Result<(i64, i64, i64, i64, i64), Box<dyn Error>> {
        match self {
            Raw::Sqlite(store) => {
                let (rows, rollups, rollup_bytes): (i64, i64, i64) = store.with_conn(|c| {
                    Ok(c.query_row(
                        "SELECT (SELECT count(*) FROM requests), count(*),
                            coalesce(sum(length(data)), 0) FROM rollups",
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )?)
                })?;
                // The pages in use as the connection sees them: the file alone leaves out what
                // is still in the WAL, and counts free pages.
                let db: i64 = store.with_conn(|c| {
                    Ok(c.query_row(
                        "SELECT (SELECT page_count FROM pragma_page_count())
                            - (SELECT freelist_count FROM pragma_freelist_count()),
                            (SELECT page_size FROM pragma_page_size())",
                        [],
                        |r| Ok(r.get::<_, i64>(0)? * r.get::<_, i64>(1)?),
                    )?)
                })?;
                Ok((rows, rollups, rollup_bytes, db, -1))
            }
            Raw::Postgres(c) => {
                let r = c
                    .query_one(
                        "SELECT (SELECT count(*) FROM requests)
                                + (SELECT coalesce(sum(n), 0) FROM request_blocks)::int8,
                            (SELECT count(*) FROM rollups),
                            (SELECT coalesce(sum(length(data)), 0)::int8 FROM rollups),
                            (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8
                               FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
                               AND c.relkind IN ('r', 'm')),
                            (SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::int8
                               FROM pg_inherits i WHERE i.inhparent = 'requests'::regclass)",
                        &[],
                    )
                    .await?;
                Ok((r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            }
        }
    }

    /// The rows of the hour tier, when the store has one (a store written by an older build
    /// has not).
    async fn hour_rollups(&self) -> Result<Option<i64>, Box<dyn Error>> {
        Ok(match self {
            Raw::Sqlite(store) => store.with_conn(|c| {
                let exists: bool = c.query_row(
                    "SELECT count(*) > 0 FROM sqlite_master WHERE name = 'rollups_hourly'",
                    [],
                    |r| r.get(0),
                )?;
                Ok(match exists {
                    true => {
                        Some(c.query_row("SELECT count(*) FROM rollups_hourly", [], |r| r.get(0))?)
                    }
                    false => None,
                })
            })?,
            Raw::Postgres(c) => {
                let exists: bool = c
                    .query_one("SELECT to_regclass('rollups_hourly') IS NOT NULL", &[])
                    .await?
                    .get(0);
                match exists {
                    true => Some(
                        c.query_one("SELECT count(*) FROM rollups_hourly", &[])
                            .await?
                            .get(0),
                    ),
                    false => None,
                }
            }
        })
    }

    /// Bytes per table and per index, largest first: SQLite's pages by b-tree (`dbstat`),
    /// PostgreSQL's relations with the daily partitions (and their indexes) summed under the
    /// partitioned table (and index) they belong to.
    async fn parts(&self) -> Result<Vec<(String, i64)>, Box<dyn Error>> {
        Ok(match self {
            Raw::Sqlite(store) => store.with_conn(|c| {
                let mut stmt = c.prepare(
                    "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC",
                )?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            })?,
            Raw::Postgres(c) => c
                .query(
                    "SELECT coalesce(p.relname, c.relname) AS part,
                        sum(CASE WHEN c.relkind = 'r' THEN pg_table_size(c.oid)
                            ELSE pg_relation_size(c.oid) END)::int8
                     FROM pg_class c
                     LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
                     LEFT JOIN pg_class p ON p.oid = i.inhparent
                     WHERE c.relnamespace = current_schema()::regnamespace
                       AND c.relkind IN ('r', 'i')
                     GROUP BY 1 ORDER BY 2 DESC",
                    &[],
                )
                .await?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect(),
        })
    }

    async fn newest(&self, ws: &str) -> Result<Option<i64>, Box<dyn Error>> {
        let sql = "SELECT max(created_at_us) FROM requests WHERE workspace_id = ";
        Ok(match self {
            // SQLite's rows hold the workspace's code from its names table.
            Raw::Sqlite(store) => store.with_conn(|c| {
                let stored = "COALESCE((SELECT code FROM names WHERE name = ?1), ?1)";
                Ok(c.query_row(&format!("{sql} {stored}"), [ws], |r| r.get(0))?)
            })?,
            // PostgreSQL's too, from its own names table; a packed day's are in blocks.
            Raw::Postgres(c) => {
                let stored = "(SELECT id FROM names WHERE value = $1)";
                let blocks = format!(
                    "SELECT max(last_us) FROM request_blocks WHERE workspace_id = {stored}"
                );
                c.query_one(
                    &format!("SELECT GREATEST(({sql} {stored}), ({blocks}))"),
                    &[&ws],
                )
                .await?
                .get(0)
            }
        })
    }
}

async fn query(
    a: &Args,
    store: &Store,
    raw: &Raw,
    ws: &str,
    mut latencies: Vec<(i64, i64)>,
) -> Result<(), Box<dyn Error>> {
    let (rows, rollups, rollup_bytes, db_bytes, request_bytes) = raw.sizes().await?;
    println!(
        "store: {rows} requests, {rollups} rollup rows ({:.1} MB of rollups, {:.0} B each), database {:.0} MB ({:.2} GB per million rows){}",
        rollup_bytes as f64 / 1e6,
        rollup_bytes as f64 / rollups.max(1) as f64,
        db_bytes as f64 / 1e6,
        db_bytes as f64 / 1e9 / (rows.max(1) as f64 / 1e6),
        if request_bytes >= 0 {
            format!(", request partitions with indexes {:.0} MB", request_bytes as f64 / 1e6)
        } else {
            String::new()
        }
    );

    match raw.hour_rollups().await? {
        Some(n) => println!("hour tier: {n} rollup rows"),
        None => println!("hour tier: none (a store without one)"),
    }
    for (name, bytes) in raw.parts().await? {
        if bytes >= 1_000_000 {
            println!(
                "  {name:<32} {:>8.1} MB {:>7.0} B per request",
                bytes as f64 / 1e6,
                bytes as f64 / rows.max(1) as f64
            );
        }
    }

    // "Now" for the queries: a second after the newest row, so that "the last 24 h" holds every
    // row however long the load took.
    let newest = raw.newest(ws).await?;
    let now = newest.ok_or("the store is empty")? + 1_000_000;
    let no = UsageFilter::default();
    let opus = UsageFilter {
        model: Some("claude-opus-4".into()),
        ..UsageFilter::default()
    };
    let timeouts = UsageFilter {
        outcome: Some("timeout".into()),
        ..UsageFilter::default()
    };
    // No request of the load names it: the filtered log read's worst case, every row of the
    // window looked at for none.
    let unused = UsageFilter {
        model: Some("model-not-used".into()),
        ..UsageFilter::default()
    };
    // Names every store holds, together on a few rows (one in 400,000) or on none: the walk
    // through the rollups of the whole window.
    let rare = UsageFilter {
        model: Some("claude-opus-4".into()),
        channel: Some("anthropic-backup".into()),
        outcome: Some("timeout".into()),
        ..UsageFilter::default()
    };
    let no_row = UsageFilter {
        model: Some("claude-opus-4".into()),
        provider: Some("openai".into()),
        ..UsageFilter::default()
    };
    println!();
    println!(
        "| query (median of {} runs)                 |  median ms |    min ms |    max ms | answer",
        a.runs
    );
    println!(
        "|-------------------------------------------|-----------:|----------:|----------:|-------"
    );
    let row = |name: &str, t: (Duration, Duration, Duration), answer: String| {
        println!(
            "| {name:<41} | {:>10.2} | {:>9.2} | {:>9.2} | {answer}",
            ms(t.0),
            ms(t.1),
            ms(t.2)
        );
    };
    let (m, lo, hi, u) = time(a.runs, || {
        store.usage(ws, (now - DAY_US, now), no.clone(), vec![])
    })
    .await?;
    let p = u.total.stats(laptime_core::rollup::Metric::LatencyMs);
    let u_window = (u.window.from_us, u.window.to_us);
    row(
        "usage, last 24 h, ungrouped",
        (m, lo, hi),
        format!(
            "{} requests, {} errors, latency p50 {:.0} p95 {:.0} p99 {:.0} ms",
            u.total.requests,
            u.total.errors,
            p.p50.unwrap_or(f64::NAN),
            p.p95.unwrap_or(f64::NAN),
            p.p99.unwrap_or(f64::NAN)
        ),
    );
    let (m, lo, hi, u) = time(a.runs, || {
        store.usage(ws, (now - DAY_US, now), no.clone(), vec![GroupDim::Model])
    })
    .await?;
    row(
        "usage, last 24 h, grouped by model",
        (m, lo, hi),
        format!("{} groups, {} requests", u.groups.len(), u.total.requests),
    );
    let (m, lo, hi, u) = time(a.runs, || {
        store.usage(ws, (now - DAY_US, now), opus.clone(), vec![])
    })
    .await?;
    row(
        "usage, last 24 h, model = claude-opus-4",
        (m, lo, hi),
        format!("{} requests", u.total.requests),
    );
    let (m, lo, hi, u) = time(a.runs, || {
        store.usage(ws, (now - HOUR_US, now), no.clone(), vec![])
    })
    .await?;
    row(
        "usage, last 1 h, ungrouped",
        (m, lo, hi),
        format!("{} requests", u.total.requests),
    );
    let (m, lo, hi, r) = time(a.runs, || store.recent(ws, no.clone(), None, 50)).await?;
    row(
        "recent_filtered, limit 50",
        (m, lo, hi),
        format!("{} rows", r.len()),
    );
    for (filter, what) in [
        (&timeouts, "recent_filtered, limit 50, outcome=timeout"),
        (&opus, "recent_filtered, limit 50, model=claude-opus-4"),
        (&unused, "recent_filtered, limit 50, a model not used"),
        (
            &rare,
            "recent_filtered, limit 50, rare (model, channel, timeout)",
        ),
        (
            &no_row,
            "recent_filtered, limit 50, no row (model, provider)",
        ),
    ] {
        let (m, lo, hi, r) = time(a.runs, || {
            store.recent(ws, filter.clone(), Some((now - DAY_US, now)), 50)
        })
        .await?;
        row(what, (m, lo, hi), format!("{} rows", r.len()));
    }

    if !a.exact {
        return Ok(());
    }
    // The sketch against the rows: exact nearest-rank latency percentiles by sorting every
    // record's. Rows keep `handler_done` packed, where SQL cannot sort on it, so the values
    // come from this run's load.
    if latencies.is_empty() {
        println!("\nexact check skipped: it needs this run's load");
        return Ok(());
    }
    latencies.retain(|(created, _)| (u_window.0..u_window.1).contains(created));
    latencies.sort_unstable_by_key(|(_, done)| *done);
    let mut exact = Vec::new();
    for q in [0.5, 0.95, 0.99] {
        let rank = laptime_core::rollup::nearest_rank(q, p.count) as i64 - 1;
        let done = usize::try_from(rank)
            .ok()
            .and_then(|r| latencies.get(r))
            .map(|(_, done)| *done)
            .ok_or("fewer loaded records than the sketch counts")?;
        exact.push(done as f64 / 1000.0);
    }
    println!();
    for ((name, got), want) in [("p50", p.p50), ("p95", p.p95), ("p99", p.p99)]
        .into_iter()
        .zip(exact)
    {
        let got = got.unwrap_or(f64::NAN);
        println!(
            "latency {name}, last 24 h: sketch {got:.3} ms, exact {want:.3} ms, error {:+.3} % (bound ±{} %)",
            (got - want) / want * 100.0,
            laptime_core::rollup::RELATIVE_ERROR * 100.0
        );
    }
    Ok(())
}
