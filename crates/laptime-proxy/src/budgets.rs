//! Budgets at admission: every instance keeps the stored budgets with what their workspace or
//! token spent in the current period (the store's `spend` sums, written with the rows, so the
//! same on every instance of a fleet), re-read every second off the request path. A hard budget
//! reached refuses new requests until its period ends (requests in flight finish); a soft one
//! flags them. Crossing 80 % and 100 % is logged once and counted in the metrics.
//!
//! What a request costs is known only once it is recorded, so spend reaches a budget up to a
//! second (the refresh) after the rows are written: a burst may overshoot a hard budget by what
//! it spends in that time.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Duration;

use laptime_core::cost::nano_to_usd;
use laptime_core::limit::{Budget, BudgetMode, LimitScope, Period};
use laptime_store::Store;

use crate::limits::Refused;
use crate::metrics::Metrics;

/// How often the budgets and their spend are re-read.
pub const REFRESH: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    budget: Budget,
    spent_nano: u64,
    resets_at_us: i64,
}

/// What the budgets say of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No budget of the token or its workspace applies.
    None,
    /// Admitted; `over_soft` when a soft budget is spent (the record is flagged).
    Admit {
        over_soft: bool,
    },
    Refuse(Refused),
}

/// The budgets of every workspace and token, with their spend, as last read.
#[derive(Debug, Default)]
pub struct BudgetBook {
    /// (workspace id, key id or `""`) → its budgets.
    entries: RwLock<HashMap<(String, String), Vec<Entry>>>,
    /// The level (0, 80, 100) each budget's period last reached, to log a crossing once.
    levels: Mutex<HashMap<(String, String, Period, i64), u8>>,
}

fn level(e: &Entry) -> u8 {
    let (spent, limit) = (u128::from(e.spent_nano), u128::from(e.budget.nano_usd));
    if spent >= limit {
        100
    } else if spent * 5 >= limit * 4 {
        80
    } else {
        0
    }
}

fn scope_of(key: &str) -> LimitScope {
    if key.is_empty() {
        LimitScope::Workspace
    } else {
        LimitScope::Token
    }
}

impl BudgetBook {
    pub fn new() -> Self {
        BudgetBook::default()
    }

    /// Re-reads every budget and its spend at `now_us`; logs and counts each budget that
    /// crossed 80 % or 100 % of itself since the last read.
    pub async fn refresh(
        &self,
        store: &Store,
        now_us: i64,
        metrics: &Metrics,
    ) -> laptime_store::Result<()> {
        let rows = store.list_budgets(None, now_us).await?;
        let mut entries: HashMap<(String, String), Vec<Entry>> = HashMap::new();
        let mut levels = self.levels.lock().unwrap_or_else(PoisonError::into_inner);
        let mut seen = HashMap::with_capacity(rows.len());
        for r in rows {
            let key = r.key_id.clone().unwrap_or_default();
            let e = Entry {
                budget: r.budget,
                spent_nano: r.spent_nano_usd,
                resets_at_us: r.resets_at_us,
            };
            let period_start = r.budget.period.start_us(now_us, store.budget_zone());
            let id = (
                r.workspace_id.clone(),
                key.clone(),
                r.budget.period,
                period_start,
            );
            let now_level = level(&e);
            let before = levels.get(&id).copied().unwrap_or(0);
            for threshold in [80u8, 100] {
                if before < threshold && now_level >= threshold {
                    crossed(&r.workspace_id, &key, &e, threshold, metrics);
                }
            }
            seen.insert(id, now_level);
            entries.entry((r.workspace_id, key)).or_default().push(e);
        }
        // Periods that ended and budgets removed are forgotten.
        *levels = seen;
        drop(levels);
        *self.entries.write().unwrap_or_else(PoisonError::into_inner) = entries;
        Ok(())
    }

    /// The verdict of the budgets of a token and its workspace at `now_us`: a hard one spent
    /// refuses (the token's named first), a soft one spent flags.
    pub fn check(&self, workspace_id: &str, key_id: &str, now_us: i64) -> Verdict {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        // Most gateways set no budget: answer without building the lookup keys.
        if entries.is_empty() {
            return Verdict::None;
        }
        let mut any = false;
        let mut over_soft = false;
        for key in [key_id, ""] {
            let Some(list) = entries.get(&(workspace_id.to_string(), key.to_string())) else {
                continue;
            };
            any = true;
            for e in list {
                if e.spent_nano < e.budget.nano_usd {
                    continue;
                }
                match e.budget.mode {
                    BudgetMode::Soft => over_soft = true,
                    BudgetMode::Hard => return Verdict::Refuse(refusal(key, e, now_us)),
                }
            }
        }
        if any {
            Verdict::Admit { over_soft }
        } else {
            Verdict::None
        }
    }
}

fn refusal(key: &str, e: &Entry, now_us: i64) -> Refused {
    let scope = scope_of(key);
    let whose = match scope {
        LimitScope::Token => "this token's",
        LimitScope::Workspace => "this workspace's",
    };
    let limit = e.budget.period.limit(scope);
    let message = format!(
        "budget reached: {whose} {} budget of ${:.6} is spent (${:.6} this {}) ({}); it \
         resets at {}",
        match e.budget.period {
            Period::Day => "daily",
            Period::Month => "monthly",
        },
        nano_to_usd(e.budget.nano_usd),
        nano_to_usd(e.spent_nano),
        e.budget.period.as_str(),
        limit.as_str(),
        laptime_core::views::rfc3339(e.resets_at_us),
    );
    Refused {
        limit,
        value: e.budget.nano_usd,
        retry_after: Some(Duration::from_micros(
            u64::try_from(e.resets_at_us - now_us).unwrap_or(0),
        )),
        requests: None,
        tokens: None,
        message: Some(message),
    }
}

fn crossed(workspace_id: &str, key: &str, e: &Entry, threshold: u8, metrics: &Metrics) {
    let scope = scope_of(key);
    metrics.count_budget_crossing(scope, e.budget.period, e.budget.mode, threshold);
    let (limit, spent) = (nano_to_usd(e.budget.nano_usd), nano_to_usd(e.spent_nano));
    let what = e.budget.period.limit(scope).as_str();
    if threshold >= 100 {
        tracing::warn!(
            workspace_id,
            key_id = key,
            budget = what,
            mode = e.budget.mode.as_str(),
            limit_usd = limit,
            spent_usd = spent,
            "budget spent"
        );
    } else {
        tracing::info!(
            workspace_id,
            key_id = key,
            budget = what,
            mode = e.budget.mode.as_str(),
            limit_usd = limit,
            spent_usd = spent,
            "budget 80% spent"
        );
    }
}
