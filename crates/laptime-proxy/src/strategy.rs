//! Strategy: which attempts one request makes, all through [`attempt::dispatch`]. Hedging races
//! the first two candidates to their first event; failover moves down the candidates while
//! nothing has reached the client. Before the last candidate a streamed answer is read ahead to
//! its first effective output (held, nothing released), so a stall before the first event or
//! output, an early error event or an early close can still fail over; the last candidate is
//! relayed at once, as there is nothing left to fail over to. Every attempt's marks live in the
//! pending record from its dispatch on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::Duration;

use laptime_core::timeline::{Attempt, AttemptRole, ErrorClass, Hedge};
use tokio::time::Instant;

use crate::attempt::{self, Answer, AttemptCtx, AttemptError, ErrorStatus};
use crate::config::{HedgeConfig, HedgeDelay, RouteConfig};
use crate::observe::Until;
use crate::outbody::OutBody;
use crate::record::Pending;
use crate::routing::Route;

/// Everything the strategy needs besides the request's shared context.
pub struct Plan<'a> {
    pub candidates: Vec<Route>,
    pub policy: &'a RouteConfig,
    /// The upstream body for a route (the model name may be mapped per channel).
    pub body_for: &'a (dyn Fn(&Route) -> OutBody + Sync),
}

/// The answer the client is to be committed to, and the candidates no attempt went to (one of
/// them may continue the answer if it is cut).
pub struct Won {
    pub answer: Answer,
    pub untried: Vec<Route>,
}

/// Runs the request's attempts; the answer the client is to be committed to, or the failure
/// that ended them.
pub async fn run(
    ctx: &AttemptCtx<'_>,
    pending: &mut Pending,
    plan: Plan<'_>,
) -> Result<Won, AttemptError> {
    let Plan {
        candidates,
        policy,
        body_for,
    } = plan;
    let max_attempts = policy.failover.max_attempts.max(1) as usize;
    let (mut larger_context, candidates): (Vec<Route>, Vec<Route>) =
        candidates.into_iter().partition(|r| r.context_fallback);
    let mut candidates = candidates.into_iter().peekable();
    let mut made = 0;
    let mut failure = None;
    if let Some(h) = &policy.hedge {
        let hedgeable = max_attempts >= 2
            && candidates.len() >= 2
            && candidates
                .clone()
                .take(2)
                .all(|r| r.health.circuit_available());
        let pair = if hedgeable {
            candidates.next().zip(candidates.next())
        } else {
            None
        };
        if let Some((primary, second)) = pair {
            let raced = race(ctx, pending, body_for, h, primary, &second).await;
            made += raced.made;
            let mut rest: Vec<Route> = candidates.collect();
            if raced.made == 1 {
                // No hedge went out: the second candidate is still a failover candidate.
                rest.insert(0, second);
            }
            candidates = rest.into_iter().peekable();
            match raced.result {
                Ok(mut answer) => {
                    // The winner has its first event; while another candidate could take over,
                    // hold the client until its first output too.
                    if made >= max_attempts || candidates.peek().is_none() {
                        return Ok(Won {
                            answer,
                            untried: candidates.collect(),
                        });
                    }
                    match answer.read_ahead(Until::FirstOutput).await {
                        Ok(()) => {
                            return Ok(Won {
                                answer,
                                untried: candidates.collect(),
                            })
                        }
                        Err(e) => {
                            let i = raced.winner_index;
                            failed(pending, i, &e, answer.first_byte());
                            pending.attempts[i].won = false;
                            // The answer will come from a failover: no racer won.
                            pending.hedge = Hedge::None;
                            failure = Some(e);
                        }
                    }
                }
                Err(e) => failure = Some(e),
            }
        }
    }
    // The same channel again, when it is the only one left and attempts remain.
    let mut again: Option<Route> = None;
    let mut same_channel_retries = 0;
    while let Some(route) = again.take().or_else(|| candidates.next()) {
        if made == max_attempts {
            break;
        }
        // An ejected channel is passed over without an attempt.
        if !route.health.circuit_acquire() {
            failure.get_or_insert(AttemptError {
                class: ErrorClass::CircuitOpen,
                ..internal(pending.offset(Instant::now()))
            });
            continue;
        }
        let role = if made == 0 {
            AttemptRole::Primary
        } else {
            AttemptRole::Failover
        };
        made += 1;
        let others_left = candidates.peek().is_some();
        let last = made == max_attempts || (!others_left && !policy.failover.retries_same());
        let (i, start, span_id) = begin(pending, &route, role);
        pending.marks.upstream_start = Some(start);
        pending.publish();
        let on = &policy.failover.on_status;
        let errors = if last {
            ErrorStatus::Answers
        } else if others_left {
            ErrorStatus::FailsOn(on)
        } else {
            ErrorStatus::RetriesOn {
                on,
                max_wait: Duration::from_millis(policy.failover.retry_wait_max_ms),
            }
        };
        let body = body_for(&route);
        let sent = attempt::dispatch(ctx, &route, body, (start, start), span_id, errors);
        let mut answer = match sent.await {
            Ok(a) => a,
            Err(e) => {
                failed(pending, i, &e, None);
                let retry = e.class.retryable() || e.status.is_some();
                if made < max_attempts && another_key(&route, &e) {
                    // The key was refused or rate limited, not the channel: its next key now.
                    failure = Some(e);
                    again = Some(Route {
                        key_index: None,
                        ..route
                    });
                    continue;
                }
                let may_ask_again = made < max_attempts && policy.failover.retries_same();
                if !others_left && may_ask_again && worth_the_same_channel(&e) {
                    // Only one channel is left: ask it again after its Retry-After (bounded
                    // above) or a jittered backoff, never at once.
                    let wait = e.retry_after.unwrap_or_else(|| {
                        backoff(policy.failover.backoff_ms, same_channel_retries)
                    });
                    same_channel_retries += 1;
                    tokio::time::sleep(wait).await;
                    again = Some(route);
                }
                failure = Some(e);
                if retry {
                    continue;
                }
                break;
            }
        };
        headed(pending, i, &answer);
        if !larger_context.is_empty()
            && made < max_attempts
            && answer.refusal(ctx).await == Some(ErrorClass::ContextLengthExceeded)
        {
            // The same model can never take this input: the larger one's channels, and only
            // them, get the request.
            let e = AttemptError {
                class: ErrorClass::ContextLengthExceeded,
                status: Some(answer.parts.status.as_u16()),
                headers_at: Some(answer.headers_at),
                ..internal(pending.offset(Instant::now()))
            };
            failed(pending, i, &e, answer.first_byte());
            failure = Some(e);
            candidates = std::mem::take(&mut larger_context).into_iter().peekable();
            continue;
        }
        // Only another channel could take over a stream that fails before its first output
        // (the same one is asked again only for its head), so only then is it held.
        if !last && others_left {
            if let Err(e) = answer.read_ahead(Until::FirstOutput).await {
                // Nothing reached the client: the answer is dropped (its connection closed)
                // and the next candidate gets the request.
                failed(pending, i, &e, answer.first_byte());
                failure = Some(e);
                continue;
            }
        }
        won(pending, i, &answer);
        return Ok(Won {
            answer,
            untried: candidates.collect(),
        });
    }
    Err(failure.unwrap_or_else(|| internal(pending.offset(Instant::now()))))
}

/// Records a new attempt's dispatch; returns its index in the record, its start and the span id
/// drawn for it (sent upstream in its `traceparent`, kept with its marks, exported as its span).
/// A failover says in the log which channel failed and how (its error class and status: never
/// a key, a prompt or an answer).
fn begin(pending: &mut Pending, route: &Route, role: AttemptRole) -> (usize, Duration, [u8; 8]) {
    if let (AttemptRole::Failover, Some(failed)) = (role, pending.attempts.last()) {
        tracing::warn!(
            request_id = %pending.request_id,
            failed_channel = %failed.channel,
            error_class = failed.error_class.map_or("none", ErrorClass::as_str),
            status = failed.status,
            next_channel = %route.channel.name,
            "attempt failed; failing over"
        );
    }
    let start = pending.offset(Instant::now());
    pending.channel = Some(route.channel.name.clone());
    pending.provider = Some(route.channel.provider.as_str().to_string());
    pending.upstream_dialect = Some(route.upstream);
    let span_id = crate::ingress::new_span_id();
    pending.attempts.push(Attempt {
        span_id: Some(span_id),
        ..Attempt::dispatched(&route.channel.name, role, start)
    });
    (pending.attempts.len() - 1, start, span_id)
}

fn headed(pending: &mut Pending, i: usize, answer: &Answer) {
    let a = &mut pending.attempts[i];
    a.status = Some(answer.parts.status.as_u16());
    a.headers = Some(answer.headers_at);
    a.connection = answer.connection;
    pending.publish();
}

fn failed(pending: &mut Pending, i: usize, e: &AttemptError, first_byte: Option<Duration>) {
    let a = &mut pending.attempts[i];
    a.status = e.status.or(a.status);
    a.headers = e.headers_at.or(a.headers);
    a.first_byte = e.first_byte.or(first_byte);
    a.error_class = Some(e.class);
    a.end = Some(e.at);
    // A failure after the head (read ahead) keeps the connection's marks the head brought.
    if !e.connection.is_empty() {
        a.connection = e.connection;
    }
}

/// The answering attempt: its channel and head become the request's.
fn won(pending: &mut Pending, i: usize, answer: &Answer) {
    let a = &mut pending.attempts[i];
    a.won = true;
    a.end = None;
    pending.marks.upstream_headers = Some(answer.headers_at);
    pending.channel = Some(answer.channel.name.clone());
    pending.provider = Some(answer.channel.provider.as_str().to_string());
    pending.upstream_dialect = Some(answer.upstream);
    pending.channel_inflight = Some(answer.inflight);
    // Named only where there is a choice: a channel of several keys.
    pending.exchange.key_index = answer
        .key_index
        .filter(|_| answer.channel.keys.len() > 1)
        .and_then(|k| u32::try_from(k).ok());
    pending.publish();
}

type Sending<'f> = Pin<Box<dyn Future<Output = Result<Answer, AttemptError>> + Send + 'f>>;

/// One racer: waiting for its head, then reading to its first event.
enum Racer<'f> {
    Sending(Sending<'f>),
    /// Boxed: an answer is much larger than a pending future.
    Reading(Box<Answer>),
    Out,
}

impl Racer<'_> {
    fn live(&self) -> bool {
        !matches!(self, Racer::Out)
    }

    /// Drives the racer to its first event (or a non-streamed head). Cancel-safe: its progress
    /// is kept in `self`, so the race may drop this future and call it again.
    async fn reach_first_event(&mut self) -> Result<(), AttemptError> {
        if let Racer::Sending(f) = self {
            match f.as_mut().await {
                Ok(answer) => *self = Racer::Reading(Box::new(answer)),
                Err(e) => {
                    *self = Racer::Out;
                    return Err(e);
                }
            }
        }
        match self {
            Racer::Reading(answer) => answer.read_ahead(Until::FirstEvent).await,
            Racer::Sending(_) | Racer::Out => std::future::pending().await,
        }
    }

    /// Takes the racer out of the race; its answer, if it had a head.
    fn take(&mut self) -> Option<Answer> {
        match std::mem::replace(self, Racer::Out) {
            Racer::Reading(a) => Some(*a),
            Racer::Sending(_) | Racer::Out => None,
        }
    }
}

/// The hedge's next step, when one went out.
async fn hedge_step(
    hedge: &mut Option<(usize, Racer<'_>)>,
) -> Result<usize, (usize, AttemptError, Option<Duration>)> {
    let Some((i, racer)) = hedge.as_mut() else {
        return std::future::pending().await;
    };
    match racer.reach_first_event().await {
        Ok(()) => Ok(*i),
        Err(e) => Err((*i, e, racer.take().and_then(|a| a.first_byte()))),
    }
}

struct Raced {
    result: Result<Answer, AttemptError>,
    /// Attempts made: 1 when no hedge went out.
    made: usize,
    winner_index: usize,
}

/// The primary, and after the hedge delay (within the budget) the second candidate, race to
/// their first event; the first wins and the other is closed at once and recorded with the marks
/// it reached. A primary that fails before the hedge goes out ends the race (the second
/// candidate stays a failover candidate).
async fn race(
    ctx: &AttemptCtx<'_>,
    pending: &mut Pending,
    body_for: &(dyn Fn(&Route) -> OutBody + Sync),
    h: &HedgeConfig,
    primary: Route,
    second: &Route,
) -> Raced {
    let app = ctx.app;
    let total = app.hedge_requests.fetch_add(1, Ordering::Relaxed) + 1;
    let delay = match h.delay() {
        HedgeDelay::After(d) => Some(d),
        HedgeDelay::RecentP95 => primary.channel.first_event_p95(),
    };
    let within_budget = (app.hedges_sent.load(Ordering::Relaxed) as f64) < h.budget * total as f64;
    let hedge_at = delay.filter(|_| within_budget).map(|d| Instant::now() + d);
    primary.health.circuit_acquire();
    let (pi, p_start, p_span) = begin(pending, &primary, AttemptRole::Primary);
    pending.marks.upstream_start = Some(p_start);
    pending.publish();
    let p_body = body_for(&primary);
    let sending = attempt::dispatch(
        ctx,
        &primary,
        p_body,
        (p_start, p_start),
        p_span,
        ErrorStatus::Fails,
    );
    let mut p = Racer::Sending(Box::pin(sending));
    let mut hedge: Option<(usize, Racer<'_>)> = None;
    let mut last_err = None;
    let winner = loop {
        let hedge_live = hedge.as_ref().is_some_and(|(_, r)| r.live());
        if !p.live() && !hedge_live {
            break None;
        }
        tokio::select! {
            r = p.reach_first_event(), if p.live() => match r {
                Ok(()) => break Some(pi),
                Err(e) => {
                    failed(pending, pi, &e, p.take().and_then(|a| a.first_byte()));
                    last_err = Some(e);
                }
            },
            r = hedge_step(&mut hedge), if hedge_live => match r {
                Ok(i) => break Some(i),
                Err((i, e, first_byte)) => {
                    failed(pending, i, &e, first_byte);
                    last_err = Some(e);
                }
            },
            () = sleep_until_opt(hedge_at), if hedge.is_none() && p.live() => {
                app.hedges_sent.fetch_add(1, Ordering::Relaxed);
                second.health.circuit_acquire();
                let (hi, h_start, h_span) = begin(pending, second, AttemptRole::Hedge);
                pending.publish();
                let body = body_for(second);
                // A hedge's figures count from the primary's dispatch, like the primary's.
                let sending = attempt::dispatch(
                    ctx,
                    second,
                    body,
                    (h_start, p_start),
                    h_span,
                    ErrorStatus::Fails,
                );
                hedge = Some((hi, Racer::Sending(Box::pin(sending))));
            }
        }
    };
    let made = 1 + usize::from(hedge.is_some());
    if hedge.is_some() {
        pending.hedge = if winner == Some(pi) {
            Hedge::Primary
        } else {
            Hedge::Hedge
        };
    }
    // The loser is closed now (dropping it closes its connection) with the marks it reached.
    let now = pending.offset(Instant::now());
    let mut answer = None;
    let racers = [Some((pi, &mut p)), hedge.as_mut().map(|(i, r)| (*i, r))];
    for (i, racer) in racers.into_iter().flatten() {
        let got = racer.take();
        if Some(i) == winner {
            answer = got;
            continue;
        }
        let a = &mut pending.attempts[i];
        if a.error_class.is_some() {
            // Recorded when it failed.
            continue;
        }
        if let Some(g) = &got {
            a.status = Some(g.parts.status.as_u16());
            a.headers = Some(g.headers_at);
            a.first_byte = g.first_byte();
            a.connection = g.connection;
        }
        a.end = Some(now);
    }
    let result = match (winner, answer) {
        (Some(i), Some(answer)) => {
            headed(pending, i, &answer);
            won(pending, i, &answer);
            pending.marks.upstream_start = Some(p_start);
            Ok(answer)
        }
        _ => Err(last_err.unwrap_or_else(|| internal(now))),
    };
    Raced {
        result,
        made,
        winner_index: winner.unwrap_or(pi),
    }
}

/// Failures the same channel may well not repeat: an error status, a refused or reset
/// connection. A missed deadline is not asked again of the same channel (it would double the
/// wait), nor are refused credentials or a redirect.
fn worth_the_same_channel(e: &AttemptError) -> bool {
    matches!(
        e.class,
        ErrorClass::RateLimited
            | ErrorClass::UpstreamStatus5xx
            | ErrorClass::ConnectFailed
            | ErrorClass::BodyError
    )
}

/// The wait before the `n`-th same-channel retry (from 0): `base` doubled each time, the upper
/// half of it random (so clients that failed together do not come back together).
fn backoff(base_ms: u64, n: u32) -> Duration {
    let full = base_ms.saturating_mul(1 << n.min(6));
    let half = full / 2;
    let jitter = if half == 0 {
        0
    } else {
        rand::Rng::gen_range(&mut rand::thread_rng(), 0..=half)
    };
    Duration::from_millis(half + jitter)
}

/// Whether the attempt's failure was its key's (refused, or rate limited) and another key of
/// the channel can serve now. A route pinned to its key (an object lives under it) has none.
fn another_key(route: &Route, e: &AttemptError) -> bool {
    let key_failed = matches!(e.status, Some(401 | 403 | 429));
    let Some(k) = e
        .key_index
        .filter(|_| key_failed && route.key_index.is_none())
    else {
        return false;
    };
    route
        .channel
        .keys
        .another_ready(k, crate::clock::now_unix_us())
}

fn internal(at: Duration) -> AttemptError {
    AttemptError::before_head(ErrorClass::Internal, None, at)
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
