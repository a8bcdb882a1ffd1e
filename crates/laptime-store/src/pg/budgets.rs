//! Budgets and spend on PostgreSQL, as [`crate::budgets`] keeps them in SQLite.

use std::collections::BTreeMap;

use deadpool_postgres::GenericClient;
use laptime_core::limit::{BudgetMode, Period, Zone};

use crate::budgets::{row_of, spend_rows, BudgetRow, SpendKey, SpendRow};
use crate::Result;

/// Adds `delta` to the spend sums, in key order: two instances adding to the same sums lock
/// them in the same order, so they queue instead of deadlocking.
pub async fn apply(c: &impl GenericClient, delta: &BTreeMap<SpendKey, i64>) -> Result<()> {
    if delta.is_empty() {
        return Ok(());
    }
    let stmt = c
        .prepare_cached(
            "INSERT INTO spend (workspace_id, key_id, period, period_start_us, nano_usd)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (workspace_id, key_id, period, period_start_us)
             DO UPDATE SET nano_usd = spend.nano_usd + excluded.nano_usd",
        )
        .await?;
    for ((ws, key, period, start), nano) in delta {
        c.execute(&stmt, &[ws, key, &period.as_str(), start, nano])
            .await?;
    }
    Ok(())
}

pub async fn set(
    c: &impl GenericClient,
    workspace_id: &str,
    key_id: Option<&str>,
    period: Period,
    budget: Option<(u64, BudgetMode)>,
    now_us: i64,
) -> Result<()> {
    if let Some(k) = key_id {
        super::limits::check_token(c, workspace_id, k).await?;
    }
    let key = key_id.unwrap_or("");
    match budget {
        None => {
            c.execute(
                "DELETE FROM budgets WHERE workspace_id = $1 AND key_id = $2 AND period = $3",
                &[&workspace_id, &key, &period.as_str()],
            )
            .await?;
        }
        Some((nano, mode)) => {
            c.execute(
                "INSERT INTO budgets (workspace_id, key_id, period, nano_usd, mode, updated_at_us)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (workspace_id, key_id, period) DO UPDATE SET
                    nano_usd = excluded.nano_usd, mode = excluded.mode,
                    updated_at_us = excluded.updated_at_us",
                &[
                    &workspace_id,
                    &key,
                    &period.as_str(),
                    &crate::records::nano(nano),
                    &mode.as_str(),
                    &now_us,
                ],
            )
            .await?;
        }
    }
    Ok(())
}

pub async fn list(
    c: &impl GenericClient,
    workspace_id: Option<&str>,
    now_us: i64,
    zone: &Zone,
) -> Result<Vec<BudgetRow>> {
    let rows = c
        .query(
            "SELECT b.workspace_id, b.key_id, b.period, b.nano_usd, b.mode, b.updated_at_us,
                COALESCE(s.nano_usd, 0)
             FROM budgets b LEFT JOIN spend s ON s.workspace_id = b.workspace_id
                AND s.key_id = b.key_id AND s.period = b.period
                AND s.period_start_us = CASE b.period WHEN 'day' THEN $2::BIGINT ELSE $3::BIGINT END
             WHERE $1::TEXT IS NULL OR b.workspace_id = $1
             ORDER BY b.workspace_id, b.key_id, b.period",
            &[
                &workspace_id,
                &Period::Day.start_us(now_us, zone),
                &Period::Month.start_us(now_us, zone),
            ],
        )
        .await?;
    rows.into_iter()
        .map(|r| {
            row_of(
                (
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                ),
                now_us,
                zone,
            )
        })
        .collect()
}

/// See [`crate::budgets::spend`].
pub async fn spend(
    c: &impl GenericClient,
    workspace_id: Option<&str>,
    now_us: i64,
    zone: &Zone,
) -> Result<Vec<SpendRow>> {
    let rows = c
        .query(
            "SELECT workspace_id, key_id, period, nano_usd FROM spend
             WHERE ($1::TEXT IS NULL OR workspace_id = $1)
                AND ((period = 'day' AND period_start_us = $2::BIGINT)
                    OR (period = 'month' AND period_start_us = $3::BIGINT))",
            &[
                &workspace_id,
                &Period::Day.start_us(now_us, zone),
                &Period::Month.start_us(now_us, zone),
            ],
        )
        .await?;
    Ok(spend_rows(
        rows.into_iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect(),
    ))
}

/// See [`crate::budgets::prune`].
pub async fn prune(c: &impl GenericClient, now_us: i64, zone: &Zone) -> Result<usize> {
    let n = c
        .execute(
            "DELETE FROM spend WHERE (period = 'day' AND period_start_us < $1)
                OR (period = 'month' AND period_start_us < $2)",
            &[
                &Period::Day.previous_start_us(now_us, zone),
                &Period::Month.previous_start_us(now_us, zone),
            ],
        )
        .await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
