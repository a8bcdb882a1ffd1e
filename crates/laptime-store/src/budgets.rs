//! Budgets of workspaces and tokens, and what each spent: `spend` sums the costs of the rows
//! written, per workspace and token, per calendar day and month of the budget zone (UTC unless
//! `[budgets] zone` names one), in the transaction that writes the rows (so the sums are exactly
//! what the rows say, on every instance of a fleet). SQLite here; [`crate::pg::budgets`] is the
//! same for PostgreSQL.
//!
//! Retention ([`prune`]): only the current and the previous period of each sum are kept. The
//! current one is what budgets are checked against; the previous one still changes after its
//! end (a request is charged to the period it started in, and a long stream, a record replayed
//! after a crash or a replaced row lands after midnight) and is what an operator compares the
//! current one with. Older sums are never read: the request rows keep the history.

use std::collections::BTreeMap;

use laptime_core::limit::{Budget, BudgetMode, Period, Zone};
use laptime_core::timeline::RequestRecord;
use rusqlite::{params, Connection};

use crate::{Result, StoreError};

/// One spend sum: workspace, token (`""`: the workspace's own), period and its start.
pub type SpendKey = (String, String, Period, i64);

/// A budget with what was spent in its current period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetRow {
    pub workspace_id: String,
    /// `None`: the workspace's own budget.
    pub key_id: Option<String>,
    pub budget: Budget,
    /// Spent in the period holding the instant asked about, nano-USD.
    pub spent_nano_usd: u64,
    /// When that period ends (unix microseconds).
    pub resets_at_us: i64,
    pub updated_at_us: i64,
}

/// What the records add to each spend sum (a replaced row's old cost taken back): only costs
/// that are known and above zero count.
pub fn delta(
    records: &[RequestRecord],
    replaced: &[RequestRecord],
    zone: &Zone,
) -> BTreeMap<SpendKey, i64> {
    let mut out: BTreeMap<SpendKey, i64> = BTreeMap::new();
    let signed = records
        .iter()
        .map(|r| (r, 1))
        .chain(replaced.iter().map(|r| (r, -1)));
    for (r, sign) in signed {
        let (Some(ws), Some(cost)) = (&r.workspace_id, r.cost) else {
            continue;
        };
        if cost.nano_usd == 0 {
            continue;
        }
        let nano = i64::try_from(cost.nano_usd).unwrap_or(i64::MAX) * sign;
        let keys = std::iter::once(String::new()).chain(r.key_id.clone());
        for key in keys {
            for period in Period::ALL {
                let k = (
                    ws.clone(),
                    key.clone(),
                    period,
                    period.start_us(r.created_at_us, zone),
                );
                *out.entry(k).or_default() += nano;
            }
        }
    }
    out.retain(|_, v| *v != 0);
    out
}

/// Adds `delta` to the spend sums, in key order (writers adding to one sum queue on it).
pub fn apply(tx: &Connection, delta: &BTreeMap<SpendKey, i64>) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO spend (workspace_id, key_id, period, period_start_us, nano_usd)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (workspace_id, key_id, period, period_start_us)
         DO UPDATE SET nano_usd = nano_usd + excluded.nano_usd",
    )?;
    for ((ws, key, period, start), nano) in delta {
        stmt.execute(params![ws, key, period.as_str(), start, nano])?;
    }
    Ok(())
}

pub(crate) fn budget_of(period: &str, nano: i64, mode: &str) -> Result<Budget> {
    Ok(Budget {
        period: Period::parse(period)
            .ok_or_else(|| StoreError::Corrupt(format!("budget period {period}")))?,
        nano_usd: u64::try_from(nano).unwrap_or(0),
        mode: BudgetMode::parse(mode)
            .ok_or_else(|| StoreError::Corrupt(format!("budget mode {mode}")))?,
    })
}

/// Sets (or with `None` removes) the budget of a period of a workspace or one of its tokens.
pub fn set(
    conn: &Connection,
    workspace_id: &str,
    key_id: Option<&str>,
    period: Period,
    budget: Option<(u64, BudgetMode)>,
    now_us: i64,
) -> Result<()> {
    if let Some(k) = key_id {
        crate::limits::check_token(conn, workspace_id, k)?;
    }
    let key = key_id.unwrap_or("");
    match budget {
        None => {
            conn.execute(
                "DELETE FROM budgets WHERE workspace_id = ?1 AND key_id = ?2 AND period = ?3",
                params![workspace_id, key, period.as_str()],
            )?;
        }
        Some((nano, mode)) => {
            conn.execute(
                "INSERT INTO budgets (workspace_id, key_id, period, nano_usd, mode, updated_at_us)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (workspace_id, key_id, period) DO UPDATE SET
                    nano_usd = excluded.nano_usd, mode = excluded.mode,
                    updated_at_us = excluded.updated_at_us",
                params![
                    workspace_id,
                    key,
                    period.as_str(),
                    crate::records::nano(nano),
                    mode.as_str(),
                    now_us
                ],
            )?;
        }
    }
    Ok(())
}

/// Every budget (of one workspace, or all) with what was spent in its period holding `now_us`.
pub fn list(
    conn: &Connection,
    workspace_id: Option<&str>,
    now_us: i64,
    zone: &Zone,
) -> Result<Vec<BudgetRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT b.workspace_id, b.key_id, b.period, b.nano_usd, b.mode, b.updated_at_us,
            COALESCE(s.nano_usd, 0)
         FROM budgets b LEFT JOIN spend s ON s.workspace_id = b.workspace_id
            AND s.key_id = b.key_id AND s.period = b.period
            AND s.period_start_us = CASE b.period WHEN 'day' THEN ?2 ELSE ?3 END
         WHERE ?1 IS NULL OR b.workspace_id = ?1
         ORDER BY b.workspace_id, b.key_id, b.period",
    )?;
    let rows = stmt.query_map(
        params![
            workspace_id,
            Period::Day.start_us(now_us, zone),
            Period::Month.start_us(now_us, zone)
        ],
        |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, i64>(6)?,
            ))
        },
    )?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row_of(row?, now_us, zone)?);
    }
    Ok(out)
}

/// A stored budget row with its spend: (workspace, key, period, nano, mode, updated, spent).
pub(crate) type StoredBudget = (String, String, String, i64, String, i64, i64);

pub(crate) fn row_of(row: StoredBudget, now_us: i64, zone: &Zone) -> Result<BudgetRow> {
    let (workspace_id, key, period, nano, mode, updated_at_us, spent) = row;
    let budget = budget_of(&period, nano, &mode)?;
    Ok(BudgetRow {
        workspace_id,
        key_id: (!key.is_empty()).then_some(key),
        resets_at_us: budget.period.next_start_us(now_us, zone),
        budget,
        spent_nano_usd: u64::try_from(spent).unwrap_or(0),
        updated_at_us,
    })
}

/// What one workspace or token spent in the current day and month (of the budget zone), with
/// or without a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendRow {
    pub workspace_id: String,
    /// `None`: the workspace as a whole (all its tokens).
    pub key_id: Option<String>,
    /// Spent today, nano-USD (`0` when nothing was; a row exists only for what spent).
    pub day_nano_usd: u64,
    /// Spent this month, nano-USD.
    pub month_nano_usd: u64,
}

/// Folds `(workspace, key, period, nano)` sums into one row per workspace and token, in order.
pub(crate) fn spend_rows(sums: Vec<(String, String, String, i64)>) -> Vec<SpendRow> {
    let mut by: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for (ws, key, period, nano) in sums {
        let e = by.entry((ws, key)).or_default();
        let nano = u64::try_from(nano).unwrap_or(0);
        match Period::parse(&period) {
            Some(Period::Day) => e.0 = nano,
            Some(Period::Month) => e.1 = nano,
            None => {}
        }
    }
    by.into_iter()
        .filter(|(_, (d, m))| *d > 0 || *m > 0)
        .map(|((workspace_id, key), (day, month))| SpendRow {
            workspace_id,
            key_id: (!key.is_empty()).then_some(key),
            day_nano_usd: day,
            month_nano_usd: month,
        })
        .collect()
}

/// The spend of every workspace and token (of one workspace, or all) in the day and month
/// holding `now_us`.
pub fn spend(
    conn: &Connection,
    workspace_id: Option<&str>,
    now_us: i64,
    zone: &Zone,
) -> Result<Vec<SpendRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT workspace_id, key_id, period, nano_usd FROM spend
         WHERE (?1 IS NULL OR workspace_id = ?1)
            AND ((period = 'day' AND period_start_us = ?2)
                OR (period = 'month' AND period_start_us = ?3))",
    )?;
    let sums = stmt
        .query_map(
            params![
                workspace_id,
                Period::Day.start_us(now_us, zone),
                Period::Month.start_us(now_us, zone)
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(spend_rows(sums))
}

/// Retention: deletes the sums of periods older than the previous one (see the module doc);
/// returns how many went.
pub fn prune(conn: &Connection, now_us: i64, zone: &Zone) -> Result<usize> {
    Ok(conn.execute(
        "DELETE FROM spend WHERE (period = 'day' AND period_start_us < ?1)
            OR (period = 'month' AND period_start_us < ?2)",
        params![
            Period::Day.previous_start_us(now_us, zone),
            Period::Month.previous_start_us(now_us, zone)
        ],
    )?)
}
