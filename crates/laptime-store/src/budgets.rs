//! Budgets of workspaces and tokens, and what each spent: `spend` sums the costs of the rows
//! written, per workspace and token, per UTC day and month, in the transaction that writes the
//! rows (so the sums are exactly what the rows say, on every instance of a fleet). SQLite here;
//! [`crate::pg::budgets`] is the same for PostgreSQL.

use std::collections::BTreeMap;

use laptime_core::limit::{Budget, BudgetMode, Period};
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
pub fn delta(records: &[RequestRecord], replaced: &[RequestRecord]) -> BTreeMap<SpendKey, i64> {
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
                    period.start_us(r.created_at_us),
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
pub fn list(conn: &Connection, workspace_id: Option<&str>, now_us: i64) -> Result<Vec<BudgetRow>> {
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
            Period::Day.start_us(now_us),
            Period::Month.start_us(now_us)
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
        out.push(row_of(row?, now_us)?);
    }
    Ok(out)
}

/// A stored budget row with its spend: (workspace, key, period, nano, mode, updated, spent).
pub(crate) type StoredBudget = (String, String, String, i64, String, i64, i64);

pub(crate) fn row_of(row: StoredBudget, now_us: i64) -> Result<BudgetRow> {
    let (workspace_id, key, period, nano, mode, updated_at_us, spent) = row;
    let budget = budget_of(&period, nano, &mode)?;
    Ok(BudgetRow {
        workspace_id,
        key_id: (!key.is_empty()).then_some(key),
        resets_at_us: budget.period.next_start_us(now_us),
        budget,
        spent_nano_usd: u64::try_from(spent).unwrap_or(0),
        updated_at_us,
    })
}
