//! Admission against the rate limits of a request's token and its workspace: requests per
//! minute, tokens per minute and requests in flight, counted by this instance (a fleet without
//! a shared counter admits up to the limit on each instance). The windows are core's GCRA
//! ([`laptime_core::limit::Window`]); this module keeps them per workspace and token, checks a
//! request against every limit that applies at once (so a refusal by one takes nothing from the
//! others), and settles the token estimate charged at admission with what the request used.
//!
//! State is bounded by the workspaces and tokens that have limits: an entry per limited id
//! (kept while the instance runs, as its windows are).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use laptime_core::limit::{Applicable, Limit, LimitKind, LimitScope, Limits, Window, MINUTE_US};
use tokio::time::Instant;

/// One request's ask: who it is and how many tokens it is expected to use.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub workspace_id: &'a str,
    pub key_id: &'a str,
    pub limits: &'a Applicable,
    /// The estimate charged to the tokens-per-minute windows now, settled at the end.
    pub tokens: u64,
}

/// What a window says about one kind of limit, for the client's rate-limit headers: the limit
/// that binds (the one with the least left), what is left and when it is whole again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub limit: u64,
    pub remaining: u64,
    pub reset: Duration,
}

/// The binding requests- and tokens-per-minute quotas of an admitted request, right after it
/// was charged: what its answer's rate-limit headers say (`None` where no such limit applies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quotas {
    pub requests: Option<Quota>,
    pub tokens: Option<Quota>,
}

impl Quotas {
    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub limit: Limit,
    /// The limit's value (requests or tokens per minute, or requests in flight).
    pub value: u64,
    /// When to try again; `None` when this request never fits (more tokens than a minute's).
    pub retry_after: Option<Duration>,
    pub requests: Option<Quota>,
    pub tokens: Option<Quota>,
    /// The message, when its refuser wrote one (a budget says what was spent).
    pub message: Option<String>,
}

impl Refused {
    /// The message the client reads, in every dialect.
    pub fn message(&self) -> String {
        if let Some(m) = &self.message {
            return m.clone();
        }
        let whose = match self.limit.scope {
            LimitScope::Token => "this token's",
            LimitScope::Workspace => "this workspace's",
        };
        let what = match self.limit.kind {
            LimitKind::Rpm => format!("{} requests per minute", self.value),
            LimitKind::Tpm => format!("{} tokens per minute", self.value),
            LimitKind::Concurrent => format!("{} requests in flight", self.value),
            LimitKind::DailyBudget | LimitKind::MonthlyBudget => {
                format!("budget of ${}", laptime_core::cost::nano_to_usd(self.value))
            }
        };
        match self.retry_after {
            Some(d) => format!(
                "rate limit reached: {whose} limit of {what} ({}); retry in {} s",
                self.limit.as_str(),
                retry_after_secs(d)
            ),
            None => format!(
                "rate limit: this request's estimated tokens exceed {whose} limit of {what} \
                 ({}) on their own; lower max_tokens or the input",
                self.limit.as_str()
            ),
        }
    }
}

/// Whole seconds for `Retry-After`, rounded up and at least 1.
pub fn retry_after_secs(d: Duration) -> u64 {
    d.as_micros().div_ceil(1_000_000).max(1) as u64
}

/// One limited workspace's or token's windows and requests in flight.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    rpm: Window,
    tpm: Window,
    inflight: u64,
}

impl Counters {
    fn window(&self, kind: LimitKind) -> Window {
        match kind {
            LimitKind::Tpm => self.tpm,
            _ => self.rpm,
        }
    }

    fn window_mut(&mut self, kind: LimitKind) -> &mut Window {
        match kind {
            LimitKind::Tpm => &mut self.tpm,
            _ => &mut self.rpm,
        }
    }
}

/// Every limited id's counters, per scope; looked up by `&str`, so a request allocates nothing
/// here once its ids are known.
#[derive(Debug, Default)]
struct State {
    tokens: HashMap<String, Counters>,
    workspaces: HashMap<String, Counters>,
}

impl State {
    fn of(&self, scope: LimitScope) -> &HashMap<String, Counters> {
        match scope {
            LimitScope::Token => &self.tokens,
            LimitScope::Workspace => &self.workspaces,
        }
    }

    fn of_mut(&mut self, scope: LimitScope) -> &mut HashMap<String, Counters> {
        match scope {
            LimitScope::Token => &mut self.tokens,
            LimitScope::Workspace => &mut self.workspaces,
        }
    }

    /// The id's counters (empty ones when it has none yet).
    fn get(&self, scope: LimitScope, id: &str) -> Counters {
        self.of(scope).get(id).copied().unwrap_or_default()
    }

    /// Writes the id's counters back (its entry made on first use).
    fn put(&mut self, scope: LimitScope, id: &str, counters: Counters) {
        let map = self.of_mut(scope);
        match map.get_mut(id) {
            Some(held) => *held = counters,
            None => {
                map.insert(id.to_owned(), counters);
            }
        }
    }
}

/// Every limited workspace's and token's windows and in-flight counts on this instance.
#[derive(Debug)]
pub struct Limiter {
    origin: Instant,
    state: Mutex<State>,
    /// The fleet's windows, with `[shared] redis_url`, and the count of admissions decided by
    /// this instance's own windows because Redis did not answer in time
    /// (`laptime_limits_shared_fallback_total`).
    shared: Option<(
        Arc<crate::shared_limits::SharedWindows>,
        prometheus::IntCounter,
    )>,
}

/// An admitted request's hold on its limits: its place in the in-flight counts until dropped,
/// and the token estimate to settle.
#[derive(Debug)]
pub struct Ticket {
    limiter: Arc<Limiter>,
    workspace_id: String,
    key_id: String,
    limits: Applicable,
    charged: u64,
    /// Charged to the fleet's windows (settled there).
    shared: bool,
    quotas: Quotas,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new()
    }
}

/// The id each scope's state is kept under.
fn id_of<'a>(ask: &Ask<'a>, scope: LimitScope) -> &'a str {
    match scope {
        LimitScope::Workspace => ask.workspace_id,
        LimitScope::Token => ask.key_id,
    }
}

/// The scopes with their limits, the token's first (a token's refusal is named before its
/// workspace's).
fn scoped(limits: &Applicable) -> [(LimitScope, Limits); 2] {
    [
        (LimitScope::Token, limits.token),
        (LimitScope::Workspace, limits.workspace),
    ]
}

impl Limiter {
    pub fn new() -> Self {
        Limiter {
            origin: Instant::now(),
            state: Mutex::new(State::default()),
            shared: None,
        }
    }

    fn now_us(&self, at: Instant) -> i64 {
        i64::try_from(at.saturating_duration_since(self.origin).as_micros()).unwrap_or(i64::MAX)
    }

    /// Shares the requests- and tokens-per-minute windows with the fleet through Redis;
    /// `fallbacks` counts the admissions Redis did not answer in time.
    pub fn with_shared(
        mut self,
        shared: Arc<crate::shared_limits::SharedWindows>,
        fallbacks: prometheus::IntCounter,
    ) -> Self {
        self.shared = Some((shared, fallbacks));
        self
    }

    /// Admits the request at `at` if every limit that applies has room, taking a place in
    /// flight, one request and the token estimate from each window; `Ok(None)` when no limit
    /// applies. With shared windows this waits for Redis (at most
    /// [`crate::shared_limits::WAIT`], then this instance's own windows decide).
    pub async fn admit(
        self: &Arc<Self>,
        ask: Ask<'_>,
        at: Instant,
    ) -> Result<Option<Ticket>, Refused> {
        if ask.limits.is_empty() {
            return Ok(None);
        }
        self.reserve(&ask)?;
        // From here the ticket holds the places: dropped on a refusal below, it frees them.
        let mut ticket = Ticket {
            limiter: self.clone(),
            workspace_id: ask.workspace_id.to_string(),
            key_id: ask.key_id.to_string(),
            limits: *ask.limits,
            charged: ask.tokens,
            shared: false,
            quotas: Quotas::default(),
        };
        let shared = match &self.shared {
            Some((windows, _)) => take_shared(windows, &ask).await,
            None => None,
        };
        ticket.quotas = match shared {
            Some(taken) => {
                ticket.shared = true;
                taken?
            }
            None => {
                if let Some((_, fallbacks)) = &self.shared {
                    fallbacks.inc();
                }
                self.take_local(&ask, at)?
            }
        };
        Ok(Some(ticket))
    }

    /// Takes a place in flight in every scope that limits them, or refuses.
    fn reserve(&self, ask: &Ask<'_>) -> Result<(), Refused> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for (scope, limits) in scoped(ask.limits) {
            let Some(max) = limits.concurrent else {
                continue;
            };
            if state.get(scope, id_of(ask, scope)).inflight >= max {
                return Err(Refused {
                    limit: Limit::new(scope, LimitKind::Concurrent),
                    value: max,
                    // A place frees when a request in flight ends: a second is a fair wait.
                    retry_after: Some(Duration::from_secs(1)),
                    requests: None,
                    tokens: None,
                    message: None,
                });
            }
        }
        for (scope, limits) in scoped(ask.limits) {
            if limits.concurrent.is_some() {
                let id = id_of(ask, scope);
                let mut counters = state.get(scope, id);
                counters.inflight += 1;
                state.put(scope, id, counters);
            }
        }
        Ok(())
    }

    /// Takes from this instance's windows: every window on a copy first, written back only if
    /// all admit.
    fn take_local(&self, ask: &Ask<'_>, at: Instant) -> Result<Quotas, Refused> {
        let now = self.now_us(at);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Every scope's counters, taken from on a copy.
        let mut taken = scoped(ask.limits).map(|(scope, _)| state.get(scope, id_of(ask, scope)));
        for (kind, units) in [(LimitKind::Rpm, 1), (LimitKind::Tpm, ask.tokens)] {
            for ((scope, limits), counters) in scoped(ask.limits).into_iter().zip(&mut taken) {
                let Some(per_minute) = per_minute(&limits, kind) else {
                    continue;
                };
                let limit = Limit::new(scope, kind);
                if let Err(denied) = counters.window_mut(kind).take(now, units, per_minute) {
                    return Err(Refused {
                        limit,
                        value: per_minute,
                        retry_after: denied.retry_after_us.map(micros),
                        requests: quota(&state, ask, LimitKind::Rpm, now),
                        tokens: quota(&state, ask, LimitKind::Tpm, now),
                        message: None,
                    });
                }
            }
        }
        for ((scope, limits), counters) in scoped(ask.limits).into_iter().zip(taken) {
            if limits.rpm.is_some() || limits.tpm.is_some() {
                state.put(scope, id_of(ask, scope), counters);
            }
        }
        Ok(Quotas {
            requests: quota(&state, ask, LimitKind::Rpm, now),
            tokens: quota(&state, ask, LimitKind::Tpm, now),
        })
    }
}

/// The windows a request is charged to, in the order a refusal is named.
fn charges(ask: &Ask<'_>) -> Vec<crate::shared_limits::Charge> {
    let mut out = Vec::with_capacity(4);
    for (kind, units) in [(LimitKind::Rpm, 1), (LimitKind::Tpm, ask.tokens)] {
        for (scope, limits) in scoped(ask.limits) {
            if let Some(per_minute) = per_minute(&limits, kind) {
                out.push(crate::shared_limits::Charge {
                    limit: Limit::new(scope, kind),
                    id: id_of(ask, scope).to_string(),
                    units,
                    per_minute,
                });
            }
        }
    }
    out
}

/// Takes from the fleet's windows; `None` when Redis did not answer (the caller uses its own).
async fn take_shared(
    windows: &crate::shared_limits::SharedWindows,
    ask: &Ask<'_>,
) -> Option<Result<Quotas, Refused>> {
    use crate::shared_limits::Taken;
    let charges = charges(ask);
    match windows.take(&charges).await? {
        Taken::All { owed_us } => {
            let mut quotas = Quotas::default();
            for (c, owed) in charges.iter().zip(owed_us) {
                let q = shared_quota(c.per_minute, owed);
                let slot = match c.limit.kind {
                    LimitKind::Rpm => &mut quotas.requests,
                    _ => &mut quotas.tokens,
                };
                if slot.is_none_or(|held| q.remaining < held.remaining) {
                    *slot = Some(q);
                }
            }
            Some(Ok(quotas))
        }
        Taken::Refused {
            index,
            retry_after_us,
            owed_us,
        } => {
            let c = charges.get(index)?;
            let quota = shared_quota(c.per_minute, owed_us);
            let is_rpm = c.limit.kind == LimitKind::Rpm;
            Some(Err(Refused {
                limit: c.limit,
                value: c.per_minute,
                retry_after: retry_after_us.map(micros),
                requests: is_rpm.then_some(quota),
                tokens: (!is_rpm).then_some(quota),
                message: None,
            }))
        }
    }
}

/// A shared window's quota from what it owes.
fn shared_quota(per_minute: u64, owed_us: i64) -> Quota {
    let interval = crate::shared_limits::interval_us(per_minute);
    Quota {
        limit: per_minute,
        remaining: u64::try_from((MINUTE_US - owed_us).max(0) / interval).unwrap_or(0),
        reset: micros(owed_us.max(0)),
    }
}

fn per_minute(limits: &Limits, kind: LimitKind) -> Option<u64> {
    match kind {
        LimitKind::Rpm => limits.rpm,
        LimitKind::Tpm => limits.tpm,
        _ => None,
    }
}

fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// The binding limit of `kind` for `ask`: of the scopes that have one, the one with the least
/// left now.
fn quota(state: &State, ask: &Ask<'_>, kind: LimitKind, now: i64) -> Option<Quota> {
    scoped(ask.limits)
        .into_iter()
        .filter_map(|(scope, limits)| {
            let per_minute = per_minute(&limits, kind)?;
            let w = state.get(scope, id_of(ask, scope)).window(kind);
            Some(Quota {
                limit: per_minute,
                remaining: w.remaining(now, per_minute),
                reset: micros((w.tat_us - now).max(0)),
            })
        })
        .min_by_key(|q| q.remaining)
}

impl Ticket {
    /// The binding quotas right after this request was charged.
    pub fn quotas(&self) -> Quotas {
        self.quotas
    }

    /// The id the scope's state is kept under.
    fn id(&self, scope: LimitScope) -> &str {
        match scope {
            LimitScope::Workspace => &self.workspace_id,
            LimitScope::Token => &self.key_id,
        }
    }

    /// Settles the tokens-per-minute windows with what the request used: the estimate charged
    /// at admission is corrected by the difference, so a request that used less gives back.
    pub fn settle(&self, used: u64, at: Instant) {
        let delta = i64::try_from(used).unwrap_or(i64::MAX)
            - i64::try_from(self.charged).unwrap_or(i64::MAX);
        if delta == 0 {
            return;
        }
        if let (true, Some((windows, _))) = (self.shared, &self.limiter.shared) {
            let moves: Vec<_> = scoped(&self.limits)
                .into_iter()
                .filter_map(|(scope, limits)| {
                    let tpm = limits.tpm?;
                    Some((
                        Limit::new(scope, LimitKind::Tpm),
                        self.id(scope),
                        delta,
                        tpm,
                    ))
                })
                .collect();
            // Sent with the next admission's script call (or soon after on its own).
            windows.settle(&moves);
            return;
        }
        let now = self.limiter.now_us(at);
        let mut state = self
            .limiter
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (scope, limits) in scoped(&self.limits) {
            let Some(per_minute) = limits.tpm else {
                continue;
            };
            if let Some(counters) = state.of_mut(scope).get_mut(self.id(scope)) {
                counters.tpm.adjust(now, delta, per_minute);
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self
            .limiter
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (scope, limits) in scoped(&self.limits) {
            if limits.concurrent.is_none() {
                continue;
            }
            if let Some(counters) = state.of_mut(scope).get_mut(self.id(scope)) {
                counters.inflight = counters.inflight.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(workspace: Limits, token: Limits) -> Applicable {
        Applicable { workspace, token }
    }

    fn ask(l: &Applicable, tokens: u64) -> Ask<'_> {
        Ask {
            workspace_id: "ws",
            key_id: "key",
            limits: l,
            tokens,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn no_limit_is_no_ticket_and_no_state() {
        let limiter = Arc::new(Limiter::new());
        let none = Applicable::default();
        assert!(limiter
            .admit(ask(&none, 10), Instant::now())
            .await
            .unwrap()
            .is_none());
        let state = limiter.state.lock().unwrap();
        assert!(state.tokens.is_empty() && state.workspaces.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_tighter_token_limit_refuses_first_and_takes_nothing_from_the_workspace() {
        let limiter = Arc::new(Limiter::new());
        let l = limits(
            Limits {
                rpm: Some(10),
                ..Limits::default()
            },
            Limits {
                rpm: Some(2),
                ..Limits::default()
            },
        );
        let now = Instant::now();
        for _ in 0..2 {
            limiter.admit(ask(&l, 0), now).await.unwrap();
        }
        let refused = limiter.admit(ask(&l, 0), now).await.unwrap_err();
        assert_eq!(refused.limit, Limit::new(LimitScope::Token, LimitKind::Rpm));
        assert_eq!(refused.retry_after, Some(Duration::from_secs(30)));
        let requests = refused.requests.unwrap();
        assert_eq!((requests.limit, requests.remaining), (2, 0));
        // The workspace's window counted the two admitted requests only.
        let state = limiter.state.lock().unwrap();
        let ws = state.workspaces["ws"].rpm;
        assert_eq!(ws.remaining(limiter.now_us(now), 10), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_in_flight_are_held_until_the_ticket_is_dropped() {
        let limiter = Arc::new(Limiter::new());
        let l = limits(
            Limits {
                concurrent: Some(1),
                ..Limits::default()
            },
            Limits::default(),
        );
        let now = Instant::now();
        let first = limiter.admit(ask(&l, 0), now).await.unwrap();
        let refused = limiter.admit(ask(&l, 0), now).await.unwrap_err();
        assert_eq!(
            refused.limit,
            Limit::new(LimitScope::Workspace, LimitKind::Concurrent)
        );
        assert!(refused.message().contains("1 requests in flight"));
        drop(first);
        assert!(limiter.admit(ask(&l, 0), now).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn an_estimate_is_settled_with_what_the_request_used() {
        let limiter = Arc::new(Limiter::new());
        let l = limits(
            Limits::default(),
            Limits {
                tpm: Some(1_000),
                ..Limits::default()
            },
        );
        let now = Instant::now();
        let t = limiter.admit(ask(&l, 900), now).await.unwrap().unwrap();
        let refused = limiter.admit(ask(&l, 200), now).await.unwrap_err();
        assert_eq!(refused.limit, Limit::new(LimitScope::Token, LimitKind::Tpm));
        assert_eq!(refused.tokens.unwrap().remaining, 100);
        // It used 150 tokens, not 900: the 750 come back at once.
        t.settle(150, now);
        assert!(limiter.admit(ask(&l, 800), now).await.is_ok());
        // More than a minute's worth never fits: no retry time is promised.
        let never = limiter.admit(ask(&l, 1_001), now).await.unwrap_err();
        assert_eq!(never.retry_after, None);
        assert!(
            never.message().contains("on their own"),
            "{}",
            never.message()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_admission_says_the_binding_quota_of_each_kind() {
        let limiter = Arc::new(Limiter::new());
        // The token's 5 requests bind before the workspace's 100; only the workspace limits
        // tokens.
        let l = limits(
            Limits {
                rpm: Some(100),
                tpm: Some(6_000),
                ..Limits::default()
            },
            Limits {
                rpm: Some(5),
                ..Limits::default()
            },
        );
        let now = Instant::now();
        let t = limiter.admit(ask(&l, 600), now).await.unwrap().unwrap();
        let q = t.quotas();
        let requests = q.requests.unwrap();
        assert_eq!((requests.limit, requests.remaining), (5, 4));
        assert_eq!(requests.reset, Duration::from_secs(12));
        let tokens = q.tokens.unwrap();
        assert_eq!((tokens.limit, tokens.remaining), (6_000, 5_400));
        assert_eq!(tokens.reset, Duration::from_secs(6));
        // Requests in flight alone have no header of their own.
        let only_inflight = limits(
            Limits {
                concurrent: Some(2),
                ..Limits::default()
            },
            Limits::default(),
        );
        let t = limiter
            .admit(ask(&only_inflight, 1), now)
            .await
            .unwrap()
            .unwrap();
        assert!(t.quotas().is_empty());
    }
}
