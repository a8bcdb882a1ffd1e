//! The stored rate limits of workspaces and tokens on PostgreSQL, as [`crate::limits`] keeps
//! them in SQLite.

use deadpool_postgres::GenericClient;
use laptime_core::limit::Limits;

use crate::limits::{limits_of, stored, LimitRow};
use crate::{Result, StoreError};

/// Checks that a token named for a limit or budget is one of the workspace's.
pub(crate) async fn check_token(
    c: &impl GenericClient,
    workspace_id: &str,
    key_id: &str,
) -> Result<()> {
    let found = c
        .query_opt(
            "SELECT id FROM tokens WHERE id = $1 AND workspace_id = $2",
            &[&key_id, &workspace_id],
        )
        .await?;
    if found.is_none() {
        return Err(StoreError::NotFound(format!(
            "token {key_id} in this workspace"
        )));
    }
    Ok(())
}

pub async fn set(
    c: &impl GenericClient,
    workspace_id: &str,
    key_id: Option<&str>,
    limits: Limits,
    now_us: i64,
) -> Result<()> {
    if let Some(k) = key_id {
        check_token(c, workspace_id, k).await?;
    }
    let key = key_id.unwrap_or("");
    if limits.is_empty() {
        c.execute(
            "DELETE FROM limits WHERE workspace_id = $1 AND key_id = $2",
            &[&workspace_id, &key],
        )
        .await?;
        return Ok(());
    }
    c.execute(
        "INSERT INTO limits (workspace_id, key_id, rpm, tpm, concurrent, updated_at_us)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (workspace_id, key_id) DO UPDATE SET rpm = excluded.rpm,
            tpm = excluded.tpm, concurrent = excluded.concurrent,
            updated_at_us = excluded.updated_at_us",
        &[
            &workspace_id,
            &key,
            &stored(limits.rpm),
            &stored(limits.tpm),
            &stored(limits.concurrent),
            &now_us,
        ],
    )
    .await?;
    Ok(())
}

pub async fn list(c: &impl GenericClient, workspace_id: Option<&str>) -> Result<Vec<LimitRow>> {
    let rows = c
        .query(
            "SELECT workspace_id, key_id, rpm, tpm, concurrent, updated_at_us FROM limits
             WHERE $1::TEXT IS NULL OR workspace_id = $1 ORDER BY workspace_id, key_id",
            &[&workspace_id],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let key: String = r.get(1);
            LimitRow {
                workspace_id: r.get(0),
                key_id: (!key.is_empty()).then_some(key),
                limits: limits_of(r.get(2), r.get(3), r.get(4)),
                updated_at_us: r.get(5),
            }
        })
        .collect())
}
