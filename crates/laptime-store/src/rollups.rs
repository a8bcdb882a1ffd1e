//! Per-minute rollups in the store: one [`Rollup`] per workspace, minute and key (model,
//! provider, channel, group, dialect, stream, status, outcome, classification, endpoint, and the
//! comparison dimensions of [`laptime_core::compare`]: effort class, tools present, max-output and
//! input-token buckets, region), kept in the `rollups` table as an encoded BLOB.
//!
//! The comparison dimensions are in the key rather than answered from the rows, so that
//! "p95 first visible text of streamed, tool-free requests with 1k-4k input tokens" costs what
//! any usage answer costs (minutes × keys, never requests). Each is a closed set (the effort a
//! class, token counts buckets), so the keys a minute can have stay bounded whatever clients
//! send; a workload runs a handful of shapes, so a minute's keys grow by a small factor.
//! Rollups written before these dimensions existed hold `''` for them (absent).
//!
//! The recorder folds every batch into them in the batch's own transaction (aggregate in memory,
//! then read-merge-write one row per key), so rollups and rows never disagree: a reader sees both
//! or neither. A record that replaces an existing row (same request id) cannot be subtracted from
//! a sketch, so the rollups it touches are rebuilt from the rows instead. Records without a
//! workspace belong to no workspace's usage and are not rolled up.
//!
//! Absent text dimensions are stored as `''` so that the primary key works (SQLite treats NULLs
//! as distinct); they read back as `None`.

use std::collections::{HashMap, HashSet};

use laptime_core::compare::{Comparison, EffortClass, TokenBucket};
use laptime_core::rollup::Rollup;
use laptime_core::timeline::RequestRecord;
use rusqlite::{params, Connection, OptionalExtension, ToSql};

use crate::records::{self, SELECT};
use crate::{Result, StoreError};

/// One minute, in microseconds.
pub const MINUTE_US: i64 = 60_000_000;

/// The start of the minute holding `us`.
pub fn floor_minute(us: i64) -> i64 {
    us.div_euclid(MINUTE_US) * MINUTE_US
}

/// The smallest whole minute at or after `us`.
pub fn ceil_minute(us: i64) -> i64 {
    let f = floor_minute(us);
    if f == us {
        f
    } else {
        f.saturating_add(MINUTE_US)
    }
}

/// The key of one rollup row. Text dimensions use `""` for absent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RollupKey {
    pub workspace_id: String,
    pub minute_us: i64,
    pub model: String,
    pub provider: String,
    pub channel: String,
    pub grp: String,
    pub dialect: String,
    pub stream: bool,
    pub status: u16,
    pub outcome: String,
    pub classification: String,
    pub endpoint: String,
    /// The comparison dimensions ([`Comparison`]); `tools` is `"true"`/`"false"`.
    pub effort: String,
    pub tools: String,
    pub max_output_bucket: String,
    pub input_bucket: String,
    pub region: String,
}

impl RollupKey {
    /// The key a record rolls up under; `None` for a record without a workspace.
    pub(crate) fn of(r: &RequestRecord) -> Option<RollupKey> {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let c = Comparison::of(r);
        let name = |v: Option<&str>| v.unwrap_or_default().to_string();
        Some(RollupKey {
            workspace_id: r.workspace_id.clone()?,
            minute_us: floor_minute(r.created_at_us),
            model: text(&r.model),
            provider: text(&r.provider),
            channel: text(&r.channel),
            grp: text(&r.group),
            dialect: r.dialect.as_str().to_string(),
            stream: r.stream,
            status: r.status,
            outcome: r.outcome.as_str().to_string(),
            classification: r.classification.as_str().to_string(),
            endpoint: r.exchange.endpoint.as_str().to_string(),
            effort: name(c.effort.map(EffortClass::as_str)),
            tools: c.tools_present.to_string(),
            max_output_bucket: name(c.max_output.map(TokenBucket::as_str)),
            input_bucket: name(c.input.map(TokenBucket::as_str)),
            region: name(c.region),
        })
    }
}

/// Rollups of a set of records, by key.
pub(crate) fn aggregate<'a>(
    records: impl IntoIterator<Item = &'a RequestRecord>,
) -> HashMap<RollupKey, Rollup> {
    let mut out: HashMap<RollupKey, Rollup> = HashMap::new();
    for r in records {
        if let Some(key) = RollupKey::of(r) {
            out.entry(key).or_default().add(r);
        }
    }
    out
}

const KEY_WHERE: &str = "workspace_id = ?1 AND minute_us = ?2 AND model = ?3 AND provider = ?4
    AND channel = ?5 AND grp = ?6 AND dialect = ?7 AND stream = ?8 AND status = ?9
    AND outcome = ?10 AND classification = ?11 AND endpoint = ?12 AND effort = ?13
    AND tools = ?14 AND max_output_bucket = ?15 AND input_bucket = ?16 AND region = ?17";

impl RollupKey {
    /// The key as the `?1`…`?17` parameters of [`KEY_WHERE`] and of the upsert.
    fn params(&self) -> [&dyn ToSql; 17] {
        [
            &self.workspace_id,
            &self.minute_us,
            &self.model,
            &self.provider,
            &self.channel,
            &self.grp,
            &self.dialect,
            &self.stream,
            &self.status,
            &self.outcome,
            &self.classification,
            &self.endpoint,
            &self.effort,
            &self.tools,
            &self.max_output_bucket,
            &self.input_bucket,
            &self.region,
        ]
    }
}

/// The stored (encoded) rollup of one key, if any.
fn stored(conn: &Connection, k: &RollupKey) -> Result<Option<Vec<u8>>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT data FROM rollups WHERE {KEY_WHERE}"))?;
    Ok(stmt.query_row(k.params(), |row| row.get(0)).optional()?)
}

/// Writes (inserts or overwrites) the rollup of one key.
fn store(conn: &Connection, k: &RollupKey, r: &Rollup) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO rollups (workspace_id, minute_us, model, provider, channel, grp, dialect,
            stream, status, outcome, classification, endpoint, effort, tools, max_output_bucket,
            input_bucket, region, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
         ON CONFLICT (workspace_id, minute_us, model, provider, channel, grp, dialect, stream,
            status, outcome, classification, endpoint, effort, tools, max_output_bucket,
            input_bucket, region) DO UPDATE SET data = excluded.data",
    )?;
    let data = r.encode();
    let mut params = k.params().to_vec();
    params.push(&data);
    stmt.execute(&*params)?;
    Ok(())
}

fn remove(conn: &Connection, k: &RollupKey) -> Result<()> {
    let mut stmt = conn.prepare_cached(&format!("DELETE FROM rollups WHERE {KEY_WHERE}"))?;
    stmt.execute(k.params())?;
    Ok(())
}

/// Folds `delta` into the stored rollups: read, merge, write, one row per key. Call inside the
/// transaction that wrote the rows.
pub(crate) fn merge_into(conn: &Connection, delta: HashMap<RollupKey, Rollup>) -> Result<()> {
    for (k, mut rollup) in delta {
        if let Some(have) = stored(conn, &k)? {
            rollup
                .merge_encoded(&have)
                .map_err(|e| StoreError::Corrupt(format!("rollup: {e}")))?;
        }
        store(conn, &k, &rollup)?;
    }
    Ok(())
}

/// Recomputes the rollups of `keys` from the rows (used when a row was replaced).
pub(crate) fn rebuild(conn: &Connection, keys: &HashSet<RollupKey>) -> Result<()> {
    let minutes: HashSet<(&str, i64)> = keys
        .iter()
        .map(|k| (k.workspace_id.as_str(), k.minute_us))
        .collect();
    let mut stmt = conn.prepare_cached(&format!(
        "{SELECT} WHERE workspace_id = ?1 AND created_at_us >= ?2 AND created_at_us < ?3"
    ))?;
    for (ws, minute) in minutes {
        let rows = stmt
            .query_map(params![ws, minute, minute + MINUTE_US], records::from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut fresh = aggregate(
            rows.iter()
                .filter(|r| RollupKey::of(r).is_some_and(|k| keys.contains(&k))),
        );
        for k in keys
            .iter()
            .filter(|k| k.workspace_id == ws && k.minute_us == minute)
        {
            match fresh.remove(k) {
                Some(r) => store(conn, k, &r)?,
                None => remove(conn, k)?,
            }
        }
    }
    Ok(())
}

/// Builds the rollups of every existing row (the migration that adds the table). Streams the
/// rows one workspace-minute at a time, so memory stays bounded by one minute's keys. Rows that
/// cannot be read are skipped and counted in the log rather than failing the migration.
pub(crate) fn backfill(conn: &Connection) -> Result<()> {
    let mut stmt = conn.prepare(&format!(
        "{SELECT} WHERE workspace_id IS NOT NULL ORDER BY workspace_id, created_at_us DESC"
    ))?;
    let mut rows = stmt.query([])?;
    let mut current: Option<(String, i64)> = None;
    let mut pending: Vec<RequestRecord> = Vec::new();
    let mut skipped = 0_u64;
    while let Some(row) = rows.next()? {
        let r = match records::from_row(row) {
            Ok(r) => r,
            Err(_) => {
                skipped += 1;
                continue;
            }
        };
        let here = (
            r.workspace_id.clone().unwrap_or_default(),
            floor_minute(r.created_at_us),
        );
        if current.as_ref() != Some(&here) {
            merge_into(conn, aggregate(&pending))?;
            pending.clear();
            current = Some(here);
        }
        pending.push(r);
    }
    merge_into(conn, aggregate(&pending))?;
    if skipped > 0 {
        tracing::warn!(
            skipped,
            "rollup backfill skipped rows it could not read; they are not in usage figures"
        );
    }
    Ok(())
}
