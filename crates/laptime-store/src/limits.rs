//! The stored rate limits of workspaces and tokens (SQLite; [`crate::pg::limits`] is the same
//! for PostgreSQL). A row with `key_id = ''` is the workspace's own; a row naming a token is
//! that token's. They reach the request path with the principal (see [`crate::auth`]), so a
//! change applies wherever the principal is next looked up.

use laptime_core::limit::Limits;
use rusqlite::{params, Connection, OptionalExtension};

use crate::{Result, StoreError};

/// The limits of one workspace or token, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRow {
    pub workspace_id: String,
    /// `None`: the workspace's own limits.
    pub key_id: Option<String>,
    pub limits: Limits,
    pub updated_at_us: i64,
}

/// A stored count (a limit below 1 is none).
pub(crate) fn stored(v: Option<u64>) -> Option<i64> {
    v.and_then(|n| i64::try_from(n).ok())
}

pub(crate) fn limits_of(rpm: Option<i64>, tpm: Option<i64>, concurrent: Option<i64>) -> Limits {
    let get = |v: Option<i64>| v.and_then(|n| u64::try_from(n).ok()).filter(|&n| n > 0);
    Limits {
        rpm: get(rpm),
        tpm: get(tpm),
        concurrent: get(concurrent),
    }
}

/// Checks that a token named for a limit or budget is one of the workspace's.
pub(crate) fn check_token(conn: &Connection, workspace_id: &str, key_id: &str) -> Result<()> {
    let found: Option<String> = conn
        .query_row(
            "SELECT id FROM tokens WHERE id = ?1 AND workspace_id = ?2",
            [key_id, workspace_id],
            |r| r.get(0),
        )
        .optional()?;
    found
        .map(|_| ())
        .ok_or_else(|| StoreError::NotFound(format!("token {key_id} in this workspace")))
}

/// Sets the limits of a workspace (`key_id` `None`) or of one of its tokens; no limit at all
/// removes the row.
pub fn set(
    conn: &Connection,
    workspace_id: &str,
    key_id: Option<&str>,
    limits: Limits,
    now_us: i64,
) -> Result<()> {
    if let Some(k) = key_id {
        check_token(conn, workspace_id, k)?;
    }
    let key = key_id.unwrap_or("");
    if limits.is_empty() {
        conn.execute(
            "DELETE FROM limits WHERE workspace_id = ?1 AND key_id = ?2",
            [workspace_id, key],
        )?;
        return Ok(());
    }
    conn.execute(
        "INSERT INTO limits (workspace_id, key_id, rpm, tpm, concurrent, updated_at_us)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (workspace_id, key_id) DO UPDATE SET rpm = excluded.rpm,
            tpm = excluded.tpm, concurrent = excluded.concurrent,
            updated_at_us = excluded.updated_at_us",
        params![
            workspace_id,
            key,
            stored(limits.rpm),
            stored(limits.tpm),
            stored(limits.concurrent),
            now_us
        ],
    )?;
    Ok(())
}

/// Every limit row, of one workspace or of all, the workspace's own first.
pub fn list(conn: &Connection, workspace_id: Option<&str>) -> Result<Vec<LimitRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT workspace_id, key_id, rpm, tpm, concurrent, updated_at_us FROM limits
         WHERE ?1 IS NULL OR workspace_id = ?1 ORDER BY workspace_id, key_id",
    )?;
    let rows = stmt.query_map([workspace_id], |r| {
        let key: String = r.get(1)?;
        Ok(LimitRow {
            workspace_id: r.get(0)?,
            key_id: (!key.is_empty()).then_some(key),
            limits: limits_of(r.get(2)?, r.get(3)?, r.get(4)?),
            updated_at_us: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
