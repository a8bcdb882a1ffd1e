//! The load: a warm-up phase, then the measured phase, closed loop (C clients) or open loop
//! (arrivals at a constant rate or a Poisson process). Requests go to the targets in turn
//! (A B A B …) so that drift of the machine hits both. Every loop is bounded in count and time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::client::{measure, Endpoint, HttpClient};
use super::contract::{Arrivals, Contract, Load, Stop};
use super::prompt::{body, draw_length, mix, words_rng, Tokenizer};
use super::record::RequestRecord;
use laptime_core::views::ms;

/// No run sends more requests than this, whatever the duration and rate.
pub(crate) const MAX_REQUESTS: u64 = 1_000_000;

/// Salts that keep the warm-up's prompts and the arrival gaps apart from the measured prompts.
const WARMUP_SALT: u64 = 0x5741_524D;
const GAPS_SALT: u64 = 0x4741_5053;

pub(crate) struct Engine {
    pub http: HttpClient,
    pub endpoints: Vec<Endpoint>,
    pub contract: Contract,
    pub tokenizer: Tokenizer,
}

/// What one phase sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Phase {
    pub warmup: bool,
    /// Stop after this many requests (all targets together).
    pub requests: Option<u64>,
    /// Stop issuing after this long.
    pub duration: Option<Duration>,
}

impl Engine {
    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.contract.timeouts.request_s)
    }

    /// The body of request `index` of a phase and its prompt's token count.
    fn request_body(&self, warmup: bool, index: u64) -> (Bytes, u32) {
        let c = &self.contract;
        let seed = if warmup {
            mix(c.seed, WARMUP_SALT)
        } else {
            c.seed
        };
        let pair = index / self.endpoints.len().max(1) as u64;
        let n = draw_length(c.input_tokens.mean, c.input_tokens.sd, seed, pair);
        let prompt = self.tokenizer.prompt(n, &mut words_rng(seed, index));
        let counted = u32::try_from(self.tokenizer.count(&prompt)).unwrap_or(u32::MAX);
        (body(c, &prompt), counted)
    }

    async fn send(
        &self,
        origin: Instant,
        warmup: bool,
        index: u64,
        body: Bytes,
        prompt_tokens: u32,
    ) -> RequestRecord {
        let ep = &self.endpoints[(index % self.endpoints.len().max(1) as u64) as usize];
        let mut rec = measure(
            origin,
            &self.http,
            ep,
            self.contract.dialect,
            body,
            self.timeout(),
            &self.tokenizer,
        )
        .await;
        rec.index = index;
        rec.warmup = warmup;
        rec.prompt_tokens = prompt_tokens;
        rec
    }
}

/// Runs one phase; every finished request is sent on `tx` as it ends.
pub(crate) async fn run_phase(
    engine: Arc<Engine>,
    phase: Phase,
    tx: mpsc::UnboundedSender<RequestRecord>,
) {
    let limit = phase.requests.unwrap_or(MAX_REQUESTS).min(MAX_REQUESTS);
    let origin = Instant::now();
    let stop_at = phase.duration.map(|d| origin + d);
    let load = if phase.warmup {
        // Warm-up opens the connections the measured phase will use: closed loop with the
        // run's concurrency (open loop: up to the in-flight limit at once).
        let c = match engine.contract.load {
            Load::ClosedLoop { concurrency } => concurrency,
            Load::OpenLoop { max_inflight, .. } => max_inflight,
        };
        Load::ClosedLoop {
            concurrency: u32::try_from(limit).unwrap_or(u32::MAX).min(c).max(1),
        }
    } else {
        engine.contract.load.clone()
    };
    match load {
        Load::ClosedLoop { concurrency } => {
            let next = Arc::new(AtomicU64::new(0));
            let mut workers = JoinSet::new();
            for _ in 0..concurrency.max(1) {
                let (engine, next, tx) = (engine.clone(), next.clone(), tx.clone());
                workers.spawn(async move {
                    loop {
                        if stop_at.is_some_and(|t| Instant::now() >= t) {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= limit {
                            break;
                        }
                        let (b, n) = engine.request_body(phase.warmup, i);
                        let rec = engine.send(origin, phase.warmup, i, b, n).await;
                        if tx.send(rec).is_err() {
                            break;
                        }
                    }
                });
            }
            while workers.join_next().await.is_some() {}
        }
        Load::OpenLoop {
            rate_per_s,
            arrivals,
            max_inflight,
        } => {
            let inflight = Arc::new(Semaphore::new(max_inflight.max(1) as usize));
            let mut gaps = StdRng::seed_from_u64(mix(engine.contract.seed, GAPS_SALT));
            let mut due = Duration::ZERO;
            let mut tasks = JoinSet::new();
            for i in 0..limit {
                if phase.duration.is_some_and(|d| due >= d) {
                    break;
                }
                // The body is built before waiting for the arrival, off the clock.
                let (b, n) = engine.request_body(phase.warmup, i);
                let Ok(permit) = inflight.clone().acquire_owned().await else {
                    break;
                };
                tokio::time::sleep_until(origin + due).await;
                let (engine, tx) = (engine.clone(), tx.clone());
                let scheduled = due;
                tasks.spawn(async move {
                    let mut rec = engine.send(origin, phase.warmup, i, b, n).await;
                    drop(permit);
                    rec.scheduled_ms = Some(ms(scheduled));
                    rec.schedule_lag_ms = Some(rec.start_ms - ms(scheduled));
                    let _ = tx.send(rec);
                });
                while tasks.try_join_next().is_some() {}
                let gap = match arrivals {
                    Arrivals::Constant => 1.0 / rate_per_s,
                    // Exponential gaps: 1 − U is in (0, 1], so the log is finite.
                    Arrivals::Poisson => -(1.0 - gaps.gen::<f64>()).ln() / rate_per_s,
                };
                due += Duration::from_secs_f64(gap.clamp(0.0, 86_400.0));
            }
            while tasks.join_next().await.is_some() {}
        }
    }
}

/// The measured phase's plan from the contract.
pub(crate) fn measured_phase(c: &Contract) -> Phase {
    match c.stop {
        Stop::Requests { requests } => Phase {
            warmup: false,
            requests: Some(requests),
            duration: None,
        },
        Stop::Duration { duration_s } => Phase {
            warmup: false,
            requests: None,
            duration: Some(Duration::from_secs_f64(duration_s)),
        },
    }
}
